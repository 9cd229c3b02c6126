"""Peak finding on confidence maps, reproducing sleap-nn's `inference/ops/peaks.py`.

Coordinates here are on the confidence-map grid, xy order, no half-pixel offset.

- Global peaks (one per map; single-instance and centered-instance heads): x is
  the first column that holds the map's maximum and y the first row that does,
  as sleap-nn's two chained `max` reductions give. A maximum below the
  threshold means no peak.
- Local peaks (centroids, bottom-up part maps): a pixel above the threshold that
  is greater than its 4 neighbours before it in raster order and not less than
  the 4 after it. Equal neighbours form a flat top, which is one peak at the mean
  of its pixels if it fits in a 2x2 block and nothing next to it is as high;
  otherwise it is no peak (sleap-nn #781). Found peaks are listed in raster order
  of (sample, row, column, channel).
- Integral refinement: the intensity-weighted mean offset over a
  `patch_size`-square window around the peak pixel (zeros outside the map),
  added to it. For local peaks the window sits at the floor of the (possibly
  fractional, flat-top) peak and the offset is added to that floor.

Thresholds: global peaks need `value >= threshold`, local peaks `value > threshold`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
import torch.nn.functional as F

from sleap_live.engines.graph.crops import gather_windows, window_origins

DEFAULT_PEAK_THRESHOLD = 0.2
DEFAULT_PATCH_SIZE = 5

_Function = TypeVar("_Function", bound=Callable[..., Any])


def integral_offsets(
    maps: torch.Tensor,
    map_inds: torch.Tensor,
    anchors: torch.Tensor,
    patch_size: int = DEFAULT_PATCH_SIZE,
) -> torch.Tensor:
    """Sub-pixel offsets from the confidence mass around integer peak positions.

    Args:
        maps: (S, H, W) float32 confidence maps.
        map_inds: (n,) int64 map of each peak.
        anchors: (n, 2) float32 integer-valued xy of each peak pixel.
        patch_size: side of the square window.

    Returns:
        (n, 2) float32 xy offsets `sum(map * grid) / sum(map)` on a grid centred
        on the patch.
    """
    origins = window_origins(anchors, patch_size, patch_size)
    patches = gather_windows(maps.unsqueeze(-1), map_inds, origins, patch_size, patch_size)[..., 0]
    grid = torch.arange(patch_size, dtype=torch.float32, device=maps.device)
    grid = grid - (patch_size - 1) / 2
    total = patches.sum((1, 2))
    x = (patches * grid).sum((1, 2)) / total
    y = (patches * grid[:, None]).sum((1, 2)) / total
    return torch.stack([x, y], dim=1)


def refine_peaks(
    cms: torch.Tensor,
    map_inds: torch.Tensor,
    points: torch.Tensor,
    patch_size: int,
) -> torch.Tensor:
    """Integral refinement of peaks found on the grid.

    Args:
        cms: (B, N, H, W) confidence maps; map `i` is channel `i % N` of sample `i // N`.
        map_inds: (n,) int64 flat map index of each peak.
        points: (n, 2) float32 grid xy of each peak.
        patch_size: refinement window side.

    Returns:
        (n, 2) float32 refined grid xy: the floored point plus the integral offset
        of the window there.
    """
    anchors = torch.floor(points)
    maps = cms.reshape(-1, cms.shape[2], cms.shape[3])
    return anchors + integral_offsets(maps, map_inds, anchors, patch_size)


def global_peaks(
    cms: torch.Tensor,
    threshold: float = DEFAULT_PEAK_THRESHOLD,
    refine: bool = True,
    patch_size: int = DEFAULT_PATCH_SIZE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The highest point of each confidence map.

    Args:
        cms: (S, N, H, W) float32 confidence maps.
        threshold: maxima below this are no peak.
        refine: apply integral refinement.
        patch_size: refinement window side.

    Returns:
        `(points, values)`: (S, N, 2) float32 grid xy and (S, N) float32 peak
        values, both NaN where there is no peak.
    """
    column_max = cms.amax(dim=2)  # (S, N, W)
    row_max = cms.amax(dim=3)  # (S, N, H)
    values = column_max.amax(dim=2)
    points = torch.stack([column_max.argmax(dim=2), row_max.argmax(dim=2)], dim=-1).float()
    if refine:
        map_inds = torch.arange(cms.shape[0] * cms.shape[1], device=cms.device)
        flat_points = refine_peaks(cms, map_inds, points.reshape(-1, 2), patch_size)
        points = flat_points.reshape(points.shape)
    found = values >= threshold
    nan = float("nan")
    return torch.where(found[..., None], points, nan), torch.where(found, values, nan)


