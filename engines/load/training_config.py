"""Reads the `training_config.yaml` `sleap-nn train` writes into a `ModelSpec`.

`parse_training_config` turns the config `sleap-nn train` writes into small frozen
records: the UNet backbone (`UNetSpec`), the output heads in the order sleap-nn
builds them (`HeadSpec`), the skeleton, and the preprocessing the model was trained
with (`PreprocessSpec`). Nothing here imports sleap-nn; values are derived the way
sleap-nn's predict derives them:

- The model type is the first non-null entry of `model_config.head_configs` and the
  backbone the first non-null entry of `model_config.backbone_config`, in file order.
  Kinds sleap-live does not run (segmentation models, pretrained and
  unknown backbones, unknown types) are refused first, by
  `sleap_live.engines.load.model_kind`. ConvNeXt and Swin backbones are read by
  `sleap_live.engines.load.backbone_specs`.
- `part_names` default to every skeleton node and PAF `edges` to the skeleton's edges
  (training fills both in; older or hand-written configs may leave them null).
- `scale` defaults to 1.0. `crop_size` is computed by `sleap-nn train` and written
  back into the config; predict never recomputes it, so a centered-instance model
  without one is unusable and rejected here.
- The anchor part is the `anchor_part` of the model's centroid or centered-instance
  head, resolved to its index in the skeleton's node names; predict fails when the
  name is not a node, so do we. (In a centroid + centered-instance pair, predict
  takes the centered-instance model's value, even when that one is null.)

Every option read here either shapes the model sleap-live builds or is checked
the way sleap-nn checks it; an option whose value sleap-live cannot reproduce is
refused with a `ModelConfigError` naming it, its value and the file:

- `centroid_method` / `centroid_fallback` are resolved and checked with sleap-nn's
  rules (known names; an `anchor_part` only with the anchor method; the anchor
  method only with an `anchor_part`). sleap-nn predict uses them only to compute
  ground-truth centroids from labels; on video the centroids are the centroid
  model's peaks, so they change no pose and sleap-live keeps nothing of them.
- `crop_mode` must be "fixed": "bbox" crops (resized boxes) are not implemented.
- `tiling.enabled` true (tiled inference) only on a single-instance model, the one
  pose model type sleap-nn tiles (`check_tiling`; its predict tiles no other); its
  geometry is read into a `TilingSpec` and checked as `check_tiling` checks it
  (`tile_size` a multiple of the backbone's and the head's strides, up to
  `MAX_TILE_SIZE`; `0 <= overlap < tile_size`; a known `blend`). A tiled model
  runs at the frame's own size: its `max_height` and `max_width` are not used.
- `class_output` must be "track" (what sleap-live reports); "identity" also stamps
  a `sio.Identity` on each instance, which sleap-live does not write.
- `ensure_rgb` and `ensure_grayscale` cannot both be true (sleap-nn refuses it).

Training-only settings (`sigma`, losses, augmentation, `min_crop_size`, ...) are
not read: predict does not read them either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

try:  # PyYAML's safe loader on libyaml, where PyYAML was built with it: about 5x
    # faster than the pure-Python one (every model load reads its configs), the same
    # documents as `yaml.safe_load`.
    from yaml import CSafeLoader as FastSafeLoader
except ImportError:  # pragma: no cover - a PyYAML built without libyaml
    from yaml import SafeLoader as FastSafeLoader  # type: ignore[assignment]

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.load.backbone_specs import parse_convnext, parse_swint
from sleap_live.engines.load.config_reader import (
    MAX_CHANNELS,
    MAX_KERNEL_SIZE,
    MAX_REPEATS,
    MAX_STRIDE,
    MAX_TILE_SIZE,
    ConfigReader,
    check_unet_channels,
)
from sleap_live.engines.load.model_kind import refuse_unrun_kind
from sleap_live.engines.load.spec import (
    BOX_MODEL_TYPES,
    CROP_MODEL_TYPES,
    DEFAULT_BOX_CATEGORY,
    MODEL_HEADS,
    TRAINING_CONFIG,
    AnchorSpec,
    BackboneSpec,
    HeadSpec,
    ModelSpec,
    PreprocessSpec,
    TilingSpec,
    UNetSpec,
    spec_of,
)
from sleap_live.engines.types import Skeleton

_UNET_KEYS = (
    "in_channels",
    "kernel_size",
    "filters",
    "filters_rate",
    "max_stride",
    "stem_stride",
    "middle_block",
    "up_interpolate",
    "stacks",
    "convs_per_block",
    "output_stride",
)

# sleap-nn's centroid methods (`sleap_nn.data.instance_centroids`): the whole-instance
# reductions, which are also the anchor method's fallbacks, and the anchor.
CENTROID_REDUCTIONS = ("center_of_mass", "bbox_center", "geometric_median")
CENTROID_METHODS = (*CENTROID_REDUCTIONS, "anchor")


def read_yaml(path: Path) -> Any:
    """The YAML document at `path` as plain Python objects.

    Raises:
        ModelConfigError: the file cannot be read or is not valid YAML.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ModelConfigError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError:
        raise ModelConfigError(f"{path}: not UTF-8 text") from None
    try:
        return yaml.load(text, Loader=FastSafeLoader)
    except (yaml.YAMLError, RecursionError):
        pass  # told below in the pure-Python loader's words, which name the problem better
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ModelConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ModelConfigError(f"{path}: nests too deeply to be a training config") from None


