"""`export --format coreml`: the single-instance fixture becomes an .mlpackage that
coremltools loads back with the declared input and outputs and the sleap-live
metadata (coremltools' own checks; Core ML predicts on macOS only, so no poses are
compared here); a bottom-up model is refused in one line. (Every model type's
figures: docs/export-formats.md.)"""

from __future__ import annotations

import json

import pytest

from sleap_live import cli
from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path
from tests.engines.goldens import DATA


@pytest.fixture(scope="module")
def coremltools():
    """coremltools, imported by the first test that needs it, not at collection: its
    import takes about 1.5 s of CPU in every test worker."""
    return pytest.importorskip("coremltools", reason='needs pip install "sleap-live[coreml]"')


def test_the_package_declares_the_frames_and_outputs_and_carries_the_metadata(
    tmp_path, capsys, coremltools
):
    from sleap_live.engines.export.coreml import PREDICTION_NOT_RUN, check_package

    model = DATA / "models" / "single_instance"
    path = tmp_path / "model.mlpackage"
    # The ONNX export's own checks are tested elsewhere; a small frame converts fast.
    argv = ["export", str(model), "--format", "coreml", "-o", str(path), "--no-verify"]
    assert cli.main([*argv, "--frame-size", "64x80"]) == 0
    assert PREDICTION_NOT_RUN in " ".join(capsys.readouterr().err.split())

    record = json.loads(sidecar_path(path).read_text())
    check = record["coreml_check"]
    assert check["input"] == {"frames": [1, 64, 80, 1]}
    assert check["prediction"] == PREDICTION_NOT_RUN
    package = coremltools.models.MLModel(str(path), skip_model_load=True)
    embedded = ExportMetadata.from_json(package.user_defined_metadata["sleap_live"])
    assert embedded.format == "coreml"
    assert list(embedded.output_names) == check["outputs"]
    # Loaded back again, the same declaration passes the check.
    assert check_package(path, "frames", (1, 64, 80, 1), embedded.output_names) == check


def test_a_bottomup_model_is_refused_in_one_line(tmp_path, capsys, coremltools):
    argv = ["export", str(DATA / "models" / "bottomup"), "--format", "coreml"]
    assert cli.main([*argv, "-o", str(tmp_path / "model.mlpackage")]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "Core ML" in error
    assert not (tmp_path / "model.mlpackage").exists()
