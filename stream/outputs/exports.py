"""Pose files by suffix: the formats a run can write, and how each is saved.

A run journals its poses (see `journal`, one `Output` for every format: `slp`) and,
when it ends, writes the file its `-o` names from the journal in the format the
suffix picks, each a row of `FORMATS` (`PoseFormat`: its saver and what it needs):

- ``.slp``: SLEAP labels (`sleap_io.save_slp`), with the run's provenance.
- ``.h5``: SLEAP's analysis HDF5 (`sleap_io.save_analysis_h5`, as SLEAP exports
  it: tracks x nodes x 2 x frames), the provenance in its ``provenance`` dataset.
- ``.nwb``: NWB with ndx-pose (`nwb`, sleap-io's layout), one
  ``PoseEstimation`` per track, timestamped frame index / fps in seconds; the
  provenance (JSON) in the file's ``notes`` and each ``PoseEstimation``'s
  ``scorer``. NWB keeps points and point scores, not instance scores, and no
  frame without animals; sleap-io reads the frames back numbered in time order.
- ``.csv``: `CSV_COLUMNS`, one row per frame x instance (written with the csv
  module: sleap-io's CSV saver has no instance column and cannot tell a frame
  processed with nothing found from one never processed); the provenance in the
  sidecar ``NAME.csv.provenance.json``.

Tracks are identities: a run without them (no tracker, not a multi-class model)
writes none where a format can say so, which is what sleap-nn, SLEAP and sleap-io
write for untracked predictions: no ``Track`` in the .slp, an empty ``track``
column in the .csv. The .h5 and .nwb layouts hold each series under a track, so
there (`track_slots`):

- at most one instance in every frame: SLEAP's own layout for untracked poses,
  one slot and no track names in the .h5 (SLEAP 1.x writes it so), one
  ``track=untracked`` series in the .nwb (sleap-io's name); sleap-io reads both
  back untracked, as the .slp.
- several instances in a frame (or tracks on others): one slot per place in the
  frame, named ``instance_0``, ``instance_1``, ... (the .csv's ``instance``
  column), not identities. sleap-io writes an untracked .slp to .h5 the same way (it names the
  slots ``track_0``, ... as a tracker's tracks), and its .h5 reader makes a track of
  every slot: no layout of several slots reads back untracked through it. Its NWB
  reader reads the series back untracked.
"""

from __future__ import annotations

import copy
import csv
import importlib
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import h5py
import numpy as np
import sleap_io as sio

# sleap-io loads its data model on first use: loaded with the outputs instead, so a
# run's first save imports nothing (a flood of connections to the run's publisher
# can take every free descriptor for a moment, and an import then fails).
import sleap_io.model.labels

# The columns of a CSV pose file before the per-node ones ("NODE.x", "NODE.y",
# "NODE.score" for each node, in the skeleton's order). A frame processed with
# nothing found has one row with only frame_index filled.
CSV_COLUMNS = ("frame_index", "instance", "track", "instance_score")

# Where a CSV pose file's provenance lives: a JSON file beside it.
PROVENANCE_SIDECAR_SUFFIX = ".provenance.json"


def check_suffix(path: Path) -> None:
    """Raises `ValueError`, naming `path` and the accepted suffixes, unless one fits."""
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(
            f"{path}: cannot write poses to a {path.suffix or 'suffix-less'} file; "
            f"pose files are {', '.join(SUFFIXES)}"
        )


# What a final save loads on its first use: sleap-io resolves its names and
# loads its writers lazily (.slp's writer alone takes ~0.5 s, more on a busy
# machine; .h5 brings pandas; NWB takes seconds). Loaded when the output opens
# instead (each format's `PoseFormat.modules`), so the final save, which a stop's
# timeout bounds, only writes.
_LABELS_NAMES = ("Labels", "LabeledFrame", "PredictedInstance", "Skeleton", "Track", "Video")


def prepare_saver(path: Path) -> None:
    """Load what saving to `path` (by its suffix) needs, so the save itself does not.

    Raises:
        ValueError: `path`'s suffix is not a pose file's (see `check_suffix`).
    """
    check_suffix(path)
    for name in _LABELS_NAMES:
        getattr(sio, name)
    for module in FORMATS[path.suffix.lower()].modules:
        importlib.import_module(module)