def read_training_config(model_dir: Path) -> ModelSpec:
    """Parse `model_dir/training_config.yaml` into a `ModelSpec`.

    Raises:
        ModelConfigError: the file is not valid YAML, lacks a required key, or
            describes a model sleap-live does not support.
    """
    return parse_training_config(read_yaml(Path(model_dir) / TRAINING_CONFIG), Path(model_dir))


def parse_training_config(config: Any, model_dir: Path) -> ModelSpec:
    """Turn a loaded `training_config.yaml` mapping into a `ModelSpec`.

    Args:
        config: the YAML document as plain Python objects.
        model_dir: the model directory; errors name its `TRAINING_CONFIG`.

    Raises:
        ModelConfigError: a required key is missing or a value is unsupported.
        UnsupportedModelError: the model is of a kind sleap-live does not run.
    """
    refuse_unrun_kind(config, Path(model_dir))
    reader = ConfigReader(Path(model_dir) / TRAINING_CONFIG)
    root = reader.mapping(config, "the document")
    model_config = reader.section(root, "", "model_config")
    data_config = reader.section(root, "", "data_config")

    backbone = _parse_backbone(
        reader, reader.section(model_config, "model_config", "backbone_config")
    )
    skeleton = _parse_skeleton(reader, data_config)
    model_type, heads = _parse_heads(
        reader, reader.section(model_config, "model_config", "head_configs"), skeleton
    )
    preprocess = _parse_preprocess(reader, data_config, model_type)
    tiling = _parse_tiling(reader, data_config, model_type, backbone, heads)
    if tiling is not None:
        preprocess = attrs.evolve(preprocess, tiling=tiling)

    version = root.get("sleap_nn_version")
    return spec_of(
        reader.path,
        heads,
        skeleton,
        path=Path(model_dir),
        model_type=model_type,
        backbone=backbone,
        preprocess=preprocess,
        sleap_nn_version=str(version) if version is not None else None,
    )


