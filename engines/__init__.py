"""sleap-live engines: load sleap-nn models, export them, and run them.

`load_runner`, `load_inference_model` and `export_model` load torch,
so they are imported on first use: `import sleap_live.engines` stays light and
changes nothing in the process. Each asks torch's OpenMP threads to sleep rather
than spin when idle before it loads torch (see `sleap_live.engines.openmp`).
"""

from typing import Any

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
from sleap_live.engines.load.dirs import (
    is_sleap_nn_export_dir,
    read_export_metadata,
    read_model_dir,
)
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, PreprocessSpec, UNetSpec
from sleap_live.engines.settings import InferenceSettings
from sleap_live.engines.types import MODEL_TYPES, FramePoses, ModelInfo, Skeleton

__all__ = [
    "MODEL_TYPES",
    "CheckpointError",
    "EngineError",
    "ExportError",
    "ExportedModelDirError",
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

_LAZY = {
    "load_runner": "sleap_live.engines.runners.load",
    "LoadOptions": "sleap_live.engines.load_options",
    "load_inference_model": "sleap_live.engines.graph.build",
    "export_model": "sleap_live.engines.export",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        from sleap_live.engines.openmp import prefer_passive_wait

        prefer_passive_wait()  # before the module imported loads torch

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sleap_live.engines' has no attribute {name!r}")
