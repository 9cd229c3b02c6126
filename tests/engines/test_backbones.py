"""The ConvNeXt and Swin backbones: configs, checkpoints, ONNX at any size, TensorRT lint.

Output for output against sleap-nn's own modules (every model type, random weights)
is scripts/check_backbones_vs_sleap_nn.py's job (it needs sleap-nn); the trained
fixtures against `sleap-nn predict` are test_parity.py's.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from sleap_live.engines import export_model
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.check_tensorrt import check_tensorrt
from sleap_live.engines.graph.encoder_decoder import EncoderDecoderNetwork
from sleap_live.engines.graph.networks import build_model_network, load_model_network
from sleap_live.engines.load.backbone_specs import ConvNextSpec, SwinTSpec
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.training_config import read_training_config
from sleap_live.engines.ort_options import session_options
from tests.committed import require
from tests.engines import test_spec

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
TRAINED_FIXTURES = ("convnext_single_instance", "convnext_centroid", "convnext_centered_instance",
                    "convnext_bottomup", "swint_single_instance", "swint_centroid",
                    "swint_centered_instance", "swint_bottomup")  # fmt: skip

CONVNEXT = {
    "pre_trained_weights": None,
    "model_type": "fixture",
    "arch": {"depths": [1, 1, 1, 1], "channels": [4, 8, 12, 16]},
    "stem_patch_kernel": 4,
    "stem_patch_stride": 2,
    "in_channels": 1,
    "kernel_size": 3,
    "filters_rate": 1.5,
    "convs_per_block": 2,
    "up_interpolate": True,
    "output_stride": 2,
    "max_stride": 32,
}
SWINT = {
    "pre_trained_weights": None,
    "model_type": "fixture",
    "arch": {"embed": 4, "depths": [2, 2, 1, 2], "num_heads": [1, 1, 2, 2]},
    "max_stride": 32,
    "patch_size": 4,
    "stem_patch_stride": 2,
    "window_size": 7,
    "in_channels": 1,
    "kernel_size": 3,
    "filters_rate": 1.25,
    "convs_per_block": 2,
    "up_interpolate": True,
    "output_stride": 2,
}


def config_with(backbone: str, options: dict, model_type: str = "single_instance") -> dict:
    config = test_spec.training_config(model_type)
    config["model_config"]["backbone_config"] = {"unet": None, backbone: copy.deepcopy(options)}
    return config


def model_dir(path: Path, backbone: str, options: dict, model_type: str = "single_instance"):
    """A model directory with random weights saved under sleap-nn's keys."""
    path.mkdir(parents=True, exist_ok=True)
    config = config_with(backbone, options, model_type)
    (path / "training_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    network = build_model_network(read_training_config(path))
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    state = network.state_dict()
    saved = {theirs: state[ours] for ours, theirs in network.sleap_nn_keys.items()}
    saved |= {theirs: state[ours] for ours, theirs in network.derived_keys.items()}
    torch.save({"state_dict": saved}, path / "best.ckpt")
    return path


def test_presets_win_over_arch_as_in_sleap_nn(tmp_path):
    spec = test_spec.parse(tmp_path, config_with("convnext", CONVNEXT | {"model_type": "tiny"}))
    assert isinstance(spec.backbone, ConvNextSpec)
    assert spec.backbone.channels == (96, 192, 384, 768)
    assert spec.backbone.depths == (3, 3, 9, 3)
    spec = test_spec.parse(tmp_path, config_with("convnext", CONVNEXT))
    assert spec.backbone.channels == (4, 8, 12, 16)
    assert (spec.max_stride, spec.backbone.input_stride) == (32, 32)
    spec = test_spec.parse(tmp_path, config_with("swint", SWINT | {"model_type": "base"}))
    assert isinstance(spec.backbone, SwinTSpec)
    assert spec.backbone.channels == (128, 256, 512, 1024)
    assert spec.backbone.num_heads == (4, 8, 16, 32)
    spec = test_spec.parse(tmp_path, config_with("swint", SWINT | {"arch": None}))
    assert spec.backbone.embed == 96  # sleap-nn's fallback: tiny


@pytest.mark.parametrize(
    ("backbone", "options", "problem"),
    [
        ("convnext", CONVNEXT | {"convs_per_block": 1}, "convs_per_block is 1"),
        ("convnext", CONVNEXT | {"arch": {"depths": [1, 1], "channels": [4, 8]}}, "arch.depths"),
        ("convnext", CONVNEXT | {"output_stride": 32}, "output_stride 32 leaves no decoder"),
        ("swint", SWINT | {"arch": SWINT["arch"] | {"num_heads": [3, 1, 1, 1]}}, "attention"),
        ("swint", SWINT | {"in_channels": 2}, "in_channels is 2"),
    ],
)
def test_configs_sleap_nn_cannot_run_are_refused_in_one_line(tmp_path, backbone, options, problem):
    with pytest.raises(ModelConfigError, match=problem) as error:
        test_spec.parse(tmp_path, config_with(backbone, options))
    assert str(tmp_path / "training_config.yaml") in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", TRAINED_FIXTURES)
def test_every_weight_of_the_trained_fixtures_loads(name):
    require(MODELS / name / "best.ckpt")
    network = load_model_network(read_model_dir(MODELS / name))
    assert isinstance(network, EncoderDecoderNetwork)
    assert network.sleap_nn_keys  # load_sleap_nn_weights refused any key left over


def test_a_checkpoint_of_other_windows_is_refused(tmp_path):
    path = model_dir(tmp_path / "swin", "swint", SWINT)
    config = yaml.safe_load((path / "training_config.yaml").read_text())
    config["model_config"]["backbone_config"]["swint"]["window_size"] = 5
    (path / "training_config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(Exception, match="relative_position"):
        load_model_network(read_model_dir(path))


@pytest.mark.usefixtures("one_thread")
def test_swin_onnx_graph_runs_at_any_size(tmp_path):
    # One graph, dynamic height and width: windows padded, rolls and masks computed
    # from the shape, and the shift dropped where a map fits one window (a 64 px input
    # leaves 4 x 4 at the last stage; 192 x 224 needs padding to whole windows).
    network = load_model_network(read_model_dir(model_dir(tmp_path / "swin", "swint", SWINT)))

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(self.network(x).values())

    path = tmp_path / "swin.onnx"
    torch.onnx.export(
        Outputs().eval(),
        (torch.rand(1, 1, 96, 128),),
        str(path),
        input_names=["x"],
        dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
        opset_version=17,
        dynamo=False,
    )
    session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    for shape in [(2, 1, 64, 64), (1, 1, 192, 224), (1, 1, 32, 288)]:
        x = torch.rand(shape)
        with torch.inference_mode():
            expected = [t.numpy() for t in network(x).values()]
        got = session.run(None, {"x": x.numpy()})
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(g, e, rtol=0, atol=2e-5, err_msg=str(shape))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("backbone", ["convnext", "swint"])
def test_tensorrt_profile_export_is_lint_clean(backbone, tmp_path):
    options = CONVNEXT if backbone == "convnext" else SWINT
    path = export_model(
        [model_dir(tmp_path / backbone, backbone, options)],
        tmp_path / "export",
        verify=False,
        profile="tensorrt",
        frame_size=(168, 200),
    )
    assert check_tensorrt(path) == []
