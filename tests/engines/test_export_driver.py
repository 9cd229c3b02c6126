"""The export driver (`engines/export/driver.py`): a format is one `ExportFormat` record
and one row of `FORMAT_TABLE`; the driver claims the output before any work, refuses
what the format refuses in one line naming the model directories, and verifies the
saved export against ONNX Runtime, writing the checks into its metadata."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from sleap_live.engines.errors import ExportError, ModelConfigError
from sleap_live.engines.export.driver import Check, ExportFile, ExportFormat, Job, tensorrt_profile
from sleap_live.engines.export.formats import FORMAT_TABLE, ExportOptions
from sleap_live.engines.export.onnx import onnx_exported
from sleap_live.engines.load.metadata import sidecar_path
from sleap_live.stream.runner import first_frames
from tests.engines.goldens import DATA

MODEL = DATA / "models" / "single_instance"


def _save(made: bytes, path: Path, job: Job) -> Mapping[str, Any]:
    path.write_bytes(made)
    return {"toy_check": "saved"}


def _toy(shift: float = 0.0) -> ExportFormat:
    """A format that saves the reference graph itself and runs it back in ONNX Runtime,
    its points moved by `shift` pixels."""

    def load(path: Path, job: Job):
        exported = onnx_exported(path.read_bytes())

        def run(frames: np.ndarray) -> dict[str, np.ndarray]:
            outputs = exported.run(frames)
            return {**outputs, "points": outputs["points"] + np.float32(shift)}

        return run

    return ExportFormat(
        "toy",
        ExportFile("model.toy", "a toy export is a '.toy' file"),
        lambda job: job.onnx_bytes,
        _save,
        profile=tensorrt_profile,
        check=Check(load, "the toy file", "ONNX Runtime again"),
    )


def test_every_row_names_its_exporter():
    for row in FORMAT_TABLE:
        assert callable(row.export()), row.argument


def test_a_format_is_a_record_the_driver_runs_and_verifies(tmp_path):
    steps: list[str] = []
    frames = first_frames(DATA / "videos" / "single.mkv", 3)
    options = ExportOptions("toy", verify_frames=frames, progress=steps.append)
    path = _toy()([MODEL], tmp_path, options)
    assert path == tmp_path / "model.toy"
    record = json.loads(sidecar_path(path).read_text())
    assert record["format"] == "toy" and record["toy_check"] == "saved"
    [check] = record["verification"]
    assert check["against"] == "ONNX Runtime" and check["frames"][0] == 3
    assert steps[0] == "loading model"
    assert "verifying 3 frames in ONNX Runtime again against ONNX Runtime" in steps


def test_the_output_is_claimed_before_the_model_is_loaded(tmp_path):
    with pytest.raises(ValueError, match=r"a toy export is a '\.toy' file"):
        _toy()([tmp_path / "no such model"], tmp_path / "model.onnx", ExportOptions("toy"))


def test_a_refused_model_is_named_in_one_line(tmp_path):
    toy = attrs.evolve(_toy(), refuse=lambda model: f"no {model.info.model_type} here")
    line = f"{MODEL}: no single_instance here"
    with pytest.raises(ModelConfigError, match=f"^{re.escape(line)}$"):
        toy([MODEL], tmp_path, ExportOptions("toy", verify=False))
    assert list(tmp_path.iterdir()) == []


def test_an_export_that_disagrees_is_refused_and_nothing_is_written(tmp_path):
    options = ExportOptions("toy", verify_frames=first_frames(DATA / "videos" / "single.mkv", 3))
    with pytest.raises(ExportError, match="the toy file differs from ONNX Runtime"):
        _toy(shift=5.0)([MODEL], tmp_path, options)
    assert list(tmp_path.iterdir()) == []


def test_a_foreign_file_is_refused_in_one_line(tmp_path):
    from sleap_live.engines.export.pt2 import load_pt2

    foreign = tmp_path / "model.pt2"
    foreign.write_bytes(b"not a zip archive")
    with pytest.raises(
        ModelConfigError, match=r"model\.pt2: not a torch\.export archive \("
    ) as error:
        load_pt2(foreign)
    assert len(str(error.value).splitlines()) == 1
