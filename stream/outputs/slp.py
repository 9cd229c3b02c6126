"""Poses to a pose file through an append-only journal: `SlpWriter`, `recover_slp`.

The file is SLEAP .slp, or, by its suffix, analysis HDF5, NWB or CSV (see `exports`).

A kill loses at most the last `save_interval` seconds of finished frames, a save
costs the same at any point of a run, and memory holds only the frames since the
last save (see `journal` for the file the frames are appended to).
"""

from __future__ import annotations

import gc
import math
import os
import stat
import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import sleap_io as sio

from sleap_live.engines.types import FramePoses, Skeleton
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.outputs.exports import (
    SLOT_SUFFIXES,
    prepare_saver,
    save_labels,
    sidecars,
    slot_layout,
)
from sleap_live.stream.outputs.guard import (
    OutputError,
    OutputLock,
    claim_output,
    resolve_output,
)
from sleap_live.stream.outputs.journal import (
    JOURNAL_SUFFIX,
    MAGIC,
    FrameChunk,
    JournalContents,
    JournalError,
    JournalHeader,
    JournalTornError,
    JournalWriter,
    TrackLabels,
    journal_path,
    read_journal,
    scan_journal,
)
from sleap_live.stream.outputs.staging import StagedOutput, remove_stale_staging
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

# One final save at a time in the process (the pose outputs of several sources
# close in threads of their own): `_save_checked` counts the HDF5 objects a save
# leaves open and sets the process's error hooks, which a concurrent save would
# confuse. HDF5 runs one call at a time anyway (h5py's global lock).
_HDF5_SAVE = threading.Lock()


def to_sio_skeleton(skeleton: Skeleton) -> sio.Skeleton:
    """Convert an engine skeleton to a sleap-io one (same node order and edges)."""
    names = list(skeleton.node_names)
    edges = [(names[src], names[dst]) for src, dst in skeleton.edges]
    return sio.Skeleton(nodes=names, edges=edges, name=skeleton.name)


class JournalClaim:
    """A pose output's journal, opened and locked before the run that writes it.

    `sleap-live run` claims its pose output before it binds a server or does any
    work: a journal that cannot be opened (another run's, an earlier run's
    unrecovered frames, a folder it cannot write) then fails the run before any
    server has started, and the journal's descriptor is the run's whatever peers
    connect. The `SlpWriter` given the claim (through `OutputOptions.claim`)
    writes into that journal; `release` gives up a claim no writer took, removing
    the journal it created, so a run that stops first (a server's address in use)
    leaves nothing behind.

    Args:
        path: the pose output (.slp, .h5, .nwb or .csv).
        overwrite: replace an existing `path` (`guard.claim_output`).

    Raises:
        OutputError: as `SlpWriter` for its journal; `path` exists (not `overwrite`).
    """

    def __init__(self, path: Path, *, overwrite: bool = False) -> None:
        self.path = Path(path)
        self.target = claim_output(self.path, "the pose output", overwrite=overwrite)
        self.journal = journal_path(self.target)
        self._lock = _lock_journal(self.journal, self.path)
        self._taken = False

    def take(self, path: Path) -> OutputLock:
        """The journal's lock, for the writer of `path` (once).

        Raises:
            ValueError: `path` is not the output claimed, or the claim was taken or
                released.
        """
        if self._taken or self._lock.fd is None:
            raise ValueError(f"{self.path}: its journal claim was taken or released already")
        if Path(os.path.realpath(path)) != self.target:
            raise ValueError(f"{path}: the journal claimed is {self.path}'s")
        self._taken = True
        return self._lock

    def release(self) -> None:
        """Give the journal up unless a writer took it: removed where this claim
        created it (nothing was written to it); idempotent."""
        fd = self._lock.fd
        if self._taken or fd is None:
            return
        try:
            if self._lock.created and os.fstat(fd).st_size == 0 and _same_file(fd, self.journal):
                self.journal.unlink()
        except OSError:
            pass  # gone already: nothing to leave behind
        finally:
            self._lock.release()


