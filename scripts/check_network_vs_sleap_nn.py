"""Check that sleap-live's network reproduces sleap-nn's, output for output.

Run with the sleap-nn environment, where sleap-live is installed editable:

    /work/venvs/snn/bin/python scripts/check_network_vs_sleap_nn.py [MODEL_DIR ...]

For each synthetic configuration below (every UNet option and every head type) it
builds a sleap-nn model with random weights, saves it the way `sleap-nn train` does
(`training_config.yaml` plus a Lightning `best.ckpt`), loads that directory both
with sleap-nn's own checkpoint loader and with `sleap_live.engines.load.dirs`, feeds both
the same random input and compares every head output. Trained model directories
given on the command line, and those under tests/data/models/, are compared the
same way. Configurations sleap-nn cannot build or run must be refused by sleap-live
too. Exits non-zero when any output differs by more than `TOLERANCE` or the two
disagree on what runs.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import torch

# Before lightning is imported, so its startup banners are quiet too.
logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")

import lightning as L  # noqa: E402
from loguru import logger  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from sleap_nn.config import model_config as mc  # noqa: E402
from sleap_nn.config.training_job_config import TrainingJobConfig  # noqa: E402
from sleap_nn.inference.loaders import _load_lightning_module  # noqa: E402
from sleap_nn.training import lightning_modules as lm  # noqa: E402

from sleap_live.engines.errors import ModelConfigError  # noqa: E402
from sleap_live.engines.graph.network import build_network  # noqa: E402
from sleap_live.engines.graph.networks import load_model_network  # noqa: E402
from sleap_live.engines.load.checkpoint import read_state_dict  # noqa: E402
from sleap_live.engines.load.dirs import read_model_dir  # noqa: E402
from sleap_live.engines.load.training_config import read_training_config  # noqa: E402

TOLERANCE = 1e-5
REPO = Path(__file__).resolve().parents[1]

LIGHTNING_MODULES = {
    "single_instance": lm.SingleInstanceLightningModule,
    "centroid": lm.CentroidLightningModule,
    "centered_instance": lm.TopDownCenteredInstanceLightningModule,
    "bottomup": lm.BottomUpLightningModule,
    "multi_class_bottomup": lm.BottomUpMultiClassLightningModule,
    "multi_class_topdown": lm.TopDownCenteredInstanceMultiClassLightningModule,
}

# Per model type: its head config class and the classes of its heads, by config key.
HEAD_CONFIGS = {
    "single_instance": (mc.SingleInstanceConfig, {"confmaps": mc.SingleInstanceConfMapsConfig}),
    "centroid": (mc.CentroidConfig, {"confmaps": mc.CentroidConfMapsConfig}),
    "centered_instance": (
        mc.CenteredInstanceConfig,
        {"confmaps": mc.CenteredInstanceConfMapsConfig},
    ),
    "bottomup": (
        mc.BottomUpConfig,
        {"confmaps": mc.BottomUpConfMapsConfig, "pafs": mc.PAFConfig},
    ),
    "multi_class_bottomup": (
        mc.BottomUpMultiClassConfig,
        {"confmaps": mc.BottomUpConfMapsConfig, "class_maps": mc.ClassMapConfig},
    ),
    "multi_class_topdown": (
        mc.TopDownCenteredInstanceMultiClassConfig,
        {"confmaps": mc.CenteredInstanceConfMapsConfig, "class_vectors": mc.ClassVectorsConfig},
    ),
}

NODES = ["head", "thorax", "abdomen", "wing_l", "wing_r"]
EDGES = [["head", "thorax"], ["thorax", "abdomen"], ["thorax", "wing_l"], ["thorax", "wing_r"]]
CLASSES = ["female", "male", "third"]

UNET = dict(
    in_channels=1,
    kernel_size=3,
    filters=8,
    filters_rate=1.5,
    max_stride=16,
    stem_stride=None,
    middle_block=True,
    up_interpolate=True,
    stacks=1,
    convs_per_block=2,
    output_stride=2,
)


def heads(model_type: str, stride: int, **options) -> dict:
    """A head config for `model_type`, as `sleap-nn train` fills it in."""
    confmaps = {"sigma": 2.5, "output_stride": stride}
    if model_type == "centroid":
        confmaps |= {"anchor_part": "thorax"} | options
        return {"confmaps": confmaps}
    confmaps["part_names"] = NODES
    if model_type in ("centered_instance", "multi_class_topdown"):
        confmaps["anchor_part"] = "thorax"
    if model_type == "bottomup":
        pafs = {"edges": EDGES, "sigma": 15.0, "output_stride": options.get("paf_stride", stride)}
        return {"confmaps": confmaps, "pafs": pafs}
    if model_type == "multi_class_bottomup":
        maps = {"classes": CLASSES, "sigma": 5.0, "output_stride": stride}
        return {"confmaps": confmaps, "class_maps": maps}
    if model_type == "multi_class_topdown":
        vectors = {"classes": CLASSES, "num_fc_layers": 1, "num_fc_units": 64} | options
        return {"confmaps": confmaps, "class_vectors": vectors}
    return {"confmaps": confmaps}


# (name, model type, UNet overrides, head config)
CASES = [
    ("single default", "single_instance", {}, heads("single_instance", 2)),
    (
        "single transposed",
        "single_instance",
        {"up_interpolate": False},
        heads("single_instance", 2),
    ),
    (
        "single rate2 stride32 k5",
        "single_instance",
        {"filters_rate": 2.0, "max_stride": 32, "output_stride": 4, "kernel_size": 5},
        heads("single_instance", 4),
    ),
    (
        "single odd filters rate 1.3",
        "single_instance",
        {"filters": 7, "filters_rate": 1.3, "max_stride": 32, "output_stride": 4},
        heads("single_instance", 4),
    ),
    (
        "single large rf preset",
        "single_instance",
        {"filters": 24, "max_stride": 32, "output_stride": 4},
        heads("single_instance", 4),
    ),
    (
        "single 3 convs transposed",
        "single_instance",
        {"convs_per_block": 3, "up_interpolate": False, "output_stride": 1},
        heads("single_instance", 1),
    ),
    (
        "single no middle block",
        "single_instance",
        {"filters_rate": 1.0, "middle_block": False},
        heads("single_instance", 2),
    ),
    (
        "single 1 conv no middle",
        "single_instance",
        {"filters_rate": 1.0, "middle_block": False, "convs_per_block": 1},
        heads("single_instance", 2),
    ),
    (
        "single stem 2",
        "single_instance",
        {"stem_stride": 2, "output_stride": 4},
        heads("single_instance", 4),
    ),
    (
        "single stem 2 transposed",
        "single_instance",
        {"stem_stride": 2, "up_interpolate": False, "output_stride": 1},
        heads("single_instance", 1),
    ),
    (
        "single stem 4 stride 8",
        "single_instance",
        {"stem_stride": 4, "output_stride": 8},
        heads("single_instance", 8),
    ),
    ("centroid", "centroid", {"output_stride": 4}, heads("centroid", 4)),
    (
        "centroid sigmoid rgb",
        "centroid",
        {"output_stride": 4, "in_channels": 3},
        heads("centroid", 4, use_sigmoid_activation=True),
    ),
    (
        "centroid empty decoder",
        "centroid",
        {"output_stride": 16},
        heads("centroid", 16),
    ),
    ("centered instance", "centered_instance", {}, heads("centered_instance", 2)),
    ("bottomup", "bottomup", {}, heads("bottomup", 2, paf_stride=4)),
    (
        "bottomup transposed",
        "bottomup",
        {"up_interpolate": False, "output_stride": 4},
        heads("bottomup", 4, paf_stride=8),
    ),
    (
        "multi-class bottomup",
        "multi_class_bottomup",
        {"output_stride": 4},
        heads("multi_class_bottomup", 4),
    ),
    (
        "multi-class topdown",
        "multi_class_topdown",
        {},
        heads("multi_class_topdown", 2, output_stride=16),
    ),
    (
        "multi-class topdown 2 fc",
        "multi_class_topdown",
        {"up_interpolate": False},
        heads("multi_class_topdown", 2, output_stride=16, num_fc_layers=2, num_fc_units=32),
    ),
    (
        "multi-class topdown 0 fc",
        "multi_class_topdown",
        {"filters_rate": 2.0},
        heads("multi_class_topdown", 2, output_stride=16, num_fc_layers=0, num_fc_units=128),
    ),
]


# UNet options sleap-nn cannot build or run; sleap-live must refuse them too.
UNRUNNABLE = [
    ("stacks 2", {"stacks": 2}),
    ("middle block with 1 conv", {"convs_per_block": 1}),
    ("no middle block, rate 1.5", {"middle_block": False}),
    ("stem 4, output stride 2", {"stem_stride": 4}),
]


def write_model_dir(path: Path, model_type: str, unet: dict, head_config: dict) -> None:
    """Save a randomly initialised sleap-nn model as `sleap-nn train` would."""
    config = OmegaConf.structured(TrainingJobConfig())
    config.model_config.backbone_config.unet = mc.UNetConfig(**(UNET | unet))
    head_class, leaf_classes = HEAD_CONFIGS[model_type]
    leaves = {key: leaf_classes[key](**leaf) for key, leaf in head_config.items()}
    config.model_config.head_configs[model_type] = head_class(**leaves)
    config.data_config.skeletons = [
        {
            "name": "fly",
            "nodes": [{"name": n} for n in NODES],
            "edges": [{"source": {"name": s}, "destination": {"name": d}} for s, d in EDGES],
            "symmetries": [],
        }
    ]
    config.data_config.preprocessing.crop_size = 96
    OmegaConf.save(config, path / "training_config.yaml")
    module = lm.LightningModel.get_lightning_model_from_config(config)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(path / "best.ckpt")
    checkpoint = torch.load(path / "best.ckpt", weights_only=False)
    checkpoint["config"] = config
    torch.save(checkpoint, path / "best.ckpt")


def sleap_nn_model(path: Path, model_type: str) -> torch.nn.Module:
    """The model sleap-nn's predict would load from `path`."""
    module, _, _ = _load_lightning_module(
        LIGHTNING_MODULES[model_type], str(path), model_type=model_type, device="cpu"
    )
    return module.model.eval()