def _parse_backbone(reader: ConfigReader, backbones: Mapping) -> BackboneSpec:
    where = "model_config.backbone_config"
    backbone_type = next((k for k, v in backbones.items() if v is not None), None)
    if backbone_type is None:
        raise reader.error(f"{where} has no backbone set")
    if backbone_type == "convnext":
        where = f"{where}.convnext"
        return parse_convnext(reader, reader.mapping(backbones["convnext"], where), where)
    if backbone_type == "swint":
        where = f"{where}.swint"
        return parse_swint(reader, reader.mapping(backbones["swint"], where), where)
    where = f"{where}.unet"
    unet = reader.mapping(backbones["unet"], where)
    values = {key: reader.required(unet, key, where) for key in _UNET_KEYS}
    spec = UNetSpec(
        in_channels=reader.integer(values["in_channels"], f"{where}.in_channels", minimum=1),
        kernel_size=reader.integer(
            values["kernel_size"], f"{where}.kernel_size", minimum=1, most=MAX_KERNEL_SIZE
        ),
        filters=reader.integer(values["filters"], f"{where}.filters", minimum=1, most=MAX_CHANNELS),
        filters_rate=reader.number(values["filters_rate"], f"{where}.filters_rate"),
        max_stride=reader.power_of_two(
            values["max_stride"], f"{where}.max_stride", most=MAX_STRIDE
        ),
        stem_stride=(
            None
            if values["stem_stride"] is None
            else reader.power_of_two(values["stem_stride"], f"{where}.stem_stride", MAX_STRIDE)
        ),
        middle_block=reader.boolean(values["middle_block"], f"{where}.middle_block"),
        up_interpolate=reader.boolean(values["up_interpolate"], f"{where}.up_interpolate"),
        stacks=reader.integer(values["stacks"], f"{where}.stacks", minimum=1, most=MAX_REPEATS),
        convs_per_block=reader.integer(
            values["convs_per_block"], f"{where}.convs_per_block", minimum=1, most=MAX_REPEATS
        ),
        output_stride=reader.power_of_two(
            values["output_stride"], f"{where}.output_stride", most=MAX_STRIDE
        ),
    )
    # Levels 0 to log2(max_stride), the stem's included: the bottleneck's (and the
    # middle block's) is the last (`graph.network._level`).
    check_unet_channels(
        reader, spec.filters, spec.filters_rate, spec.max_stride.bit_length(), where
    )
    if spec.in_channels not in (1, 3):
        raise reader.error(f"{where}.in_channels is {spec.in_channels}; expected 1 or 3")
    if spec.output_stride > spec.max_stride:
        raise reader.error(
            f"{where}.output_stride {spec.output_stride} exceeds max_stride {spec.max_stride}"
        )
    if spec.down_blocks < 1:
        raise reader.error(
            f"{where}.stem_stride {spec.stem_stride} leaves no encoder blocks below "
            f"max_stride {spec.max_stride}"
        )
    return spec


def _parse_skeleton(reader: ConfigReader, data_config: Mapping) -> Skeleton:
    skeletons = reader.required(data_config, "skeletons", "data_config")
    if not isinstance(skeletons, list) or not skeletons:
        raise reader.error("data_config.skeletons is empty; the model has no skeleton")
    where = "data_config.skeletons[0]"
    skeleton = reader.mapping(skeletons[0], where)
    nodes = reader.required(skeleton, "nodes", where)
    if not isinstance(nodes, list) or not nodes:
        raise reader.error(f"{where}.nodes is empty")
    node_names = tuple(_name_of(reader, node, f"{where}.nodes") for node in nodes)
    edges = []
    for edge in skeleton.get("edges") or ():
        edge = reader.mapping(edge, f"{where}.edges")
        pair = []
        for end in ("source", "destination"):
            name = _name_of(reader, reader.required(edge, end, f"{where}.edges"), f"{where}.edges")
            if name not in node_names:
                raise reader.error(f"{where}.edges names {name!r}, which is not a node")
            pair.append(node_names.index(name))
        edges.append((pair[0], pair[1]))
    skeleton_name = skeleton.get("name")
    return Skeleton(
        node_names=node_names,
        edges=tuple(edges),
        name=str(skeleton_name) if skeleton_name is not None else "skeleton",
    )


def _name_of(reader: ConfigReader, item: Any, where: str) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping) and isinstance(item.get("name"), str):
        return item["name"]
    raise reader.error(f"{where} has an entry without a name: {item!r}")


