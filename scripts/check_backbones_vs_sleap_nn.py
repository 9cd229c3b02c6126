"""Check that sleap-live's ConvNeXt and Swin networks reproduce sleap-nn's, output for output.

Run with the sleap-nn environment, with sleap-live importable (installed editable, or
on PYTHONPATH):

    /work/venvs/snn/bin/python scripts/check_backbones_vs_sleap_nn.py

As scripts/check_network_vs_sleap_nn.py does for the UNet (whose model-directory
writer, loader and comparison it reuses): for each configuration below it builds a
sleap-nn model with random weights, saves it as `sleap-nn train` does, loads it with
sleap-nn's checkpoint loader and with sleap-live, and compares every head output on
random inputs. The configurations cover every model type, both upsamplings, output
strides 1 to 8, RGB input, more middle convolutions, a stem whose sizes need the
decoder's resize, Swin windows larger than the deepest maps, and the smallest preset
of each backbone. Configurations sleap-nn cannot run must be refused by sleap-live
too. Exits non-zero when any output differs by more than `TOLERANCE`.
"""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path

import attrs
import check_network_vs_sleap_nn as unet_check
import lightning as L
import torch
from check_network_vs_sleap_nn import heads
from loguru import logger
from omegaconf import OmegaConf
from sleap_nn.config import model_config as mc
from sleap_nn.config.training_job_config import TrainingJobConfig
from sleap_nn.training import lightning_modules as lm

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.load.training_config import read_training_config

TOLERANCE = 1e-5

CONVNEXT = {
    "model_type": "custom",
    "arch": {"depths": [1, 2, 1, 1], "channels": [8, 12, 16, 24]},
    "filters_rate": 1.5,
    "output_stride": 2,
}
SWINT = {
    "model_type": "custom",
    "arch": {"embed": 8, "depths": [2, 2, 2, 2], "num_heads": [1, 2, 2, 4]},
    "filters_rate": 1.5,
    "output_stride": 2,
}
CONFIG_CLASSES = {"convnext": mc.ConvNextConfig, "swint": mc.SwinTConfig}

# (name, backbone, backbone options, model type, head config, input sizes in strides)
CASES = [
    ("convnext single", "convnext", CONVNEXT, "single_instance", heads("single_instance", 2)),
    (
        "convnext single transposed stride 4",
        "convnext",
        CONVNEXT | {"up_interpolate": False, "output_stride": 4},
        "single_instance",
        heads("single_instance", 4),
    ),
    (
        "convnext single stride 1, 3 convs",
        "convnext",
        CONVNEXT | {"output_stride": 1, "convs_per_block": 3},
        "single_instance",
        heads("single_instance", 1),
    ),
    (
        "convnext stem kernel 7 stride 4",
        "convnext",
        CONVNEXT | {"stem_patch_kernel": 7, "stem_patch_stride": 4, "max_stride": 64},
        "single_instance",
        heads("single_instance", 2),
    ),
    (
        "convnext centroid sigmoid rgb",
        "convnext",
        CONVNEXT | {"in_channels": 3, "output_stride": 4},
        "centroid",
        heads("centroid", 4, use_sigmoid_activation=True),
    ),
    (
        "convnext centered instance",
        "convnext",
        CONVNEXT,
        "centered_instance",
        heads("centered_instance", 2),
    ),
    (
        "convnext bottomup",
        "convnext",
        CONVNEXT,
        "bottomup",
        heads("bottomup", 2, paf_stride=8),
    ),
    (
        "convnext multi-class bottomup",
        "convnext",
        CONVNEXT | {"output_stride": 4},
        "multi_class_bottomup",
        heads("multi_class_bottomup", 4),
    ),
    (
        "convnext multi-class topdown",
        "convnext",
        CONVNEXT,
        "multi_class_topdown",
        heads("multi_class_topdown", 2, output_stride=32),
    ),
    ("convnext tiny preset", "convnext", {"model_type": "tiny", "output_stride": 4},
     "single_instance", heads("single_instance", 4)),
    ("swint single", "swint", SWINT, "single_instance", heads("single_instance", 2)),
    (
        "swint single transposed stride 4 window 4",
        "swint",
        SWINT | {"up_interpolate": False, "output_stride": 4, "window_size": 4},
        "single_instance",
        heads("single_instance", 4),
    ),
    (
        "swint centroid sigmoid rgb",
        "swint",
        SWINT | {"in_channels": 3, "output_stride": 4},
        "centroid",
        heads("centroid", 4, use_sigmoid_activation=True),
    ),
    ("swint centered instance", "swint", SWINT, "centered_instance",
     heads("centered_instance", 2)),
    ("swint bottomup", "swint", SWINT, "bottomup", heads("bottomup", 2, paf_stride=4)),
    (
        "swint multi-class bottomup",
        "swint",
        SWINT | {"output_stride": 4},
        "multi_class_bottomup",
        heads("multi_class_bottomup", 4),
    ),
    (
        "swint multi-class topdown",
        "swint",
        SWINT,
        "multi_class_topdown",
        heads("multi_class_topdown", 2, output_stride=32),
    ),
    ("swint tiny preset", "swint", {"model_type": "tiny", "output_stride": 4},
     "single_instance", heads("single_instance", 4)),
]  # fmt: skip

