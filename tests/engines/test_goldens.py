"""sleap-live's engines against sleap-nn's own `predict` and against ground truth.

For every model type on its test video, the exported ONNX graph run in onnxruntime
finds the same number of instances as sleap-nn on every compared frame, the same
points (none found by one side only), at the same places and with the same scores
and identities up to float32 rounding; it agrees with the torch module it was
exported from just as closely. The bounds below are a few times the largest
difference measured on the fixtures, so a real change in the poses fails them.
"""

from __future__ import annotations

from functools import cache

import attrs
import numpy as np
import pytest
from tests.engines import goldens

from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.sources import FileSource

CASES, case_paths = goldens.CASES, goldens.case_paths
compare, ground_truth_errors = goldens.compare, goldens.ground_truth_errors

BATCH = 8
VERIFY_FRAMES = 5


@attrs.frozen
class Bounds:
    """Largest difference allowed anywhere: point px, point score, instance score."""

    points_px: float
    point_scores: float
    instance_scores: float


# Against sleap-nn's predict. Measured maxima over all compared frames (CPU,
# onnxruntime 1.32 vs sleap-nn 0.3.5 on torch 2.14): points 1.5e-5 to 3.1e-5 px
# (one or two float32 steps at these coordinates); point scores / instance scores
# single_instance 6.0e-7 / 1.4e-6, centroid 4.8e-7 / 4.8e-7, topdown 5.4e-7 / 4.8e-7,
# bottomup 7.2e-7 / 7.9e-6, multi_class_topdown 1.6e-6 / 2.4e-7,
# multi_class_bottomup 4.5e-6 / 1.5e-6. Bounds: about 3 to 6 times those.
SLEAP_NN_BOUNDS = {
    "single_instance": Bounds(1e-4, 2e-6, 5e-6),
    "centroid": Bounds(1e-4, 2e-6, 2e-6),
    "topdown": Bounds(1e-4, 2e-6, 2e-6),
    "bottomup": Bounds(1e-4, 3e-6, 3e-5),
    "multi_class_topdown": Bounds(1e-4, 5e-6, 1e-6),
    "multi_class_bottomup": Bounds(1e-4, 2e-5, 5e-6),
}

# The ONNX graph against the torch module it was exported from, on the first
# TORCH_FRAMES frames. Measured maxima: points 7.6e-6 to 1.5e-5 px; point scores /
# instance scores single_instance 4.8e-7 / 9.5e-7, centroid 4.8e-7 / 4.8e-7,
# topdown 4.2e-7 / 4.8e-7, bottomup 8.3e-7 / 1.3e-6, multi_class_topdown
# 1.4e-6 / 2.4e-7, multi_class_bottomup 3.9e-6 / 1.1e-6. Bounds: about 3 to 6 times.
TORCH_FRAMES = 24
TORCH_BOUNDS = {
    "single_instance": Bounds(5e-5, 2e-6, 3e-6),
    "centroid": Bounds(5e-5, 2e-6, 2e-6),
    "topdown": Bounds(5e-5, 2e-6, 2e-6),
    "bottomup": Bounds(5e-5, 3e-6, 5e-6),
    "multi_class_topdown": Bounds(5e-5, 5e-6, 1e-6),
    "multi_class_bottomup": Bounds(5e-5, 1.5e-5, 5e-6),
}

# Mean point error (px) against the synthetic ground truth, bounded at what these
# fixture models measure (tests/data/README.md, scripts/make_fixtures.py) plus about
# 20 % headroom. The tiny models are trained for minutes on CPU, so the bounds say
# "the model finds the animals", not "the model is good"; the test also requires us
# to be no less accurate than sleap-nn's own predict on the same frames.
MEAN_ERROR_BOUND_PX = {
    "single_instance": 1.5,
    "topdown": 2.6,
    "bottomup": 5.5,
    "multi_class_topdown": 4.0,
    "multi_class_bottomup": 5.0,
}


def _require(name: str) -> None:
    models, video, golden, _ = case_paths(name)
    missing = [p for p in [*models, video, golden] if not p.exists()]
    if missing:
        pytest.skip(f"fixture missing: {missing[0]}")


