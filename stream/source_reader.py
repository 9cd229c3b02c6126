"""The capture stage's hold on its source: a reader thread, and a read timeout.

A source's `next()` may block for ever without an error (a camera on external
trigger, an SDK's `grab()`, a stalled network stream), often in native code that
Python cannot interrupt. So the pipeline never waits on a source from a stage it
waits for itself: a `SourceReader` iterates the source in a daemon thread of its
own and hands each frame over through a one-frame channel, and the capture stage
takes frames from that channel with a deadline on the pipeline's clock. However
long the source blocks, the capture stage stops when asked, and it reports a
source that delivered nothing for its read timeout as stalled
(`SourceStalledError`).

Why a reader thread rather than a watchdog on the capture stage: a watchdog can see
that the capture stage is blocked in the source but cannot unblock it, so the
stage that feeds the frames channel would still be stuck and `stop()` would have
to abandon it mid-call. With a reader, the stage the pipeline waits for never
calls into the source; the only thread ever left behind is the reader, inside the
source's own call, and it ends as soon as that call returns (the channel is closed
by then). Frames are handed over, not copied: the hop costs one wake-up per frame.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, SourceStalledError
from sleap_live.stream.sources import Source, default_read_timeout
from sleap_live.stream.types import Frame

logger = logging.getLogger(__name__)

# A read still in progress this many seconds (on the clock) when the pipeline stops
# reading is not a frame on its way but a blocked source: worth a warning.
BLOCKED_AFTER = 1.0


def read_timeout_of(source: Source) -> float:
    """The source's ``read_timeout``, or `default_read_timeout` of its rate if it has none."""
    timeout = getattr(source, "read_timeout", None)
    return default_read_timeout(source.fps) if timeout is None else float(timeout)


class SourceReader:
    """Iterates a source in a named daemon thread; `next` waits for a frame, with a timeout.

    Args:
        source: the source to read; the reader thread iterates it once.
        clock: the clock read timeouts are measured on (the pipeline's).
        name: the reader thread's name.

    Attributes:
        read_timeout: seconds `next` waits for a frame (see `read_timeout_of`).
        frames_read: frames the source has delivered so far.
    """

    def __init__(self, source: Source, clock: Clock, *, name: str) -> None:
        self._source = source
        self._clock = clock
        self.read_timeout = read_timeout_of(source)
        self.frames_read = 0
        self._handoff: Channel[Frame] = Channel(1, "block")
        self._error: BaseException | None = None
        # When the read in progress began, on the clock; None between reads.
        self._reading_since: float | None = None
        self._stalled = False
        self.thread = threading.Thread(target=self._read, name=name, daemon=True)

    def start(self) -> None:
        """Start the reader thread, unless the reader was closed first.

        Started from the capture stage's thread, it inherits that thread's CPU
        priority (see `priority`): decoding stays in the background under
        ``"recorded"``.
        """
        if not self._handoff.closed:
            self.thread.start()

    def next(self) -> Frame | None:
        """The next frame; None once the source has ended or the reader is closed.

        Raises:
            SourceStalledError: no frame came for `read_timeout` seconds on the clock.
            Exception: whatever the source raised, after the frames before it.
        """
        started = self._clock()
        try:
            return self._handoff.get_by(started + self.read_timeout, self._clock)
        except ChannelEmpty:
            self._stalled = True
            since = self._reading_since
            waited = self._clock() - (started if since is None else min(since, started))
            raise SourceStalledError(
                f"{self._source.source_id}: the source stalled: no frame for {waited:.1f} s, "
                f"more than its read timeout of {self.read_timeout:g} s "
                f"({self.frames_read} frames before)"
            ) from None
        except ChannelClosed:
            if self._error is not None:
                raise self._error from None
            return None

    def close(self) -> None:
        """Take no more frames. A reader waiting to hand one over ends at once; one
        inside the source ends when its read returns. Idempotent, any thread."""
        self._handoff.close()

    def report_blocked(self) -> None:
        """Warn, naming the reader thread, if it is left blocked in the source.

        Called once the pipeline stopped reading. A stall already reported by
        `next` needs no second word.
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
        frames: Iterator[Frame] = iter(())
        try:
            self._reading_since = self._clock()
            frames = iter(self._source)
            while (frame := next(frames, None)) is not None:
                self._reading_since = None
                self.frames_read += 1
                self._handoff.put(frame)
                self._reading_since = self._clock()
        except ChannelClosed:
            pass  # the capture stage stopped taking frames
        except BaseException as exc:
            self._error = exc  # raised by `next` in the capture stage
        finally:
            self._reading_since = None
            self._handoff.close()
            _close_iterator(frames)


def _close_iterator(iterator: Iterator[Any]) -> None:
    close = getattr(iterator, "close", None)
    if close is None:
        return
    try:
        close()
    except ValueError:
        pass  # "generator already executing": `source.close()` is closing it right now
