"""A frame's detections as sleap-nn's MOT trackers see them, and their similarities.

Each instance becomes a box around its found nodes, padded, with a score (the
mean of its found nodes' scores) and a validity (at least one node found); a box
too small to compare (one node, or under a pixel on a side) becomes a square of
the animals' running body size. The similarities compare every track with every
detection at once: IoU of boxes, IoU of the nodes both sides have, and OC-SORT's
direction term. Facts and constants are sleap-nn 0.3.5's
(`sleap_nn/tracking/mot/detections.py`, `association.py`, `bytetrack.py`,
`calibration.py`), so equal inputs give equal numbers.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

import attrs
import numpy as np

# A raw box narrower than this (px) on either side is degenerate.
_MIN_BOX_SIDE = 1.0

# Padded boxes are floored at this fraction of the body size on each side.
MIN_BOX_FRACTION = 0.25

# Fewest nodes two poses must share, and the narrowest extent (px) of those
# nodes, for their shared-node boxes to be compared.
_MIN_SHARED_NODES = 2
_MIN_SHARED_EXTENT = 1.0

# The body size's fallback chain (sleap-nn's `resolve_body_size`).
DEFAULT_BODY_SIZE = 50.0
_MOTION_BODY_FACTOR = 8.0
_MIN_MOTION_BODY = 16.0
_BODY_SIZE_HISTORY = 2048
# Frame-to-frame links: mutual nearest neighbours within half the spacing, whose
# runners-up are at least twice as far; boxes overlapping more than half of the
# smaller one are one animal detected twice.
_LINK_SPACING_FRACTION = 0.5
_LINK_RATIO = 2.0
_DUPLICATE_OVERLAP = 0.5


@attrs.frozen(eq=False)
class Detections:
    """One frame's instances as boxes.

    Attributes:
        boxes: (n, 4) padded boxes (x0, y0, x1, y1); NaN rows where invalid.
        raw_boxes: (n, 4) extents of the found nodes (or the body-size square).
        keypoints: (n, nodes, 2) the instances' nodes, NaN where not found.
        scores: (n,) detection scores in [0, 1].
        valid: (n,) at least one node found.
        n_found: (n,) nodes found.
    """

    boxes: np.ndarray
    raw_boxes: np.ndarray
    keypoints: np.ndarray
    scores: np.ndarray
    valid: np.ndarray
    n_found: np.ndarray

    def __len__(self) -> int:
        return int(self.boxes.shape[0])


def detections(
    points: np.ndarray,
    point_scores: np.ndarray,
    instance_scores: np.ndarray,
    box_padding: float,
    body_size: float,
) -> Detections:
    """The detections of instances `points` (n, nodes, 2) with their scores."""
    keypoints = np.asarray(points, np.float64)
    found = np.asarray(np.isfinite(keypoints).all(axis=-1), bool)
    n_found = found.sum(axis=1)
    low, high = _extents(keypoints, found)
    raw = np.concatenate([low, high], axis=1)
    valid = n_found > 0
    raw[~valid] = np.nan
    # The mean score of the found nodes; the instance score when none of them has
    # one (or all are exactly zero, sleap-io's "no scores"); non-finite counts as 1.
    point_scores = np.asarray(point_scores, np.float64)
    scored = found & np.isfinite(point_scores)
    n_scored = scored.sum(axis=1)
    summed = np.where(scored, point_scores, 0.0)
    mean = summed.sum(axis=1) / np.maximum(n_scored, 1)
    informative = (n_scored > 0) & (np.abs(summed).sum(axis=1) > 0)
    fallback = np.asarray(instance_scores, np.float64)
    scores = np.where(informative, mean, np.where(np.isfinite(fallback), fallback, 1.0))
    scores = np.clip(np.where(np.isfinite(scores), scores, 1.0), 0.0, 1.0)

    size = raw[:, 2:] - raw[:, :2]
    centres = 0.5 * (raw[:, :2] + raw[:, 2:])
    pad = box_padding * size.max(axis=1, initial=-np.inf)
    boxes = raw + pad[:, None] * np.array([-1.0, -1.0, 1.0, 1.0])
    degenerate = valid & ((n_found == 1) | (size < _MIN_BOX_SIDE).any(axis=1))
    if degenerate.any():
        half = 0.5 * max(body_size, _MIN_BOX_SIDE)
        square = np.concatenate([centres[degenerate] - half, centres[degenerate] + half], axis=1)
        raw[degenerate] = square
        boxes[degenerate] = square
    boxes = widened(boxes, valid, MIN_BOX_FRACTION * body_size)
    return Detections(boxes, raw, keypoints, scores, valid, n_found)


def _extents(keypoints: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 2) least and greatest x, y of each instance's found nodes (inf, -inf for
    none), reduced over the nodes as the first axis (one elementwise pass per node)."""
    by_node = keypoints.transpose(1, 0, 2)
    chosen = found.T[..., None]
    low = np.where(chosen, by_node, np.inf).min(axis=0, initial=np.inf)
    high = np.where(chosen, by_node, -np.inf).max(axis=0, initial=-np.inf)
    return low, high


