"""SlpWriter and VideoRecorder: round trips through sleap-io and PyAV, the journal, locks."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import attrs
import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live.engines.types import FramePoses, Skeleton
from sleap_live.output_rule import OutputError
from sleap_live.stream.channel import Channel
from sleap_live.stream.outputs import writers as writers_module
from sleap_live.stream.outputs.guard import OutputBusyError
from sleap_live.stream.outputs.journal import journal_path
from sleap_live.stream.outputs.recorder import VideoRecorder
from sleap_live.stream.outputs.recovery import recover_slp
from sleap_live.stream.outputs.slp import MAX_CHUNK_FRAMES, SlpWriter
from sleap_live.stream.types import PoseRecord

SKELETON = Skeleton(node_names=("head", "thorax", "tail"), edges=((0, 1), (1, 2)), name="fly")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(frame_index: int, points: np.ndarray, identities=None, ready=1.01) -> PoseRecord:
    n = points.shape[0]
    scores = np.where(np.isnan(points[..., 0]), np.nan, 0.5 + 0.01 * frame_index)
    poses = FramePoses(
        points=points.astype(np.float32),
        point_scores=scores.astype(np.float32),
        instance_scores=np.linspace(0.9, 0.8, n).astype(np.float32),
        identities=np.asarray(identities if identities is not None else [-1] * n, np.int32),
    )
    return PoseRecord(frame_index, ready - 0.01, ready, "test", poses)


def two_animals(frame_index: int) -> np.ndarray:
    points = np.arange(12, dtype=np.float32).reshape(2, 3, 2) + frame_index
    points[1, 2] = np.nan
    return points


def writer(tmp_path, **options) -> SlpWriter:
    options.setdefault("video", tmp_path / "clip.mp4")
    options.setdefault("frame_shape", (48, 64, 1))
    return SlpWriter(tmp_path / "out.slp", SKELETON, **options)


def test_round_trip_keeps_points_scores_tracks_and_skeleton(tmp_path):
    (tmp_path / "clip.mp4").touch()
    with writer(tmp_path, fps=25.0, n_frames=100, class_names=("male", "female")) as slp:
        for i in (3, 4, 7):
            slp.write(record(i, two_animals(i), identities=[1, 0]))

    labels = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)
    assert [lf.frame_idx for lf in labels] == [3, 4, 7]
    assert labels.skeletons[0].node_names == ["head", "thorax", "tail"]
    assert labels.skeletons[0].edge_inds == [(0, 1), (1, 2)]
    assert labels.skeletons[0].name == "fly"
    assert [t.name for t in labels.tracks] == ["male", "female"]
    video = labels.videos[0]
    assert video.filename == str((tmp_path / "clip.mp4").resolve())
    assert tuple(video.shape) == (100, 48, 64, 1)
    assert video.fps == 25.0

    frame = labels[1]
    first, second = frame.instances
    assert isinstance(first, sio.PredictedInstance)
    np.testing.assert_allclose(first.numpy(), two_animals(4)[0])
    np.testing.assert_allclose(second.numpy(), two_animals(4)[1])
    np.testing.assert_allclose(first.numpy(scores=True)[:, 2], 0.54, rtol=1e-6)
    assert np.isnan(second.numpy(scores=True)[2, 2])
    assert first.score == pytest.approx(0.9) and second.score == pytest.approx(0.8)
    assert (first.track.name, second.track.name) == ("female", "male")


def test_empty_frames_kept_and_pointless_instances_dropped(tmp_path):
    empty = np.full((1, 3, 2), np.nan, np.float32)
    with writer(tmp_path) as slp:
        slp.write(record(0, empty))
        slp.write(record(1, np.zeros((0, 3, 2), np.float32)))

    labels = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)
    assert [(lf.frame_idx, len(lf.instances)) for lf in labels] == [(0, 0), (1, 0)]
    assert labels.tracks == []
    assert labels[0].instances == []


def test_live_source_gets_a_named_video_sized_by_frames_seen(tmp_path):
    with writer(tmp_path, video="camera:0") as slp:
        slp.write(record(5, two_animals(5)))
    video = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False).videos[0]
    assert video.filename == "camera:0"
    assert tuple(video.shape) == (6, 48, 64, 1)


def test_renumber_counts_frames_in_arrival_order(tmp_path):
    with writer(tmp_path, renumber=True) as slp:
        for i in (10, 12, 20):
            slp.write(record(i, two_animals(i)))
    labels = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)
    assert [lf.frame_idx for lf in labels] == [0, 1, 2]
    np.testing.assert_allclose(labels[2].instances[0].numpy(), two_animals(20)[0])


def snapshot(slp: SlpWriter, tmp_path, name: str = "crashed") -> Path:
    """The journal as a kill would leave it now, beside a .slp path of its own."""
    copy = tmp_path / f"{name}.slp"
    shutil.copyfile(slp.journal, journal_path(copy))
    return copy


def test_frames_reach_the_journal_within_the_save_interval(tmp_path):
    clock = FakeClock()
    slp = writer(tmp_path, save_interval=2.0, clock=clock)
    assert not (tmp_path / "out.slp").exists() and slp.journal.exists()
    slp.write(record(0, two_animals(0), ready=0.0))
    clock.now = 1.7
    slp.write(record(1, two_animals(1), ready=1.7))
    assert (slp.n_frames_written, slp.n_frames_saved) == (2, 0)
    # Due a little before the 2 s, so a late wake-up still keeps the promise.
    assert slp.seconds_until_due() == pytest.approx(0.1)
    clock.now = 1.8  # frame 0 has waited 0.9 x 2 s: both frames held go to the journal
    slp.write(record(2, two_animals(2), ready=1.8))
    assert slp.n_frames_saved == 3
    assert slp.seconds_until_due() is None

    crashed = snapshot(slp, tmp_path)
    contents = recover_slp(crashed)
    assert (contents.n_chunks, contents.n_frames, contents.torn_bytes) == (1, 3, 0)
    labels = sio.load_slp(str(crashed), open_videos=False)
    assert [lf.frame_idx for lf in labels] == [0, 1, 2]
    assert not journal_path(crashed).exists()

    slp.write(record(3, two_animals(3), ready=2.5))
    slp.close()
    slp.close()
    assert slp.finished and not slp.journal.exists()
    assert list(tmp_path.glob(".*partial*")) == []
    assert len(sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)) == 4


def test_each_save_appends_only_the_new_frames(tmp_path):
    """Constant cost: the 50th save writes as many bytes as the first."""
    clock = FakeClock()
    slp = writer(tmp_path, save_interval=1.0, clock=clock)
    sizes = [slp.journal.stat().st_size]
    for i in range(100):
        clock.now = i * 0.5
        slp.write(record(i, two_animals(0), ready=clock.now))
        if slp.n_frames_saved == i + 1:
            sizes.append(slp.journal.stat().st_size)
    growth = np.diff(sizes)
    assert len(growth) >= 30 and len(set(growth.tolist())) == 1
    slp.close()


def test_a_fast_run_saves_full_chunks_before_the_interval(tmp_path):
    slp = writer(tmp_path, save_interval=1000.0, clock=FakeClock())
    for i in range(MAX_CHUNK_FRAMES + 5):
        slp.write(record(i, two_animals(0), ready=0.0))
    assert slp.n_frames_saved == MAX_CHUNK_FRAMES
    slp.close()
    assert len(sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)) == MAX_CHUNK_FRAMES + 5


def test_a_torn_last_chunk_costs_that_chunk_only(tmp_path):
    clock = FakeClock()
    slp = writer(tmp_path, save_interval=1.0, clock=clock)
    for i in range(6):
        clock.now = float(i)
        slp.write(record(i, two_animals(i), ready=clock.now))
    assert slp.n_frames_saved == 6  # chunks [0, 1], [2, 3], [4, 5]
    crashed = snapshot(slp, tmp_path)
    journal = journal_path(crashed)
    journal.write_bytes(journal.read_bytes()[:-7])  # killed in the middle of a write
    contents = recover_slp(crashed)
    assert contents.torn_bytes > 0
    assert [lf.frame_idx for lf in sio.load_slp(str(crashed), open_videos=False)] == [0, 1, 2, 3]
    slp.close()


def test_a_second_writer_of_the_same_path_is_refused(tmp_path):
    first = writer(tmp_path)
    with pytest.raises(OutputBusyError, match="being written by another sleap-live run"):
        writer(tmp_path)
    with pytest.raises(OutputBusyError):
        recover_slp(tmp_path / "out.slp")
    first.write(record(0, two_animals(0)))
    first.close()
    assert len(sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)) == 1
    writer(tmp_path, overwrite=True).close()  # free again once the first is done


def test_the_journal_lock_is_filelocks_and_keeps_the_journal_intact(tmp_path):
    from filelock import lock_descriptor, unlock_descriptor

    journal = journal_path(tmp_path / "out.slp")
    journal.write_bytes(b"SLJR")  # a header cut short: taken over, never truncated first
    fd = os.open(journal, os.O_RDWR)
    try:
        assert lock_descriptor(fd, blocking=False)
        with pytest.raises(OutputBusyError, match="being written by another sleap-live run"):
            writer(tmp_path)
        assert journal.read_bytes() == b"SLJR"
        unlock_descriptor(fd)
        first = writer(tmp_path)
        assert not lock_descriptor(fd, blocking=False)  # the writer holds filelock's lock
        first.discard()
    finally:
        os.close(fd)


def test_an_earlier_runs_unrecovered_journal_is_never_overwritten(tmp_path):
    clock = FakeClock()
    crashed = writer(tmp_path, save_interval=1.0, clock=clock)
    crashed.write(record(0, two_animals(0), ready=-1.0))
    assert crashed.n_frames_saved == 1
    saved = crashed.journal.read_bytes()
    crashed.discard()  # what a kill leaves: the journal with frames, no lock
    assert crashed.journal.read_bytes() == saved
    with pytest.raises(OutputError, match=r"earlier run.*sleap-live recover"):
        writer(tmp_path)
    assert crashed.journal.read_bytes() == saved
    recover_slp(tmp_path / "out.slp")
    assert len(sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)) == 1
    writer(tmp_path, overwrite=True).close()


def test_a_journal_without_frames_and_stale_temporaries_are_cleared(tmp_path):
    writer(tmp_path).discard()  # killed before its first save: header only
    stale = tmp_path / ".out.slp.99999.0badf00d.partial"  # a killed writer's private folder
    stale.mkdir(mode=0o700)
    (stale / "out.slp").write_bytes(b"half a file")
    with writer(tmp_path) as slp:
        slp.write(record(0, two_animals(0)))
    assert not stale.exists()
    assert len(sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)) == 1


def test_a_symlinked_output_keeps_its_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "poses.slp"
    link = tmp_path / "out.slp"
    link.symlink_to(target)
    with writer(tmp_path) as slp:
        slp.write(record(0, two_animals(0)))
    assert link.is_symlink() and target.is_file()
    assert len(sio.load_slp(str(link), open_videos=False)) == 1


def test_describe_never_claims_more_than_is_on_disk(tmp_path):
    clock = FakeClock()
    slp = writer(tmp_path, save_interval=1.0, clock=clock)
    slp.write(record(0, two_animals(0), ready=-1.0))  # due at once: saved
    slp.write(record(1, two_animals(1), ready=0.0))  # held, not yet saved
    clock.now = 0.5
    slp.write(record(2, two_animals(2), ready=0.5))  # held too
    line = slp.describe()
    assert line.startswith("poses: 1 frames saved in ") and "sleap-live recover" in line
    slp.close()
    assert slp.describe() == f"poses: {tmp_path / 'out.slp'} (3 frames)"


def test_the_drain_loop_saves_while_the_stream_pauses(tmp_path):
    slp = writer(tmp_path, save_interval=0.05)
    queue: Channel = Channel(8)
    loop = threading.Thread(target=writers_module._drain, args=(queue, slp))
    loop.start()
    queue.put((record(0, two_animals(0), ready=time.monotonic()), None))
    deadline = time.monotonic() + 30
    while slp.n_frames_saved == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slp.n_frames_saved == 1  # saved with no further record arriving
    queue.close()
    loop.join()
    assert slp.finished


class ListOutput:
    """An `Output` of the test's own: what any user-written output looks like."""

    def __init__(self, takes_frames: bool) -> None:
        self.takes_frames = takes_frames
        self.items: list[tuple[int, object]] = []
        self.closed = self.discarded = False

    def write(self, record, image):
        self.items.append((record.frame_index, image))

    def seconds_until_due(self):
        return None

    def flush(self):
        pass

    def close(self):
        self.closed = True

    def discard(self):
        self.discarded = True

    def describe(self):
        return f"{len(self.items)} records"