class SlpWriter:
    """Saves pose records as predictions in a SLEAP .slp file (or .h5, .nwb, .csv), crash-safely.

    Every instance becomes a `sleap_io.PredictedInstance` with its point scores and
    instance score; for multi-class models each identity becomes one
    `sleap_io.Track` named after its class, and in a tracked run each track id N
    becomes the track ``track_N`` (sleap-nn's name). A record's `late_labels` (a
    MOT tracker's detections labelled once their track was confirmed) relabel the
    instances of earlier frames: in memory while those frames are held, else by a
    record of labels in the journal (frames more than `LABELLED_FRAMES` back are
    no longer found). Frames in which nothing was found are
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
    (`guard.check_links`). A rewritten file keeps its mode.

    Args:
        path: the pose file to write: .slp, .h5, .nwb or .csv (`exports.SUFFIXES`).
        skeleton: the model's skeleton.
        video: the video the poses belong to: a file path (it need not be
            readable now; the .slp links to it) or a name for a live source.
        frame_shape: (height, width, channels) of the frames.
        fps: frame rate stored with the video, if known.
        n_frames: frames in the video, if known; otherwise the highest frame index
            written plus one.
        class_names: identity names of a multi-class model (one track each).
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
        overwrite: replace an existing `path` (`guard.claim_output`); a `claim`
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
        )
        if claim is not None:
            self._lock = claim.take(self.path)
            self._target = claim.target
            self.journal = claim.journal
        else:
            # Write through a symlink to its target, so the link survives the rename,
            # unless another user could have planted it.
            self._target = claim_output(self.path, "the pose output", overwrite=overwrite)
            self.journal = journal_path(self._target)
            self._lock = _lock_journal(self.journal, self.path)
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
        self._journal.append(chunk, labels)
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
        if self.path.suffix.lower() not in SLOT_SUFFIXES:
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


def recover_slp(path: str | os.PathLike[str], *, overwrite: bool = False) -> JournalContents:
    """Write the pose file `path` (.slp, .h5, .nwb, .csv) from the journal a crashed run
    left beside it.

    Every complete chunk is kept; a chunk cut short by the crash is dropped.
    The journal is deleted once the .slp is written.

    Args:
        path: the pose file (or its ``.journal``).
        overwrite: replace the pose file if it exists (`guard.claim_output`).

    Returns:
        What the journal held (frames saved, torn bytes dropped).

    Raises:
        OutputBusyError: a run is still writing `path`.
        OutputError: the pose file exists (not `overwrite`).
        JournalError: there is no journal, or it is unreadable.
    """
    slp = Path(path)
    if slp.name.endswith(JOURNAL_SUFFIX):
        slp = slp.with_name(slp.name[: -len(JOURNAL_SUFFIX)])
    journal = journal_path(resolve_output(slp, "the pose output"))
    if not journal.exists():
        raise JournalError(f"{slp}: no journal to recover ({journal} does not exist)")
    target = claim_output(slp, "the pose output", overwrite=overwrite)
    lock = OutputLock(journal, f"the pose output {slp}")
    try:
        contents = scan_journal(journal)
        check_journal_video(contents.header.video, journal)
        remove_stale_staging(target)
        write_slp_from_journal(journal, slp)
        journal.unlink()
    finally:
        lock.release()
    return contents


def check_journal_video(video: str, journal: Path) -> None:
    """Refuse a journal whose video is a file that is not a video.

    A journal names the video its poses belong to (the .slp links to it). A
    live source's name (a camera, a URL) and a file moved away since are kept
    as they are; an existing path must be a regular file that opens as a video,
    so a crafted journal cannot make the .slp point at, say, /etc/shadow.

    Raises:
        JournalError: one line naming the journal and the video.
    """
    path = Path(video)
    if not path.is_absolute():
        return
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise JournalError(f"{journal}: the journal's video {video}: {error.strerror}") from None
    if not stat.S_ISREG(mode):
        raise JournalError(f"{journal}: the journal's video {video} is not a regular file")
    import av

    try:
        with av.open(video, mode="r") as container:
            has_video = bool(container.streams.video)
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as error:
        raise JournalError(
            f"{journal}: the journal's video {video} does not open as a video ({error})"
        ) from None
    if not has_video:
        raise JournalError(f"{journal}: the journal's video {video} has no video stream")


def write_slp_from_journal(journal: Path, slp: Path) -> int:
    """Write the pose file `slp` from `journal` by the output rule (`staging`):
    staged in a private folder, renamed into place; returns frames.

    The format is `slp`'s suffix's (see `exports`).

    Raises:
        JournalError: the journal is unreadable.
        OSError: the file cannot be written.
    """
    header, chunks = read_journal(journal)
    skeleton = to_sio_skeleton(header.skeleton)
    tracks = {identity: sio.Track(name=name) for identity, name in enumerate(header.class_names)}
    video = sio.Video(filename=header.video, open_backend=False)
    if header.fps is not None and math.isfinite(header.fps) and header.fps > 0:
        video.backend_metadata["fps"] = header.fps  # else unknown: not a reason to lose frames
    frames: list[sio.LabeledFrame] = []
    by_index: dict[int, sio.LabeledFrame] = {}
    last_index = -1
    for chunk in chunks:
        if isinstance(chunk, TrackLabels):
            for frame_index, row, track_id in zip(
                chunk.frame_indices.tolist(),
                chunk.rows.tolist(),
                chunk.track_ids.tolist(),
                strict=True,
            ):
                labelled = by_index.get(frame_index)
                if labelled is not None and row < len(labelled.instances):
                    labelled.instances[row].track = _track(tracks, track_id)
            continue
        for frame_index, rows in chunk.frames():
            instances = [
                sio.PredictedInstance.from_numpy(
                    chunk.points[i].astype(np.float64),
                    skeleton=skeleton,
                    point_scores=chunk.point_scores[i].astype(np.float64),
                    score=float(chunk.instance_scores[i]),
                    track=_track(tracks, int(chunk.identities[i])),
                )
                for i in range(rows.start, rows.stop)
            ]
            frames.append(sio.LabeledFrame(video=video, frame_idx=frame_index, instances=instances))
            by_index[frame_index] = frames[-1]
            last_index = max(last_index, frame_index)
    n_frames = header.n_frames if header.n_frames is not None else last_index + 1
    video.backend_metadata["shape"] = (n_frames, *header.frame_shape)
    labels = sio.Labels(
        labeled_frames=frames,
        videos=[video],
        skeletons=[skeleton],
        tracks=[tracks[identity] for identity in sorted(tracks)],
        provenance=_finite(header.provenance),
    )
    with StagedOutput(slp, "the pose output") as staged:
        _save_checked(labels, staged.file(), staged.target)
        staged.commit(*(sidecar.name for sidecar in sidecars(staged.target)), staged.target.name)
    return len(frames)


def _save_checked(labels: sio.Labels, partial: Path, slp: Path) -> None:
    """`save_labels`, with the write failures HDF5 does not raise made an OSError.

    On a full disk or a lost device, HDF5 reports some failed writes only from
    h5py's object finalisers (printed tracebacks, ignored) and may leave the file
    open: the save would seem to succeed, and closing that file later (at exit)
    crashes the process. Those failures are collected here instead of printed,
    and a file HDF5 could not close fails the save (`cli.main` then leaves without
    closing it, see `hdf5_objects_open`).

    Raises:
        OSError: the file could not be written or closed.
    """
    with _HDF5_SAVE:
        failures = _save_collecting_failures(labels, partial, slp)
    if failures:
        raise OSError(f"{partial}: {failures[0]}")


def _save_collecting_failures(labels: sio.Labels, partial: Path, slp: Path) -> list[str]:
    """`save_labels`; what failed in HDF5, one line each (see `_save_checked`)."""
    failures: list[str] = []
    previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

    def collect_unraisable(unraisable: Any) -> None:
        if _raised_in_h5py(unraisable.exc_traceback):
            failures.append(_one_line(unraisable.exc_value))
        else:
            previous_unraisable(unraisable)

    def collect_printed(
        kind: type[BaseException], error: BaseException, trace: TracebackType | None
    ) -> None:
        # h5py's finalisers print their error through the except hook first.
        if _raised_in_h5py(trace):
            failures.append(_one_line(error))
        else:
            previous_except(kind, error, trace)

    # The hooks are the process's: set only for this save, and put back after it.
    sys.unraisablehook, sys.excepthook = collect_unraisable, collect_printed
    try:
        open_before = hdf5_objects_open()
        try:
            save_labels(labels, partial, slp)
        except Exception as error:
            # Kept as text, its frames cleared: they hold h5py objects, which must
            # be finalised now, not whenever the error is let go.
            failures.insert(0, _one_line(error))
            traceback.clear_frames(error.__traceback__)
        if failures or hdf5_objects_open() > open_before:
            # Finalise the save's h5py objects while the hooks collect. Only then: a
            # full collection of a large process can take longer than a stop waits.
            gc.collect()
        if hdf5_objects_open() > open_before:
            failures.append("HDF5 could not close the file")
    finally:
        sys.unraisablehook, sys.excepthook = previous_unraisable, previous_except
    return failures


def hdf5_objects_open() -> int:
    """HDF5 objects open in this process (0 without h5py); counted, never touched.

    After a failed save HDF5 may hold objects of a file it could not close.
    Touching or closing them (as interpreter exit does) can crash the process
    inside HDF5 (a flush that failed leaves its datasets half-released), so the
    `sleap-live` command leaves without closing them (`cli.main`).
    """
    h5py = sys.modules.get("h5py")
    if h5py is None:
        return 0
    return int(h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_ALL))


def _raised_in_h5py(trace: TracebackType | None) -> bool:
    while trace is not None:
        if "h5py" in trace.tb_frame.f_code.co_filename:
            return True
        trace = trace.tb_next
    return False


def _one_line(error: BaseException | None) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _track(tracks: dict[int, sio.Track], identity: int) -> sio.Track | None:
    """The track of `identity`: a multi-class model's class, else the tracker's
    ``track_N`` (sleap-nn's names), made on first use (only the identities used:
    one per number up to a crafted 2**31-1 would take the memory); None for -1
    (untracked)."""
    if identity < 0:
        return None
    track = tracks.get(identity)
    if track is None:
        track = tracks[identity] = sio.Track(name=f"track_{identity}")
    return track


def _finite(value: Any) -> Any:
    """`value` (JSON values) with each NaN or infinity as its text ("nan"), which
    the pose file's JSON takes: a provenance holding one must not cost the frames."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _lock_journal(journal: Path, slp: Path) -> OutputLock:
    """Lock `slp`'s journal; refuse one that holds an earlier run's unrecovered frames."""
    lock = OutputLock(journal, f"the pose output {slp}")
    try:
        with open(journal, "rb") as handle:
            start = handle.read(len(MAGIC))
        if start and not MAGIC.startswith(start):
            raise OutputError(f"{journal}: exists and is not a sleap-live journal; move it away")
        if len(start) == len(MAGIC):
            earlier = scan_journal(journal)
            if earlier.n_chunks:
                raise OutputError(
                    f"{slp}: {journal} holds frames of an earlier run that did not finish; "
                    f"`sleap-live recover {slp}` saves them to it (or delete the journal)"
                )
    except JournalTornError:
        pass  # a header cut short: the earlier run saved no frame, nothing to keep
    except BaseException:
        lock.release()
        raise
    return lock


def _same_file(fd: int, path: Path) -> bool:
    held, now = os.fstat(fd), os.lstat(path)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