# Options sleap-nn cannot run; sleap-live must refuse them too.
UNRUNNABLE = [
    ("convnext 1 conv per block", "convnext", CONVNEXT | {"convs_per_block": 1}),
    ("swint 1 conv per block", "swint", SWINT | {"convs_per_block": 1}),
]


def write_model_dir(
    path: Path, backbone: str, options: dict, model_type: str, head_config: dict
) -> None:
    """Save a randomly initialised sleap-nn model as `sleap-nn train` would.

    Validators are off while the config is made: sleap-nn's accepts Swin only at its
    presets (see scripts/fixtures/train_unvalidated.py).
    """
    config = OmegaConf.structured(TrainingJobConfig())
    with attrs.validators.disabled():
        backbone_config = CONFIG_CLASSES[backbone](**options)
        head_class, leaf_classes = unet_check.HEAD_CONFIGS[model_type]
        leaves = {key: leaf_classes[key](**leaf) for key, leaf in head_config.items()}
        config.model_config.backbone_config.unet = None
        config.model_config.backbone_config[backbone] = backbone_config
        config.model_config.head_configs[model_type] = head_class(**leaves)
    config.data_config.skeletons = [
        {
            "name": "fly",
            "nodes": [{"name": n} for n in unet_check.NODES],
            "edges": [
                {"source": {"name": s}, "destination": {"name": d}} for s, d in unet_check.EDGES
            ],
            "symmetries": [],
        }
    ]
    config.data_config.preprocessing.crop_size = 96
    OmegaConf.save(config, path / "training_config.yaml")
    module = lm.LightningModel.get_lightning_model_from_config(config)
    # Off their initial values: ConvNeXt's layer scales start at 1e-6, which would hide
    # the blocks they scale, LayerNorms at the identity, Swin's position biases near 0.
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(path / "best.ckpt")


def sleap_nn_builds(path: Path, model_type: str) -> bool:
    try:
        with torch.inference_mode():
            unet_check.sleap_nn_model(path, model_type)(torch.rand(1, 1, 64, 64))
    except Exception:
        return False
    return True


def main() -> int:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    logger.remove()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, backbone, options, model_type, head_config in CASES:
            path = Path(tmp) / name.replace(" ", "_").replace(",", "")
            path.mkdir()
            write_model_dir(path, backbone, options, model_type, copy.deepcopy(head_config))
            stride = read_training_config(path).backbone.input_stride
            sizes = [(stride * 3, stride * 4), (stride * 2, stride * 5)]
            if model_type in ("centered_instance", "multi_class_topdown"):
                sizes = [(stride * 2, stride * 2)]
            channels = [1, 3] if "rgb" in name else None
            diff = unet_check.compare(path, sizes, channels)
            failures += diff > TOLERANCE
            print(f"{'ok  ' if diff <= TOLERANCE else 'FAIL'} {name:44s} max |diff| {diff:.2e}")
        for name, backbone, options in UNRUNNABLE:
            path = Path(tmp) / name.replace(" ", "_")
            path.mkdir()
            try:
                write_model_dir(
                    path, backbone, options, "single_instance", heads("single_instance", 2)
                )
                theirs = sleap_nn_builds(path, "single_instance")
            except Exception:
                theirs = False
            try:
                read_training_config(path)
                ours = True
            except ModelConfigError:
                ours = False
            failures += theirs != ours
            verdict = "ok  " if theirs == ours else "FAIL"
            print(f"{verdict} {name:44s} sleap-nn runs: {theirs}, sleap-live builds: {ours}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
