"""Errors raised by sources, the pipeline and its outputs.

Each also inherits the matching builtin, so callers may catch either.
"""

import queue


class StreamError(Exception):
    """Base class of every sleap-live stream error."""


class SourceNotFoundError(StreamError, FileNotFoundError):
    """A video file or camera device does not exist."""


class SourceError(StreamError, OSError):
    """A source exists but cannot be opened or decoded (corrupt, truncated, busy)."""


class SourceStalledError(SourceError, TimeoutError):
    """A source delivered no frame for longer than its read timeout, without an error."""


class PipelineError(StreamError, RuntimeError):
    """A pipeline stage failed; the original exception is chained as `__cause__`."""


class ChannelClosed(StreamError):
    """A channel was closed: nothing more can be put, and it has been drained."""


class ChannelFull(StreamError, queue.Full):
    """`put_nowait` (or `put` with a timeout) found a blocking channel full."""


class ChannelEmpty(StreamError, queue.Empty):
    """`get_nowait` (or `get` with a timeout) found an open channel empty."""


class PublishError(StreamError, OSError):
    """Poses cannot be published: pyzmq or msgpack is missing, or the endpoint cannot be bound.

    Attributes:
        reason: what is wrong, in words.
        endpoint: the endpoint it concerns, or None.
    """

    def __init__(self, reason: str, endpoint: str | None = None) -> None:
        super().__init__(reason if endpoint is None else f"publish on {endpoint}: {reason}")
        self.reason = reason
        self.endpoint = endpoint


class PreviewError(StreamError, OSError):
    """The browser preview cannot be served: aiohttp or Pillow is missing, or its address
    cannot be bound (port in use, no such interface)."""


def one_line(error: BaseException | None) -> str:
    """The error's message on one line (its lines joined), for a table or a log line."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def first_line(error: BaseException) -> str:
    """The error's first line, or its type's name where it has no message: what
    PyNvVideoCodec and Ray follow it with (pages of advice, a remote traceback) is
    left out."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
