"""`sleap-live run --camera ...`: --camera-option, several cameras, their errors.

No camera is attached: FFmpeg's rawvideo demuxer stands in for the capture device
(it takes the options v4l2 does: video_size, pixel_format, framerate), reading
files of raw gray frames that end, and the model is the fake runner.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.cli.camera_options import (
    CameraOption,
    open_cameras,
    options_for,
    parse_camera_option,
)
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources import camera as camera_module
from sleap_live.stream.sources.group import SourceGroup


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def raw_cameras(monkeypatch, tmp_path, fakes):
    """Makes raw gray 32x24 "camera" files of N frames; cameras open with rawvideo."""
    monkeypatch.setattr(camera_module, "default_backend", lambda: "rawvideo")

    def make(name: str, n_frames: int = 12, shape=(24, 32, 1)) -> str:
        path = tmp_path / f"{name}.raw"
        frames = [fakes.frame_image(index, shape) for index in range(n_frames)]
        path.write_bytes(np.stack(frames).tobytes())
        return str(path)

    return make


RAW_OPTIONS = ["--camera-option", "pixel_format=gray", "--camera-option", "framerate=30"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("framerate=30", CameraOption("framerate", "30")),
        ("input_format=mjpeg", CameraOption("input_format", "mjpeg")),
        ("1:framerate=60", CameraOption("framerate", "60", "1")),
        ("/dev/video2:video_size=640x480", CameraOption("video_size", "640x480", "/dev/video2")),
        ("0:none:framerate=30", CameraOption("framerate", "30", "0:none")),
        ("timestamps=", CameraOption("timestamps", "")),
    ],
)
def test_camera_option_forms(text, expected):
    assert parse_camera_option(text) == expected


def test_options_for_a_camera_are_the_shared_ones_then_its_own():
    given = [CameraOption("framerate", "30"), CameraOption("framerate", "60", "1")]
    assert options_for("0", given) == {"framerate": "30"}
    assert options_for("1", given) == {"framerate": "60"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--camera", "0", "--camera-option", "framerate"],
            "expected KEY=VALUE or CAMERA:KEY=VALUE, got 'framerate'",
        ),
        (["--camera", "0", "--camera-option", "=30"], "expected KEY=VALUE"),
        (["--camera", "0", "--camera-option", ":framerate=30"], "expected KEY=VALUE"),
        (["v.mp4", "--camera-option", "framerate=30"], "--camera-option only apply with --camera"),
        (
            ["--camera", "0", "--camera-option", "2:framerate=30"],
            "--camera-option 2:framerate=30: 2 is not a --camera of this run (0)",
        ),
        (["--camera", "0", "--camera", "0"], "--camera 0 is given twice"),
        (
            ["--camera", "0", "--camera", "1", "--batch-size", "4"],
            "--batch-size: with 2 cameras a batch holds one frame of each",
        ),
    ],
)
def test_camera_option_mistakes_are_one_line_usage_errors(argv, message, capsys, fake_loads):
    assert cli.main(["run", *argv, "-m", "m"]) == 2
    line = error_line(capsys)
    assert line.startswith("sleap-live: error: ") and message in line, line
    assert fake_loads == []  # no model was loaded


def test_camera_options_reach_the_capture_device(raw_cameras, tmp_path, fake_loads, capsys):
    camera = raw_cameras("cam", 12)
    out = tmp_path / "poses.slp"
    argv = ["run", "--camera", camera, "--width", "32", "--height", "24", *RAW_OPTIONS]
    assert cli.main([*argv, "-m", "m", "-o", str(out), "-q"]) == 0
    labels = sio.load_slp(str(out))
    # Only a gray 32x24 reading of the file gives frames whose pixels carry their index.
    assert labels.videos[0].filename == camera
    for frame in labels.labeled_frames:
        assert len(frame.instances) == frame.frame_idx % 3


def test_an_option_the_camera_refuses_names_the_camera_and_the_options(
    raw_cameras, fake_loads, capsys
):
    camera = raw_cameras("cam")
    argv = ["run", "--camera", camera, "--width", "32", "--height", "24"]
    status = cli.main([*argv, "--camera-option", "pixel_format=nosuch", "-m", "m"])
    assert status == 1
    assert error_line(capsys) == (
        f"sleap-live: error: {camera}: cannot open camera with rawvideo and options "
        "pixel_format=nosuch: Invalid argument"
    )
    assert fake_loads == []


def test_two_cameras_run_through_one_engine_into_a_file_each(
    raw_cameras, tmp_path, fake_loads, capsys, monkeypatch
):
    # Wide enough that no path in the summary is wrapped mid-name, however deep tmp_path.
    monkeypatch.setenv("COLUMNS", "1000")
    cameras = [raw_cameras("left", 12), raw_cameras("right", 9)]
    out = tmp_path / "session.slp"
    argv = ["run", "--camera", cameras[0], "--camera", cameras[1], "--width", "32"]
    argv += ["--height", "24", *RAW_OPTIONS, "-m", "m", "-o", str(out), "-q"]
    assert cli.main(argv) == 0
    (runner,) = fake_loads
    assert max(runner.batch_sizes) == 2
    err = " ".join(capsys.readouterr().err.split())
    # The summary counts drops per camera (the cameras here are files read unpaced).
    assert f"{cameras[0]}, " in err and f"{cameras[1]}), latency" in err, err
    assert not out.exists()
    for camera, n_frames, name in zip(cameras, (12, 9), ("left", "right"), strict=True):
        path = tmp_path / f"session.{name}-raw.slp"
        assert f"poses: {path} (" in err
        labels = sio.load_slp(str(path))
        assert labels.videos[0].filename == camera
        indices = [frame.frame_idx for frame in labels.labeled_frames]
        assert indices == sorted(indices) and set(indices) <= set(range(n_frames))
        for frame in labels.labeled_frames:
            assert len(frame.instances) == frame.frame_idx % 3


def test_cameras_of_different_sizes_are_refused_and_closed(raw_cameras, fakes):
    args = argparse.Namespace(camera=["a", "b"])
    opened = {
        "a": fakes.FakeSource(source_id="camera:a", shape=(24, 32, 1)),
        "b": fakes.FakeSource(source_id="camera:b", shape=(48, 64, 1)),
    }
    with pytest.raises(SourceError, match="camera:b gives 64x48, 1-channel frames"):
        open_cameras(args, 5.0, open_one=opened.__getitem__)
    assert all(source.closed for source in opened.values())


def test_a_camera_that_cannot_open_closes_those_opened_before(fakes):
    args = argparse.Namespace(camera=["a", "b"])
    first = fakes.FakeSource(source_id="camera:a")

    def open_one(camera: str):
        if camera == "b":
            raise SourceError("/dev/videob: no such camera device")
        return first

    with pytest.raises(SourceError, match="no such camera device"):
        open_cameras(args, 5.0, open_one=open_one)
    assert first.closed


def test_one_camera_is_a_source_and_several_a_group(fakes):
    sources = {name: fakes.FakeSource(source_id=f"camera:{name}") for name in "ab"}
    one = open_cameras(argparse.Namespace(camera=["a"]), 5.0, open_one=sources.__getitem__)
    assert one is sources["a"]
    group = open_cameras(argparse.Namespace(camera=["a", "b"]), 5.0, open_one=sources.__getitem__)
    assert isinstance(group, SourceGroup) and group.source_ids == ("camera:a", "camera:b")


def test_help_says_how_to_set_exposure_and_gain(capsys):
    assert cli.main(["run", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--camera-option KEY=VALUE" in text
    assert "Exposure and gain are camera controls, not FFmpeg options" in text
    assert "--camera-control NAME=VALUE" in text
