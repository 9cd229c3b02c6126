"""Tests for the pose ring buffer: wraparound, overruns, waiting, and torn-read safety."""

from __future__ import annotations

import sys
import threading
import time

import attrs
import numpy as np
import pytest

from sleap_live.engines.types import FrameBoxes, FramePoses
from sleap_live.stream.ring import RingBatch, RingBuffer, RingStats
from sleap_live.stream.types import PoseRecord

N_NODES = 3
MAX_INSTANCES = 4


def make_record(frame: int, n_instances: int | None = None, source_id: str = "cam") -> PoseRecord:
    """A record whose every field is derived from its frame index."""
    if n_instances is None:
        n_instances = frame % (MAX_INSTANCES + 1)
    value = np.float32(frame % 100_000)
    return PoseRecord(
        frame_index=frame,
        capture_time=float(frame),
        ready_time=frame + 0.5,
        source_id=source_id,
        poses=FramePoses(
            points=np.full((n_instances, N_NODES, 2), value, np.float32),
            point_scores=np.full((n_instances, N_NODES), value + 1, np.float32),
            instance_scores=np.full((n_instances,), value + 2, np.float32),
            identities=np.full((n_instances,), frame % 1000, np.int32),
        ),
    )


def check_record(record: PoseRecord) -> None:
    """Fail if any field disagrees with the frame index (a torn or corrupt copy)."""
    frame = record.frame_index
    value = np.float32(frame % 100_000)
    n_instances = min(frame % (MAX_INSTANCES + 1), MAX_INSTANCES)
    poses = record.poses
    assert record.capture_time == float(frame)
    assert record.ready_time == frame + 0.5
    assert poses.points.shape == (n_instances, N_NODES, 2)
    assert np.all(poses.points == value)
    assert np.all(poses.point_scores == value + 1)
    assert np.all(poses.instance_scores == value + 2)
    assert np.all(poses.identities == frame % 1000)


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match="capacity must be at least 1, got 0"):
        RingBuffer(0, MAX_INSTANCES, N_NODES)
    with pytest.raises(TypeError, match="n_nodes must be an int, got float"):
        RingBuffer(4, MAX_INSTANCES, 3.0)


def test_write_rejects_wrong_node_count():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES + 1)
    with pytest.raises(ValueError, match=r"poses of frame 2 have points of shape \(2, 3, 2\)"):
        ring.write(make_record(2))


def test_a_box_detectors_boxes_are_kept_with_room_for_them():
    boxes = FrameBoxes(
        boxes=np.arange(8, dtype=np.float32).reshape(2, 4),
        scores=np.array([0.9, 0.5], np.float32),
        categories=np.array([1, 0], np.int32),
    )
    record = make_record(0)
    record = attrs.evolve(record, poses=attrs.evolve(record.poses, boxes=boxes))
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES, max_boxes=3)
    ring.write(record)
    ring.write(make_record(1))
    kept = ring.read(0)
    assert kept is not None and kept.poses.boxes is not None
    for name in ("boxes", "scores", "categories"):
        assert np.array_equal(getattr(kept.poses.boxes, name), getattr(boxes, name))
    # A record without boxes reads back without; a ring without room keeps none.
    assert ring.read(1).poses.boxes is None
    plain = RingBuffer(4, MAX_INSTANCES, N_NODES)
    plain.write(record)
    assert plain.read(0).poses.boxes is None


def test_reader_returns_copies_in_order():
    ring = RingBuffer(8, MAX_INSTANCES, N_NODES)
    reader = ring.reader()
    for frame in range(5):
        assert ring.write(make_record(frame)) == frame
    batch = reader.read_since()
    assert [record.frame_index for record in batch.records] == [0, 1, 2, 3, 4]
    assert batch.missed == 0
    for record in batch.records:
        check_record(record)
        assert record.source_id == "cam"
    batch.records[4].poses.points[:] = -1
    assert ring.read(4).poses.points[0, 0, 0] == 4, "readers must get copies"
    empty = reader.read_since()
    assert isinstance(empty, RingBatch)
    assert (empty.records, empty.missed) == ((), 0)


