"""`sleap-live track` and the tracking options of `run`: sleap-nn's names, its tracks."""

from __future__ import annotations

import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from tests.committed import DATA, require
from tests.stream.test_tracking_parity import _golden, agreement

POSES = DATA / "goldens" / "bottomup.slp"


def _track_ids(labels: sio.Labels) -> np.ndarray:
    """Track number per (frame, instance) in frame order; -2 for padding."""
    frames = sorted(labels.labeled_frames, key=lambda frame: frame.frame_idx)
    width = max(len(frame.instances) for frame in frames)
    ids = np.full((len(frames), width), -2, np.int32)
    for row, frame in enumerate(frames):
        for column, instance in enumerate(frame.instances):
            track = instance.track
            ids[row, column] = -1 if track is None else int(track.name.removeprefix("track_"))
    return ids


@pytest.mark.parametrize("name", ["topdown", "bottomup"])
def test_track_gives_sleap_nn_predicts_tracks(tmp_path, capsys, name):
    # goldens/NAME.slp: `sleap-nn predict` of the test clip; predict_tracks__NAME: the
    # track ids `sleap-nn predict --tracking` gave the same predictions.
    poses = DATA / "goldens" / f"{name}.slp"
    require(poses)
    output = tmp_path / "tracked.slp"
    assert cli.main(["track", str(poses), "-o", str(output)]) == 0
    assert "tracks" in capsys.readouterr().err
    ours = _track_ids(sio.load_slp(str(output)))
    theirs = _golden()[f"predict_tracks__{name}"]
    assert ours.shape == theirs.shape
    assert agreement(ours, theirs) == 1.0


def test_track_takes_sleap_nns_options(tmp_path):
    require(POSES)
    output = tmp_path / "tracked.slp"
    assert cli.main(["track", str(POSES), "-o", str(output), "--max-tracks", "2"]) == 0
    ours = _track_ids(sio.load_slp(str(output)))
    theirs = _golden()["tracks__bottomup__max_tracks"]
    width = min(ours.shape[1], theirs.shape[1])
    assert agreement(ours[:, :width], theirs[:, :width]) == 1.0


def test_track_never_writes_over_its_input(tmp_path, capsys):
    require(POSES)
    poses = tmp_path / "poses.slp"
    poses.write_bytes(POSES.read_bytes())
    before = poses.read_bytes()
    assert cli.main(["track", str(poses), "-o", str(poses)]) == 2
    assert "is the input" in capsys.readouterr().err
    assert poses.read_bytes() == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--max-tracks", "2"], "--max-tracks only applies with --tracking"),
        (["--tracking", "--use-kalman"], "--use-kalman is not built into sleap-live"),
        (["--tracking", "--tracker", "bytetrack"], "tracker 'bytetrack' is not built"),
        (["--tracking", "--features", "centroids"], "oks compares keypoints"),
    ],
)
def test_run_refuses_tracking_options_it_cannot_honour(tmp_path, capsys, arguments, message):
    video = tmp_path / "clip.mp4"
    video.touch()
    status = cli.main(["run", str(video), "-m", str(tmp_path), *arguments])
    assert status == 2
    assert message in capsys.readouterr().err


def test_track_refuses_what_is_no_pose_file_and_a_missing_folder(tmp_path, capsys):
    video = tmp_path / "clip.mp4"
    video.touch()
    assert cli.main(["track", str(video), "-o", str(tmp_path / "out.slp")]) == 2
    assert "cannot read poses from a .mp4 file" in capsys.readouterr().err
    junk = tmp_path / "junk.slp"
    junk.write_text("not a pose file")
    assert cli.main(["track", str(junk), "-o", str(tmp_path / "out.slp")]) == 1
    assert f"{junk}: cannot be read as a pose file" in capsys.readouterr().err
    require(POSES)
    missing = tmp_path / "missing" / "out.slp"
    assert cli.main(["track", str(POSES), "-o", str(missing)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not missing.parent.exists()


def test_track_writes_kept_hand_labelled_instances_to_every_format(tmp_path):
    # Before: the .h5, .nwb and .csv failed on the hand-labelled instance (it has no
    # scores), which `track` keeps, untracked, beside the tracked predictions.
    skeleton = sio.Skeleton(["head", "tail"], name="two")
    video = sio.Video(filename="clip.mp4", open_backend=False)
    video.backend_metadata["shape"] = (3, 100, 100, 1)
    frames = [
        sio.LabeledFrame(
            video=video,
            frame_idx=frame,
            instances=[
                sio.Instance.from_numpy(
                    np.array([[10.0, 10], [20, 20]]) + frame, skeleton=skeleton
                ),
                sio.PredictedInstance.from_numpy(
                    np.array([[60.0, 60], [70, 70]]) + frame,
                    skeleton=skeleton,
                    point_scores=np.array([0.9, 0.8]),
                    score=0.7,
                ),
            ],
        )
        for frame in range(3)
    ]
    poses = tmp_path / "labelled.slp"
    sio.save_slp(sio.Labels(labeled_frames=frames, videos=[video], skeletons=[skeleton]), poses)
    for suffix in (".slp", ".h5", ".nwb", ".csv"):
        output = tmp_path / f"tracked{suffix}"
        assert cli.main(["track", str(poses), "-o", str(output)]) == 0, suffix
        if suffix == ".csv":
            rows = output.read_text().splitlines()[1:]
            assert [row.split(",")[2] for row in rows] == ["", "track_0"] * 3
            continue
        labels = sio.load_file(str(output))
        heads = sorted(
            (frame.frame_idx, float(instance.numpy()[0, 0]))
            for frame in labels
            for instance in frame
        )
        assert heads == [(0, 10.0), (0, 60.0), (1, 11.0), (1, 61.0), (2, 12.0), (2, 62.0)], suffix
