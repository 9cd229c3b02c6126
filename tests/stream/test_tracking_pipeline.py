"""Tracking in the pipeline: track ids in records, stats and every pose file format."""

from __future__ import annotations

import csv
from typing import Any

import attrs
import numpy as np
import pytest
import sleap_io as sio
from pynwb import NWBHDF5IO

from sleap_live.engines.types import FramePoses, Skeleton
from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.tracking import ClassicTracker, TrackingSettings
from sleap_live.stream.types import PoseRecord
from tests.stream.test_tracking_parity import _golden

SKELETON = Skeleton(node_names=tuple(f"n{i}" for i in range(5)), name="chain5")
N_FRAMES = 120


def crossing() -> tuple[np.ndarray, np.ndarray]:
    golden = _golden()
    return golden["points__crossing"][:N_FRAMES], golden["counts__crossing"][:N_FRAMES]


def poses_of(points: np.ndarray, identities: np.ndarray | None = None) -> FramePoses:
    n = points.shape[0]
    return FramePoses(
        points=points.astype(np.float32),
        point_scores=np.where(np.isnan(points[..., 0]), np.nan, 0.9).astype(np.float32),
        instance_scores=np.full(n, 0.8, np.float32),
        identities=np.full(n, -1, np.int32) if identities is None else identities,
    )