def test_any_output_is_fed_records_and_only_the_frames_it_takes():
    with_frames, without = ListOutput(True), ListOutput(False)
    outputs = writers_module.OpenWriters(
        {"frames": (Channel(4), with_frames), "poses": (Channel(4), without)}
    )
    assert outputs.takes_frames
    loops = [threading.Thread(target=loop) for loop in outputs.loops.values()]
    for loop in loops:
        loop.start()
    image = np.zeros((2, 2, 1), np.uint8)
    for index in range(3):
        outputs.write(record(index, two_animals(index)), image)
    outputs.close()
    for loop in loops:
        loop.join()
    assert [(i, im is image) for i, im in with_frames.items] == [(0, True), (1, True), (2, True)]
    assert without.items == [(0, None), (1, None), (2, None)]
    assert with_frames.closed and without.closed
    assert outputs.describe() == ["3 records", "3 records"]


def test_each_sources_outputs_take_that_sources_records_only():
    outputs = {name: ListOutput(False) for name in ("slp a", "slp b", "every source")}
    writers = writers_module.OpenWriters(
        {name: (Channel(4), output) for name, output in outputs.items()},
        {"slp a": "a", "slp b": "b"},
    )
    for index, source in enumerate("aba"):
        writers.write(attrs.evolve(record(index, two_animals(index)), source_id=source), None)
    writers.close()
    for loop in writers.loops.values():
        loop()
    taken = {name: [index for index, _ in output.items] for name, output in outputs.items()}
    assert taken == {"slp a": [0, 2], "slp b": [1], "every source": [0, 1, 2]}


