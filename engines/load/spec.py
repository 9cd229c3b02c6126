"""What a trained sleap-nn model is, read from its `training_config.yaml`.

`parse_training_config` turns the config `sleap-nn train` writes into small frozen
records: the UNet backbone (`UNetSpec`), the output heads in the order sleap-nn
builds them (`HeadSpec`), the skeleton, and the preprocessing the model was trained
with (`PreprocessSpec`). Nothing here imports sleap-nn; values are derived the way
sleap-nn's predict derives them:

- The model type is the first non-null entry of `model_config.head_configs` and the
  backbone the first non-null entry of `model_config.backbone_config`, in file order.
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
- `crop_mode` must be "fixed": "bbox" crops need a box detector.
- `tiling.enabled` must be false: tiled inference is not implemented.
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

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.types import Skeleton

# The files `sleap-nn train` writes into a model directory.
TRAINING_CONFIG = "training_config.yaml"
CHECKPOINT = "best.ckpt"

SUPPORTED_BACKBONES = ("unet",)
KNOWN_BACKBONES = ("unet", "convnext", "swint", "pretrained")

# Heads of each supported model type, in the order sleap-nn's `get_head` builds them
# (the order of `model.head_layers` in a checkpoint): (config key, head class name).
MODEL_HEADS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "single_instance": (("confmaps", "SingleInstanceConfmapsHead"),),
    "centroid": (("confmaps", "CentroidConfmapsHead"),),
    "centered_instance": (("confmaps", "CenteredInstanceConfmapsHead"),),
    "bottomup": (
        ("confmaps", "MultiInstanceConfmapsHead"),
        ("pafs", "PartAffinityFieldsHead"),
    ),
    "multi_class_bottomup": (
        ("confmaps", "MultiInstanceConfmapsHead"),
        ("class_maps", "ClassMapsHead"),
    ),
    "multi_class_topdown": (
        ("confmaps", "CenteredInstanceConfmapsHead"),
        ("class_vectors", "ClassVectorsHead"),
    ),
}

# Model types whose input is a crop around one instance.
CROP_MODEL_TYPES = ("centered_instance", "multi_class_topdown")

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

_MISSING = object()


@attrs.frozen
class UNetSpec:
    """Hyperparameters of sleap-nn's UNet backbone (`backbone_config.unet`).

    Attributes:
        in_channels: channels of the network input (1 grayscale, 3 RGB).
        kernel_size: side of the encoder, middle and decoder convolutions.
        filters: channels of the first encoder block.
        filters_rate: factor between the channels of consecutive levels.
        max_stride: stride of the encoder's output; inputs are padded to a multiple.
        stem_stride: stride of the optional stem in front of the encoder, or None.
        middle_block: whether a middle (bottleneck) block follows the encoder.
        up_interpolate: bilinear upsampling if True, transposed convolutions if False.
        stacks: number of stacked encoder-decoders (sleap-nn runs only 1).
        convs_per_block: convolutions in each encoder and decoder block.
        output_stride: stride of the finest decoder output (the smallest head stride).
    """

    in_channels: int
    kernel_size: int
    filters: int
    filters_rate: float
    max_stride: int
    stem_stride: int | None
    middle_block: bool
    up_interpolate: bool
    stacks: int
    convs_per_block: int
    output_stride: int

    @property
    def stem_blocks(self) -> int:
        return int(math.log2(self.stem_stride)) if self.stem_stride else 0

    @property
    def down_blocks(self) -> int:
        return int(math.log2(self.max_stride)) - self.stem_blocks

    @property
    def up_blocks(self) -> int:
        return int(math.log2(self.max_stride // self.output_stride)) + self.stem_blocks

    @property
    def input_stride(self) -> int:
        """What input height and width must be multiples of for exact results.

        This is `max_stride` except with a stem: sleap-nn then runs one more pooling
        step than `max_stride` accounts for, so the bottleneck sits at twice it.
        """
        return self.max_stride * 2 if self.stem_blocks else self.max_stride


@attrs.frozen
class HeadSpec:
    """One output head of the network.

    Attributes:
        name: sleap-nn head class name, e.g. "CentroidConfmapsHead"; it keys the
            network's outputs.
        config_key: entry of the model type's head config it comes from ("confmaps",
            "pafs", "class_maps" or "class_vectors").
        output_stride: stride of the head's output relative to the network input.
            A class-vector head reads the bottleneck whatever this says.
        part_names: one channel per part for confidence map heads.
        edges: (source, destination) part names of a PAF head, two channels each.
        edge_indices: `edges` as indices into the confidence map head's parts.
        classes: one channel (or vector entry) per class for class heads.
        anchor_part: node the instance crops are centered on, if any.
        use_sigmoid_activation: centroid heads trained for a focal loss end in a
            sigmoid.
        num_fc_layers: hidden fully connected layers of a class-vector head.
        num_fc_units: units of each of those layers.
        global_pool: whether a class-vector head max-pools the bottleneck first.
    """

    name: str
    config_key: str
    output_stride: int
    part_names: tuple[str, ...] = ()
    edges: tuple[tuple[str, str], ...] = ()
    edge_indices: tuple[tuple[int, int], ...] = ()
    classes: tuple[str, ...] = ()
    anchor_part: str | None = None
    use_sigmoid_activation: bool = False
    num_fc_layers: int = 0
    num_fc_units: int = 0
    global_pool: bool = True

    @property
    def n_channels(self) -> int:
        """Output channels (or vector length for class vectors)."""
        if self.name == "CentroidConfmapsHead":
            return 1
        if self.name == "PartAffinityFieldsHead":
            return 2 * len(self.edges)
        if self.name in ("ClassMapsHead", "ClassVectorsHead"):
            return len(self.classes)
        return len(self.part_names)

    @property
    def activation(self) -> str:
        """Activation ending the head: "identity", "sigmoid" or "softmax"."""
        if self.name == "ClassVectorsHead":
            return "softmax"
        if self.name == "ClassMapsHead" or self.use_sigmoid_activation:
            return "sigmoid"
        return "identity"


@attrs.frozen
class PreprocessSpec:
    """Input preprocessing the model was trained with (`data_config.preprocessing`).

    Attributes:
        ensure_rgb: frames are converted to 3 channels.
        ensure_grayscale: frames are converted to 1 channel.
        scale: resize factor applied after size matching.
        max_height: frames are letterboxed to this height, if set.
        max_width: frames are letterboxed to this width, if set.
        crop_size: side of the square instance crop (crop models only), else None.
    """

    ensure_rgb: bool = False
    ensure_grayscale: bool = False
    scale: float = 1.0
    max_height: int | None = None
    max_width: int | None = None
    crop_size: int | None = None


@attrs.frozen
class ModelSpec:
    """Everything needed to rebuild a trained sleap-nn model and feed it.

    Attributes:
        path: the model directory.
        model_type: one of `MODEL_HEADS`' keys.
        skeleton: nodes and edges of the training skeleton.
        backbone: the UNet's hyperparameters.
        heads: output heads in sleap-nn's order.
        preprocess: input preprocessing.
        class_names: identity classes of multi-class models, else empty.
        anchor_part: index of the anchor node in `skeleton.node_names`, or None.
        anchor_part_name: its name, or None.
        sleap_nn_version: version of sleap-nn that wrote the config, if recorded.
    """

    path: Path
    model_type: str
    skeleton: Skeleton
    backbone: UNetSpec
    heads: tuple[HeadSpec, ...]
    preprocess: PreprocessSpec
    class_names: tuple[str, ...] = ()
    anchor_part: int | None = None
    anchor_part_name: str | None = None
    sleap_nn_version: str | None = None

    @property
    def config_path(self) -> Path:
        return self.path / TRAINING_CONFIG

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def in_channels(self) -> int:
        return self.backbone.in_channels

    @property
    def max_stride(self) -> int:
        return self.backbone.max_stride

    def head(self, name: str) -> HeadSpec:
        """The head called `name` (a sleap-nn head class name)."""
        for head in self.heads:
            if head.name == name:
                return head
        raise KeyError(f"{self.path}: model has no {name}; it has {self.head_names}")

    @property
    def head_names(self) -> tuple[str, ...]:
        return tuple(head.name for head in self.heads)


def check_model_type(spec: ModelSpec, expected: str) -> None:
    """Raises ModelConfigError unless `spec` is a model of type `expected`."""
    if spec.model_type != expected:
        raise ModelConfigError(
            f"{spec.config_path}: a {spec.model_type} model, not a {expected} model"
        )


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
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ModelConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e


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
    """
    reader = _ConfigReader(Path(model_dir) / TRAINING_CONFIG)
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

    anchor_name = next((h.anchor_part for h in heads if h.anchor_part is not None), None)
    anchor_index = None
    if anchor_name is not None:
        if anchor_name not in skeleton.node_names:
            raise reader.error(
                f"anchor_part {anchor_name!r} is not a skeleton node {list(skeleton.node_names)}"
            )
        anchor_index = skeleton.node_names.index(anchor_name)

    class_names = next((h.classes for h in heads if h.classes), ())
    version = root.get("sleap_nn_version")
    return ModelSpec(
        path=Path(model_dir),
        model_type=model_type,
        skeleton=skeleton,
        backbone=backbone,
        heads=heads,
        preprocess=preprocess,
        class_names=class_names,
        anchor_part=anchor_index,
        anchor_part_name=anchor_name,
        sleap_nn_version=str(version) if version is not None else None,
    )


