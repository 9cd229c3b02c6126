"""`sleap-live export --format tflite`: the inference model as a LiteRT (TFLite)
flatbuffer, converted from torch by litert-torch.

litert-torch converts a torch.export program of the model, static and branch-free
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
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, RuntimeUnavailableError
from sleap_live.engines.export._quiet import first_line, tracer_notes
from sleap_live.engines.export.exporter import (
    Frames,
    conversion_frames,
    export_file,
    export_onnx_bytes,
    fitted_frames,
)
from sleap_live.engines.export.onnx import converted_metadata, onnx_exported
from sleap_live.engines.export.verify import (
    Outputs,
    check_against_onnx_runtime,
)
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import (
    DEFAULT_OPSET,
    TENSORRT_PROFILE,
    ExportMetadata,
    sidecar_path,
)
from sleap_live.engines.notify import Notify
from sleap_live.engines.settings import InferenceSettings, check_slots
from sleap_live.stream.outputs.staging import staged_file

FORMAT = "tflite"
SUFFIX = ".tflite"
FILE_NAME = "model.tflite"
TFLITE_INSTALL_HINT = 'pip install "sleap-live[tflite]"'


def export_tflite(
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
    """Exports one or two model directories to a `.tflite` file (see the module's notes).

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the `.tflite` file to write, or a directory to write `model.tflite` into.
        opset, verify, verify_frames, progress, settings, overwrite: as for `export_model`; the
            ONNX export the file is checked against uses `opset`.
        frame_size: (height, width) the file runs (default: the verification
            frames'; synthetic frames' without verification or frames).

    Returns:
        The path of the `.tflite` file.

    Raises:
        ValueError: `output` ends in another suffix than `.tflite`.
        ModelConfigError: a network LiteRT cannot hold (`refusal`), or a centroid or
            top-down model without `max_instances`.
        RuntimeUnavailableError: litert-torch or ai-edge-litert is not installed.
        ExportError: litert-torch fails on the model, or the file's outputs differ
            from ONNX Runtime's.
        ModelNotFoundError, CheckpointError: as for `export_model`.
    """
    from sleap_live.engines.graph.build import load_inference_model

    path = export_file(
        output, FILE_NAME, f"a TFLite export is a '{SUFFIX}' file", overwrite=overwrite
    )
    litert_torch = import_litert_torch()
    notify = progress or (lambda _: None)
    notify("loading model")
    model = load_inference_model(paths, settings).cpu().eval()
    model_type = model.info.model_type
    reason = refusal(model)
    if reason is not None:
        names = ", ".join(str(path) for path in paths)
        raise ModelConfigError(
            f"{names}: this {model_type} model cannot be exported to TFLite: {reason}; "
            "use --format onnx"
        )
    check_slots(model_type, model.info.max_instances)
    onnx_bytes = export_onnx_bytes(
        model,
        opset=opset,
        verify=verify,
        verify_frames=verify_frames,
        sources=paths,
        progress=progress,
    )
    chosen = conversion_frames(model, verify, verify_frames, paths, 1)
    frames, source = fitted_frames(chosen.frames, frame_size), chosen.source
    notify(f"converting with litert-torch for {frames.shape[1]}x{frames.shape[2]} frames")
    converted = _convert(litert_torch, model, frames[:1])
    metadata = converted_metadata(
        onnx_bytes,
        FORMAT,
        TENSORRT_PROFILE,
        {"litert-torch": _version("litert-torch"), "torch": torch.__version__},
    )
    notify(f"writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_file(path, "the export") as staged:
        converted.export(str(staged))
        metadata = _verified(model, staged, metadata, verify, onnx_bytes, frames, source, notify)
        sidecar_path(staged).write_text(json.dumps(metadata.to_dict(), indent=1) + "\n")
    return path


def _verified(
    model: InferenceModel,
    path: Path,
    metadata: ExportMetadata,
    verify: bool,
    onnx_bytes: bytes,
    frames: np.ndarray,
    source: str,
    notify: Callable[[str], None],
) -> ExportMetadata:
    """`metadata` with the check of the .tflite file at `path` against ONNX Runtime (by
    `model`'s comparison rule)."""
    if verify:
        notify(f"verifying {len(frames)} frames in LiteRT against ONNX Runtime")
        outputs = run_tflite(path, frames, metadata.output_names)
        check = check_against_onnx_runtime(
            model,
            outputs,
            onnx_exported(onnx_bytes).run(frames),
            frames,
            source,
            export="the .tflite file",
            runtime=f"LiteRT interpreter (ai-edge-litert {_version('ai-edge-litert')})",
        )
        metadata = attrs.evolve(metadata, verification=(check,))
    return metadata


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
    """`model` in the "tensorrt" profile, static and branch-free, converted for frames
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


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)