def _parse_heads(
    reader: ConfigReader, head_configs: Mapping, skeleton: Skeleton
) -> tuple[str, tuple[HeadSpec, ...]]:
    model_type = next((k for k, v in head_configs.items() if v is not None), None)
    if model_type is None:
        raise reader.error("model_config.head_configs has no head set")
    # Types outside MODEL_HEADS were refused first (`model_kind.refuse_unrun_kind`).
    where = f"model_config.head_configs.{model_type}"
    head_config = reader.mapping(head_configs[model_type], where)
    known = {key for key, _ in MODEL_HEADS[model_type]}
    for key, value in head_config.items():
        if key not in known and value is not None:
            raise reader.error(f"unknown head {key!r} in {where}")

    heads: list[HeadSpec] = []
    for key, name in MODEL_HEADS[model_type]:
        leaf = reader.section(head_config, where, key)
        heads.append(_parse_head(reader, leaf, f"{where}.{key}", key, name, skeleton, heads))
    if model_type in BOX_MODEL_TYPES:
        # The decoder reads the size and offset maps at the centre map's cells.
        strides = {head.output_stride for head in heads}
        if len(strides) > 1:
            raise reader.error(
                f"{where}: the center, size and offset output_strides differ "
                f"({', '.join(str(head.output_stride) for head in heads)}); sleap-nn's "
                "decoder needs them equal"
            )
    return model_type, tuple(heads)


def _parse_head(
    reader: ConfigReader,
    leaf: Mapping,
    where: str,
    key: str,
    name: str,
    skeleton: Skeleton,
    previous: list[HeadSpec],
) -> HeadSpec:
    output_stride = reader.power_of_two(
        reader.required(leaf, "output_stride", where), f"{where}.output_stride"
    )
    head = HeadSpec(name=name, config_key=key, output_stride=output_stride)
    if name == "ClassVectorsHead":
        layers, units = _fc_layers(reader, leaf, where, units=64)
        return attrs.evolve(
            head,
            classes=_classes(reader, leaf, where),
            num_fc_layers=layers,
            num_fc_units=units,
            global_pool=reader.boolean(
                reader.optional(leaf, "global_pool", where, bool, True), f"{where}.global_pool"
            ),
        )
    if name == "ClassMapsHead":
        return attrs.evolve(head, classes=_classes(reader, leaf, where))
    if name == "EmbeddingHead":
        return _embedding_head(reader, leaf, where, head)
    if name == "BBoxCenterHead":
        categories = _string_list(reader, leaf.get("categories"), f"{where}.categories")
        return attrs.evolve(head, classes=categories or (DEFAULT_BOX_CATEGORY,))
    if name in ("BBoxSizeHead", "BBoxOffsetHead", "SegmentationHead"):
        return head
    if name == "SSDHead":
        categories = _string_list(reader, leaf.get("categories"), f"{where}.categories")
        return attrs.evolve(
            head,
            classes=categories or (DEFAULT_BOX_CATEGORY,),
            anchors=_anchors(reader, leaf, where, output_stride),
        )
    if name == "PartAffinityFieldsHead":
        part_names = previous[0].part_names
        edges = _edges(reader, leaf, where, skeleton)
        for edge in edges:
            for end in edge:
                if end not in part_names:
                    raise reader.error(f"{where}.edges names {end!r}, which is not a part")
        return attrs.evolve(
            head,
            edges=edges,
            edge_indices=tuple((part_names.index(s), part_names.index(d)) for s, d in edges),
        )
    part_names = ()
    if name != "CentroidConfmapsHead":
        part_names = _string_list(reader, leaf.get("part_names"), f"{where}.part_names")
        part_names = part_names or skeleton.node_names
    anchor_part = None
    if name in ("CentroidConfmapsHead", "CenteredInstanceConfmapsHead"):
        anchor_part = reader.optional(leaf, "anchor_part", where, str, None)
        _check_centroid_method(reader, leaf, where, anchor_part)
    return attrs.evolve(
        head,
        part_names=part_names,
        anchor_part=anchor_part,
        use_sigmoid_activation=reader.boolean(
            reader.optional(leaf, "use_sigmoid_activation", where, bool, False),
            f"{where}.use_sigmoid_activation",
        ),
    )


