"""Tracking in a running pipeline: each source's poses get track ids as they are emitted.

The emit stage calls `PoseTracking.track` on every frame's poses before they go to
the ring, so the ring, callbacks, iterators, the publisher, the preview and every
output see the same track ids (in `FramePoses.identities`). Each source of a
`SourceGroup` (one camera each) is tracked on its own. A MOT tracker's detections
before their track is confirmed are untracked there; when it confirms, the
frame's `TrackedPoses.late_labels` name them, for the pose files to relabel.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from sleap_live.engines.types import POSELESS_FINDINGS, FramePoses, ModelInfo
from sleap_live.stream.tracking.classic import ClassicTracker, Tracked
from sleap_live.stream.tracking.mot import MotTracker
from sleap_live.stream.tracking.settings import TrackingSettings
from sleap_live.stream.types import TrackLabel

MULTI_CLASS_TYPES = ("multi_class_topdown", "multi_class_bottomup")


def untracked(kind: str) -> str:
    """Why a model of `kind` (a `POSELESS_FINDINGS` key) is not tracked, in one line."""
    what = POSELESS_FINDINGS[kind][0]
    return f"tracking: {what} are not tracked (sleap-nn neither); run it without --tracking"


def check_model_for_tracking(info: ModelInfo) -> None:
    """Raises `ValueError` if `info`'s poses already carry tracks (a multi-class model),
    or it finds no poses (a box detector, a segmentation model: sleap-nn refuses to
    track them too)."""
    if info.model_type in POSELESS_FINDINGS:
        raise ValueError(untracked(info.model_type))
    if info.model_type in MULTI_CLASS_TYPES:
        raise ValueError(
            f"tracking: a {info.model_type} model's identities are its tracks "
            f"({', '.join(info.class_names)}); run it without --tracking"
        )


class FrameTracker(Protocol):
    """A tracker of one source's frames, in order."""

    @property
    def n_tracks(self) -> int:
        """Tracks started (classic) or confirmed (MOT) so far."""
        ...

    def track_poses(self, poses: FramePoses, frame_index: int) -> Tracked:
        """Tracks of the next frame's poses; `frame_index` is its index in the source."""
        ...


def new_tracker(settings: TrackingSettings) -> FrameTracker:
    """The tracker `settings` asks for, for one source."""
    if settings.tracker == "classic":
        return ClassicTracker(settings)
    return MotTracker(settings.mot_parameters)


@attrs.frozen(eq=False)
class TrackedPoses:
    """A frame's poses with their track ids, and earlier frames' instances labelled now."""

    poses: FramePoses
    late_labels: tuple[TrackLabel, ...]


class PoseTracking:
    """Track ids for each source's frames, in the order they are emitted."""

    def __init__(self, settings: TrackingSettings) -> None:
        self.settings = settings
        self._trackers: dict[str, FrameTracker] = {}

    @property
    def n_tracks(self) -> int:
        """Tracks started so far, every source together."""
        return sum(tracker.n_tracks for tracker in self._trackers.values())

    def track(self, poses: FramePoses, source_id: str, frame_index: int) -> TrackedPoses:
        """`poses` (frame `frame_index` of `source_id`, the next one tracked) with
        each instance's track id."""
        tracker = self._trackers.get(source_id)
        if tracker is None:
            tracker = self._trackers[source_id] = new_tracker(self.settings)
        tracked = tracker.track_poses(poses, frame_index)
        return TrackedPoses(attrs.evolve(poses, identities=tracked.track_ids), tracked.late)
