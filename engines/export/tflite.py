"""`sleap-live export --format tflite`: the inference model as a LiteRT (TFLite)
flatbuffer, converted from torch by litert-torch.

litert-torch converts a torch.export program of the model, specialised and branch-free
as `--format pt2` takes it, for one frame size (`--frame-size`, default the
verification frames' size) and one frame per call, in the "tensorrt" profile for
every model type: LiteRT has no uint8 padding, and that profile turns the frames to
float32 before anything else (`frame_values_input`). Centroid and top-down models
give `max_instances` fixed slots per frame (`--max-instances N`); single-instance
and bottom-up models give the same outputs as their TensorRT graphs.
`sleap_live.engines.host.postprocess.instance_list` reads the slots as the host
reads a TensorRT engine's.

Host steps, besides those of every format (bottom-up grouping, multi-class identity
matching): none; the frame goes in as uint8 (B=1, H, W, C).

Refused in one line (`refusal`): a network with transposed convolutions
(`ConvTranspose2d`, as some centered-instance models have): litert-torch 0.10 has no
LiteRT form for their stride-2, padding-1 convolution.

Verification: the model is exported to ONNX as for `--format onnx` (checked against
torch), then the saved `.tflite` file, run by the LiteRT interpreter (`ai-edge-litert`)
frame by frame, must give ONNX Runtime's instances on that default graph within
`TOLERANCE` on the verification frames; the checks are recorded in `<file>.json`.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sleap_live.engines.errors import ExportError, RuntimeUnavailableError
from sleap_live.engines.export._quiet import first_line, tracer_notes
from sleap_live.engines.export.driver import Check, ExportFile, ExportFormat, Job, tensorrt_profile
from sleap_live.engines.export.verify import Outputs
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import TENSORRT_PROFILE

TFLITE_INSTALL_HINT = 'pip install "sleap-live[tflite]"'


def _refuse(model: InferenceModel) -> str | None:
    reason = refusal(model)
    if reason is None:
        return None
    return (
        f"this {model.info.model_type} model cannot be exported to TFLite: {reason}; "
        "use --format onnx"
    )


def _convert_job(job: Job) -> Any:
    job.options.progress(f"converting with litert-torch for {job.size} frames")
    return _convert(job.extra, job.model, job.frames[:1])


def _runtime(extra: Any) -> str:
    return f"LiteRT interpreter (ai-edge-litert {version('ai-edge-litert')})"


def _load(path: Path, job: Job) -> Callable[[np.ndarray], Outputs]:
    return lambda frames: run_tflite(path, frames, job.metadata.output_names)


# The ONNX export the file is checked against uses `--opset`; `--frame-size` (default:
# the verification frames', synthetic frames' without verification or frames) is the
# one frame size it runs.
TFLITE = ExportFormat(
    "tflite",
    ExportFile("model.tflite", "a TFLite export is a '.tflite' file"),
    _convert_job,
    lambda converted, path, job: converted.export(str(path)),
    profile=tensorrt_profile,
    needs=lambda options: import_litert_torch(),
    refuse=_refuse,
    check=Check(_load, "the .tflite file", "LiteRT", _runtime),
    versions=lambda extra: {"litert-torch": version("litert-torch"), "torch": torch.__version__},
)


def refusal(model: InferenceModel) -> str | None:
    """Why LiteRT cannot hold `model`'s network, or None."""
    if any(isinstance(module, torch.nn.ConvTranspose2d) for module in model.modules()):
        return (
            "its network has transposed convolutions, which litert-torch cannot convert to LiteRT"
        )
    return None


def import_litert_torch() -> Any:
    """The `litert_torch` module (the LiteRT interpreter too must be installed), or a
    one-line error saying how to install them."""
    try:
        import ai_edge_litert.interpreter  # noqa: F401  (the verifier's runtime)
        import litert_torch
    except ImportError:
        raise RuntimeUnavailableError(
            f"litert-torch is not installed; {TFLITE_INSTALL_HINT}"
        ) from None
    return litert_torch


def run_tflite(path: str | Path, frames: np.ndarray, names: Sequence[str]) -> Outputs:
    """The outputs of a `.tflite` export on uint8 (B, H, W, C) frames, by name: the
    LiteRT interpreter runs them one frame at a time."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner()
    (input_name,) = runner.get_input_details()
    # litert-torch names the outputs output_0, output_1, ... in the model's order.
    keys = sorted(runner.get_output_details(), key=lambda key: int(key.rpartition("_")[2]))
    per_frame = [runner(**{input_name: frames[index : index + 1]}) for index in range(len(frames))]
    return {
        name: np.concatenate([outputs[key] for outputs in per_frame])
        for name, key in zip(names, keys, strict=True)
    }


def _convert(litert_torch: Any, model: InferenceModel, example: np.ndarray) -> Any:
    """`model` in the "tensorrt" profile, specialised and branch-free, converted for frames
    of `example`'s shape; the model is put back as it was afterwards."""
    try:
        # litert-torch prints its progress to stdout, and the tracer warns to no purpose.
        with (
            model.whole_graph(TENSORRT_PROFILE),
            tracer_notes(),
            contextlib.redirect_stdout(io.StringIO()),
            torch.no_grad(),
        ):
            return litert_torch.convert(model, (torch.from_numpy(example),))
    except Exception as error:  # the converter raises many kinds of errors
        raise ExportError(
            f"litert-torch could not convert the {model.info.model_type} model: {first_line(error)}"
        ) from error
