"""`sleap-live export --format saved_model`: the inference model as a TensorFlow
SavedModel, its operations written by `sleap_live.engines.export.tf_graph`.

The model is exported by torch.export, static and branch-free as `--format tflite`
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

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import (
    ExportError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.export._quiet import first_line, native_stderr_silenced, tracer_notes
from sleap_live.engines.export.exporter import (
    Frames,
    conversion_frames,
    export_folder,
    export_onnx_bytes,
    fitted_frames,
)
from sleap_live.engines.export.onnx import converted_metadata, onnx_exported
from sleap_live.engines.export.verify import Outputs, check_against_onnx_runtime
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import (
    DEFAULT_OPSET,
    TENSORRT_PROFILE,
    ExportMetadata,
)
from sleap_live.engines.notify import Notify
from sleap_live.engines.settings import InferenceSettings, check_slots
from sleap_live.stream.outputs.staging import staged_file

FORMAT = "saved_model"
FOLDER_ENDING = "_saved_model"
METADATA_FILE = "sleap_live.json"
SIGNATURE = "serving_default"
INPUT_NAME = "frames"
TENSORFLOW_INSTALL_HINT = 'pip install "sleap-live[saved-model]"'


@attrs.frozen
class Converted:
    """The model's graph as TensorFlow operations, for one frame shape.

    Attributes:
        function: the `tf.function` of uint8 (1, H, W, C) frames, giving the outputs
            as a dict by name.
        metadata: the export's metadata (no verification yet).
        onnx_bytes: the default-profile ONNX graph the export is checked against.
        frames: the verification frames, fitted to the frame size.
        source: where the frames came from.
        model: the torch inference model it was converted from (what a check
            against ONNX Runtime compares by).
    """

    function: Any
    metadata: ExportMetadata
    onnx_bytes: bytes
    frames: np.ndarray
    source: str
    model: InferenceModel


def export_saved_model(
    paths: Sequence[str | Path],
    output: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    verify_frames: Frames | None = None,
    progress: Notify | None = None,
    settings: InferenceSettings | None = None,
    frame_size: tuple[int, int] | None = None,
    overwrite: bool = False,
) -> Path:
    """Exports one or two model directories to a SavedModel folder (see the module's notes).

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the folder to write the SavedModel into.
        opset, verify, verify_frames, progress, settings, overwrite: as for `export_model`; the
            ONNX export the SavedModel is checked against uses `opset`.
        frame_size: (height, width) the SavedModel runs (default: the verification
            frames'; synthetic frames' without verification or frames).

    Returns:
        The SavedModel folder.

    Raises:
        ValueError: `output` is a file, or a folder holding anything but an earlier
            SavedModel export.
        ModelConfigError: a network with an operation TensorFlow cannot hold here,
            or a centroid or top-down model without `max_instances`.
        RuntimeUnavailableError: TensorFlow is not installed.
        ExportError: the conversion fails, or the SavedModel's outputs differ from
            ONNX Runtime's.
        ModelNotFoundError, CheckpointError: as for `export_model`.
    """
    path = export_folder(output, "a SavedModel export", is_saved_model_export, overwrite=overwrite)
    tf = import_tensorflow()
    notify = progress or (lambda _: None)
    converted = convert_model(
        paths, FORMAT, opset=opset, verify=verify, verify_frames=verify_frames,
        progress=progress, settings=settings, frame_size=frame_size, int64_outputs=True,
    )  # fmt: skip
    notify(f"writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Made whole in a private folder, which replaces an earlier export's folder.
    with staged_file(path, "the export") as staged:
        save(tf, converted.function, staged)
        _verify_and_record(tf, converted, staged, verify, notify)
    return path


def _verify_and_record(
    tf: Any, converted: Converted, path: Path, verify: bool, notify: Callable[[str], None]
) -> None:
    """Check the SavedModel at `path` against ONNX Runtime if `verify`; write its metadata."""
    metadata = converted.metadata
    if verify:
        frames = converted.frames
        notify(f"verifying {len(frames)} frames in TensorFlow against ONNX Runtime")
        outputs = run_saved_model(path, frames, metadata.output_names)
        check = check_against_onnx_runtime(
            converted.model,
            outputs,
            onnx_exported(converted.onnx_bytes).run(frames),
            frames,
            converted.source,
            export="the SavedModel",
            runtime=f"TensorFlow {tf.__version__}",
        )
        metadata = attrs.evolve(metadata, verification=(check,))
    (path / METADATA_FILE).write_text(json.dumps(metadata.to_dict(), indent=1) + "\n")


def is_saved_model_export(folder: Path) -> bool:
    """Whether `folder` holds a SavedModel export of sleap-live's."""
    return (folder / METADATA_FILE).is_file() and (folder / "saved_model.pb").is_file()


def convert_model(
    paths: Sequence[str | Path],
    format: str,
    *,
    opset: int,
    verify: bool,
    verify_frames: Frames | None,
    progress: Notify | None,
    settings: InferenceSettings | None,
    frame_size: tuple[int, int] | None,
    int64_outputs: bool,
) -> Converted:
    """Loads the model, refuses what TensorFlow cannot hold here, exports it to ONNX
    (the reference) and converts its static "tensorrt"-profile program to TensorFlow.

    Raises:
        as for `export_saved_model`.
    """
    import tensorflow as tf

    from sleap_live.engines.export.tf_graph import (
        UnsupportedOperation,
        tf_function,
        unsupported_operations,
    )
    from sleap_live.engines.graph.build import load_inference_model

    notify = progress or (lambda _: None)
    notify("loading model")
    model = load_inference_model(paths, settings).cpu().eval()
    model_type = model.info.model_type
    check_slots(model_type, model.info.max_instances)
    chosen = conversion_frames(model, verify, verify_frames, paths, 1)
    frames, source = fitted_frames(chosen.frames, frame_size), chosen.source
    notify(f"exporting with torch.export for {frames.shape[1]}x{frames.shape[2]} frames")
    program = _program(model, frames[:1])
    missing = unsupported_operations(program)
    if missing:
        sources = ", ".join(str(path) for path in paths)
        raise ModelConfigError(
            f"{sources}: this {model_type} model cannot be exported to {format}: its graph has "
            f"operations with no TensorFlow form here ({', '.join(missing)}); use --format onnx"
        )
    onnx_bytes = export_onnx_bytes(
        model,
        opset=opset,
        verify=verify,
        verify_frames=verify_frames,
        sources=paths,
        progress=progress,
    )
    metadata = converted_metadata(
        onnx_bytes,
        format,
        TENSORRT_PROFILE,
        {"tensorflow": tf.__version__, "torch": torch.__version__},
    )
    names = metadata.output_names
    notify("converting to TensorFlow operations")
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
    return Converted(function, metadata, onnx_bytes, frames, source, model)


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
    try:
        return tf.saved_model.load(str(path)).signatures[SIGNATURE]
    except Exception as error:  # a foreign or damaged folder raises many kinds
        raise ModelConfigError(
            f"{path}: not a SavedModel with a {SIGNATURE} signature ({first_line(error)})"
        ) from error


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
    """`model` in the "tensorrt" profile, static and branch-free, exported for frames of
    `example`'s shape in core ATen; the model is put back as it was afterwards."""
    from sleap_live.engines.export.tf_graph import core_program

    try:
        with model.whole_graph(TENSORRT_PROFILE), tracer_notes(), torch.no_grad():
            return core_program(model, torch.from_numpy(example))
    except Exception as error:  # torch.export raises many kinds of errors
        raise ExportError(
            f"torch.export of the {model.info.model_type} model failed: {first_line(error)}"
        ) from error
