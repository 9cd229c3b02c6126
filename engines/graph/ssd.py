"""SSD box detectors: frames to boxes with anchors and IoU NMS, in one graph.

Reproduces sleap-nn 0.3.5's `bbox_ssd` inference (`inference/bbox.py`
`decode_ssd`, `data/bboxes.py` `make_anchors` and `decode_boxes`,
`inference/layers/bbox.py` `BBoxLayer.postprocess`):

1. Frames are preprocessed as for any detector (`sleap_live.engines.graph.boxes`);
   the network's `SSDHead` gives, per anchor, class logits (background first) and
   4 box deltas (`sleap_live.engines.graph.decoder_heads.SSDPredictor`).
2. Anchors: per pyramid level (finest first), cell centres at `(index + 0.5) *
   stride` over `ceil(size / stride)` rows and columns of the padded input, in
   (row, column, shape) order; a level's shapes are every scale times every
   aspect ratio `h / w` of the level's size (`w = sqrt((size * scale)**2 /
   ratio)`, `h = w * ratio`).
3. Scores are the softmax over an anchor's logits, background dropped.
4. Candidates: the (anchor, category) pairs, anchor-major, with a score of at
   least the threshold, the `PRE_NMS_TOP_K` highest if there are more. Their
   boxes (only theirs: each is decoded on its own) are the deltas decoded against
   their anchors with the variances (the log sizes clamped at `log(1000)`),
   clipped to `[0, W - 1] x [0, H - 1]` of the input; those with no area are
   dropped.
5. NMS: torchvision's `batched_nms` at IoU `DEFAULT_IOU_THRESHOLD` (sleap-nn's
   `DEFAULT_NMS_IOU["bbox_ssd"]`), highest score first, a box suppressed by a kept
   one of its category with IoU above the threshold; categories are kept apart as
   torchvision does for fewer than 1000 boxes on the CPU, by shifting each
   category's boxes by `category * (largest coordinate + 1)` before the IoUs.
   The first `max_detections` kept boxes are the frame's detections.
6. As for CenterNet, boxes are divided by the input and size-matching scales and
   clipped to the frame; one left with no area is dropped (its slot emptied).

Greedy NMS is sequential; here it is the fixed point of "kept: a candidate that
no kept, higher-scored candidate suppresses", iterated from all candidates until
it stops changing. Candidate i settles once every candidate before it has, so the
iteration ends with greedy NMS's answer in at most as many rounds as candidates
and in practice a few (an ONNX `Loop` in an exported graph).

Candidate slots: as many as the batch's frame with the most candidates has (at
most `PRE_NMS_TOP_K`; a TopK whose K the graph reads from the data), so the
pairwise steps (ranking ties, IoUs, the `Loop`) cost the square of the real
candidates, not of `PRE_NMS_TOP_K`; another frame's extra slots are empty and
change nothing. The TensorRT profile, whose TopK needs K when the engine is
built, keeps `PRE_NMS_TOP_K` slots. The output has `max_detections` slots per
frame.
"""

from __future__ import annotations

import math

import torch

from sleap_live.engines.graph.boxes import BoxStage, clip_boxes, first_slots
from sleap_live.engines.graph.peaks import scripted
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.graph.resize import static_size
from sleap_live.engines.load.spec import AnchorSpec

SSD_HEAD = "SSDHead"
# sleap-nn's `DEFAULT_NMS_IOU["bbox_ssd"]` and `decode_ssd`'s `pre_nms_top_k`.
DEFAULT_IOU_THRESHOLD = 0.45
PRE_NMS_TOP_K = 1000
# `decode_boxes` clamps the log-size so that an untrained head cannot overflow exp().
MAX_LOG_SIZE = math.log(1000.0)