def test_abandoned_outputs_are_discarded_not_saved(tmp_path):
    slp = writer(tmp_path)
    recorder = VideoRecorder(tmp_path / "out.mp4", 30.0, (8, 8, 3))
    opened = {"slp": (Channel(4), slp), "record": (Channel(4), recorder)}
    writers_module.OpenWriters(opened).abandon()
    assert not (tmp_path / "out.slp").exists() and not slp.journal.exists()
    assert not (tmp_path / "out.mp4").exists() and not recorder.timestamps.exists()


def test_failed_final_save_keeps_the_journal_and_says_how_to_recover(tmp_path, monkeypatch):
    slp = writer(tmp_path)
    slp.write(record(0, two_animals(0)))

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sio, "save_slp", full_disk)
    with pytest.raises(OutputError, match=r"1 frames saved so far are in .*sleap-live recover"):
        slp.close()
    assert slp.journal.exists() and not slp.finished
    monkeypatch.undo()
    recover_slp(tmp_path / "out.slp")
    assert len(sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)) == 1


def test_write_rejects_wrong_node_count_and_use_after_close(tmp_path):
    slp = writer(tmp_path)
    with pytest.raises(ValueError, match=r"expected \(instances, 3, 2\)"):
        slp.write(record(0, np.zeros((1, 4, 2), np.float32)))
    slp.close()
    with pytest.raises(ValueError, match="after close"):
        slp.write(record(0, two_animals(0)))


