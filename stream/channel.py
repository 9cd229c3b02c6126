"""A bounded channel that carries items from one pipeline stage's thread to the next.

Every edge of the pipeline is a `Channel` with a required capacity and an explicit
policy for a full buffer:

- ``"block"``: `put` waits for room. Backpressure for file input, where every frame
  must be processed.
- ``"drop_oldest"``: `put` never waits; when the buffer is full the oldest item is
  discarded, counted, and handed to ``on_drop``. The latest-frame policy for live
  input, where a stale frame is worth less than a fresh one.

Closing is one-way and idempotent: after `close`, `put` raises `ChannelClosed` and
getters first drain what is left, then raise `ChannelClosed` (iteration just stops).
All waiting happens on `threading.Condition`s, so `close` wakes every blocked caller.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import Generic, Literal, TypeVar, get_args

import attrs

from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, ChannelFull

T = TypeVar("T")

Policy = Literal["block", "drop_oldest"]


@attrs.frozen
class ChannelStats:
    """A snapshot of a channel's counters, taken under its lock.

    Attributes:
        depth: items waiting now.
        peak_depth: most items ever waiting at once.
        capacity: most items the channel holds.
        put_count: items accepted by `put`/`put_nowait` (dropped ones included).
        get_count: items handed out by `get`/`get_nowait`/iteration.
        dropped: items discarded by the ``"drop_oldest"`` policy.
        closed: whether `close` was called.
    """

    depth: int
    peak_depth: int
    capacity: int
    put_count: int
    get_count: int
    dropped: int
    closed: bool


@attrs.define
class Counts:
    """The counters a channel keeps under its lock (`Channel`, and the frames'
    `slots.SourceSlots`): ``put == got + dropped + depth`` always holds."""

    put: int = 0
    got: int = 0
    dropped: int = 0
    peak_depth: int = 0

    def added(self, depth: int) -> None:
        """Count one item put, the channel now holding `depth`."""
        self.put += 1
        self.peak_depth = max(self.peak_depth, depth)

    def snapshot(self, depth: int, capacity: int, closed: bool) -> ChannelStats:
        """These counters with the channel's `depth`, `capacity` and `closed` now."""
        return ChannelStats(
            depth, self.peak_depth, capacity, self.put, self.got, self.dropped, closed
        )


class Channel(Generic[T]):
    """Bounded first-in first-out channel between threads.

    Any number of threads may put and get. Items come out in the order they went in
    (minus those dropped), so ``put_count == get_count + dropped + depth`` always holds.

    Args:
        capacity: most items held at once; an int of at least 1.
        policy: ``"block"`` (default) or ``"drop_oldest"``; see the module docstring.
        on_drop: called with each item the ``"drop_oldest"`` policy discards, in the
            thread that called `put` and outside the channel's lock (so it may use
            the channel). Exceptions it raises propagate out of that `put`, after
            the new item has been accepted.

    Raises:
        TypeError: if capacity is not an int.
        ValueError: if capacity is below 1, the policy is unknown, or ``on_drop`` is
            given with the ``"block"`` policy (which never drops).
    """

    def __init__(
        self,
        capacity: int,
        policy: Policy = "block",
        *,
        on_drop: Callable[[T], object] | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if policy not in get_args(Policy):
            raise ValueError(f"policy must be one of {', '.join(get_args(Policy))}; got {policy!r}")
        if on_drop is not None and policy == "block":
            raise ValueError('on_drop needs policy="drop_oldest"; a blocking channel never drops')
        self._capacity = capacity
        self._policy = policy
        self._on_drop = on_drop
        self._items: collections.deque[T] = collections.deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._closed = False
        self._counts = Counts()

    @property
    def capacity(self) -> int:
        """Most items the channel holds."""
        return self._capacity

    @property
    def policy(self) -> Policy:
        """What `put` does when the channel is full: ``"block"`` or ``"drop_oldest"``."""
        return self._policy

    @property
    def closed(self) -> bool:
        """Whether `close` was called (items may still be waiting to be drained)."""
        return self._closed

    def put(self, item: T, timeout: float | None = None) -> None:
        """Add an item, waiting for room under the ``"block"`` policy.

        Args:
            timeout: most seconds to wait for room; None waits as long as needed.
                Ignored by ``"drop_oldest"``, which never waits.

        Raises:
            ChannelClosed: if the channel is closed, including while waiting.
            ChannelFull: if the timeout passed with the channel still full.
        """
        with self._not_full:
            if self._policy == "block" and not self._not_full.wait_for(
                lambda: len(self._items) < self._capacity or self._closed, timeout
            ):
                raise ChannelFull(
                    f"channel full ({self._capacity} items) after waiting {timeout} s"
                )
            dropped = self._append(item)
        if dropped and self._on_drop is not None:
            self._on_drop(dropped[0])

    def put_nowait(self, item: T) -> None:
        """Add an item without waiting.

        Raises:
            ChannelClosed: if the channel is closed.
            ChannelFull: if a ``"block"`` channel is full.
        """
        with self._lock:
            if self._policy == "block" and len(self._items) >= self._capacity and not self._closed:
                raise ChannelFull(f"channel full ({self._capacity} items)")
            dropped = self._append(item)
        if dropped and self._on_drop is not None:
            self._on_drop(dropped[0])

    def get(self, timeout: float | None = None) -> T:
        """Take the oldest item, waiting for one if the channel is empty.

        Args:
            timeout: most seconds to wait; None waits until an item arrives or the
                channel is closed.

        Raises:
            ChannelClosed: if the channel is closed and drained.
            ChannelEmpty: if the timeout passed with the channel open and empty.
        """
        with self._not_empty:
            if not self._not_empty.wait_for(lambda: self._items or self._closed, timeout):
                raise ChannelEmpty(f"channel empty after waiting {timeout} s")
            return self._pop()

    def get_nowait(self) -> T:
        """Take the oldest item without waiting.

        Raises:
            ChannelClosed: if the channel is closed and drained.
            ChannelEmpty: if the channel is open and empty.
        """
        with self._lock:
            if not self._items and not self._closed:
                raise ChannelEmpty("channel empty")
            return self._pop()

    def close(self) -> None:
        """Refuse further puts and wake every waiting thread. Idempotent.

        Items already in the channel stay there for getters to drain.
        """
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()

    def stats(self) -> ChannelStats:
        """A consistent snapshot of the channel's counters."""
        with self._lock:
            return self._counts.snapshot(len(self._items), self._capacity, self._closed)

    def __iter__(self) -> Iterator[T]:
        """Yield items as they arrive until the channel is closed and drained."""
        while True:
            try:
                yield self.get()
            except ChannelClosed:
                return

    def _append(self, item: T) -> tuple[T] | tuple[()]:
        """Store an item (lock held); return the item dropped to make room, if any."""
        if self._closed:
            raise ChannelClosed("cannot put into a closed channel")
        dropped: tuple[T] | tuple[()] = ()
        if len(self._items) >= self._capacity:
            dropped = (self._items.popleft(),)
            self._counts.dropped += 1
        self._items.append(item)
        self._counts.added(len(self._items))
        self._not_empty.notify()
        return dropped

    def _pop(self) -> T:
        """Remove the oldest item (lock held, channel non-empty or closed)."""
        if not self._items:
            raise ChannelClosed("channel closed and drained")
        item = self._items.popleft()
        self._counts.got += 1
        self._not_full.notify()
        return item
