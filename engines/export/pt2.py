"""`sleap-live export --format pt2`: the inference model as a `torch.export` program.

The whole graph (uint8 frames in; preprocessing, network, peaks, crops and the
instance list out) is exported with `torch.export.export`, any batch size, the frame
size of the verification frames, and saved with `torch.export.save`; the sleap-live
metadata rides along as the archive's extra file `sleap_live.json` and beside it as
`<file>.pt2.json`. `torch.export.load(path).module()` runs it in any torch of the
same or a later version, with no sleap-live installed.

Verification: the model is exported to ONNX as for `--format onnx` (checked against
torch), then the saved program, loaded back, must give ONNX Runtime's outputs within
`TOLERANCE` on the same frames; each check is recorded in the metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export._quiet import first_line
from sleap_live.engines.export.exporter import Frames, export_onnx_bytes
from sleap_live.engines.export.frames import (
    SYNTHETIC_SIZE,
    check_batches,
    sample_frames,
    verification_frames,
    with_animals,
)
from sleap_live.engines.export.onnx import embedded_metadata, onnx_exported
from sleap_live.engines.export.verify import (
    TOLERANCE,
    Outputs,
    compare,
    detections_per_frame,
    torch_outputs,
)
from sleap_live.engines.load.metadata import (
    DEFAULT_OPSET,
    ExportMetadata,
    sidecar_path,
)
from sleap_live.engines.notify import Notify
from sleap_live.engines.settings import InferenceSettings

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
) -> Path:
    """Exports one or two model directories to a `.pt2` program (see the module's notes).

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the `.pt2` file to write, or a directory to write `model.pt2` into.
        opset, verify, verify_frames, progress, settings: as for `export_model`; the
            ONNX export the program is checked against uses `opset`.

    Returns:
        The path of the `.pt2` file.

    Raises:
        ValueError: `output` is a file whose suffix is not `.pt2`.
        ExportError: torch.export fails on the model, or the program's outputs differ
            from ONNX Runtime's.
        ModelNotFoundError, ModelConfigError, CheckpointError: as for `export_model`.
    """
    from sleap_live.engines.graph.build import load_inference_model

    path = _output_path(output)
    notify = progress or (lambda _: None)
    notify("loading model")
    model = load_inference_model(paths, settings).cpu().eval()
    native = model.info.input_channels
    onnx_bytes = export_onnx_bytes(
        model,
        opset=opset,
        verify=verify,
        verify_frames=verify_frames,
        sources=paths,
        progress=progress,
    )
    if verify:

        def detect(frames: np.ndarray) -> list[int]:
            return detections_per_frame(torch_outputs(model, frames), len(frames))

        chosen = with_animals(verification_frames(native, verify_frames, paths), detect)
        batches = check_batches(chosen.frames)
        example = batches[0]
    elif verify_frames is not None:
        example = verification_frames(native, verify_frames).frames[:1]
    else:
        example = sample_frames(1, *SYNTHETIC_SIZE, native)
    notify("exporting with torch.export")
    program = _export_program(model, example)
    notify(f"writing {path}")
    onnx_metadata = embedded_metadata(onnx_bytes)
    metadata = attrs.evolve(
        onnx_metadata,
        format=FORMAT,
        input_channels=(native,),
        exporter={"torch": torch.__version__},
        verification=None,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path), extra_files={METADATA_FILE: metadata.to_json()})
    if verify:
        loaded = load_pt2(path)
        reference = onnx_exported(onnx_bytes)
        records = []
        for batch in batches:
            if batch.shape[1:3] != example.shape[1:3]:
                continue  # the program holds one frame size
            notify(f"verifying on frames {tuple(batch.shape)} against ONNX Runtime")
            records.append(_check(loaded, reference.run(batch), batch, chosen.source))
        metadata = attrs.evolve(metadata, verification=tuple(records))
        torch.export.save(program, str(path), extra_files={METADATA_FILE: metadata.to_json()})
    sidecar_path(path).write_text(metadata.to_json() + "\n")
    return path


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


def _export_program(model: torch.nn.Module, example: np.ndarray) -> torch.export.ExportedProgram:
    batch = torch.export.Dim("batch", min=1, max=1024)
    try:
        with torch.no_grad():
            return torch.export.export(
                model,
                (torch.from_numpy(example),),
                dynamic_shapes=({0: batch},),
                strict=False,
            )
    except Exception as error:  # torch.export raises many kinds of errors
        raise ExportError(
            f"torch.export of the {model.info.model_type} model failed: {first_line(error)}"
        ) from error


def _check(
    module: torch.nn.Module, reference: Outputs, frames: np.ndarray, source: str
) -> dict[str, object]:
    shape = "×".join(str(n) for n in frames.shape)
    actual = run_pt2(module, frames, list(reference))
    comparison = compare(reference, actual)
    if comparison.problems:
        raise ExportError(
            f"the .pt2 program differs from ONNX Runtime on {shape} frames by more than "
            f"{TOLERANCE:g}: {', '.join(comparison.problems)}"
        )
    return {
        "frames": list(frames.shape),
        "against": "onnxruntime",
        "frame_source": source,
        "max_abs_diff": comparison.max_abs_diff,
    }


def _output_path(output: str | Path) -> Path:
    path = Path(output)
    if path.suffix == SUFFIX:
        return path
    if path.suffix:
        raise ValueError(f"{path}: a pt2 export is a '{SUFFIX}' file (or a directory)")
    return path / FILE_NAME
