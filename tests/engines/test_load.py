"""Finding model directories and reading their checkpoints without sleap-nn."""

from __future__ import annotations

import json
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from sleap_live.engines.errors import (
    CheckpointError,
    ExportedModelDirError,
    ModelConfigError,
    ModelNotFoundError,
)
from sleap_live.engines.graph.network import build_network
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.load.checkpoint import read_state_dict
from sleap_live.engines.load.dirs import (
    is_sleap_nn_export_dir,
    model_dir_of,
    read_export_metadata,
    read_model_dir,
)
from sleap_live.engines.load.training_config import read_training_config

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
CENTROID_CONFIG = """\
data_config:
  preprocessing: {scale: 0.5, crop_size: null}
  skeletons:
  - name: mouse
    nodes: [{name: nose}, {name: tail}]
    edges: [{source: {name: nose}, destination: {name: tail}}]
model_config:
  backbone_config:
    unet: {in_channels: 1, kernel_size: 3, filters: 4, filters_rate: 1.5, max_stride: 8,
           stem_stride: null, middle_block: true, up_interpolate: true, stacks: 1,
           convs_per_block: 2, output_stride: 4}
    convnext: null
  head_configs:
    single_instance: null
    centroid:
      confmaps: {anchor_part: nose, sigma: 5.0, output_stride: 4}
"""


def write_config(model_dir: Path) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "training_config.yaml").write_text(CENTROID_CONFIG)
    return model_dir


def sleap_nn_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    network = build_network(read_training_config(model_dir))
    return {network.sleap_nn_keys[k]: v for k, v in network.state_dict().items()}


def write_model_dir(model_dir: Path) -> Path:
    write_config(model_dir)
    torch.save({"epoch": 1, "state_dict": sleap_nn_weights(model_dir)}, model_dir / "best.ckpt")
    return model_dir


def test_read_model_dir(tmp_path):
    model_dir = write_model_dir(tmp_path / "centroid")
    spec = read_model_dir(model_dir)
    assert spec.model_type == "centroid"
    assert spec.preprocess.scale == 0.5
    assert spec.anchor_part == 0
    assert read_model_dir(model_dir / "best.ckpt") == spec
    assert read_model_dir(model_dir / "training_config.yaml") == spec
    assert model_dir_of(model_dir / "best.ckpt") == model_dir


def test_missing_directory(tmp_path):
    with pytest.raises(ModelNotFoundError, match="model directory not found") as e:
        read_model_dir(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(e.value)


def test_other_file_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelNotFoundError, match="not a model directory"):
        read_model_dir(tmp_path / "notes.txt")


def test_partial_directories_name_the_missing_file(tmp_path):
    config_only = write_config(tmp_path / "config_only")
    with pytest.raises(ModelNotFoundError, match=r"config_only/best\.ckpt: not found"):
        read_model_dir(config_only)
    checkpoint_only = tmp_path / "checkpoint_only"
    checkpoint_only.mkdir()
    (checkpoint_only / "best.ckpt").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match=r"checkpoint_only/training_config\.yaml"):
        read_model_dir(checkpoint_only)


def test_a_sleap_1x_folder_without_a_model_section_names_its_config(tmp_path):
    """SLEAP 1.x folders are read (tests/engines/test_legacy_models.py); a broken
    config is one line naming the file."""
    (tmp_path / "training_config.json").write_text("{}")
    (tmp_path / "best_model.h5").write_bytes(b"")
    with pytest.raises(ModelConfigError, match=r"training_config\.json: model is missing"):
        read_model_dir(tmp_path)


def test_export_directory_is_recognised(tmp_path):
    metadata = {"model_type": "centroid", "node_names": ["nose", "tail"], "input_scale": 0.5}
    (tmp_path / "export_metadata.json").write_text(json.dumps(metadata))
    assert not is_sleap_nn_export_dir(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    assert is_sleap_nn_export_dir(tmp_path)
    assert not is_sleap_nn_export_dir(write_model_dir(tmp_path / "trained"))
    with pytest.raises(ExportedModelDirError, match="sleap-nn export") as e:
        read_model_dir(tmp_path)
    assert isinstance(e.value, ModelConfigError)
    assert read_export_metadata(tmp_path) == metadata
    assert read_export_metadata(tmp_path / "export_metadata.json") == metadata


def test_tensorrt_only_export_directory(tmp_path):
    (tmp_path / "export_metadata.json").write_text('{"model_type": "bottomup"}')
    (tmp_path / "model.trt").write_bytes(b"trt")
    assert is_sleap_nn_export_dir(tmp_path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"node_names": []}', "no model_type"),
    ],
)
def test_bad_export_metadata(tmp_path, text, problem):
    (tmp_path / "export_metadata.json").write_text(text)
    with pytest.raises(ModelConfigError, match=problem) as e:
        read_export_metadata(tmp_path)
    assert str(tmp_path / "export_metadata.json") in str(e.value)


def test_missing_export_metadata(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"export_metadata\.json: not found"):
        read_export_metadata(tmp_path)
    with pytest.raises(ModelNotFoundError, match="export directory not found"):
        read_export_metadata(tmp_path / "gone")


def test_load_network_end_to_end(tmp_path):
    model_dir = write_model_dir(tmp_path / "centroid")
    network = load_model_network(read_model_dir(model_dir))
    assert network(torch.rand(1, 1, 32, 24))["CentroidConfmapsHead"].shape == (1, 1, 8, 6)