def test_wraparound_keeps_the_newest_capacity_records():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    for frame in range(10):
        ring.write(make_record(frame))
    assert ring.read(5) is None, "record 5 was overwritten"
    assert ring.read(6).frame_index == 6
    assert ring.read(10) is None, "record 10 is not written yet"
    assert ring.read(-1) is None
    oldest_first = ring.reader(from_oldest=True).read_since()
    assert [record.frame_index for record in oldest_first.records] == [6, 7, 8, 9]
    for record in oldest_first.records:
        check_record(record)


def test_slow_reader_learns_how_many_records_it_missed():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    reader = ring.reader()
    for frame in range(10):
        ring.write(make_record(frame))
    batch = reader.read_since()
    assert batch.missed == 6
    assert [record.frame_index for record in batch.records] == [6, 7, 8, 9]
    for frame in range(10, 20):
        ring.write(make_record(frame))
    assert reader.wait_next(timeout=0).frame_index == 16
    assert reader.missed == 12
    assert reader.position == 17


def test_latest_skips_ahead_without_counting_misses():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    reader = ring.reader()
    assert reader.latest() is None
    for frame in range(10):
        ring.write(make_record(frame))
    assert reader.latest().frame_index == 9
    assert reader.missed == 0
    assert reader.wait_next(timeout=0.01) is None, "nothing newer than the latest yet"
    ring.write(make_record(10))
    assert reader.wait_next(timeout=0.01).frame_index == 10


def test_wait_next_times_out_then_wakes_on_write():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    reader = ring.reader()
    assert reader.wait_next(timeout=0.05) is None
    got: list[PoseRecord | None] = []
    waiter = threading.Thread(target=lambda: got.append(reader.wait_next(timeout=5)))
    waiter.start()
    time.sleep(0.02)
    ring.write(make_record(3))
    waiter.join(5)
    assert [record.frame_index for record in got] == [3]


def test_close_wakes_waiters_after_they_drain():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    readers = [ring.reader() for _ in range(3)]
    results: list[list[int]] = [[] for _ in readers]

    def consume(reader, into):
        into.extend(record.frame_index for record in reader)

    threads = [
        threading.Thread(target=consume, args=pair, daemon=True)
        for pair in zip(readers, results, strict=True)
    ]
    for thread in threads:
        thread.start()
    ring.write(make_record(0))
    ring.write(make_record(1))
    ring.close()
    ring.close()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive(), "close must wake a reader blocked in wait_next"
    assert results == [[0, 1]] * 3
    assert all(reader.done for reader in readers)
    with pytest.raises(ValueError, match="cannot write to a closed ring buffer"):
        ring.write(make_record(2))
    late = ring.reader(from_oldest=True)
    assert [record.frame_index for record in late] == [0, 1]


def test_truncates_extra_instances_and_counts_them():
    ring = RingBuffer(4, 2, N_NODES)
    reader = ring.reader()
    ring.write(make_record(7, n_instances=5))
    ring.write(make_record(8, n_instances=1))
    first, second = reader.read_since().records
    assert first.poses.n_instances == 2
    assert second.poses.n_instances == 1
    assert ring.stats() == RingStats(
        capacity=4, written=2, truncated_records=1, truncated_instances=3, closed=False
    )


def test_each_record_keeps_its_source_id():
    ring = RingBuffer(2, MAX_INSTANCES, N_NODES)
    reader = ring.reader()
    ring.write(make_record(2, source_id="left"))
    ring.write(make_record(3, source_id="right"))
    assert [r.source_id for r in reader.read_since().records] == ["left", "right"]
    ring.write(make_record(4, source_id="left"))
    assert ring.read(2).source_id == "left" and ring.read(1).source_id == "right"


def write_in_thread(ring: RingBuffer, record: PoseRecord) -> threading.Thread:
    writer = threading.Thread(target=ring.write, args=(record,), daemon=True)
    writer.start()
    return writer


def test_lossless_reader_holds_the_writer_until_it_reads():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    reader = ring.reader(lossless=True)
    assert reader.lossless
    for frame in range(4):
        ring.write(make_record(frame))
    writer = write_in_thread(ring, make_record(4))
    # The fifth write would overwrite record 0, which the reader has not read: it
    # cannot finish however long it is given.
    writer.join(0.05)
    assert writer.is_alive() and ring.written == 4
    assert reader.wait_next(timeout=5).frame_index == 0
    writer.join(5)
    assert not writer.is_alive() and ring.written == 5
    assert [r.frame_index for r in reader.read_since().records] == [1, 2, 3, 4]
    assert reader.missed == 0


