"""`sleap-live export --format pt2`: the inference model as a `torch.export` program.

torch.export needs a graph with no branch on a computed value and no shape that a
computed value decides without bounds it can prove, so the program is the model
traced static (one frame size, frozen as `--frame-size` or the verification
frames' size; any batch size) and branch-free (`InferenceModel.set_branch_free`):

- single-instance and bottom-up models (multi-class too): the default profile, the
  same outputs as `--format onnx`;
- centroid and top-down models (multi-class too): the "tensorrt" profile, whose
  instance lists are `max_instances` fixed slots per frame (`--max-instances N`),
  float32 inside; their outputs are read as the host reads a TensorRT engine's
  (`sleap_live.engines.host.postprocess.instance_list`).

Everything else (preprocessing, network, peaks, crops) is inside the program; the
host steps are those of `--format onnx` (bottom-up grouping, multi-class identity
matching). `torch.export.load(path).module()` runs it in a torch of the same or a
later version, with no sleap-live installed. The sleap-live metadata rides along as
the archive's extra file `sleap_live.json` and beside it as `<file>.pt2.json`.

Verification: the model is exported to ONNX as for `--format onnx` (checked against
torch), then the saved program, loaded back, must give ONNX Runtime's instances on
that default graph within `TOLERANCE` (coordinates in pixels, scores) on frames of
its size; each check is recorded in the metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export._quiet import first_line
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
    DEFAULT_PROFILE,
    TENSORRT_PROFILE,
    ExportMetadata,
    sidecar_path,
)
from sleap_live.engines.notify import Notify
from sleap_live.engines.settings import SLOTTED_TYPES, InferenceSettings, check_slots
from sleap_live.stream.outputs.staging import staged_file

FORMAT = "pt2"
SUFFIX = ".pt2"
FILE_NAME = "model.pt2"
METADATA_FILE = "sleap_live.json"


def export_pt2(
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
    """Exports one or two model directories to a `.pt2` program (see the module's notes).

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the `.pt2` file to write, or a directory to write `model.pt2` into.
        opset, verify, verify_frames, progress, settings, overwrite: as for `export_model`; the
            ONNX export the program is checked against uses `opset`.
        frame_size: (height, width) the program runs (default: the verification
            frames'; synthetic frames' without verification or frames).

    Returns:
        The path of the `.pt2` file.

    Raises:
        ValueError: `output` is a file whose suffix is not `.pt2`.
        ModelConfigError: a centroid or top-down model without `max_instances`.
        ExportError: torch.export fails on the model, or the program's outputs differ
            from ONNX Runtime's.
        ModelNotFoundError, CheckpointError: as for `export_model`.
    """
    from sleap_live.engines.graph.build import load_inference_model

    path = export_file(output, FILE_NAME, f"a pt2 export is a '{SUFFIX}' file", overwrite=overwrite)
    notify = progress or (lambda _: None)
    notify("loading model")
    model = load_inference_model(paths, settings).cpu().eval()
    model_type = model.info.model_type
    profile = TENSORRT_PROFILE if model_type in SLOTTED_TYPES else DEFAULT_PROFILE
    if profile == TENSORRT_PROFILE:
        check_slots(model_type, model.info.max_instances)
    onnx_bytes = export_onnx_bytes(
        model,
        opset=opset,
        verify=verify,
        verify_frames=verify_frames,
        sources=paths,
        progress=progress,
    )
    chosen = conversion_frames(model, verify, verify_frames, paths, 3)
    frames, source = fitted_frames(chosen.frames, frame_size), chosen.source
    notify(f"exporting with torch.export for {frames.shape[1]}x{frames.shape[2]} frames")
    # Two frames: torch.export takes an axis of size 1 for a constant.
    program = _export_program(model, np.concatenate([frames[:1], frames[:1]]), profile)
    metadata = converted_metadata(onnx_bytes, FORMAT, profile, {"torch": torch.__version__})
    notify(f"writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_file(path, "the export") as staged:
        _save_verified(model, program, staged, metadata, verify, onnx_bytes, frames, source, notify)
    return path


def _save_verified(
    model: InferenceModel,
    program: torch.export.ExportedProgram,
    path: Path,
    metadata: ExportMetadata,
    verify: bool,
    onnx_bytes: bytes,
    frames: np.ndarray,
    source: str,
    notify: Callable[[str], None],
) -> None:
    """Save `program` to `path`, verified against ONNX Runtime if `verify` (by `model`'s
    comparison rule), and its sidecar."""
    torch.export.save(program, str(path), extra_files={METADATA_FILE: metadata.to_json()})
    if verify:
        loaded = load_pt2(path)
        reference = onnx_exported(onnx_bytes)
        records = []
        for batch in (frames[:1], frames[:3]):
            notify(f"verifying on frames {tuple(batch.shape)} against ONNX Runtime")
            outputs = run_pt2(loaded, batch, metadata.output_names)
            records.append(
                check_against_onnx_runtime(
                    model, outputs, reference.run(batch), batch, source, export="the .pt2 program"
                )
            )
        metadata = attrs.evolve(metadata, verification=tuple(records))
        torch.export.save(program, str(path), extra_files={METADATA_FILE: metadata.to_json()})
    sidecar_path(path).write_text(metadata.to_json() + "\n")


def load_pt2(path: str | Path) -> torch.nn.Module:
    """The runnable module of a `.pt2` export (`torch.export.load(path).module()`).

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not a torch.export archive.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such .pt2 file")
    try:
        return torch.export.load(str(path)).module()
    except Exception as error:  # a foreign or damaged archive raises many kinds
        raise ModelConfigError(
            f"{path}: not a torch.export archive ({first_line(error)})"
        ) from error


def read_pt2_metadata(path: str | Path) -> ExportMetadata:
    """The sleap-live metadata saved in a `.pt2` export.

    Raises:
        ModelConfigError: the archive carries none.
    """
    extra = {METADATA_FILE: ""}
    torch.export.load(str(path), extra_files=extra)
    if not extra[METADATA_FILE]:
        raise ModelConfigError(f"{path}: no sleap-live metadata; not exported by sleap-live")
    return ExportMetadata.from_json(extra[METADATA_FILE], str(path))


def run_pt2(module: torch.nn.Module, frames: np.ndarray, names: Sequence[str]) -> Outputs:
    """The outputs of a loaded `.pt2` module on uint8 (B, H, W, C) frames, by name."""
    with torch.no_grad():
        outputs = module(torch.from_numpy(frames))
    return {name: output.numpy() for name, output in zip(names, outputs, strict=True)}


def _export_program(
    model: InferenceModel, example: np.ndarray, profile: str
) -> torch.export.ExportedProgram:
    """`model` in `profile`, static and branch-free, exported for any batch of `example`'s
    frame shape; the model is put back as it was afterwards."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    try:
        with model.whole_graph(profile), torch.no_grad():
            return torch.export.export(
                model, (torch.from_numpy(example),), dynamic_shapes=({0: batch},), strict=False
            )
    except Exception as error:  # torch.export raises many kinds of errors
        raise ExportError(
            f"torch.export of the {model.info.model_type} model failed: {first_line(error)}"
        ) from error
