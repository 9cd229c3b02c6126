"""sleap-live engines: load sleap-nn models, export them, and run them."""

from sleap_live.engines.errors import (
    CheckpointError,
    EngineError,
    InputMismatchError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.types import MODEL_TYPES, FramePoses, ModelInfo, Skeleton

__all__ = [
    "MODEL_TYPES",
    "CheckpointError",
    "EngineError",
    "FramePoses",
    "InputMismatchError",
    "ModelConfigError",
    "ModelInfo",
    "ModelNotFoundError",
    "RuntimeUnavailableError",
    "Skeleton",
]