# sleap-nn's embedding pools (`EmbeddingHead.make_head`), and the crop centres
# sleap-live reproduces (`generate_centroids`: the mean of the found nodes, or the
# anchor node falling back to that mean).
EMBEDDING_POOLS = ("gem", "max", "avg")
EMBEDDING_CENTROIDS = ("center_of_mass", "anchor")


def _embedding_head(reader: ConfigReader, leaf: Mapping, where: str, head: HeadSpec) -> HeadSpec:
    """An embedding head, refusing what its crops or network would need that
    sleap-live does not reproduce."""
    pool = reader.optional(leaf, "pool", where, str, None)
    if pool not in EMBEDDING_POOLS:
        # Training resolves a null pool and writes it back; predict needs it set.
        raise reader.error(
            f"{where}.pool is {pool!r}; expected one of {', '.join(EMBEDDING_POOLS)}"
        )
    # Masks are a segmentation run's carrier, which sleap-live does not run.
    reader.supported(leaf, "detection_mode", where, ("pose",))
    anchor_part = reader.optional(leaf, "anchor_part", where, str, None)
    _check_centroid_method(reader, leaf, where, anchor_part)
    reader.supported(leaf, "centroid_method", where, EMBEDDING_CENTROIDS)
    reader.supported(leaf, "centroid_fallback", where, ("center_of_mass",))
    layers, units = _fc_layers(reader, leaf, where, units=256)
    return attrs.evolve(
        head,
        anchor_part=anchor_part,
        centroid_method=leaf.get("centroid_method")
        or ("anchor" if anchor_part else "center_of_mass"),
        embedding_dim=reader.integer(
            reader.required(leaf, "embedding_dim", where), f"{where}.embedding_dim", minimum=1
        ),
        num_fc_layers=layers,
        num_fc_units=units,
        pool=pool,
        normalize=reader.boolean(
            reader.optional(leaf, "normalize", where, bool, True), f"{where}.normalize"
        ),
    )


def _fc_layers(reader: ConfigReader, leaf: Mapping, where: str, units: int) -> tuple[int, int]:
    """A pooled head's fully connected layers: `num_fc_layers` (default 1) of
    `num_fc_units` (default `units`, sleap-nn's for that head)."""
    layers = reader.optional(leaf, "num_fc_layers", where, int, 1)
    width = reader.optional(leaf, "num_fc_units", where, int, units)
    return (
        reader.integer(layers, f"{where}.num_fc_layers", minimum=0),
        reader.integer(width, f"{where}.num_fc_units", minimum=1),
    )


def _classes(reader: ConfigReader, leaf: Mapping, where: str) -> tuple[str, ...]:
    classes = _string_list(reader, leaf.get("classes"), f"{where}.classes")
    if not classes:
        raise reader.error(f"{where}.classes is empty; an identity model needs its class names")
    # sleap-live reports each class as a track, which is sleap-nn's "track" output.
    reader.supported(leaf, "class_output", where, ("track",))
    return classes


def _check_centroid_method(
    reader: ConfigReader, leaf: Mapping, where: str, anchor_part: str | None
) -> None:
    """Refuses centroid settings that sleap-nn's `resolve_centroid_method` refuses."""
    method = reader.optional(leaf, "centroid_method", where, str, None)
    fallback = reader.optional(leaf, "centroid_fallback", where, str, None)
    if method is not None and method not in CENTROID_METHODS:
        raise reader.error(
            f"{where}.centroid_method {method!r} is unknown (expected one of "
            f"{', '.join(CENTROID_METHODS)})"
        )
    if fallback is not None and fallback not in CENTROID_REDUCTIONS:
        raise reader.error(
            f"{where}.centroid_fallback {fallback!r} is unknown (expected one of "
            f"{', '.join(CENTROID_REDUCTIONS)})"
        )
    if anchor_part is not None and method not in (None, "anchor"):
        raise reader.error(
            f"{where}.centroid_method {method!r} contradicts anchor_part {anchor_part!r} "
            f"(sleap-nn refuses both; use centroid_fallback {method!r} instead)"
        )
    if anchor_part is None and method == "anchor":
        raise reader.error(f"{where}.centroid_method 'anchor' needs an anchor_part")


