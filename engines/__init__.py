"""sleap-live engines: load sleap-nn models, export them, and run them."""

from sleap_live.engines.errors import (
    CheckpointError,
    EngineError,
    InputMismatchError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.load import (
    ExportedModelDirError,
    is_sleap_nn_export_dir,
    read_export_metadata,
    read_model_dir,
)
from sleap_live.engines.spec import HeadSpec, ModelSpec, PreprocessSpec, UNetSpec
from sleap_live.engines.types import MODEL_TYPES, FramePoses, ModelInfo, Skeleton

__all__ = [
    "MODEL_TYPES",
    "CheckpointError",
    "EngineError",
    "ExportedModelDirError",
    "FramePoses",
    "HeadSpec",
    "InputMismatchError",
    "ModelConfigError",
    "ModelInfo",
    "ModelNotFoundError",
    "ModelSpec",
    "PreprocessSpec",
    "RuntimeUnavailableError",
    "Skeleton",
    "UNetSpec",
    "is_sleap_nn_export_dir",
    "read_export_metadata",
    "read_model_dir",
]
