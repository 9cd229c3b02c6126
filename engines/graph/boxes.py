"""Box detectors: frames to boxes, alone or as the first stage of top-down inference.

Reproduces sleap-nn 0.3.5's `bbox_centernet` inference (`inference/bbox.py`
`decode_centernet`, `inference/layers/bbox.py` `BBoxLayer.postprocess`):

1. Frames are preprocessed with the detector's settings, as a centroid model's
   (`sleap_live.engines.graph.preprocess`); the network's centre head ends in a
   sigmoid, its size head gives box width and height in grid cells, its offset
   head the centre's place inside its cell.
2. Peaks: a 3x3 max pool keeps the cells equal to their neighbourhood's maximum
   (the others become 0); the `max_detections` highest cells of all categories
   are taken, highest first (`torch.topk` over category-major cells).
3. Each one's box is `((x - w / 2) * stride, (y - h / 2) * stride, (x + w / 2) *
   stride, (y + h / 2) * stride)` with `x, y` its cell plus offset and `w, h` the
   size there (negative sizes clamped to 0), clipped to `[0, W - 1] x [0, H - 1]`
   of the padded network input. A detection needs a score of at least the
   threshold and a box with area after clipping; CenterNet has no IoU NMS
   (sleap-nn's `DEFAULT_NMS_IOU["bbox_centernet"]` is None).
4. Boxes are divided by the input scale and the size matcher's scale, then
   clipped to the frame `[0, W - 1] x [0, H - 1]`; one left with no area is
   dropped.

`max_detections` is sleap-nn's `max_instances` (100 when unset,
`DEFAULT_MAX_DETECTIONS`). Detections fill fixed slots per frame, so the stage
has no data-dependent shape until the top-down model picks the valid ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    frame_input,
    network_input_values,
    size_matched_values,
)
from sleap_live.engines.graph.resize import size_of, static_size

CENTER_HEAD = "BBoxCenterHead"
SIZE_HEAD = "BBoxSizeHead"
OFFSET_HEAD = "BBoxOffsetHead"
# sleap-nn's detections per frame when `max_instances` is unset
# (`inference/bbox.py` `DEFAULT_MAX_DETECTIONS`) and its peak max-pool window.
DEFAULT_MAX_DETECTIONS = 100
NMS_KERNEL = 3


class BoxStage(torch.nn.Module):
    """Frames to boxes with a box detector's network; a subclass decodes its heads.

    `forward` takes uint8 (B, C, H, W) frames (and whether their shape is frozen
    into the graph) and returns `(boxes, scores, classes, valid)`, each with K =
    `max_detections` slots per frame, highest score first: (B, K, 4) float32
    x1, y1, x2, y2 in frame pixels, (B, K) float32 scores, (B, K) int64 category
    indices and (B, K) bool, which slots hold a detection (the others' values
    are meaningless).

    Args:
        network: the detector's network.
        preprocess: the detector's preprocessing.
        output_stride: stride of its (finest) maps.
        max_detections: K; None: `DEFAULT_MAX_DETECTIONS`.
        threshold: a detection's score must be at least this.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        output_stride: int,
        max_detections: int | None,
        threshold: float,
    ) -> None:
        super().__init__()
        if max_detections is not None and max_detections < 1:
            raise ValueError(f"max_detections must be >= 1, got {max_detections}")
        self.network = network
        self.preprocess = preprocess
        self.output_stride = output_stride
        self.max_detections = DEFAULT_MAX_DETECTIONS if max_detections is None else max_detections
        self.threshold = threshold

    @property
    def cell_px(self) -> float:
        """The frame pixels one cell of the maps spans."""
        return self.output_stride / self.preprocess.scale

    def forward(self, frames: torch.Tensor, specialised: bool = False) -> tuple[torch.Tensor, ...]:
        image, eff_scale = frame_input(frames, self.preprocess, specialised=specialised)
        return self._frame_boxes(
            image,
            eff_scale,
            (size_of(image, 2), size_of(image, 3)),
            (size_of(frames, 2), size_of(frames, 3)),
            fixed_shapes=False,
        )

    def _frame_boxes(
        self,
        image: torch.Tensor,
        eff_scale: torch.Tensor,
        image_size: tuple[torch.Tensor, torch.Tensor],
        frame_size: tuple[torch.Tensor, torch.Tensor],
        *,
        fixed_shapes: bool,
    ) -> tuple[torch.Tensor, ...]:
        """The network's boxes on `image`, decoded (`decode`), in frame pixels and
        clipped to a frame of `frame_size`: `(boxes, scores, classes, valid)`."""
        heads = self.network(image)
        boxes, scores, classes, valid = self.decode(heads, *image_size, fixed_shapes=fixed_shapes)
        # Model input to frame pixels: sleap-nn's `undo_input_scale` (skipped at
        # scale 1) and `undo_eff_scale` (dividing by 1 changes nothing).
        if self.preprocess.scale != 1.0:
            boxes = boxes / self.preprocess.scale
        boxes, on_frame = clip_boxes(boxes / eff_scale, *frame_size)
        return boxes, scores, classes, valid & on_frame

    def values(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`forward` for the TensorRT profile: float32 (B, C, H, W) frame values in,
        the same `(boxes, scores, classes, valid)` out."""
        sized, eff_scale = size_matched_values(frames, self.preprocess)
        image = network_input_values(sized, self.preprocess)
        shape = torch.tensor([static_size(image, 2), static_size(image, 3)])
        frame = torch.tensor([static_size(frames, 2), static_size(frames, 3)])
        return self._frame_boxes(
            image, eff_scale, (shape[:1], shape[1:]), (frame[:1], frame[1:]), fixed_shapes=True
        )

    def slots(self, frames: torch.Tensor, slots: int) -> tuple[torch.Tensor, ...]:
        """`values`' first `slots` detections of each frame.

        Returns:
            `(boxes, scores, classes, valid)`: the frame's first `slots` detections,
            highest score first, in (B, slots, 4) frame pixels, (B, slots) scores
            and (B, slots) int64 categories (0 in empty slots), and (B, slots)
            which slots hold one.
        """
        boxes, scores, classes, valid = self.values(frames)
        # The categories ride along as a fifth column (float32 holds them exactly).
        rows = torch.cat([boxes, classes[..., None].to(boxes.dtype)], dim=-1)
        picked, scores, filled = first_slots(rows, scores, valid, slots)
        return picked[..., :4], scores, picked[..., 4].to(torch.int64), filled

    def decode(
        self,
        heads: dict[str, torch.Tensor],
        height: torch.Tensor,
        width: torch.Tensor,
        *,
        fixed_shapes: bool,
    ) -> tuple[torch.Tensor, ...]:
        """The network's outputs decoded: `(boxes, scores, classes, valid)` in
        network-input pixels, clipped to its `height` x `width` ((1,) int64),
        `max_detections` slots per frame, highest score first; with `fixed_shapes`
        (the TensorRT profile) every tensor inside has a size known when the graph
        is built."""
        raise NotImplementedError


class CenterNetStage(BoxStage):
    """Frames to boxes with a `bbox_centernet` network: a `BoxStage` whose network
    has `BBoxCenterHead` (probabilities), `BBoxSizeHead` and `BBoxOffsetHead`
    outputs at one stride."""

    def decode(
        self,
        heads: dict[str, torch.Tensor],
        height: torch.Tensor,
        width: torch.Tensor,
        *,
        fixed_shapes: bool,
    ) -> tuple[torch.Tensor, ...]:
        return decode_centernet(
            heads[CENTER_HEAD],
            heads[SIZE_HEAD],
            heads[OFFSET_HEAD],
            self.output_stride,
            self.max_detections,
            self.threshold,
            height,
            width,
        )


def first_slots(
    boxes: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor, slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first `slots` valid detections of each frame, in order, without a scatter.

    A detection can be invalid between valid ones (a box with no area on the
    frame), so slot j takes the detection whose running count of valid ones is j.

    Args:
        boxes: (B, K, C) a row per detection (C = 4: its corners).

    Returns:
        `(boxes, scores, valid)`: (B, slots, C), (B, slots) (0 in empty slots) and
        (B, slots) bool.
    """
    # Counted in float32 (exact below 2**24): TensorRT's CumSum takes no integers.
    rank = torch.cumsum(valid.to(torch.float32), dim=1) - 1
    wanted = torch.arange(slots, dtype=torch.float32, device=valid.device)
    hit = valid[:, None, :] & (rank[:, None, :] == wanted[None, :, None])  # (B, S, K)
    # The one hit of each slot (ArgMax over float: TensorRT has no integer ArgMax).
    index = hit.to(torch.float32).argmax(dim=2)
    filled = hit.any(dim=2)
    picked = boxes.gather(1, index[..., None].expand(-1, -1, static_size(boxes, 2)))
    return (
        torch.where(filled[..., None], picked, 0.0),
        torch.where(filled, scores.gather(1, index), 0.0),
        filled,
    )


def decode_centernet(
    heatmap: torch.Tensor,
    size: torch.Tensor,
    offset: torch.Tensor,
    output_stride: int,
    max_detections: int,
    threshold: float,
    height: torch.Tensor,
    width: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """sleap-nn's `decode_centernet` on fixed slots, in its float32 operation order.

    Args:
        heatmap: (B, C, h, w) centre probabilities.
        size: (B, 2, h, w) box width and height in cells.
        offset: (B, 2, h, w) centre offsets in cells.
        output_stride: the maps' stride in network-input pixels.
        max_detections: K slots per frame.
        threshold: least score of a detection.
        height, width: (1,) int64 size of the network input, which boxes are
            clipped to.

    Returns:
        `(boxes, scores, classes, valid)` in network-input pixels, K slots per
        frame, highest score first (see `BoxStage`).
    """
    batch, _, map_height, map_width = heatmap.shape
    pooled = F.max_pool2d(heatmap, NMS_KERNEL, stride=1, padding=NMS_KERNEL // 2)
    peaks = heatmap * (pooled == heatmap).to(heatmap.dtype)
    # -inf padding gives K candidates on maps with fewer cells than K (sleap-nn then
    # takes all cells; padded slots never pass the threshold).
    flat = F.pad(peaks.reshape(batch, -1), (0, max_detections), value=float("-inf"))
    scores, indices = torch.topk(flat, max_detections, dim=1)
    cells = map_height * map_width
    in_map = scores > float("-inf")
    indices = torch.where(in_map, indices, 0)
    classes = indices // cells
    cell = indices % cells
    ys = (cell // map_width).to(heatmap.dtype)
    xs = (cell % map_width).to(heatmap.dtype)
    wh = _gather_cells(size, cell).clamp(min=0)
    off = _gather_cells(offset, cell)
    xs, ys = xs + off[..., 0], ys + off[..., 1]
    stride = float(output_stride)
    boxes = torch.stack(
        [
            (xs - wh[..., 0] / 2) * stride,
            (ys - wh[..., 1] / 2) * stride,
            (xs + wh[..., 0] / 2) * stride,
            (ys + wh[..., 1] / 2) * stride,
        ],
        dim=-1,
    )
    boxes, has_area = clip_boxes(boxes, height, width)
    return boxes, scores, classes, in_map & (scores >= threshold) & has_area


def _gather_cells(maps: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    """(B, 2, h, w) maps read at (B, K) raster cells: (B, K, 2)."""
    flat = maps.flatten(2)
    index = cell[:, None, :].expand(-1, flat.shape[1], -1)
    return flat.gather(2, index).permute(0, 2, 1)


def clip_boxes(
    boxes: torch.Tensor, height: torch.Tensor, width: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Boxes clipped to `[0, width - 1] x [0, height - 1]`, and which keep an area.

    sleap-nn's `_clip_to_image` and `clip_boxes_to_frame`: each coordinate clamped,
    a box valid only with `x2 > x1` and `y2 > y1` afterwards.
    """
    right = (width - 1).to(boxes.dtype)
    bottom = (height - 1).to(boxes.dtype)
    zero = torch.zeros((), dtype=boxes.dtype, device=boxes.device)
    x1, y1, x2, y2 = boxes.unbind(-1)
    clipped = torch.stack(
        [
            torch.minimum(torch.maximum(x1, zero), right),
            torch.minimum(torch.maximum(y1, zero), bottom),
            torch.minimum(torch.maximum(x2, zero), right),
            torch.minimum(torch.maximum(y2, zero), bottom),
        ],
        dim=-1,
    )
    has_area = (clipped[..., 2] > clipped[..., 0]) & (clipped[..., 3] > clipped[..., 1])
    return clipped, has_area


def box_outputs(
    boxes: torch.Tensor, scores: torch.Tensor, classes: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Detection slots as `BOX_OUTPUTS`: the empty slots NaN (category -1), as
    sleap-nn pads them."""
    return (
        valid,
        torch.where(valid[..., None], boxes, float("nan")),
        torch.where(valid, scores, float("nan")),
        torch.where(valid, classes, -1).to(torch.int32),
    )


def box_centres(boxes: torch.Tensor) -> torch.Tensor:
    """(..., 4) boxes' centres (..., 2), as sleap-nn's `BBoxStageLayer` computes them."""
    return torch.stack(
        [(boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2], dim=-1
    )