def _parse_backbone(reader: _ConfigReader, backbones: Mapping) -> UNetSpec:
    where = "model_config.backbone_config"
    backbone_type = next((k for k, v in backbones.items() if v is not None), None)
    if backbone_type is None:
        raise reader.error(f"{where} has no backbone set")
    if backbone_type not in SUPPORTED_BACKBONES:
        kind = "not supported yet" if backbone_type in KNOWN_BACKBONES else "unknown"
        raise reader.error(
            f"backbone {backbone_type!r} is {kind}; sleap-live runs only {SUPPORTED_BACKBONES}"
        )
    where = f"{where}.unet"
    unet = reader.mapping(backbones["unet"], where)
    values = {key: reader.required(unet, key, where) for key in _UNET_KEYS}
    spec = UNetSpec(
        in_channels=reader.integer(values["in_channels"], f"{where}.in_channels", minimum=1),
        kernel_size=reader.integer(values["kernel_size"], f"{where}.kernel_size", minimum=1),
        filters=reader.integer(values["filters"], f"{where}.filters", minimum=1),
        filters_rate=reader.number(values["filters_rate"], f"{where}.filters_rate"),
        max_stride=reader.power_of_two(values["max_stride"], f"{where}.max_stride"),
        stem_stride=(
            None
            if values["stem_stride"] is None
            else reader.power_of_two(values["stem_stride"], f"{where}.stem_stride")
        ),
        middle_block=reader.boolean(values["middle_block"], f"{where}.middle_block"),
        up_interpolate=reader.boolean(values["up_interpolate"], f"{where}.up_interpolate"),
        stacks=reader.integer(values["stacks"], f"{where}.stacks", minimum=1),
        convs_per_block=reader.integer(
            values["convs_per_block"], f"{where}.convs_per_block", minimum=1
        ),
        output_stride=reader.power_of_two(values["output_stride"], f"{where}.output_stride"),
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


def _parse_skeleton(reader: _ConfigReader, data_config: Mapping) -> Skeleton:
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


def _name_of(reader: _ConfigReader, item: Any, where: str) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping) and isinstance(item.get("name"), str):
        return item["name"]
    raise reader.error(f"{where} has an entry without a name: {item!r}")


