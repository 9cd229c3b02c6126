"""sleap-live stream: sources, the realtime pipeline, the ring buffer and the CLI."""

from sleap_live.stream.errors import PipelineError, SourceError, SourceNotFoundError, StreamError
from sleap_live.stream.types import Frame, PoseRecord

__all__ = [
    "Frame",
    "PipelineError",
    "PoseRecord",
    "SourceError",
    "SourceNotFoundError",
    "StreamError",
]
