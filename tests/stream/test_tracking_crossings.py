"""Animals that cross paths: what the tracker does, as docs/tracking.md describes it.

The ``crossing`` poses of goldens/tracking.npz are two synthetic animals (straight
five-node chains 40 px long, node noise, missed nodes, a missed detection, listed in
random order) that first cross at right angles (frames 0-59), then pass head-on
6 px apart (frames 60-119). With sleap-nn's defaults (OKS on keypoints, scaled by
the new instance's bounding-box area, which is small for a thin animal) the two
trade tracks once where their bodies overlap at right angles and keep them through
the head-on pass; bounding-box IoU keeps them through both, a centroid distance
(positions only) trades them at both. Our tracker trades exactly where sleap-nn does,
here for the documented options, and under every option of the golden through
test_tracking_parity (equal ids): no swap beyond sleap-nn's, and none fewer.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from sleap_live.stream.tracking import TrackingSettings
from tests.stream.test_tracking_parity import _cases, _golden, track_all

SEGMENTS = {"right angles": slice(0, 60), "head-on": slice(60, 120)}


def animal_of(points: np.ndarray) -> np.ndarray:
    """Which animal each instance is, from its heading (the ground truth of the set).

    Right angles: A walks along x, B along y. Head-on: A faces +x, B faces -x.
    """
    weights = np.linspace(0.5, -0.5, points.shape[-2])[:, None]  # nose first
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # padding rows are all NaN
        centered = points - np.nanmean(points, axis=-2, keepdims=True)
    heading = np.nansum(centered * weights, axis=-2)  # (frames, instances, 2)
    first = np.abs(heading[..., 0]) > np.abs(heading[..., 1])
    second = heading[..., 0] > 0
    frames = np.arange(points.shape[0])[:, None]
    return np.where(frames < 60, np.where(first, 0, 1), np.where(second, 0, 1))


def swaps(ids: np.ndarray, animals: np.ndarray, counts: np.ndarray, segment: slice) -> int:
    """Frames of `segment` where an animal's track differs from its track in the frame before."""
    last: dict[int, int] = {}
    changes = 0
    for frame in range(segment.start, segment.stop):
        for row in range(counts[frame]):
            animal, track = int(animals[frame, row]), int(ids[frame, row])
            if animal in last and last[animal] != track:
                changes += 1
            last[animal] = track
    return changes


# Swaps (an animal's track changing from one frame to its next; an exchange of two
# tracks counts 2) per segment, for the options docs/tracking.md describes.
DOCUMENTED_SWAPS = {
    "defaults": {"right angles": 2, "head-on": 0},
    "iou_bboxes": {"right angles": 0, "head-on": 0},
    "euclidean_centroids": {"right angles": 2, "head-on": 2},
}


@pytest.mark.parametrize("case", sorted(DOCUMENTED_SWAPS))
def test_crossings_behave_as_documented(case):
    golden = _golden()
    points, counts = golden["points__crossing"], golden["counts__crossing"]
    animals = animal_of(points)
    ours = track_all(points, counts, TrackingSettings(**_cases()[case]))  # type: ignore[arg-type]
    theirs = golden[f"tracks__crossing__{case}"]
    for name, segment in SEGMENTS.items():
        found = swaps(ours, animals, counts, segment)
        assert found == swaps(theirs, animals, counts, segment), f"{name}: not sleap-nn's"
        assert found == DOCUMENTED_SWAPS[case][name], name
