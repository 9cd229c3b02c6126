"""Tests for the bounded channel between pipeline threads."""

from __future__ import annotations

import queue
import threading

import pytest

from sleap_live.stream.channel import Channel, ChannelStats
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, ChannelFull, StreamError


def run_thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("capacity", "policy", "error", "message"),
    [
        (0, "block", ValueError, "capacity must be at least 1, got 0"),
        (2.0, "block", TypeError, "capacity must be an int, got float"),
        (True, "block", TypeError, "capacity must be an int, got bool"),
        (2, "latest", ValueError, "policy must be one of block, drop_oldest; got 'latest'"),
    ],
)
def test_rejects_bad_arguments(capacity, policy, error, message):
    with pytest.raises(error, match=message):
        Channel(capacity, policy)


def test_on_drop_needs_drop_oldest():
    with pytest.raises(ValueError, match='on_drop needs policy="drop_oldest"'):
        Channel(1, "block", on_drop=print)


def test_fifo_order_and_nowait_twins():
    channel: Channel[int] = Channel(3)
    for item in range(3):
        channel.put_nowait(item)
    with pytest.raises(ChannelFull, match=r"channel full \(3 items\)"):
        channel.put_nowait(3)
    assert [channel.get_nowait() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ChannelEmpty, match="channel empty"):
        channel.get_nowait()


def test_errors_are_catchable_as_stdlib_queue_errors():
    channel: Channel[int] = Channel(1)
    channel.put(0)
    with pytest.raises(queue.Full):
        channel.put(1, timeout=0.01)
    channel.get()
    with pytest.raises(queue.Empty):
        channel.get(timeout=0.01)
    assert issubclass(ChannelClosed, StreamError)


def test_block_policy_put_waits_for_room():
    channel: Channel[int] = Channel(1)
    channel.put(0)
    putter = run_thread(channel.put, 1)
    putter.join(0.05)
    assert putter.is_alive(), "put should wait while the channel is full"
    assert channel.get(timeout=1) == 0
    putter.join(1)
    assert not putter.is_alive()
    assert channel.get(timeout=1) == 1
    assert channel.stats().dropped == 0


def test_block_policy_put_times_out():
    channel: Channel[int] = Channel(1)
    channel.put(0)
    with pytest.raises(ChannelFull, match=r"after waiting 0\.02 s"):
        channel.put(1, timeout=0.02)
    assert channel.stats().put_count == 1


def test_get_times_out_on_an_empty_open_channel():
    with pytest.raises(ChannelEmpty, match=r"after waiting 0\.02 s"):
        Channel(1).get(timeout=0.02)


def test_drop_oldest_never_blocks_and_reports_drops():
    dropped: list[int] = []
    channel: Channel[int] = Channel(2, "drop_oldest", on_drop=dropped.append)
    for item in range(5):
        channel.put(item)
    channel.put_nowait(5)
    assert dropped == [0, 1, 2, 3]
    assert [channel.get_nowait(), channel.get_nowait()] == [4, 5]
    assert channel.stats() == ChannelStats(
        depth=0, peak_depth=2, capacity=2, put_count=6, get_count=2, dropped=4, closed=False
    )


def test_on_drop_may_use_the_channel():
    channel: Channel[int] = Channel(1, "drop_oldest", on_drop=lambda item: channel.stats())
    channel.put(0)
    channel.put(1)
    assert channel.get_nowait() == 1


def test_close_drains_then_raises_and_is_idempotent():
    channel: Channel[str] = Channel(3)
    channel.put("a")
    channel.put("b")
    channel.close()
    channel.close()
    assert channel.closed
    with pytest.raises(ChannelClosed, match="cannot put into a closed channel"):
        channel.put("c")
    with pytest.raises(ChannelClosed):
        channel.put_nowait("c")
    assert channel.get() == "a"
    assert channel.get_nowait() == "b"
    with pytest.raises(ChannelClosed, match="channel closed and drained"):
        channel.get()
    with pytest.raises(ChannelClosed):
        channel.get_nowait()
    assert channel.stats().closed


def test_iteration_stops_when_closed_and_drained():
    channel: Channel[int] = Channel(4)
    for item in range(3):
        channel.put(item)
    channel.close()
    assert list(channel) == [0, 1, 2]


def test_close_wakes_blocked_getter_and_putter():
    empty: Channel[int] = Channel(1)
    full: Channel[int] = Channel(1)
    full.put(0)
    outcomes: list[str] = []

    def get_one():
        try:
            empty.get()
        except ChannelClosed:
            outcomes.append("getter woke")

    def put_one():
        try:
            full.put(1)
        except ChannelClosed:
            outcomes.append("putter woke")

    threads = [run_thread(get_one), run_thread(put_one)]
    for thread in threads:
        thread.join(0.05)
    assert all(thread.is_alive() for thread in threads)
    empty.close()
    full.close()
    for thread in threads:
        thread.join(1)
    assert sorted(outcomes) == ["getter woke", "putter woke"]
    assert full.get_nowait() == 0


@pytest.mark.parametrize("policy", ["block", "drop_oldest"])
def test_many_producers_and_consumers_account_for_every_item(policy):
    n_producers, per_producer = 4, 2000
    dropped: list[tuple[int, int]] = []
    on_drop = dropped.append if policy == "drop_oldest" else None
    channel: Channel[tuple[int, int]] = Channel(8, policy, on_drop=on_drop)
    received: list[list[tuple[int, int]]] = [[], [], []]

    def produce(producer: int):
        for item in range(per_producer):
            channel.put((producer, item))

    def consume(into: list[tuple[int, int]]):
        into.extend(channel)

    consumers = [run_thread(consume, into) for into in received]
    producers = [run_thread(produce, producer) for producer in range(n_producers)]
    for thread in producers:
        thread.join(10)
    channel.close()
    for thread in consumers:
        thread.join(10)

    everything = sorted([*dropped, *(item for into in received for item in into)])
    assert everything == [(p, i) for p in range(n_producers) for i in range(per_producer)]
    for into in received:
        for producer in range(n_producers):
            # Each consumer sees one producer's items in the order they were put.
            items = [i for p, i in into if p == producer]
            assert items == sorted(items)
    stats = channel.stats()
    assert stats.put_count == n_producers * per_producer
    assert stats.get_count + stats.dropped == stats.put_count
    assert stats.dropped == len(dropped)
    assert stats.depth == 0
    assert 1 <= stats.peak_depth <= 8
    if policy == "block":
        assert stats.dropped == 0
