"""Fixed-size windows cut around points, as sleap-nn's checkpoint path cuts them.

Top-down inference cuts one crop per centroid from the (size-matched) frame,
and integral refinement cuts a small patch around each confidence-map peak; both
use the same window arithmetic in sleap-nn (`make_centered_bboxes` followed by
`crop_bboxes`), reproduced here:

- the box's top-left corner is `(center - size / 2) + 0.5`, in float32;
- the window starts at `trunc(top_left + size // 2) - size // 2`, so an even-sized
  window starts at `round_half_up(center) - size / 2` and an odd-sized one at
  `floor(center) - size // 2` (for centers >= 0);
- pixels outside the image read as 0.

The window is gathered with integer indices, so it exports to ONNX with a
data-dependent number of windows.
"""

from __future__ import annotations

import torch


def box_top_left(centers: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Top-left corner of sleap-nn's box around each center.

    sleap-nn adds this (not the integer window origin) to crop-local keypoints
    to bring them back to frame coordinates, so it is part of the output
    convention: keypoints land up to one pixel away from where the window was.

    Args:
        centers: (n, 2) float32 xy.
        height: box height in pixels.
        width: box width in pixels.

    Returns:
        (n, 2) float32 xy.
    """
    corner = torch.stack([centers[:, 0] - width / 2, centers[:, 1] - height / 2], dim=1)
    return corner + 0.5


def window_origins(centers: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Integer top-left pixel of the window sleap-nn cuts around each center.

    Args:
        centers: (n, 2) float32 xy.
        height: window height in pixels.
        width: window width in pixels.

    Returns:
        (n, 2) int64 xy.
    """
    corner = box_top_left(centers, height, width)
    # `.long()` truncates toward zero like sleap-nn's; it differs from floor only
    # for windows hanging off the top/left edge.
    x = (corner[:, 0] + width // 2).long() - width // 2
    y = (corner[:, 1] + height // 2).long() - height // 2
    return torch.stack([x, y], dim=1)


def clip_index(index: torch.Tensor, size: int | torch.Tensor) -> torch.Tensor:
    """Integer indices clipped into `[0, size - 1]`.

    With Max and Min rather than a clamp, which exports as a Clip that TensorRT
    does not run on integers.
    """
    low = torch.zeros((), dtype=index.dtype, device=index.device)
    high = torch.as_tensor(size - 1, dtype=index.dtype, device=index.device)
    return torch.minimum(torch.maximum(index, low), high)


def gather_windows(
    images: torch.Tensor,
    sample_inds: torch.Tensor,
    origins: torch.Tensor,
    height: int,
    width: int,
) -> torch.Tensor:
    """Cuts a (height, width) window from an image for each origin.

    Args:
        images: (B, H, W, C) channels-last images of any dtype.
        sample_inds: (n,) int64 image each window is cut from.
        origins: (n, 2) int64 xy of each window's top-left pixel.
        height: window height.
        width: window width.

    Returns:
        (n, height, width, C) windows in `images`' dtype; pixels outside the image are 0.
    """
    image_height, image_width = images.shape[1], images.shape[2]
    rows = origins[:, 1:2] + torch.arange(height, device=origins.device)  # (n, height)
    cols = origins[:, 0:1] + torch.arange(width, device=origins.device)  # (n, width)
    inside = ((rows >= 0) & (rows < image_height))[:, :, None] & (
        (cols >= 0) & (cols < image_width)
    )[:, None, :]
    rows = clip_index(rows, image_height)
    cols = clip_index(cols, image_width)
    flat = (sample_inds[:, None, None] * image_height + rows[:, :, None]) * image_width + cols[
        :, None, :
    ]
    pixels = images.reshape(-1, images.shape[3])[flat]  # (n, height, width, C)
    return torch.where(inside[..., None], pixels, 0)


def crop_centered(
    images: torch.Tensor,
    sample_inds: torch.Tensor,
    centers: torch.Tensor,
    height: int,
    width: int,
) -> torch.Tensor:
    """sleap-nn's crop around each center: `gather_windows` at `window_origins`.

    Args:
        images: (B, H, W, C) channels-last images.
        sample_inds: (n,) int64 image of each center.
        centers: (n, 2) float32 xy in the images' pixels.
        height: crop height.
        width: crop width.

    Returns:
        (n, height, width, C) crops.
    """
    return gather_windows(
        images, sample_inds, window_origins(centers, height, width), height, width
    )
