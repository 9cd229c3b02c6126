"""Non-default inference settings against `sleap-nn predict` with the same options.

Each case (`SETTINGS_CASES`, listed where scripts/make_fixtures.py makes them) runs
the in-memory ONNX export of the fixture models, built with the settings, on the
first frames of its test video, and
compares it with sleap-nn predict run with the same options on those frames: the
same instances on every compared frame, within the default-settings goldens'
bounds (tests/engines/test_goldens.py). The cases cap the instances (top-down:
the highest centroid; bottom-up: the two best grouped instances), change the
thresholds, the refinement window and the PAF scoring, and turn refinement off.
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.engines import goldens
from tests import script_modules as scripts

from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream.sources import FileSource

DATA = goldens.DATA
SETTINGS_CASES = scripts.load("fixtures/goldens.py").SETTINGS_CASES
# Points px, point scores, instance scores: test_goldens.SLEAP_NN_BOUNDS of the same
# model type (no settings case measured above them).
BOUNDS = {
    "settings_topdown": (1e-4, 2e-6, 2e-6),
    "settings_bottomup": (1e-4, 3e-6, 3e-5),
    "settings_single_instance": (1e-4, 2e-6, 5e-6),
}


def _poses(name: str, engine: str) -> list[dict[str, np.ndarray]]:
    models, video, settings, n_frames = SETTINGS_CASES[name]
    with FileSource(DATA / "videos" / video, stop=n_frames) as source:
        frames = np.stack([frame.image for frame in source])
    runner = load_runner(
        [str(DATA / "models" / model) for model in models],
        engine=engine,
        device="cpu",
        cache=False,
        settings=InferenceSettings(**settings),  # type: ignore[arg-type]
        # Compared with sleap-nn itself below; the export's own check against torch
        # finds no animals on its enlarged canvas at the top-down case's thresholds.
        **({"verify": False} if engine == "onnx" else {}),
    )
    try:
        assert runner.info.settings == InferenceSettings(**settings)  # type: ignore[arg-type]
        return [
            {
                "points": poses.points,
                "point_scores": poses.point_scores,
                "instance_scores": poses.instance_scores,
                "identities": poses.identities,
            }
            for poses in runner.run(frames)
        ]
    finally:
        runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["onnx", "torch"])
@pytest.mark.parametrize("name", list(SETTINGS_CASES))
def test_settings_match_sleap_nn_predict(name, engine):
    golden_path = DATA / "goldens" / f"{name}.npz"
    if not golden_path.exists():
        pytest.skip(f"fixture missing: {golden_path}")
    golden = dict(np.load(golden_path))
    ours = _poses(name, engine)
    result = goldens.compare(ours, golden, (), goldens.compared_frames(name, len(ours)))
    summary = f"{name} ({engine}): {result.summary()}"
    print(summary)
    points_px, point_scores, instance_scores = BOUNDS[name]
    assert result.count_mismatches == (), summary
    assert result.presence_mismatches == 0, summary
    assert result.point_errors.size > 0, summary
    assert result.point_errors.max() <= points_px, summary
    assert result.score_errors.max() <= point_scores, summary
    assert result.instance_score_errors.max() <= instance_scores, summary
