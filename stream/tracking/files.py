"""Re-tracking saved poses: `sleap-live track POSES.slp -o OUT.slp`.

Every predicted instance of the file is tracked again, video by video, in frame
order, by the same tracker a live run uses; the tracks it had are replaced. User
(hand-labelled) instances are kept as they are. A MOT tracker's detections before
their track was confirmed are labelled with it, as sleap-nn labels them. The
result is written through a temporary file renamed into place, in the format the
output's suffix picks (.slp, .h5, .nwb or .csv), and never over the input.
Instances' appearance vectors (sleap-io's ``identity_embedding``, as `sleap-nn
predict` with an embedding model saves them) are read for the appearance options.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np
import sleap_io as sio

from sleap_live.engines.types import FramePoses
from sleap_live.output_rule import StagedOutput, claim_output
from sleap_live.stream.outputs.exports import check_suffix, save_labels, sidecars
from sleap_live.stream.outputs.guard import same_file
from sleap_live.stream.outputs.slp_tables import check_analysis_h5, check_slp_tables
from sleap_live.stream.tracking.live import new_tracker
from sleap_live.stream.tracking.settings import TrackingSettings

# Most instances of one frame `retrack_file` tracks. The tracker matches a frame's
# instances with every track of its window (sleap-nn's `fixed_window`: up to 5
# frames' instances), so its cost grows with the square of this: at 2,000 a frame,
# 3 s and 280 MB RSS a frame on a 2-core AMD EPYC (`sleap-live track` on 3 frames of
# 2,000 random 2-node instances); past that, a crafted file took 4.9 GB at 5,000 and
# asked 67 GiB at 30,000. Models give tens of animals a frame; 2,000 is far above.
MAX_INSTANCES_PER_FRAME = 2000

# The pose files `retrack_file` reads, by suffix (sleap-io's readers).
_LOADERS: dict[str, Callable[[str], sio.Labels]] = {
    ".slp": sio.load_slp,
    ".h5": sio.load_analysis_h5,
    ".nwb": sio.load_nwb,
}


@attrs.frozen
class RetrackSummary:
    """What `retrack_file` did: frames and instances tracked, tracks started."""

    frames: int
    instances: int
    tracks: int


def retrack_labels(
    labels: sio.Labels,
    settings: TrackingSettings,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[sio.Labels, RetrackSummary]:
    """`labels` with every predicted instance on the tracker's tracks (``track_N``).

    One tracker per video (track names are numbered across videos, as sleap-nn
    does with its name offset). `progress(frames done, frames in all)`.

    Raises:
        ValueError: a frame holds more than `MAX_INSTANCES_PER_FRAME` predicted
            instances (checked before any frame is tracked).
    """
    for frame in labels.labeled_frames:  # every frame, before any is tracked
        if len(frame.predicted_instances) > MAX_INSTANCES_PER_FRAME:
            raise ValueError(
                f"frame {frame.frame_idx} holds {len(frame.predicted_instances)} predicted "
                f"instances, more than the {MAX_INSTANCES_PER_FRAME} tracked per frame"
            )
    tracks: list[sio.Track] = []
    frames_done = instances = 0
    by_video: dict[int, list[sio.LabeledFrame]] = {}
    for frame in labels.labeled_frames:
        by_video.setdefault(id(frame.video), []).append(frame)
    new_frames: list[sio.LabeledFrame] = []
    total = len(labels.labeled_frames)
    n_nodes = len(labels.skeletons[0].nodes)
    dim = _embedding_dim(labels)
    for frames in by_video.values():
        tracker = new_tracker(settings)
        offset = len(tracks)
        # This video's re-tracked predictions by frame index, for late labels.
        retracked_of: dict[int, list[sio.PredictedInstance]] = {}
        for frame in sorted(frames, key=lambda frame: frame.frame_idx):
            predicted = frame.predicted_instances
            poses = _frame_poses(predicted, n_nodes, dim)
            tracked = tracker.track_poses(poses, frame.frame_idx)
            while len(tracks) < offset + tracker.n_tracks:
                tracks.append(sio.Track(name=f"track_{len(tracks)}"))
            kept: list[sio.Instance] = list(frame.user_instances)
            retracked_of[frame.frame_idx] = []
            for i, (track_id, score) in enumerate(
                zip(tracked.track_ids.tolist(), tracked.scores.tolist(), strict=True)
            ):
                instance = sio.PredictedInstance.from_numpy(
                    poses.points[i].astype(np.float64),
                    skeleton=labels.skeletons[0] if not predicted else predicted[i].skeleton,
                    point_scores=poses.point_scores[i].astype(np.float64),
                    score=float(poses.instance_scores[i]),
                    track=tracks[offset + track_id] if track_id >= 0 else None,
                    tracking_score=score if track_id >= 0 else None,
                )
                retracked_of[frame.frame_idx].append(instance)
                kept.append(instance)
            for label in tracked.late:
                earlier = retracked_of[label.frame_index][label.row]
                earlier.track = tracks[offset + label.track_id]
                earlier.tracking_score = label.score
            instances += len(predicted)
            new_frames.append(
                sio.LabeledFrame(video=frame.video, frame_idx=frame.frame_idx, instances=kept)
            )
            frames_done += 1
            if progress is not None:
                progress(frames_done, total)
    retracked = sio.Labels(
        labeled_frames=new_frames,
        videos=labels.videos,
        skeletons=labels.skeletons,
        tracks=tracks,
        provenance={**labels.provenance, "tracking": attrs.asdict(settings)},
    )
    return retracked, RetrackSummary(frames_done, instances, len(tracks))


def _embedding_dim(labels: sio.Labels) -> int | None:
    """The length of the predictions' appearance vectors; None if none has one."""
    for frame in labels.labeled_frames:
        for instance in frame.predicted_instances:
            if instance.identity_embedding is not None:
                return instance.identity_embedding.dim
    return None


