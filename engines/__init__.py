"""sleap-live engines: load sleap-nn models, export them, and run them.

Each name below is imported from its module on first use: `import sleap_live.engines`
(and so importing any one of its modules) stays light and changes nothing in the
process. `load_runner`, `load_inference_model` and `export_model` load torch: each asks
torch's OpenMP threads to sleep rather than spin when idle before it loads torch (see
`sleap_live.engines.openmp`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sleap_live import _lazy_names

if TYPE_CHECKING:
    from sleap_live.engines.errors import (
        CheckpointError,
        EngineError,
        ExportedModelDirError,
        ExportError,
        InputMismatchError,
        ModelConfigError,
        ModelNotFoundError,
        RuntimeUnavailableError,
    )
    from sleap_live.engines.export import export_model
    from sleap_live.engines.graph.build import load_inference_model
    from sleap_live.engines.load.dirs import (
        is_sleap_nn_export_dir,
        read_export_metadata,
        read_model_dir,
    )
    from sleap_live.engines.load.spec import HeadSpec, ModelSpec, PreprocessSpec, UNetSpec
    from sleap_live.engines.load_options import LoadOptions
    from sleap_live.engines.runners.load import load_runner
    from sleap_live.engines.settings import InferenceSettings
    from sleap_live.engines.types import MODEL_TYPES, FrameBoxes, FramePoses, ModelInfo, Skeleton

__all__ = [
    "MODEL_TYPES",
    "CheckpointError",
    "EngineError",
    "ExportError",
    "ExportedModelDirError",
    "FrameBoxes",
    "FramePoses",
    "HeadSpec",
    "InferenceSettings",
    "InputMismatchError",
    "LoadOptions",
    "ModelConfigError",
    "ModelInfo",
    "ModelNotFoundError",
    "ModelSpec",
    "PreprocessSpec",
    "RuntimeUnavailableError",
    "Skeleton",
    "UNetSpec",
    "export_model",
    "is_sleap_nn_export_dir",
    "load_inference_model",
    "load_runner",
    "read_export_metadata",
    "read_model_dir",
]

# Each public name and the module it comes from.
_ORIGINS = {
    **dict.fromkeys(
        (
            "CheckpointError",
            "EngineError",
            "ExportError",
            "ExportedModelDirError",
            "InputMismatchError",
            "ModelConfigError",
            "ModelNotFoundError",
            "RuntimeUnavailableError",
        ),
        "sleap_live.engines.errors",
    ),
    **dict.fromkeys(
        ("MODEL_TYPES", "FrameBoxes", "FramePoses", "ModelInfo", "Skeleton"),
        "sleap_live.engines.types",
    ),
    **dict.fromkeys(
        ("HeadSpec", "ModelSpec", "PreprocessSpec", "UNetSpec"), "sleap_live.engines.load.spec"
    ),
    # The model directories' readers: h5py, for SLEAP 1.x models.
    **dict.fromkeys(
        ("is_sleap_nn_export_dir", "read_export_metadata", "read_model_dir"),
        "sleap_live.engines.load.dirs",
    ),
    "InferenceSettings": "sleap_live.engines.settings",
    "LoadOptions": "sleap_live.engines.load_options",
}
# The names whose modules load torch.
_TORCH = {
    "load_runner": "sleap_live.engines.runners.load",
    "load_inference_model": "sleap_live.engines.graph.build",
    "export_model": "sleap_live.engines.export",
}

_import, __dir__ = _lazy_names(__name__, {**_ORIGINS, **_TORCH})


def __getattr__(name: str) -> Any:
    if name in _TORCH:
        from sleap_live.engines.openmp import prefer_passive_wait

        prefer_passive_wait()  # before the module imported loads torch
    return _import(name)
