"""Small records shared by every engine: the skeleton, what a model is, and its poses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.settings import InferenceSettings

MODEL_TYPES = (
    "single_instance",
    "centroid",
    "centered_instance",
    "topdown",
    "bottomup",
    "multi_class_topdown",
    "multi_class_bottomup",
    "bbox",
    "semantic_segmentation",
)
# Model types whose frames hold masks (`FramePoses.masks`), not instances.
MASK_MODEL_TYPES = ("semantic_segmentation",)
# What the models that find no poses find, by model type, and the sleap-io objects
# a .slp holds them as.
POSELESS_FINDINGS: Mapping[str, tuple[str, str]] = {
    "bbox": ("a box detector's boxes", "sleap-io PredictedBoundingBox"),
    "semantic_segmentation": ("a segmentation model's masks", "sleap-io PredictedSegmentationMask"),
}


@attrs.frozen
class Skeleton:
    """Node names and edges (index pairs) of the animal's body plan."""

    node_names: tuple[str, ...]
    edges: tuple[tuple[int, int], ...] = ()
    name: str = "skeleton"

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)


@attrs.frozen
class ModelInfo:
    """What a consumer of an engine needs to know about the model behind it.

    This is the record embedded in exported models, so an exported file can be
    run and its poses interpreted without the training configs.

    Attributes:
        model_type: one of `MODEL_TYPES`.
        skeleton: nodes and edges of the predicted instances.
        input_channels: channels the network was trained on (1 or 3). Frames with
            the other count are converted inside the inference model.
        max_instances: most instances reported per frame; None: no limit.
        class_names: identity names for multi-class models, a box detector's
            categories (index order), else empty.
        box_categories: a box top-down model's detector categories (index
            order), whose graph also outputs the boxes that seeded its crops
            (`BOX_OUTPUTS`); empty for every other model.
        embedding_dim: length of the re-identification vector a top-down model
            with an embedding model gives each instance (its graph also outputs
            `embeddings`); None for every other model.
        peak_threshold: confidence map threshold used for peaks.
        postprocess: host-side settings the runner's decoding step needs (for
            example PAF grouping thresholds); JSON-serialisable values only.
        settings: the inference settings the model runs with; None for an
            export made before they were recorded.
    """

    model_type: str
    skeleton: Skeleton
    input_channels: int
    max_instances: int | None
    class_names: tuple[str, ...] = ()
    peak_threshold: float = 0.2
    postprocess: Mapping[str, Any] = attrs.field(factory=dict, eq=False)
    settings: InferenceSettings | None = None
    box_categories: tuple[str, ...] = ()
    embedding_dim: int | None = None

    @property
    def detector_categories(self) -> tuple[str, ...]:
        """The categories of the model's box detector, which `FrameBoxes.categories`
        index: a detector alone's `class_names`, a box top-down model's
        `box_categories`; empty for a model that finds no boxes."""
        return self.class_names if self.model_type == "bbox" else self.box_categories


# sleap-io's one-node skeleton for centroids of multi-node models.
CENTROID_SKELETON = Skeleton(node_names=("centroid",), name="centroid")


@attrs.frozen(eq=False)
class FrameBoxes:
    """Boxes a detector found in one frame, highest score first.

    Attributes:
        boxes: (boxes, 4) float32 x1, y1, x2, y2 in frame pixels.
        scores: (boxes,) float32.
        categories: (boxes,) int32 index into the model's
            `ModelInfo.detector_categories`.
    """

    boxes: np.ndarray
    scores: np.ndarray
    categories: np.ndarray

    @property
    def n_boxes(self) -> int:
        return int(self.boxes.shape[0])


@attrs.frozen(eq=False)
class FrameMasks:
    """Masks a segmentation model found in one frame, as sleap-nn stores them.

    Attributes:
        masks: each mask, (rows, columns) bool at the model's output stride.
        scores: (masks,) float32 mean foreground probability over each mask.
        scales: (masks, 2) float64 sio `scale` (x, y) of each mask: its columns and
            rows over the frame's width and height (`image = mask / scale`).
    """

    masks: tuple[np.ndarray, ...]
    scores: np.ndarray
    scales: np.ndarray

    @property
    def n_masks(self) -> int:
        return len(self.masks)


@attrs.frozen(eq=False)
class FramePoses:
    """Poses of every instance found in one frame.

    Attributes:
        points: (instances, nodes, 2) float32 xy in frame pixels; NaN where a node
            was not found.
        point_scores: (instances, nodes) float32 peak confidences; NaN where not found.
        instance_scores: (instances,) float32.
        identities: (instances,) int32 track of each instance: a multi-class model's
            class index (its identities are its tracks), or the tracker's track id
            when the pipeline tracks (`sleap_live.stream.tracking`); -1 for none.
        boxes: a box detector's boxes: alone (its frames have no instances), or
            the ones that seeded a box top-down model's crops, one per crop
            (instances with no node found are dropped, their boxes kept, as
            sleap-nn writes them); None for the other models.
        embeddings: (instances, D) float32 appearance vector of each instance
            (sleap-nn's ``identity_embedding``; a NaN row for none), read by the
            tracker's appearance options; None when the poses carry no vectors
            (a model without an embedding model).
        masks: a segmentation model's masks (its frames have no instances); None
            for the other models.
    """

    points: np.ndarray
    point_scores: np.ndarray
    instance_scores: np.ndarray
    identities: np.ndarray
    boxes: FrameBoxes | None = None
    embeddings: np.ndarray | None = None
    masks: FrameMasks | None = None

    @property
    def n_instances(self) -> int:
        return int(self.points.shape[0])

    @classmethod
    def empty(cls, n_nodes: int) -> FramePoses:
        return cls(
            points=np.zeros((0, n_nodes, 2), np.float32),
            point_scores=np.zeros((0, n_nodes), np.float32),
            instance_scores=np.zeros((0,), np.float32),
            identities=np.zeros((0,), np.int32),
        )
