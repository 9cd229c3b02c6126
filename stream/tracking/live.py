"""Tracking in a running pipeline: each source's poses get track ids as they are emitted.

The emit stage calls `PoseTracking.track` on every frame's poses before they go to
the ring, so the ring, callbacks, iterators, the publisher, the preview and every
output see the same track ids (in `FramePoses.identities`). Each source of a
`SourceGroup` (one camera each) is tracked on its own.
"""

from __future__ import annotations

import attrs

from sleap_live.engines.types import FramePoses, ModelInfo
from sleap_live.stream.tracking.classic import ClassicTracker
from sleap_live.stream.tracking.settings import TrackingSettings

MULTI_CLASS_TYPES = ("multi_class_topdown", "multi_class_bottomup")


def check_model_for_tracking(info: ModelInfo) -> None:
    """Raises `ValueError` if `info`'s poses already carry tracks (a multi-class model)."""
    if info.model_type in MULTI_CLASS_TYPES:
        raise ValueError(
            f"tracking: a {info.model_type} model's identities are its tracks "
            f"({', '.join(info.class_names)}); run it without --tracking"
        )


class PoseTracking:
    """Track ids for each source's frames, in the order they are emitted.

    Args:
        settings: the tracker's options.
    """

    def __init__(self, settings: TrackingSettings) -> None:
        self.settings = settings
        self._trackers: dict[str, ClassicTracker] = {}

    @property
    def n_tracks(self) -> int:
        """Tracks started so far, every source together."""
        return sum(tracker.n_tracks for tracker in self._trackers.values())

    def track(self, poses: FramePoses, source_id: str) -> FramePoses:
        """`poses` (the next frame of `source_id`) with each instance's track id."""
        tracker = self._trackers.get(source_id)
        if tracker is None:
            tracker = self._trackers[source_id] = ClassicTracker(self.settings)
        tracked = tracker.track(poses.points)
        return attrs.evolve(poses, identities=tracked.track_ids)
