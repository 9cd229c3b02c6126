"""The pipeline with a real engine: recorded mode equals running the engine directly."""

from pathlib import Path

import numpy as np
import pytest
import sleap_io as sio

from sleap_live.engines.runners.load import load_runner
from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.sources import FileSource

DATA = Path(__file__).resolve().parents[1] / "data"
MODELS = [DATA / "models" / "centroid", DATA / "models" / "centered_instance"]
VIDEO = DATA / "videos" / "multi_gray.mkv"


@pytest.mark.slow
def test_recorded_pipeline_matches_the_engine_frame_by_frame(tmp_path):
    if not VIDEO.exists() or not all(m.exists() for m in MODELS):
        pytest.skip("test models or video missing")
    with FileSource(VIDEO, stop=48) as source:
        frames = np.stack([f.image for f in source])
    runner = load_runner(
        [str(m) for m in MODELS], engine="onnx", device="cpu", verify_frames=frames[:5]
    )
    try:
        direct = [p for i in range(0, 48, 8) for p in runner.run(frames[i : i + 8])]

        output = tmp_path / "poses.slp"
        records = list(
            Pipeline(FileSource(VIDEO, stop=48), runner, outputs=OutputOptions(output=output))
        )
    finally:
        runner.close()

    assert [r.frame_index for r in records] == list(range(48))
    for record, expected in zip(records, direct, strict=True):
        np.testing.assert_array_equal(record.poses.points, expected.points)
        np.testing.assert_array_equal(record.poses.point_scores, expected.point_scores)
        np.testing.assert_array_equal(record.poses.instance_scores, expected.instance_scores)
        assert record.ready_time >= record.capture_time

    labels = sio.load_slp(str(output))
    assert len(labels.labeled_frames) == 48
    assert [n.name for n in labels.skeleton.nodes] == list(runner.info.skeleton.node_names)
    by_frame = {lf.frame_idx: lf for lf in labels.labeled_frames}
    for i, expected in enumerate(direct):
        saved = np.stack([inst.numpy()[:, :2] for inst in by_frame[i].instances])
        order = np.argsort(saved[:, 0, 0])
        np.testing.assert_allclose(
            saved[order], expected.points[np.argsort(expected.points[:, 0, 0])], atol=1e-4
        )
