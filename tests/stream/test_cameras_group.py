"""Several cameras at once: source slots, the group batcher, and the pipeline on a group.

Cameras are fake live sources on a fake clock (`fakes.SteppedSource`) or fake
sources that end (`fakes.FakeSource`); no test depends on the machine's speed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import sleap_io as sio

from sleap_live.stream import OutputOptions
from sleap_live.stream.batching import GroupBatcher, SequenceBatcher, open_batcher
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, SourceError, SourceStalledError
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.slots import SourceSlots
from sleap_live.stream.sources.group import SourceGroup, as_group, per_source_path, source_tag
from sleap_live.stream.types import Frame

CAMERAS = ("camera:0", "camera:1")

# sleap-io loads its modules on first use; done here, at normal priority, rather than by
# the first .slp writer, a background thread under the recorded policy, which on a busy
# machine can take most of a minute over it.
_ = (sio.Labels, sio.LabeledFrame, sio.PredictedInstance, sio.Track, sio.Video, sio.save_slp)


def frame(fakes, source: str, index: int, at: float) -> Frame:
    return Frame(index, at, source, fakes.frame_image(index))


# --- slots ----------------------------------------------------------------------------------


def test_latest_slots_keep_each_cameras_newest_frame_and_count_drops_per_camera(fakes):
    slots = SourceSlots(CAMERAS, "latest")
    for index in range(3):
        slots.put(frame(fakes, "camera:0", index, 0.1 * index))
    slots.put(frame(fakes, "camera:1", 0, 0.05))
    assert slots.dropped_by_source() == {"camera:0": 2, "camera:1": 0}
    assert slots.stats().dropped == 2 and slots.stats().depth == 2
    # The oldest waiting frame first, then the other camera's.
    first = slots.get(0)
    assert (first.source_id, first.index) == ("camera:1", 0)
    assert slots.get(0, skip={"camera:1"}).index == 2
    with pytest.raises(ChannelEmpty):
        slots.get(0)


def test_slots_skip_and_ended_sources(fakes):
    slots = SourceSlots(CAMERAS, "latest")
    slots.put(frame(fakes, "camera:0", 0, 0.0))
    with pytest.raises(ChannelEmpty):
        slots.get(0, skip={"camera:0"})
    slots.end("camera:1")
    # Nothing more can come from the cameras not skipped: no wait at all.
    with pytest.raises(ChannelEmpty, match="every other source has ended"):
        slots.get(None, skip={"camera:0"})
    slots.close()
    assert [f.index for f in slots] == [0]
    with pytest.raises(ChannelClosed):
        slots.put(frame(fakes, "camera:0", 1, 0.1))


def test_block_slots_make_a_camera_wait_for_its_slot(fakes):
    slots = SourceSlots(CAMERAS, "block")
    slots.put(frame(fakes, "camera:0", 0, 0.0))
    second = threading.Thread(target=slots.put, args=(frame(fakes, "camera:0", 1, 0.1),))
    second.start()
    fakes.wait_for(lambda: slots.stats().put_count == 1 and second.is_alive(), "a waiting put")
    assert slots.get(0).index == 0
    second.join(fakes.HANG_TIMEOUT)
    assert slots.get(0).index == 1
    assert slots.dropped_by_source() == {"camera:0": 0, "camera:1": 0}


def test_one_sources_slot_holds_its_depth_in_order_and_takes_any_frame_id(fakes):
    live = SourceSlots(("camera:0",), "latest", depth=3)
    for index in range(5):  # the frames channel of one source: its ids need not match
        live.put(frame(fakes, "camera:0" if index % 2 else "other", index, 0.1 * index))
    assert live.dropped_by_source() == {"camera:0": 2}
    assert live.stats().depth == 3 and live.stats().capacity == 3
    assert [live.get(0).index for _ in range(3)] == [2, 3, 4]
    recorded = SourceSlots(("camera:0",), "block", depth=2)
    recorded.put(frame(fakes, "camera:0", 0, 0.0))
    recorded.put(frame(fakes, "camera:0", 1, 0.1))
    third = threading.Thread(target=recorded.put, args=(frame(fakes, "camera:0", 2, 0.2),))
    third.start()
    fakes.wait_for(lambda: third.is_alive() and recorded.stats().put_count == 2, "a waiting put")
    assert recorded.get(0).index == 0
    third.join(fakes.HANG_TIMEOUT)
    recorded.end("camera:0")
    assert [f.index for f in recorded] == [1, 2]  # drained, then the ended source stops it
    with pytest.raises(ValueError, match="at least one frame"):
        SourceSlots(("camera:0",), "block", depth=0)


def test_slots_refuse_repeated_ids_and_unknown_sources(fakes):
    with pytest.raises(ValueError, match="distinct source ids"):
        SourceSlots(("a", "a"), "latest")
    with pytest.raises(KeyError, match="camera:9"):
        SourceSlots(CAMERAS, "latest").put(frame(fakes, "camera:9", 0, 0.0))


# --- the group batcher ----------------------------------------------------------------------


def test_a_live_batch_holds_the_newest_frame_of_each_camera_in_camera_order(fakes):
    clock = fakes.FakeClock()
    slots = SourceSlots(CAMERAS, "latest")
    batcher = GroupBatcher(slots, "live", 30.0, clock)
    slots.put(frame(fakes, "camera:1", 0, 0.00))
    slots.put(frame(fakes, "camera:0", 0, 0.01))
    slots.put(frame(fakes, "camera:1", 1, 0.02))  # replaces camera:1's frame 0
    batch = batcher.batch(slots.get(0))
    assert [(f.source_id, f.index) for f in batch.frames] == [("camera:0", 0), ("camera:1", 1)]
    assert batch.images.shape == (2, 8, 8, 1)
    assert slots.dropped_by_source() == {"camera:0": 0, "camera:1": 1}


def test_a_live_batch_goes_without_a_camera_late_by_a_frame_interval(fakes):
    clock = fakes.FakeClock(1.0)
    slots = SourceSlots(CAMERAS, "latest")
    batcher = GroupBatcher(slots, "live", 30.0, clock)
    slots.put(frame(fakes, "camera:0", 5, 0.9))  # captured more than 1/30 s ago
    batch = batcher.batch(slots.get(0))
    assert [(f.source_id, f.index) for f in batch.frames] == [("camera:0", 5)]


def test_a_batch_never_waits_for_a_camera_that_ended(fakes):
    clock = fakes.FakeClock()
    slots = SourceSlots(CAMERAS, "block")
    batcher = GroupBatcher(slots, "recorded", None, clock)
    slots.end("camera:1")
    slots.put(frame(fakes, "camera:0", 0, 0.0))
    assert len(batcher.batch(slots.get(0)).frames) == 1


def test_one_source_is_a_group_of_one_batched_in_order_and_a_group_a_slot_per_source(fakes):
    clock = fakes.FakeClock()
    source = fakes.FakeSource(source_id="camera:0")
    one = as_group(source)
    assert one.sources == (source,) and not one.per_source and as_group(one) is one
    assert isinstance(open_batcher(one, "recorded", 8, clock), SequenceBatcher)
    # One kind of frames channel: a slot per source, a batch deep live, two recorded.
    assert open_batcher(one, "live", 4, clock).frames.stats().capacity == 4
    assert open_batcher(one, "recorded", 8, clock).frames.stats().capacity == 16
    # A group the caller makes keeps a slot per source, even of one.
    group = SourceGroup([source])
    assert group.per_source and as_group(group) is group
    batcher = open_batcher(group, "live", 1, clock)
    assert isinstance(batcher, GroupBatcher) and isinstance(batcher.frames, SourceSlots)


# --- the group ------------------------------------------------------------------------------


def test_a_group_needs_one_frame_shape_and_distinct_ids(fakes):
    a = fakes.FakeSource(source_id="camera:0", shape=(8, 8, 1))
    with pytest.raises(ValueError, match=r"camera:1 gives 6x8, 1-channel frames but camera:0"):
        SourceGroup([a, fakes.FakeSource(source_id="camera:1", shape=(8, 6, 1))])
    with pytest.raises(ValueError, match="need distinct ids"):
        SourceGroup([a, fakes.FakeSource(source_id="camera_0")])
    group = SourceGroup([a, fakes.FakeSource(source_id="camera:1", fps=60.0)])
    assert (group.source_id, group.fps, group.n_frames) == ("camera:0+camera:1", 60.0, 40)


def test_each_source_has_its_own_file_name():
    assert source_tag("camera:0") == "camera-0"
    assert source_tag("/dev/video2") == "video2"
    assert source_tag("video=Logitech BRIO") == "video-Logitech-BRIO"
    assert per_source_path(Path("out/session.slp"), "camera:1") == Path("out/session.camera-1.slp")


def test_a_group_takes_one_frame_per_source_per_batch(fakes):
    sources = [fakes.FakeSource(source_id=camera) for camera in CAMERAS]
    with pytest.raises(ValueError, match="batch_size must be 2 with 2 sources"):
        Pipeline(SourceGroup(sources), fakes.FakeRunner(), batch_size=4)


# --- the pipeline on a group ----------------------------------------------------------------


def test_recorded_sources_each_get_every_frame_in_their_own_output(tmp_path, fakes):
    sources = [fakes.FakeSource(12, source_id=camera) for camera in CAMERAS]
    runner = fakes.FakeRunner()
    records = []
    with Pipeline(
        SourceGroup(sources), runner, outputs=OutputOptions(output=tmp_path / "session.slp")
    ) as pipeline:
        pipeline.on_poses(records.append)
        pipeline.join()
    stats = pipeline.stats
    assert stats.frames_processed == 24 and stats.frames_dropped == 0
    assert stats.dropped_by_source == {"camera:0": 0, "camera:1": 0}
    # Warm-up and every batch: one frame of each camera.
    assert runner.batch_sizes == [2] * 13
    for camera in CAMERAS:
        mine = [r for r in records if r.source_id == camera]
        assert [r.frame_index for r in mine] == list(range(12))
        assert all(r.poses.points.shape[0] == r.frame_index % 3 for r in mine)
        labels = sio.load_slp(str(tmp_path / f"session.{source_tag(camera)}.slp"))
        assert len(labels.videos) == 1 and labels.videos[0].filename == camera
        assert sorted(lf.frame_idx for lf in labels.labeled_frames) == list(range(12))
        for lf in labels.labeled_frames:
            assert len(lf.instances) == lf.frame_idx % 3
            for instance in lf.instances:
                assert np.all(instance.numpy()[:, 0] == lf.frame_idx)
    assert not (tmp_path / "session.slp").exists()
    assert all("session.camera-" in line for line in pipeline.outputs.describe())


def test_live_cameras_share_engine_calls_and_count_drops_per_camera(fakes):
    clock = fakes.FakeClock()
    cameras = [fakes.SteppedSource(clock, source_id=camera) for camera in CAMERAS]
    runner = fakes.FakeRunner(1.0, clock=clock)
    records = []
    pipeline = Pipeline(SourceGroup(cameras), runner, clock=clock)
    pipeline.on_poses(records.append, lossless=True)
    with pipeline:
        fakes.finish_warmup(runner, clock)
        cameras[0].push()
        cameras[1].push()
        fakes.wait_for(lambda: runner.calls_started == 2, "the first batch in the engine")
        # While the engine is busy, camera 0 sends 4 frames and camera 1 one.
        cameras[0].push(4)
        cameras[1].push(1)
        fakes.wait_for(
            lambda: pipeline.stats.frames_captured == 7, "every frame read from the cameras"
        )

        def done() -> bool:
            stats = pipeline.stats
            return stats.frames_processed + stats.frames_dropped == 7

        for _ in range(50):  # each step ends an engine call or a batch's wait
            if done():
                break
            until = runner.busy_until
            if until is None:  # a batch waits, on the clock, for the other camera
                clock.advance(0.05)
                fakes.wait_for(lambda: runner.busy_until is not None or done(), "a batch")
            else:
                clock.set(until)
                fakes.wait_for(
                    lambda until=until: runner.busy_until != until or done(), "an engine call"
                )
        assert done()
        for camera in cameras:
            camera.end()
        pipeline.join()
    stats = pipeline.stats
    assert runner.batch_sizes[:2] == [2, 2]
    assert all(size in (1, 2) for size in runner.batch_sizes)
    assert {record.source_id for record in records} == set(CAMERAS)
    assert stats.frames_processed + stats.frames_dropped == 7
    assert sum(stats.dropped_by_source.values()) == stats.frames_dropped > 0
    for camera in CAMERAS:
        processed = sum(record.source_id == camera for record in records)
        captured = 5 if camera == "camera:0" else 2
        assert processed + stats.dropped_by_source[camera] == captured, camera
    # Each camera's frames stay in order.
    for camera in CAMERAS:
        indices = [r.frame_index for r in records if r.source_id == camera]
        assert indices == sorted(indices)


def test_a_camera_failing_mid_run_ends_the_run_naming_it_with_frames_saved(tmp_path, fakes):
    good = fakes.FakeSource(None, source_id="camera:0", is_live=True, paced=True, fps=200.0)
    bad = fakes.FakeSource(
        None, source_id="camera:1", is_live=True, paced=True, fps=200.0, fail_at=6
    )
    pipeline = Pipeline(
        SourceGroup([good, bad]),
        fakes.FakeRunner(),
        outputs=OutputOptions(output=tmp_path / "s.slp"),
    )
    with pytest.raises(SourceError, match=r"^camera:1: corrupt packet at frame 6$"):
        with pipeline:
            pipeline.join(fakes.HANG_TIMEOUT)
    assert good.closed and bad.closed
    saved = sio.load_slp(str(tmp_path / "s.camera-1.slp"))
    assert len(saved.labeled_frames) + pipeline.stats.dropped_by_source["camera:1"] == 6


def test_a_camera_that_stalls_ends_the_run_naming_it(fakes):
    clock = fakes.FakeClock()
    cameras = [fakes.SteppedSource(clock, source_id=camera) for camera in CAMERAS]
    runner = fakes.FakeRunner(clock=clock)
    pipeline = Pipeline(SourceGroup(cameras), runner, clock=clock)
    with pytest.raises(SourceStalledError, match=r"^camera:1: the source stalled"):
        with pipeline:
            fakes.finish_warmup(runner, clock)
            # Camera 1's read timeout runs from its reader's first read: before the clock
            # moves, or on a loaded machine camera 0's last frame could time out first.
            fakes.wait_for(cameras[1].reading.is_set, "camera 1's reader")
            for sent in range(1, 4):  # camera 0 keeps sending; camera 1 never does
                cameras[0].push()
                fakes.wait_for(lambda n=sent: pipeline.stats.frames_captured == n, "a frame")
                clock.advance(2.0)  # past the batch's wait for camera 1
                fakes.wait_for(
                    lambda n=sent: (
                        pipeline.stats.frames_processed == n or not pipeline.stats.running
                    ),
                    "the frame processed",
                )
            # Move the clock on until camera 1's read timeout passes.
            give_up = time.monotonic() + fakes.HANG_TIMEOUT
            while pipeline.stats.running and time.monotonic() < give_up:
                clock.advance(0.5)
                time.sleep(0.01)
            pipeline.join(fakes.HANG_TIMEOUT)
    assert pipeline.stats.frames_processed == 3


def test_dashboard_shows_drops_per_camera_with_several(fakes):
    from rich.console import Console

    from sleap_live.stream.dashboard import render_dashboard

    def text(dropped_by_source) -> str:
        stats = fakes.pipeline_stats(
            policy="live",
            batch_size=2,
            frames_total=None,
            frames_captured=10,
            frames_processed=6,
            frames_dropped=4,
            fps=6.0,
            capture_fps=10.0,
            dropped_by_source=dropped_by_source,
        )
        console = Console(width=100, color_system=None, record=True)
        console.print(render_dashboard(stats))
        return console.export_text()

    assert "camera:0 3  camera:1 1" in text({"camera:0": 3, "camera:1": 1})
    assert "camera:0 4" not in text({"camera:0": 4})


def test_each_camera_is_recorded_to_its_own_video(tmp_path, fakes):
    import av

    sources = [fakes.FakeSource(6, source_id=camera) for camera in CAMERAS]
    Pipeline(
        SourceGroup(sources),
        fakes.FakeRunner(),
        outputs=OutputOptions(
            output=tmp_path / "session.slp", record=tmp_path / "session.mkv", record_codec="ffv1"
        ),
    ).run()
    for camera in CAMERAS:
        video = tmp_path / f"session.{source_tag(camera)}.mkv"
        with av.open(str(video)) as container:
            images = [f.to_ndarray(format="gray") for f in container.decode(video=0)]
        assert [fakes.index_of(image[:, :, None]) for image in images] == list(range(6))
        assert (tmp_path / f"session.{source_tag(camera)}.mkv.timestamps.csv").exists()
        labels = sio.load_slp(str(tmp_path / f"session.{source_tag(camera)}.slp"))
        # A lossless recording is the picture each camera's poses link to.
        assert Path(labels.videos[0].filename) == video.resolve()


def test_published_messages_carry_each_cameras_id_in_topic_and_message(fakes):
    msgpack = pytest.importorskip("msgpack")
    zmq = pytest.importorskip("zmq")
    from sleap_live.stream.publish import Publisher

    publisher = Publisher("tcp://127.0.0.1:*")
    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    try:
        socket.connect(publisher.endpoint)
        socket.subscribe(b"poses")
        assert publisher.wait_for_subscribers(1, timeout=fakes.HANG_TIMEOUT)
        sources = [fakes.FakeSource(5, source_id=camera) for camera in CAMERAS]
        pipeline = Pipeline(SourceGroup(sources), fakes.FakeRunner())
        pipeline.attach(publisher)
        pipeline.run()
        publisher.close()  # lets the last messages leave
        received = []
        while socket.poll(1000):
            topic, payload = socket.recv_multipart()
            received.append((topic.decode(), msgpack.unpackb(payload)))
    finally:
        socket.close(linger=0)
        context.term()
        publisher.close()
    assert {topic for topic, _ in received} == {f"poses/{camera}" for camera in CAMERAS}
    for topic, message in received:
        assert topic == f"poses/{message['source_id']}"
        assert len(message["points"]) == message["frame_index"] % 3
