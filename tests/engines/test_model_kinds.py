"""Models sleap-live does not run are refused in one line, before any work.

Each folder under tests/data/unrun_models holds a hand-written training_config.yaml
in sleap-nn 0.3.5's layout (valid against its schema, checked with its
`verify_training_cfg`, but for the unknown type) and no weights: the refusal comes
from the config alone, before the checkpoint is looked for.
"""

from __future__ import annotations

import json
import shutil

import pytest

from sleap_live import cli
from sleap_live.engines.errors import ModelConfigError, UnsupportedModelError
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.load import model_kind as unrun_kinds
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.model_kind import unrun_kind
from sleap_live.engines.load.training_config import parse_training_config, read_yaml
from sleap_live.engines.runners.load import load_runner
from tests.committed import require
from tests.engines import goldens

UNRUN = goldens.DATA / "unrun_models"
MODELS = goldens.DATA / "models"

# folder -> what the one line says the model is
KINDS = {
    "segmentation": "a segmentation model (bottomup_segmentation)",
    "vit_pretrained": "a model on a pretrained backbone from Hugging Face "
    "('facebook/dinov2-small')",
    "timm_pretrained": "a model on a pretrained backbone from timm, through Hugging Face "
    "('timm/vit_small_patch14_dinov2.lvd142m')",
    "unknown_type": "a model of a type sleap-live does not know ('keypoint_tracker')",
}


@pytest.mark.parametrize("folder", sorted(KINDS))
def test_each_kind_is_named_in_one_line_before_the_checkpoint(folder):
    path = UNRUN / folder
    require(path / "training_config.yaml")
    assert not (path / "best.ckpt").exists()
    with pytest.raises(UnsupportedModelError) as error:
        read_model_dir(path)
    assert str(error.value) == f"{path}: {KINDS[folder]}; sleap-live does not run it"
    assert isinstance(error.value, ModelConfigError)


@pytest.mark.parametrize(("folder", "paired"), [("segmentation", False), ("vit_pretrained", True)])
def test_the_command_line_refuses_it_alone_or_in_a_pair(folder, paired, tmp_path, capsys):
    path = UNRUN / folder
    video = goldens.DATA / "videos" / "single.mkv"
    output = tmp_path / "poses.slp"
    models = ["-m", str(MODELS / "centroid")] if paired else []
    status = cli.main(["run", str(video), *models, "-m", str(path), "-o", str(output), "-q"])
    assert status != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"sleap-live: error: {path}: {KINDS[folder]}; sleap-live does not run it"]
    assert not output.exists()


def test_pose_models_on_run_backbones_are_not_flagged():
    for name in ("single_instance", "bottomup", "convnext_bottomup", "swint_centered_instance"):
        require(MODELS / name / "training_config.yaml")
        assert unrun_kind(read_yaml(MODELS / name / "training_config.yaml")) is None
    # Too malformed to tell: the full parse names the problem instead.
    assert unrun_kind({"model_config": []}) is None
    assert unrun_kind(["not", "a", "config"]) is None


@pytest.mark.parametrize("model_type", ["bbox_centernet", "bbox_ssd", "embedding"])
def test_a_sleap_nn_export_of_such_a_kind_is_refused_too(model_type, tmp_path):
    source = goldens.DATA / "exports" / "single_instance"
    require(source / "export_metadata.json")
    folder = shutil.copytree(source, tmp_path / model_type)
    document = json.loads((folder / "export_metadata.json").read_text())
    (folder / "export_metadata.json").write_text(json.dumps({**document, "model_type": model_type}))
    with pytest.raises(UnsupportedModelError) as error:
        load_runner(folder, device="cpu")
    what = unrun_kinds.UNRUN_EXPORT_TYPES[model_type]
    assert str(error.value) == f"{folder}: {what} (a sleap-nn export); sleap-live does not run it"


def test_an_embedding_model_is_no_longer_refused_by_kind():
    # It runs after a top-down pair (test_embedding.py); this hand-written config
    # has no pool (training resolves it), which its full parse then names.
    path = UNRUN / "embedding"
    assert unrun_kind(read_yaml(path / "training_config.yaml")) is None
    with pytest.raises(ModelConfigError, match="pool is None"):
        parse_training_config(read_yaml(path / "training_config.yaml"), path)


def test_a_box_detector_runs_from_its_config_alone():
    # bbox_centernet runs alone (boxes, test_box_models.py) and as a top-down model's
    # first stage, bbox_ssd alone; their configs are no longer refused.
    for kind in ("bbox_centernet", "bbox_ssd"):
        assert unrun_kind(read_yaml(UNRUN / kind / "training_config.yaml")) is None
    path = MODELS / "bbox_centernet"
    require(path / "best.ckpt")
    model = load_inference_model(path)
    assert model.info.model_type == "bbox" and model.info.class_names == ("object",)