def test_bad_output_paths_name_the_file(tmp_path):
    with pytest.raises(
        ValueError, match=r"out\.txt: cannot write poses to a \.txt file.*\.slp, \.h5, \.nwb, \.csv"
    ):
        SlpWriter(tmp_path / "out.txt", SKELETON, video="v", frame_shape=(4, 4, 1))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SlpWriter(tmp_path / "missing" / "out.slp", SKELETON, video="v", frame_shape=(4, 4, 1))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        VideoRecorder(tmp_path / "missing" / "rec.mp4", 30, (4, 4, 1))
    with pytest.raises(ValueError, match="fps must be positive"):
        VideoRecorder(tmp_path / "rec.mp4", 0, (4, 4, 1))


def decode(path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def test_recorder_writes_every_frame_in_order(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (1, 32, 48, 3), dtype=np.uint8)
    frames = [
        np.clip(base[0].astype(int) // 2 + 10 * i, 0, 255).astype(np.uint8) for i in range(15)
    ]
    with VideoRecorder(tmp_path / "rec.mp4", 30.0, (32, 48, 3), crf=0) as recorder:
        for frame in frames:
            recorder.encode(frame)
    assert recorder.n_frames_written == 15
    decoded = decode(tmp_path / "rec.mp4")
    assert decoded.shape == (15, 32, 48, 3)
    # yuv420p subsamples chroma, so compare brightness: it must rise frame by frame.
    means = decoded.reshape(15, -1).mean(axis=1)
    assert np.all(np.diff(means) > 5)
    np.testing.assert_allclose(means, [f.mean() for f in frames], atol=3)
    video = sio.load_video(str(tmp_path / "rec.mp4"))
    assert video.shape[0] == 15 and video.fps == pytest.approx(30.0)


def test_recorder_pads_odd_sizes_and_takes_grayscale(tmp_path):
    frames = [np.full((31, 45, 1), 20 * i, np.uint8) for i in range(5)]
    with VideoRecorder(tmp_path / "rec.mp4", 15, (31, 45, 1)) as recorder:
        for frame in frames:
            recorder.encode(frame)
    decoded = decode(tmp_path / "rec.mp4")
    assert decoded.shape == (5, 32, 46, 3)
    np.testing.assert_allclose(
        decoded[:, :31, :45].mean(axis=(1, 2, 3)), [20 * i for i in range(5)], atol=3
    )


def test_recorder_rejects_other_shapes_and_use_after_close(tmp_path):
    recorder = VideoRecorder(tmp_path / "rec.mp4", 30, (8, 8, 3))
    with pytest.raises(ValueError, match=r"expects uint8 \(8, 8, 3\)"):
        recorder.encode(np.zeros((8, 8, 1), np.uint8))
    recorder.close()
    recorder.close()
    with pytest.raises(ValueError, match="after close"):
        recorder.encode(np.zeros((8, 8, 3), np.uint8))


def test_recorder_locks_its_file_and_names_unwritable_formats(tmp_path):
    with VideoRecorder(tmp_path / "rec.mp4", 30, (8, 8, 3)) as recorder:
        with pytest.raises(OutputError, match="the recording exists; give --overwrite"):
            VideoRecorder(tmp_path / "rec.mp4", 30, (8, 8, 3))
        with pytest.raises(OutputBusyError, match="the recording is being written"):
            VideoRecorder(tmp_path / "rec.mp4", 30, (8, 8, 3), overwrite=True)
        recorder.encode(np.zeros((8, 8, 3), np.uint8))
    assert decode(tmp_path / "rec.mp4").shape[0] == 1
    assert recorder.describe() == f"recording: {tmp_path / 'rec.mp4'} (1 frames)"
    with pytest.raises(ValueError, match=r"rec\.slp: cannot record to a \.slp file.*\.mp4"):
        VideoRecorder(tmp_path / "rec.slp", 30, (8, 8, 3))
    assert not (tmp_path / "rec.slp").exists()
    with pytest.raises(ValueError, match="fps must be positive"):
        VideoRecorder(tmp_path / "rec2.mp4", float("inf"), (8, 8, 3))


def test_a_recording_replaces_an_earlier_one_only_when_it_is_finished(tmp_path):
    """Issue 37: --record wrote over the last session's recording from its first frame,
    so a refused, failed or cut-short rerun had already destroyed it."""
    video, times = tmp_path / "rec.mkv", tmp_path / "rec.mkv.timestamps.csv"
    video.write_bytes(b"last session")
    times.write_bytes(b"last session's times")
    recorder = VideoRecorder(video, 30, (8, 8, 3), codec="ffv1", overwrite=True)
    recorder.encode(np.zeros((8, 8, 3), np.uint8), source_frame_index=0, capture_time=0.0)
    assert video.read_bytes() == b"last session"  # the run goes on: the old file stays
    recorder.discard()  # a failed run
    assert video.read_bytes() == b"last session"
    assert times.read_bytes() == b"last session's times"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([times.name, video.name])
    with VideoRecorder(video, 30, (8, 8, 3), codec="ffv1", overwrite=True) as recorder:
        recorder.encode(np.full((8, 8, 3), 7, np.uint8), source_frame_index=3, capture_time=0.1)
    np.testing.assert_array_equal(decode(video), np.full((1, 8, 8, 3), 7, np.uint8))
    assert times.read_text().splitlines()[1] == "0,3,0.1"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([times.name, video.name])