class SSDStage(BoxStage):
    """Frames to boxes with a `bbox_ssd` network (`BoxStage`'s outputs).

    Args:
        network: module with an `SSDHead` output.
        preprocess: the detector's preprocessing.
        anchors: the head's pyramid and anchors.
        max_detections: slots per frame; None: sleap-nn's 100.
        threshold: a detection's score must be at least this.
        iou_threshold: NMS suppresses a box overlapping a kept one by more.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        anchors: AnchorSpec,
        max_detections: int | None,
        threshold: float,
        iou_threshold: float = DEFAULT_IOU_THRESHOLD,
    ) -> None:
        super().__init__(network, preprocess, anchors.strides[0], max_detections, threshold)
        self.anchors = anchors
        self.iou_threshold = iou_threshold
        # Each level's anchor half-sizes (a, 2), float32 as sleap-nn makes them.
        for level, size in enumerate(anchors.sizes):
            shapes = torch.tensor(
                anchor_shapes(size, anchors.scales, anchors.aspect_ratios), dtype=torch.float32
            )
            self.register_buffer(f"half_shapes{level}", shapes / 2, persistent=False)

    def decode(
        self,
        heads: dict[str, torch.Tensor],
        height: torch.Tensor,
        width: torch.Tensor,
        *,
        fixed_shapes: bool,
    ) -> tuple[torch.Tensor, ...]:
        raw = heads[SSD_HEAD]
        logits = raw.shape[-1] - 4
        scores = torch.softmax(raw[..., :logits], dim=-1)[..., 1:]  # (B, A, C)
        categories = scores.shape[-1]
        flat = scores.flatten(1)  # (B, A * C), anchor-major
        candidate = flat >= self.threshold
        # -inf padding gives PRE_NMS_TOP_K slots on inputs with fewer pairs.
        ranked = torch.where(candidate, flat, float("-inf"))
        ranked = torch.nn.functional.pad(ranked, (0, PRE_NMS_TOP_K), value=float("-inf"))
        top, index = _ranked_first(
            ranked, PRE_NMS_TOP_K if fixed_shapes else _candidate_slots(candidate)
        )
        in_map = top > float("-inf")
        index = torch.where(in_map, index, 0)
        anchor = index // categories
        classes = index % categories
        # Only the candidates' boxes are decoded (each box on its own: the same values).
        rows = raw.gather(1, anchor[..., None].expand(-1, -1, static_size(raw, 2)))
        boxes = decode_deltas(
            rows[..., logits:], self._anchors(height, width)[anchor], self.anchors
        )
        boxes, has_area = clip_boxes(boxes, height, width)
        valid = in_map & has_area
        kept = valid & nms_keep(boxes, classes, valid, self.iou_threshold)
        carried = torch.cat([boxes, classes[..., None].to(boxes.dtype)], dim=-1)
        picked, scores, filled = first_slots(carried, top, kept, self.max_detections)
        return picked[..., :4], scores, picked[..., 4].to(torch.int64), filled

    def _anchors(self, height: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
        """(A, 4) x1, y1, x2, y2 anchors of a `height` x `width` input, in the head's
        order (sleap-nn's `make_anchors`)."""
        levels = []
        for level, stride in enumerate(self.anchors.strides):
            half = getattr(self, f"half_shapes{level}")
            rows = torch.arange(_cells(height, stride), dtype=torch.float32, device=half.device)
            cols = torch.arange(_cells(width, stride), dtype=torch.float32, device=half.device)
            cy, cx = torch.meshgrid((rows + 0.5) * stride, (cols + 0.5) * stride, indexing="ij")
            centres = torch.stack([cx, cy], -1).reshape(-1, 1, 2)
            levels.append(torch.cat([centres - half, centres + half], dim=-1).reshape(-1, 4))
        return torch.cat(levels, dim=0)


def _candidate_slots(candidate: torch.Tensor) -> torch.Tensor:
    """The candidate slots a batch needs: its largest count of (B, N) `candidate`
    pairs, at least 1 and at most `PRE_NMS_TOP_K`, as a 0-d int64 tensor (a TopK's
    K read from the data in an exported graph)."""
    return candidate.sum(dim=1).amax().clamp(min=1, max=PRE_NMS_TOP_K)


def _ranked_first(
    ranked: torch.Tensor, slots: int | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `slots` highest of (B, N) scores and their indices, highest first
    and equal scores in index order, as sleap-nn's candidates reach NMS (in index
    order, then stably sorted by score); `torch.topk` orders ties as it likes, and
    a stable sort does not export, so each one's place is counted."""
    top, index = torch.topk(ranked, slots, dim=1)
    # TopK rather than Sort: TensorRT needs K known when the graph is built.
    index, order = torch.topk(index, slots, dim=1, largest=False)
    top = top.gather(1, order)
    # earlier[b, i, j]: j comes before i (the indices are distinct and now ascending).
    earlier = index[:, None, :] < index[:, :, None]
    ahead = (top[:, None, :] > top[:, :, None]) | ((top[:, None, :] == top[:, :, None]) & earlier)
    # Places are distinct, so any sort orders them alike.
    _, order = torch.topk(ahead.sum(dim=2), slots, dim=1, largest=False)
    return top.gather(1, order), index.gather(1, order)


def _cells(size: torch.Tensor, stride: int) -> torch.Tensor:
    """`ceil(size / stride)` of a (1,) int64 size, as the 0-d end of an `arange`."""
    return torch.div(size + (stride - 1), stride, rounding_mode="floor")[0]


def anchor_shapes(
    size: float, scales: tuple[float, ...], ratios: tuple[float, ...]
) -> list[tuple[float, float]]:
    """(w, h) of one level's anchors, every scale times every ratio `h / w`
    (sleap-nn's `anchor_shapes`, in float64 as it computes them)."""
    shapes = []
    for scale in scales:
        area = (size * scale) ** 2
        for ratio in ratios:
            w = math.sqrt(area / ratio)
            shapes.append((w, w * ratio))
    return shapes


def decode_deltas(deltas: torch.Tensor, anchors: torch.Tensor, spec: AnchorSpec) -> torch.Tensor:
    """(B, K, 4) SSD deltas against their (B, K, 4) anchors: (B, K, 4) x1, y1, x2, y2 boxes
    (sleap-nn's `decode_boxes`, in its float32 operation order)."""
    aw = anchors[..., 2] - anchors[..., 0]
    ah = anchors[..., 3] - anchors[..., 1]
    acx = anchors[..., 0] + aw / 2
    acy = anchors[..., 1] + ah / 2
    v = spec.variances
    cx = acx + deltas[..., 0] * v[0] * aw
    cy = acy + deltas[..., 1] * v[1] * ah
    bw = aw * torch.exp((deltas[..., 2] * v[2]).clamp(max=MAX_LOG_SIZE))
    bh = ah * torch.exp((deltas[..., 3] * v[3]).clamp(max=MAX_LOG_SIZE))
    return torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], dim=-1)


