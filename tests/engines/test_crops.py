"""Tests for sleap_live.engines.graph.crops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleap_live.engines.graph import crops


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
    batch, image_height, image_width, channels = images.shape
    padded = np.zeros(
        (batch, image_height + 2 * height, image_width + 2 * width, channels), images.dtype
    )
    padded[:, height:-height, width:-width] = images
    return np.stack(
        [
            padded[s, y + height : y + 2 * height, x + width : x + 2 * width]
            for s, (x, y) in zip(sample_inds, origins, strict=True)
        ]
    )


@pytest.mark.parametrize("channels", [1, 3])
def test_gather_windows_matches_slicing_with_zero_padding(channels):
    rng = np.random.default_rng(0)
    images = rng.integers(1, 256, (3, 20, 30, channels), dtype=np.uint8)
    origins = np.array([[0, 0], [-5, 3], [25, 15], [10, -9], [-9, -9], [29, 19], [4, 7]])
    sample_inds = np.array([0, 1, 2, 0, 1, 2, 1])
    got = crops.gather_windows(
        torch.from_numpy(images), torch.from_numpy(sample_inds), torch.from_numpy(origins), 9, 10
    )
    assert got.dtype == torch.uint8
    np.testing.assert_array_equal(
        got.numpy(), _expected_windows(images, sample_inds, origins, 9, 10)
    )


def test_gather_windows_of_no_windows():
    images = torch.zeros((2, 10, 10, 1), dtype=torch.uint8)
    got = crops.gather_windows(
        images, torch.zeros(0, dtype=torch.int64), torch.zeros((0, 2), dtype=torch.int64), 4, 4
    )
    assert got.shape == (0, 4, 4, 1)


def test_crop_centered_cuts_the_window_around_each_center():
    images = torch.arange(2 * 12 * 16, dtype=torch.float32).reshape(2, 12, 16, 1)
    centers = torch.tensor([[8.0, 6.0], [3.6, 2.2]])
    got = crops.crop_centered(images, torch.tensor([1, 0]), centers, 4, 4)
    assert torch.equal(got[0, ..., 0], images[1, 4:8, 6:10, 0])
    # Center (3.6, 2.2) rounds to (4, 2): window from (2, 0).
    assert torch.equal(got[1, ..., 0], images[0, 0:4, 2:6, 0])
