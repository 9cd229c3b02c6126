"""`sleap-live export --format saved_model`: the inference model as a TensorFlow
SavedModel, its operations written by `sleap_live.engines.export.tf_graph`.

The model is exported by torch.export, specialised and branch-free as `--format tflite`
takes it: one frame size (`--frame-size`, default the verification frames' size),
one frame per call, the "tensorrt" profile for every model type (float32 inside;
centroid and top-down models give `max_instances` fixed slots per frame, read as
the host reads a TensorRT engine's, `sleap_live.engines.host.postprocess.instance_list`).
Each ATen operation of that program becomes plain TensorFlow operations, so the
SavedModel runs in TensorFlow (Python, C++, TF Serving) with no torch and no
sleap-live, and converts to TF.js (`--format tfjs`).

The export is a folder: the SavedModel (`saved_model.pb`, `variables/`) with one
signature, `serving_default`, taking `frames`, uint8 (1, H, W, C), and giving the
outputs by their sleap-live names; the metadata is `sleap_live.json` in the folder.

Host steps, besides those of every format (bottom-up grouping, multi-class identity
matching): none.

Refused in one line: a graph with an operation `tf_graph` has no TensorFlow form
for, the operations named. Every model type and every fixture network (UNet,
ConvNeXt, Swin) converts.

Verification: the model is exported to ONNX as for `--format onnx` (checked against
torch), then the saved folder, loaded back by TensorFlow, must give ONNX Runtime's
instances on that default graph within `TOLERANCE`, frame by frame, on the
verification frames; the checks are recorded in the metadata.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sleap_live.engines.errors import (
    ExportError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.export._quiet import (
    first_line,
    loading,
    native_stderr_silenced,
    tracer_notes,
)
from sleap_live.engines.export.driver import (
    Check,
    ExportFolder,
    ExportFormat,
    Job,
    tensorrt_profile,
)
from sleap_live.engines.export.verify import Outputs
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import TENSORRT_PROFILE, ExportMetadata

METADATA_FILE = "sleap_live.json"
SIGNATURE = "serving_default"
INPUT_NAME = "frames"
TENSORFLOW_INSTALL_HINT = 'pip install "sleap-live[saved-model]"'


def is_saved_model_export(folder: Path) -> bool:
    """Whether `folder` holds a SavedModel export of sleap-live's."""
    return (folder / METADATA_FILE).is_file() and (folder / "saved_model.pb").is_file()


def tf_versions(tf: Any) -> dict[str, str]:
    """The converters' versions, for the metadata."""
    return {"tensorflow": tf.__version__, "torch": torch.__version__}


def tensorflow_function(job: Job, *, int64_outputs: bool) -> Any:
    """The model's static "tensorrt"-profile program as a `tf.function` of uint8
    (1, H, W, C) frames giving the outputs by name (what `--format saved_model` and
    `tfjs` save); refuses a graph with operations TensorFlow cannot hold here.

    Raises:
        ModelConfigError: such operations, named.
        ExportError: the conversion failed.
    """
    from sleap_live.engines.export.tf_graph import (
        UnsupportedOperation,
        tf_function,
        unsupported_operations,
    )

    tf = import_tensorflow()
    model_type, format = job.model.info.model_type, job.metadata.format
    job.options.progress(f"exporting with torch.export for {job.size} frames")
    program = _program(job.model, job.frames[:1])
    missing = unsupported_operations(program)
    if missing:
        sources = ", ".join(str(path) for path in job.paths)
        raise ModelConfigError(
            f"{sources}: this {model_type} model cannot be exported to {format}: its graph has "
            f"operations with no TensorFlow form here ({', '.join(missing)}); use --format onnx"
        )
    names = job.metadata.output_names
    job.options.progress("converting to TensorFlow operations")
    try:
        outputs = tf_function(program, int64_outputs=int64_outputs)

        def by_name(frames: Any) -> dict[str, Any]:
            return dict(zip(names, outputs(frames), strict=True))

        function = tf.function(by_name, input_signature=outputs.input_signature, autograph=False)
        function.get_concrete_function()
    except UnsupportedOperation as error:
        raise ModelConfigError(
            f"this {model_type} model cannot be exported to {format}: {error}"
        ) from None
    except Exception as error:  # TensorFlow raises many kinds of errors
        raise ExportError(
            f"the {model_type} model could not be converted to TensorFlow: {first_line(error)}"
        ) from error
    return function


