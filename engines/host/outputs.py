"""The output contract: what every inference graph returns, by model type.

The graph side (`sleap_live.engines.graph`) produces these outputs, the exporters
name them, the runners read them, and the host decoders (`postprocess`,
`grouping`) turn them into `FramePoses`. This module is the one place that spells
them out; it imports nothing heavy, so a torch-free deployment can read it.

Instance-list outputs (single instance, centroid, top-down): M instances over the
whole batch, M data-dependent.

- ``instance_frame`` (M,) int64: index in the batch of the instance's frame;
- ``points`` (M, nodes, 2) float32: x, y in frame pixels, NaN where a node was
  not found;
- ``point_scores`` (M, nodes) float32: confidence map peak values;
- ``instance_scores`` (M,) float32;
- multi-class top-down adds ``class_scores`` (M, classes) float32: the
  instance's class probabilities (the ClassVectorsHead softmax);
- a top-down model with an embedding model adds ``embeddings`` (M, D) float32,
  last: each instance's re-identification vector, NaN for an instance without
  a crop centre.

Bottom-up outputs, per frame, K peak slots per node:

- ``peaks`` (B, nodes, K, 2) float32: xy in frame pixels, NaN in empty slots;
- ``peak_scores`` (B, nodes, K) float32: confidence map values, NaN in empty slots;
- ``peak_valid`` (B, nodes, K) bool: a node's peaks fill its first slots in
  raster order of their pixels (sleap-nn's order);
- ``line_scores`` (B, edges, K, K) float32: PAF score of source slot i against
  destination slot j, NaN where either slot is empty or the peaks coincide;
- multi-class bottom-up has ``class_probs`` (B, nodes, K, classes) float32, class
  map values at each peak, instead of ``line_scores``.

Box-detector outputs, per frame, K = `max_detections` box slots (the same in
both layouts), highest score first; a box top-down model's graph outputs them
after its instance outputs, the valid slots in the order of the frame's crops
(one crop per valid slot; the TensorRT profile's K its `max_instances`):

- ``box_valid`` (B, K) bool: which slots hold a box (a box clipped to nothing on
  the frame leaves its slot empty between filled ones);
- ``boxes`` (B, K, 4) float32: x1, y1, x2, y2 in frame pixels, NaN in empty slots;
- ``box_scores`` (B, K) float32: NaN in empty slots;
- ``box_categories`` (B, K) int32: index into `ModelInfo.detector_categories`,
  -1 in empty slots.

Semantic segmentation outputs, per frame (the same in both layouts):

- ``masks`` (B, rows, cols) bool: foreground at the head's output stride over the
  whole padded network input;
- ``mask_extents`` (B, 4) int32: the rows and columns of ``masks`` that cover the
  frame, then the frame's height and width (the mask's sio scale is their ratio);
- ``mask_scores`` (B,) float32: mean foreground probability over the mask, NaN
  where the frame has no foreground.

The TensorRT profile's graphs (`LAYOUTS`: "instance_slots") replace the instance
list with `max_instances` fixed slots per frame, so every output's shape is known
before the run (preallocated buffers, CUDA graphs); bottom-up outputs are the same
in both layouts.

- ``instance_valid`` (B, S) bool: which slots hold an instance; a frame's
  instances fill its first slots, in the order the instance list has them;
- ``points`` (B, S, nodes, 2), ``point_scores`` (B, S, nodes), ``instance_scores``
  (B, S), ``class_scores`` (B, S, classes) and ``embeddings`` (B, S, D) float32: as
  above, NaN in empty slots (``class_scores`` and ``embeddings`` too).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs
import numpy as np

from sleap_live.engines.load.spec import DEFAULT_BOX_CATEGORY

# A graph's outputs by name, as a runtime hands them to the host.
GraphOutputs = Mapping[str, np.ndarray]

INSTANCE_OUTPUTS = ("instance_frame", "points", "point_scores", "instance_scores")
MULTI_CLASS_TOPDOWN_OUTPUTS = (*INSTANCE_OUTPUTS, "class_scores")
BOTTOMUP_OUTPUTS = ("peaks", "peak_scores", "peak_valid", "line_scores")
MULTI_CLASS_BOTTOMUP_OUTPUTS = ("peaks", "peak_scores", "peak_valid", "class_probs")
BOX_OUTPUTS = ("box_valid", "boxes", "box_scores", "box_categories")
MASK_OUTPUTS = ("masks", "mask_extents", "mask_scores")
# `ModelInfo.postprocess` key of a multi-class top-down model: whether instances
# no class was assigned to are reported (sleap-nn, the default) or dropped, the
# rest ordered by class (SLEAP 1.x).
KEEP_UNCLASSIFIED = "keep_unclassified"
INSTANCE_SLOT_OUTPUTS = ("instance_valid", "points", "point_scores", "instance_scores")
MULTI_CLASS_TOPDOWN_SLOT_OUTPUTS = (*INSTANCE_SLOT_OUTPUTS, "class_scores")

INSTANCE_LIST = "instance_list"
INSTANCE_SLOTS = "instance_slots"
LAYOUTS = (INSTANCE_LIST, INSTANCE_SLOTS)
# Axis names with a size the data or the call decide; every other axis is sized in
# the graph (or, unsized there, by an output that shares the axis name).
INSTANCE_AXIS = "instances"
BATCH_AXIS = "batch"
SLOT_AXIS = "instance_slots"


@attrs.frozen
class OutputSpec:
    """One graph output: its name, element type and axes.

    Attributes:
        name: the ONNX output name.
        dtype: numpy dtype name.
        axes: one name per axis; "instances" is the data-dependent instance
            count of instance-list outputs, "batch" the frames in the batch,
            "instance_slots" the fixed `max_instances` slots per frame.
    """

    name: str
    dtype: str
    axes: tuple[str, ...]


_LIST_SPECS = {
    spec.name: spec
    for spec in (
        OutputSpec("instance_frame", "int64", ("instances",)),
        OutputSpec("points", "float32", ("instances", "nodes", "xy")),
        OutputSpec("point_scores", "float32", ("instances", "nodes")),
        OutputSpec("instance_scores", "float32", ("instances",)),
        OutputSpec("class_scores", "float32", ("instances", "classes")),
        OutputSpec("embeddings", "float32", ("instances", "embedding_dim")),
        OutputSpec("peaks", "float32", ("batch", "nodes", "peak_slots", "xy")),
        OutputSpec("peak_scores", "float32", ("batch", "nodes", "peak_slots")),
        OutputSpec("peak_valid", "bool", ("batch", "nodes", "peak_slots")),
        OutputSpec("line_scores", "float32", ("batch", "edges", "peak_slots", "peak_slots")),
        OutputSpec("class_probs", "float32", ("batch", "nodes", "peak_slots", "classes")),
        OutputSpec("box_valid", "bool", (BATCH_AXIS, "box_slots")),
        OutputSpec("boxes", "float32", (BATCH_AXIS, "box_slots", "xyxy")),
        OutputSpec("box_scores", "float32", (BATCH_AXIS, "box_slots")),
        OutputSpec("box_categories", "int32", (BATCH_AXIS, "box_slots")),
        OutputSpec("masks", "bool", (BATCH_AXIS, "mask_rows", "mask_cols")),
        OutputSpec("mask_extents", "int32", (BATCH_AXIS, "extent")),
        OutputSpec("mask_scores", "float32", (BATCH_AXIS,)),
    )
}
_SLOT_SPECS = _LIST_SPECS | {
    spec.name: spec
    for spec in (
        OutputSpec("instance_valid", "bool", (BATCH_AXIS, SLOT_AXIS)),
        OutputSpec("points", "float32", (BATCH_AXIS, SLOT_AXIS, "nodes", "xy")),
        OutputSpec("point_scores", "float32", (BATCH_AXIS, SLOT_AXIS, "nodes")),
        OutputSpec("instance_scores", "float32", (BATCH_AXIS, SLOT_AXIS)),
        OutputSpec("class_scores", "float32", (BATCH_AXIS, SLOT_AXIS, "classes")),
        OutputSpec("embeddings", "float32", (BATCH_AXIS, SLOT_AXIS, "embedding_dim")),
    )
}
del _SLOT_SPECS["instance_frame"]
_SPECS = {INSTANCE_LIST: _LIST_SPECS, INSTANCE_SLOTS: _SLOT_SPECS}

OUTPUTS_BY_MODEL_TYPE: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "single_instance": INSTANCE_OUTPUTS,
        "centroid": INSTANCE_OUTPUTS,
        "topdown": INSTANCE_OUTPUTS,
        "multi_class_topdown": MULTI_CLASS_TOPDOWN_OUTPUTS,
        "bottomup": BOTTOMUP_OUTPUTS,
        "multi_class_bottomup": MULTI_CLASS_BOTTOMUP_OUTPUTS,
        "bbox": BOX_OUTPUTS,
        "semantic_segmentation": MASK_OUTPUTS,
    }
)


SLOT_OUTPUTS_BY_MODEL_TYPE: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        **OUTPUTS_BY_MODEL_TYPE,
        "single_instance": INSTANCE_SLOT_OUTPUTS,
        "centroid": INSTANCE_SLOT_OUTPUTS,
        "topdown": INSTANCE_SLOT_OUTPUTS,
        "multi_class_topdown": MULTI_CLASS_TOPDOWN_SLOT_OUTPUTS,
    }
)


def output_spec(name: str, layout: str = INSTANCE_LIST) -> OutputSpec:
    """The contract of output `name` in `layout`; KeyError for a name no graph produces."""
    return _SPECS[layout][name]


def output_names(
    model_type: str, layout: str = INSTANCE_LIST, *, boxes: bool = False, embeddings: bool = False
) -> tuple[str, ...]:
    """The outputs, in order, of a `model_type` graph with `layout`; KeyError if unknown.

    `embeddings`: a top-down model with an embedding model (`ModelInfo.embedding_dim`),
    whose graph also outputs each instance's vector after its instance outputs.
    `boxes`: a top-down model seeded by a box detector (`ModelInfo.box_categories`),
    whose graph also outputs the boxes that seeded its crops (`BOX_OUTPUTS`), last.
    """
    by_type = SLOT_OUTPUTS_BY_MODEL_TYPE if layout == INSTANCE_SLOTS else OUTPUTS_BY_MODEL_TYPE
    names = (*by_type[model_type], "embeddings") if embeddings else by_type[model_type]
    return (*names, *BOX_OUTPUTS) if boxes else names


def output_axes(
    model_type: str, layout: str = INSTANCE_LIST, *, boxes: bool = False, embeddings: bool = False
) -> dict[str, tuple[str, ...]]:
    """Axis names of each output of `output_names`' graph (none if the type is unknown)."""
    by_type = SLOT_OUTPUTS_BY_MODEL_TYPE if layout == INSTANCE_SLOTS else OUTPUTS_BY_MODEL_TYPE
    if model_type not in by_type:
        return {}
    names = output_names(model_type, layout, boxes=boxes, embeddings=embeddings)
    return {name: output_spec(name, layout).axes for name in names}


def box_category(categories: tuple[str, ...], index: int) -> str | None:
    """The category sleap-nn writes for a box of category `index` of a detector with
    `categories` (`ModelInfo.detector_categories`): its name, or None for a detector trained
    without categories (sleap-nn's one `DEFAULT_BOX_CATEGORY`, which
    `Outputs.to_bboxes` leaves unset)."""
    if categories == (DEFAULT_BOX_CATEGORY,):
        return None
    return categories[index]