def test_detaching_a_lossless_reader_releases_the_writer():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    reader = ring.reader(lossless=True)
    for frame in range(4):
        ring.write(make_record(frame))
    writer = write_in_thread(ring, make_record(4))
    writer.join(0.05)
    assert writer.is_alive()
    reader.detach()
    reader.detach()  # idempotent
    writer.join(5)
    assert not writer.is_alive() and not reader.lossless
    # From now on it lags like any reader: record 0 is gone, and counted.
    assert [r.frame_index for r in reader.read_since().records] == [1, 2, 3, 4]
    assert reader.missed == 1


def test_a_lagging_reader_counts_what_it_missed_while_a_lossless_one_sees_everything():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    lossless, lagging = ring.reader(lossless=True), ring.reader()
    seen = []
    for frame in range(12):
        if ring.written - lossless.position >= ring.capacity:
            seen.extend(r.frame_index for r in lossless.read_since().records)
        ring.write(make_record(frame))
    seen.extend(r.frame_index for r in lossless.read_since().records)
    assert seen == list(range(12)) and lossless.missed == 0
    batch = lagging.read_since()
    assert [r.frame_index for r in batch.records] == [8, 9, 10, 11]
    assert batch.missed == lagging.missed == 8


@pytest.mark.parametrize("how", ["stop_waiting", "close"])
def test_stop_wakes_a_writer_waiting_for_a_lossless_reader(how):
    ring = RingBuffer(2, MAX_INSTANCES, N_NODES)
    reader = ring.reader(lossless=True)
    ring.write(make_record(0))
    ring.write(make_record(1))
    writer = write_in_thread(ring, make_record(2))
    writer.join(0.05)
    assert writer.is_alive()
    getattr(ring, how)()
    writer.join(5)
    assert not writer.is_alive() and ring.written == 3
    # The writer no longer waits: the reader now misses what is overwritten.
    if how == "stop_waiting":
        ring.write(make_record(3))
    assert reader.read_since().missed == ring.written - 2


def test_lossless_reader_attached_late_starts_at_the_oldest_record():
    ring = RingBuffer(4, MAX_INSTANCES, N_NODES)
    for frame in range(6):
        ring.write(make_record(frame))
    reader = ring.reader(from_oldest=True, lossless=True)
    assert reader.position == 2
    writer = write_in_thread(ring, make_record(6))
    writer.join(0.05)
    assert writer.is_alive(), "record 2 is still unread"
    assert reader.wait_next(timeout=5).frame_index == 2
    writer.join(5)
    assert not writer.is_alive()


@pytest.fixture
def frequent_thread_switches():
    """Make the interpreter switch threads every few bytecodes, so a writer often runs
    in the middle of a reader's copy."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def test_stress_fast_writer_slow_readers_never_see_torn_records(frequent_thread_switches):
    capacity, n_records = 16, 10_000
    ring = RingBuffer(capacity, MAX_INSTANCES, N_NODES)
    readers = [ring.reader() for _ in range(4)]
    seen: list[list[int]] = [[] for _ in readers]
    failures: list[BaseException] = []

    def consume(index: int) -> None:
        reader, frames = readers[index], seen[index]
        try:
            while (record := reader.wait_next(timeout=5)) is not None:
                check_record(record)
                frames.append(record.frame_index)
                if len(frames) % (50 + 17 * index) == 0:
                    time.sleep(0.001)
                if index == 0 and record.frame_index % 7 == 0:
                    for batched in reader.read_since().records:
                        check_record(batched)
                        frames.append(batched.frame_index)
        except BaseException as error:
            failures.append(error)

    def produce() -> None:
        for frame in range(n_records):
            ring.write(make_record(frame))
        ring.close()

    threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    writer.join(30)
    for thread in threads:
        thread.join(30)
    assert not failures, failures[0]
    for reader, frames in zip(readers, seen, strict=True):
        assert frames == sorted(set(frames)), "records must come in order, each once"
        assert len(frames) + reader.missed == n_records, "every record is read or counted"
        assert frames[-1] == n_records - 1
