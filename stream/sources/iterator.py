"""Frames from Python: an iterable of arrays or a callable that returns the next one."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from typing import Any

import numpy as np

from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources._base import SourceBase
from sleap_live.stream.types import Frame

FrameSupplier = Iterable[Any] | Callable[[], Any]

_END = object()


class IteratorSource(SourceBase):
    """Frames supplied by Python code, e.g. a camera SDK or frames already in memory.

    This is the adapter for cameras FFmpeg cannot open (GenICam, vendor SDKs): wrap the
    SDK's acquisition loop in a generator of arrays and pass it with ``live=True``;
    ``scripts/genicam_example.py`` does so for a GenICam camera through harvesters.
    A pipeline reads the source in a thread of its own, so an SDK call that blocks
    cannot hang it, and reports the source stalled after its read timeout.

    Each item must be a uint8 array (anything `numpy.asarray` accepts) of shape
    (H, W), (H, W, 1) or (H, W, 3) (RGB), and every frame must have the first
    frame's shape. The first frame is taken at construction to learn
    `frame_shape`; it is stamped then.

    Args:
        frames: an iterable of frames, or a zero-argument callable returning the next
            frame or None at the end. An object that is both is used as an iterable.
            An iterator made from it is closed (if it has ``close``, as generators do)
            when the source is closed.
        fps: nominal frame rate, if known; only reported.
        live: whether frames arrive on their own clock (e.g. from a camera SDK), so a
            consumer that falls behind should drop rather than wait.
        copy: copy every frame, so the caller may reuse its buffers. With False the
            caller's array (or a view of it) is handed on when already contiguous.
        source_id: name stamped on every frame.
        clock: what frames are stamped with.
        read_timeout: most seconds a frame may take before a pipeline reports the
            source stalled; default: the frame interval plus 5 s (`math.inf`: never).

    Raises:
        SourceError: if the supplier yields nothing, or a frame is not a uint8 array
            of a supported shape (raised when that frame is reached).
        TypeError: if ``frames`` is neither iterable nor callable.
        ValueError: if fps or read_timeout is not positive.
    """

    def __init__(
        self,
        frames: FrameSupplier,
        *,
        fps: float | None = None,
        live: bool = False,
        copy: bool = True,
        source_id: str = "iterator",
        clock: Clock = MONOTONIC,
        read_timeout: float | None = None,
    ) -> None:
        self._clock = clock
        if fps is not None and not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        super().__init__(source_id, read_timeout)
        if isinstance(frames, Iterable):
            self._items: Generator[Any, None, None] = _each(frames)
            self.n_frames = len(frames) if isinstance(frames, Sized) else None
        elif callable(frames):
            self._items = _call_until_none(frames)
            self.n_frames = None
        else:
            raise TypeError(
                f"frames must be an iterable of arrays or a callable returning one, "
                f"got {type(frames).__name__}"
            )
        self.fps = float(fps) if fps is not None else None
        self.is_live = live
        self.decoder = "none"
        self._copy = copy
        first = next(self._items, _END)
        try:
            if first is _END:
                raise SourceError(f"{self.source_id}: the frame supplier produced no frames")
            self._first: Frame | None = self._frame(0, first, None)
        except SourceError:
            self._close_items()
            raise
        self.frame_shape = self._first.image.shape

    def _frames(self) -> Iterator[Frame]:
        first, self._first = self._first, None
        if first is None:
            return
        yield first
        for index, item in enumerate(self._items, start=1):
            yield self._frame(index, item, first.image.shape)
            if self._stop.is_set():
                return

    def _frame(self, index: int, item: Any, shape: tuple[int, ...] | None) -> Frame:
        captured = self._clock()
        image = np.asarray(item)
        if image.dtype != np.uint8:
            raise SourceError(
                f"{self.source_id}: frame {index} has dtype {image.dtype}; frames must be uint8"
            )
        if image.ndim == 2:
            image = image[:, :, None]
        if image.ndim != 3 or image.shape[2] not in (1, 3) or 0 in image.shape:
            raise SourceError(
                f"{self.source_id}: frame {index} has shape {np.shape(item)}; "
                "frames must be (H, W), (H, W, 1) or (H, W, 3)"
            )
        if shape is not None and image.shape != shape:
            raise SourceError(
                f"{self.source_id}: frame {index} has shape {image.shape} but the first "
                f"frame had {shape}; all frames must have one shape"
            )
        image = np.array(image, order="C", copy=True) if self._copy else np.ascontiguousarray(image)
        return Frame(index, captured, self.source_id, image)

    def _close_items(self) -> None:
        self._items.close()  # closes the caller's iterator too, where it has `close`

    def _release(self) -> None:
        self._first = None
        self._close_items()


def _each(frames: Iterable[Any]) -> Generator[Any, None, None]:
    """The caller's frames through a generator of our own, which can always be closed:
    closing it closes the caller's iterator (``yield from``) where that has `close`."""
    yield from frames


def _call_until_none(supplier: Callable[[], Any]) -> Generator[Any, None, None]:
    # Not iter(supplier, None): comparing an array to the sentinel with == is ambiguous.
    while (item := supplier()) is not None:
        yield item
