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

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py

from sleap_live.engines.errors import CheckpointError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.load.config_reader import (
    MAX_CHANNELS,
    MAX_STRIDE,
    ConfigReader,
    check_unet_channels,
)
from sleap_live.engines.load.keras_h5 import read_model_config
from sleap_live.engines.load.metadata import MAX_CLASSES, MAX_EDGES, MAX_NODES, bounded_json_object
from sleap_live.engines.load.spec import (
    CROP_MODEL_TYPES,
    LEGACY_TRAINING_CONFIG,
    LEGACY_WEIGHTS,
    HeadSpec,
    LegacySpec,
    ModelSpec,
    PreprocessSpec,
    UNetSpec,
    spec_of,
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

# Bounds on what a SLEAP 1.x config may ask for, each checked before the work it
# bounds (reading, parsing, sizing the network), so a crafted folder is refused in
# one line. Each is far above what SLEAP 1.x makes:
# - The committed configs are 0.7 to 7.9 KB and nest 11 levels deep
#   (tests/data/legacy_models); the skeleton is most of a config.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
MAX_CONFIG_DEPTH = 64
# - max_stride and each UNet level's channels: `config_reader.MAX_STRIDE` and
#   `MAX_CHANNELS`, shared with sleap-nn's configs.
# - The class-vector head's dense layers: SLEAP 1.x's default is 1 of 64 units
#   (`ClassVectorsHeadConfig`).
MAX_FC_LAYERS = 64
# - The crop a top-down model takes: its editor offers crop sizes up to 832.
MAX_CROP_SIZE = 16384
# - input_scaling resizes each frame before the network: SLEAP 1.x's default is 1.0
#   and models of small animals use up to a few times that.
MAX_INPUT_SCALING = 16.0


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
    reader = ConfigReader(config_path)
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
        _head(name, head_config if key == "." else head_config.get(key), skeleton, reader)
        for key, name in head_names
    )
    confmaps_config = head_config if head_names[0][0] == "." else head_config["confmaps"]
    offset_heads = (heads[0].name,) if confmaps_config.get("offset_refinement") else ()
    data = _mapping(config.get("data"), config_path, "data")
    preprocessing = _mapping(data.get("preprocessing"), config_path, "data.preprocessing")
    cropping = _mapping(data.get("instance_cropping") or {}, config_path, "data.instance_cropping")
    input_scaling = _bounded_number(
        reader,
        preprocessing.get("input_scaling") or 1.0,
        "data.preprocessing.input_scaling",
        MAX_INPUT_SCALING,
    )
    unet = _mapping(backbone, config_path, "model.backbone.unet")
    where = "model.backbone.unet"
    stem_stride = reader.optional(unet, "stem_stride", where, int, None)
    max_stride = reader.power_of_two(
        reader.required(unet, "max_stride", where), f"{where}.max_stride"
    )
    if max_stride > MAX_STRIDE:
        raise reader.error(f"{where}.max_stride is {max_stride}; at most {MAX_STRIDE} is run")
    filters = _whole(
        reader, reader.required(unet, "filters", where), f"{where}.filters", MAX_CHANNELS
    )
    filters_rate = reader.number(
        reader.required(unet, "filters_rate", where), f"{where}.filters_rate"
    )
    middle_block = bool(reader.required(unet, "middle_block", where))
    # The encoder's levels 0 to log2(max_stride) - 1, and the middle block's next one.
    levels = max_stride.bit_length() - 1 + (1 if middle_block else 0)
    check_unet_channels(reader, filters, filters_rate, levels, where)
    stacks = _whole(reader, unet.get("stacks") or 1, f"{where}.stacks", MAX_STRIDE)
    backbone_spec = UNetSpec(
        in_channels=_input_channels(weights_path),
        kernel_size=LEGACY_KERNEL_SIZE,
        filters=filters,
        filters_rate=filters_rate,
        max_stride=max_stride,
        stem_stride=stem_stride or None,
        middle_block=middle_block,
        up_interpolate=bool(reader.required(unet, "up_interpolate", where)),
        stacks=stacks,
        convs_per_block=LEGACY_CONVS_PER_BLOCK,
        output_stride=heads[0].output_stride,
    )
    if backbone_spec.stacks != 1:
        raise ModelConfigError(f"{config_path}: unet.stacks {backbone_spec.stacks} is not run")
    crop_size = cropping.get("crop_size") if model_type in CROP_MODEL_TYPES else None
    if model_type in CROP_MODEL_TYPES and not crop_size:
        raise ModelConfigError(f"{config_path}: data.instance_cropping.crop_size is not set")
    if crop_size:
        crop_size = _whole(reader, crop_size, "data.instance_cropping.crop_size", MAX_CROP_SIZE)
    preprocess = PreprocessSpec(
        ensure_rgb=bool(preprocessing.get("ensure_rgb")),
        ensure_grayscale=bool(preprocessing.get("ensure_grayscale")),
        scale=input_scaling,
        crop_size=int(crop_size) if crop_size else None,
    )
    return spec_of(
        config_path,
        heads,
        skeleton,
        path=model_dir,
        model_type=model_type,
        backbone=backbone_spec,
        preprocess=preprocess,
        legacy=LegacySpec(
            weights_path=weights_path, offset_heads=offset_heads, input_scaling=input_scaling
        ),
    )


def _read_json(path: Path) -> dict[str, Any]:
    """The config's JSON object, its size and depth bounded before it is parsed."""
    try:
        with path.open("rb") as file:
            text = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ModelConfigError(f"{path}: cannot read: {e.strerror or e}") from e
    return bounded_json_object(
        text, f"{path}: the training config", MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, ModelConfigError
    )


