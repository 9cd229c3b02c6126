"""Fault suite, bit depths: 10, 12 and 16-bit video is scaled to 8 bits as the user
says, and never silently to near-black (issue #11).

The clips are written at test time with PyAV, losslessly (FFV1), 32x24 and a few
frames. Runs use the fake engine, whose poses come from the frame index written
in each image's first two pixels (`fakes.frame_image`): an image scaled wrongly
gives wrong (or no) instances.
"""

from __future__ import annotations

import logging
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.engines.runners import load as engines_api
from sleap_live.stream.sources import CameraSource, FileSource, ReplaySource, open_source

SHAPE = (24, 32, 1)
N_FRAMES = 6


def write_deep(path: Path, pixel_format: str, images: list[np.ndarray], data_format: str) -> Path:
    """`images` (uint16 gray or uint8 RGB, as `data_format` says) encoded with FFV1."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=30)
        stream.height, stream.width = images[0].shape[:2]
        stream.pix_fmt = pixel_format
        for image in images:
            frame = av.VideoFrame.from_ndarray(image, format=data_format)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def widened(image: np.ndarray, bits: int) -> np.ndarray:
    """An 8-bit gray image as `bits`-bit samples (uint16, 255 -> 2**bits - 1)."""
    return np.rint(image[..., 0].astype(np.float64) * ((2**bits - 1) / 255)).astype(np.uint16)


@pytest.fixture
def twelve_in_sixteen(tmp_path, fakes) -> Path:
    """12-bit data in a 16-bit (gray16le) video: frame i is `frame_image(i)` at 12 bits."""
    images = [widened(fakes.frame_image(i, SHAPE), 12) for i in range(N_FRAMES)]
    return write_deep(tmp_path / "twelve.mkv", "gray16le", images, "gray16le")


def images_of(source) -> list[np.ndarray]:
    with source:
        return [frame.image for frame in source]


def test_twelve_bits_in_a_sixteen_bit_video_are_scaled_as_told(twelve_in_sixteen, fakes):
    images = images_of(FileSource(twelve_in_sixteen, bit_depth=12))
    assert [fakes.index_of(image) for image in images] == list(range(N_FRAMES))
    for index, image in enumerate(images):
        assert image.dtype == np.uint8 and image.shape == SHAPE
        np.testing.assert_array_equal(image, fakes.frame_image(index, SHAPE))


def test_sixteen_bit_video_using_fewer_bits_is_warned_about(twelve_in_sixteen, caplog):
    with caplog.at_level(logging.WARNING):
        images = images_of(FileSource(twelve_in_sixteen))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per source, not per frame
    assert warnings[0].startswith(f"{twelve_in_sixteen}: gray16le holds 16 bits per sample")
    assert "largest value is 450 (9 bits), so scaled from 16 bits it is near-black" in warnings[0]
    assert "give the bits per sample the data uses (--bit-depth, e.g. 12" in warnings[0]
    assert max(int(image.max()) for image in images) <= 16  # what it would be: near-black


def test_a_sixteen_bit_video_using_its_bits_is_not_warned_about(tmp_path, caplog):
    ramp = np.linspace(0, 65535, SHAPE[0] * SHAPE[1]).astype(np.uint16).reshape(SHAPE[:2])
    path = write_deep(tmp_path / "full.mkv", "gray16le", [ramp], "gray16le")
    with caplog.at_level(logging.WARNING):
        (image,) = images_of(FileSource(path))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert image.min() == 0 and image.max() == 255


def test_a_twelve_bit_pixel_format_is_scaled_from_twelve_bits(tmp_path, fakes):
    images = [widened(fakes.frame_image(i, SHAPE), 12) for i in range(N_FRAMES)]
    # gray12le samples are written from 16-bit ones, whose top 12 bits they keep.
    path = write_deep(tmp_path / "g12.mkv", "gray12le", [i << 4 for i in images], "gray16le")
    got = images_of(FileSource(path))
    for index, image in enumerate(got):
        np.testing.assert_array_equal(image, fakes.frame_image(index, SHAPE))
    # Told the 12-bit format holds 10-bit data: 1023 is white, and more saturates.
    (first,) = images_of(FileSource(path, stop=1, bit_depth=10))
    expected = np.rint(np.minimum(images[0], 1023) * (255 / 1023)).astype(np.uint8)
    np.testing.assert_array_equal(first[..., 0], expected)


def test_ten_bit_color_video_keeps_its_levels(tmp_path):
    rgb = np.zeros((24, 32, 3), np.uint8)
    rgb[:, :16] = (200, 120, 40)
    rgb[:, 16:] = (30, 90, 220)
    path = write_deep(tmp_path / "y10.mkv", "yuv420p10le", [rgb], "rgb24")
    with FileSource(path) as source:
        assert source.frame_shape == (24, 32, 3)
        (image,) = [frame.image for frame in source]
    # 4:2:0 chroma and the YUV round trip cost a few levels, never the brightness.
    assert np.abs(image.astype(int) - rgb).max() <= 4


def test_replay_and_open_source_take_the_bit_depth(twelve_in_sixteen, fakes):
    with ReplaySource(twelve_in_sixteen, fps=1000, drop_late=False, bit_depth=12) as source:
        assert [fakes.index_of(frame.image) for frame in source] == list(range(N_FRAMES))
    (image, *_) = images_of(open_source(twelve_in_sixteen, bit_depth=12))
    np.testing.assert_array_equal(image, fakes.frame_image(0, SHAPE))


def test_a_camera_takes_the_bit_depth():
    # A synthetic 16-bit camera whose samples are all about 0x0f0f: near 12-bit white.
    device = "color=c=0x0f0f0f:size=32x24:rate=30,format=gray16le"
    with CameraSource(device, backend="lavfi", bit_depth=12) as source:
        told = next(iter(source)).image
    with CameraSource(device, backend="lavfi") as source:
        untold = next(iter(source)).image
    assert told.shape == untold.shape == (24, 32, 1)
    assert told.min() >= 230 and untold.max() <= 16


def test_bad_bit_depths_are_refused_naming_the_video(twelve_in_sixteen, tmp_path, fakes):
    for bad in (7, 17, 12.0, True):
        with pytest.raises(ValueError, match="bit_depth must be a whole number from 8 to 16"):
            FileSource(twelve_in_sixteen, bit_depth=bad)
    images = [widened(fakes.frame_image(0, SHAPE), 10) << 6]
    ten = write_deep(tmp_path / "g10.mkv", "gray10le", images, "gray16le")
    with pytest.raises(ValueError) as caught:
        FileSource(ten, bit_depth=12)
    assert str(caught.value) == (
        f"{ten}: bit depth 12 is more than the 10 bits per sample of its pixel format gray10le"
    )
    with pytest.raises(ValueError, match="bit_depth must be a whole number from 8 to 16"):
        open_source("color=size=32x24", camera=True, backend="lavfi", bit_depth=20)


@pytest.fixture
def runs(monkeypatch, fakes) -> None:
    monkeypatch.setattr(engines_api, "load_runner", lambda models, **options: fakes.FakeRunner())


def instances_by_frame(path: Path) -> dict[int, int]:
    labels = sio.load_slp(str(path), open_videos=False)
    return {frame.frame_idx: len(frame.instances) for frame in labels}


def test_the_command_line_scales_as_told(twelve_in_sixteen, tmp_path, runs):
    out = tmp_path / "told.slp"
    argv = ["run", str(twelve_in_sixteen), "-m", "m", "-o", str(out), "-q", "--no-verify"]
    assert cli.main([*argv, "--bit-depth", "12"]) == 0
    assert instances_by_frame(out) == {i: i % 3 for i in range(N_FRAMES)}


def test_the_command_line_warns_before_near_black_frames(twelve_in_sixteen, tmp_path, runs, caplog):
    out = tmp_path / "untold.slp"
    argv = ["run", str(twelve_in_sixteen), "-m", "m", "-o", str(out), "-q", "--no-verify"]
    with caplog.at_level(logging.WARNING):
        assert cli.main(argv) == 0
    assert any("near-black" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("value", ["7", "17", "twelve"])
def test_the_command_line_refuses_bad_bit_depths(twelve_in_sixteen, value, runs, capsys):
    argv = ["replay", str(twelve_in_sixteen), "-m", "m", "--bit-depth", value]
    assert cli.main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("sleap-live: error: argument --bit-depth:")