def sidecars(path: Path) -> list[Path]:
    """Files written beside the pose file `path` besides its journal."""
    known = FORMATS.get(path.suffix.lower())
    if known is None or known.sidecar is None:
        return []
    return [path.with_name(path.name + known.sidecar)]


def save_labels(labels: sio.Labels, path: Path, final: Path) -> None:
    """Write `labels` to `path` in the format `final`'s suffix picks.

    `path` is the file staged in a private folder (`output_rule.StagedOutput`) that
    is renamed to `final` once complete; the sidecars are staged beside it under
    the names `sidecars(final)` gives, and renamed with it.
    """
    check_suffix(final)
    FORMATS[final.suffix.lower()].save(labels, path, final)


def _save_slp(labels: sio.Labels, path: Path, final: Path) -> None:
    # An embedding model's vectors (`identity_embedding`) as `sleap-nn predict
    # --save_embeddings slp` writes them.
    vectors = any(
        instance.identity_embedding is not None
        for frame in labels.labeled_frames
        for instance in frame.instances
    )
    sio.save_slp(labels, str(path), verbose=False, save_embedding_vectors=vectors)


def _save_h5(labels: sio.Labels, path: Path, final: Path) -> None:
    layout = track_slots(labels)
    sio.save_analysis_h5(_on_tracks(labels, layout), str(path), labels_path=str(final))
    with h5py.File(path, "r+") as handle:
        if layout == "untracked":
            # SLEAP's analysis file of untracked poses: one slot and no track names,
            # which sleap-io reads back untracked.
            del handle["track_names"]
            handle.create_dataset("track_names", data=np.zeros(0, "S1"))
        # sleap-io stores the provenance itself; the file must say so, whatever it does.
        if "provenance" in handle:
            del handle["provenance"]
        handle["provenance"] = _json(labels.provenance)


def _save_nwb(labels: sio.Labels, path: Path, final: Path) -> None:
    # pynwb and ndx-pose take seconds to import: only a run writing NWB pays for it.
    from sleap_live.stream.outputs.nwb import write_nwb_poses

    write_nwb_poses(
        _on_tracks(_as_predictions(labels), track_slots(labels)),
        path,
        notes=_json(labels.provenance),
        software_version=str(labels.provenance.get("sleap_live_version")),
    )


def _save_csv(labels: sio.Labels, path: Path, final: Path) -> None:
    skeleton = labels.skeletons[0]
    nodes = [node.name for node in skeleton.nodes]
    header = [*CSV_COLUMNS, *(f"{node}.{field}" for node in nodes for field in ("x", "y", "score"))]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for frame in sorted(labels.labeled_frames, key=lambda frame: frame.frame_idx):
            if not frame.instances:
                writer.writerow([frame.frame_idx] + [""] * (len(header) - 1))
            for number, instance in enumerate(frame.instances):
                points = points_with_scores(instance)
                row: list[Any] = [
                    frame.frame_idx,
                    number,
                    instance.track.name if instance.track is not None else "",
                    _number(getattr(instance, "score", math.nan)),
                ]
                for x, y, score in points:
                    row.extend((_number(x), _number(y), _number(score)))
                writer.writerow(row)
        handle.flush()
        os.fsync(handle.fileno())
    # Created here, in the private folder, never through a link.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    sidecar = path.with_name(sidecars(final)[0].name)
    with os.fdopen(os.open(sidecar, flags, 0o666), "w", encoding="utf-8") as handle:
        handle.write(_json(labels.provenance) + "\n")


@attrs.frozen
class PoseFormat:
    """A pose file format: its saver and what saving needs (a row of `FORMATS`).

    Attributes:
        save: writes the labels to the staged file (see `save_labels`).
        modules: what the save imports on its first use, loaded by `prepare_saver`.
        sidecar: the suffix of a file written beside it (``NAME.csv.provenance.json``).
        slots: its layout holds every instance under a track (see `track_slots`).
    """

    save: Callable[[sio.Labels, Path, Path], None]
    modules: tuple[str, ...] = ()
    sidecar: str | None = None
    slots: bool = False


FORMATS: Mapping[str, PoseFormat] = {
    ".slp": PoseFormat(
        _save_slp, ("sleap_io.io.main", "sleap_io.io.slp", "sleap_io.model.centroid")
    ),
    ".h5": PoseFormat(
        _save_h5,
        ("sleap_io.io.main", "sleap_io.io.analysis_h5", "sleap_io.model.matching"),
        slots=True,
    ),
    ".nwb": PoseFormat(_save_nwb, ("sleap_live.stream.outputs.nwb",), slots=True),
    ".csv": PoseFormat(_save_csv, sidecar=PROVENANCE_SIDECAR_SUFFIX),
}
SUFFIXES = tuple(FORMATS)


