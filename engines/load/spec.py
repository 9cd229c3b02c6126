"""What a trained sleap-nn model is: the records its training config describes.

Small frozen records: the UNet backbone (`UNetSpec`), the output heads in the order
sleap-nn builds them (`HeadSpec`), the skeleton, and the preprocessing the model was
trained with (`PreprocessSpec`), together a `ModelSpec`. They are made by
`sleap_live.engines.load.training_config`, which reads `training_config.yaml`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.load.backbone_specs import ConvNextSpec, SwinTSpec
from sleap_live.engines.types import Skeleton

# The files `sleap-nn train` writes into a model directory.
TRAINING_CONFIG = "training_config.yaml"
CHECKPOINT = "best.ckpt"
# The files SLEAP 1.x (TensorFlow) training writes.
LEGACY_TRAINING_CONFIG = "training_config.json"
LEGACY_WEIGHTS = "best_model.h5"

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
    # sleap-nn 0.3.5's CenterNet box detector (`architectures/model.py` `get_head`):
    # a per-category centre heatmap, box width and height in grid cells, sub-cell
    # centre offsets, all three required and at one stride.
    "bbox_centernet": (
        ("center", "BBoxCenterHead"),
        ("size", "BBoxSizeHead"),
        ("offset", "BBoxOffsetHead"),
    ),
    # Its SSD-style anchor detector: one head reading several strides (`SSDHead`).
    "bbox_ssd": (("ssd", "SSDHead"),),
    # Whole-frame foreground segmentation: one foreground logit map.
    "semantic_segmentation": (("segmentation", "SegmentationHead"),),
    # A re-identification model: a crop around each predicted pose to a vector
    # (`architectures/heads.py` `EmbeddingHead`); it runs after a top-down pair.
    "embedding": (("embedding", "EmbeddingHead"),),
}

# Model types that find boxes, not poses; one can stand in for a top-down model's
# centroid model.
BOX_MODEL_TYPES = ("bbox_centernet", "bbox_ssd")
# The heads whose classes are a box detector's categories, not identities.
BOX_CATEGORY_HEADS = ("BBoxCenterHead", "SSDHead")
# sleap-nn's category of a detector trained on boxes without one
# (`config/model_config.py` `DEFAULT_BBOX_CATEGORY`).
DEFAULT_BOX_CATEGORY = "object"

# Model types whose input is a crop around one instance.
CROP_MODEL_TYPES = ("centered_instance", "multi_class_topdown", "embedding")


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
class AnchorSpec:
    """A `bbox_ssd` head's pyramid and anchors (`head_configs.bbox_ssd.ssd`).

    Attributes:
        strides: the pyramid levels' strides, finest first (`output_stride * 2**i`).
        sizes: each level's base anchor size (square root of the area), in
            network-input pixels.
        scales: multipliers on a level's base size.
        aspect_ratios: anchor height / width ratios.
        variances: the (cx, cy, w, h) box-coding variances.
        head_channels: channels of each level's conv tower.
        head_convs: 3x3 convolutions (with ReLU) in each tower.
    """

    strides: tuple[int, ...]
    sizes: tuple[float, ...]
    scales: tuple[float, ...]
    aspect_ratios: tuple[float, ...]
    variances: tuple[float, ...]
    head_channels: int
    head_convs: int

    @property
    def per_cell(self) -> int:
        """Anchors at each cell of every level."""
        return len(self.scales) * len(self.aspect_ratios)


# A backbone's record: what `model_config.backbone_config` sets.
BackboneSpec = UNetSpec | ConvNextSpec | SwinTSpec


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
        classes: one channel (or vector entry) per class for class heads, and per
            box category for a box detector's centre heatmap.
        anchor_part: node the instance crops are centered on, if any.
        use_sigmoid_activation: centroid heads trained for a focal loss end in a
            sigmoid.
        num_fc_layers: hidden fully connected layers of a class-vector head.
        num_fc_units: units of each of those layers.
        global_pool: whether a class-vector head max-pools the bottleneck first.
        embedding_dim: length of an embedding head's vectors.
        pool: an embedding head's pooling of the bottleneck ("gem", "max" or "avg").
        normalize: whether an embedding head L2-normalises its vectors.
        centroid_method: how an embedding model centres its crop on a pose
            ("center_of_mass", or "anchor" with a center-of-mass fallback).
        anchors: an SSD head's pyramid and anchors (it reads every level's stride;
            `output_stride` is the finest).
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
    embedding_dim: int = 0
    pool: str = ""
    normalize: bool = False
    centroid_method: str = ""
    anchors: AnchorSpec | None = None

    @property
    def n_channels(self) -> int:
        """Output channels (or vector length for class vectors, values per anchor
        for an SSD head: background and category logits, then 4 box deltas)."""
        if self.anchors is not None:
            return len(self.classes) + 5
        if self.name in ("CentroidConfmapsHead", "SegmentationHead"):
            return 1
        if self.name == "PartAffinityFieldsHead":
            return 2 * len(self.edges)
        if self.name in ("BBoxSizeHead", "BBoxOffsetHead"):
            return 2
        if self.name in ("ClassMapsHead", "ClassVectorsHead", "BBoxCenterHead"):
            return len(self.classes)
        if self.name == "EmbeddingHead":
            return self.embedding_dim
        return len(self.part_names)

    @property
    def activation(self) -> str:
        """Activation ending the head: "identity", "sigmoid" or "softmax"."""
        if self.name == "ClassVectorsHead":
            return "softmax"
        # sleap-nn's detector module ends the centre head in a sigmoid
        # (`BBoxCenterNetLightningModule._decoder_inputs`), its segmentation module the
        # foreground head (`SemanticSegmentationLightningModule.forward`).
        sigmoid_heads = ("ClassMapsHead", "BBoxCenterHead", "SegmentationHead")
        if self.name in sigmoid_heads or self.use_sigmoid_activation:
            return "sigmoid"
        return "identity"


@attrs.frozen
class TilingSpec:
    """Tiled inference the model was trained for (`data_config.preprocessing.tiling`
    with `enabled: true`): frames are run as overlapping square tiles, merged.

    Attributes:
        tile_size: side of the square tiles, in (scaled) input pixels.
        overlap: requested overlap of neighbouring tiles, in pixels.
        min_overlap_fraction: the overlap is at least this fraction of a tile.
        blend: importance window merging overlaps ("gaussian", "pyramid", "constant").
        sigma_scale: the Gaussian window's standard deviation per tile side.
    """

    tile_size: int
    overlap: int
    min_overlap_fraction: float = 0.25
    blend: str = "gaussian"
    sigma_scale: float = 0.125


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
        tiling: the tiling of a model trained for tiled inference, else None.
    """

    ensure_rgb: bool = False
    ensure_grayscale: bool = False
    scale: float = 1.0
    max_height: int | None = None
    max_width: int | None = None
    crop_size: int | None = None
    tiling: TilingSpec | None = None


