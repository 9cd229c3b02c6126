"""Errors raised while loading, exporting or running a model.

Each also inherits the matching builtin, so callers may catch either.
Messages name the file and what is wrong with it.
"""


class EngineError(Exception):
    """Base class of every sleap-live engine error."""


class ModelNotFoundError(EngineError, FileNotFoundError):
    """A model directory or one of its required files does not exist."""


class ModelConfigError(EngineError, ValueError):
    """A training config or export metadata is unreadable or unsupported."""


class UnsupportedModelError(ModelConfigError):
    """The model is of a kind sleap-live does not run (a box detector, an embedding
    or segmentation model, a pretrained or unknown backbone, an unknown type)."""


class ExportedModelDirError(ModelConfigError):
    """The directory holds a `sleap-nn export` model, not a trained checkpoint."""


class CheckpointError(EngineError, ValueError):
    """A checkpoint is corrupt or does not match its training config."""


class InputMismatchError(EngineError, ValueError):
    """Frames handed to an engine cannot be converted to what the model expects."""


class RuntimeUnavailableError(EngineError, ImportError):
    """The requested runtime or device is not installed or not present."""


class ExportError(EngineError, RuntimeError):
    """A model could not be exported, or the export does not match the torch model."""