def test_garbage_checkpoint(tmp_path):
    model_dir = write_config(tmp_path / "garbage")
    (model_dir / "best.ckpt").write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError, match="not a zip archive") as e:
        load_model_network(read_model_dir(model_dir))
    assert str(model_dir / "best.ckpt") in str(e.value)


def test_truncated_checkpoint(tmp_path):
    model_dir = write_model_dir(tmp_path / "truncated")
    data = (model_dir / "best.ckpt").read_bytes()
    (model_dir / "best.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"best\.ckpt: "):
        read_state_dict(model_dir / "best.ckpt")


def test_zip_that_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "best.ckpt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("best/data.pkl", b"\x80\x02garbage")
    with pytest.raises(CheckpointError, match=r"best\.ckpt: cannot read checkpoint"):
        read_state_dict(path)


def test_checkpoint_without_state_dict(tmp_path):
    torch.save({"epoch": 1}, tmp_path / "a.ckpt")
    with pytest.raises(CheckpointError, match="no state_dict"):
        read_state_dict(tmp_path / "a.ckpt")
    torch.save({"state_dict": {"w": "not a tensor"}}, tmp_path / "b.ckpt")
    with pytest.raises(CheckpointError, match="not a mapping of names to tensors"):
        read_state_dict(tmp_path / "b.ckpt")


def test_missing_checkpoint_file(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"x\.ckpt: checkpoint not found"):
        read_state_dict(tmp_path / "x.ckpt")


class _Enum:
    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return (type(self), (self.value,))


class _Mapping(dict):
    pass


class _Sequence(list):
    pass


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _foreign_classes(monkeypatch) -> dict[str, type]:
    """Classes that pickle as omegaconf, lightning and sleap_nn ones, then vanish."""
    made = {}
    for dotted, base in [
        ("omegaconf.dictconfig.DictConfig", object),
        ("omegaconf.base.ContainerMetadata", object),
        ("omegaconf.nodes.AnyNode", _Enum),
        ("lightning.pytorch.utilities.parsing.AttributeDict", _Mapping),
        ("pytorch_lightning.trainer.states.RunningStage", _Sequence),
        ("sleap_nn.config.model_config.UNetConfig", object),
    ]:
        module_name, _, class_name = dotted.rpartition(".")
        parts = module_name.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in sys.modules:
                monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        cls = type(class_name, (base,), {"__module__": module_name})
        monkeypatch.setattr(sys.modules[module_name], class_name, cls, raising=False)
        made[dotted] = cls
    return made


def test_foreign_objects_are_read_inertly(tmp_path, monkeypatch):
    path = tmp_path / "best.ckpt"
    weights = {"model.w": torch.arange(6.0).reshape(2, 3), "model.b": torch.ones(2)}
    with monkeypatch.context() as patch:
        foreign = _foreign_classes(patch)
        config = foreign["omegaconf.dictconfig.DictConfig"]()
        config.__dict__ |= {
            "_metadata": foreign["omegaconf.base.ContainerMetadata"](),
            "_content": {"lr": foreign["omegaconf.nodes.AnyNode"](1e-3)},
            "_parent": None,
        }
        hparams = foreign["lightning.pytorch.utilities.parsing.AttributeDict"](a=1)
        stages = foreign["pytorch_lightning.trainer.states.RunningStage"]([1, 2])
        unet = foreign["sleap_nn.config.model_config.UNetConfig"]()
        torch.save(
            {
                "state_dict": weights,
                "config": config,
                "hyper_parameters": hparams,
                "loops": stages,
                "callbacks": {"ModelCheckpoint": {"unet": unet, "cls": type(unet)}},
            },
            path,
        )
    state_dict = read_state_dict(path)
    assert state_dict.keys() == weights.keys()
    for key, value in weights.items():
        assert torch.equal(state_dict[key], value)


def test_parameters_and_other_dtypes(tmp_path):
    weights = {"w": torch.nn.Parameter(torch.ones(2)), "h": torch.zeros(3, dtype=torch.float16)}
    torch.save({"state_dict": weights}, tmp_path / "best.ckpt")
    state_dict = read_state_dict(tmp_path / "best.ckpt")
    assert torch.equal(state_dict["w"], weights["w"])
    assert state_dict["h"].dtype == torch.float16


def test_checkpoint_cannot_run_code(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "best.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "payload": _RunsCode(marker)}, path)
    assert read_state_dict(path).keys() == {"w"}
    assert not marker.exists()


@pytest.mark.parametrize(
    "model_dir",
    sorted(p for p in MODELS.glob("*") if (p / "best.ckpt").is_file()) if MODELS.is_dir() else [],
    ids=lambda p: p.name,
)
def test_trained_checkpoints_read_without_sleap_nn(model_dir):
    assert "sleap_nn" not in sys.modules
    state_dict = read_state_dict(model_dir / "best.ckpt")
    spec = read_model_dir(model_dir)
    if spec.model_type == "embedding":
        # The projection head it trains through is dropped at inference, as sleap-nn does.
        state_dict = {k: v for k, v in state_dict.items() if not k.startswith("projection.")}
    assert all(key.startswith("model.") for key in state_dict)
    network = load_model_network(spec)
    stored = {*network.sleap_nn_keys.values(), *network.derived_keys.values()}
    assert stored == set(state_dict)
