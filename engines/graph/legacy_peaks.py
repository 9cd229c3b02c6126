"""Peak placement the way SLEAP 1.x (TensorFlow) placed peaks.

SLEAP 1.4's inference layers (`sleap/nn/inference.py`, `sleap/nn/peak_finding.py`)
differ from sleap-nn's in two ways kept here:

- A model trained with an `OffsetRefinementHead` is refined by it: the peak's
  grid position plus the learned (x, y) offset read at that grid cell
  (`find_global_peaks_with_offsets`, `find_local_peaks_with_offsets`), instead of
  integral refinement.
- With an input scale other than 1, grid points become image points as
  `grid * output_stride / input_scale + 0.5` (SLEAP's "offset TensorFlow's
  image resizing"); at scale 1 as `grid * output_stride`.
"""

from __future__ import annotations

import torch

# SLEAP 1.x adds this to points of a model run at an input scale other than 1.
SCALED_INPUT_SHIFT = 0.5


def learned_offsets(offset_maps: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """The offset head's (x, y) at each grid point.

    Args:
        offset_maps: (S, 2 * N, H, W) offsets; channels 2k and 2k + 1 are x and y
            of part k (Keras's (..., N, 2) reshape of its last axis).
        points: (S, N, 2) integer-valued grid xy; NaN where there is no peak.

    Returns:
        (S, N, 2) float32 offsets (any value where `points` is NaN).
    """
    samples, channels, height, width = offset_maps.shape
    maps = offset_maps.reshape(samples, channels // 2, 2, height * width)
    # Not nan_to_num: its ONNX export casts to float64, which TensorRT cannot run.
    grid = torch.where(torch.isnan(points), 0.0, points).long()
    cell = grid[..., 1] * width + grid[..., 0]
    index = cell[:, :, None, None].expand(-1, -1, 2, 1)
    return maps.gather(3, index)[..., 0]


def sleap1_grid_to_image(
    points: torch.Tensor, output_stride: int, input_scale: float
) -> torch.Tensor:
    """Grid xy to image pixels as SLEAP 1.x computes them (see the module docstring)."""
    points = points * output_stride
    if input_scale != 1.0:
        points = points / input_scale + SCALED_INPUT_SHIFT
    return points


def learned_offsets_at(
    offset_maps: torch.Tensor, sample: torch.Tensor, points: torch.Tensor
) -> torch.Tensor:
    """A one-part offset head's (x, y) at listed grid points (the centroid stage).

    Args:
        offset_maps: (S, 2, H, W) offsets.
        sample: (n,) int64 map of each point.
        points: (n, 2) grid xy (a flat top's mean is read at its first pixel).

    Returns:
        (n, 2) float32 offsets.
    """
    width = offset_maps.shape[3]
    grid = torch.floor(points).long()
    cell = grid[:, 1] * width + grid[:, 0]
    return offset_maps.flatten(2)[sample, :, cell]


def slot_offsets(offset_maps: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """`learned_offsets_at` for (B, K, 2) slots of one-part maps: (B, K, 2) offsets."""
    width = offset_maps.shape[3]
    grid = torch.floor(points).long()
    cell = grid[..., 1] * width + grid[..., 0]  # (B, K)
    flat = offset_maps.flatten(2)  # (B, 2, H * W)
    gathered = flat.gather(2, cell[:, None, :].expand(-1, 2, -1))  # (B, 2, K)
    return gathered.permute(0, 2, 1)


def sleap1_crops(
    frames: torch.Tensor, frame_inds: torch.Tensor, centers: torch.Tensor, size: int
) -> torch.Tensor:
    """Crops as SLEAP 1.x cut them around centroids, uint8 values in float32.

    `make_centered_bboxes` + `crop_bboxes`: `tf.image.crop_and_resize` of the
    uint8 frame with a box whose pixel centres run from `center - (size - 1) / 2`
    for `size` pixels, bilinear, 0 outside the image, cast back to uint8
    (truncated). The sample positions follow TensorFlow's kernel arithmetic in
    float32: the box normalised by `(side - 1)`, `in = y1 * (side - 1) + i *
    ((y2 - y1) * (side - 1) / (size - 1))`.

    Args:
        frames: (B, H, W, C) uint8 frames, or float32 holding uint8 values.
        frame_inds: (n,) int64 frame of each crop.
        centers: (n, 2) float32 xy centres in the frame's pixels.
        size: side of the square crops (> 1).

    Returns:
        (n, size, size, C) float32 integer values.
    """
    image = frames.float()
    height, width = image.shape[1], image.shape[2]
    steps = torch.arange(size, dtype=torch.float32, device=image.device)
    half = (size - 1) / 2

    def positions(center: torch.Tensor, side: int) -> tuple[torch.Tensor, ...]:
        last = torch.tensor(side - 1, dtype=torch.float32, device=image.device)
        start = (center - half) / last
        stop = (center + half) / last
        step = (stop - start) * last / (size - 1)
        where = start[:, None] * last + steps * step[:, None]  # (n, size)
        inside = (where >= 0) & (where <= last)
        low = torch.floor(where).clamp(0, side - 1)
        high = torch.ceil(where).clamp(0, side - 1)
        return where - torch.floor(where), low.long(), high.long(), inside

    y_lerp, top, bottom, rows_inside = positions(centers[:, 1], height)
    x_lerp, left, right, cols_inside = positions(centers[:, 0], width)
    f = frame_inds[:, None, None]

    def at(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return image[f, rows[:, :, None], cols[:, None, :]]  # (n, size, size, C)

    x_weight = x_lerp[:, None, :, None]
    top_row = at(top, left) + (at(top, right) - at(top, left)) * x_weight
    bottom_row = at(bottom, left) + (at(bottom, right) - at(bottom, left)) * x_weight
    crops = top_row + (bottom_row - top_row) * y_lerp[:, :, None, None]
    inside = (rows_inside[:, :, None] & cols_inside[:, None, :])[..., None]
    # uint8 truncation; the values are never negative, so floor (ONNX has no Trunc).
    return torch.where(inside, torch.floor(crops), 0.0)


def channel_offsets(offset_maps: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """The offset head's (x, y) at K peak slots per part (bottom-up).

    Args:
        offset_maps: (B, 2 * N, H, W) offsets, x and y of part k in channels 2k, 2k + 1.
        points: (B, N, K, 2) grid xy of the slots (empty slots anywhere on the grid).

    Returns:
        (B, N, K, 2) float32 offsets.
    """
    batch, channels, height, width = offset_maps.shape
    maps = offset_maps.reshape(batch, channels // 2, 2, height * width)
    grid = torch.floor(points).long()
    cell = grid[..., 1] * width + grid[..., 0]  # (B, N, K)
    gathered = maps.gather(3, cell[:, :, None, :].expand(-1, -1, 2, -1))  # (B, N, 2, K)
    return gathered.transpose(2, 3)
