"""Tests for sleap_live.engines.graph.peaks."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from sleap_live.engines.graph import peaks
from sleap_live.engines.ort_options import session_options


def _gaussian(height: int, width: int, x: float, y: float, sigma: float, peak: float = 1.0):
    rows, cols = torch.meshgrid(
        torch.arange(height, dtype=torch.float32),
        torch.arange(width, dtype=torch.float32),
        indexing="ij",
    )
    return peak * torch.exp(-((cols - x) ** 2 + (rows - y) ** 2) / (2 * sigma**2))


def _maps(*pixels: tuple[int, int, float], size: tuple[int, int] = (8, 8)) -> torch.Tensor:
    """A (1, 1, H, W) map, zero but for the given (row, col, value) pixels."""
    cms = torch.zeros((1, 1, *size))
    for row, col, value in pixels:
        cms[0, 0, row, col] = value
    return cms


class TestGlobalPeaks:
    @pytest.mark.parametrize(("x", "y"), [(12.3, 7.8), (5.0, 5.0), (20.45, 14.55), (9.7, 3.2)])
    def test_integral_refinement_recovers_subpixel_centre(self, x, y):
        cms = _gaussian(24, 32, x, y, sigma=0.8)[None, None]
        points, values = peaks.global_peaks(cms, threshold=0.2)
        assert points[0, 0].tolist() == pytest.approx([x, y], abs=0.05)
        assert values[0, 0].item() == cms.max().item()

    def test_without_refinement_points_are_grid_pixels(self):
        cms = _gaussian(24, 32, 12.3, 7.8, sigma=1.0)[None, None]
        points, _ = peaks.global_peaks(cms, threshold=0.2, refine=False)
        assert points[0, 0].tolist() == [12.0, 8.0]

    def test_ties_take_first_column_and_first_row_independently(self):
        # Equal maxima at (row 2, col 5) and (row 4, col 1): x is the first column
        # holding the maximum (1), y the first row holding it (2), as sleap-nn's
        # chained reductions give.
        cms = _maps((2, 5, 0.9), (4, 1, 0.9))
        points, values = peaks.global_peaks(cms, threshold=0.2, refine=False)
        assert points[0, 0].tolist() == [1.0, 2.0]
        assert values[0, 0].item() == pytest.approx(0.9)

    def test_threshold_is_inclusive_and_missing_peaks_are_nan(self):
        cms = torch.cat([_maps((3, 3, 0.5)), _maps((3, 3, 0.49))], dim=1)
        points, values = peaks.global_peaks(cms, threshold=0.5)
        assert values[0, 0].item() == 0.5 and not torch.isnan(points[0, 0]).any()
        assert torch.isnan(points[0, 1]).all() and math.isnan(values[0, 1].item())

    def test_refinement_window_reads_zeros_outside_the_map(self):
        # Peak in the corner: the window's outside rows/columns count as zeros.
        cms = _maps((0, 0, 1.0), (0, 1, 0.5), (1, 0, 0.25))
        points, _ = peaks.global_peaks(cms, threshold=0.2)
        assert points[0, 0].tolist() == pytest.approx([0.5 / 1.75, 0.25 / 1.75])

    def test_shapes_for_samples_and_channels(self):
        cms = torch.rand((3, 5, 10, 12))
        points, values = peaks.global_peaks(cms, threshold=0.0)
        assert points.shape == (3, 5, 2) and values.shape == (3, 5)


class TestLocalPeakMap:
    def _peaks(self, cms, threshold=0.2):
        is_peak, offsets = peaks.local_peak_map(cms, threshold)
        found = torch.nonzero(is_peak[0, 0]).tolist()
        return [(row, col, *offsets[0, 0, row, col].tolist()) for row, col in found]

    def test_isolated_peaks(self):
        cms = _maps((2, 2, 0.9), (5, 6, 0.5), (5, 5, 0.4))
        assert self._peaks(cms) == [(2, 2, 0.0, 0.0), (5, 6, 0.0, 0.0)]

    def test_threshold_is_strict(self):
        assert self._peaks(_maps((3, 3, 0.2))) == []

    @pytest.mark.parametrize(
        ("top", "offset"),
        [
            ([(3, 3), (3, 4)], (0.5, 0.0)),  # horizontal pair
            ([(3, 3), (4, 3)], (0.0, 0.5)),  # vertical pair
            ([(3, 3), (4, 4)], (0.5, 0.5)),  # diagonal pair
            ([(3, 3), (3, 4), (4, 3), (4, 4)], (0.5, 0.5)),  # 2x2 block
            ([(3, 3), (4, 2), (4, 3)], (-1 / 3, 2 / 3)),  # L reaching back
        ],
    )
    def test_flat_top_fitting_a_2x2_block_is_one_peak_at_its_mean(self, top, offset):
        cms = _maps(*((row, col, 0.7) for row, col in top))
        assert self._peaks(cms) == [(3, 3, pytest.approx(offset[0]), pytest.approx(offset[1]))]

    @pytest.mark.parametrize(
        "top",
        [
            [(3, 2), (3, 3), (3, 4)],  # three in a row
            [(3, 3), (4, 2), (4, 4)],  # does not fit a 2x2 block
            [(3, 3), (3, 4), (4, 5)],  # pair with an equal pixel next to it
        ],
    )
    def test_wider_flat_top_is_no_peak(self, top):
        cms = _maps(*((row, col, 0.7) for row, col in top))
        assert self._peaks(cms) == []

    def test_flat_top_next_to_a_higher_pixel_is_no_peak(self):
        cms = _maps((3, 3, 0.7), (3, 4, 0.7), (2, 5, 0.9))
        assert self._peaks(cms) == [(2, 5, 0.0, 0.0)]


def _reference_local_peaks(cms: np.ndarray, threshold: float) -> dict[tuple, tuple]:
    """The module docstring's local-peak rule, pixel by pixel: (s, c, row, col) -> xy offset."""
    padded = np.pad(cms, ((0, 0), (0, 0), (2, 2), (2, 2)), constant_values=-np.inf)
    before = [(-1, -1), (-1, 0), (-1, 1), (0, -1)]
    after = [(0, 1), (1, -1), (1, 0), (1, 1)]
    found = {}
    for s, c, row, col in itertools.product(*map(range, cms.shape)):
        value = cms[s, c, row, col]
        around = [padded[s, c, row + 2 + dr, col + 2 + dc] for dr, dc in before + after]
        if value <= threshold or max(around[:4]) >= value or max(around[4:]) > value:
            continue
        top = [(0, 0)] + [d for d, high in zip(after, around[4:], strict=True) if high == value]
        rows, cols = zip(*top, strict=True)
        if max(rows) - min(rows) > 1 or max(cols) - min(cols) > 1:
            continue
        next_to_top = {(r + dr, k + dk) for r, k in top for dr, dk in before + after} - set(top)
        if any(padded[s, c, row + 2 + r, col + 2 + k] >= value for r, k in next_to_top):
            continue
        found[(s, c, row, col)] = (np.mean(cols), np.mean(rows))
    return found


