"""The lifecycle every source shares: open once, iterate once, close from any thread."""

from __future__ import annotations

import abc
import math
import threading
import weakref
from collections.abc import Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from sleap_live.stream.types import Frame

_SourceT = TypeVar("_SourceT", bound="SourceBase")

# Seconds beyond its frame interval a source may take to deliver a frame before it
# counts as stalled: room for a camera's start-up, a network stream's hiccup or a
# busy disk, yet short enough that a stalled session ends while someone watches.
READ_TIMEOUT_MARGIN = 5.0


def default_read_timeout(fps: float | None) -> float:
    """A source's read timeout unless told otherwise: its frame interval plus the margin."""
    return (1.0 / fps if fps else 0.0) + READ_TIMEOUT_MARGIN


def check_read_timeout(read_timeout: float | None) -> float | None:
    """`read_timeout` as given (None: the default); `math.inf` never times out.

    Raises:
        ValueError: it is not a positive number of seconds.
    """
    if read_timeout is None:
        return None
    if isinstance(read_timeout, bool) or not isinstance(read_timeout, int | float):
        raise ValueError(f"read_timeout must be a number of seconds, got {read_timeout!r}")
    if math.isnan(read_timeout) or read_timeout <= 0:
        raise ValueError(f"read_timeout must be a positive number of seconds, got {read_timeout}")
    return float(read_timeout)


class SourceBase(abc.ABC):
    """Base of the sources: subclasses implement `_frames` and `_release`.

    Resources are acquired in the subclass constructor (so a bad path or device fails
    there), released exactly once by whichever comes first: the end of iteration, or
    `close`. A source is read once: iterating it a second time raises.

    Its attributes are those `sources.Source` describes.
    """

    source_id: str
    fps: float | None
    frame_shape: tuple[int, int, int]
    n_frames: int | None
    is_live: bool
    decoder: str = "pyav"
    decoder_notice: str | None = None
    bit_depth: int | None = None
    skipped: int = 0
    video_file: Path | None = None

    def __init__(self, source_id: str, read_timeout: float | None = None) -> None:
        self.source_id = source_id
        self._read_timeout = check_read_timeout(read_timeout)
        self._lock = threading.Lock()
        # Set by close(); frame loops check it so a close from another thread ends
        # an iteration at its next frame.
        self._stop = threading.Event()
        self._closed = False
        self._released = False
        # Weak, so that a consumer breaking out of its loop frees the generator and
        # with it (through its `finally`) the source's resources.
        self._iteration: weakref.ref[Generator[Frame, None, None]] | None = None

    @property
    def read_timeout(self) -> float:
        """Seconds without a frame after which the source counts as stalled."""
        if self._read_timeout is None:
            return default_read_timeout(self.fps)
        return self._read_timeout

    @property
    def closed(self) -> bool:
        """Whether `close` was called or iteration finished."""
        return self._closed

    def __iter__(self) -> Iterator[Frame]:
        """Frames in order; the source's resources are released when iteration ends.

        Raises:
            ValueError: if the source is closed or was already iterated.
        """
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.source_id}: source is closed; open it again to reread")
            if self._iteration is not None:
                raise ValueError(f"{self.source_id}: source is already being read; read it once")
            iteration = self._generate()
            self._iteration = weakref.ref(iteration)
            return iteration

    def close(self) -> None:
        """Release the source. Idempotent and safe from any thread.

        If another thread is inside an iteration, that iteration stops at its next
        frame and releases the resources itself (PyAV objects must not be closed
        under a thread that is using them).
        """
        with self._lock:
            self._closed = True
            self._stop.set()
            iteration = self._iteration() if self._iteration is not None else None
        if iteration is not None:
            try:
                iteration.close()
            except ValueError:
                # "generator already executing": another thread is inside it and
                # will see the stop event and release on its way out.
                return
        self._release_once()

    def __enter__(self: _SourceT) -> _SourceT:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(source_id={self.source_id!r}, frame_shape={self.frame_shape},"
            f" fps={self.fps}, n_frames={self.n_frames}, closed={self._closed})"
        )

    def _generate(self) -> Generator[Frame, None, None]:
        try:
            yield from self._frames()
        finally:
            with self._lock:
                self._closed = True
            self._release_once()

    def _release_once(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._release()

    @abc.abstractmethod
    def _frames(self) -> Iterator[Frame]:
        """Yield the frames; check `self._stop` between frames."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Free what the constructor acquired; called exactly once."""