def compare(path: Path, sizes: list[tuple[int, int]], channels: list[int] | None = None) -> float:
    """Largest output difference between sleap-nn and sleap-live on random inputs.

    Each size is run on a freshly loaded sleap-nn model: its "same" max pooling
    pads only on a model's first call.
    """
    spec = read_model_dir(path)
    ours = load_model_network(spec)
    theirs_state = torch.load(path / "best.ckpt", weights_only=False)["state_dict"]
    mine_state = read_state_dict(path / "best.ckpt")
    if set(theirs_state) != set(mine_state) or any(
        not torch.equal(theirs_state[k], mine_state[k]) for k in theirs_state
    ):
        raise SystemExit(f"{path}: checkpoint reader returned different weights")
    worst = 0.0
    for height, width in sizes:
        for c in channels or [spec.backbone.in_channels]:
            theirs = sleap_nn_model(path, spec.model_type)
            x = torch.rand(2, c, height, width)
            with torch.inference_mode():
                # sleap-nn's pooling pads odd sizes on its first call only; compare
                # against the steady state that every later predict batch sees.
                theirs(x.clone())
                expected = theirs(x.clone())
                got = ours(x.clone())
            if set(expected) != set(got):
                raise SystemExit(f"{path}: heads differ: {sorted(expected)} vs {sorted(got)}")
            for name in expected:
                if expected[name].shape != got[name].shape:
                    raise SystemExit(
                        f"{path}: {name} shape {tuple(got[name].shape)} "
                        f"!= {tuple(expected[name].shape)}"
                    )
                worst = max(worst, (expected[name] - got[name]).abs().max().item())
    return worst


