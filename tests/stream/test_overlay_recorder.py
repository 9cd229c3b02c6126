"""`--record-overlay`: the processed frames with their poses drawn, recorded live."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from sleap_io.rendering.colors import get_palette

from sleap_live import cli
from sleap_live.engines.runners import load as engines_api
from sleap_live.engines.types import FramePoses, Skeleton
from sleap_live.stream.outputs.overlay_recorder import OverlayRecorder
from sleap_live.stream.types import PoseRecord

SKELETON = Skeleton(node_names=("head", "tail"), edges=((0, 1),))
PALETTE = get_palette("standard", 3)


def decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def record(index: int, points: list, identities: list[int]) -> PoseRecord:
    array = np.array(points, np.float32).reshape(len(points), 2, 2)
    poses = FramePoses(
        points=array,
        point_scores=np.ones(array.shape[:2], np.float32),
        instance_scores=np.ones(len(points), np.float32),
        identities=np.array(identities, np.int32),
    )
    return PoseRecord(index, 0.0, 0.0, "test", poses)


def test_each_identity_keeps_its_colour_and_frames_without_poses_are_unchanged(tmp_path):
    output = tmp_path / "overlay.mkv"
    image = np.full((48, 64, 1), 90, np.uint8)
    a, b = [[10, 10], [20, 10]], [[40, 30], [50, 30]]
    with OverlayRecorder(output, 30, image.shape, SKELETON, ("left", "right"), codec="ffv1") as rec:
        rec.write(record(0, [a, b], [0, 1]), image)
        rec.write(record(1, [b, a], [1, 0]), image)  # the order changes, not the colours
        rec.write(record(2, [a], [-1]), image)  # no identity: the colour after the classes'
        rec.write(record(3, [], []), image)
    assert rec.describe() == f"overlay recording: {output} (4 frames)"
    frames = decode(output)
    assert len(frames) == 4 and frames[0].shape == (48, 64, 3)
    for frame in frames[:2]:
        assert tuple(frame[10, 10]) == PALETTE[0] and tuple(frame[30, 40]) == PALETTE[1]
    assert tuple(frames[2][10, 10]) == PALETTE[2]
    assert (frames[3] == 90).all()
    # Drawn only near the poses.
    assert (frames[0][40:, :30] == 90).all()


def test_without_classes_colours_follow_the_instance(tmp_path):
    output = tmp_path / "overlay.mkv"
    image = np.full((48, 64, 3), 90, np.uint8)
    a, b = [[10, 10], [20, 10]], [[40, 30], [50, 30]]
    with OverlayRecorder(output, 30, image.shape, SKELETON, codec="ffv1") as rec:
        rec.write(record(0, [b, a], [-1, -1]), image)
    (frame,) = decode(output)
    assert tuple(frame[30, 40]) == PALETTE[0] and tuple(frame[10, 10]) == PALETTE[1]


def test_a_recorder_that_got_no_frames_writes_nothing(tmp_path):
    output = tmp_path / "overlay.mp4"
    rec = OverlayRecorder(output, 30, (48, 64, 1), SKELETON)
    rec.close()
    assert not output.exists() and list(tmp_path.iterdir()) == []
    assert "not written" in rec.describe()


def write_indexed_video(path: Path, n_frames: int, fakes) -> Path:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=30)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "gray"
        for index in range(n_frames):
            image = fakes.frame_image(index, (24, 32, 1))[..., 0]
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="gray")))
        container.mux(stream.encode())
    return path


@pytest.fixture
def fake_engine(monkeypatch, fakes):
    monkeypatch.setattr(engines_api, "load_runner", lambda models, **options: fakes.FakeRunner())


def test_run_records_the_overlay_of_every_frame(tmp_path, fakes, fake_engine, capsys):
    video = write_indexed_video(tmp_path / "clip.mkv", 20, fakes)
    overlay = tmp_path / "overlay.mp4"
    argv = ["run", str(video), "-m", "m", "-o", str(tmp_path / "p.slp")]
    assert cli.main([*argv, "--record-overlay", str(overlay)]) == 0
    assert f"overlay recording: {overlay} (20 frames)" in capsys.readouterr().err
    frames = decode(overlay)
    assert len(frames) == 20 and frames[0].shape == (24, 32, 3)
    for index, frame in enumerate(frames):
        poses = fakes.poses_for(index)
        fill = fakes.fill_of(index)
        for x, y in poses.points.reshape(-1, 2):
            assert np.abs(frame[int(y), int(x)].astype(int) - fill).max() > 40
        # The bottom rows are far from every point the fake engine reports.
        assert np.abs(frame[20:, :].astype(int) - fill).mean() < 4


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("clip.mkv", 1, "the output of --record-overlay is the VIDEO input"),
        ("p.slp", 1, "the output of --record-overlay is the -o input"),
        ("overlay.slp", 2, "cannot record to a .slp file"),
    ],
)
def test_record_overlay_onto_an_input_or_another_output_is_refused(
    tmp_path, fakes, fake_engine, capsys, name, status, message
):
    video = write_indexed_video(tmp_path / "clip.mkv", 5, fakes)
    before = video.read_bytes()
    argv = ["run", str(video), "-m", "m", "-o", str(tmp_path / "p.slp")]
    assert cli.main([*argv, "--record-overlay", str(tmp_path / name)]) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / name}: " in err and message in err, err
    assert video.read_bytes() == before


def test_a_tracked_run_colours_follow_the_track(tmp_path):
    from sleap_live.stream.outputs.overlay_recorder import TRACK_COLOURS

    palette = get_palette("standard", TRACK_COLOURS)
    output = tmp_path / "overlay.mkv"
    image = np.full((48, 64, 3), 90, np.uint8)
    a, b = [[10, 10], [20, 10]], [[40, 30], [50, 30]]
    with OverlayRecorder(output, 30, image.shape, SKELETON, tracked=True, codec="ffv1") as rec:
        rec.write(record(0, [a, b], [3, 12]), image)
        rec.write(record(1, [b, a], [12, -1]), image)
    first, second = decode(output)
    assert tuple(first[10, 10]) == palette[3] and tuple(first[30, 40]) == palette[12 % 10]
    assert tuple(second[30, 40]) == palette[2] and tuple(second[10, 10]) == palette[10]
