"""Tiled inference inside the graph: a frame larger than the model's input run as tiles.

Reproduces sleap-nn 0.3.5's tiled single-instance predict (`TiledLayer` in
`sleap_nn/inference/layers/tiled.py`, the grid of `sleap_nn/data/tiling.py`'s
`generate_tile_grid`, the window and canvas of `sleap_nn/inference/tile_merger.py`):

1. the preprocessed frame (no size matcher; input scale, then zero padding to the
   output stride) is cut into square tiles whose origins lie on a grid: per axis
   `0, step, 2 step, ...` while a tile still fits strictly inside, then one last
   tile flush with the far edge (snapped down to the output stride), unless it
   repeats the one before; a frame no larger than a tile is one tile, zero padded;
2. the network runs on every tile;
3. each tile's confidence maps, weighted by an importance window (Gaussian,
   pyramid or constant, never below 1e-3), are summed into a frame-sized canvas,
   the windows into a weight canvas, and the canvas divided by the weights.

Every size comes from tensor shapes (the grid is computed with `arange` and a
mask, the tiles gathered with `index_select`, the canvas summed with
`scatter_add`), so an exported graph takes any frame size. `scatter_add` adds a
pixel's contributions in tile order, the order sleap-nn's canvas adds them, so
the stitched maps are sleap-nn's. It exports as ONNX `ScatterElements` with
`reduction="add"`, which needs opset 16 or later.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from sleap_live.engines.graph.resize import as_scalar, size_of

# sleap-nn's importance windows (`build_importance_window`'s modes).
BLENDS = ("gaussian", "pyramid", "constant")
# Floor of a window's weights: every covered pixel keeps a positive weight.
MIN_WINDOW_WEIGHT = 1e-3


@attrs.frozen
class TileGeometry:
    """Where tiles go on a frame and how they are merged (sleap-nn's `TilingConfig`).

    Attributes:
        tile_size: side of the square tiles, in (scaled) input pixels.
        overlap: requested overlap of neighbouring tiles, in pixels.
        min_overlap_fraction: the overlap is at least this fraction of a tile.
        output_stride: stride of the confidence maps; origins are its multiples.
        max_stride: the backbone's stride; the step snaps to it where it can.
        blend: importance window, one of `BLENDS`.
        sigma_scale: the Gaussian window's standard deviation per tile side.
    """

    tile_size: int
    overlap: int
    min_overlap_fraction: float
    output_stride: int
    max_stride: int
    blend: str = "gaussian"
    sigma_scale: float = 0.125

    @property
    def step(self) -> int:
        """Distance between neighbouring interior tiles, as `_axis_tile_origins` snaps it."""
        overlap = max(self.overlap, round(self.min_overlap_fraction * self.tile_size))
        step = self.tile_size - overlap
        use_max = step >= self.max_stride and self.max_stride % self.output_stride == 0
        unit = self.max_stride if use_max else self.output_stride
        return max((step // unit) * unit, self.output_stride)

    @property
    def map_size(self) -> int:
        """Side of a tile's confidence maps."""
        return self.tile_size // self.output_stride


def importance_window(geometry: TileGeometry) -> torch.Tensor:
    """The (t, t) float32 weights of one tile's confidence maps, as sleap-nn builds them.

    Peak 1 at the centre; Gaussian per axis with standard deviation
    `sigma_scale * t`, or a triangle (distance to the nearest edge), or ones;
    clamped below at the window's own minimum or `MIN_WINDOW_WEIGHT`, the larger.
    """
    size = geometry.map_size
    if geometry.blend == "gaussian":
        sigma = geometry.sigma_scale * size
        half = (size - 1) / 2.0
        axis = torch.arange(-half, half + 1)
        profile = torch.exp(axis**2 / (-2 * sigma**2))
    elif geometry.blend == "pyramid":
        index = torch.arange(1, size + 1, dtype=torch.float32)
        ramp = torch.minimum(index, size + 1 - index)
        profile = ramp / ramp.max()
    elif geometry.blend == "constant":
        profile = torch.ones(size)
    else:
        raise ValueError(f"unknown tiling blend {geometry.blend!r}; expected one of {BLENDS}")
    window = profile[:, None] * profile[None, :]
    floor = max(float(window.min()), MIN_WINDOW_WEIGHT)
    return torch.clamp(window, min=floor).float()


def tile_origins(size: torch.Tensor, geometry: TileGeometry) -> torch.Tensor:
    """Origins of the tiles along one axis of `size` (1,) int64 pixels, (n,) int64.

    `size` is a multiple of the output stride (the frame is padded to it).
    """
    excess = as_scalar(size) - geometry.tile_size
    step = geometry.step
    # Interior tiles k * step while k * step + tile < size; step is a multiple of the
    # output stride, so they need no snapping.
    count = torch.clamp(torch.div(excess + (step - 1), step, rounding_mode="floor"), min=0)
    interior = torch.arange(count, device=size.device) * step
    stride = geometry.output_stride
    last = torch.div(torch.clamp(excess, min=0), stride, rounding_mode="floor") * stride
    candidates = torch.cat([interior, last.reshape(1)])
    # The last tile unless it repeats the last interior one (it is never before it).
    fresh = (count == 0) | (last != (count - 1) * step)
    keep = torch.cat([torch.ones_like(interior, dtype=torch.bool), fresh.reshape(1)])
    return candidates[keep]


def _tiles(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, size: int) -> torch.Tensor:
    """The (B * ny * nx, C, size, size) tiles of (B, C, H, W) `image` at the origins."""
    offsets = torch.arange(size, device=image.device)
    row_index = (rows[:, None] + offsets).reshape(-1)
    col_index = (cols[:, None] + offsets).reshape(-1)
    picked = image.index_select(2, row_index).index_select(3, col_index)
    batch, channels = picked.shape[0], picked.shape[1]
    grid = picked.reshape(batch, channels, rows.shape[0], size, cols.shape[0], size)
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(-1, channels, size, size)


def tiled_confmaps(
    image: torch.Tensor,
    network: torch.nn.Module,
    head: str,
    geometry: TileGeometry,
    window: torch.Tensor,
) -> torch.Tensor:
    """The frame's confidence maps, stitched from the network's maps of its tiles.

    Args:
        image: (B, C, H, W) float32 network input, H and W multiples of the
            output stride.
        network: maps (T, C, tile, tile) tiles to a dict holding `head`.
        head: the confidence map head's name.
        geometry: the tiling.
        window: `importance_window(geometry)`.

    Returns:
        (B, N, H / stride, W / stride) float32 maps.
    """
    stride, tile, cells = geometry.output_stride, geometry.tile_size, geometry.map_size
    height, width = size_of(image, 2), size_of(image, 3)
    rows, cols = tile_origins(height, geometry), tile_origins(width, geometry)
    # A frame smaller than a tile is zero padded to one (sleap-nn's canvas is the
    # larger of the two and cropped back to the frame).
    canvas_height = torch.clamp(height, min=tile)
    canvas_width = torch.clamp(width, min=tile)
    padded = F.pad(
        image,
        (0, as_scalar(canvas_width - width), 0, as_scalar(canvas_height - height)),
    )
    maps = network(_tiles(padded, rows, cols, tile))[head]
    batch, nodes = image.shape[0], maps.shape[1]
    n_rows, n_cols = rows.shape[0], cols.shape[0]
    # (B, N, ny, nx, t, t), flattened in tile order: the order sleap-nn adds tiles in.
    weighted = (maps * window).reshape(batch, n_rows, n_cols, nodes, cells, cells)
    weighted = weighted.permute(0, 3, 1, 2, 4, 5).reshape(batch, nodes, -1)
    offsets = torch.arange(cells, device=image.device)
    canvas_rows = torch.div(canvas_height, stride, rounding_mode="floor")
    canvas_cols = torch.div(canvas_width, stride, rounding_mode="floor")
    row_cells = torch.div(rows, stride, rounding_mode="floor")[:, None] + offsets
    col_cells = torch.div(cols, stride, rounding_mode="floor")[:, None] + offsets
    flat = row_cells[:, None, :, None] * canvas_cols + col_cells[None, :, None, :]
    flat = flat.reshape(-1)
    area = as_scalar(canvas_rows * canvas_cols)
    total = torch.zeros(batch, nodes, area, dtype=maps.dtype, device=maps.device)
    total = total.scatter_add(2, flat.expand(batch, nodes, -1), weighted)
    weights = window.expand(n_rows, n_cols, cells, cells).reshape(-1)
    count = torch.zeros(area, dtype=maps.dtype, device=maps.device).scatter_add(0, flat, weights)
    stitched = (total / count).reshape(batch, nodes, as_scalar(canvas_rows), as_scalar(canvas_cols))
    return stitched[:, :, : as_scalar(height) // stride, : as_scalar(width) // stride]