def _edges(
    reader: ConfigReader, leaf: Mapping, where: str, skeleton: Skeleton
) -> tuple[tuple[str, str], ...]:
    edges = leaf.get("edges")
    if edges is None:
        names = skeleton.node_names
        return tuple((names[s], names[d]) for s, d in skeleton.edges)
    if not isinstance(edges, list):
        raise reader.error(f"{where}.edges is not a list")
    pairs = []
    for edge in edges:
        if not (
            isinstance(edge, list) and len(edge) == 2 and all(isinstance(n, str) for n in edge)
        ):
            raise reader.error(f"{where}.edges entry {edge!r} is not a [source, destination] pair")
        pairs.append((edge[0], edge[1]))
    return tuple(pairs)


def _anchors(reader: ConfigReader, leaf: Mapping, where: str, output_stride: int) -> AnchorSpec:
    """An SSD head's pyramid and anchors, with sleap-nn 0.3.5's defaults
    (`config/model_config.py` `SSDHeadConfig`)."""
    levels = reader.integer(
        reader.optional(leaf, "num_levels", where, int, 3), f"{where}.num_levels", minimum=1
    )
    sizes = _numbers(reader, leaf, "anchor_sizes", where, None)
    if len(sizes) != levels:
        # sleap-nn writes the sizes it chose from the labels into the saved config.
        raise reader.error(
            f"{where}.anchor_sizes is {leaf.get('anchor_sizes')!r}; expected one size "
            f"per pyramid level ({levels})"
        )
    return AnchorSpec(
        strides=tuple(output_stride * 2**i for i in range(levels)),
        sizes=sizes,
        scales=_numbers(reader, leaf, "anchor_scales", where, (1.0, 1.26, 1.587)),
        aspect_ratios=_numbers(reader, leaf, "aspect_ratios", where, (0.5, 1.0, 2.0)),
        variances=_numbers(reader, leaf, "box_variances", where, (0.1, 0.1, 0.2, 0.2), length=4),
        head_channels=reader.integer(
            reader.optional(leaf, "head_channels", where, int, 128),
            f"{where}.head_channels",
            minimum=1,
        ),
        head_convs=reader.integer(
            reader.optional(leaf, "head_convs", where, int, 1), f"{where}.head_convs", minimum=0
        ),
    )


def _numbers(
    reader: ConfigReader,
    leaf: Mapping,
    key: str,
    where: str,
    default: tuple[float, ...] | None,
    length: int | None = None,
) -> tuple[float, ...]:
    """`where.key`: a non-empty list of positive numbers (`length` of them if given),
    or `default` when absent or null (None: required)."""
    value = leaf.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, list) or not value or (length is not None and len(value) != length):
        count = "a list of positive numbers" if length is None else f"{length} positive numbers"
        raise reader.error(f"{where}.{key} is {value!r}; expected {count}")
    return tuple(reader.number(v, f"{where}.{key}") for v in value)


