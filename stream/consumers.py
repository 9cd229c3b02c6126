"""Consumers of a pipeline's ring buffer: attached consumers, `on_poses` callbacks and
iterators.

An attached consumer (`RingConsumer`: the browser preview, the pose publisher, or
one of the user's own) is given the run when the pipeline starts (`PipelineRun`: the
ring, the model, the newest frame, the stats) and runs in a stage thread of its
own, reading the ring through its own reader until the ring is closed; its figures
join the pipeline's stats (`report`). Callbacks and iterators are the short forms
for a function of each record and for a loop.

Each consumer reads the ring through its own reader. A lossless consumer's reader
makes the ring's writer (the emit stage) wait for it, until it stalls the writer
longer than its stall timeout; a lagging one skips records when it falls behind.
The ring does the waiting; this module keeps the counts that `Pipeline.stats`
reports and keeps a callback's faults to that callback:

- a callback (or its `on_skip`) that raises is logged at once, with its traceback,
  to this module's logger, and detached; its error is reported to the pipeline,
  which raises the first one when it is left. With ``on_error="stop"`` the pipeline
  is also stopped (frames already in the engine are still saved);
- a callback that never returns is not waited for: once the ring is closed,
  `Consumers.drain` gives up on a callback that has spent longer than its stall
  timeout on one record (or, when stopping, on any still running at the deadline),
  and its daemon thread is abandoned with a warning.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any, Literal, Protocol, get_args

import attrs

from sleap_live.engines.types import ModelInfo
from sleap_live.stream.clock import CLOCK_POLL, MONOTONIC, Clock
from sleap_live.stream.errors import PipelineError
from sleap_live.stream.experiment.experiment import Experiment
from sleap_live.stream.ring import DEFAULT_STALL_TIMEOUT, RingBuffer, RingReader
from sleap_live.stream.stats import ConsumerStats, PipelineStats
from sleap_live.stream.types import PoseRecord

logger = logging.getLogger(__name__)

OnError = Literal["detach", "stop"]


class LatestFrame:
    """The newest frame's image and the ring sequence number of its poses.

    The emit stage `put`s every frame while an attached consumer takes frames; the
    consumer `get`s the newest when it is ready for one. The image is the batch's
    own (host array or device tensor), which no stage writes to again, so a
    reference is enough.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: tuple[int, Any] | None = None

    def put(self, sequence: int, image: Any) -> None:
        """Replace the held frame (never waits for the reader)."""
        with self._lock:
            self._item = (sequence, image)

    def get(self) -> tuple[int, Any] | None:
        """The newest (sequence, image), or None before the first frame."""
        with self._lock:
            return self._item


@attrs.frozen
class PipelineRun:
    """What a consumer attached to a pipeline is given when the pipeline starts.

    Attributes:
        ring: the pipeline's ring buffer. A reader made in `RingConsumer.start`
            begins at the first record.
        info: the model the poses come from.
        frames: the newest frame with its record's ring sequence number, filled by
            the emit stage when an attached consumer `takes_frames`.
        stats: the pipeline's stats now (`Pipeline.stats`).
        experiment: the experiment the emit stage decides (`Pipeline(experiment=)`),
            whose rules' states each record carries (`PoseRecord.rules_on`); None
            without one.
    """

    ring: RingBuffer
    info: ModelInfo
    frames: LatestFrame
    stats: Callable[[], PipelineStats]
    experiment: Experiment | None = None


class RingConsumer(Protocol):
    """A consumer `Pipeline.attach` runs in a stage thread of its own: the browser
    preview (`PreviewServer`), the pose publisher (`Publisher`), or a user's own.

    It never holds up the pipeline unless its own ring reader is lossless. An
    exception from its thread is the pipeline's error, raised when it is left.

    Attributes:
        name: its stage's name, unique among the pipeline's attached consumers.
        takes_frames: whether it reads `PipelineRun.frames` (frames are handed to
            it only then).
    """

    name: str
    takes_frames: bool

    def start(self, run: PipelineRun) -> Callable[[], None]:
        """Set up for `run` (make its ring reader) and return its thread's body, which
        returns once the ring is closed and drained. Called by `Pipeline.start`
        before the first record is written."""
        ...

    def report(self, stats: PipelineStats) -> PipelineStats:
        """`stats` with this consumer's figures added; `stats` itself if it has none."""
        ...