@cache
def _frames(video: str) -> np.ndarray:
    with FileSource(video) as source:
        return np.stack([frame.image for frame in source])


def _poses(name: str, engine: str, n_frames: int | None = None) -> tuple[list[dict], object]:
    models, video, _, _ = case_paths(name)
    frames = _frames(str(video))[:n_frames]
    # The in-memory ONNX export is verified on the video's first frames: the
    # fixture models find nothing in the exporter's synthetic frames.
    options = {"verify_frames": frames[:VERIFY_FRAMES]} if engine == "onnx" else {}
    runner = load_runner([str(m) for m in models], engine=engine, device="cpu", **options)
    try:
        out = []
        for start in range(0, len(frames), BATCH):
            for poses in runner.run(frames[start : start + BATCH]):
                out.append(
                    {
                        "points": poses.points,
                        "point_scores": poses.point_scores,
                        "instance_scores": poses.instance_scores,
                        "identities": poses.identities,
                    }
                )
        return out, runner.info
    finally:
        runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_matches_sleap_nn_predict(name):
    _require(name)
    _, _, golden_path, _ = case_paths(name)
    golden = dict(np.load(golden_path))
    ours, info = _poses(name, "onnx")
    frames = goldens.compared_frames(name, len(ours))
    result = compare(ours, golden, info.class_names, frames)
    summary = f"{name}: {result.summary()}"
    print(summary)
    bounds = SLEAP_NN_BOUNDS[name]
    assert result.count_mismatches == (), summary
    assert result.presence_mismatches == 0, summary
    assert result.point_errors.size > 0, summary
    assert result.point_errors.max() <= bounds.points_px, summary
    assert result.score_errors.max() <= bounds.point_scores, summary
    assert result.instance_score_errors.max() <= bounds.instance_scores, summary
    assert result.identity_agreement == 1.0, summary


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_onnx_graph_agrees_with_torch_module(name):
    _require(name)
    torch_poses, _ = _poses(name, "torch", n_frames=TORCH_FRAMES)
    onnx_poses, _ = _poses(name, "onnx", n_frames=TORCH_FRAMES)
    bounds = TORCH_BOUNDS[name]
    for i, (t, o) in enumerate(zip(torch_poses, onnx_poses, strict=True)):
        frame = f"{name} frame {i}"
        assert len(o["points"]) == len(t["points"]), frame
        # equal_nan also requires the same points to be missing on both sides.
        for key, atol in (
            ("points", bounds.points_px),
            ("point_scores", bounds.point_scores),
            ("instance_scores", bounds.instance_scores),
        ):
            np.testing.assert_allclose(
                o[key], t[key], rtol=0, atol=atol, equal_nan=True, err_msg=f"{frame} {key}"
            )
        np.testing.assert_array_equal(o["identities"], t["identities"], err_msg=frame)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MEAN_ERROR_BOUND_PX))
def test_accuracy_against_ground_truth(name):
    _require(name)
    _, _, golden_path, truth_path = case_paths(name)
    truth = dict(np.load(truth_path))
    golden = dict(np.load(golden_path))
    ours, _ = _poses(name, "onnx")
    errors, missed = ground_truth_errors(ours, truth)
    reference = [
        {"points": golden["points"][i, : golden["n_instances"][i]]} for i in range(len(ours))
    ]
    sleap_nn_errors, sleap_nn_missed = ground_truth_errors(reference, truth)
    n_animals = truth["points"].shape[1] * len(ours)
    print(
        f"{name}: mean {errors.mean():.3f} px (sleap-nn {sleap_nn_errors.mean():.3f} px), "
        f"missed {missed}/{n_animals} (sleap-nn {sleap_nn_missed})"
    )
    assert errors.mean() <= MEAN_ERROR_BOUND_PX[name]
    assert errors.mean() <= sleap_nn_errors.mean() + 0.01
    assert missed <= sleap_nn_missed
    assert missed <= 0.05 * n_animals
