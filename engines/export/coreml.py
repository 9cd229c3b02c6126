"""`sleap-live export --format coreml`: the inference model as a Core ML program
(`.mlpackage`), converted by coremltools.

coremltools converts a TorchScript trace of the model, specialised and branch-free as
`--format pt2` takes it (one frame size, frozen as `--frame-size` or the
verification frames' size; one frame per call), in the "tensorrt" profile for every
model type (it turns the frames to float32 before anything else: Core ML takes no
shape of a uint8 tensor). Centroid and top-down models give `max_instances` fixed
slots per frame; `sleap_live.engines.host.postprocess.instance_list` reads them.

Host steps, besides those of every format (multi-class identity matching): the
frame goes in as float32 holding the uint8 values (Core ML inputs hold no uint8);
the program casts it back to uint8 first, so it computes on the same values as
every other format.

Refused in one line (`REFUSED`): bottom-up models with part affinity fields, whose
line scoring's index arithmetic coremltools cannot convert.

Checked here: coremltools' own checks while it converts (each operation's types
and shapes), then the saved package, loaded back with coremltools, must declare
the input and the outputs the sleap-live host reads, with their shapes. Core ML
runs only on macOS, so the program's predictions are not run nor compared here.
The sleap-live metadata rides along as the package's user-defined metadata
(`sleap_live`) and beside it as `<package>.json`.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sleap_live.engines.errors import ExportError, RuntimeUnavailableError
from sleap_live.engines.export._quiet import first_line, tracer_notes
from sleap_live.engines.export.driver import ExportFile, ExportFormat, Job, tensorrt_profile
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import TENSORRT_PROFILE

METADATA_KEY = "sleap_live"
COREML_INSTALL_HINT = 'pip install "sleap-live[coreml]"'
# Model types coremltools 9.0 cannot convert, and why (one line each).
REFUSED = {
    "bottomup": "coremltools cannot convert the part affinity fields' line scoring "
    "(its index arithmetic)",
}
# What the package says when prediction was not run (Core ML predicts on macOS only).
PREDICTION_NOT_RUN = "not run: Core ML predicts on macOS only"


def _refuse(model: InferenceModel) -> str | None:
    model_type = model.info.model_type
    if model_type not in REFUSED:
        return None
    return (
        f"a {model_type} model cannot be exported to Core ML: {REFUSED[model_type]}; "
        "use --format onnx"
    )


def _convert_job(job: Job) -> Any:
    metadata = job.metadata
    job.options.progress(f"converting with coremltools for {job.size} frames")
    return _convert(
        job.extra,
        job.model,
        job.frames[:1],
        TENSORRT_PROFILE,
        metadata.input_name,
        metadata.output_names,
    )


def _save(program: Any, path: Path, job: Job) -> Mapping[str, Any]:
    """Saves a fresh package, which replaces an earlier one whole (saving merges into
    one), and checks what it declares."""
    metadata = job.metadata
    program.user_defined_metadata[METADATA_KEY] = metadata.to_json()
    program.save(str(path))
    shape = job.frames[:1].shape
    return {"coreml_check": check_package(path, metadata.input_name, shape, metadata.output_names)}


# Every model type in the "tensorrt" profile: it turns the frames to float32 before
# anything else, and Core ML takes no shape of a uint8 tensor. `--frame-size` (default:
# the verification frames', synthetic frames' without them) is the one frame size it
# runs. The package is checked by coremltools and its declared shapes, not on frames.
COREML = ExportFormat(
    "coreml",
    ExportFile("model.mlpackage", "a Core ML export is a '.mlpackage' package"),
    _convert_job,
    _save,
    profile=tensorrt_profile,
    needs=lambda options: import_coremltools(),
    refuse=_refuse,
    versions=lambda coremltools: {
        "coremltools": coremltools.__version__,
        "torch": torch.__version__,
    },
)


def import_coremltools() -> Any:
    """The `coremltools` module, or a one-line error saying how to install it."""
    try:
        import coremltools
    except ImportError:
        raise RuntimeUnavailableError(
            f"coremltools is not installed; {COREML_INSTALL_HINT}"
        ) from None
    return coremltools


def check_package(
    path: Path, input_name: str, frame_shape: Sequence[int], names: Sequence[str]
) -> dict[str, Any]:
    """The saved package, loaded back with coremltools, declares `input_name` of
    `frame_shape` (float32) and the outputs `names`; returns the record of the check.

    Raises:
        ExportError: it does not.
    """
    coremltools = import_coremltools()
    spec = coremltools.models.MLModel(str(path), skip_model_load=True).get_spec()
    inputs = {item.name: list(item.type.multiArrayType.shape) for item in spec.description.input}
    outputs = [item.name for item in spec.description.output]
    expected = {input_name: [int(n) for n in frame_shape]}
    if inputs != expected or outputs != list(names):
        raise ExportError(
            f"{path}: the Core ML package declares inputs {inputs} and outputs {outputs}, "
            f"expected {expected} and {list(names)}"
        )
    return {
        "checked": "coremltools' conversion checks; the saved package's input and outputs",
        "input": {input_name: expected[input_name]},
        "outputs": outputs,
        "specification_version": int(spec.specificationVersion),
        "prediction": PREDICTION_NOT_RUN,
    }


class _FloatFrames(torch.nn.Module):
    """The model on float32 frames holding uint8 values: Core ML inputs hold no uint8."""

    def __init__(self, model: InferenceModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(frames.to(torch.uint8))


def _convert(
    coremltools: Any,
    model: InferenceModel,
    example: np.ndarray,
    profile: str,
    input_name: str,
    names: Sequence[str],
) -> Any:
    """`model` in `profile`, specialised and branch-free, traced on `example` and converted;
    the model is put back as it was afterwards."""
    try:
        frames = torch.from_numpy(example).float()
        # The tracer's warnings and coremltools' progress bars (stderr) say nothing here.
        with model.whole_graph(profile), tracer_notes(), torch.no_grad():
            traced = torch.jit.trace(_FloatFrames(model).eval(), (frames,), check_trace=False)
        _register_missing_ops(coremltools)
        with tracer_notes(), contextlib.redirect_stderr(io.StringIO()):
            return coremltools.convert(
                traced,
                inputs=[coremltools.TensorType(input_name, shape=frames.shape, dtype=np.float32)],
                outputs=[coremltools.TensorType(name) for name in names],
                convert_to="mlprogram",
                minimum_deployment_target=coremltools.target.macOS15,
                compute_precision=coremltools.precision.FLOAT32,
            )
    except Exception as error:  # coremltools raises many kinds of errors
        raise ExportError(
            f"coremltools could not convert the {model.info.model_type} model: {first_line(error)}"
        ) from error


def _register_missing_ops(coremltools: Any) -> None:
    """Teaches coremltools' TorchScript frontend `|` on booleans (aten::__or__), which
    it lacks though it has `&`, through coremltools' own extension point."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch import register_torch_op
    from coremltools.converters.mil.frontend.torch.ops import _get_inputs

    def bitwise_or(context: Any, node: Any) -> None:
        x, y = _get_inputs(context, node, expected=2)
        x, y = mb.cast(x=x, dtype="bool"), mb.cast(x=y, dtype="bool")
        context.add(mb.logical_or(x=x, y=y, name=node.name))

    # override: the same function again on a later export, not coremltools' own.
    register_torch_op(bitwise_or, torch_alias=["or"], override=True)