class Consumer:
    """A ring reader plus what `stats` says about it.

    Args:
        name: the callback's name, or "iterator".
        reader: its cursor over the ring.
        thread: ident of the thread the consumer reads in; set by a callback's own
            thread when it starts.
    """

    def __init__(self, name: str, reader: RingReader, thread: int | None = None) -> None:
        self.name = name
        self.reader = reader
        self.thread = thread
        # A lossless consumer attached late starts at the oldest record in the ring;
        # the ones before it are skipped too.
        self._skipped_before = reader.position if reader.lossless else 0
        self.delivered = 0
        self.error: BaseException | None = None
        self.abandoned = False

    @property
    def skipped(self) -> int:
        """Records this consumer never saw."""
        return self._skipped_before + self.reader.missed

    def take(self) -> PoseRecord | None:
        """The next record, waiting for it; None once the ring is closed and drained."""
        record = self.reader.wait_next()
        if record is not None:
            self.delivered += 1
        return record

    def stats(self) -> ConsumerStats:
        return ConsumerStats(
            name=self.name,
            delivered=self.delivered,
            skipped=self.skipped,
            error=None if self.error is None else _describe(self.error),
            stalled=self.reader.stalled or self.abandoned,
        )


class CallbackConsumer(Consumer):
    """A consumer whose records go to `callback` in a thread of its own.

    Attributes:
        stage: the name of its thread's stage, unique in the pipeline.
        busy_since: when (on the pipeline's clock) the callback got the record it is
            on; None between records.
        finished: whether its thread has returned.
    """

    def __init__(
        self,
        name: str,
        stage: str,
        reader: RingReader,
        callback: Callable[[PoseRecord], object],
        on_skip: Callable[[int], object] | None,
        on_error: OnError,
    ) -> None:
        super().__init__(name, reader)
        self.stage = stage
        self.callback = callback
        self.on_skip = on_skip
        self.on_error: OnError = on_error
        self.busy_since: float | None = None
        self.finished = False

    def stalled_at(self, now: float) -> bool:
        """Whether it has spent longer than its stall timeout on one record by `now`."""
        timeout = self.reader.stall_timeout
        return (
            self.busy_since is not None and timeout is not None and now - self.busy_since >= timeout
        )


