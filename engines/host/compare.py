"""How far one runner's poses are from another's on the same frames.

Used where a faster, less exact way of running a model is measured against
float32 at load: OpenVINO's bf16 and ONNX Runtime's int8. Each frame's instances
are matched one to one (Hungarian, on the mean distance of the nodes both found),
and the matched points found by both are measured.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from sleap_live.engines.host.grouping import linear_sum_assignment
from sleap_live.engines.types import FramePoses

# The cost of matching two instances that share no node: more than any real pair.
_UNMATCHABLE = 1e6


@attrs.frozen
class PoseDifference:
    """The difference of two runs' poses on the same frames.

    Attributes:
        frames: frames compared.
        same_count: frames on which both found the same number of instances.
        distances: pixels between each matched point found by both (1-D).
        presence_mismatches: matched points found by one side only.
    """

    frames: int
    same_count: int
    distances: np.ndarray
    presence_mismatches: int

    @property
    def count_changes(self) -> int:
        """Frames on which the instance counts differ."""
        return self.frames - self.same_count

    def quantile_px(self, q: float) -> float:
        """A quantile of the point distances (NaN when no point was compared)."""
        return float(np.quantile(self.distances, q)) if self.distances.size else float("nan")

    def max_px(self) -> float:
        return float(self.distances.max()) if self.distances.size else float("nan")


def pair_instances(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hungarian pairing of two runs' instances (I, N, 2) of one frame, on the mean
    distance of the nodes both found; instances that share no found node pair last."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(0, int), np.zeros(0, int)
    gaps = np.linalg.norm(a[:, None] - b[None], axis=-1)
    shared = (~np.isnan(gaps)).sum(axis=-1)
    cost = np.where(shared > 0, np.nansum(gaps, axis=-1) / np.maximum(shared, 1), _UNMATCHABLE)
    return linear_sum_assignment(cost)


def pose_difference(reduced: Sequence[FramePoses], full: Sequence[FramePoses]) -> PoseDifference:
    """Matches each frame's instances of `reduced` to `full`'s and measures the points."""
    distances: list[np.ndarray] = []
    same_count = presence = 0
    for low, high in zip(reduced, full, strict=True):
        same_count += int(low.n_instances == high.n_instances)
        if low.n_instances == 0 or high.n_instances == 0:
            continue
        for a, b in zip(*pair_instances(low.points, high.points), strict=True):
            found_low = ~np.isnan(low.points[a, :, 0])
            found_high = ~np.isnan(high.points[b, :, 0])
            presence += int(np.sum(found_low != found_high))
            gap = np.linalg.norm(low.points[a] - high.points[b], axis=-1)
            distances.append(gap[found_low & found_high])
    return PoseDifference(
        frames=len(full),
        same_count=same_count,
        distances=np.concatenate(distances) if distances else np.zeros(0),
        presence_mismatches=presence,
    )