def _plateau_maps(seed: int, shape=(3, 2, 9, 11)) -> torch.Tensor:
    """Maps of a few levels, so that most peaks are flat tops of every shape."""
    levels = np.array([0.0, 0.1, 0.5, 0.7, 0.9], dtype=np.float32)
    rng = np.random.default_rng(seed)
    return torch.from_numpy(levels[rng.integers(0, len(levels), shape)])


class _LocalPeakMap(torch.nn.Module):
    def forward(self, cms):
        return peaks.local_peak_map(cms, 0.2)


def _map_cases() -> list[torch.Tensor]:
    smooth = torch.stack([_gaussian(12, 10, 4.3, 3.6, 1.2), _gaussian(12, 10, 7.6, 6.2, 0.9)])
    return [_plateau_maps(seed) for seed in range(3)] + [smooth[None]]


@pytest.mark.parametrize("seed", range(6))
def test_local_peak_map_follows_the_rule_on_flat_tops_of_every_shape(seed):
    cms = _plateau_maps(seed)
    is_peak, offsets = peaks.local_peak_map(cms, 0.2)
    found = {
        tuple(index): tuple(offsets[tuple(index)].tolist()) for index in is_peak.nonzero().tolist()
    }
    expected = _reference_local_peaks(cms.numpy(), 0.2)
    assert found.keys() == expected.keys()
    for index, offset in expected.items():
        assert found[index] == pytest.approx(offset)


def test_exported_local_peak_map_matches_torch_bit_for_bit_with_and_without_flat_tops():
    buffer = io.BytesIO()
    torch.onnx.export(
        _LocalPeakMap(),
        (_plateau_maps(0),),
        buffer,
        dynamo=False,
        opset_version=17,
        input_names=["cms"],
        dynamic_axes={"cms": {0: "batch", 2: "height", 3: "width"}},
    )
    # The flat-top rule is one branch of an If, not run on maps without flat tops.
    ops = [node.op_type for node in onnx.load_from_string(buffer.getvalue()).graph.node]
    assert ops.count("If") == 1
    session = ort.InferenceSession(
        buffer.getvalue(), session_options(), providers=["CPUExecutionProvider"]
    )
    ran_flat_top_rule = []
    for cms in _map_cases():
        expected = [t.numpy() for t in peaks.local_peak_map(cms, 0.2)]
        got = session.run(None, {"cms": cms.contiguous().numpy()})
        for ours, theirs in zip(got, expected, strict=True):
            assert ours.dtype == theirs.dtype
            np.testing.assert_array_equal(ours.view(np.uint8), theirs.view(np.uint8))
        # The flat-top branch gives some pixel with a tied or higher later neighbour
        # a non-zero offset; the other branch gives none.
        ran_flat_top_rule.append(bool(expected[1].any()))
    assert ran_flat_top_rule == [True, True, True, False]