class Consumers:
    """Every consumer attached to one ring.

    Args:
        ring: the pipeline's ring buffer.
        lossless_by_default: whether a consumer that does not choose is lossless.
        report: called with a failed callback's stage and its `PipelineError`, for
            the pipeline to raise when it is left.
        halt: stops the pipeline (for ``on_error="stop"``).
        clock: what stall timeouts are measured on (the ring's clock).
    """

    def __init__(
        self,
        ring: RingBuffer,
        *,
        lossless_by_default: bool,
        report: Callable[[str, BaseException], None],
        halt: Callable[[], None],
        clock: Clock = MONOTONIC,
    ) -> None:
        self._ring = ring
        self._lossless_by_default = lossless_by_default
        self._report = report
        self._halt = halt
        self._clock = clock
        self._attached: list[Consumer] = []
        # The callbacks among them: the ones with threads of their own.
        self._callbacks: list[CallbackConsumer] = []
        # A callback thread finished (drain waits for this).
        self._changed = threading.Condition()

    def attach(self, name: str, lossless: bool | None, thread: int | None = None) -> Consumer:
        """A new consumer; lossless ones start at the oldest record still in the ring."""
        consumer = Consumer(name, self._reader(name, lossless, DEFAULT_STALL_TIMEOUT), thread)
        self._attached.append(consumer)
        return consumer

    def callback(
        self,
        callback: Callable[[PoseRecord], object],
        on_skip: Callable[[int], object] | None,
        lossless: bool | None,
        on_error: str = "detach",
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
    ) -> tuple[str, Callable[[], None]]:
        """A new consumer for `callback`: the name of its stage and its thread's body.

        Raises:
            ValueError: `on_error` is not "detach" or "stop", or `stall_timeout` is
                not None or a positive, finite number of seconds.
        """
        if on_error not in get_args(OnError):
            raise ValueError(f"on_error must be 'detach' or 'stop', got {on_error!r}")
        checked: OnError = "stop" if on_error == "stop" else "detach"
        name = getattr(callback, "__qualname__", type(callback).__name__)
        stages = {c.stage for c in self._callbacks}
        stage, n = f"consumer {name}", 1
        while stage in stages:  # two lambdas: their threads must be told apart
            n += 1
            stage = f"consumer {name} ({n})"
        reader = self._reader(f"on_poses callback {name}", lossless, stall_timeout)
        consumer = CallbackConsumer(name, stage, reader, callback, on_skip, checked)
        self._attached.append(consumer)
        self._callbacks.append(consumer)
        return stage, functools.partial(self._call_back, consumer)

    def stages(self) -> tuple[str, ...]:
        """The stages of the callbacks' threads."""
        return tuple(c.stage for c in list(self._callbacks))

    def release_thread(self, thread: int) -> None:
        """Consumers of `thread` stop holding the writer: that thread is not consuming."""
        for consumer in list(self._attached):
            if consumer.thread == thread:
                consumer.reader.detach()

    def drain(
        self, timeout: float | None, *, give_up_at_timeout: bool, running: Collection[str]
    ) -> list[str]:
        """Wait for the callbacks to finish the records left in a closed ring.

        Waits until each callback thread (of the stages in `running`) has returned
        or is stalled (on one record longer than its stall timeout), or `timeout`
        passes. Every callback still running then that is stalled (or, with
        `give_up_at_timeout`, any callback still running, and the one whose thread
        calls this) is abandoned: it gets no more records, a warning names it, and
        its stage is returned so that the caller stops waiting for it. Its daemon
        thread runs on until its callback returns.

        Args:
            timeout: most real seconds to wait; None: until each has returned or stalled.
            give_up_at_timeout: abandon the callbacks still running at `timeout`.
            running: the stages whose threads run (callbacks never started are not
                waited for).

        Returns:
            The stages of the callbacks abandoned.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        me = threading.get_ident()
        with self._changed:
            while True:
                busy = [
                    c
                    for c in self._callbacks
                    if c.stage in running and not (c.finished or c.abandoned)
                ]
                now = self._clock()
                waited_for = [c for c in busy if c.thread != me and not c.stalled_at(now)]
                left = None if deadline is None else deadline - time.monotonic()
                if not waited_for or (left is not None and left <= 0):
                    break
                self._changed.wait(CLOCK_POLL if left is None else min(left, CLOCK_POLL))
        given_up = [c for c in busy if give_up_at_timeout or c not in waited_for]
        for consumer in given_up:
            consumer.abandoned = True
            if consumer.thread == me:
                continue  # the pipeline is being stopped from inside this callback
            since = consumer.busy_since
            logger.warning(
                "on_poses callback %s has been running on one record%s and did not return; "
                "the pipeline stopped without it and its thread is abandoned",
                consumer.name,
                "" if since is None else f" for {now - since:.3g} s",
            )
        return [consumer.stage for consumer in given_up]

    def stats(self) -> tuple[ConsumerStats, ...]:
        return tuple(consumer.stats() for consumer in list(self._attached))

    def _reader(self, name: str, lossless: bool | None, stall_timeout: float | None) -> RingReader:
        if lossless is None:
            lossless = self._lossless_by_default
        return self._ring.reader(
            from_oldest=lossless, lossless=lossless, stall_timeout=stall_timeout, name=name
        )

    def _call_back(self, consumer: CallbackConsumer) -> None:
        """Hand every record to the callback until the ring is drained, the callback
        fails or it is abandoned (the body of its thread).

        `on_skip(n)` comes before the first record after a gap of `n` records.
        """
        consumer.thread = threading.get_ident()
        reported = 0
        try:
            while not consumer.abandoned and (record := consumer.take()) is not None:
                consumer.busy_since = self._clock()
                try:
                    if consumer.skipped != reported and consumer.on_skip is not None:
                        consumer.on_skip(consumer.skipped - reported)
                    reported = consumer.skipped
                    consumer.callback(record)
                except Exception as exc:
                    self._failed(consumer, record, exc)
                    return
                finally:
                    consumer.busy_since = None
        finally:
            consumer.reader.detach()
            with self._changed:
                consumer.finished = True
                self._changed.notify_all()

    def _failed(self, consumer: CallbackConsumer, record: PoseRecord, exc: Exception) -> None:
        """Detach a callback that raised, say so now, and report its error."""
        consumer.reader.detach()
        stop = consumer.on_error == "stop"
        logger.error(
            "on_poses callback %s raised on frame %d; %s",
            consumer.name,
            record.frame_index,
            "stopping the pipeline (on_error='stop')"
            if stop
            else "it is detached and the pipeline goes on",
            exc_info=exc,
        )
        consumer.error = exc  # shown by stats once the log says why
        error = PipelineError(
            f"on_poses callback {consumer.name} failed on frame {record.frame_index}: "
            f"{_describe(exc)}"
        )
        error.__cause__ = exc
        self._report(consumer.stage, error)
        if stop:
            self._halt()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
