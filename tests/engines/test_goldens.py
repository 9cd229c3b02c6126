"""sleap-live's engines against sleap-nn's own `predict` and against ground truth.

Acceptance (engines issue): for every model type on its test video, the same number
of instances as sleap-nn on >= 99 % of frames, matched points within 0.1 px median
and 0.5 px 99th percentile, scores within 1e-3; the exported ONNX graph run in
onnxruntime agrees with the torch module within 1e-3 px.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.sources import FileSource


def _load_goldens():
    name = "sleap_live_tests_goldens"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("goldens.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


goldens = _load_goldens()
CASES, case_paths = goldens.CASES, goldens.case_paths
compare, ground_truth_errors = goldens.compare, goldens.ground_truth_errors

BATCH = 8

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
    runner = load_runner([str(m) for m in models], engine=engine, device="cpu")
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
    print(name, result.summary())
    assert result.same_count_fraction >= 0.99, result.summary()
    assert np.median(result.point_errors) <= 0.1, result.summary()
    assert np.percentile(result.point_errors, 99) <= 0.5, result.summary()
    assert np.percentile(result.score_errors, 99) <= 1e-3, result.summary()
    assert np.percentile(result.instance_score_errors, 99) <= 1e-3, result.summary()
    assert result.identity_agreement >= 0.99, result.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_onnx_graph_agrees_with_torch_module(name):
    _require(name)
    torch_poses, _ = _poses(name, "torch", n_frames=24)
    onnx_poses, _ = _poses(name, "onnx", n_frames=24)
    for t, o in zip(torch_poses, onnx_poses, strict=True):
        assert len(t["points"]) == len(o["points"])
        np.testing.assert_allclose(o["points"], t["points"], atol=1e-3, equal_nan=True)
        np.testing.assert_allclose(o["point_scores"], t["point_scores"], atol=1e-4, equal_nan=True)
        np.testing.assert_array_equal(o["identities"], t["identities"])


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