@attrs.frozen
class LegacySpec:
    """What a SLEAP 1.x model folder (training_config.json + Keras .h5) adds.

    Attributes:
        weights_path: the Keras model file, `best_model.h5`.
        offset_heads: head names (sleap-nn's) that SLEAP 1.x trained an
            `OffsetRefinementHead` beside, in the Keras model's output order.
        input_scaling: SLEAP 1.x's `preprocessing.input_scaling`.
        sleap1_conventions: run as SLEAP 1.x ran it (its resize, its offset
            refinement, its coordinates); False: as sleap-nn predict runs it.
    """

    weights_path: Path
    offset_heads: tuple[str, ...] = ()
    input_scaling: float = 1.0
    sleap1_conventions: bool = True


@attrs.frozen
class ModelSpec:
    """Everything needed to rebuild a trained sleap-nn model and feed it.

    Attributes:
        path: the model directory.
        model_type: one of `MODEL_HEADS`' keys.
        skeleton: nodes and edges of the training skeleton.
        backbone: the backbone's hyperparameters (UNet, ConvNeXt or Swin).
        heads: output heads in sleap-nn's order.
        preprocess: input preprocessing.
        class_names: identity classes of multi-class models, else empty.
        anchor_part: index of the anchor node in `skeleton.node_names`, or None.
        anchor_part_name: its name, or None.
        sleap_nn_version: version of sleap-nn that wrote the config, if recorded.
        legacy: for a SLEAP 1.x model folder, what it adds; None for sleap-nn's.
    """

    path: Path
    model_type: str
    skeleton: Skeleton
    backbone: BackboneSpec
    heads: tuple[HeadSpec, ...]
    preprocess: PreprocessSpec
    class_names: tuple[str, ...] = ()
    anchor_part: int | None = None
    anchor_part_name: str | None = None
    sleap_nn_version: str | None = None
    legacy: LegacySpec | None = None

    @property
    def config_path(self) -> Path:
        return self.path / (TRAINING_CONFIG if self.legacy is None else LEGACY_TRAINING_CONFIG)

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT if self.legacy is None else self.legacy.weights_path

    @property
    def in_channels(self) -> int:
        return self.backbone.in_channels

    @property
    def max_stride(self) -> int:
        return self.backbone.max_stride

    @property
    def sleap1(self) -> bool:
        """Whether the model runs with SLEAP 1.x's conventions (`LegacySpec`)."""
        return self.legacy is not None and self.legacy.sleap1_conventions

    def head(self, name: str) -> HeadSpec:
        """The head called `name` (a sleap-nn head class name)."""
        for head in self.heads:
            if head.name == name:
                return head
        raise KeyError(f"{self.path}: model has no {name}; it has {self.head_names}")

    @property
    def head_names(self) -> tuple[str, ...]:
        return tuple(head.name for head in self.heads)


