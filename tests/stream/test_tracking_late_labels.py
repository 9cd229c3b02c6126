"""A MOT track's first frames: untracked live, labelled in the saved file."""

from __future__ import annotations

import numpy as np
import sleap_io as sio

from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.tracking import TrackingSettings
from sleap_live.stream.tracking.mot import MotTracker
from sleap_live.stream.types import PoseRecord, TrackLabel
from tests.stream.test_tracking_pipeline import (
    N_FRAMES,
    SKELETON,
    crossing_runner,
    poses_of,
)


def _track_names(path) -> dict[int, list[str]]:
    labels = sio.load_slp(str(path))
    return {
        frame.frame_idx: [
            "" if instance.track is None else instance.track.name for instance in frame.instances
        ]
        for frame in labels.labeled_frames
    }


def test_the_writer_relabels_held_and_saved_frames(tmp_path):
    animal = np.linspace([10.0, 10.0], [50.0, 30.0], 5)
    nothing = np.full((5, 2), np.nan)  # an instance with no node found is left out
    path = tmp_path / "poses.slp"
    with SlpWriter(path, SKELETON, video="camera", frame_shape=(64, 64, 1), tracked=True) as writer:
        writer.write(PoseRecord(7, 0.0, 0.0, "camera", poses_of(np.stack([nothing, animal]))))
        writer.flush()  # frame 7 is in the journal now
        writer.write(PoseRecord(8, 0.0, 0.0, "camera", poses_of(animal[None] + 1)))
        late = (TrackLabel(7, 1, 3, 1.0), TrackLabel(8, 0, 3, 0.9), TrackLabel(2, 0, 1, 1.0))
        writer.write(PoseRecord(9, 0.0, 0.0, "camera", poses_of(animal[None] + 2), late))
        writer.flush()
        writer.write(PoseRecord(10, 0.0, 0.0, "camera", poses_of(animal[None] + 3)))
        writer.write(PoseRecord(11, 0.0, 0.0, "camera", poses_of(animal[None]), late[2:]))
    # Frame 7 by a record of labels in the journal, frame 8 while still held; frame 2
    # was never written.
    assert _track_names(path) == {
        7: ["track_3"],
        8: ["track_3"],
        9: [""],
        10: [""],
        11: [""],
    }


def test_a_pipeline_delivers_tentative_tracks_untracked_and_saves_them_labelled(fakes, tmp_path):
    runner, points, counts = crossing_runner(fakes)
    output = tmp_path / "tracked.slp"
    settings = TrackingSettings(tracker="sort")
    pipeline = Pipeline(
        fakes.FakeSource(N_FRAMES),
        runner,
        tracking=settings,
        outputs=OutputOptions(output=output, save_interval=0.001),
    )
    records = list(pipeline)

    tracker = MotTracker(settings.mot_parameters)
    saved = {}
    for record in records:
        frame = record.frame_index
        tracked = tracker.track_poses(poses_of(points[frame, : counts[frame]]), frame)
        np.testing.assert_array_equal(record.poses.identities, tracked.track_ids)
        saved[frame] = tracked.track_ids.tolist()
        for label in tracked.late:
            saved[label.frame_index][label.row] = label.track_id
    # SORT confirms a track at its fourth detection: the first frames are untracked
    # live, and labelled in the file.
    assert (records[0].poses.identities == -1).all()
    names = _track_names(output)
    assert names[0] == ["track_0", "track_1"] or names[0] == ["track_1", "track_0"]
    assert names == {
        frame: [f"track_{i}" if i >= 0 else "" for i in ids] for frame, ids in saved.items()
    }
