"""Ring buffer of pose records: one writer, lagging readers and lossless readers.

The pipeline's last stage writes every `PoseRecord` into a `RingBuffer`; consumers
(closed-loop controllers, the dashboard, iterators) read from it, each through its
own `RingReader` cursor. Storage is preallocated numpy arrays with one slot per
record, so writing copies a few small arrays and never allocates.

Two kinds of reader:

- *lagging* (the default): never holds the writer back. A reader that falls more
  than ``capacity`` records behind resumes at the oldest record still in the ring
  and counts the records it missed.
- *lossless* (``reader(lossless=True)``): the writer waits before overwriting a
  record this reader has not read yet, so it sees every record. `RingReader.detach`
  (or `RingBuffer.stop_waiting` for all of them) turns it into a lagging reader, and
  so does the writer itself, with a logged warning, when the reader has kept it
  waiting for one record longer than the reader's ``stall_timeout`` (seconds on the
  ring's clock): a consumer that stops consuming cannot stop the pipeline.

Consistency without locking readers out while they copy: each slot carries the
sequence number of the record it holds (``-1`` while being written). A reader
copies a slot and then checks the sequence number again (a seqlock); if the writer
overwrote the slot in the meantime the copy is discarded and the record counted as
missed. The writer holds the ring's lock only to publish the new count, and to wait
for lossless readers.

Records are numbered from 0 in the order written (their *sequence*); record ``s``
lives in slot ``s % capacity`` until ``capacity`` more records have been written.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator

import attrs
import numpy as np

from sleap_live.engines.types import FrameBoxes, FrameMasks, FramePoses
from sleap_live.stream.clock import CLOCK_POLL, MONOTONIC, Clock
from sleap_live.stream.types import PoseRecord

logger = logging.getLogger(__name__)

# Seconds a lossless reader may keep the writer waiting for one record before it is
# detached: far longer than any healthy consumer takes per record, short enough that
# a stuck one costs a few seconds of waiting, not the session.
DEFAULT_STALL_TIMEOUT = 5.0


@attrs.frozen
class RingStats:
    """A snapshot of a ring buffer's counters.

    Attributes:
        capacity: records the ring holds.
        written: records written so far (the next record's sequence number).
        truncated_records: records that had more than ``max_instances`` instances.
        truncated_instances: instances dropped from those records.
        closed: whether `RingBuffer.close` was called.
    """

    capacity: int
    written: int
    truncated_records: int
    truncated_instances: int
    closed: bool


@attrs.frozen(eq=False)
class RingBatch:
    """What `RingReader.read_since` returns.

    Attributes:
        records: copies of the records read, oldest first.
        missed: records this call skipped because the writer had already overwritten
            them (the reader fell more than ``capacity`` records behind).
    """

    records: tuple[PoseRecord, ...]
    missed: int


def check_stall_timeout(value: float | None) -> float | None:
    """`value` if it is None or a positive, finite number of seconds.

    Raises:
        ValueError: anything else, in one line.
    """
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value > 0):
        raise ValueError(
            f"stall_timeout must be a positive number of seconds or None, got {value!r}"
        )
    return float(value)


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


class RingBuffer:
    """Fixed-size ring of pose records with one writer and independent readers.

    Args:
        capacity: records kept; a lagging reader more than this far behind misses records.
        max_instances: instances stored per record; extra ones are dropped (the
            first ``max_instances`` are kept) and counted in `stats`.
        n_nodes: nodes per instance; every written record must have this many.
        max_boxes: boxes stored per record (a box detector's `FramePoses.boxes`);
            0 stores none, and records read back have `boxes` None.
        masks: whether records carry a segmentation model's masks (`FramePoses.masks`):
            each slot keeps a reference to its record's, which nothing changes once
            decoded (the masks vary in size, unlike the arrays above).
        clock: what lossless readers' stall timeouts are measured on.

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if an argument is below 1.
    """

    def __init__(
        self,
        capacity: int,
        max_instances: int,
        n_nodes: int,
        *,
        max_boxes: int = 0,
        masks: bool = False,
        clock: Clock = MONOTONIC,
    ) -> None:
        self._clock = clock
        self._capacity = _positive_int("capacity", capacity)
        self._max_instances = _positive_int("max_instances", max_instances)
        self._n_nodes = _positive_int("n_nodes", n_nodes)
        shape = (capacity, max_instances)
        self._sequence = np.full(capacity, -1, np.int64)
        self._frame_index = np.zeros(capacity, np.int64)
        self._source_id: list[str] = [""] * capacity
        self._rules_on: list[tuple[bool, ...]] = [()] * capacity
        self._capture_time = np.zeros(capacity, np.float64)
        self._ready_time = np.zeros(capacity, np.float64)
        self._points = np.full((*shape, n_nodes, 2), np.nan, np.float32)
        self._point_scores = np.full((*shape, n_nodes), np.nan, np.float32)
        self._instance_scores = np.full(shape, np.nan, np.float32)
        self._n_instances = np.zeros(capacity, np.int32)
        self._identities = np.full(shape, -1, np.int32)
        self._max_boxes = max_boxes
        self._boxes = np.full((capacity, max_boxes, 4), np.nan, np.float32)
        self._box_scores = np.full((capacity, max_boxes), np.nan, np.float32)
        self._box_categories = np.full((capacity, max_boxes), -1, np.int32)
        self._n_boxes = np.full(capacity, -1, np.int32)  # -1: the record had no boxes
        self._masks: list[FrameMasks | None] | None = [None] * capacity if masks else None
        # Serialises writers (and close) without ever being taken by readers.
        self._write_lock = threading.Lock()
        # Guards the count, the lossless readers, the sleepers and the flags below.
        self._lock = threading.Lock()
        # The wake-up locks of readers waiting for a record (`RingReader._sleep`):
        # released when one is written, or the ring closed.
        self._sleepers: list[threading.Lock] = []
        self._room = threading.Condition(self._lock)  # a lossless reader moved on
        self._lossless: set[RingReader] = set()
        self._waits_for_readers = True
        self._written = 0
        self._closed = False
        self._truncated_records = 0
        self._truncated_instances = 0

    @property
    def capacity(self) -> int:
        """Records kept before the oldest is overwritten."""
        return self._capacity

    @property
    def max_instances(self) -> int:
        """Instances stored per record."""
        return self._max_instances

    @property
    def n_nodes(self) -> int:
        """Nodes per instance."""
        return self._n_nodes

    @property
    def written(self) -> int:
        """Records written so far; also the sequence number the next write gets."""
        return self._written

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def write(self, record: PoseRecord) -> int:
        """Copy a record into the next slot and wake waiting readers.

        Waits first while a lossless reader has not yet read the record that slot
        holds, until that reader moves on, detaches, or `stop_waiting` is called; a
        reader that keeps it waiting longer than its stall timeout is detached, with
        a warning.
        Meant for one writer thread; concurrent writers are serialised by a lock of
        their own, which readers never take.

        Args:
            record: poses of one frame; its instances must have `n_nodes` nodes.

        Returns:
            The record's sequence number.

        Raises:
            ValueError: if the ring is closed or the poses have the wrong shape.
        """
        poses = record.poses
        self._check_shapes(record)
        n_kept = min(poses.n_instances, self._max_instances)
        with self._write_lock:
            if self._closed:
                raise ValueError("cannot write to a closed ring buffer")
            sequence = self._written
            with self._room:
                self._wait_for_readers(sequence)
            if poses.n_instances > n_kept:
                self._truncated_records += 1
                self._truncated_instances += poses.n_instances - n_kept
            slot = sequence % self._capacity
            self._sequence[slot] = -1
            self._frame_index[slot] = record.frame_index
            self._source_id[slot] = record.source_id
            self._rules_on[slot] = record.rules_on
            self._capture_time[slot] = record.capture_time
            self._ready_time[slot] = record.ready_time
            self._n_instances[slot] = n_kept
            self._points[slot, :n_kept] = poses.points[:n_kept]
            self._point_scores[slot, :n_kept] = poses.point_scores[:n_kept]
            self._instance_scores[slot, :n_kept] = poses.instance_scores[:n_kept]
            self._identities[slot, :n_kept] = poses.identities[:n_kept]
            if n_kept < self._max_instances:  # (a numpy call costs a microsecond)
                self._points[slot, n_kept:] = np.nan
                self._point_scores[slot, n_kept:] = np.nan
                self._instance_scores[slot, n_kept:] = np.nan
                self._identities[slot, n_kept:] = -1
            if self._max_boxes:
                self._write_boxes(slot, poses.boxes)
            if self._masks is not None:
                self._masks[slot] = poses.masks
            self._sequence[slot] = sequence
            with self._lock:
                self._written = sequence + 1
                self._wake_readers()
        return sequence

    def _write_boxes(self, slot: int, boxes: FrameBoxes | None) -> None:
        """Copies a record's boxes (the first `max_boxes`, as a detector has no more)."""
        n = -1 if boxes is None else min(boxes.n_boxes, self._max_boxes)
        self._n_boxes[slot] = n
        if boxes is not None:
            self._boxes[slot, :n] = boxes.boxes[:n]
            self._box_scores[slot, :n] = boxes.scores[:n]
            self._box_categories[slot, :n] = boxes.categories[:n]

    def _read_boxes(self, slot: int) -> FrameBoxes | None:
        n = int(self._n_boxes[slot])
        if n < 0:
            return None
        return FrameBoxes(
            boxes=self._boxes[slot, :n].copy(),
            scores=self._box_scores[slot, :n].copy(),
            categories=self._box_categories[slot, :n].copy(),
        )

    def stop_waiting(self) -> None:
        """Make `write` stop waiting for lossless readers, now and from now on. Idempotent.

        Wakes a writer that is waiting. Lossless readers then lag like any other
        reader and count what they miss; `close` does this too.
        """
        with self._room:
            self._waits_for_readers = False
            self._room.notify_all()

    def close(self) -> None:
        """Refuse further writes and wake every waiting reader and writer. Idempotent.

        Readers still get the records left in the ring, then their iteration ends
        and `RingReader.wait_next` returns None.
        """
        self.stop_waiting()
        with self._write_lock, self._lock:
            self._closed = True
            self._wake_readers()

    def reader(
        self,
        *,
        from_oldest: bool = False,
        lossless: bool = False,
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
        name: str = "ring reader",
    ) -> RingReader:
        """A new independent cursor over the ring.

        Args:
            from_oldest: start at the oldest record still in the ring instead of
                the next record written.
            lossless: make the writer wait for this reader (see the module docs)
                until it is detached.
            stall_timeout: most seconds (on the ring's clock) a lossless reader may
                keep the writer waiting for one record before the writer detaches
                it; None waits as long as it takes.
            name: what the warning about a stalled reader calls it.

        Raises:
            ValueError: `stall_timeout` is not None or a positive, finite number.
        """
        return RingReader(self, from_oldest, lossless, check_stall_timeout(stall_timeout), name)

    def read(self, sequence: int) -> PoseRecord | None:
        """A copy of record ``sequence``, or None if it is not (or no longer) in the ring."""
        if sequence < 0:
            return None
        slot = sequence % self._capacity
        if self._sequence[slot] != sequence:
            return None
        n_kept = int(self._n_instances[slot])
        poses = FramePoses(
            points=self._points[slot, :n_kept].copy(),
            point_scores=self._point_scores[slot, :n_kept].copy(),
            instance_scores=self._instance_scores[slot, :n_kept].copy(),
            identities=self._identities[slot, :n_kept].copy(),
            boxes=self._read_boxes(slot) if self._max_boxes else None,
            masks=None if self._masks is None else self._masks[slot],
        )
        record = PoseRecord(
            frame_index=int(self._frame_index[slot]),
            capture_time=float(self._capture_time[slot]),
            ready_time=float(self._ready_time[slot]),
            source_id=self._source_id[slot],
            poses=poses,
            rules_on=self._rules_on[slot],
        )
        # Seqlock check: the slot was rewritten while we copied, so the copy may be torn.
        if self._sequence[slot] != sequence:
            return None
        return record

    def stats(self) -> RingStats:
        """A snapshot of the ring's counters."""
        with self._write_lock:
            return RingStats(
                capacity=self._capacity,
                written=self._written,
                truncated_records=self._truncated_records,
                truncated_instances=self._truncated_instances,
                closed=self._closed,
            )

    def _wake_readers(self) -> None:
        """Release every waiting reader's wake-up lock (holding `_lock`)."""
        for sleeper in self._sleepers:
            sleeper.release()
        self._sleepers.clear()

    def _holding_back(self, sequence: int) -> list[RingReader]:
        """Lossless readers that still need the record writing `sequence` would overwrite."""
        if not self._waits_for_readers:
            return []
        return [r for r in self._lossless if sequence - r.position >= self._capacity]

    def _wait_for_readers(self, sequence: int) -> None:
        """Wait (holding `_room`) until no lossless reader needs the slot of `sequence`;
        detach, with a warning, each reader that stalls the writer past its timeout."""
        started: float | None = None
        while waiting_for := self._holding_back(sequence):
            now = self._clock()
            started = now if started is None else started
            waited = now - started
            timeouts = [r.stall_timeout for r in waiting_for if r.stall_timeout is not None]
            stalled = [
                r for r in waiting_for if r.stall_timeout is not None and waited >= r.stall_timeout
            ]
            for reader in stalled:
                reader._stalled = True
                reader._holds_writer = False
                self._lossless.discard(reader)
                logger.warning(
                    "%s kept the pipeline waiting %g s for it to read one record; it is "
                    "detached and now skips records when it falls behind",
                    reader.name,
                    reader.stall_timeout,
                )
            if stalled:
                continue
            left = min(timeouts) - waited if timeouts else None
            self._room.wait(None if left is None else min(left, CLOCK_POLL))

    def _check_shapes(self, record: PoseRecord) -> None:
        poses, n_nodes = record.poses, self._n_nodes
        n = poses.n_instances
        expected = (
            ("points", (n, n_nodes, 2)),
            ("point_scores", (n, n_nodes)),
            ("instance_scores", (n,)),
            ("identities", (n,)),
        )
        for name, shape in expected:
            actual = getattr(poses, name).shape
            if actual != shape:
                raise ValueError(
                    f"poses of frame {record.frame_index} have {name} of shape {actual}; "
                    f"this ring buffer needs {shape} ({n_nodes} nodes per instance)"
                )


class RingReader:
    """One consumer's cursor over a `RingBuffer`; get one from `RingBuffer.reader`.

    A reader is cheap and private to the thread that uses it. A lagging reader is
    not tracked by the ring, so dropping one needs no cleanup; a lossless one holds
    the writer back until `detach` is called. Everything returned is a copy the
    caller owns.

    Attributes:
        missed: records the writer overwrote before this reader got to them. Records
            skipped on purpose by `latest` are not counted.
        stall_timeout: most seconds a lossless reader may keep the writer waiting.
        name: what warnings call this reader.
    """

    def __init__(
        self,
        ring: RingBuffer,
        from_oldest: bool,
        lossless: bool,
        stall_timeout: float | None,
        name: str,
    ) -> None:
        self._ring = ring
        self.missed = 0
        self.stall_timeout = stall_timeout
        self.name = name
        self._stalled = False
        # Held but while the writer wakes this reader (`_sleep`).
        self._wake = threading.Lock()
        self._wake.acquire()
        # Placed under the ring's lock, so a waiting writer sees a lossless reader
        # and its position together.
        with ring._lock:
            written = ring.written
            self._position = max(0, written - ring.capacity) if from_oldest else written
            self._holds_writer = lossless
            if lossless:
                ring._lossless.add(self)

    @property
    def position(self) -> int:
        """Sequence number of the next record this reader will return."""
        return self._position

    @property
    def lossless(self) -> bool:
        """Whether the writer waits for this reader (see `RingBuffer.reader`)."""
        return self._holds_writer

    @property
    def stalled(self) -> bool:
        """Whether the writer detached this reader for keeping it waiting too long."""
        return self._stalled

    @property
    def done(self) -> bool:
        """Whether the ring is closed and this reader has consumed everything."""
        return self._ring.closed and self._position >= self._ring.written

    def detach(self) -> None:
        """Stop holding the writer back; the reader goes on reading as a lagging one.

        Idempotent; a no-op for a lagging reader.
        """
        with self._ring._room:
            self._holds_writer = False
            self._ring._lossless.discard(self)
            self._ring._room.notify_all()

    def latest(self) -> PoseRecord | None:
        """The newest record in the ring (None if nothing was written yet).

        Moves the cursor past it, so `wait_next` then waits for a newer one. The
        records jumped over are not counted as missed.
        """
        while True:
            written = self._ring.written
            if written == 0:
                return None
            record = self._ring.read(written - 1)
            if record is not None:
                self._move_to(max(self._position, written))
                return record

    def wait_next(self, timeout: float | None = None) -> PoseRecord | None:
        """The next record in order, waiting for it to be written.

        If a lagging reader fell more than ``capacity`` records behind, it resumes at
        the oldest record still in the ring and adds the gap to `missed`.

        Args:
            timeout: most (real) seconds to wait; None waits until a record arrives
                or the ring is closed.

        Returns:
            A copy of the record, or None if the timeout passed or the ring is
            closed and this reader has consumed everything (see `done`).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ring = self._ring
        while True:
            while self._position >= ring._written and not ring._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._sleep(remaining)
            written = ring._written
            if self._position >= written:
                return None
            record = self._next_record(written)
            if record is not None:
                return record

    def read_since(self) -> RingBatch:
        """Every record written since the last read, without waiting.

        Returns:
            The records (possibly none) and how many were missed on the way.
        """
        missed_before = self.missed
        written = self._ring.written
        records = []
        while self._position < written:
            record = self._next_record(written)
            if record is not None:
                records.append(record)
        return RingBatch(records=tuple(records), missed=self.missed - missed_before)

    def __iter__(self) -> Iterator[PoseRecord]:
        """Yield records in order, waiting for new ones, until the ring is closed and drained."""
        while (record := self.wait_next()) is not None:
            yield record

    def _sleep(self, timeout: float | None) -> None:
        """Wait up to `timeout` real seconds (None: no limit) for a record to be
        written or the ring closed, on this reader's own lock: the writer releases
        it, one C call each side (a `threading.Condition` makes a lock per wait and
        runs a few dozen lines of Python each side, on the way to the poses' decision)."""
        ring = self._ring
        with ring._lock:
            if self._position < ring._written or ring._closed:
                return
            ring._sleepers.append(self._wake)
        if self._wake.acquire(timeout=-1 if timeout is None else timeout):
            return
        with ring._lock:
            if self._wake in ring._sleepers:
                ring._sleepers.remove(self._wake)
            else:
                # Released after the wait timed out: locked again for the next one.
                self._wake.acquire(blocking=False)

    def _next_record(self, written: int) -> PoseRecord | None:
        """Copy the record at the cursor and advance; None (and counted) if overwritten."""
        oldest = max(0, self._ring.written - self._ring.capacity)
        if self._position < oldest:
            self.missed += oldest - self._position
            self._move_to(oldest)
            if self._position >= written:
                return None
        record = self._ring.read(self._position)
        if record is None:
            self.missed += 1
        self._move_to(self._position + 1)
        return record

    def _move_to(self, position: int) -> None:
        """Advance the cursor; a lossless reader tells a waiting writer it has room."""
        self._position = position
        if self._holds_writer:
            with self._ring._room:
                self._ring._room.notify_all()