# How the .h5 and .nwb hold instances without a track (see the module's notes):
# "tracks" (every instance has one), "untracked" (one slot, no track names: at most
# one instance a frame, none tracked), "by_place" (a slot per place in the frame).
TrackSlots = Literal["tracks", "untracked", "by_place"]

# The .nwb series of a run's untracked poses where one slot holds them (sleap-io's name).
UNTRACKED_TRACK = "untracked"


def slot_layout(most_untracked: int, any_tracked: bool) -> TrackSlots:
    """How the .h5 and .nwb hold poses whose frames have at most `most_untracked`
    instances without a track, `any_tracked`: whether any instance has one."""
    if most_untracked == 0:
        return "tracks"
    if most_untracked == 1 and not any_tracked:
        return "untracked"
    return "by_place"


def track_slots(labels: sio.Labels) -> TrackSlots:
    """How the .h5 and .nwb hold the instances of `labels` that have no track."""
    most_untracked = max(
        (sum(instance.track is None for instance in frame) for frame in labels), default=0
    )
    any_tracked = any(instance.track is not None for frame in labels for instance in frame)
    return slot_layout(most_untracked, any_tracked)


def _on_tracks(labels: sio.Labels, layout: TrackSlots) -> sio.Labels:
    """`labels` with every untracked instance on a track: `UNTRACKED_TRACK` for the
    "untracked" layout, else one named by its place in the frame (``instance_N``)."""
    if layout == "tracks":
        return labels
    slots: dict[int, sio.Track] = {}
    frames = []
    for frame in labels.labeled_frames:
        instances = []
        for number, instance in enumerate(frame.instances):
            if instance.track is not None:
                instances.append(instance)
                continue
            name = UNTRACKED_TRACK if layout == "untracked" else f"instance_{number}"
            # A copy on the slot's track, of its own kind (a hand-labelled instance
            # of `sleap-live track`'s input stays one); the caller's labels keep theirs.
            placed = copy.copy(instance)
            placed.track = slots.setdefault(number, sio.Track(name=name))
            instances.append(placed)
        frames.append(
            sio.LabeledFrame(video=frame.video, frame_idx=frame.frame_idx, instances=instances)
        )
    return sio.Labels(
        labeled_frames=frames,
        videos=labels.videos,
        skeletons=labels.skeletons,
        tracks=[*labels.tracks, *slots.values()],
        provenance=dict(labels.provenance),
    )


def points_with_scores(instance: sio.Instance) -> np.ndarray:
    """(nodes, 3): each point's x, y and score; a hand-labelled instance's scores are NaN."""
    if isinstance(instance, sio.PredictedInstance):
        return instance.numpy(scores=True)
    points = instance.numpy()
    return np.column_stack([points, np.full(len(points), np.nan)])


def _as_predictions(labels: sio.Labels) -> sio.Labels:
    """`labels` with every hand-labelled instance (`sleap-live track` keeps them) as a
    prediction without scores: NWB's pose estimates all have confidences."""
    if all(isinstance(instance, sio.PredictedInstance) for frame in labels for instance in frame):
        return labels
    frames = [
        sio.LabeledFrame(
            video=frame.video,
            frame_idx=frame.frame_idx,
            instances=[
                instance
                if isinstance(instance, sio.PredictedInstance)
                else sio.PredictedInstance.from_numpy(
                    instance.numpy(),
                    skeleton=instance.skeleton,
                    point_scores=points_with_scores(instance)[:, 2],
                    score=math.nan,
                    track=instance.track,
                )
                for instance in frame.instances
            ],
        )
        for frame in labels.labeled_frames
    ]
    return sio.Labels(
        labeled_frames=frames,
        videos=labels.videos,
        skeletons=labels.skeletons,
        tracks=labels.tracks,
        provenance=dict(labels.provenance),
    )


def _number(value: float) -> str:
    """A float32 value as the shortest text that reads back to it; empty for NaN."""
    value = float(value)
    return "" if math.isnan(value) else str(np.float32(value))


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True, default=str)