def sleap_nn_runs(path: Path, stride: int) -> bool:
    try:
        with torch.inference_mode():
            sleap_nn_model(path, "single_instance")(torch.rand(1, 1, stride * 2, stride * 2))
    except Exception:
        return False
    return True


def check_unrunnable(tmp: Path) -> int:
    """Count configs that sleap-nn runs but sleap-live refuses, or the other way."""
    failures = 0
    for name, unet in UNRUNNABLE:
        path = tmp / name.replace(" ", "_").replace(",", "")
        path.mkdir()
        try:
            write_model_dir(path, "single_instance", unet, heads("single_instance", 2))
            theirs = sleap_nn_runs(path, read_model_dir(path).backbone.input_stride)
        except Exception:
            theirs = False
        try:
            build_network(read_training_config(path))
            ours = True
        except ModelConfigError:
            ours = False
        failures += theirs != ours
        verdict = "ok  " if theirs == ours else "FAIL"
        print(f"{verdict} {name:32s} sleap-nn runs: {theirs}, sleap-live builds: {ours}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dirs", nargs="*", type=Path, help="trained model directories")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    logger.remove()

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, model_type, unet, head_config in CASES:
            path = Path(tmp) / name.replace(" ", "_")
            path.mkdir()
            write_model_dir(path, model_type, unet, copy.deepcopy(head_config))
            stride = read_model_dir(path).backbone.input_stride
            sizes = [(stride * 3, stride * 4), (stride * 5, stride * 2)]
            if unet.get("stem_stride"):
                # Padded to max_stride only: sleap-nn's decoder resizes to its skips.
                sizes.append((stride // 2 * 5, stride // 2 * 3))
            channels = [1, 3] if name.startswith("centroid") else None
            diff = compare(path, sizes, channels)
            failures += diff > TOLERANCE
            print(f"{'ok  ' if diff <= TOLERANCE else 'FAIL'} {name:32s} max |diff| {diff:.2e}")
        failures += check_unrunnable(Path(tmp))

    trained = list(args.model_dirs)
    models = REPO / "tests" / "data" / "models"
    if models.is_dir():
        trained += sorted(p for p in models.iterdir() if (p / "best.ckpt").is_file())
    for path in dict.fromkeys(p.resolve() for p in trained):
        spec = read_model_dir(path)
        stride = spec.backbone.input_stride
        side = spec.preprocess.crop_size or 160
        side = -(-side // stride) * stride
        diff = compare(path, [(side, side), (side, side + stride)])
        failures += diff > TOLERANCE
        status = "ok  " if diff <= TOLERANCE else "FAIL"
        print(f"{status} trained {path.name:24s} max |diff| {diff:.2e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
