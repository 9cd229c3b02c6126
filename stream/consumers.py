"""Consumers of a pipeline's ring buffer: `on_poses` callbacks and iterators.

Each consumer reads the ring through its own reader. A lossless consumer's reader
makes the ring's writer (the emit stage) wait for it; a lagging one skips records
when it falls behind. The ring does the waiting; this module keeps the counts that
`Pipeline.stats` reports.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from sleap_live.stream.ring import RingBuffer, RingReader
from sleap_live.stream.stats import ConsumerStats
from sleap_live.stream.types import PoseRecord


class Consumer:
    """A ring reader plus what `stats` says about it.

    Args:
        name: the callback's name, or "iterator".
        reader: its cursor over the ring.
        thread: ident of the thread an iterator runs in; None for callbacks.
    """

    def __init__(self, name: str, reader: RingReader, thread: int | None = None) -> None:
        self.name = name
        self.reader = reader
        self.thread = thread
        # A lossless consumer attached late starts at the oldest record in the ring;
        # the ones before it are skipped too.
        self._skipped_before = reader.position if reader.lossless else 0
        self.delivered = 0

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
        return ConsumerStats(name=self.name, delivered=self.delivered, skipped=self.skipped)


class Consumers:
    """Every consumer attached to one ring.

    Args:
        ring: the pipeline's ring buffer.
        lossless_by_default: whether a consumer that does not choose is lossless.
    """

    def __init__(self, ring: RingBuffer, *, lossless_by_default: bool) -> None:
        self._ring = ring
        self._lossless_by_default = lossless_by_default
        self._attached: list[Consumer] = []

    def attach(self, name: str, lossless: bool | None, thread: int | None = None) -> Consumer:
        """A new consumer; lossless ones start at the oldest record still in the ring."""
        if lossless is None:
            lossless = self._lossless_by_default
        reader = self._ring.reader(from_oldest=lossless, lossless=lossless)
        consumer = Consumer(name, reader, thread)
        self._attached.append(consumer)
        return consumer

    def callback(
        self,
        callback: Callable[[PoseRecord], object],
        on_skip: Callable[[int], object] | None,
        lossless: bool | None,
    ) -> tuple[str, Callable[[], None]]:
        """A new consumer for `callback`: the name of its stage and its thread's body."""
        name = getattr(callback, "__qualname__", type(callback).__name__)
        consumer = self.attach(name, lossless)
        return f"consumer {name}", functools.partial(call_back, consumer, callback, on_skip)

    def release_thread(self, thread: int) -> None:
        """Iterators of `thread` stop holding the writer: that thread is not iterating."""
        for consumer in list(self._attached):
            if consumer.thread == thread:
                consumer.reader.detach()

    def stats(self) -> tuple[ConsumerStats, ...]:
        return tuple(consumer.stats() for consumer in list(self._attached))


def call_back(
    consumer: Consumer,
    callback: Callable[[PoseRecord], object],
    on_skip: Callable[[int], object] | None,
) -> None:
    """Hand every record to `callback` until the ring is drained (the body of a thread).

    `on_skip(n)` comes before the first record after a gap of `n` records.
    """
    reported = 0
    try:
        while (record := consumer.take()) is not None:
            if consumer.skipped != reported and on_skip is not None:
                on_skip(consumer.skipped - reported)
            reported = consumer.skipped
            callback(record)
    finally:
        consumer.reader.detach()