def spec_of(
    config_path: Path, heads: tuple[HeadSpec, ...], skeleton: Skeleton, **fields: Any
) -> ModelSpec:
    """The `ModelSpec` of a parsed config: `fields`, and what the heads give: the
    identity classes (a detector's box categories stay on its centre head) and the
    anchor node (the first head's `anchor_part` that is set, by name and index).

    Raises:
        ModelConfigError: the anchor part is not a skeleton node.
    """
    anchor_name = next((head.anchor_part for head in heads if head.anchor_part is not None), None)
    if anchor_name is not None and anchor_name not in skeleton.node_names:
        raise ModelConfigError(
            f"{config_path}: anchor_part {anchor_name!r} is not a skeleton node "
            f"{list(skeleton.node_names)}"
        )
    return ModelSpec(
        skeleton=skeleton,
        heads=heads,
        class_names=next(
            (
                head.classes
                for head in heads
                if head.classes and head.name not in BOX_CATEGORY_HEADS
            ),
            (),
        ),
        anchor_part=None if anchor_name is None else skeleton.node_names.index(anchor_name),
        anchor_part_name=anchor_name,
        **fields,
    )


def check_box_detector(spec: ModelSpec) -> None:
    """Raises ModelConfigError unless `spec` is a box detector (`BOX_MODEL_TYPES`)."""
    if spec.model_type not in BOX_MODEL_TYPES:
        raise ModelConfigError(f"{spec.config_path}: a {spec.model_type} model, not a box detector")


def check_model_type(spec: ModelSpec, expected: str) -> None:
    """Raises ModelConfigError unless `spec` is a model of type `expected`."""
    if spec.model_type != expected:
        raise ModelConfigError(
            f"{spec.config_path}: a {spec.model_type} model, not a {expected} model"
        )
