"""TorchScript exports: tracing, saving with metadata, and loading them to run.

TorchScript is deprecated in torch but still the one torch format that keeps
data-dependent instance counts and antialiased resizes exact, so it is the way
out for a model whose operators ONNX cannot express.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export._quiet import first_line, tracer_notes
from sleap_live.engines.export.verify import Exported, Outputs
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import TORCHSCRIPT_METADATA_FILE, ExportMetadata


def trace_to_torchscript(
    model: InferenceModel, example: np.ndarray
) -> tuple[torch.jit.ScriptModule, tuple[str, ...]]:
    """Traces `model` on `example` frames.

    Returns:
        The traced module and what the tracer warned about the model.

    Raises:
        ExportError: tracing failed.
    """
    with tracer_notes() as notes, torch.no_grad():
        try:
            traced = torch.jit.trace(model, (torch.from_numpy(example),), check_trace=False)
        except Exception as error:  # tracing raises RuntimeError, TypeError, ...
            raise ExportError(
                f"TorchScript trace of the {model.info.model_type} model failed: "
                f"{first_line(error)}"
            ) from error
    return traced, tuple(notes)


def torchscript_exported(
    module: torch.jit.ScriptModule, model: InferenceModel, notes: tuple[str, ...] = ()
) -> Exported:
    """The traced module, ready to verify against `model`."""

    def run(frames: np.ndarray) -> Outputs:
        with torch.inference_mode():
            outputs = module(torch.from_numpy(frames))
        return {
            name: output.numpy() for name, output in zip(model.output_names, outputs, strict=True)
        }

    # A layer traced for the other channel count raises RuntimeError from its kernel.
    return Exported(run, refusals=(RuntimeError,), tracer_notes=notes)


def save_torchscript(module: torch.jit.ScriptModule, path: Path, metadata: ExportMetadata) -> None:
    """Writes the traced module with `metadata` as its `sleap_live.json` extra file."""
    module.save(str(path), _extra_files={TORCHSCRIPT_METADATA_FILE: metadata.to_json()})


class LoadedTorchScript(InferenceModel):
    """A TorchScript export wrapped back into the `InferenceModel` contract."""

    def __init__(self, module: torch.jit.ScriptModule, metadata: ExportMetadata) -> None:
        super().__init__()
        self.module = module
        self.metadata = metadata
        self.info = metadata.info
        # `output_names` follows from the model type and the profile's output layout.
        self.profile = metadata.profile

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.module(frames))


def load_torchscript(path: str | Path) -> LoadedTorchScript:
    """Loads a sleap-live TorchScript export as an `InferenceModel` (on the CPU).

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not TorchScript or carries no sleap-live metadata.
    """
    module, metadata = _load(path)
    return LoadedTorchScript(module, metadata)


def read_torchscript_metadata(path: str | Path) -> ExportMetadata:
    """The metadata embedded in a sleap-live TorchScript (`.pt`) export.

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not TorchScript or carries no sleap-live metadata.
    """
    return _load(path)[1]


def _load(path: str | Path) -> tuple[torch.jit.ScriptModule, ExportMetadata]:
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such TorchScript file")
    extra = {TORCHSCRIPT_METADATA_FILE: ""}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r"`torch\.jit\.load", category=DeprecationWarning
            )
            module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    except RuntimeError as error:
        raise ModelConfigError(f"{path}: not a TorchScript file ({first_line(error)})") from error
    if not extra[TORCHSCRIPT_METADATA_FILE]:
        raise ModelConfigError(f"{path}: no sleap-live metadata; not exported by sleap-live")
    return module, ExportMetadata.from_json(extra[TORCHSCRIPT_METADATA_FILE], str(path))