def crossing_runner(fakes: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """A fake top-down runner whose poses on each frame are the `crossing` animals of
    that frame, with their points and counts."""
    points, counts = crossing()

    class CrossingRunner(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            super().run(frames)
            return [
                poses_of(points[i, : counts[i]])
                for i in (fakes.index_of(image) for image in frames)
            ]

    info = attrs.evolve(fakes.INFO, model_type="topdown", skeleton=SKELETON, class_names=())
    return CrossingRunner(info=info), points, counts


def test_records_carry_the_trackers_ids_and_stats_its_time(fakes, tmp_path):
    runner, points, counts = crossing_runner(fakes)
    output = tmp_path / "tracked.slp"
    pipeline = Pipeline(
        fakes.FakeSource(N_FRAMES),
        runner,
        tracking=TrackingSettings(),
        outputs=OutputOptions(output=output),
    )
    records = list(pipeline)

    expected = ClassicTracker(TrackingSettings())
    for record in records:
        frame = record.frame_index
        want = expected.track(points[frame, : counts[frame]]).track_ids
        np.testing.assert_array_equal(record.poses.identities, want, err_msg=f"frame {frame}")
    stats = pipeline.stats
    assert stats.tracks == 2
    assert stats.tracking_p50 is not None and stats.tracking_p99 is not None
    labels = sio.load_slp(str(output))
    assert sorted(track.name for track in labels.tracks) == ["track_0", "track_1"]
    assert labels.provenance["settings"]["tracking"]["tracker"] == "classic"


def test_a_multi_class_model_is_not_tracked_again(fakes):
    with pytest.raises(ValueError, match="identities are its tracks"):
        Pipeline(fakes.FakeSource(3), fakes.FakeRunner(), tracking=TrackingSettings())


def _write(path, frames: list[FramePoses]) -> None:
    with SlpWriter(path, SKELETON, video="camera", frame_shape=(400, 400, 1)) as writer:
        for index, poses in enumerate(frames):
            writer.write(PoseRecord(index, 0.0, 0.01, "camera", poses))


def _tracks_by_format(tmp_path, frames: list[FramePoses]) -> dict[str, set[tuple[int, int, str]]]:
    """(frame, rounded nose x, track name) of every instance, as each format reads back."""
    read: dict[str, set[tuple[int, int, str]]] = {}
    for suffix in (".slp", ".h5"):
        path = tmp_path / f"poses{suffix}"
        _write(path, frames)
        labels = sio.load_file(str(path))
        read[suffix] = {
            (frame.frame_idx, round(float(instance.numpy()[0, 0])), instance.track.name)
            if instance.track is not None
            else (frame.frame_idx, round(float(instance.numpy()[0, 0])), "")
            for frame in labels.labeled_frames
            for instance in frame.instances
        }
    path = tmp_path / "poses.nwb"
    _write(path, frames)
    # sleap-io reads NWB tracks back without their names: they are in the containers'
    # names (``track=NAME``); frames from the timestamps (a run without fps: 1 fps).
    read[".nwb"] = set()
    with NWBHDF5IO(str(path), "r") as io:
        for module_name, module in io.read().processing.items():
            if not module_name.startswith("SLEAP_VIDEO"):
                continue
            for name, estimation in module.data_interfaces.items():
                nose = estimation.pose_estimation_series["n0"]
                read[".nwb"].update(
                    (round(float(t)), round(float(x)), name.removeprefix("track="))
                    for t, (x, _) in zip(nose.timestamps[:], nose.data[:], strict=True)
                )
    path = tmp_path / "poses.csv"
    _write(path, frames)
    with open(path, newline="") as handle:
        read[".csv"] = {
            (int(row["frame_index"]), round(float(row["n0.x"])), row["track"])
            for row in csv.DictReader(handle)
        }
    return read


def _two_animals() -> list[np.ndarray]:
    """Two diagonal five-node animals walking towards each other, listed in random order."""
    rng = np.random.default_rng(3)
    return [
        np.stack(
            [
                np.linspace([100.0 + 5 * t, 50.0], [130.0 + 5 * t, 90.0], 5),
                np.linspace([300.0 - 5 * t, 250.0], [270.0 - 5 * t, 290.0], 5),
            ]
        )[rng.permutation(2)]
        for t in range(6)
    ]


def test_every_format_of_a_tracked_run_reads_back_the_same_tracks(tmp_path):
    tracker = ClassicTracker(TrackingSettings())
    frames = [poses_of(p, tracker.track(p).track_ids) for p in _two_animals()]
    read = _tracks_by_format(tmp_path, frames)
    assert read[".slp"] == read[".h5"] == read[".nwb"] == read[".csv"]
    assert {name for _, _, name in read[".slp"]} == {"track_0", "track_1"}


def _read_untracked_run(tmp_path, frames: list[FramePoses]) -> dict[str, dict[str, Any]]:
    """Each format of one run read back as a user would (sleap-io; the csv module):
    its tracks, and every instance as (frame, rounded nose x) -> (place in its frame,
    track name or "")."""
    read: dict[str, dict[str, Any]] = {}
    for suffix in (".slp", ".h5", ".nwb"):
        path = tmp_path / f"poses{suffix}"
        _write(path, frames)
        labels = sio.load_file(str(path))
        read[suffix] = {
            "tracks": [track.name for track in labels.tracks],
            "instances": {
                (frame.frame_idx, round(float(instance.numpy()[0, 0]))): (
                    place,
                    "" if instance.track is None else instance.track.name,
                )
                for frame in labels.labeled_frames
                for place, instance in enumerate(frame.instances)
            },
        }
    path = tmp_path / "poses.csv"
    _write(path, frames)
    with open(path, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["instance"]]
    read[".csv"] = {
        "tracks": sorted({row["track"] for row in rows} - {""}),
        "instances": {
            (int(row["frame_index"]), round(float(row["n0.x"]))): (
                int(row["instance"]),
                row["track"],
            )
            for row in rows
        },
    }
    return read


def test_an_untracked_run_with_one_animal_a_frame_reads_back_untracked_everywhere(tmp_path):
    # Before: the .h5 read back a track, instance_0, that the .slp, .nwb and .csv
    # did not have. Now it has SLEAP's untracked layout: one slot, no track names.
    one_animal = [poses_of(points[:1]) for points in _two_animals()]
    one_animal[2] = poses_of(np.zeros((0, 5, 2)))  # a frame with nothing found
    read = _read_untracked_run(tmp_path, one_animal)
    assert all(got["tracks"] == [] for got in read.values())
    assert read[".slp"]["instances"] == read[".h5"]["instances"] == read[".csv"]["instances"]
    # sleap-io numbers NWB frames by their rank in time: the empty frame is not there.
    ranked = dict(zip(sorted(read[".slp"]["instances"]), range(5), strict=True))
    assert {
        (ranked[key], key[1]): value for key, value in read[".slp"]["instances"].items()
    } == read[".nwb"]["instances"]
    assert set(read[".slp"]["instances"].values()) == {(0, "")}


def test_an_untracked_multi_animal_run_keeps_every_instance_in_its_place_everywhere(tmp_path):
    read = _read_untracked_run(tmp_path, [poses_of(points) for points in _two_animals()])
    # No identity where a format can say so: the .slp, the .csv and sleap-io's NWB reader.
    assert read[".slp"] == read[".nwb"] == read[".csv"]
    assert read[".slp"]["tracks"] == []
    assert {track for _, track in read[".slp"]["instances"].values()} == {""}
    # The .h5 has a slot per place in the frame, which sleap-io reads as a track
    # named after the place: the same instances, each in the same place.
    assert read[".h5"]["tracks"] == ["instance_0", "instance_1"]
    assert read[".h5"]["instances"] == {
        key: (place, f"instance_{place}") for key, (place, _) in read[".csv"]["instances"].items()
    }


def test_each_source_is_tracked_on_its_own():
    from sleap_live.stream.tracking.live import PoseTracking

    points, counts = crossing()
    tracking = PoseTracking(TrackingSettings())
    alone = ClassicTracker(TrackingSettings())
    for frame in range(20):
        poses = poses_of(points[frame, : counts[frame]])
        left = tracking.track(poses, "camera-0", frame)
        tracking.track(poses_of(points[frame, : counts[frame]][::-1] + 500), "camera-1", frame)
        want = alone.track(points[frame, : counts[frame]]).track_ids
        np.testing.assert_array_equal(left.poses.identities, want)
    assert tracking.n_tracks == 4


@pytest.mark.parametrize(
    ("suffix", "animals", "tracked", "noted"),
    [
        (".h5", 2, False, True),
        (".nwb", 2, False, True),
        (".slp", 2, False, False),
        (".csv", 2, False, False),
        (".h5", 1, False, False),
        (".h5", 2, True, False),
    ],
)
def test_the_run_says_when_an_h5_or_nwb_holds_untracked_animals_by_place(
    tmp_path, suffix, animals, tracked, noted
):
    # Before: "poses: demo.h5 (150 frames)", and the file read back with two tracks
    # the .slp did not have.
    tracker = ClassicTracker(TrackingSettings())
    frames = [
        poses_of(points[:animals], tracker.track(points[:animals]).track_ids if tracked else None)
        for points in _two_animals()
    ]
    path = tmp_path / f"poses{suffix}"
    with SlpWriter(path, SKELETON, video="camera", frame_shape=(400, 400, 1)) as writer:
        for index, poses in enumerate(frames):
            writer.write(PoseRecord(index, 0.0, 0.01, "camera", poses))
    line = writer.describe()
    assert line.startswith(f"poses: {path} (6 frames)")
    assert ("not by identity: --tracking gives identities" in line) == noted
