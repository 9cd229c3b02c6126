"""Reads a SLEAP 1.x model folder (`training_config.json` + `best_model.h5`) into a `ModelSpec`.

SLEAP 1.x (the TensorFlow SLEAP) writes a model folder with `training_config.json`
(its cattrs `TrainingJobConfig`) and the Keras model `best_model.h5`. The records
made here are the ones a sleap-nn directory gives, with sleap-nn's head names, so
the rest of sleap-live treats both alike; `ModelSpec.legacy` carries what SLEAP 1.x
adds (the weights file, the offset-refinement heads, its input scaling).

Facts taken from SLEAP 1.4's source (`sleap/nn/config`, `sleap/nn/model.py`,
`sleap/nn/architectures/unet.py`):

- The backbone is the one non-null entry of `model.backbone` (leap, unet,
  hourglass, resnet, pretrained_encoder); only a UNet is run here.
- `UNet.from_config` ignores any kernel size or convs-per-block setting: 3x3
  kernels, 2 convolutions per block.
- The model type is the one non-null entry of `model.heads`; `multi_instance` is
  sleap-nn's `bottomup`.
- The backbone's output stride is the stride of the first (confidence map) head.
- A confidence map head with `offset_refinement: true` has an
  `OffsetRefinementHead` beside it (two channels per part, x then y).
- `part_names`, `edges` and `classes` may be null, meaning the skeleton's nodes,
  the skeleton's edges.
- The input channels are those of the Keras model's input layer (the config does
  not record them): read from the `.h5` file's `model_config`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py

from sleap_live.engines.errors import CheckpointError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.load.spec import (
    CROP_MODEL_TYPES,
    LEGACY_TRAINING_CONFIG,
    LEGACY_WEIGHTS,
    HeadSpec,
    LegacySpec,
    ModelSpec,
    PreprocessSpec,
    UNetSpec,
)
from sleap_live.engines.types import Skeleton

# SLEAP 1.x backbones, by config key, as users know them.
LEGACY_BACKBONES: Mapping[str, str] = {
    "unet": "UNet",
    "leap": "LEAP CNN",
    "hourglass": "stacked hourglass",
    "resnet": "ResNet",
    "pretrained_encoder": "pretrained-encoder UNet",
}

# SLEAP 1.x head config key -> (sleap-nn model type, ((head config key, head name), ...)).
LEGACY_HEADS: Mapping[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "single_instance": ("single_instance", ((".", "SingleInstanceConfmapsHead"),)),
    "centroid": ("centroid", ((".", "CentroidConfmapsHead"),)),
    "centered_instance": ("centered_instance", ((".", "CenteredInstanceConfmapsHead"),)),
    "multi_instance": (
        "bottomup",
        (("confmaps", "MultiInstanceConfmapsHead"), ("pafs", "PartAffinityFieldsHead")),
    ),
    "multi_class_bottomup": (
        "multi_class_bottomup",
        (("confmaps", "MultiInstanceConfmapsHead"), ("class_maps", "ClassMapsHead")),
    ),
    "multi_class_topdown": (
        "multi_class_topdown",
        (
            ("confmaps", "CenteredInstanceConfmapsHead"),
            ("class_vectors", "ClassVectorsHead"),
        ),
    ),
}

# SLEAP 1.x's UNet.from_config fixes these whatever the config says.
LEGACY_KERNEL_SIZE = 3
LEGACY_CONVS_PER_BLOCK = 2


def is_legacy_model_dir(path: Path) -> bool:
    """Whether `path` is a SLEAP 1.x model folder (it has `training_config.json`)."""
    return (Path(path) / LEGACY_TRAINING_CONFIG).is_file()


def read_legacy_config(model_dir: Path) -> ModelSpec:
    """The `ModelSpec` of a SLEAP 1.x model folder.

    Raises:
        ModelNotFoundError: `best_model.h5` is missing.
        ModelConfigError: the config is unreadable, or describes a model sleap-live
            does not run (a backbone other than UNet, an unknown model type).
        CheckpointError: the `.h5` file is not a Keras model file.
    """
    model_dir = Path(model_dir)
    config_path = model_dir / LEGACY_TRAINING_CONFIG
    config = _read_json(config_path)
    model = _mapping(config.get("model"), config_path, "model")
    backbone_key, backbone = _one_of(model.get("backbone"), config_path, "model.backbone")
    if backbone_key != "unet":
        kind = LEGACY_BACKBONES.get(backbone_key, backbone_key)
        raise ModelConfigError(
            f"{model_dir}: a SLEAP 1.x {kind} model; sleap-live runs only SLEAP 1.x UNet models"
        )
    head_key, head_config = _one_of(model.get("heads"), config_path, "model.heads")
    if head_key not in LEGACY_HEADS:
        raise ModelConfigError(
            f"{model_dir}: a SLEAP 1.x {head_key} model, which sleap-live does not run"
        )
    weights_path = model_dir / LEGACY_WEIGHTS
    if not weights_path.is_file():
        raise ModelNotFoundError(f"{weights_path}: not found (training unfinished?)")
    skeleton = _skeleton(config, config_path)
    model_type, head_names = LEGACY_HEADS[head_key]
    heads = tuple(
        _head(name, head_config if key == "." else head_config.get(key), skeleton, config_path)
        for key, name in head_names
    )
    confmaps_config = head_config if head_names[0][0] == "." else head_config["confmaps"]
    offset_heads = (heads[0].name,) if confmaps_config.get("offset_refinement") else ()
    data = _mapping(config.get("data"), config_path, "data")
    preprocessing = _mapping(data.get("preprocessing"), config_path, "data.preprocessing")
    cropping = data.get("instance_cropping") or {}
    input_scaling = float(preprocessing.get("input_scaling") or 1.0)
    unet = _mapping(backbone, config_path, "model.backbone.unet")
    stem_stride = unet.get("stem_stride")
    max_stride = int(unet["max_stride"])
    backbone_spec = UNetSpec(
        in_channels=_input_channels(weights_path),
        kernel_size=LEGACY_KERNEL_SIZE,
        filters=int(unet["filters"]),
        filters_rate=float(unet["filters_rate"]),
        max_stride=max_stride,
        stem_stride=int(stem_stride) if stem_stride else None,
        middle_block=bool(unet["middle_block"]),
        up_interpolate=bool(unet["up_interpolate"]),
        stacks=int(unet.get("stacks") or 1),
        convs_per_block=LEGACY_CONVS_PER_BLOCK,
        output_stride=heads[0].output_stride,
    )
    if backbone_spec.stacks != 1:
        raise ModelConfigError(f"{config_path}: unet.stacks {backbone_spec.stacks} is not run")
    crop_size = cropping.get("crop_size") if model_type in CROP_MODEL_TYPES else None
    if model_type in CROP_MODEL_TYPES and not crop_size:
        raise ModelConfigError(f"{config_path}: data.instance_cropping.crop_size is not set")
    preprocess = PreprocessSpec(
        ensure_rgb=bool(preprocessing.get("ensure_rgb")),
        ensure_grayscale=bool(preprocessing.get("ensure_grayscale")),
        scale=input_scaling,
        crop_size=int(crop_size) if crop_size else None,
    )
    anchor_name = heads[0].anchor_part
    anchor = None
    if anchor_name is not None:
        if anchor_name not in skeleton.node_names:
            raise ModelConfigError(f"{config_path}: anchor_part {anchor_name!r} is not a node")
        anchor = skeleton.node_names.index(anchor_name)
    return ModelSpec(
        path=model_dir,
        model_type=model_type,
        skeleton=skeleton,
        backbone=backbone_spec,
        heads=heads,
        preprocess=preprocess,
        class_names=next((head.classes for head in heads if head.classes), ()),
        anchor_part=anchor,
        anchor_part_name=anchor_name,
        legacy=LegacySpec(
            weights_path=weights_path, offset_heads=offset_heads, input_scaling=input_scaling
        ),
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except OSError as e:
        raise ModelConfigError(f"{path}: cannot read: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ModelConfigError(f"{path}: not a valid JSON training config ({e})") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path}: not a JSON object")
    return config


def _mapping(value: Any, path: Path, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelConfigError(f"{path}: {where} is missing or not an object")
    return value


def _one_of(value: Any, path: Path, where: str) -> tuple[str, Mapping[str, Any]]:
    """The one non-null entry of a cattrs `oneof` section."""
    entries = [(key, item) for key, item in _mapping(value, path, where).items() if item]
    if len(entries) != 1:
        found = ", ".join(key for key, _ in entries) or "none"
        raise ModelConfigError(f"{path}: {where} must have exactly one entry set (found {found})")
    key, item = entries[0]
    return key, _mapping(item, path, f"{where}.{key}")


def _skeleton(config: Mapping[str, Any], path: Path) -> Skeleton:
    from sleap_io.io.skeleton import decode_training_config

    try:
        decoded = decode_training_config(dict(config))
    except (ValueError, KeyError, TypeError) as e:
        raise ModelConfigError(f"{path}: no readable skeleton in data.labels ({e})") from None
    skeletons = decoded if isinstance(decoded, list) else [decoded]
    if not skeletons:
        raise ModelConfigError(f"{path}: data.labels.skeletons is empty")
    first = skeletons[0]
    names = tuple(first.node_names)
    return Skeleton(
        node_names=names,
        edges=tuple(
            (names.index(e.source.name), names.index(e.destination.name)) for e in first.edges
        ),
        name=first.name or "skeleton",
    )


def _head(name: str, config: Any, skeleton: Skeleton, path: Path) -> HeadSpec:
    config = _mapping(config, path, f"model.heads ({name})")
    stride = int(config.get("output_stride") or 1)
    if name == "CentroidConfmapsHead":
        return HeadSpec(name, "confmaps", stride, anchor_part=config.get("anchor_part"))
    if name == "PartAffinityFieldsHead":
        edges = tuple(tuple(edge) for edge in config.get("edges") or ())
        if not edges:
            edges = tuple(
                (skeleton.node_names[a], skeleton.node_names[b]) for a, b in skeleton.edges
            )
        pairs = tuple((str(a), str(b)) for a, b in edges)
        for a, b in pairs:
            if a not in skeleton.node_names or b not in skeleton.node_names:
                raise ModelConfigError(
                    f"{path}: PAF edge ({a}, {b}) names a part not in the skeleton"
                )
        indices = tuple(
            (skeleton.node_names.index(a), skeleton.node_names.index(b)) for a, b in pairs
        )
        return HeadSpec(name, "pafs", stride, edges=pairs, edge_indices=indices)
    if name in ("ClassMapsHead", "ClassVectorsHead"):
        classes = tuple(str(c) for c in config.get("classes") or ())
        if not classes:
            raise ModelConfigError(f"{path}: {name} has no classes")
        key = "class_maps" if name == "ClassMapsHead" else "class_vectors"
        return HeadSpec(
            name,
            key,
            stride,
            classes=classes,
            num_fc_layers=int(config.get("num_fc_layers") or 0),
            num_fc_units=int(config.get("num_fc_units") or 0),
            global_pool=bool(config.get("global_pool", True)),
        )
    parts = tuple(str(p) for p in config.get("part_names") or skeleton.node_names)
    if set(parts) - set(skeleton.node_names):
        raise ModelConfigError(f"{path}: part_names {parts} are not the skeleton's nodes")
    return HeadSpec(
        name, "confmaps", stride, part_names=parts, anchor_part=config.get("anchor_part")
    )


def _input_channels(weights_path: Path) -> int:
    """Channels of the Keras model's input layer, from the `.h5` file's model config."""
    try:
        with h5py.File(weights_path, "r") as f:
            model_config = json.loads(f.attrs["model_config"])
        layer = model_config["config"]["layers"][0]["config"]
        shape = layer.get("batch_input_shape") or layer.get("batch_shape")
        return int(shape[-1])
    except (OSError, KeyError, IndexError, TypeError, ValueError) as e:
        raise CheckpointError(f"{weights_path}: not a Keras model file ({e})") from None