def widened(boxes: np.ndarray, valid: np.ndarray, min_side: float) -> np.ndarray:
    """`boxes` grown about their centres to at least `min_side` on each side."""
    side = boxes[:, 2:] - boxes[:, :2]
    grow = 0.5 * np.maximum(min_side - side, 0.0)
    grow[~valid] = 0.0
    return boxes + np.concatenate([-grow, grow], axis=1)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) IoU of boxes a (n, 4) and b (m, 4); a box with NaN scores 0."""
    ok_a = np.isfinite(a).all(axis=1)
    ok_b = np.isfinite(b).all(axis=1)
    a = np.where(ok_a[:, None], a, 0.0)
    b = np.where(ok_b[:, None], b, 0.0)
    sides_a = np.maximum(a[:, 2:] - a[:, :2], 0.0)
    sides_b = np.maximum(b[:, 2:] - b[:, :2], 0.0)
    area_a = sides_a[:, 0] * sides_a[:, 1]
    area_b = sides_b[:, 0] * sides_b[:, 1]
    overlap = np.maximum(
        np.minimum(a[:, None, 2:], b[None, :, 2:]) - np.maximum(a[:, None, :2], b[None, :, :2]),
        0.0,
    )
    inter = overlap[..., 0] * overlap[..., 1]
    inter[~(ok_a[:, None] & ok_b[None, :])] = 0.0
    union = area_a[:, None] + area_b[None, :] - inter
    return _ratio(inter, union)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    out = np.zeros(np.broadcast(numerator, denominator).shape)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return np.minimum(np.maximum(out, 0.0), 1.0)


def shared_node_iou(
    tracks: np.ndarray, dets: np.ndarray, box_padding: float, min_side: float
) -> np.ndarray:
    """(n, m) IoU of the padded boxes of the nodes both poses have found.

    `tracks` (n, nodes, 2) and `dets` (m, nodes, 2); NaN where fewer than two
    nodes are shared or the shared nodes of either side span under a pixel on
    both axes (ByteTrack's comparison of an occluded detection with the same
    part of the track).
    """
    n, m = tracks.shape[0], dets.shape[0]
    out = np.full((n, m), np.nan)
    if n == 0 or m == 0:
        return out
    shared = np.isfinite(tracks).all(-1)[:, None, :] & np.isfinite(dets).all(-1)[None]
    # Both sides at once, nodes first (a reduction over the first axis is one
    # elementwise pass per node): (nodes, 2, n, m, 2), the track's then the detection's.
    both = np.stack(
        np.broadcast_arrays(
            tracks.transpose(1, 0, 2)[:, :, None, :], dets.transpose(1, 0, 2)[:, None, :, :]
        ),
        axis=1,
    )
    select = shared.transpose(2, 0, 1)[:, None, :, :, None]
    low = np.where(select, both, np.inf).min(axis=0)  # (2, n, m, 2)
    high = np.where(select, both, -np.inf).max(axis=0)
    # Nothing shared spans -inf (no NaN, no warning).
    wide = ((high - low) >= _MIN_SHARED_EXTENT).any(axis=-1)
    ok = (shared.sum(axis=-1) >= _MIN_SHARED_NODES) & wide[0] & wide[1]
    if not ok.any():
        return out
    low, high = _padded(low[:, ok], high[:, ok], box_padding, min_side)
    overlap = np.maximum(np.minimum(high[0], high[1]) - np.maximum(low[0], low[1]), 0.0)
    inter = overlap[..., 0] * overlap[..., 1]
    sides = high - low
    union = sides[0, :, 0] * sides[0, :, 1] + sides[1, :, 0] * sides[1, :, 1] - inter
    out[ok] = _ratio(inter, union)
    return out


def _padded(
    low: np.ndarray, high: np.ndarray, box_padding: float, min_side: float
) -> tuple[np.ndarray, np.ndarray]:
    pad = box_padding * (high - low).max(axis=-1, keepdims=True)
    low, high = low - pad, high + pad
    if min_side > 0:
        grow = 0.5 * np.maximum(min_side - (high - low), 0.0)
        low, high = low - grow, high + grow
    return low, high


def centroid_similarity(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """(n, m) Gaussian similarity of points a (n, 2) and b (m, 2); NaN scores 0."""
    d2 = ((a[:, None] - b[None]) ** 2).sum(axis=-1)
    ok = np.isfinite(d2)
    return np.where(ok, np.exp(-np.where(ok, d2, 0.0) / (2.0 * scale**2)), 0.0)


def finished(similarity: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`similarity` without NaN or infinities, clipped to [0, 1], 0 for invalid
    detections."""
    keep = np.isfinite(similarity) & valid[None, :]
    return np.where(keep, np.minimum(np.maximum(similarity, 0.0), 1.0), 0.0)


