"""`export --format pt2`: a torch.export program that plain torch loads
(`torch.export.load(path).module()`, nothing of sleap-live); at export time it is
checked against ONNX Runtime on the default graph on the fixture video's frames
(within 1e-3 px, the checks in its metadata); a model type it cannot hold as asked
is refused in one line. (Every model type's figures: docs/export-formats.md.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleap_live import cli
from sleap_live.engines.export import export_model
from sleap_live.engines.export.pt2 import read_pt2_metadata
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import sidecar_path
from sleap_live.stream.runner import first_frames
from tests.engines.goldens import DATA

VIDEO = DATA / "videos" / "single.mkv"


def test_plain_torch_runs_the_program_and_its_poses_are_onnx_runtimes(tmp_path):
    frames = first_frames(VIDEO, 3)
    path = export_model(
        DATA / "models" / "single_instance",
        tmp_path / "model.pt2",
        format="pt2",
        verify_frames=frames,
    )
    metadata = read_pt2_metadata(path)
    assert metadata.format == "pt2"
    assert sidecar_path(path).is_file()
    checks = metadata.verification
    assert checks is not None and [check["frames"][0] for check in checks] == [1, 3]
    assert all(check["against"] == "ONNX Runtime" for check in checks)

    module = torch.export.load(str(path)).module()
    with torch.no_grad():
        outputs = module(torch.from_numpy(frames))
    poses = decode(metadata.info, dict(zip(metadata.output_names, outputs, strict=True)), 3)
    assert [len(pose.points) for pose in poses] == [1, 1, 1]
    assert not np.isnan(poses[0].points).all()
    # The checks against ONNX Runtime's default graph on those frames, in the metadata.
    for check in checks:
        assert check["max_abs_diff"]["points"] <= 1e-3
        assert check["instances"] == check["frames"][0]


@pytest.mark.parametrize("models", [("centroid",), ("centroid", "centered_instance")])
def test_a_centroid_stage_without_max_instances_is_refused_in_one_line(models, tmp_path, capsys):
    argv = ["export", *(str(DATA / "models" / name) for name in models), "--format", "pt2"]
    assert cli.main([*argv, "-o", str(tmp_path / "model.pt2")]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "--max-instances N" in error
    assert not (tmp_path / "model.pt2").exists()
