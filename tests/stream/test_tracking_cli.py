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


@pytest.mark.parametrize(
    ("options", "case"),
    [([], "defaults"), (["--candidates-method", "local_queues"], "local_queues")],
)
def test_track_gives_saved_poses_sleap_nns_tracks(tmp_path, capsys, options, case):
    require(POSES)
    output = tmp_path / "tracked.slp"
    assert cli.main(["track", str(POSES), "-o", str(output), *options]) == 0
    assert "on 14 tracks" in capsys.readouterr().err or case != "defaults"
    ours = _track_ids(sio.load_slp(str(output)))
    theirs = _golden()[f"tracks__bottomup__{case}"]
    assert ours.shape[0] == theirs.shape[0]
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