def scripted(function: _Function) -> _Function:
    """`function` compiled by TorchScript, so that a traced caller keeps its `if`:
    the (TorchScript-based) ONNX exporter writes it as an `If`."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        return cast(_Function, torch.jit.script(function))


def local_peak_map(
    cms: torch.Tensor, threshold: float = DEFAULT_PEAK_THRESHOLD, *, branch_free: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which pixels are local peaks, and each peak's flat-top offset.

    Dense over the maps with fixed shapes, so it traces and exports as it runs;
    the flat-top rule runs only when some candidate has a tied neighbour (an ONNX
    `If` in an exported graph). With `branch_free` the rule always runs and its
    verdict is selected on the device (`torch.where`): no branch reads a value,
    so the graph never waits for the device (a CUDA graph captures it, and
    `torch.export`/`torch.compile` trace it whole); the result is the same.

    Args:
        cms: (S, C, H, W) float32 confidence maps.
        threshold: peaks must be above this.
        branch_free: select the flat-top verdict rather than branch on it.

    Returns:
        `(is_peak, offsets)`: (S, C, H, W) bool marking each peak at the first
        pixel of its flat top in raster order, and (S, C, H, W, 2) float32 xy
        offsets from that pixel to the mean of the flat top's pixels (0 for an
        ordinary peak).
    """
    padded = F.pad(cms, (1, 1, 1, 1), value=float("-inf"))
    # The 4 neighbours before a pixel in raster order are the three above it and
    # the west one; the 4 after it, the east one and the three below.
    threes = F.max_pool2d(padded, (1, 3), stride=1)  # (S, C, H + 2, W)
    before_max = torch.maximum(threes[:, :, :-2], padded[:, :, 1:-1, :-2])
    after_max = torch.maximum(padded[:, :, 1:-1, 2:], threes[:, :, 2:])
    candidate = (cms > before_max) & (cms >= after_max) & (cms > threshold)
    # A candidate's later neighbours that are as high (so equal) form its flat
    # top. Ties are rare in float32, so the rule for them runs only when needed.
    # (A whole-map `any` exports as an int64 sum, several times slower than this.)
    has_flat_top = (candidate & (cms == after_max)).float().amax(dim=(2, 3)).any()
    if branch_free:
        settled, offsets = _flat_top_verdict(cms, padded, candidate)
        return torch.where(has_flat_top, settled, candidate), torch.where(
            has_flat_top, offsets, torch.zeros_like(offsets)
        )
    return _settle_flat_tops(cms, padded, candidate, has_flat_top)


