"""Host-side decoding of inference-model outputs into per-frame poses.

Pure numpy and scipy, so a runner can decode with nothing but the model's
`ModelInfo` (the record embedded in exported models). `decode` dispatches on
`info.model_type`.

Instance-list models (single instance, centroid, top-down; `INSTANCE_OUTPUTS`)
list M instances over the whole batch. Decoding groups them by frame, keeping
their order, and drops instances without any found node, as sleap-nn does when
it writes predictions. The TensorRT profile's graphs give the same instances in
fixed slots per frame (`INSTANCE_SLOT_OUTPUTS`, with `instance_valid`); they are
read as the instance list they hold (`instance_list`), so both layouts decode to
the same poses.

Bottom-up models hand over K peak slots per node plus PAF line scores or class
probabilities (`BOTTOMUP_OUTPUTS`, `MULTI_CLASS_BOTTOMUP_OUTPUTS`); they are
grouped into instances by `sleap_live.engines.host.grouping`.

A box detector's slots (`BOX_OUTPUTS`) become each frame's `FrameBoxes`, the
filled slots in their order (highest score first), with no instances. A box
top-down model's graph hands out the same slots after its instance outputs: the
boxes that seeded its crops go beside its poses (`FramePoses.boxes`), all of
them, as sleap-nn writes them, including those whose instance found no node.

Multi-class top-down assigns identities per frame as sleap-nn does: Hungarian
matching (`scipy.optimize.linear_sum_assignment`) of the frame's instances to
classes on the negated class probabilities. Every instance of the frame takes
part, including ones dropped afterwards for having no nodes; instances left
without a class (more instances than classes) get identity -1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import attrs
import numpy as np

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.host.grouping import (
    ClassMapGrouper,
    PafGrouper,
    linear_sum_assignment,
)
from sleap_live.engines.host.outputs import (
    BOTTOMUP_OUTPUTS,
    BOX_OUTPUTS,
    INSTANCE_OUTPUTS,
    KEEP_UNCLASSIFIED,
    MASK_OUTPUTS,
    MULTI_CLASS_BOTTOMUP_OUTPUTS,
)
from sleap_live.engines.types import FrameBoxes, FrameMasks, FramePoses, ModelInfo

# Instance outputs that the slot layout holds per (frame, slot).
_SLOTTED = ("points", "point_scores", "instance_scores", "class_scores", "embeddings")

Decoder = Callable[[ModelInfo, Mapping[str, np.ndarray], int], list[FramePoses]]


def decode(info: ModelInfo, outputs: Mapping[str, np.ndarray], batch_size: int) -> list[FramePoses]:
    """Poses of each frame of a batch from an inference model's named outputs.

    Args:
        info: the model's record; `info.model_type` selects the decoding.
        outputs: output name to array, as the model (or its export) produced them.
        batch_size: frames in the batch (instance lists cannot tell it).

    Returns:
        One `FramePoses` per frame, in batch order.

    Raises:
        ModelConfigError: no decoding exists for the model type, or an output
            the decoding needs is missing.
    """
    decoder = DECODERS.get(info.model_type)
    if decoder is None:
        raise ModelConfigError(
            f"cannot decode outputs of a {info.model_type!r} model; "
            f"decodable model types: {', '.join(DECODERS)}"
        )
    poses = decoder(info, outputs, batch_size)
    if not info.box_categories:
        return poses
    boxes = frame_boxes(outputs, batch_size)
    return [attrs.evolve(frame, boxes=b) for frame, b in zip(poses, boxes, strict=True)]


def instance_list(outputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    """Slot-layout instance outputs as the instance list they hold; others as they are.

    A frame's valid slots come first and in instance-list order, so the list is
    the valid slots in (frame, slot) order, with `instance_frame` their frame.
    """
    if "instance_valid" not in outputs:
        return outputs
    valid = np.asarray(outputs["instance_valid"], dtype=bool)
    listed = {"instance_frame": np.nonzero(valid)[0].astype(np.int64)}
    for name in _SLOTTED:
        if name in outputs:
            listed[name] = np.asarray(outputs[name])[valid]
    return listed


def _instance_arrays(
    outputs: Mapping[str, np.ndarray], names: tuple[str, ...]
) -> tuple[np.ndarray, ...]:
    return _arrays(instance_list(outputs), names)


def _arrays(outputs: Mapping[str, np.ndarray], names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    missing = [name for name in names if name not in outputs]
    if missing:
        raise ModelConfigError(
            f"model outputs lack {', '.join(missing)}; got {', '.join(outputs) or 'none'}"
        )
    return tuple(np.asarray(outputs[name]) for name in names)


def _frame_poses(
    points: np.ndarray,
    point_scores: np.ndarray,
    instance_scores: np.ndarray,
    identities: np.ndarray,
    embeddings: np.ndarray | None = None,
) -> FramePoses:
    found = ~np.isnan(points).all(axis=(1, 2))
    return FramePoses(
        points=points[found].astype(np.float32, copy=False),
        point_scores=point_scores[found].astype(np.float32, copy=False),
        instance_scores=instance_scores[found].astype(np.float32, copy=False),
        identities=identities[found].astype(np.int32, copy=False),
        embeddings=None if embeddings is None else embeddings[found].astype(np.float32, copy=False),
    )


def _poses_by_frame(
    batch_size: int,
    frames: np.ndarray,
    points: np.ndarray,
    point_scores: np.ndarray,
    instance_scores: np.ndarray,
    class_scores: np.ndarray | None = None,
    embeddings: np.ndarray | None = None,
) -> list[FramePoses]:
    """Splits an instance list into frames, keeping its order.

    Identities come from `assign_classes` on each frame's `class_scores`, or are
    all -1 without them. `embeddings` (an embedding model's vectors) go with their
    instances.
    """
    poses = []
    for frame in range(batch_size):
        rows = np.flatnonzero(frames == frame)
        identities = (
            np.full(rows.shape, -1, np.int32)
            if class_scores is None
            else assign_classes(class_scores[rows])
        )
        poses.append(
            _frame_poses(
                points[rows],
                point_scores[rows],
                instance_scores[rows],
                identities,
                None if embeddings is None else embeddings[rows],
            )
        )
    return poses


def decode_instances(
    info: ModelInfo, outputs: Mapping[str, np.ndarray], batch_size: int
) -> list[FramePoses]:
    """Per-frame poses from `INSTANCE_OUTPUTS`, with `embeddings` where the model
    has an embedding model; identities are all -1."""
    if info.embedding_dim is None:
        return _poses_by_frame(batch_size, *_instance_arrays(outputs, INSTANCE_OUTPUTS))
    frames, points, point_scores, instance_scores, embeddings = _instance_arrays(
        outputs, (*INSTANCE_OUTPUTS, "embeddings")
    )
    return _poses_by_frame(
        batch_size, frames, points, point_scores, instance_scores, embeddings=embeddings
    )


def assign_classes(class_scores: np.ndarray) -> np.ndarray:
    """sleap-nn's identity assignment for one frame's instances.

    Args:
        class_scores: (instances, classes) class probabilities.

    Returns:
        (instances,) int32 class of each instance, -1 for instances left over.
    """
    identities = np.full(class_scores.shape[0], -1, np.int32)
    if class_scores.size:
        rows, cols = linear_sum_assignment(-class_scores)
        identities[rows] = cols
    return identities


def decode_multi_class_instances(
    info: ModelInfo, outputs: Mapping[str, np.ndarray], batch_size: int
) -> list[FramePoses]:
    """Per-frame poses from `INSTANCE_OUTPUTS` plus `class_scores`, with identities.

    Instances left without a class are kept (sleap-nn) unless the model's
    `KEEP_UNCLASSIFIED` setting is false (SLEAP 1.x): then each frame holds one
    instance per assigned class, in class order.
    """
    arrays = _instance_arrays(outputs, (*INSTANCE_OUTPUTS, "class_scores"))
    poses = _poses_by_frame(batch_size, *arrays)
    if info.postprocess.get(KEEP_UNCLASSIFIED, True):
        return poses
    return [_classified_only(frame) for frame in poses]


def _classified_only(poses: FramePoses) -> FramePoses:
    classified = np.flatnonzero(poses.identities >= 0)
    order = classified[np.argsort(poses.identities[classified], kind="stable")]
    return FramePoses(
        points=poses.points[order],
        point_scores=poses.point_scores[order],
        instance_scores=poses.instance_scores[order],
        identities=poses.identities[order],
    )


def decode_grouped(
    info: ModelInfo, outputs: Mapping[str, np.ndarray], batch_size: int
) -> list[FramePoses]:
    """Per-frame poses of a bottom-up model's outputs, grouped on the host: with PAFs
    (`PafGrouper`, `BOTTOMUP_OUTPUTS`) or one per class (`ClassMapGrouper`,
    `MULTI_CLASS_BOTTOMUP_OUTPUTS`)."""
    del batch_size
    if info.model_type == "bottomup":
        _instance_arrays(outputs, BOTTOMUP_OUTPUTS)
        return PafGrouper.from_info(info).group_batch(outputs)
    _instance_arrays(outputs, MULTI_CLASS_BOTTOMUP_OUTPUTS)
    return ClassMapGrouper.from_info(info).group_batch(outputs)


def decode_boxes(
    info: ModelInfo, outputs: Mapping[str, np.ndarray], batch_size: int
) -> list[FramePoses]:
    """Per-frame boxes of a box detector's slots (`BOX_OUTPUTS`), no instances."""
    empty = FramePoses.empty(info.skeleton.n_nodes)
    return [attrs.evolve(empty, boxes=boxes) for boxes in frame_boxes(outputs, batch_size)]


def frame_boxes(outputs: Mapping[str, np.ndarray], batch_size: int) -> list[FrameBoxes]:
    """Each frame's filled box slots of `BOX_OUTPUTS`, in their order."""
    valid, boxes, scores, categories = _arrays(outputs, BOX_OUTPUTS)
    return [
        FrameBoxes(
            boxes=boxes[frame][valid[frame]].astype(np.float32, copy=False),
            scores=scores[frame][valid[frame]].astype(np.float32, copy=False),
            categories=categories[frame][valid[frame]].astype(np.int32, copy=False),
        )
        for frame in range(batch_size)
    ]


def decode_masks(
    info: ModelInfo, outputs: Mapping[str, np.ndarray], batch_size: int
) -> list[FramePoses]:
    """Per-frame masks of a semantic segmentation model's outputs (`MASK_OUTPUTS`), no
    instances: each frame's map cropped to the extent that covers the frame, none where
    it holds no foreground (sleap-nn's `min_mask_area` of 0)."""
    masks, extents, scores = _arrays(outputs, MASK_OUTPUTS)
    empty = FramePoses.empty(info.skeleton.n_nodes)
    decoded = []
    for frame in range(batch_size):
        rows, cols, height, width = (int(v) for v in extents[frame])
        mask = np.array(masks[frame, :rows, :cols], dtype=bool)
        kept = (mask,) if mask.any() else ()
        found = FrameMasks(
            masks=kept,
            scores=scores[frame : frame + len(kept)].astype(np.float32),
            scales=np.array([(cols / width, rows / height)] * len(kept), dtype=np.float64),
        )
        decoded.append(attrs.evolve(empty, masks=found))
    return decoded


DECODERS: Mapping[str, Decoder] = MappingProxyType(
    {
        "single_instance": decode_instances,
        "centroid": decode_instances,
        "topdown": decode_instances,
        "multi_class_topdown": decode_multi_class_instances,
        "bottomup": decode_grouped,
        "multi_class_bottomup": decode_grouped,
        "bbox": decode_boxes,
        "semantic_segmentation": decode_masks,
    }
)