def _directions(dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    norm = np.hypot(dy, dx)
    ok = np.isfinite(norm) & (norm > 0)
    safe = np.where(ok, norm, 1.0)
    return np.stack([np.where(ok, dy / safe, 0.0), np.where(ok, dx / safe, 0.0)], axis=-1)


def direction(earlier: np.ndarray, later: np.ndarray) -> tuple[float, float]:
    """Unit (dy, dx) from the centre of box `earlier` (4,) to that of `later`
    ((0, 0) for no motion)."""
    e0, e1, e2, e3 = earlier.tolist()
    l0, l1, l2, l3 = later.tolist()
    dy = 0.5 * (l1 + l3) - 0.5 * (e1 + e3)
    dx = 0.5 * (l0 + l2) - 0.5 * (e0 + e2)
    norm = math.hypot(dy, dx)
    if not (math.isfinite(norm) and norm > 0):
        return 0.0, 0.0
    return dy / norm, dx / norm


def momentum(
    velocities: np.ndarray,
    earlier: np.ndarray,
    has_velocity: np.ndarray,
    boxes: np.ndarray,
    scores: np.ndarray,
    inertia: float,
) -> np.ndarray:
    """OC-SORT's (n, m) direction term: how well each detection continues each
    track's motion (unit `velocities` (n, 2) from box `earlier` (n, 4))."""
    if velocities.shape[0] == 0 or boxes.shape[0] == 0:
        return np.zeros((velocities.shape[0], boxes.shape[0]))
    has_velocity = has_velocity & np.isfinite(velocities).all(axis=1)
    velocities = np.where(has_velocity[:, None], velocities, 0.0)
    scores = np.where(np.isfinite(scores), scores, 0.0)
    to_detection = _directions(
        0.5 * (boxes[None, :, 1] + boxes[None, :, 3])
        - 0.5 * (earlier[:, 1] + earlier[:, 3])[:, None],
        0.5 * (boxes[None, :, 0] + boxes[None, :, 2])
        - 0.5 * (earlier[:, 0] + earlier[:, 2])[:, None],
    )
    cosine = np.clip((velocities[:, None, :] * to_detection).sum(axis=-1), -1.0, 1.0)
    angle = np.abs(np.arccos(cosine))
    return inertia * ((np.pi / 2.0 - angle) / np.pi) * has_velocity[:, None] * scores[None, :]


class BodySize:
    """The animals' size (px) as sleap-nn's uncalibrated trackers estimate it online.

    The median diagonal of the last 2,048 instances with two or more nodes found
    (and a pixel or more on each side); while none has been seen (one-node
    skeletons), 8 x the 99th percentile of the per-step length of unambiguous
    frame-to-frame links (at least 16 px, at most the animals' median spacing),
    else that spacing, else 50 px.
    """

    def __init__(self) -> None:
        self._diagonals: deque[float] = deque(maxlen=_BODY_SIZE_HISTORY)
        self._sorted: list[float] = []  # the diagonals, sorted, for the median
        self._spacings: deque[float] = deque(maxlen=_BODY_SIZE_HISTORY)
        self._step_lengths: deque[float] = deque(maxlen=_BODY_SIZE_HISTORY)
        self._previous: np.ndarray | None = None  # last frame's centres, no diagonal yet
        self._previous_duplicate: np.ndarray | None = None
        self._previous_spacing = np.zeros(0)
        self.value = DEFAULT_BODY_SIZE

    def observe(self, dets: Detections, steps: int, moved_on: bool) -> None:
        """Adds a frame's evidence; `steps` since the last frame, `moved_on` False
        for a repeated or backwards frame index (no links across it)."""
        sized = dets.valid & (dets.n_found >= 2)
        if sized.any():
            keypoints = dets.keypoints[sized]
            found = np.isfinite(keypoints).all(axis=-1)
            low, high = _extents(keypoints, found)
            size = high - low
            keep = np.isfinite(size).all(axis=1) & (size >= 1.0).all(axis=1)
            for diagonal in np.hypot(size[keep, 0], size[keep, 1]).tolist():
                self._add_diagonal(diagonal)
        if self._diagonals:
            self._previous = None
            self.value = _median(self._sorted)
            return
        self._observe_layout(dets, steps, moved_on)
        self.value = self._fallback()

    def _add_diagonal(self, diagonal: float) -> None:
        if len(self._diagonals) == self._diagonals.maxlen:
            del self._sorted[bisect.bisect_left(self._sorted, self._diagonals[0])]
        self._diagonals.append(diagonal)
        bisect.insort(self._sorted, diagonal)

    def _observe_layout(self, dets: Detections, steps: int, moved_on: bool) -> None:
        # No instance has an extent: the same-frame spacing and the frame-to-frame
        # links of the nodes' extents floored at a pixel, as sleap-nn's calibration.
        keypoints = dets.keypoints[dets.valid]
        found = np.isfinite(keypoints).all(axis=-1)
        low, high = _extents(keypoints, found)
        centres = 0.5 * (low + high)
        half = 0.5 * np.maximum(high - low, 1.0)
        raw = np.concatenate([centres - half, centres + half], axis=1)
        duplicate_pair = _duplicates(raw)
        duplicate = np.asarray(duplicate_pair.any(axis=1), bool)
        distance = _distances(centres, centres)
        distance[duplicate_pair | np.eye(len(centres), dtype=bool)] = np.inf
        spacing = distance.min(axis=1, initial=np.inf)
        previous = self._previous if moved_on else None
        if previous is not None and self._previous_duplicate is not None:
            before = self._previous_spacing
            every = np.concatenate([before, spacing])
            finite = every[np.isfinite(every)]
            if self._spacings:
                gate = _LINK_SPACING_FRACTION * float(np.median(np.asarray(self._spacings)))
            elif finite.size:
                gate = _LINK_SPACING_FRACTION * float(np.median(finite))
            else:
                gate = np.inf
            lengths = _links(previous, centres, self._previous_duplicate, duplicate, gate)
            if steps > 0 and lengths.size:
                self._step_lengths.extend((lengths / steps).tolist())
        self._spacings.extend(spacing[np.isfinite(spacing)].tolist())
        self._previous = centres
        self._previous_duplicate = duplicate
        self._previous_spacing = spacing

    def _fallback(self) -> float:
        step_p99 = (
            float(np.percentile(np.asarray(self._step_lengths), 99))
            if self._step_lengths
            else float("nan")
        )
        spacing = float(np.median(np.asarray(self._spacings))) if self._spacings else float("nan")
        if np.isfinite(step_p99) and step_p99 >= 0:
            body = max(_MOTION_BODY_FACTOR * step_p99, _MIN_MOTION_BODY)
            if np.isfinite(spacing) and spacing > 0:
                body = min(body, spacing)
            return float(body)
        if np.isfinite(spacing) and spacing > 0:
            return spacing
        return DEFAULT_BODY_SIZE


def _median(ordered: list[float]) -> float:
    """`np.median` of sorted values."""
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    distance = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
    return np.where(np.isfinite(distance), distance, np.inf)


def _duplicates(raw: np.ndarray) -> np.ndarray:
    """(n, n) pairs of boxes overlapping more than half of the smaller one."""
    low = np.maximum(raw[:, None, :2], raw[None, :, :2])
    high = np.minimum(raw[:, None, 2:], raw[None, :, 2:])
    inter = np.clip(high - low, 0.0, None).prod(axis=-1)
    area = np.clip(raw[:, 2:] - raw[:, :2], 0.0, None).prod(axis=-1)
    smaller = np.minimum(area[:, None], area[None, :])
    with np.errstate(invalid="ignore", divide="ignore"):
        overlap = np.where(smaller > 0, inter / smaller, 0.0)
    return (overlap > _DUPLICATE_OVERLAP) & ~np.eye(len(raw), dtype=bool)


def _second_smallest(distance: np.ndarray, axis: int) -> np.ndarray:
    if distance.shape[axis] < 2:
        return np.full(distance.shape[1 - axis], np.inf)
    return np.take(np.partition(distance, 1, axis=axis), 1, axis=axis)


def _links(
    before: np.ndarray,
    after: np.ndarray,
    duplicate_before: np.ndarray,
    duplicate_after: np.ndarray,
    gate: float,
) -> np.ndarray:
    """Lengths of the unambiguous links between two frames' centres."""
    if before.shape[0] == 0 or after.shape[0] == 0:
        return np.zeros(0)
    distance = _distances(before, after)
    best_after = distance.argmin(axis=1)
    best_before = distance.argmin(axis=0)
    nearest = distance[np.arange(len(before)), best_after]
    runner_up = _second_smallest(distance, axis=1)
    runner_up_after = _second_smallest(distance, axis=0)[best_after]
    ok = np.isfinite(nearest) & (best_before[best_after] == np.arange(len(before)))
    ok &= nearest < gate
    ok &= (runner_up >= _LINK_RATIO * nearest) & (runner_up > nearest)
    ok &= (runner_up_after >= _LINK_RATIO * nearest) & (runner_up_after > nearest)
    ok &= ~duplicate_before & ~duplicate_after[best_after]
    return np.linalg.norm(after[best_after[ok]] - before[ok], axis=1)
