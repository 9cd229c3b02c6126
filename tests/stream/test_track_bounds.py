"""`sleap-live track` on crafted .slp files (issue 36, item 4): instance ranges that
leave their tables and frames of too many instances are refused in one line before
sleap-io or the tracker allocates for them; the tracker's scoring memory no longer
grows with the square of a frame's instances.

The files are written by sleap-io in the test, then edited with h5py where a
crafted offset is the point.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.stream.tracking import TrackingSettings, classic
from sleap_live.stream.tracking.files import MAX_INSTANCES_PER_FRAME

SKELETON = sio.Skeleton(["A", "B"], edges=[("A", "B")])


def _poses(path: Path, per_frame: list[int], seed: int = 0) -> Path:
    """A .slp file of random 2-node predictions, `per_frame[i]` in frame i."""
    rng = np.random.default_rng(seed)
    video = sio.Video(filename="absent.mp4", open_backend=False)
    frames = [
        sio.LabeledFrame(
            video=video,
            frame_idx=index,
            instances=[
                sio.PredictedInstance.from_numpy(
                    rng.uniform(0, 1000, (2, 2)), skeleton=SKELETON, point_scores=np.ones(2)
                )
                for _ in range(count)
            ],
        )
        for index, count in enumerate(per_frame)
    ]
    sio.save_slp(sio.Labels(labeled_frames=frames, videos=[video], skeletons=[SKELETON]), path)
    return path


def _set(path: Path, table: str, row: int, field: str, value: int) -> None:
    with h5py.File(path, "r+") as file:
        rows = file[table][:]
        rows[field][row] = value
        file[table][...] = rows


def _refused(tmp_path: Path, poses: Path, capsys) -> str:
    output = tmp_path / "tracked.slp"
    capsys.readouterr()
    assert cli.main(["track", str(poses), "-o", str(output)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert not output.exists()
    return lines[0]


def test_a_frame_of_more_instances_than_the_bound_is_refused(tmp_path, capsys):
    # 3 frames x 5,000 took 4.9 GB then a traceback; 2 x 30,000 asked 67 GiB.
    poses = _poses(tmp_path / "crowded.slp", [2, MAX_INSTANCES_PER_FRAME + 1])
    line = _refused(tmp_path, poses, capsys)
    assert line == (
        f"sleap-live: error: {poses}: frames row 1 (frame 1) holds "
        f"{MAX_INSTANCES_PER_FRAME + 1} instances, more than the {MAX_INSTANCES_PER_FRAME} "
        "tracked per frame"
    )


@pytest.mark.parametrize(
    ("table", "row", "field", "value", "said"),
    [
        # rc 0 with every later frame's instances in frame 0 before.
        (
            "frames",
            0,
            "instance_id_end",
            10**9,
            "frames row 0: instance_id_start 0 to "
            "instance_id_end 1000000000 do not lie in the instance table (300 rows)",
        ),
        (
            "frames",
            5,
            "instance_id_start",
            0,
            "frames row 5: instance_id_start 0 to "
            "instance_id_end 12 do not lie in the instance table (300 rows) after the previous "
            "frame's end (10)",
        ),
        (
            "frames",
            7,
            "instance_id_start",
            2**64 - 1,
            "frames row 7: instance_id_start 18446744073709551615",
        ),
        (
            "instances",
            3,
            "point_id_end",
            10**9,
            "instances row 3: point_id_start 6 to "
            "point_id_end 1000000000 do not lie in its pred_points table (600 rows)",
        ),
    ],
)
def test_ranges_outside_their_tables_are_refused(tmp_path, capsys, table, row, field, value, said):
    poses = _poses(tmp_path / "poses.slp", [2] * 150)
    _set(poses, table, row, field, value)
    assert said in _refused(tmp_path, poses, capsys)


def test_the_bound_is_checked_for_every_pose_file_before_tracking():
    from sleap_live.stream.tracking.files import retrack_labels

    video = sio.Video(filename="absent.mp4", open_backend=False)
    instance = sio.PredictedInstance.from_numpy(np.zeros((2, 2)), skeleton=SKELETON)
    labels = sio.Labels(
        labeled_frames=[
            sio.LabeledFrame(video=video, frame_idx=0, instances=[instance]),
            sio.LabeledFrame(
                video=video, frame_idx=1, instances=[instance] * (MAX_INSTANCES_PER_FRAME + 1)
            ),
        ],
        videos=[video],
        skeletons=[SKELETON],
    )
    with pytest.raises(ValueError, match=f"frame 1 holds {MAX_INSTANCES_PER_FRAME + 1}"):
        retrack_labels(labels, TrackingSettings(), progress=lambda done, total: None)


def _track_two_frames(points: np.ndarray, traced: bool) -> tuple[classic.Tracked, int]:
    """The second frame's tracks and, if `traced`, the tracker's peak traced memory
    there (numpy's allocations are traced)."""
    tracker = classic.ClassicTracker(TrackingSettings())
    tracker.track(points[0])
    if not traced:
        return tracker.track(points[1]), 0
    tracemalloc.start()
    try:
        tracked = tracker.track(points[1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return tracked, peak


def test_scoring_memory_grows_with_the_instances_not_their_square(monkeypatch):
    n = 400
    points = np.random.default_rng(1).uniform(0, 1000, (2, n, 2, 2))
    whole, _ = _track_two_frames(points, traced=False)  # and imports the matcher
    # Blocks of 2^14 elements: 10 new instances against 400 tracks x 1 frame x 2 nodes.
    monkeypatch.setattr(classic, "_SCORE_ELEMENTS", 1 << 14, raising=False)
    blocked, peak = _track_two_frames(points, traced=True)
    np.testing.assert_array_equal(blocked.track_ids, whole.track_ids)
    np.testing.assert_array_equal(blocked.scores, whole.scores)
    # 1.6 MiB measured: the (n, tracks) cost matrices and a block's pair arrays; the
    # whole (n, tracks, window, nodes, 2) arrays took 22 MiB, growing as n squared.
    assert peak < 4 * 2**20, peak


@pytest.mark.parametrize("transpose", [True, False])
def test_an_analysis_file_of_too_many_tracks_is_refused_before_it_is_read(
    tmp_path, capsys, transpose
):
    # 30,000 tracks of 100,000 frames claimed in a few kilobytes (a gzip dataset of
    # its fill value): sleap-io reads the whole array, 96 GB, before any check.
    labels = sio.load_slp(str(_poses(tmp_path / "few.slp", [2, 2])))
    poses = tmp_path / "crowded.h5"
    sio.save_analysis_h5(labels, str(poses))
    with h5py.File(poses, "r+") as file:
        del file["tracks"]
        file.attrs["transpose"] = transpose
        # sleap-io's layouts: track first (its default, MATLAB's), or last.
        shape = (30_000, 2, 2, 100_000) if transpose else (100_000, 2, 2, 30_000)
        file.create_dataset("tracks", shape=shape, dtype="f8", chunks=True, compression="gzip")
    line = _refused(tmp_path, poses, capsys)
    assert line == (
        f"sleap-live: error: {poses}: its tracks array holds 30000 tracks, more than the "
        f"{MAX_INSTANCES_PER_FRAME} instances a frame that are tracked"
    )
