"""Records that travel between the stages of a pipeline."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sleap_live.engines.types import FramePoses

if TYPE_CHECKING:
    from torch import Tensor


@attrs.frozen(eq=False)
class Frame:
    """One captured frame.

    Attributes:
        index: position in its source, counted from 0 (gaps mean the source skipped).
        timestamp: capture time in seconds on the source's `Clock` (by default
            `time.monotonic`).
        source_id: name of the source that produced it.
        image: (height, width, channels) uint8 image, channels 1 or 3 (RGB): a numpy
            array, or a torch tensor on a CUDA device from a GPU decoder
            (`NvdecSource`), whose images stay on the device up to the engine.
        release: for a device image in a buffer its source reuses: called by the
            consumer with the CUDA stream its copy of `image` is queued on, once
            queued; the source writes that buffer again only after the copy (a
            CUDA event). None where the image is the frame's own.
    """

    index: int
    timestamp: float
    source_id: str
    image: np.ndarray | Tensor
    release: Callable[[Any], None] | None = None


@attrs.frozen
class TrackLabel:
    """An earlier frame's instance whose track a tracker has just confirmed.

    A MOT tracker (sort, bytetrack, ocsort) delivers a track's detections
    untracked until `min_hits` matches confirm it; then it labels them, and the
    pose file is relabelled.

    Attributes:
        frame_index: `Frame.index` of the frame it is in (same source).
        row: the instance's position in that frame's `FramePoses`.
        track_id: its track.
        score: the similarity of its match (1 where it started the track).
    """

    frame_index: int
    row: int
    track_id: int
    score: float


@attrs.frozen(eq=False)
class PoseRecord:
    """Poses of one frame with the times that make its latency exact.

    Attributes:
        frame_index: `Frame.index` of the frame the poses came from.
        capture_time: `Frame.timestamp` (seconds on the source's clock).
        ready_time: when the poses were ready, on the pipeline's clock.
        source_id: `Frame.source_id`.
        poses: the instances found.
        late_labels: earlier frames' instances of this source labelled with this
            frame (tracks confirmed now); the writers relabel their files with
            them. Not kept in the ring: live readers see those instances untracked.
        rules_on: each rule's state once this frame was decided, in the order of the
            run's experiment (`ClosedLoop.on`); empty without one.
    """

    frame_index: int
    capture_time: float
    ready_time: float
    source_id: str
    poses: FramePoses
    late_labels: tuple[TrackLabel, ...] = ()
    rules_on: tuple[bool, ...] = ()

    @property
    def latency(self) -> float:
        """Capture-to-pose latency in seconds."""
        return self.ready_time - self.capture_time
