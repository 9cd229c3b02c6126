"""Forward prediction: constant-velocity Kalman filters per tracked animal and node, on
tiny synthetic poses and on the bundled clip's sleap-nn poses (tests/data/goldens)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.experiment import Experiment, InRegion, Rectangle, Rule
from sleap_live.stream.experiment.closed_loop import ClosedLoop
from sleap_live.stream.experiment.predict import ForwardPredictor
from sleap_live.stream.ring import RingBuffer
from sleap_live.stream.types import PoseRecord

GOLDENS = Path(__file__).parents[1] / "data" / "goldens"


def poses(points, ids) -> FramePoses:
    points = np.asarray(points, np.float32)
    n, nodes = points.shape[:2]
    return FramePoses(
        points, np.ones((n, nodes), np.float32), np.ones(n, np.float32), np.asarray(ids, np.int32)
    )


def test_a_steady_motion_is_predicted_ahead():
    predictor = ForwardPredictor()
    for i in range(30):  # 60 px/s along x, 30 fps
        predictor.update(poses([[[2.0 * i, 5.0]]], [-1]), i / 30)
    ahead = predictor.predict(poses([[[58.0, 5.0]]], [-1]), 29 / 30 + 0.1)
    np.testing.assert_allclose(ahead.points[0, 0], [64.0, 5.0], atol=0.05)
    error = predictor.error()
    assert error.points == 29 and error.predicted < 0.2 * error.unpredicted


def test_animals_are_followed_by_identity_and_lost_nodes_carried_on():
    predictor = ForwardPredictor()
    for i in range(10):
        # Track 7 moves right, track 3 stays; their rows swap each frame.
        frame = [[[10.0 * i, 0.0], [0.0, 0.0]], [[50.0, 50.0], [60.0, 50.0]]]
        ids = [7, 3]
        if i % 2:
            frame, ids = frame[::-1], ids[::-1]
        predictor.update(poses(frame, ids), float(i))
    lost = poses([[[50.0, 50.0], [60.0, 50.0]], [[math.nan, math.nan], [0.0, 0.0]]], [3, 7])
    ahead = predictor.predict(lost, 10.0)
    np.testing.assert_allclose(ahead.points[0], [[50.0, 50.0], [60.0, 50.0]], atol=0.01)
    # Track 7's nose, not found in this frame, is where its motion takes it.
    np.testing.assert_allclose(ahead.points[1, 0], [100.0, 0.0], atol=0.5)


def test_untracked_animals_of_a_multi_animal_frame_are_left_as_they_are():
    predictor = ForwardPredictor()
    for i in range(5):
        predictor.update(poses([[[float(i), 0.0]], [[9.0, 9.0]]], [-1, -1]), float(i))
    frame = poses([[[4.0, 0.0]], [[9.0, 9.0]]], [-1, -1])
    np.testing.assert_array_equal(predictor.predict(frame, 10.0).points, frame.points)
    assert predictor.error().points == 0


def test_bad_settings_are_refused():
    for acceleration, noise in ((0.0, 1.0), (1.0, -1.0), (math.nan, 1.0)):
        with pytest.raises(ValueError, match="positive"):
            ForwardPredictor(acceleration, noise)


def test_one_frame_ahead_on_the_bundled_clip_beats_the_unpredicted_pose():
    """sleap-nn's single-instance poses of tests/data/videos/single.mkv (30 fps): the
    defaults' error one frame ahead, against the frame before's points (the figures
    of docs/closed-loop.md)."""
    golden = np.load(GOLDENS / "single_instance.npz")
    predictor = ForwardPredictor()
    for i, points in enumerate(golden["points"]):
        predictor.update(poses(points, [-1]), i / 30)
    error = predictor.error()
    assert error.predicted < 0.7 * error.unpredicted, error


def test_a_predicting_experiment_decides_on_the_predicted_pose():
    info = ModelInfo("single_instance", Skeleton(("nose",)), 1, None)
    rule = Rule("zone", InRegion("box", "nose"))
    experiment = Experiment((rule,), {"box": Rectangle(100, 0, 200, 10)}, predict=True)

    class Run:  # the parts of `PipelineRun` a closed loop reads
        ring = RingBuffer(8, 1, 1)

    onsets = {}
    for predict in (False, True):
        loop = ClosedLoop(
            experiment if predict else Experiment(experiment.rules, experiment.regions)
        )
        loop.bind(info, fps=None, recorded_video=False, lossless=True, tracked=False)
        loop.start(Run())  # type: ignore[arg-type]
        for i in range(20):  # 300 px/s towards the box; each decision 0.1 s late
            record = PoseRecord(i, i / 30, i / 30, "clip", poses([[[10.0 * i, 5.0]]], [-1]))
            loop._clock = lambda i=i: i / 30 + 0.1  # type: ignore[method-assign]
            if loop.decide(record):
                onsets[predict] = i
                break
        if predict:
            assert loop.stats().prediction is not None
    # Predicted 0.1 s (30 px) ahead, the nose reaches x = 100 three frames sooner.
    assert onsets == {False: 10, True: 7}
