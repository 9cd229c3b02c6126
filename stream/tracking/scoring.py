"""Features of instances and the scores between them, all pairs at once.

Each function computes, for every new instance and every candidate at once, the
number sleap-nn 0.3.5 computes one pair at a time (`sleap_nn.tracking.utils` and
`sleap_nn.evaluation.compute_oks`), with the same operations in the same order so
that equal inputs give equal floats: ties then break the same way.

Shapes: ``n`` new instances, candidates in a (tracks, window) grid padded with NaN,
``F`` the shape of one feature (nodes x 2 for keypoints, 2 for centroids, 4 for
bounding boxes).
"""

from __future__ import annotations

import numpy as np


def instance_features(points: np.ndarray, features: str) -> np.ndarray:
    """The tracker's feature of each instance of `points` (instances, nodes, 2)."""
    points = np.asarray(points, np.float64)
    if features == "keypoints":
        return points
    # An instance with no node found has NaN features (as in sleap-nn); fmin/fmax
    # skip NaN as nanmin/nanmax do, without their warning.
    if features == "centroids":
        return _nan_quantile(np.moveaxis(points, 1, -1), 0.5, median=True)
    return np.concatenate([np.fmin.reduce(points, axis=1), np.fmax.reduce(points, axis=1)], axis=1)


def found_nodes(points: np.ndarray) -> np.ndarray:
    """Nodes found (both coordinates finite) per instance of `points`."""
    return (~np.isnan(points).any(axis=-1)).sum(axis=-1)


def pair_scores(
    new: np.ndarray, candidates: np.ndarray, scoring_method: str, oks_stddev: float
) -> np.ndarray:
    """Similarity of each new instance (n, *F) to each candidate (T, W, *F): (n, T, W).

    Higher is more alike (the Euclidean distance is negated); NaN where either side
    has no usable feature.
    """
    if new.shape[0] == 0 or candidates.shape[0] == 0 or candidates.shape[1] == 0:
        return np.full((new.shape[0], *candidates.shape[:2]), np.nan)
    # No numpy nan-function here (they warn on all-NaN rows, and catching warnings
    # costs more than the scores): fmax/fmin skip NaN alike, errstate quiets 0/0.
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if scoring_method == "oks":
            return _oks(new, candidates, oks_stddev)
        if scoring_method == "iou":
            return _iou(new, candidates)
        flat_new = new.reshape(new.shape[0], 1, 1, -1)
        flat_candidates = candidates.reshape(1, *candidates.shape[:2], -1)
        if scoring_method == "euclidean_dist":
            difference = flat_new - flat_candidates
            return -np.sqrt(np.einsum("...i,...i->...", difference, difference))
        return _cosine(flat_new, flat_candidates)


def _oks(new: np.ndarray, candidates: np.ndarray, stddev: float) -> np.ndarray:
    # COCO's object keypoint similarity with the new instance as the reference
    # (sleap-nn's `compute_oks(new, candidate)`): its bounding-box area scales the
    # spread, its missing nodes are left out, a candidate's missing node scores 0.
    n_nodes = new.shape[1]
    extent = np.fmax.reduce(new, axis=-2) - np.fmin.reduce(new, axis=-2)
    area = np.prod(extent, axis=-1)  # (n,)
    spread = (2 * np.full(n_nodes, stddev)) ** 2
    scale = 2 * (area + np.spacing(1))
    normalization = spread.reshape(1, 1, 1, n_nodes) * scale.reshape(-1, 1, 1, 1)
    displacement = new[:, None, None] - candidates[None]  # (n, T, W, nodes, 2)
    distance = (displacement**2).sum(axis=-1)
    missing_candidate = np.isnan(candidates).any(axis=-1)  # (T, W, nodes)
    distance = np.where(missing_candidate[None], np.inf, distance)
    similarity = np.exp(-(distance / normalization))
    missing_new = np.isnan(new).any(axis=-1)  # (n, nodes)
    similarity = np.where(missing_new[:, None, None, :], 0.0, similarity)
    visible = (~missing_new).astype("float32").sum(axis=-1)  # (n,)
    return similarity.sum(axis=-1) / visible.reshape(-1, 1, 1)


