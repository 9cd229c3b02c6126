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
    grid = torch.nan_to_num(points, nan=0.0).long()
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
