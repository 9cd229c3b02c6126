"""NV12 -> gray/RGB in torch against PyAV's own conversion of the same NV12 frames."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch

from sleap_live.stream.sources import nv12

VIDEOS = sorted((Path(__file__).parents[1] / "data" / "videos").glob("*.m[pk][4v]"))
# (colorspace tag, color range tag): untagged, BT.709 limited, BT.601 (SMPTE 170M)
# full range, BT.2020 limited.
TAGS = [(2, 0), (1, 1), (6, 2), (9, 1)]


def planes(frame: av.VideoFrame) -> tuple[torch.Tensor, torch.Tensor]:
    """Luma (H, W) and chroma (H/2, W/2, 2) of an NV12 frame, as tensors."""
    luma, chroma = frame.planes
    y = np.frombuffer(luma, np.uint8).reshape(luma.height, luma.line_size)[:, : frame.width]
    uv = np.frombuffer(chroma, np.uint8).reshape(chroma.height, chroma.line_size)
    uv = uv[:, : 2 * ((frame.width + 1) // 2)]
    return torch.from_numpy(y.copy()), torch.from_numpy(uv.copy()).reshape(chroma.height, -1, 2)


def surface(frame: av.VideoFrame, pitch: int) -> torch.Tensor:
    """The frame as one (rows, pitch) NV12 surface, as NVDEC lays it out."""
    y, uv = planes(frame)
    out = torch.full((y.shape[0] + uv.shape[0], pitch), 7, dtype=torch.uint8)
    out[: y.shape[0], : y.shape[1]] = y
    out[y.shape[0] :, : 2 * uv.shape[1]] = uv.reshape(uv.shape[0], -1)
    return out


def check(frame: av.VideoFrame) -> None:
    """Our conversion of `frame`'s planes equals PyAV's wherever `reproducible` says so."""
    matrix, full = nv12.matrix_of(frame.colorspace), nv12.is_full_range(frame.color_range)
    luma, chroma = planes(frame)
    if nv12.reproducible(frame.width, frame.height, matrix, 3) is None:
        rgb = nv12.nv12_to_rgb(luma, chroma, nv12.yuv_tables(matrix, full)).numpy()
        np.testing.assert_array_equal(rgb, frame.to_ndarray(format="rgb24"))


def bare(frame: av.VideoFrame) -> av.VideoFrame:
    """A copy of an NV12 frame's pixels without its metadata.

    PyAV tags NV12 it makes from RGB with a chroma siting that swscale then honours
    when converting back; NVDEC's planes come with no tags but those the source
    passes on (colour matrix and range, set by `tagged`).
    """
    # The pixels alone: the planes' padding differs between PyAV releases (18.1.1 pads
    # a new frame's rows less than swscale's output).
    return av.VideoFrame.from_ndarray(frame.to_ndarray(), format="nv12")


def tagged(frame: av.VideoFrame, colorspace: int, color_range: int) -> av.VideoFrame:
    frame.colorspace, frame.color_range = colorspace, color_range
    return frame


@pytest.mark.parametrize("video", VIDEOS, ids=lambda path: path.name)
def test_every_frame_of_the_fixture_videos(video):
    """Every frame, reformatted to NV12 by PyAV at its own size and at another."""
    with av.open(str(video)) as container:
        for index, decoded in enumerate(container.decode(video=0)):
            for width, height in ((decoded.width, decoded.height), (198, 130)):
                frame = bare(decoded.reformat(width=width, height=height, format="nv12"))
                # Tags cycle over frames so every clip meets each of them many times.
                check(tagged(frame, *TAGS[index % len(TAGS)]))


@pytest.mark.parametrize(("colorspace", "color_range"), TAGS)
def test_every_chroma_pair_and_luma_level(colorspace, color_range):
    """All 65536 (U, V) pairs, each against many luma levels and both row phases."""
    height = width = 512
    rows, cols = np.mgrid[:height, :width]
    y = ((rows * 7 + cols * 3) % 256).astype(np.uint8)
    chroma = np.empty((height // 2, width), np.uint8)
    chroma[:, 0::2] = np.arange(height // 2)[:, None]  # U by chroma row
    chroma[:, 1::2] = np.arange(width // 2)[None, :]  # V by chroma column
    frame = av.VideoFrame.from_ndarray(np.concatenate([y, chroma]), format="nv12")
    check(tagged(frame, colorspace, color_range))


def test_surface_with_pitch_splits_into_the_frame_planes():
    frame = av.VideoFrame.from_ndarray(
        np.random.default_rng(0).integers(0, 256, (72, 64), np.uint8), format="nv12"
    )
    luma, chroma = nv12.split_nv12(surface(frame, pitch=128), 48, 64)
    want_luma, want_chroma = planes(frame)
    assert torch.equal(luma, want_luma) and torch.equal(chroma, want_chroma)
    with pytest.raises(ValueError, match="cannot hold a 64x48 frame"):
        nv12.split_nv12(torch.zeros(60, 64, dtype=torch.uint8), 48, 64)


def test_what_is_not_reproduced_is_named():
    assert nv12.reproducible(200, 168, "bt709", 3) is None
    assert "odd frame size 199x168" in nv12.reproducible(199, 168, "bt601", 3)
    assert "odd frame size 200x167" in nv12.reproducible(200, 167, "bt601", 1)
    assert "gray from bt709" in nv12.reproducible(200, 168, "bt709", 1)
    assert nv12.matrix_of(None) == nv12.matrix_of(6) == "bt601"
    assert nv12.matrix_of(1) == "bt709" and nv12.is_full_range(2)
    with pytest.raises(ValueError, match="matrix must be one of"):
        nv12.yuv_tables("srgb")


def test_odd_widths_differ_by_at_most_two_levels():
    """What `reproducible` excludes, measured on smooth video: within 2 levels."""
    with av.open(str(VIDEOS[0])) as container:
        decoded = next(container.decode(video=0))
    frame = decoded.reformat(width=199, height=167, format="nv12")
    luma, chroma = planes(frame)
    rgb = nv12.nv12_to_rgb(luma, chroma, nv12.yuv_tables()).numpy().astype(int)
    assert np.abs(rgb - frame.to_ndarray(format="rgb24")).max() <= 2
