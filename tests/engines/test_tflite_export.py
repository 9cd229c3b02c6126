"""`export --format tflite`: the single-instance fixture becomes a .tflite file whose
poses, run by the LiteRT interpreter, are ONNX Runtime's within 1e-3 px (checked at
export time, the check in its metadata; the test reads them back and decodes them); a
network LiteRT cannot hold is refused in one line. litert-torch's install takes
minutes, so CI does not install it: these tests skip there, and
scripts/check_tflite_export.py runs them and every model type. (Figures:
docs/export-formats.md.)"""

from __future__ import annotations

import numpy as np
import pytest

from sleap_live.engines.export.tflite import refusal
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path
from sleap_live.stream.runner import first_frames
from tests.engines.goldens import DATA


def test_transposed_convolutions_are_what_litert_cannot_hold():
    topdown = load_inference_model(
        [DATA / "models" / "centroid", DATA / "models" / "centered_instance"]
    )
    assert "transposed convolutions" in refusal(topdown)
    assert refusal(load_inference_model(DATA / "models" / "single_instance")) is None


def test_litert_runs_the_file_and_its_poses_are_onnx_runtimes(tmp_path):
    pytest.importorskip("litert_torch", reason='needs pip install "sleap-live[tflite]"')
    from sleap_live.engines.export import export_model
    from sleap_live.engines.export.tflite import run_tflite

    frames = first_frames(DATA / "videos" / "single.mkv", 3)
    path = export_model(
        DATA / "models" / "single_instance", tmp_path / "model.tflite", format="tflite",
        verify_frames=frames,
    )  # fmt: skip
    metadata = ExportMetadata.from_json(sidecar_path(path).read_text())
    (check,) = metadata.verification
    assert check["against"] == "ONNX Runtime" and check["max_abs_diff"]["points"] <= 1e-3
    outputs = run_tflite(path, frames, metadata.output_names)
    poses = decode(metadata.info, outputs, len(frames))
    assert [len(pose.points) for pose in poses] == [1, 1, 1]
    assert not np.isnan(poses[0].points).all()


def test_a_network_with_transposed_convolutions_is_refused_in_one_line(tmp_path, capsys):
    pytest.importorskip("litert_torch", reason='needs pip install "sleap-live[tflite]"')
    from sleap_live import cli

    models = [str(DATA / "models" / name) for name in ("centroid", "centered_instance")]
    argv = ["export", *models, "--format", "tflite", "--max-instances", "2"]
    assert cli.main([*argv, "-o", str(tmp_path / "model.tflite")]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "transposed convolutions" in error
    assert not (tmp_path / "model.tflite").exists()