def _frame_poses(
    predicted: list[sio.PredictedInstance], n_nodes: int, dim: int | None
) -> FramePoses:
    """A frame's predicted instances as the tracker's input; with `dim`, their
    appearance vectors (a NaN row for an instance without one, which sleap-nn's
    tracker scores as no match; one of another length likewise)."""
    if not predicted:
        return FramePoses.empty(n_nodes)
    with_scores = np.stack([instance.numpy(scores=True) for instance in predicted])
    embeddings = None
    if dim is not None:
        embeddings = np.full((len(predicted), dim), np.nan, np.float32)
        for row, instance in enumerate(predicted):
            vector = instance.identity_embedding
            if vector is not None and vector.dim == dim:
                embeddings[row] = vector.vector
    return FramePoses(
        points=with_scores[..., :2],
        point_scores=with_scores[..., 2],
        instance_scores=np.array([instance.score for instance in predicted], np.float64),
        identities=np.full(len(predicted), -1, np.int32),
        embeddings=embeddings,
    )


def retrack_file(
    poses: Path,
    output: Path,
    settings: TrackingSettings,
    progress: Callable[[int, int], None] | None = None,
    *,
    overwrite: bool = False,
) -> RetrackSummary:
    """Track the predictions of the pose file `poses` again and write them to `output`.

    Raises:
        ValueError: `output` is `poses`, or either has no pose file suffix.
        FileNotFoundError: `poses`, or the folder of `output`, does not exist.
        OSError: `poses` cannot be read as a pose file (its frames' or instances'
            ranges leave their tables, or a frame holds more than
            `MAX_INSTANCES_PER_FRAME` instances), or `output` cannot be written (an
            `OutputError`: it exists and not `overwrite`).
    """
    check_suffix(output)
    load = _LOADERS.get(poses.suffix.lower())
    if load is None:
        raise ValueError(
            f"{poses}: cannot read poses from a {poses.suffix or 'suffix-less'} file; "
            f"pose files to track are {', '.join(_LOADERS)}"
        )
    if not poses.is_file():
        raise FileNotFoundError(f"{poses}: no such pose file")
    if not output.parent.is_dir():
        raise FileNotFoundError(f"{output}: folder {output.parent} does not exist")
    if same_file(poses, output):
        raise ValueError(f"{output}: is the input; re-tracked poses go to another file")
    claim_output(
        output, "-o", overwrite=overwrite
    )  # before the work; again when the file is renamed into place
    if poses.suffix.lower() == ".slp":
        # Offsets and instances per frame, before sleap-io trusts them.
        check_slp_tables(poses, MAX_INSTANCES_PER_FRAME)
    elif poses.suffix.lower() == ".h5":
        # Tracks (instances a frame), before sleap-io reads the whole array.
        check_analysis_h5(poses, MAX_INSTANCES_PER_FRAME)
    try:
        labels = load(str(poses))
    except Exception as error:  # sleap-io raises many kinds on a file that is not its
        raise OSError(f"{poses}: cannot be read as a pose file ({error})") from None
    if not labels.skeletons:
        raise ValueError(f"{poses}: holds no skeleton, so no poses to track")
    try:
        retracked, summary = retrack_labels(labels, settings, progress)
    except ValueError as error:
        raise OSError(f"{poses}: {error}") from None
    with StagedOutput(output, "-o") as staged:
        save_labels(retracked, staged.file(), staged.target)
        staged.commit(*(sidecar.name for sidecar in sidecars(staged.target)), staged.target.name)
    return summary
