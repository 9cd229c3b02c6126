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

import numpy as np
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export._quiet import first_line, loading
from sleap_live.engines.export.driver import Check, ExportFile, ExportFormat, Job
from sleap_live.engines.export.verify import Outputs
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import DEFAULT_PROFILE, TENSORRT_PROFILE, ExportMetadata
from sleap_live.engines.settings import SLOTTED_TYPES

METADATA_FILE = "sleap_live.json"


def _profile(model_type: str) -> str:
    return TENSORRT_PROFILE if model_type in SLOTTED_TYPES else DEFAULT_PROFILE


def _convert(job: Job) -> torch.export.ExportedProgram:
    job.options.progress(f"exporting with torch.export for {job.size} frames")
    # Two frames: torch.export takes an axis of size 1 for a constant.
    example = np.concatenate([job.frames[:1], job.frames[:1]])
    return _export_program(job.model, example, job.profile or DEFAULT_PROFILE)


def _save(program: torch.export.ExportedProgram, path: Path, job: Job) -> None:
    torch.export.save(program, str(path), extra_files={METADATA_FILE: job.metadata.to_json()})


def _load(path: Path, job: Job) -> Callable[[np.ndarray], Outputs]:
    module = load_pt2(path)
    return lambda frames: run_pt2(module, frames, job.metadata.output_names)


# The ONNX export the program is checked against uses `--opset`; `--frame-size` (default:
# the verification frames', synthetic frames' without verification or frames) is the
# one frame size it runs.
PT2 = ExportFormat(
    "pt2",
    ExportFile("model.pt2", "a pt2 export is a '.pt2' file"),
    _convert,
    _save,
    profile=_profile,
    check=Check(_load, "the .pt2 program", batches=lambda frames: (frames[:1], frames[:3])),
    synthetic=3,
    indent=2,
    resave=True,
)


def load_pt2(path: str | Path) -> torch.nn.Module:
    """The runnable module of a `.pt2` export (`torch.export.load(path).module()`).

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not a torch.export archive.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such .pt2 file")
    with loading(path, "a torch.export archive"):
        module = torch.export.load(str(path)).module()
    return module


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
    """`model` in `profile`, specialised and branch-free, exported for any batch of `example`'s
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
