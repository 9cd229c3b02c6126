"""A pose output's journal beside the run that writes it, and the pose file made from it.

`JournalClaim` and `lock_journal` open and lock the journal (refusing one that holds
an earlier run's unrecovered frames); `write_slp_from_journal` writes the pose file
(.slp, .h5, .nwb or .csv, by suffix: see `exports`) from a journal, at the end of a
run (`SlpWriter.close`) and after a crash (`recover_slp`, `sleap-live recover`).
The journal's file format is `journal`'s.
"""

from __future__ import annotations

import gc
import math
import os
import stat
import sys
import threading
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import sleap_io as sio

from sleap_live.engines.host.outputs import box_category
from sleap_live.engines.types import Skeleton
from sleap_live.output_rule import (
    OutputError,
    StagedOutput,
    claim_output,
    remove_stale_staging,
    resolve_output,
)
from sleap_live.stream.errors import one_line
from sleap_live.stream.outputs.exports import save_labels, sidecars
from sleap_live.stream.outputs.guard import OutputLock
from sleap_live.stream.outputs.journal import (
    JOURNAL_SUFFIX,
    MAGIC,
    BoxChunk,
    EmbeddingChunk,
    JournalContents,
    JournalError,
    JournalTornError,
    MaskChunk,
    TrackLabels,
    journal_path,
    read_journal,
    scan_journal,
)

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
    connect. The `SlpWriter` given the claim (through `Pipeline`'s `claim`)
    writes into that journal; `release` gives up a claim no writer took, removing
    the journal it created, so a run that stops first (a server's address in use)
    leaves nothing behind.

    Args:
        path: the pose output (.slp, .h5, .nwb or .csv).
        overwrite: replace an existing `path` (`output_rule.claim_output`).

    Raises:
        OutputError: as `SlpWriter` for its journal; `path` exists (not `overwrite`).
    """

    def __init__(self, path: Path, *, overwrite: bool = False) -> None:
        self.path = Path(path)
        self.target = claim_output(self.path, "the pose output", overwrite=overwrite)
        self.journal = journal_path(self.target)
        self._lock = lock_journal(self.journal, self.path)
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


def recover_slp(path: str | os.PathLike[str], *, overwrite: bool = False) -> JournalContents:
    """Write the pose file `path` (.slp, .h5, .nwb, .csv) from the journal a crashed run
    left beside it.

    Every complete chunk is kept; a chunk cut short by the crash is dropped.
    The journal is deleted once the .slp is written.

    Args:
        path: the pose file (or its ``.journal``).
        overwrite: replace the pose file if it exists (`output_rule.claim_output`).

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
    """Write the pose file `slp` from `journal` by the output rule (`output_rule`):
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
    # The frames of the last chunk of frames, which a chunk of boxes belongs to.
    chunk_frames: list[sio.LabeledFrame] = []
    for chunk in chunks:
        if isinstance(chunk, BoxChunk):
            for labelled, rows in zip(chunk_frames, chunk.frames(), strict=False):
                labelled.bboxes = [
                    _box(chunk, i, header.box_categories) for i in range(rows.start, rows.stop)
                ]
                # A box top-down model's box j seeded crop j; with as many instances
                # as boxes none was dropped (no node found), so crop j gave instance j,
                # linked as sleap-nn links them. Otherwise which is unknown: unlinked.
                if len(labelled.bboxes) == len(labelled.instances):
                    for box, instance in zip(labelled.bboxes, labelled.instances, strict=True):
                        box.instance = instance
            continue
        if isinstance(chunk, MaskChunk):
            for labelled, rows in zip(chunk_frames, chunk.frames(), strict=False):
                labelled.masks = [_mask(chunk, i) for i in range(rows.start, rows.stop)]
            continue
        if isinstance(chunk, EmbeddingChunk):
            # sleap-nn's `identity_embedding`, in the chunk's instance order.
            instances = [i for labelled in chunk_frames for i in labelled.instances]
            for instance, vector in zip(instances, chunk.vectors, strict=False):
                if np.isfinite(vector).all():
                    instance.identity_embedding = sio.Embedding(vector.astype(np.float32))
            continue
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
        chunk_frames = frames[-chunk.n_frames :] if chunk.n_frames else []
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
            failures.append(one_line(unraisable.exc_value))
        else:
            previous_unraisable(unraisable)

    def collect_printed(
        kind: type[BaseException], error: BaseException, trace: TracebackType | None
    ) -> None:
        # h5py's finalisers print their error through the except hook first.
        if _raised_in_h5py(trace):
            failures.append(one_line(error))
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
            failures.insert(0, one_line(error))
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


def _mask(chunk: MaskChunk, i: int) -> sio.PredictedSegmentationMask:
    """Mask `i` of `chunk` as sleap-nn writes it (`build_predicted_segmentation_mask`:
    at the output stride, its scale mapping it to frame pixels, offset 0)."""
    scale_x, scale_y = chunk.scales[i].tolist()
    return sio.PredictedSegmentationMask.from_numpy(
        chunk.masks[i], score=float(chunk.scores[i]), scale=(scale_x, scale_y), offset=(0.0, 0.0)
    )


def _box(chunk: BoxChunk, i: int, categories: tuple[str, ...]) -> sio.PredictedBoundingBox:
    """Box `i` of `chunk` as sleap-nn writes it (`Outputs.to_bboxes`)."""
    x1, y1, x2, y2 = chunk.boxes[i].astype(np.float64).tolist()
    return sio.PredictedBoundingBox(
        x1,
        y1,
        x2,
        y2,
        score=float(chunk.scores[i]),
        category=box_category(categories, int(chunk.categories[i])),
    )


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


def lock_journal(journal: Path, slp: Path) -> OutputLock:
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