def _flat_top_verdict(
    cms: torch.Tensor, padded: torch.Tensor, candidate: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat-top rule on every candidate: `local_peak_map`'s `(is_peak, offsets)`."""
    # 1 where that neighbour is at least as high as the pixel, else 0.
    north_west = (padded[:, :, :-2, :-2] >= cms).float()
    north = (padded[:, :, :-2, 1:-1] >= cms).float()
    north_east = (padded[:, :, :-2, 2:] >= cms).float()
    west = (padded[:, :, 1:-1, :-2] >= cms).float()
    east = (padded[:, :, 1:-1, 2:] >= cms).float()
    south_west = (padded[:, :, 2:, :-2] >= cms).float()
    south = (padded[:, :, 2:, 1:-1] >= cms).float()
    south_east = (padded[:, :, 2:, 2:] >= cms).float()

    # A candidate's top is itself and its tied (east, south-west, south and
    # south-east) neighbours. It fits a 2x2 block unless it holds the south-west
    # neighbour together with the east or south-east one.
    size = east + south_west + south + south_east + 1
    fits = south_west * (east + south_east) == 0
    # The pixels of a top that fits all neighbour each other, so each has at
    # least size - 1 neighbours as high; one with more has one outside the top:
    # the top leaks, and is no peak. (`east * count` is the east neighbour's
    # count where it is in the top, else 0.)
    count = north_west + north + north_east + west + east + south_west + south + south_east
    count = F.pad(count, [1, 1, 1, 1])
    leaks = (
        (east * count[:, :, 1:-1, 2:] >= size)
        | (south_west * count[:, :, 2:, :-2] >= size)
        | (south * count[:, :, 2:, 1:-1] >= size)
        | (south_east * count[:, :, 2:, 2:] >= size)
    )
    is_peak = candidate & fits & ~leaks
    x = (east + south_east - south_west) / size
    y = (south_west + south + south_east) / size
    return is_peak, torch.stack([x, y], dim=-1)


@scripted
def _settle_flat_tops(
    cms: torch.Tensor, padded: torch.Tensor, candidate: torch.Tensor, has_flat_top: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`local_peak_map`'s verdict on candidates with tied later neighbours.

    Args:
        cms: (S, C, H, W) float32 confidence maps.
        padded: `cms` padded by one -inf pixel on every side.
        candidate: (S, C, H, W) bool, above the threshold and its 4 neighbours
            before, not below the 4 after.
        has_flat_top: () bool, some candidate has a later neighbour as high.

    Returns:
        `local_peak_map`'s `(is_peak, offsets)`.
    """
    if not bool(has_flat_top):
        zeros = torch.zeros_like(cms)
        return candidate, torch.stack([zeros, zeros], dim=-1)
    return _flat_top_verdict(cms, padded, candidate)


def top_peaks(
    cms: torch.Tensor, is_peak: torch.Tensor, max_peaks: int, raster_unless_more: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `max_peaks` highest peaks of every map, as `max_peaks` slots per map.

    A map's kept peaks fill its first slots in raster order. With
    `raster_unless_more`, a map with more peaks than slots lists its kept ones
    highest first instead, as sleap-nn's centroid layer does.

    Args:
        cms: (..., H, W) float32 confidence maps.
        is_peak: (..., H, W) bool, the peaks of `cms` (see `local_peak_map`).
        max_peaks: K, slots per map.
        raster_unless_more: order the kept peaks of overfull maps by value.

    Returns:
        `(values, flat, valid)`, each (..., K): the peak values (-inf in empty
        slots), their pixels' raster indices `row * W + col`, and which slots hold
        a peak.
    """
    scores = torch.where(is_peak, cms, float("-inf")).flatten(-2)
    # Padding guarantees K candidates even on maps with fewer pixels than that.
    scores = F.pad(scores, (0, max_peaks), value=float("-inf"))
    values, flat = torch.topk(scores, max_peaks, dim=-1)
    valid = values > float("-inf")
    # Past every raster index; int32's largest, as CoreML keeps int64 constants in int32.
    key = torch.where(valid, flat, torch.iinfo(torch.int32).max)
    if raster_unless_more:
        n_peaks = is_peak.flatten(-2).sum(-1, keepdim=True)
        slot = torch.arange(max_peaks, device=cms.device).expand_as(flat)
        key = torch.where(n_peaks <= max_peaks, key, slot)
    # A top-k with a constant K (not argsort, whose K the exporter takes from a shape).
    order = torch.topk(key, max_peaks, dim=-1, largest=False).indices
    kept = values.gather(-1, order)
    # Validity from the kept values: CoreML gathers no booleans.
    return kept, flat.gather(-1, order), kept > float("-inf")


def top_local_peaks(
    cms: torch.Tensor,
    max_peaks: int | None,
    threshold: float = DEFAULT_PEAK_THRESHOLD,
    refine: bool = True,
    patch_size: int = DEFAULT_PATCH_SIZE,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Local peaks of single-channel maps, every one or at most `max_peaks` per map.

    Reproduces sleap-nn's centroid layer with `max_instances=max_peaks`: a map
    with up to `max_peaks` peaks keeps them all in raster order; a map with more
    keeps the `max_peaks` highest, highest first. None keeps every peak.

    Args:
        cms: (S, 1, H, W) float32 confidence maps.
        max_peaks: most peaks kept per map, or None for all.
        threshold: peaks must be above this.
        refine: apply integral refinement.
        patch_size: refinement window side.

    Returns:
        `(sample_inds, points, values)`: (n,) int64 map of each peak, (n, 2)
        float32 grid xy and (n,) float32 values; grouped by map.
    """
    is_peak, offsets = local_peak_map(cms, threshold)
    if max_peaks is None:
        sample, _, row, col = torch.nonzero(is_peak).unbind(1)
        values = cms[sample, 0, row, col]
    else:
        width = cms.shape[3]
        top_values, flat, valid = top_peaks(
            cms[:, 0], is_peak[:, 0], max_peaks, raster_unless_more=True
        )
        sample, slot_inds = torch.nonzero(valid).unbind(1)
        flat = flat[sample, slot_inds]
        row, col = flat // width, flat % width
        values = top_values[sample, slot_inds]
    points = torch.stack([col, row], dim=1).float() + offsets[sample, 0, row, col]
    if refine:
        points = refine_peaks(cms, sample, points, patch_size)
    return sample, points, values


def grid_to_image(points: torch.Tensor, output_stride: int, input_scale: float) -> torch.Tensor:
    """Confidence-map grid xy to the (size-matched) image's pixels.

    `points * output_stride / input_scale`, in sleap-nn's float32 operation order.
    """
    points = points * output_stride
    if input_scale != 1.0:
        points = points / input_scale
    return points