def _save(function: Any, path: Path, job: Job) -> None:
    save(job.extra, function, path)


def _load(path: Path, job: Job) -> Callable[[np.ndarray], Outputs]:
    return lambda frames: run_saved_model(path, frames, job.metadata.output_names)


# The ONNX export the SavedModel is checked against uses `--opset`; `--frame-size`
# (default: the verification frames', synthetic frames' without verification or
# frames) is the one frame size it runs.
SAVED_MODEL = ExportFormat(
    "saved_model",
    ExportFolder("a SavedModel export", is_saved_model_export),
    lambda job: tensorflow_function(job, int64_outputs=True),
    _save,
    profile=tensorrt_profile,
    needs=lambda options: import_tensorflow(),
    check=Check(_load, "the SavedModel", "TensorFlow", lambda tf: f"TensorFlow {tf.__version__}"),
    versions=tf_versions,
    metadata_file=lambda folder: folder / METADATA_FILE,
)


def save(tf: Any, function: Any, path: Path) -> None:
    """Writes `function` as a SavedModel with one signature (`SIGNATURE`) into `path`."""
    module = tf.Module()
    module.serve = function
    path.mkdir(parents=True, exist_ok=True)
    try:
        tf.saved_model.save(
            module, str(path), signatures={SIGNATURE: function.get_concrete_function()}
        )
    except Exception as error:  # TensorFlow raises many kinds of errors
        raise ExportError(
            f"TensorFlow could not save the SavedModel: {first_line(error)}"
        ) from error


def import_tensorflow() -> Any:
    """The `tensorflow` module, quiet, or a one-line error saying how to install it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with native_stderr_silenced():
            import tensorflow as tf

            tf.config.list_physical_devices()  # its device probing logs too
    except ImportError:
        raise RuntimeUnavailableError(
            f"TensorFlow is not installed; {TENSORFLOW_INSTALL_HINT}"
        ) from None
    return tf


def load_saved_model(path: str | Path) -> Any:
    """The `serving_default` signature of a SavedModel export, loaded by TensorFlow.

    Raises:
        ModelNotFoundError: the folder does not exist.
        ModelConfigError: the folder is not a SavedModel with that signature.
        RuntimeUnavailableError: TensorFlow is not installed.
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelNotFoundError(f"{path}: no such SavedModel folder")
    tf = import_tensorflow()
    with loading(path, f"a SavedModel with a {SIGNATURE} signature"):
        signature = tf.saved_model.load(str(path)).signatures[SIGNATURE]
    return signature


def read_saved_model_metadata(path: str | Path) -> ExportMetadata:
    """The sleap-live metadata of a SavedModel (or TF.js) export folder.

    Raises:
        ModelConfigError: the folder holds none.
    """
    file = Path(path) / METADATA_FILE
    if not file.is_file():
        raise ModelConfigError(f"{path}: no {METADATA_FILE}; not exported by sleap-live")
    return ExportMetadata.from_json(file.read_text(), str(path))


def run_saved_model(path: str | Path, frames: np.ndarray, names: Sequence[str]) -> Outputs:
    """The outputs of a SavedModel export on uint8 (B, H, W, C) frames, by name: TensorFlow
    runs them one frame at a time."""
    tf = import_tensorflow()
    signature = load_saved_model(path)
    per_frame = [
        signature(**{INPUT_NAME: tf.constant(frames[index : index + 1])})
        for index in range(len(frames))
    ]
    return {
        name: np.concatenate([outputs[name].numpy() for outputs in per_frame]) for name in names
    }


def _program(model: InferenceModel, example: np.ndarray) -> torch.export.ExportedProgram:
    """`model` in the "tensorrt" profile, specialised and branch-free, exported for frames of
    `example`'s shape in core ATen; the model is put back as it was afterwards."""
    from sleap_live.engines.export.tf_graph import core_program

    try:
        with model.whole_graph(TENSORRT_PROFILE), tracer_notes(), torch.no_grad():
            return core_program(model, torch.from_numpy(example))
    except Exception as error:  # torch.export raises many kinds of errors
        raise ExportError(
            f"torch.export of the {model.info.model_type} model failed: {first_line(error)}"
        ) from error
