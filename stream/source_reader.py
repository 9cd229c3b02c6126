"""The capture stage's hold on its source: a reader thread, watched with a read timeout.

A source's `next()` may block for ever without an error (a camera on external
trigger, an SDK's `grab()`, a stalled network stream), often in native code that
Python cannot interrupt. So no stage the pipeline waits for calls into the source:
a `SourceReader` iterates it in a daemon thread of its own and puts each frame on
the frames channel, and the capture stage only watches that reader. However long
the source blocks, the capture stage ends when asked, and it reports a source that
has been inside one read for longer than its read timeout as stalled
(`SourceStalledError`), closing the frames channel so that every frame delivered
before is still processed.

Why a reader thread watched by the capture stage, rather than a watchdog on a
capture stage that reads the source itself: a watchdog can see that the capture
stage is blocked but cannot unblock it, so the stage the pipeline waits for would
stay stuck and `stop()` would have to abandon it. Here the only thread ever left
behind is the reader, inside the source's own call, and it ends as soon as that
call returns (the channel is closed by then). Why not a reader handing frames to
a capture stage through a channel of its own: that costs a thread wake-up per
frame, about half the recorded pipeline's throughput on small frames when tried.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Protocol, TypeVar

from sleap_live.stream.clock import CLOCK_POLL, Clock
from sleap_live.stream.errors import ChannelClosed, SourceStalledError
from sleap_live.stream.sources import Source
from sleap_live.stream.types import Frame

logger = logging.getLogger(__name__)

_SourceT = TypeVar("_SourceT", bound=Source)

# A read still in progress this many seconds (on the clock) when the pipeline stops
# reading is not a frame on its way but a blocked source: worth a warning.
BLOCKED_AFTER = 1.0


def open_within(open_source: Callable[[], _SourceT], timeout: float, name: str) -> _SourceT:
    """`open_source()`, run in a daemon thread of its own and waited for at most `timeout`.

    Opening reads a source's first data (FFmpeg probes a stream, an iterator
    source takes its first frame), which blocks for ever on a source that never
    delivers, in native code the caller's Ctrl-C cannot interrupt. Here the caller
    waits on an event instead, which a Ctrl-C does interrupt. A source opened after
    the caller gave up is closed by the opening thread.

    Args:
        timeout: most real seconds to wait (opening happens before any clock runs).
        name: the source, as the error names it.

    Raises:
        SourceStalledError: the source was not open after `timeout` seconds.
        Exception: whatever `open_source` raised.
    """
    lock = threading.Lock()
    opened: list[_SourceT] = []
    failed: list[BaseException] = []
    abandoned = False
    done = threading.Event()

    def run() -> None:
        try:
            source = open_source()
        except BaseException as exc:
            failed.append(exc)
        else:
            with lock:
                if abandoned:
                    source.close()
                else:
                    opened.append(source)
        finally:
            done.set()

    threading.Thread(target=run, name="sleap-live source opener", daemon=True).start()
    try:
        done.wait(None if math.isinf(timeout) else timeout)
    finally:
        with lock:
            abandoned = not opened
    if failed:
        raise failed[0]
    if not opened:
        raise SourceStalledError(
            f"{name}: the source stalled: nothing read in the {timeout:g} s after opening it "
            "(its read timeout)"
        )
    return opened[0]


class FrameSink(Protocol):
    """Where a reader puts frames: the pipeline's `SourceSlots` (a `Channel` takes them
    too). `put` waits or drops by the sink's policy, and raises `ChannelClosed`
    once the sink is closed."""

    def put(self, frame: Frame) -> None: ...


class SourceReader:
    """Iterates a source onto a channel in a named daemon thread; `watch` waits on it.

    Args:
        source: the source to read; the reader thread iterates it once.
        frames: the channel (or slots) each frame is put on (waiting for room if it
            blocks).
        clock: the clock read timeouts are measured on (the pipeline's).
        on_frame: called in the reader thread after each frame is put.
        on_end: called in the reader thread once it reads no more, whatever the reason.

    Attributes:
        read_timeout: seconds one read may last (the source's `read_timeout`).
        frames_read: frames the source has delivered so far.
        thread: the reader thread.
    """

    def __init__(
        self,
        source: Source,
        frames: FrameSink,
        clock: Clock,
        *,
        name: str,
        on_frame: Callable[[], object],
        on_end: Callable[[], object] | None = None,
    ) -> None:
        self._source = source
        self._frames = frames
        self._clock = clock
        self._on_frame = on_frame
        self._on_end = on_end
        self.read_timeout = float(source.read_timeout)
        self.frames_read = 0
        self._error: BaseException | None = None
        # When the read in progress began, on the clock; None between reads.
        self._reading_since: float | None = None
        # Set when the reader ends or is closed: what `watch` waits for.
        self._done = threading.Event()
        self._closed = False
        self._stalled = False
        self.thread = threading.Thread(target=self._read, name=name, daemon=True)

    def start(self) -> None:
        """Start the reader thread, unless the reader was closed first.

        Started from the capture stage's thread, it inherits that thread's CPU
        priority (see `priority`): decoding stays in the background under
        ``"recorded"``.
        """
        if not self._closed:
            self.thread.start()

    def watch(self) -> None:
        """Wait until the source ends or the reader is closed.

        Raises:
            SourceStalledError: one read lasted longer than `read_timeout` on the clock.
            Exception: whatever the source raised, after the frames before it.
        """
        poll = None if math.isinf(self.read_timeout) else CLOCK_POLL
        while not self._done.wait(poll):
            self._check_stall()
        if self._error is not None:
            raise self._error

    def finished(self) -> bool:
        """Whether the reader has ended (or was closed), without waiting; checks for a stall.

        Raises:
            SourceStalledError: one read has lasted longer than `read_timeout` on the clock.
            Exception: whatever the source raised, once the reader has ended.
        """
        if not self._done.is_set():
            self._check_stall()
            return False
        if self._error is not None:
            raise self._error
        return True

    def wait_done(self, timeout: float) -> bool:
        """Wait at most `timeout` real seconds for the reader to end; whether it has."""
        return self._done.wait(timeout)

    def _check_stall(self) -> None:
        since = self._reading_since
        waited = 0.0 if since is None else self._clock() - since
        if waited >= self.read_timeout:
            self._stalled = True
            raise SourceStalledError(
                f"{self._source.source_id}: the source stalled: no frame for "
                f"{waited:.1f} s, more than its read timeout of {self.read_timeout:g} s "
                f"({self.frames_read} frames before)"
            )

    def close(self) -> None:
        """Put no more frames; `watch` returns at once. A reader inside the source
        ends when its read returns. Idempotent, any thread."""
        self._closed = True
        self._done.set()

    def report_blocked(self) -> None:
        """Warn, naming the reader thread, if it is left blocked in the source.

        Called once the pipeline stopped reading. A stall already raised by
        `watch` needs no second word.
        """
        since = self._reading_since
        if self._stalled or since is None or not self.thread.is_alive():
            return
        blocked = self._clock() - since
        if blocked >= BLOCKED_AFTER:
            logger.warning(
                "%s: the source is still blocked in a read (no frame for %.1f s); its reader "
                "thread %r, a daemon thread, is left to end when the read returns",
                self._source.source_id,
                blocked,
                self.thread.name,
            )

    def _read(self) -> None:
        frames = _frames_of(self._source)
        try:
            self._reading_since = self._clock()
            while (frame := next(frames, None)) is not None:
                self._reading_since = None
                if self._closed:
                    break
                self.frames_read += 1
                self._frames.put(frame)
                # Counted once taken: a frame the closed channel refused is not captured.
                self._on_frame()
                self._reading_since = self._clock()
        except ChannelClosed:
            pass  # the pipeline stopped taking frames
        except BaseException as exc:
            self._error = exc  # raised by `watch` in the capture stage
        finally:
            self._reading_since = None
            _close_iterator(frames)
            if self._on_end is not None:
                self._on_end()
            self._done.set()


def watch_all(readers: Sequence[SourceReader]) -> None:
    """Wait until every reader has ended or been closed, as `SourceReader.watch` does
    for one; the first stall or source error ends the wait.

    Raises:
        SourceStalledError: a reader's read lasted longer than its read timeout.
        Exception: whatever a source raised, after the frames it delivered.
    """
    if len(readers) == 1:
        readers[0].watch()
        return
    running = list(readers)
    while running:
        running = [reader for reader in running if not reader.finished()]
        if running:
            running[0].wait_done(CLOCK_POLL)


def _frames_of(source: Source) -> Generator[Frame, None, None]:
    """The source's frames through a generator of the reader's own, which the reader
    can always close: closing it closes the source's iterator (``yield from``)."""
    yield from source


def _close_iterator(iterator: Generator[Frame, None, None]) -> None:
    try:
        iterator.close()
    except ValueError:
        pass  # "generator already executing": `source.close()` is closing it right now
