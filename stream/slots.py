"""The frames channel of a pipeline: one slot per source of its group.

With several cameras, a channel in arrival order would let a fast camera push a
slow one's frames out, and hand the batcher two frames of one camera. Here each
source has a slot of its own, holding up to `depth` frames (one for a group of
several: a batch takes one frame of each; a batch's worth or two for one source,
whose batches are its frames in order):

- ``"latest"`` (live): `put` never waits; a new frame pushes out the oldest one still
  waiting in its source's slot, which is counted as dropped for that source. A batch
  then holds the newest frames, which keeps latency near one frame interval.
- ``"block"`` (recorded): `put` waits while its source's slot is full, so nothing is
  dropped and the sources advance together.

A source whose reader ended is marked with `end`, so a batch never waits for it.
Closing is one-way: getters drain what is waiting, then get `ChannelClosed`.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from typing import Literal

from sleap_live.stream.channel import ChannelStats, Counts
from sleap_live.stream.clock import CLOCK_POLL, Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty
from sleap_live.stream.types import Frame

SlotPolicy = Literal["latest", "block"]


class SourceSlots:
    """A frame slot per source, between the source readers and the batcher.

    Args:
        source_ids: the sources whose frames come in. The slot of a single source
            takes every frame its reader puts, whatever id the frame carries.
        policy: ``"latest"`` or ``"block"`` (see the module docstring).
        depth: most frames waiting in each slot.

    Raises:
        ValueError: no source, a repeated id, an unknown policy, or a depth below 1.
    """

    def __init__(self, source_ids: Sequence[str], policy: SlotPolicy, depth: int = 1) -> None:
        if not source_ids or len(set(source_ids)) != len(source_ids):
            raise ValueError(f"source slots need distinct source ids, got {list(source_ids)}")
        if policy not in ("latest", "block"):
            raise ValueError(f"slot policy must be 'latest' or 'block', got {policy!r}")
        if depth < 1:
            raise ValueError(f"a slot holds at least one frame, got depth {depth}")
        self._policy = policy
        self._depth_each = depth
        self._slots: dict[str, collections.deque[Frame]] = {
            source: collections.deque() for source in source_ids
        }
        self._ended: set[str] = set()
        self._dropped = dict.fromkeys(source_ids, 0)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._counts = Counts()

    @property
    def source_ids(self) -> tuple[str, ...]:
        return tuple(self._slots)

    def put(self, frame: Frame) -> None:
        """Hand over a frame of one of the sources (see the policies).

        Raises:
            ChannelClosed: the slots are closed, including while waiting for room.
            KeyError: a frame of no source these slots hold.
        """
        source = frame.source_id if len(self._slots) > 1 else next(iter(self._slots))
        with self._changed:
            if source not in self._slots:
                raise KeyError(f"{source}: not one of the sources {list(self._slots)}")
            slot = self._slots[source]
            if self._policy == "block":
                while len(slot) >= self._depth_each and not self._closed:
                    self._changed.wait()
            if self._closed:
                raise ChannelClosed("cannot put into closed source slots")
            if len(slot) >= self._depth_each:
                slot.popleft()
                self._dropped[source] += 1
                self._counts.dropped += 1
            slot.append(frame)
            self._counts.added(self._depth())
            self._changed.notify_all()

    def end(self, source_id: str) -> None:
        """`source_id` sends no more frames: batches stop waiting for it."""
        with self._changed:
            self._ended.add(source_id)
            self._changed.notify_all()

    def get(self, timeout: float | None = None, *, skip: Collection[str] = ()) -> Frame:
        """The oldest waiting frame (by capture time) of a source not in `skip`; of
        each source, its frames in the order put.

        Args:
            timeout: most real seconds to wait; None waits as long as needed.
            skip: sources whose frames are not wanted now (already in the batch).

        Raises:
            ChannelClosed: the slots are closed and nothing wanted is waiting.
            ChannelEmpty: the timeout passed, or every source not in `skip` has
                ended with nothing waiting.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                waiting = [
                    slot for source, slot in self._slots.items() if slot and source not in skip
                ]
                if waiting:
                    frame = min(waiting, key=lambda slot: slot[0].timestamp).popleft()
                    self._counts.got += 1
                    self._changed.notify_all()
                    return frame
                if self._closed:
                    raise ChannelClosed("source slots closed and drained")
                if all(source in skip or source in self._ended for source in self._slots):
                    raise ChannelEmpty("every other source has ended")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise ChannelEmpty(f"no frame after waiting {timeout} s")
                self._changed.wait(remaining)

    def get_by(self, deadline: float, clock: Clock, *, skip: Collection[str] = ()) -> Frame:
        """`get`, waiting until `clock` shows `deadline` at most (in `CLOCK_POLL` slices,
        so a clock another thread moves is noticed); an infinite deadline waits as
        long as needed."""
        if math.isinf(deadline):
            return self.get(skip=skip)
        while (remaining := deadline - clock()) > 0:
            try:
                return self.get(min(remaining, CLOCK_POLL), skip=skip)
            except ChannelEmpty:
                if self._all_ended(skip):
                    raise
        return self.get(0, skip=skip)

    def close(self) -> None:
        """Refuse further frames and wake every waiting thread. Idempotent."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def dropped_by_source(self) -> dict[str, int]:
        """Frames each source's newer frame replaced, by source id."""
        with self._lock:
            return dict(self._dropped)

    def stats(self) -> ChannelStats:
        """The counters, in a channel's terms (capacity: `depth` frames per source)."""
        with self._lock:
            capacity = self._depth_each * len(self._slots)
            return self._counts.snapshot(self._depth(), capacity, self._closed)

    def __iter__(self) -> Iterator[Frame]:
        """Frames as they arrive, oldest first, until closed and drained."""
        while True:
            try:
                yield self.get()
            except ChannelClosed:
                return
            except ChannelEmpty:  # every source ended: nothing more comes
                if self._drained_and_ended():
                    return

    def _depth(self) -> int:
        return sum(len(slot) for slot in self._slots.values())

    def _all_ended(self, skip: Collection[str]) -> bool:
        with self._lock:
            return all(source in skip or source in self._ended for source in self._slots)

    def _drained_and_ended(self) -> bool:
        with self._lock:
            return self._depth() == 0 and len(self._ended) == len(self._slots)
