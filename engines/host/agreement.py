"""Whether two float32 runs of one model agree: float noise, near-ties or a real disagreement.

Two correct float32 implementations of one graph (torch and an export, sleap-nn's
`predict` and sleap-live, ONNX Runtime on an AVX2 and an AVX-512 CPU) sum in other
orders, so their outputs differ in the last bits, and a last-bit difference can decide
a close call the other way. A check that must tell these from a real error (a wrong
export, a wrong decoding) sorts every difference into one of three outcomes:

- **noise**: every point within `Fp32Bound.points_px` of the other side's (plus the
  rounding of the coordinate itself) and every score within `Fp32Bound.scores` relative
  to its size. The bound comes from the graph (`sleap_live.engines.graph.fp32`), not
  from what one CPU measured.
- **near-ties**: a close call decided the other way. A node that two candidate peaks
  (or two identities) nearly tie for lands on the other candidate: one point of an
  instance moves while every other point of it stays within the noise bound; a point
  is found by one side only while its score is within the tie margin (twice the score
  bound) of the peak threshold. Either outcome passes, and the comparison counts them.
  Ties are rare by nature: more than `MAX_TIE_FRACTION` of the compared points (and at
  least one) cannot be ties, and they fail as disagreements.
- **disagreement**: anything else (another instance count, a whole instance moved,
  several points of one instance moved, a score beyond its bound away from a tie):
  a real difference, which fails at once.

What it cannot tell: a bug that moves a single point of a single instance looks like
one near-tie and passes, counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from sleap_live.engines.host.compare import pair_instances
from sleap_live.engines.host.outputs import (
    INSTANCE_AXIS,
    INSTANCE_LIST,
    INSTANCE_SLOTS,
    output_spec,
)
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.types import FrameBoxes, FrameMasks, FramePoses, ModelInfo

# float32's unit roundoff: the largest relative error of one rounding.
UNIT_ROUNDOFF = 2.0**-24
# Roundings a coordinate itself takes after its last refinement (scale, offset,
# crop origin, the cast to float32): each up to one unit roundoff of its size.
COORDINATE_ROUNDINGS = 8
# At most this fraction of the compared points (and at least one) may be near-ties.
MAX_TIE_FRACTION = 0.01
# A segmentation mask's least IoU with the other side's where pixels at the threshold
# went the other way (issue 40's acceptance figure).
MASK_IOU = 0.999

NOISE, NEAR_TIES, DISAGREEMENT = "noise", "near-ties", "disagreement"
# Outputs in frame pixels, and outputs that must be equal: the rest are scores.
PIXEL_OUTPUTS = ("points", "peaks", "boxes")
EXACT_OUTPUTS = ("instance_frame", "peak_valid", "instance_valid", "box_valid")


@attrs.frozen
class Fp32Bound:
    """How far two correct float32 runs of one graph may differ.

    Attributes:
        points_px: the largest move of a point by rounding alone, in frame pixels
            (before the rounding of the coordinate itself, which is added per point).
        scores: the largest relative difference of a score (of `max(1, |score|)`).
        peak_threshold: the confidence a peak must exceed; a score within the tie
            margin of it may be found by one side only.
        how: how the bound was derived, for messages.
    """

    points_px: float
    scores: float
    peak_threshold: float
    how: str = "from the graph"

    @property
    def tie_margin(self) -> float:
        """Two scores closer than this may be ordered either way by two correct runs."""
        return 2 * self.scores

    def point_limit(self, coordinates: np.ndarray) -> np.ndarray:
        """The bound for points at `coordinates` (..., 2): the graph's, plus the
        rounding of the coordinates themselves."""
        size = np.nanmax(np.abs(coordinates), axis=-1, initial=0.0)
        return self.points_px + COORDINATE_ROUNDINGS * UNIT_ROUNDOFF * size

    def widened(self, points_px: float, scores: float, how: str) -> Fp32Bound:
        """This bound, grown to at least `points_px` and `scores`."""
        return attrs.evolve(
            self, points_px=max(self.points_px, points_px), scores=max(self.scores, scores), how=how
        )

    def describe(self) -> str:
        return f"{self.points_px:.2g} px, scores {self.scores:.2g} relative ({self.how})"


@attrs.frozen
class Agreement:
    """The outcome of comparing two runs (module docstring).

    Attributes:
        points: points compared (found by both, or by one side in a matched instance).
        max_point_px: the largest distance between points within the noise bound.
        max_score: the largest relative score difference within the noise bound.
        ties: one line per near-tie, which passed.
        disagreements: one line per real disagreement; empty when the runs agree.
        bound: the bound the comparison used.
    """

    points: int
    max_point_px: float
    max_score: float
    ties: tuple[str, ...]
    disagreements: tuple[str, ...]
    bound: Fp32Bound

    @property
    def outcome(self) -> str:
        if self.disagreements:
            return DISAGREEMENT
        return NEAR_TIES if self.ties else NOISE

    @property
    def agrees(self) -> bool:
        return not self.disagreements

    def summary(self) -> str:
        """One line: the outcome, what it met and the bound."""
        noise = (
            f"float noise up to {self.max_point_px:.2g} px and scores {self.max_score:.2g} "
            f"within the bound ({self.bound.describe()})"
        )
        ties = f"{len(self.ties)} near-tie(s) passed ({'; '.join(self.ties[:3])})"
        if self.outcome == NOISE:
            return noise
        if self.outcome == NEAR_TIES:
            return f"{noise}; {ties}"
        shown = "; ".join(self.disagreements[:4])
        more = len(self.disagreements) - 4
        rest = f" and {more} more" if more > 0 else ""
        counted = f"; {ties}" if self.ties else ""
        return f"{len(self.disagreements)} real disagreement(s): {shown}{rest}{counted}"


def compare_poses(
    reference: Sequence[FramePoses], actual: Sequence[FramePoses], bound: Fp32Bound
) -> Agreement:
    """Compares two runs' poses frame by frame under `bound` (module docstring).

    A frame's instances are paired one to one (`compare.pair_instances`), since two
    runs need not list them in the same order.
    """
    tally = _Tally(bound)
    for index, (want, got) in enumerate(zip(reference, actual, strict=True)):
        if want.n_instances != got.n_instances:
            tally.disagree(f"frame {index}: {got.n_instances} instances, not {want.n_instances}")
            continue
        rows, columns = pair_instances(want.points, got.points)
        for a, b in zip(rows, columns, strict=True):
            tally.instance(index, want, int(a), got, int(b))
        if want.boxes is not None and got.boxes is not None:
            tally.boxes(index, want.boxes, got.boxes)
        if want.masks is not None and got.masks is not None:
            tally.masks(index, want.masks, got.masks)
    return tally.result()


def compare_outputs(
    reference: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    bound: Fp32Bound,
    info: ModelInfo,
    batch: int,
) -> Agreement:
    """Compares two runs' graph outputs under `bound`.

    The outputs must have the same names and shapes, but for the instance count of
    instance-list outputs (a near-tie may add or drop an instance): anything else is a
    disagreement at once. Every output within the noise bound element by element is
    noise. Otherwise both are decoded into poses (`postprocess.decode`, the host's own
    grouping included) and compared by `compare_poses`, which tells near-ties from
    disagreements.
    """
    mismatches = _shape_mismatches(reference, actual)
    if mismatches:
        return Agreement(0, 0.0, 0.0, (), mismatches, bound)
    elementwise = _elementwise(reference, actual, bound)
    if elementwise is not None:
        return elementwise
    return compare_poses(decode(info, reference, batch), decode(info, actual, batch), bound)


def _shape_mismatches(
    reference: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray]
) -> tuple[str, ...]:
    """One line per output missing from `actual` or shaped otherwise than the reference
    on an axis the data does not decide."""
    layout = INSTANCE_SLOTS if "instance_valid" in reference else INSTANCE_LIST
    lines = []
    for name, expected in reference.items():
        if name not in actual:
            lines.append(f"output {name!r} is missing")
            continue
        got = np.shape(actual[name])
        try:
            axes = output_spec(name, layout).axes
        except KeyError:  # an output of no contract: every axis must match
            axes = ("",) * expected.ndim
        same = len(got) == expected.ndim == len(axes) and all(
            axis == INSTANCE_AXIS or a == b
            for axis, a, b in zip(axes, got, expected.shape, strict=True)
        )
        if not same:
            lines.append(f"output {name!r} has shape {got}, not {expected.shape}")
    return tuple(lines)


def _elementwise(
    reference: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray], bound: Fp32Bound
) -> Agreement | None:
    """The noise outcome where every output is within the bound element by element,
    else None."""
    max_point = max_score = 0.0
    points = 0
    for name, expected in reference.items():
        got = np.asarray(actual[name])
        if got.shape != expected.shape:
            return None
        if name in EXACT_OUTPUTS or expected.dtype.kind not in "fc":
            if not np.array_equal(expected, got):
                return None
            continue
        want64, got64 = expected.astype(np.float64), got.astype(np.float64)
        missing = np.isnan(want64)
        if not np.array_equal(missing, np.isnan(got64)):
            return None
        delta = np.abs(want64 - got64)
        if name in PIXEL_OUTPUTS:
            distance = np.sqrt(np.nansum(delta**2, axis=-1))
            found = ~missing.any(axis=-1)
            if np.any(distance[found] > bound.point_limit(want64)[found]):
                return None
            points += int(found.sum())
            max_point = max(max_point, float(distance[found].max(initial=0.0)))
        else:
            relative = _relative(want64[~missing], got64[~missing])
            if np.any(relative > bound.scores):
                return None
            max_score = max(max_score, float(relative.max(initial=0.0)))
    return Agreement(points, max_point, max_score, (), (), bound)


class _Tally:
    """What `compare_poses` met so far."""

    def __init__(self, bound: Fp32Bound) -> None:
        self.bound = bound
        self.points = 0
        self.max_point = self.max_score = 0.0
        self.ties: list[str] = []
        self.disagreements: list[str] = []

    def disagree(self, line: str) -> None:
        self.disagreements.append(line)

    def instance(self, frame: int, want: FramePoses, a: int, got: FramePoses, b: int) -> None:
        bound = self.bound
        where = f"frame {frame} instance {a}"
        points_a, points_b = want.points[a].astype(np.float64), got.points[b].astype(np.float64)
        scores_a = want.point_scores[a].astype(np.float64)
        scores_b = got.point_scores[b].astype(np.float64)
        found_a, found_b = ~np.isnan(points_a[:, 0]), ~np.isnan(points_b[:, 0])
        both = found_a & found_b
        self.points += int((found_a | found_b).sum())
        distance = np.linalg.norm(points_a - points_b, axis=-1)
        moved = both & (distance > bound.point_limit(points_a))
        tied: list[str] = []
        for node in np.flatnonzero(found_a != found_b):
            score = scores_a[node] if found_a[node] else scores_b[node]
            near = abs(score - bound.peak_threshold) <= bound.tie_margin * max(1.0, abs(score))
            line = f"{where} node {node} found by one side only (score {score:.3g})"
            if near:
                tied.append(f"{line}, at the threshold {bound.peak_threshold:g}")
            else:
                self.disagree(line)
        if moved.sum() == 1 and both.sum() > 1:
            (tie,) = np.flatnonzero(moved)
            tied.append(f"{where} node {tie} on another peak, {distance[tie]:.3g} px away")
        elif moved.any():
            self.disagree(
                f"{where}: {int(moved.sum())} of {int(both.sum())} points moved, up to "
                f"{float(distance[moved].max()):.3g} px"
            )
        kept = both & ~moved
        if kept.any():
            self.max_point = max(self.max_point, float(distance[kept].max()))
        # A point on another peak carries that peak's score (compared only where the
        # point stayed), and its instance's score changes with it.
        relative = _relative(scores_a[kept], scores_b[kept])
        if not tied:
            relative = np.append(
                relative, _relative(want.instance_scores[a : a + 1], got.instance_scores[b : b + 1])
            )
        if np.any(relative > bound.scores):
            self.disagree(f"{where}: scores differ by {float(relative.max()):.3g} (relative)")
        self.max_score = max(self.max_score, float(relative.max(initial=0.0)))
        if int(want.identities[a]) != int(got.identities[b]) and not tied:
            self.disagree(
                f"{where}: identity {int(got.identities[b])}, not {int(want.identities[a])}"
            )
        self.ties.extend(tied)

    def boxes(self, frame: int, want: FrameBoxes, got: FrameBoxes) -> None:
        """A box detector's boxes of one frame, in order (highest score first): each
        corner is a point. Boxes past the other side's count are near-ties if their
        scores are at the threshold (the lowest, so they come last)."""
        where = f"frame {frame}"
        n = min(want.n_boxes, got.n_boxes)
        extra = (want if want.n_boxes > n else got).scores[n:].astype(np.float64)
        if extra.size:
            near = np.abs(extra - self.bound.peak_threshold) <= self.bound.tie_margin
            if not near.all():
                self.disagree(f"{where}: {got.n_boxes} boxes, not {want.n_boxes}")
                return
            self.ties.append(f"{where}: {extra.size} box(es) at the threshold on one side only")
        corners_a = want.boxes[:n].astype(np.float64).reshape(-1, 2)
        corners_b = got.boxes[:n].astype(np.float64).reshape(-1, 2)
        self.points += len(corners_a)
        distance = np.linalg.norm(corners_a - corners_b, axis=-1)
        if np.any(distance > self.bound.point_limit(corners_a)):
            self.disagree(f"{where}: a box corner moved {float(distance.max()):.3g} px")
        self.max_point = max(self.max_point, float(distance.max(initial=0.0)))
        relative = _relative(want.scores[:n], got.scores[:n])
        if np.any(relative > self.bound.scores):
            self.disagree(f"{where}: box scores differ by {float(relative.max()):.3g}")
        self.max_score = max(self.max_score, float(relative.max(initial=0.0)))
        if not np.array_equal(want.categories[:n], got.categories[:n]):
            self.disagree(f"{where}: box categories differ")

    def masks(self, frame: int, want: FrameMasks, got: FrameMasks) -> None:
        """A segmentation model's masks of one frame, in order. Pixels whose probability
        lies at the threshold may go either way: a frame's masks differing in a few is a
        near-tie, in more (an IoU under `MASK_IOU`, or another count or shape) a
        disagreement."""
        where = f"frame {frame}"
        if want.n_masks != got.n_masks:
            self.disagree(f"{where}: {got.n_masks} masks, not {want.n_masks}")
            return
        for i, (a, b) in enumerate(zip(want.masks, got.masks, strict=True)):
            if a.shape != b.shape:
                self.disagree(f"{where} mask {i}: shape {b.shape}, not {a.shape}")
                continue
            differ = int(np.count_nonzero(a != b))
            if differ == 0:
                continue
            iou = 1.0 - differ / max(1, int(np.count_nonzero(a | b)))
            line = f"{where} mask {i}: {differ} pixel(s) differ (IoU {iou:.5f})"
            if iou < MASK_IOU:
                self.disagree(line)
            else:
                self.ties.append(line)
        if not np.array_equal(want.scales, got.scales):
            self.disagree(f"{where}: mask scales differ")
        relative = _relative(want.scores, got.scores)
        if np.any(relative > self.bound.scores):
            self.disagree(f"{where}: mask scores differ by {float(relative.max()):.3g}")
        self.max_score = max(self.max_score, float(relative.max(initial=0.0)))

    def result(self) -> Agreement:
        allowed = max(1, int(MAX_TIE_FRACTION * self.points))
        disagreements = list(self.disagreements)
        if len(self.ties) > allowed:
            disagreements.append(
                f"{len(self.ties)} close calls decided the other way, more than near-ties can "
                f"be ({allowed} of {self.points} points)"
            )
        return Agreement(
            self.points,
            self.max_point,
            self.max_score,
            tuple(self.ties),
            tuple(disagreements),
            self.bound,
        )


def _relative(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Score differences relative to `max(1, |score|)`."""
    want64 = np.asarray(want, np.float64)
    return np.abs(want64 - np.asarray(got, np.float64)) / np.maximum(1.0, np.abs(want64))
