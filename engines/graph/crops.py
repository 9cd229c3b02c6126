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
data-dependent number of windows. A specialised graph (image sizes frozen at trace
time) pads the images with a window's size of zeros on every side instead, and
gathers whole rows and then columns: no mask, and no gather of single pixels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sleap_live.engines.graph.resize import static_size


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
    *,
    specialised: bool = False,
) -> torch.Tensor:
    """Cuts a (height, width) window from an image for each origin.

    Args:
        images: (B, H, W, C) channels-last images of any dtype.
        sample_inds: (n,) int64 image each window is cut from.
        origins: (n, 2) int64 xy of each window's top-left pixel.
        height: window height.
        width: window width.
        specialised: trace with the images' height, width and channels frozen
            (`_gather_padded`); the same windows.

    Returns:
        (n, height, width, C) windows in `images`' dtype; pixels outside the image are 0.
    """
    if specialised:
        return _gather_padded(images, sample_inds, origins, height, width)
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


def _gather_padded(
    images: torch.Tensor,
    sample_inds: torch.Tensor,
    origins: torch.Tensor,
    height: int,
    width: int,
) -> torch.Tensor:
    """`gather_windows` for images of a frozen size: rows, then columns, of padded images.

    The images get `height` rows and `width` columns of zeros on every side,
    and each origin is clamped into `[-size, image size]` per axis: a window
    that starts further out lies wholly outside the image, and so does the
    clamped one, so both are all zeros. Every window then lies inside the
    padded images, whose rows it gathers whole before it picks its columns.
    """
    image_height, image_width = static_size(images, 1), static_size(images, 2)
    channels = static_size(images, 3)
    padded = F.pad(images, (0, 0, width, width, height, height))
    padded_height, padded_width = image_height + 2 * height, image_width + 2 * width
    device = origins.device
    x = torch.minimum(
        torch.maximum(origins[:, 0], _scalar(-width, device)), _scalar(image_width, device)
    )
    y = torch.minimum(
        torch.maximum(origins[:, 1], _scalar(-height, device)), _scalar(image_height, device)
    )
    rows = (sample_inds * padded_height + y + height)[:, None] + torch.arange(height, device=device)
    strips = padded.reshape(-1, padded_width * channels)[rows]  # (n, height, padded width * C)
    cols = (x + width)[:, None] + torch.arange(width, device=device)  # (n, width)
    # Pixel-major, channel-minor element indices; the gather's axes stay three (ONNX
    # Runtime's GatherElements is several times slower with a fourth).
    elements = (cols[:, :, None] * channels + torch.arange(channels, device=device)).flatten(1)
    picked = torch.gather(strips, 2, elements[:, None, :].expand(-1, height, -1))
    return picked.reshape(-1, height, width, channels)


def _scalar(value: int, device: torch.device) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.int64, device=device)


def crop_centered(
    images: torch.Tensor,
    sample_inds: torch.Tensor,
    centers: torch.Tensor,
    height: int,
    width: int,
    *,
    specialised: bool = False,
) -> torch.Tensor:
    """sleap-nn's crop around each center: `gather_windows` at `window_origins`.

    Args:
        images: (B, H, W, C) channels-last images.
        sample_inds: (n,) int64 image of each center.
        centers: (n, 2) float32 xy in the images' pixels.
        height: crop height.
        width: crop width.
        specialised: see `gather_windows`.

    Returns:
        (n, height, width, C) crops.
    """
    origins = window_origins(centers, height, width)
    return gather_windows(images, sample_inds, origins, height, width, specialised=specialised)