def _iou(new: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    # Boxes (xmin, ymin, xmax, ymax) in pixel units, edges inclusive (+1), as sleap-nn.
    a = new[:, None, None, :]
    b = candidates[None]
    width = np.maximum(0, np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + 1)
    height = np.maximum(0, np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + 1)
    # A box with NaN sides (no node found) scores NaN, as its union is NaN in sleap-nn.
    intersection = width * height
    area_a = (a[..., 2] - a[..., 0] + 1) * (a[..., 3] - a[..., 1] + 1)
    area_b = (b[..., 2] - b[..., 0] + 1) * (b[..., 3] - b[..., 1] + 1)
    return intersection / (area_a + area_b - intersection)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # sleap-nn's `compute_cosine_sim` on the flattened features: NaN where the norms'
    # product is zero or not finite.
    dot = np.einsum("...i,...i->...", a, b)
    denominator = np.sqrt(np.einsum("...i,...i->...", a, a)) * np.sqrt(
        np.einsum("...i,...i->...", b, b)
    )
    usable = np.isfinite(denominator) & (denominator != 0.0)
    return np.where(usable, dot / np.where(usable, denominator, 1.0), np.nan)


def blend_appearance(
    geometry: np.ndarray, appearance: np.ndarray, weight: float, euclidean_scale: float | None
) -> np.ndarray:
    """sleap-nn's `Tracker._blend_appearance` on reduced (n, T) scores.

    (1 - weight) x geometry + weight x appearance where both are finite, else the
    geometric score (a missing vector never turns a match into no match). With
    `euclidean_scale` (euclidean_dist geometry, negated pixels) geometry is first
    mapped to exp(score / scale), a similarity in (0, 1] like the cosine's scale.
    """
    if euclidean_scale is not None:
        with np.errstate(over="ignore"):
            geometry = np.exp(geometry / float(euclidean_scale))
    both = np.isfinite(geometry) & np.isfinite(appearance)
    return np.where(both, (1.0 - weight) * geometry + weight * appearance, geometry)


def reduce_scores(scores: np.ndarray, reduction: str, quantile: float) -> np.ndarray:
    """One score per (new instance, track) from its candidates' (n, T, W) scores.

    NaN (a padded slot, a candidate with too few nodes, an unusable pair) is
    skipped; a track with no score left gets NaN, as sleap-nn's nan-reductions do.
    """
    if scores.shape[-1] == 0 or scores.size == 0:
        return np.full(scores.shape[:-1], np.nan)
    if reduction == "max" or (reduction == "robust_quantile" and quantile == 1.0):
        return np.fmax.reduce(scores, axis=-1)
    if reduction == "robust_quantile":
        return _nan_quantile(scores, quantile)
    # np.nanmean's own steps (NaN as 0, sum, divide by the count), without its warning.
    missing = np.isnan(scores)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(missing, 0.0, scores).sum(axis=-1) / (~missing).sum(axis=-1)


def _nan_quantile(values: np.ndarray, quantile: float, median: bool = False) -> np.ndarray:
    """`np.nanquantile(values, quantile, axis=-1)` (or `np.nanmedian`), bit for bit.

    numpy's versions loop in Python over the rows; this sorts once (NaN last) and
    interpolates between the two values around numpy's position (count - 1) x
    quantile, with numpy's own interpolation formula (`np.median` averages the two
    middle values instead).
    """
    ordered = np.sort(values, axis=-1)
    count = (~np.isnan(values)).sum(axis=-1)
    position = (count - 1) * quantile
    if median:
        below, above = np.clip((count - 1) // 2, 0, None), count // 2
    else:
        below = np.clip(np.floor(position).astype(np.int64), 0, None)
        above = np.clip(np.minimum(below + 1, count - 1), 0, None)
    low = np.take_along_axis(ordered, below[..., None], axis=-1)[..., 0]
    high = np.take_along_axis(ordered, above[..., None], axis=-1)[..., 0]
    if median:
        result = np.where(count % 2 == 1, low, (low + high) / 2)
    else:
        fraction = position - below
        step = high - low
        result = np.where(fraction >= 0.5, high - step * (1 - fraction), low + step * fraction)
    return np.where(count > 0, result, np.nan)
