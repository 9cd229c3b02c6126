"""PAF line scoring: sampling, scores and penalty, checked against a plain loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sleap_live.engines.graph.paf import PafLineScorer


def _loop_scores(pafs, peaks, edges, stride, n_points, ratio, weight):
    """Straightforward per-candidate implementation of sleap-nn's scoring rules."""
    batch, channels, height, width = pafs.shape
    max_len = ratio * max(channels, height, width) * stride
    k = peaks.shape[2]
    steps = np.linspace(0, 1, n_points, dtype=np.float32)
    out = np.zeros((batch, len(edges), k, k), np.float32)
    for b in range(batch):
        for e, (s, d) in enumerate(edges):
            for i in range(k):
                for j in range(k):
                    src, dst = peaks[b, s, i], peaks[b, d, j]
                    vec = dst - src
                    length = float(np.hypot(*vec))
                    unit = vec / length
                    total = 0.0
                    for t in steps:
                        x, y = (src + vec * t) / stride
                        col = min(max(int(np.round(x)), 0), width - 1)
                        row = min(max(int(np.round(y)), 0), height - 1)
                        total += pafs[b, 2 * e, row, col] * unit[0]
                        total += pafs[b, 2 * e + 1, row, col] * unit[1]
                    penalty = min(max_len / length - 1, 0) * weight
                    out[b, e, i, j] = total / n_points + penalty
    return out


def test_scores_match_a_plain_loop_on_random_fields():
    rng = np.random.default_rng(1)
    edges = [(0, 1), (1, 2), (0, 2)]
    pafs = rng.normal(size=(2, 6, 12, 20)).astype(np.float32)
    peaks = rng.uniform(0, 80, size=(2, 3, 4, 2)).astype(np.float32)
    scorer = PafLineScorer(edges, paf_stride=4, n_points=7, dist_penalty_weight=2.0)

    scores = scorer(torch.from_numpy(pafs), torch.from_numpy(peaks)).numpy()

    expected = _loop_scores(pafs, peaks, edges, 4, 7, 0.25, 2.0)
    assert scores.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(scores, expected, atol=1e-5)


def test_aligned_field_scores_one_and_reversed_pair_minus_one():
    pafs = torch.zeros(1, 2, 32, 32)
    pafs[:, 0] = 1.0  # unit vectors pointing +x everywhere
    peaks = torch.tensor([[[[4.0, 10.0], [18.0, 10.0]], [[20.0, 10.0], [2.0, 10.0]]]])
    scorer = PafLineScorer([(0, 1)], paf_stride=2)

    scores = scorer(pafs, peaks)[0, 0]

    assert scores[0, 0].item() == pytest.approx(1.0)  # 4 -> 20 along +x
    assert scores[1, 1].item() == pytest.approx(-1.0)  # 18 -> 2 against it


def test_long_lines_are_penalised_relative_to_the_largest_paf_dimension():
    pafs = torch.zeros(1, 2, 10, 40)
    pafs[:, 0] = 1.0
    peaks = torch.tensor([[[[0.0, 0.0]], [[40.0, 0.0]]]])
    scorer = PafLineScorer([(0, 1)], paf_stride=1, max_edge_length_ratio=0.25)

    score = scorer(pafs, peaks)[0, 0, 0, 0].item()

    max_len = 0.25 * 40 * 1  # max(2 * edges, 10, 40) * stride
    assert score == pytest.approx(1.0 + (max_len / 40.0 - 1.0))


def test_channel_count_takes_part_in_the_maximum_edge_length():
    # sleap-nn's max(...) runs over the channels-last PAF shape, channels included.
    edges = [(0, 1)] * 12  # 24 channels on an 8x8 grid
    pafs = torch.zeros(1, 24, 8, 8)
    peaks = torch.tensor([[[[0.0, 0.0]], [[48.0, 0.0]]]])
    scorer = PafLineScorer(edges, paf_stride=1, max_edge_length_ratio=0.25)

    score = scorer(pafs, peaks)[0, 0, 0, 0].item()

    assert score == pytest.approx(0.25 * 24 / 48.0 - 1.0)


def test_samples_round_half_to_even_like_sleap_nn():
    # Points at x = 1.5 and 2.5 (in PAF pixels) both round to column 2.
    pafs = torch.zeros(1, 2, 4, 8)
    pafs[0, 0, 0, 2] = 1.0
    peaks = torch.tensor([[[[3.0, 0.0]], [[5.0, 0.0]]]])
    scorer = PafLineScorer([(0, 1)], paf_stride=2, n_points=2)

    score = scorer(pafs, peaks)[0, 0, 0, 0].item()

    assert score == pytest.approx(1.0)


def test_coincident_peaks_score_nan():
    pafs = torch.ones(1, 2, 8, 8)
    peaks = torch.tensor([[[[3.0, 3.0]], [[3.0, 3.0]]]])

    score = PafLineScorer([(0, 1)], paf_stride=1)(pafs, peaks)[0, 0, 0, 0].item()

    assert math.isnan(score)


def test_points_outside_the_field_are_clipped_to_its_border():
    pafs = torch.zeros(1, 2, 4, 4)
    pafs[0, 1, 3, :] = 1.0  # +y along the bottom row
    peaks = torch.tensor([[[[1.0, 20.0]], [[1.0, 40.0]]]])

    score = PafLineScorer([(0, 1)], paf_stride=1)(pafs, peaks)[0, 0, 0, 0].item()

    assert score == pytest.approx(1.0 + (0.25 * 4 / 20.0 - 1.0))


def test_rejects_empty_edges_and_zero_points():
    with pytest.raises(ValueError, match="at least one skeleton edge"):
        PafLineScorer([], paf_stride=2)
    with pytest.raises(ValueError, match="n_points"):
        PafLineScorer([(0, 1)], paf_stride=2, n_points=0)
