"""SlpWriter and VideoRecorder: round trips through sleap-io and PyAV."""

from __future__ import annotations

import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live.engines.types import FramePoses, Skeleton
from sleap_live.stream.types import PoseRecord
from sleap_live.stream.writers import SlpWriter, VideoRecorder

SKELETON = Skeleton(node_names=("head", "thorax", "tail"), edges=((0, 1), (1, 2)), name="fly")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(frame_index: int, points: np.ndarray, identities=None) -> PoseRecord:
    n = points.shape[0]
    scores = np.where(np.isnan(points[..., 0]), np.nan, 0.5 + 0.01 * frame_index)
    poses = FramePoses(
        points=points.astype(np.float32),
        point_scores=scores.astype(np.float32),
        instance_scores=np.linspace(0.9, 0.8, n).astype(np.float32),
        identities=np.asarray(identities if identities is not None else [-1] * n, np.int32),
    )
    return PoseRecord(frame_index, 1.0, 1.01, "test", poses)


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


def test_periodic_saves_keep_every_frame_written_before_them(tmp_path):
    clock = FakeClock()
    slp = writer(tmp_path, save_interval=5.0, clock=clock)
    path = tmp_path / "out.slp"
    slp.write(record(0, two_animals(0)))
    assert not path.exists()
    clock.now = 5.0
    slp.write(record(1, two_animals(1)))
    assert len(sio.load_slp(str(path), open_videos=False)) == 2
    clock.now = 6.0
    slp.write(record(2, two_animals(2)))
    assert len(sio.load_slp(str(path), open_videos=False)) == 2
    assert list(tmp_path.glob(".*partial*")) == []
    slp.close()
    slp.close()
    assert len(sio.load_slp(str(path), open_videos=False)) == 3


def test_slow_saves_are_spaced_out(tmp_path):
    class SlowClock(FakeClock):
        """Every reading advances 1 s, so each save appears to take 1 s."""

        def __call__(self) -> float:
            self.now += 1.0
            return self.now

    class CountingWriter(SlpWriter):
        saves = 0

        def flush(self) -> None:
            self.saves += 1
            super().flush()

    slp = CountingWriter(
        tmp_path / "out.slp",
        SKELETON,
        video="v",
        frame_shape=(4, 4, 1),
        save_interval=2.0,
        clock=SlowClock(),
    )
    for i in range(30):
        slp.write(record(i, two_animals(i)))
    # 30 writes span ~60 clock seconds; a save that takes 1 s pushes the next one
    # 10 s away instead of the 2 s interval, so about 5 saves happen, not 20.
    assert 3 <= slp.saves <= 6
    slp.close()


def test_write_rejects_wrong_node_count_and_use_after_close(tmp_path):
    slp = writer(tmp_path)
    with pytest.raises(ValueError, match=r"expected \(instances, 3, 2\)"):
        slp.write(record(0, np.zeros((1, 4, 2), np.float32)))
    slp.close()
    with pytest.raises(ValueError, match="after close"):
        slp.write(record(0, two_animals(0)))


def test_bad_output_paths_name_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"out\.h5: pose output must be a \.slp file"):
        SlpWriter(tmp_path / "out.h5", SKELETON, video="v", frame_shape=(4, 4, 1))
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
            recorder.write(frame)
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
            recorder.write(frame)
    decoded = decode(tmp_path / "rec.mp4")
    assert decoded.shape == (5, 32, 46, 3)
    np.testing.assert_allclose(
        decoded[:, :31, :45].mean(axis=(1, 2, 3)), [20 * i for i in range(5)], atol=3
    )


def test_recorder_rejects_other_shapes_and_use_after_close(tmp_path):
    recorder = VideoRecorder(tmp_path / "rec.mp4", 30, (8, 8, 3))
    with pytest.raises(ValueError, match=r"expects uint8 \(8, 8, 3\)"):
        recorder.write(np.zeros((8, 8, 1), np.uint8))
    recorder.close()
    recorder.close()
    with pytest.raises(ValueError, match="after close"):
        recorder.write(np.zeros((8, 8, 3), np.uint8))
