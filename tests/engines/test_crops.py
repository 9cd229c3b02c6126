"""Tests for sleap_live.engines.graph.crops."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from sleap_live.engines.graph import crops
from sleap_live.engines.ort_options import session_options


@pytest.mark.parametrize(
    ("center", "size", "origin"),
    [
        (10.0, 8, 6),  # even size: window starts at the rounded center - size / 2
        (10.4, 8, 6),
        (10.5, 8, 7),  # rounds half up
        (10.7, 5, 8),  # odd size: floor(center) - size // 2
        (10.0, 5, 8),
        (0.3, 4, -2),
        (-0.7, 4, -2),  # truncation toward zero, not floor (which gives -3)
    ],
)
def test_window_origins(center, size, origin):
    centers = torch.tensor([[center, center]])
    assert crops.window_origins(centers, size, size).tolist() == [[origin, origin]]


def test_window_origins_of_rectangular_windows():
    centers = torch.tensor([[20.0, 30.0]])
    assert crops.window_origins(centers, 10, 6).tolist() == [[17, 25]]


def test_box_top_left_is_center_minus_half_size_plus_half_pixel():
    centers = torch.tensor([[10.25, 40.0]])
    assert crops.box_top_left(centers, 8, 6).tolist() == [[7.75, 36.5]]


def _expected_windows(images, sample_inds, origins, height, width):
    """Each window pixel by pixel: the image's where it lies inside, else 0."""
    _, image_height, image_width, channels = images.shape
    windows = np.zeros((len(origins), height, width, channels), images.dtype)
    for window, (s, (x, y)) in enumerate(zip(sample_inds, origins, strict=True)):
        for row in range(height):
            for col in range(width):
                if 0 <= y + row < image_height and 0 <= x + col < image_width:
                    windows[window, row, col] = images[s, y + row, x + col]
    return windows


# Origins inside, across every edge and corner, and wholly outside, near and far.
ORIGINS = [
    [0, 0], [-5, 3], [25, 15], [10, -9], [-9, -9], [29, 19], [4, 7],
    [-10, 0], [30, 5], [3, 20], [-40, -3], [200, 300], [-1000, 1000],
]  # fmt: skip


@pytest.mark.parametrize("specialised", [False, True])
@pytest.mark.parametrize("channels", [1, 3])
def test_gather_windows_matches_slicing_with_zero_padding(channels, specialised):
    rng = np.random.default_rng(0)
    images = rng.integers(1, 256, (3, 20, 30, channels), dtype=np.uint8)
    origins = np.array(ORIGINS)
    sample_inds = np.arange(len(origins)) % 3
    got = crops.gather_windows(
        torch.from_numpy(images),
        torch.from_numpy(sample_inds),
        torch.from_numpy(origins),
        9,
        10,
        specialised=specialised,
    )
    assert got.dtype == torch.uint8
    np.testing.assert_array_equal(
        got.numpy(), _expected_windows(images, sample_inds, origins, 9, 10)
    )


@pytest.mark.parametrize("specialised", [False, True])
def test_gather_windows_of_no_windows(specialised):
    images = torch.zeros((2, 10, 10, 1), dtype=torch.uint8)
    got = crops.gather_windows(
        images,
        torch.zeros(0, dtype=torch.int64),
        torch.zeros((0, 2), dtype=torch.int64),
        4,
        4,
        specialised=specialised,
    )
    assert got.shape == (0, 4, 4, 1)


def test_static_windows_are_the_same_in_onnx_runtime():
    """The specialised gather, exported, gives the dynamic one's windows, whatever the count."""
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (2, 40, 50, 1), dtype=np.uint8)
    origins = rng.integers(-80, 90, (25, 2)).astype(np.int64)
    sample_inds = rng.integers(0, 2, 25).astype(np.int64)

    class Gather(torch.nn.Module):
        def forward(self, images, sample_inds, origins):
            return crops.gather_windows(images, sample_inds, origins, 16, 12, specialised=True)

    buffer = io.BytesIO()
    example = (
        torch.from_numpy(images),
        torch.from_numpy(sample_inds[:3]),
        torch.from_numpy(origins[:3]),
    )
    torch.onnx.export(
        Gather(),
        example,
        buffer,
        dynamo=False,
        input_names=["images", "inds", "origins"],
        dynamic_axes={"images": {0: "batch"}, "inds": {0: "n"}, "origins": {0: "n"}},
    )
    session = ort.InferenceSession(
        buffer.getvalue(), session_options(), providers=["CPUExecutionProvider"]
    )
    for count in (25, 1, 0):
        feed = {"images": images, "inds": sample_inds[:count], "origins": origins[:count]}
        (got,) = session.run(None, feed)
        expected = _expected_windows(images, sample_inds[:count], origins[:count], 16, 12)
        np.testing.assert_array_equal(got, expected)
    # Whole rows and then columns, and no mask of the pixels inside.
    ops = {node.op_type for node in onnx.load_from_string(buffer.getvalue()).graph.node}
    assert "GatherElements" in ops and "And" not in ops


def test_crop_centered_cuts_the_window_around_each_center():
    images = torch.arange(2 * 12 * 16, dtype=torch.float32).reshape(2, 12, 16, 1)
    centers = torch.tensor([[8.0, 6.0], [3.6, 2.2]])
    got = crops.crop_centered(images, torch.tensor([1, 0]), centers, 4, 4)
    assert torch.equal(got[0, ..., 0], images[1, 4:8, 6:10, 0])
    # Center (3.6, 2.2) rounds to (4, 2): window from (2, 0).
    assert torch.equal(got[1, ..., 0], images[0, 0:4, 2:6, 0])