def _whole(reader: ConfigReader, value: Any, where: str, most: int) -> int:
    """A whole number from 1 to `most` (cattrs may have written it as 16.0)."""
    if isinstance(value, float) and value.is_integer() and 1 <= value <= most:
        value = int(value)
    number = reader.integer(value, where, minimum=1)
    if number > most:
        raise reader.error(f"{where} is {number}; at most {most} is run")
    return number


def _bounded_number(reader: ConfigReader, value: Any, where: str, most: float) -> float:
    number = reader.number(value, where)
    if not math.isfinite(number) or number > most:
        raise reader.error(f"{where} is {value!r}; expected a number up to {most}")
    return number


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

    labels = config.get("data", {}).get("labels") if isinstance(config.get("data"), dict) else None
    skeletons = labels.get("skeletons") if isinstance(labels, dict) else None
    if not isinstance(skeletons, list) or not skeletons:
        raise ModelConfigError(f"{path}: data.labels.skeletons is missing or empty")
    # sleap-io decodes jsonpickle's records as they come: their shape is checked first.
    for i, record in enumerate(skeletons):
        where = f"data.labels.skeletons[{i}]"
        if not isinstance(record, dict):
            raise ModelConfigError(f"{path}: {where} is not an object")
        for key, most in (("nodes", MAX_NODES), ("links", MAX_EDGES)):
            entries = record.get(key)
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ModelConfigError(f"{path}: {where}.{key} is not a list of objects")
            if len(entries) > most:
                raise ModelConfigError(
                    f"{path}: {where}.{key} has {len(entries)} entries, more than {most}"
                )
    try:
        decoded = decode_training_config(dict(config))
    # What the decoder raises on records of the right shape but wrong contents.
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ModelConfigError(f"{path}: no readable skeleton in data.labels ({e!r})") from None
    decoded_list = decoded if isinstance(decoded, list) else [decoded]
    if not decoded_list:
        raise ModelConfigError(f"{path}: data.labels.skeletons is empty")
    first = decoded_list[0]
    names = tuple(first.node_names)
    return Skeleton(
        node_names=names,
        edges=tuple(
            (names.index(e.source.name), names.index(e.destination.name)) for e in first.edges
        ),
        name=first.name or "skeleton",
    )


def _head(name: str, config: Any, skeleton: Skeleton, reader: ConfigReader) -> HeadSpec:
    path = reader.path
    where = f"model.heads ({name})"
    config = _mapping(config, path, where)
    stride = reader.power_of_two(config.get("output_stride") or 1, f"{where}.output_stride")
    if stride > MAX_STRIDE:
        raise reader.error(f"{where}.output_stride is {stride}; at most {MAX_STRIDE} is run")
    if name == "CentroidConfmapsHead":
        return HeadSpec(name, "confmaps", stride, anchor_part=config.get("anchor_part"))
    if name == "PartAffinityFieldsHead":
        edges = _names(reader, config.get("edges") or [], f"{where}.edges", MAX_EDGES)
        if not edges:
            edges = [[skeleton.node_names[a], skeleton.node_names[b]] for a, b in skeleton.edges]
        if not all(isinstance(edge, list) and len(edge) == 2 for edge in edges):
            raise reader.error(f"{where}.edges is not a list of [source, destination] pairs")
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
        classes = tuple(
            str(c)
            for c in _names(reader, config.get("classes") or [], f"{where}.classes", MAX_CLASSES)
        )
        if not classes:
            raise ModelConfigError(f"{path}: {name} has no classes")
        key = "class_maps" if name == "ClassMapsHead" else "class_vectors"
        layers = config.get("num_fc_layers") or 0
        units = config.get("num_fc_units") or 0
        return HeadSpec(
            name,
            key,
            stride,
            classes=classes,
            num_fc_layers=_whole(reader, layers, f"{where}.num_fc_layers", MAX_FC_LAYERS)
            if layers
            else 0,
            num_fc_units=_whole(reader, units, f"{where}.num_fc_units", MAX_CHANNELS)
            if units
            else 0,
            global_pool=bool(config.get("global_pool", True)),
        )
    part_names = _names(reader, config.get("part_names") or [], f"{where}.part_names", MAX_NODES)
    parts = tuple(str(p) for p in part_names or skeleton.node_names)
    if set(parts) - set(skeleton.node_names):
        raise ModelConfigError(f"{path}: part_names {parts} are not the skeleton's nodes")
    return HeadSpec(
        name, "confmaps", stride, part_names=parts, anchor_part=config.get("anchor_part")
    )


def _names(reader: ConfigReader, value: Any, where: str, most: int) -> list[Any]:
    """A list of at most `most` entries."""
    if not isinstance(value, list):
        raise reader.error(f"{where} is {type(value).__name__}; expected a list")
    if len(value) > most:
        raise reader.error(f"{where} has {len(value)} entries, more than {most}")
    return value


def _input_channels(weights_path: Path) -> int:
    """Channels of the Keras model's input layer, from the `.h5` file's model config:
    1 or 3, as SLEAP 1.x makes them (gray or RGB frames)."""
    try:
        with h5py.File(weights_path, "r") as f:
            model_config = read_model_config(f, weights_path)
        layer = model_config["config"]["layers"][0]["config"]
        shape = layer.get("batch_input_shape") or layer.get("batch_shape")
        channels = shape[-1]
    except (OSError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{weights_path}: not a Keras model file ({e!r})") from None
    if channels not in (1, 3) or isinstance(channels, bool):
        raise CheckpointError(
            f"{weights_path}: model_config's input layer has {channels!r} channels; expected 1 or 3"
        )
    return int(channels)