class TestTopLocalPeaks:
    def _frames(self):
        first = _maps((1, 6, 0.5), (4, 2, 0.9), (6, 5, 0.7))
        second = _maps((2, 2, 0.3))
        return torch.cat([first, second, torch.zeros_like(first)])

    def test_all_peaks_in_raster_order_when_within_the_limit(self):
        samples, points, values = peaks.top_local_peaks(self._frames(), 3, refine=False)
        assert samples.tolist() == [0, 0, 0, 1]
        assert points.tolist() == [[6, 1], [2, 4], [5, 6], [2, 2]]
        assert values.tolist() == pytest.approx([0.5, 0.9, 0.7, 0.3])

    def test_highest_first_when_over_the_limit(self):
        samples, points, values = peaks.top_local_peaks(self._frames(), 2, refine=False)
        assert samples.tolist() == [0, 0, 1]
        assert points.tolist() == [[2, 4], [5, 6], [2, 2]]
        assert values.tolist() == pytest.approx([0.9, 0.7, 0.3])

    def test_refines_around_the_floor_of_a_flat_top(self):
        # L-shaped top anchored at (row 3, col 3) has its mean at x = 3 - 1/3, so
        # refinement works around pixel (row 3, col 2) and adds to that.
        cms = _maps((3, 3, 0.7), (4, 2, 0.7), (4, 3, 0.7))
        _, points, _ = peaks.top_local_peaks(cms, 5)
        window = cms[0, 0, 1:6, 0:5]
        grid = torch.arange(5.0) - 2
        expected = [
            2 + (window * grid).sum() / window.sum(),
            3 + (window * grid[:, None]).sum() / window.sum(),
        ]
        assert points[0].tolist() == pytest.approx([float(v) for v in expected])

    def test_maps_smaller_than_the_limit(self):
        cms = _maps((1, 1, 0.9), size=(3, 3))
        samples, _, values = peaks.top_local_peaks(cms, 20)
        assert samples.tolist() == [0] and values.tolist() == pytest.approx([0.9])

    @pytest.mark.parametrize("limit", [4, None])
    def test_no_peaks(self, limit):
        samples, points, values = peaks.top_local_peaks(torch.zeros((2, 1, 6, 6)), limit)
        assert samples.shape == (0,) and points.shape == (0, 2) and values.shape == (0,)

    def test_no_limit_keeps_every_peak_in_raster_order(self):
        # sleap-nn predict's default: no max_instances, every centroid.
        spots = [(row, col, 0.3 + 0.01 * (row + col)) for row in range(1, 12, 2) for col in (1, 4)]
        cms = torch.cat([_maps(*spots, size=(13, 6)), _maps((5, 2, 0.6), size=(13, 6))])
        samples, points, values = peaks.top_local_peaks(cms, None, refine=False)
        assert samples.tolist() == [0] * len(spots) + [1]
        assert points.tolist() == [[col, row] for row, col, _ in spots] + [[2, 5]]
        assert values.tolist() == pytest.approx([value for *_, value in spots] + [0.6])
        refined = peaks.top_local_peaks(cms, None)
        limited = peaks.top_local_peaks(cms, len(spots))
        for ours, capped in zip(refined, limited, strict=True):
            assert torch.equal(ours, capped)


def test_grid_to_image_applies_stride_then_scale():
    points = torch.tensor([[3.0, 4.5]])
    assert peaks.grid_to_image(points, 4, 0.5).tolist() == [[24.0, 36.0]]
    assert peaks.grid_to_image(points, 2, 1.0).tolist() == [[6.0, 9.0]]


def test_integral_offsets_of_a_symmetric_patch_are_zero():
    maps = torch.from_numpy(np.outer([1, 2, 3, 2, 1], [1, 2, 3, 2, 1]).astype(np.float32))[None]
    offsets = peaks.integral_offsets(maps, torch.tensor([0]), torch.tensor([[2.0, 2.0]]))
    assert offsets.tolist() == [[0.0, 0.0]]
