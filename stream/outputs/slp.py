"""Poses to a pose file through an append-only journal: `SlpWriter` (the journal's
claim, and the file made from it at the end or by `recover_slp`: `recovery`).

The file is SLEAP .slp, or, by its suffix, analysis HDF5, NWB or CSV (see `exports`).

A kill loses at most the last `save_interval` seconds of finished frames, a save
costs the same at any point of a run, and memory holds only the frames since the
last save (see `journal` for the file the frames are appended to).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.types import FrameBoxes, FramePoses, Skeleton
from sleap_live.output_rule import OutputError, remove_stale_staging
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.outputs.exports import FORMATS, prepare_saver, slot_layout
from sleap_live.stream.outputs.journal import (
    BoxChunk,
    EmbeddingChunk,
    FrameChunk,
    JournalHeader,
    JournalWriter,
    MaskChunk,
    TrackLabels,
)
from sleap_live.stream.outputs.recovery import JournalClaim, write_slp_from_journal
from sleap_live.stream.types import PoseRecord

# Seconds of finished frames a kill may cost: the .slp writer appends what it
# holds to its journal at least this often.
DEFAULT_SAVE_INTERVAL = 2.0

# A save falls due this fraction of the interval after the oldest frame held was
# ready, so a late wake-up or a slow disk still keeps the promised loss window.
SAVE_DUE_FRACTION = 0.9

# Frames whose instances a late track label may still find (a MOT tracker's track
# confirmed after its first detections): about 11 minutes at 30 frames a second.
LABELLED_FRAMES = 20_000

# Frames per journal chunk at most, so a fast recorded run holds little in memory.
MAX_CHUNK_FRAMES = 4096


class SlpWriter:
    """Saves pose records as predictions in a SLEAP .slp file (or .h5, .nwb, .csv), crash-safely.

    Every instance becomes a `sleap_io.PredictedInstance` with its point scores and
    instance score; for multi-class models each identity becomes one
    `sleap_io.Track` named after its class, and in a tracked run each track id N
    becomes the track ``track_N`` (sleap-nn's name). A record's `late_labels` (a
    MOT tracker's detections labelled once their track was confirmed) relabel the
    instances of earlier frames: in memory while those frames are held, else by a
    record of labels in the journal (frames more than `LABELLED_FRAMES` back are
    no longer found). A segmentation model's masks (`FramePoses.masks`) become
    `sleap_io.PredictedSegmentationMask`s in `LabeledFrame.masks`, as sleap-nn writes
    them. Frames in which nothing was found are
    kept as empty labeled frames, so "processed, nothing there" stays distinct
    from "never processed". Instances with no point found at all are left out.

    While the run lasts, finished frames are appended to a journal beside the
    .slp (``NAME.slp.journal``, see `journal`) at most `save_interval` seconds
    after their poses were ready; a save costs the same at any point of the run
    and memory holds only the frames since the last one. `close()` writes the .slp
    from the journal through sleap-io (to a temporary file renamed over `path`),
    then deletes the journal. A `path` ending in .h5, .nwb or .csv is written
    the same way, from its own journal (``NAME.csv.journal``), in that format
    (`exports.save_labels`). After a crash the journal holds every frame but the
    last `save_interval` seconds', and `recover_slp` (`sleap-live recover`)
    writes the .slp from it.

    The journal is locked for the writer's lifetime, so a second writer of the
    same `path` fails at once. A symlinked `path` keeps its link: the file it
    points to is written, unless the link could be another user's
    (`output_rule.check_links`). A rewritten file keeps its mode.

    Args:
        path: the pose file to write: .slp, .h5, .nwb or .csv (`exports.SUFFIXES`).
        video: the video the poses belong to: a file path (it need not be
            readable now; the .slp links to it) or a name for a live source.
        frame_shape: (height, width, channels) of the frames.
        fps: frame rate stored with the video, if known.
        n_frames: frames in the video, if known; otherwise the highest frame index
            written plus one.
        class_names: identity names of a multi-class model (one track each).
        box_categories: a box detector's categories (`ModelInfo.detector_categories`);
            its records' `FramePoses.boxes` are written as sleap-io
            `PredictedBoundingBox`es in `LabeledFrame.bboxes`, as sleap-nn writes them.
        renumber: number labeled frames 0, 1, 2, ... in the order written, to
            match a recording of exactly the processed frames; otherwise use
            `PoseRecord.frame_index`.
        save_interval: most seconds (on `clock`, from a record's `ready_time`)
            a finished frame waits before it is in the journal; None saves only
            on close.
        provenance: extra metadata stored in the file (JSON-serialisable values).
        clock: time source for the save schedule; injectable for tests.
        claim: the journal, claimed before the run (`JournalClaim`); None opens it here.
        tracked: the records come from a tracker, whose `late_labels` may relabel
            earlier frames: the writer keeps where the last `LABELLED_FRAMES`
            frames' instances are (a few MB at most). Untracked, it keeps nothing of
            the frames it saved.
        overwrite: replace an existing `path` (`output_rule.claim_output`); a `claim`
            was made with its own.

    Raises:
        ValueError: `path` has another suffix than `exports.SUFFIXES`, or
            `frame_shape` is not (H, W, C).
        FileNotFoundError: the folder `path` would be written in does not exist.
        OutputBusyError: another run is writing `path`.
        OutputError: the journal cannot be written, or holds an earlier run's
            unrecovered frames, or `path` exists (not `overwrite`); nothing is
            overwritten.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        skeleton: Skeleton,
        *,
        video: str | os.PathLike[str],
        frame_shape: tuple[int, int, int],
        fps: float | None = None,
        n_frames: int | None = None,
        class_names: tuple[str, ...] = (),
        box_categories: tuple[str, ...] = (),
        renumber: bool = False,
        save_interval: float | None = DEFAULT_SAVE_INTERVAL,
        provenance: Mapping[str, Any] | None = None,
        clock: Clock = MONOTONIC,
        claim: JournalClaim | None = None,
        tracked: bool = False,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        prepare_saver(self.path)
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"{self.path}: folder {self.path.parent} does not exist")
        if len(frame_shape) != 3:
            raise ValueError(f"{self.path}: frame_shape must be (H, W, C), got {frame_shape!r}")
        if save_interval is not None and not 0 < save_interval < float("inf"):
            raise ValueError(f"{self.path}: save_interval must be a positive number of seconds")
        self._n_nodes = skeleton.n_nodes
        video_name = str(video)
        if Path(video_name).exists():
            video_name = str(Path(video_name).resolve())
        header = JournalHeader(
            skeleton=skeleton,
            class_names=tuple(class_names),
            video=video_name,
            frame_shape=(int(frame_shape[0]), int(frame_shape[1]), int(frame_shape[2])),
            fps=None if fps is None else float(fps),
            n_frames=n_frames,
            provenance=dict(provenance or {}),
            pid=os.getpid(),
            box_categories=tuple(box_categories),
        )
        if claim is None:
            claim = JournalClaim(self.path, overwrite=overwrite)
        self._lock = claim.take(self.path)
        # Written through a symlink to its target, so the link survives the rename,
        # unless another user could have planted it (the claim's `claim_output`).
        self._target = claim.target
        self.journal = claim.journal
        try:
            remove_stale_staging(self._target)  # we hold the lock: their writer is gone
            assert self._lock.fd is not None
            self._journal = JournalWriter(self._lock.fd, header)
        except OSError as error:
            self._lock.release()
            raise OutputError(f"{self.journal}: cannot write the journal: {error}") from error
        self._renumber = renumber
        self._tracked = tracked
        self._save_interval = save_interval
        self._clock = clock
        self._pending: list[tuple[int, FramePoses]] = []
        # Recent frames by `PoseRecord.frame_index`: their .slp frame index and the
        # position of each of their instances among those kept (-1: left out).
        self._recent: OrderedDict[int, tuple[int, np.ndarray]] = OrderedDict()
        # .slp frame index -> its place in `_pending` (tracked runs only).
        self._pending_position: dict[int, int] = {}
        self._labels: list[tuple[int, int, int]] = []  # for the journal's next save
        self._due: float | None = None
        # What `describe` needs to say how the .h5 and .nwb hold untracked instances.
        self._most_untracked = 0
        self._any_tracked = False
        self.n_frames_written = 0
        self.n_frames_saved = 0
        self.finished = False
        self._closed = False

    # An `Output` that keeps the poses only: the pipeline passes it no frames.
    takes_frames = False

    def write(self, record: PoseRecord, image: np.ndarray | None = None) -> None:
        """Add the poses of one frame; appends to the journal when a save is due.

        The record's arrays are copied, so a ring-buffer view may be passed; `image`
        is not used (the `Output` protocol's frame).

        Raises:
            ValueError: the writer is closed, or the record's node count does not
                match the skeleton.
        """
        if self._closed:
            raise ValueError(f"{self.path}: write() after close()")
        poses = record.poses
        if poses.points.shape[1:] != (self._n_nodes, 2):
            raise ValueError(
                f"{self.path}: poses have points of shape {poses.points.shape}, expected "
                f"(instances, {self._n_nodes}, 2) for this skeleton"
            )
        frame_index = self.n_frames_written if self._renumber else record.frame_index
        found = np.isfinite(poses.points).any(axis=(1, 2))
        kept = FramePoses(
            points=np.array(poses.points[found], np.float32),
            point_scores=np.array(poses.point_scores[found], np.float32),
            instance_scores=np.array(poses.instance_scores[found], np.float32),
            identities=np.array(poses.identities[found], np.int32),
            boxes=None if poses.boxes is None else _copied(poses.boxes),
            masks=poses.masks,
            embeddings=None if poses.embeddings is None else np.array(poses.embeddings[found]),
        )
        self._pending.append((frame_index, kept))
        # Counted as written: an instance relabelled later (a MOT track's first
        # frames) still counts as untracked for the summary's note.
        untracked = int(np.count_nonzero(kept.identities < 0))
        self._most_untracked = max(self._most_untracked, untracked)
        self._any_tracked = self._any_tracked or untracked < kept.n_instances
        if self._tracked:
            self._pending_position[frame_index] = len(self._pending) - 1
            positions = np.where(found, np.cumsum(found) - 1, -1)
            self._recent[record.frame_index] = (frame_index, positions)
            if len(self._recent) > LABELLED_FRAMES:
                self._recent.popitem(last=False)
            self._relabel(record)
        self.n_frames_written += 1
        if self._due is None and self._save_interval is not None:
            self._due = record.ready_time + SAVE_DUE_FRACTION * self._save_interval
        if len(self._pending) >= MAX_CHUNK_FRAMES or self.seconds_until_due() == 0:
            self.flush()

    def _relabel(self, record: PoseRecord) -> None:
        for label in record.late_labels:
            recent = self._recent.get(label.frame_index)
            if recent is None:
                continue  # too far back (or never written)
            frame_index, positions = recent
            if not 0 <= label.row < positions.shape[0] or positions[label.row] < 0:
                continue
            row = int(positions[label.row])
            pending = self._pending_position.get(frame_index)
            if pending is not None:
                self._pending[pending][1].identities[row] = label.track_id
            else:
                self._labels.append((frame_index, row, label.track_id))

    def seconds_until_due(self) -> float | None:
        """Seconds until the frames held must be saved (0: now); None: none is due."""
        if self._due is None:
            return None
        return max(0.0, self._due - self._clock())

    def flush(self) -> None:
        """Append every frame held to the journal and wait until it is on disk."""
        self._due = None
        labels = None
        if self._labels:
            frames, rows, tracks = np.array(self._labels, np.int64).reshape(-1, 3).T
            labels = TrackLabels(frames, rows.astype(np.int32), tracks.astype(np.int32))
            self._labels.clear()
        if not self._pending:
            if labels is not None:
                self._journal.append(None, labels)
            return
        indices, poses = zip(*self._pending, strict=True)
        chunk = FrameChunk(
            frame_indices=np.array(indices, np.int64),
            counts=np.array([p.n_instances for p in poses], np.int32),
            points=np.concatenate([p.points for p in poses]).reshape(-1, self._n_nodes, 2),
            point_scores=np.concatenate([p.point_scores for p in poses]).reshape(-1, self._n_nodes),
            instance_scores=np.concatenate([p.instance_scores for p in poses]),
            identities=np.concatenate([p.identities for p in poses]),
        )
        self._journal.append(
            chunk, labels, _box_chunk(poses), _mask_chunk(poses), _embedding_chunk(poses)
        )
        self.n_frames_saved += chunk.n_frames
        self._pending.clear()
        self._pending_position.clear()

    def close(self) -> None:
        """Save the journal's last frames, write the .slp from it; idempotent.

        Raises:
            OutputError: the .slp could not be written; the journal is kept, and
                the message says how to recover it.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
            write_slp_from_journal(self.journal, self.path)
            self.finished = True
            self.journal.unlink()
        except Exception as error:
            raise OutputError(
                f"{self.path}: saving the poses failed ({error}); the {self.n_frames_saved} "
                f"frames saved so far are in {self.journal}: `sleap-live recover {self.path}` "
                "writes them to it"
            ) from error
        finally:
            self._lock.release()

    def discard(self) -> None:
        """Close without writing the .slp: for a run that fails before its first frame.

        The journal is deleted unless it already holds frames.
        """
        if self._closed:
            return
        self._closed = True
        if self.n_frames_saved == 0:
            self.journal.unlink(missing_ok=True)
        self._lock.release()

    def describe(self) -> str:
        """What the output holds, in one line: the .slp, or the journal and how to recover.

        An .h5 or .nwb that holds untracked animals in slots by their place in the
        frame (`exports.track_slots`) says so: those slots are not identities.
        """
        if self.finished:
            return f"poses: {self.path} ({self.n_frames_saved} frames){self._slots_note()}"
        return (
            f"poses: {self.n_frames_saved} frames saved in {self.journal}, not yet in "
            f"{self.path}: `sleap-live recover {self.path}` writes them"
        )

    def _slots_note(self) -> str:
        if not FORMATS[self.path.suffix.lower()].slots:
            return ""
        if slot_layout(self._most_untracked, self._any_tracked) != "by_place":
            return ""
        return (
            "; untracked animals are in slots by their place in each frame (instance_0, "
            "instance_1, ...), not by identity: --tracking gives identities"
        )

    def __enter__(self) -> SlpWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _copied(boxes: FrameBoxes) -> FrameBoxes:
    """`boxes` with arrays of their own (a ring-buffer view may be passed)."""
    return FrameBoxes(
        boxes=np.array(boxes.boxes, np.float32),
        scores=np.array(boxes.scores, np.float32),
        categories=np.array(boxes.categories, np.int32),
    )


def _embedding_chunk(poses: tuple[FramePoses, ...]) -> EmbeddingChunk | None:
    """The vectors of a chunk's instances (an embedding model's); None where none has any."""
    found = [p.embeddings for p in poses if p.embeddings is not None]
    if not found:
        return None
    dim = found[0].shape[1]
    return EmbeddingChunk(
        np.concatenate(
            [
                np.full((p.n_instances, dim), np.nan, np.float32)
                if p.embeddings is None
                else p.embeddings.astype(np.float32, copy=False)
                for p in poses
            ]
        ).reshape(-1, dim)
    )


def _box_chunk(poses: tuple[FramePoses, ...]) -> BoxChunk | None:
    """The boxes of a chunk's frames (a box detector's); None where none has any."""
    found = [p.boxes for p in poses if p.boxes is not None]
    if not found:
        return None
    return BoxChunk(
        counts=np.array([0 if p.boxes is None else p.boxes.n_boxes for p in poses], np.int32),
        boxes=np.concatenate([b.boxes for b in found]).reshape(-1, 4),
        scores=np.concatenate([b.scores for b in found]),
        categories=np.concatenate([b.categories for b in found]),
    )


def _mask_chunk(poses: tuple[FramePoses, ...]) -> MaskChunk | None:
    """The masks of a chunk's frames (a segmentation model's); None where none has any."""
    found = [p.masks for p in poses if p.masks is not None]
    if not found:
        return None
    return MaskChunk(
        counts=np.array([0 if p.masks is None else p.masks.n_masks for p in poses], np.int32),
        masks=tuple(mask for m in found for mask in m.masks),
        scores=np.concatenate([m.scores for m in found]),
        scales=np.concatenate([m.scales for m in found]).reshape(-1, 2),
    )
