"""Checks a pose file's tables before sleap-io reads it, so a crafted file is refused
in one line instead of taking the machine or giving wrong poses.

sleap-io 0.9.5 (`sleap_io/io/slp.py`, `read_labels` and `read_instances`) slices
the instance table with each frame's `instance_id_start:instance_id_end`, and the
point tables with each instance's `point_id_start:point_id_end`, as numpy does:
an end past the table is cut at its length without a word, so one frame claiming
`instance_id_end` 1e9 takes every later frame's instances as well (rc 0, more
instances than the file holds). Here each range must lie in its table (start <=
end <= rows) and the frames' ranges must follow each other without overlapping;
and no frame may hold more instances than a caller's bound. The tables are read in
blocks, so the check's memory does not grow with the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

# Rows of a table read at once.
_BLOCK_ROWS = 1 << 16


class PoseTableError(OSError):
    """A pose file's instance or point ranges leave their tables, or a frame holds
    more instances than allowed; the message names the file, the row and the field."""


def check_slp_tables(path: Path, max_instances_per_frame: int | None = None) -> None:
    """Refuses a `.slp` file whose frames or instances point outside their tables,
    or one frame of which holds more than `max_instances_per_frame` instances (None:
    any number).

    A file that is not HDF5 or lacks sleap-io's tables, or one HDF5 cannot read, is
    left for sleap-io to refuse in its caller's words.

    Raises:
        PoseTableError: one line naming `path`, the table, the row and the field.
    """
    try:
        with h5py.File(path, "r") as file:
            frames = _table(file, "frames", ("frame_idx", "instance_id_start", "instance_id_end"))
            instances = _table(
                file, "instances", ("instance_type", "point_id_start", "point_id_end")
            )
            if frames is None or instances is None:
                return
            _check_frames(path, frames, instances.shape[0], max_instances_per_frame)
            points = _rows(file, "points"), _rows(file, "pred_points")
            _check_instances(path, instances, points)
    except PoseTableError:
        raise
    except OSError:
        return


def check_analysis_h5(path: Path, max_tracks: int) -> None:
    """Refuses a SLEAP analysis HDF5 file whose `tracks` array holds more than
    `max_tracks` tracks (instances a frame), before sleap-io reads the whole array.

    The track axis is found as sleap-io 0.9.5 finds it (`sleap_io/io/analysis_h5.py`,
    `read_labels`): the dataset's `dims` attribute, else the layout its `transpose`
    attribute names (MATLAB's, track first, by default). A file that is not HDF5 or
    has no 4-d `tracks` is left for sleap-io to refuse in its caller's words.

    Raises:
        PoseTableError: one line naming `path`, the array and its track count.
    """
    try:
        with h5py.File(path, "r") as file:
            tracks = file.get("tracks")
            if not isinstance(tracks, h5py.Dataset) or tracks.ndim != 4:
                return
            axis = _track_axis(file, tracks)
            if axis is not None and tracks.shape[axis] > max_tracks:
                raise PoseTableError(
                    f"{path}: its tracks array holds {tracks.shape[axis]} tracks, more than "
                    f"the {max_tracks} instances a frame that are tracked"
                )
    except PoseTableError:
        raise
    except OSError:
        return


def _track_axis(file: h5py.File, tracks: h5py.Dataset) -> int | None:
    """The axis of `tracks` that counts tracks, or None where the file does not say."""
    dims = tracks.attrs.get("dims")
    if dims is not None:
        try:
            names = json.loads(dims)
        except (TypeError, ValueError):
            return None
        return names.index("track") if isinstance(names, list) and "track" in names else None
    # sleap-io's "matlab" layout (track, xy, node, frame), or the old untransposed one
    # (frame, node, xy, track).
    return 0 if file.attrs.get("transpose", True) else 3


def _table(file: h5py.File, name: str, fields: tuple[str, ...]) -> h5py.Dataset | None:
    table = file.get(name)
    if not isinstance(table, h5py.Dataset) or table.ndim != 1:
        return None
    names = table.dtype.names or ()
    return table if all(field in names for field in fields) else None


def _rows(file: h5py.File, name: str) -> int:
    table = file.get(name)
    return table.shape[0] if isinstance(table, h5py.Dataset) and table.ndim == 1 else 0


def _blocks(table: h5py.Dataset, fields: tuple[str, ...]) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, the block's fields) for each block of `table`'s rows."""
    for first in range(0, table.shape[0], _BLOCK_ROWS):
        yield first, table.fields(list(fields))[first : first + _BLOCK_ROWS]


def _check_frames(path: Path, frames: h5py.Dataset, n_instances: int, most: int | None) -> None:
    previous_end = np.uint64(0)
    for first, block in _blocks(frames, ("frame_idx", "instance_id_start", "instance_id_end")):
        # Compared as the file's unsigned integers: no cast can wrap a crafted value.
        starts = block["instance_id_start"].astype(np.uint64)
        ends = block["instance_id_end"].astype(np.uint64)
        previous = np.concatenate(([previous_end], ends[:-1])).astype(np.uint64)
        placed = (previous <= starts) & (starts <= ends) & (ends <= np.uint64(n_instances))
        if not placed.all():
            row = int(np.flatnonzero(~placed)[0])
            raise PoseTableError(
                f"{path}: frames row {first + row}: instance_id_start {starts[row]} to "
                f"instance_id_end {ends[row]} do not lie in the instance table ({n_instances} "
                f"rows) after the previous frame's end ({previous[row]})"
            )
        counts = ends - starts
        if most is not None and (counts > np.uint64(most)).any():
            row = int(np.flatnonzero(counts > np.uint64(most))[0])
            raise PoseTableError(
                f"{path}: frames row {first + row} (frame {block['frame_idx'][row]}) holds "
                f"{counts[row]} instances, more than the {most} tracked per frame"
            )
        if len(ends):
            previous_end = ends[-1]


def _check_instances(path: Path, instances: h5py.Dataset, points: tuple[int, int]) -> None:
    for first, block in _blocks(instances, ("instance_type", "point_id_start", "point_id_end")):
        starts = block["point_id_start"].astype(np.uint64)
        ends = block["point_id_end"].astype(np.uint64)
        # sleap-io: type 0 is a user instance (`points`), any other a predicted one.
        user = block["instance_type"] == 0
        rows = np.where(user, np.uint64(points[0]), np.uint64(points[1])).astype(np.uint64)
        placed = (starts <= ends) & (ends <= rows)
        if not placed.all():
            row = int(np.flatnonzero(~placed)[0])
            table = "points" if user[row] else "pred_points"
            raise PoseTableError(
                f"{path}: instances row {first + row}: point_id_start {starts[row]} to "
                f"point_id_end {ends[row]} do not lie in its {table} table ({rows[row]} rows)"
            )