def _string_list(reader: ConfigReader, value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise reader.error(f"{where} is not a list of names")
    return tuple(value)


def _parse_preprocess(
    reader: ConfigReader, data_config: Mapping, model_type: str
) -> PreprocessSpec:
    where = "data_config.preprocessing"
    section = reader.optional(data_config, "preprocessing", "data_config", Mapping, {})
    scale = reader.optional(section, "scale", where, (int, float), 1.0)
    if isinstance(scale, bool) or not scale > 0:
        raise reader.error(f"{where}.scale is {scale!r}; expected a positive number")
    max_height = reader.optional(section, "max_height", where, int, None)
    max_width = reader.optional(section, "max_width", where, int, None)
    for key, size in (("max_height", max_height), ("max_width", max_width)):
        if size is not None:
            reader.integer(size, f"{where}.{key}", minimum=1)
    crop_size = reader.optional(section, "crop_size", where, int, None)
    # "bbox" crops resize a box detector's boxes (sleap-nn's `BBoxCropSpec`), which
    # sleap-live does not; its box detectors seed fixed-size crops at box centres.
    reader.supported(section, "crop_mode", where, ("fixed",))
    ensure_rgb = reader.boolean(
        reader.optional(section, "ensure_rgb", where, bool, False), f"{where}.ensure_rgb"
    )
    ensure_grayscale = reader.boolean(
        reader.optional(section, "ensure_grayscale", where, bool, False),
        f"{where}.ensure_grayscale",
    )
    if ensure_rgb and ensure_grayscale:
        raise reader.error(
            f"{where}.ensure_rgb and ensure_grayscale are both true; sleap-nn refuses "
            "this too (choose one)"
        )
    if model_type in CROP_MODEL_TYPES and crop_size is None:
        raise reader.error(
            f"{where}.crop_size is null; sleap-nn train writes the crop size of a "
            f"{model_type} model here and predict cannot run without it"
        )
    return PreprocessSpec(
        ensure_rgb=ensure_rgb,
        ensure_grayscale=ensure_grayscale,
        scale=float(scale),
        max_height=max_height,
        max_width=max_width,
        crop_size=crop_size,
    )


# sleap-nn's importance windows (`TilingConfig.blend`).
TILING_BLENDS = ("gaussian", "pyramid", "constant")


def _parse_tiling(
    reader: ConfigReader,
    data_config: Mapping,
    model_type: str,
    backbone: BackboneSpec,
    heads: tuple[HeadSpec, ...],
) -> TilingSpec | None:
    """The tiling of a model trained for tiled inference, checked as sleap-nn's
    `check_tiling` checks it; None when tiling is off."""
    where = "data_config.preprocessing.tiling"
    section = reader.optional(data_config, "preprocessing", "data_config", Mapping, {})
    tiling = reader.optional(section, "tiling", "data_config.preprocessing", Mapping, {})
    enabled = reader.optional(tiling, "enabled", where, bool, False)
    if not enabled:
        return None
    if model_type != "single_instance":
        raise reader.error(
            f"{where}.enabled is true on a {model_type} model; sleap-nn tiles only "
            "single-instance pose models (sleap-live does not run its tiled segmentation)"
        )
    tile_size = reader.optional(tiling, "tile_size", where, int, None)
    overlap = reader.optional(tiling, "overlap", where, int, None)
    if tile_size is None or overlap is None:
        raise reader.error(
            f"{where}.tile_size or overlap is null; sleap-nn train writes the tiling "
            "geometry here and predict cannot tile without it"
        )
    tile_size = reader.integer(tile_size, f"{where}.tile_size", minimum=1, most=MAX_TILE_SIZE)
    output_stride = min(head.output_stride for head in heads)
    divisor = math.lcm(backbone.max_stride, output_stride)
    if tile_size % divisor:
        raise reader.error(
            f"{where}.tile_size {tile_size} is not a multiple of {divisor} (the backbone's "
            f"max_stride {backbone.max_stride} and the output stride {output_stride})"
        )
    overlap = reader.integer(overlap, f"{where}.overlap", minimum=0)
    if overlap >= tile_size:
        raise reader.error(
            f"{where}.overlap {overlap} is not below tile_size {tile_size} "
            "(a tile must advance; sleap-nn refuses it too)"
        )
    fraction = reader.optional(tiling, "min_overlap_fraction", where, (int, float), 0.25)
    if isinstance(fraction, bool) or not 0 <= fraction <= 1:
        raise reader.error(f"{where}.min_overlap_fraction is {fraction!r}; expected 0 to 1")
    reader.supported(tiling, "blend", where, TILING_BLENDS)
    sigma_scale = reader.optional(tiling, "sigma_scale", where, (int, float), 0.125)
    if isinstance(sigma_scale, bool) or not 0 < sigma_scale <= 1:
        raise reader.error(f"{where}.sigma_scale is {sigma_scale!r}; expected above 0, up to 1")
    return TilingSpec(
        tile_size=tile_size,
        overlap=overlap,
        min_overlap_fraction=float(fraction),
        blend=tiling.get("blend") or "gaussian",
        sigma_scale=float(sigma_scale),
    )
