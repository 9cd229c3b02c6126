"""Live overlay recordings (`--record-overlay`): each processed frame with its poses drawn.

`OverlayRecorder` is an `Output` fed pose records and their frames by the pipeline's
writer sink, in the order poses were emitted, and draws and encodes them in that sink's
thread, so drawing never holds up inference beyond the queue in front of it. Colours
follow the model's identities for multi-class models (one colour per class, fixed
across frames), the tracks of a tracked run, and the instance's position in its
frame otherwise. With the run's experiment, each frame also shows its regions and
each rule's state on that frame, drawn over the poses as `sleap-live render
--experiment` draws them (`ExperimentOverlay`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sleap_live.engines.types import Skeleton
from sleap_live.stream.experiment.experiment import Experiment
from sleap_live.stream.experiment.overlay import ExperimentOverlay
from sleap_live.stream.outputs.base import EncodedOutput
from sleap_live.stream.outputs.overlay import (
    OverlayStyle,
    SkeletonLayout,
    draw_boxes,
    draw_masks,
    draw_poses,
    predicted_boxes,
    predicted_masks,
)
from sleap_live.stream.outputs.overlay_writer import DEFAULT_CODEC, OverlayWriter
from sleap_live.stream.types import PoseRecord

# Colours of a tracked run's overlay: tracks cycle through all but the last, which
# marks instances without a track.
TRACK_COLOURS = 11


class OverlayRecorder(EncodedOutput):
    """Draws each frame's poses and encodes the result, one output frame per `write()`.

    Frame k of the recording is the k-th pose record, as with `VideoRecorder`. The
    video is encoded to a hidden file beside `path` and moved onto `path` when the
    recorder closes, which the pipeline does however the run ends; only a killed
    process leaves the hidden partial file instead.

    Args:
        path: the video to write (.mp4, .mkv, .avi).
        fps: frame rate stored in the file.
        frame_shape: (height, width, channels) of the frames, channels 1 or 3.
        class_names: the model's identity names (multi-class models), else empty.
        tracked: the poses carry a tracker's track ids (coloured by track).
        codec: a key of `overlay_writer.CODECS`.
        overwrite: replace an existing `path` (`output_rule.claim_output`).
        experiment: the run's experiment, whose regions and rule states
            (`PoseRecord.rules_on`) are drawn on each frame; None: poses only.

    Raises:
        ValueError: bad fps, frame shape, codec or suffix.
        OutputError: the output cannot be written or another run holds it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fps: float,
        frame_shape: tuple[int, int, int],
        skeleton: Skeleton,
        class_names: tuple[str, ...] = (),
        *,
        tracked: bool = False,
        codec: str = DEFAULT_CODEC,
        overwrite: bool = False,
        experiment: Experiment | None = None,
    ) -> None:
        self.path = Path(path)
        self._experiment = None if experiment is None else ExperimentOverlay(experiment, {})
        self._skeleton = SkeletonLayout(skeleton.node_names, skeleton.edges)
        # Colours: one per class, or (tracked) a fixed cycle of track colours; the
        # last one is for instances without a track.
        self._n_colours = TRACK_COLOURS if tracked and not class_names else len(class_names) + 1
        self._style = OverlayStyle().resolved(has_tracks=bool(class_names) or tracked)
        height, width = int(frame_shape[0]), int(frame_shape[1])
        self._writer = OverlayWriter(
            self.path,
            fps,
            (height, width),
            codec=codec,
            what="the overlay recording",
            overwrite=overwrite,
        )
        self.finished = False

    @property
    def n_frames_written(self) -> int:
        return self._writer.n_frames_written

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Draw `record`'s poses on `image`, its (H, W, C) uint8 frame, and encode it.

        Raises:
            ValueError: no frame was given.
        """
        if image is None:
            raise ValueError(f"{self.path}: an overlay recording needs the frame of each record")
        poses = record.poses
        if image.shape[2] == 1:
            image = np.repeat(image, 3, axis=2)
        if poses.masks is not None:
            image = draw_masks(image, predicted_masks(poses.masks), self._style)
        if poses.n_instances:
            # Instances without a track (-1) share the last colour.
            untracked = self._n_colours - 1
            identities = [
                int(identity) % untracked if identity >= 0 and untracked else untracked
                for identity in poses.identities
            ]
            image = draw_poses(
                image,
                list(poses.points),
                self._skeleton,
                self._style,
                track_indices=identities,
                n_tracks=self._n_colours,
            )
        if poses.boxes is not None:
            image = draw_boxes(image, predicted_boxes(poses.boxes), self._style)
        if self._experiment is not None:
            image = self._experiment.draw(image, record.rules_on)
        self._writer.write(image)

    def close(self) -> None:
        """Finish the video and move it into place; idempotent."""
        self._writer.close()
        self.finished = self._writer.n_frames_written > 0

    def discard(self) -> None:
        """Stop without writing `path` (left as it was); idempotent."""
        self._writer.discard()

    def describe(self) -> str:
        """What the recording holds, in one line."""
        if self.finished:
            return f"overlay recording: {self.path} ({self.n_frames_written} frames)"
        return f"overlay recording: {self.path} not written ({self.n_frames_written} frames drawn)"