def nms_keep(
    boxes: torch.Tensor, classes: torch.Tensor, valid: torch.Tensor, iou_threshold: float
) -> torch.Tensor:
    """Which of the `valid` candidates greedy NMS keeps, as torchvision's
    `batched_nms` on the CPU decides it.

    Args:
        boxes: (B, K, 4) candidates, highest score first.
        classes: (B, K) their categories.
        valid: (B, K) which are candidates.
        iou_threshold: a box overlapping a kept one of its category by more is
            suppressed.

    Returns:
        (B, K) bool.
    """
    # Categories apart: each one's boxes shifted past the others' (the largest
    # coordinate of the frame's candidates, all >= 0 after clipping).
    largest = torch.where(valid[..., None], boxes, 0.0).flatten(1).amax(dim=1)
    shifted = boxes + (classes.to(boxes.dtype) * (largest[:, None] + 1))[..., None]
    x1, y1, x2, y2 = shifted.unbind(-1)
    areas = (x2 - x1) * (y2 - y1)
    # torchvision's `nms_kernel_impl`: intersection, then IoU against the kept box i.
    w = (
        torch.minimum(x2[:, :, None], x2[:, None, :])
        - torch.maximum(x1[:, :, None], x1[:, None, :])
    ).clamp(min=0)
    h = (
        torch.minimum(y2[:, :, None], y2[:, None, :])
        - torch.maximum(y1[:, :, None], y1[:, None, :])
    ).clamp(min=0)
    inter = w * h
    iou = inter / (areas[:, :, None] + areas[:, None, :] - inter)
    # suppresses[b, i, j]: candidate i, kept, suppresses the later candidate j.
    later = torch.ones(iou.shape[-2:], dtype=torch.bool, device=iou.device).triu(diagonal=1)
    suppresses = (iou > iou_threshold) & later & valid[:, :, None] & valid[:, None, :]
    return _greedy_fixed_point(suppresses)


@scripted
def _greedy_fixed_point(suppresses: torch.Tensor) -> torch.Tensor:
    """The candidates no kept candidate suppresses, iterated to its fixed point
    (scripted so that a traced caller keeps the loop: an ONNX `Loop`)."""
    kept = torch.ones(suppresses.shape[:2], dtype=torch.bool, device=suppresses.device)
    changed = True
    while changed:
        after = ~(suppresses & kept[:, :, None]).any(dim=1)
        changed = bool(torch.logical_xor(after, kept).any())
        kept = after
    return kept