def _parse_heads(
    reader: _ConfigReader, head_configs: Mapping, skeleton: Skeleton
) -> tuple[str, tuple[HeadSpec, ...]]:
    model_type = next((k for k, v in head_configs.items() if v is not None), None)
    if model_type is None:
        raise reader.error("model_config.head_configs has no head set")
    if model_type not in MODEL_HEADS:
        raise reader.error(
            f"unknown or unsupported head type {model_type!r}; supported: {', '.join(MODEL_HEADS)}"
        )
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
    return model_type, tuple(heads)


def _parse_head(
    reader: _ConfigReader,
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
    if name == "ClassVectorsHead":
        return HeadSpec(
            name=name,
            config_key=key,
            output_stride=output_stride,
            classes=_classes(reader, leaf, where),
            num_fc_layers=reader.integer(
                reader.optional(leaf, "num_fc_layers", where, int, 1),
                f"{where}.num_fc_layers",
                minimum=0,
            ),
            num_fc_units=reader.integer(
                reader.optional(leaf, "num_fc_units", where, int, 64),
                f"{where}.num_fc_units",
                minimum=1,
            ),
            global_pool=reader.boolean(
                reader.optional(leaf, "global_pool", where, bool, True), f"{where}.global_pool"
            ),
        )
    if name == "ClassMapsHead":
        return HeadSpec(
            name=name,
            config_key=key,
            output_stride=output_stride,
            classes=_classes(reader, leaf, where),
        )
    if name == "PartAffinityFieldsHead":
        part_names = previous[0].part_names
        edges = _edges(reader, leaf, where, skeleton)
        for edge in edges:
            for end in edge:
                if end not in part_names:
                    raise reader.error(f"{where}.edges names {end!r}, which is not a part")
        return HeadSpec(
            name=name,
            config_key=key,
            output_stride=output_stride,
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
    return HeadSpec(
        name=name,
        config_key=key,
        output_stride=output_stride,
        part_names=part_names,
        anchor_part=anchor_part,
        use_sigmoid_activation=reader.boolean(
            reader.optional(leaf, "use_sigmoid_activation", where, bool, False),
            f"{where}.use_sigmoid_activation",
        ),
    )


def _classes(reader: _ConfigReader, leaf: Mapping, where: str) -> tuple[str, ...]:
    classes = _string_list(reader, leaf.get("classes"), f"{where}.classes")
    if not classes:
        raise reader.error(f"{where}.classes is empty; an identity model needs its class names")
    # sleap-live reports each class as a track, which is sleap-nn's "track" output.
    reader.supported(leaf, "class_output", where, ("track",))
    return classes


def _check_centroid_method(
    reader: _ConfigReader, leaf: Mapping, where: str, anchor_part: str | None
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
    reader: _ConfigReader, leaf: Mapping, where: str, skeleton: Skeleton
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


def _string_list(reader: _ConfigReader, value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise reader.error(f"{where} is not a list of names")
    return tuple(value)


def _parse_preprocess(
    reader: _ConfigReader, data_config: Mapping, model_type: str
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
    # "bbox" crops resize a box detector's boxes; sleap-live has no box detector.
    reader.supported(section, "crop_mode", where, ("fixed",))
    tiling = reader.optional(section, "tiling", where, Mapping, {})
    reader.supported(tiling, "enabled", f"{where}.tiling", (False,))
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


class _ConfigReader:
    """Typed access to the config's plain YAML values with errors naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{self.path}: {problem}")

    def mapping(self, value: Any, where: str) -> Mapping:
        if not isinstance(value, Mapping):
            raise self.error(f"{where} is not a mapping")
        return value

    def section(self, parent: Mapping, where: str, key: str) -> Mapping:
        """The mapping at `where.key`, which must exist."""
        value = self.required(parent, key, where)
        return self.mapping(value, f"{where}.{key}" if where else key)

    def required(self, parent: Mapping, key: str, where: str) -> Any:
        if key not in parent:
            dotted = f"{where}.{key}" if where else key
            raise self.error(f"missing key {dotted}")
        return parent[key]

    def optional(self, parent: Mapping, key: str, where: str, kind: Any, default: Any) -> Any:
        value = parent.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(f"{where}.{key} is {value!r}; expected {_kind_name(kind)}")
        return value

    def supported(self, parent: Mapping, key: str, where: str, supported: tuple) -> None:
        """Refuses `where.key` unless it is absent, null or one of `supported`."""
        value = parent.get(key)
        if value is None or any(value == ok and type(value) is type(ok) for ok in supported):
            return
        raise self.error(
            f"{where}.{key} {_yaml_value(value)} is not supported "
            f"(supported: {', '.join(_yaml_value(ok, quote=False) for ok in supported)})"
        )

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{where} is {value!r}; expected an integer >= {minimum}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.error(f"{where} is {value!r}; expected a positive number")
        return float(value)

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(f"{where} is {value!r}; expected true or false")
        return value

    def power_of_two(self, value: Any, where: str) -> int:
        value = self.integer(value, where, minimum=1)
        if value & (value - 1):
            raise self.error(f"{where} is {value}; expected a power of two")
        return value


def _yaml_value(value: Any, quote: bool = True) -> str:
    """`value` as the config spells it: true/false, strings quoted if `quote`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if quote or not isinstance(value, str) else value


def _kind_name(kind: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if isinstance(kind, tuple):
        return "a number" if set(kind) == {int, float} else " or ".join(map(_kind_name, kind))
    if kind is Mapping:
        return "a mapping"
    return names.get(kind, kind.__name__)
