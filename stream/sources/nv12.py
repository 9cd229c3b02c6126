"""NV12 frames, as NVDEC decodes them, to RGB images in torch (gray content: their
red plane, as `FileSource` hands it out).

The results are bit-identical to what `FileSource` gets from PyAV for the same
frame: ``frame.to_ndarray(format="rgb24")`` on an NV12 frame,
which runs FFmpeg's swscale with PyAV's defaults (bilinear, no accurate rounding,
the frame's own colour matrix and range tags). What swscale does there, measured
against it exhaustively (tests/stream/test_nv12.py):

- **rgb24**: chroma is not interpolated across a row (both pixels of a pair take
  their chroma sample) but is interpolated down the columns, with MPEG-2 siting:
  luma row ``r`` mixes its chroma row ``r // 2`` with weight 3/4 and the row above
  (even ``r``) or below (odd ``r``) with 1/4, rounding, ``(3a + b + 2) >> 2``, the
  edge rows repeating. Then swscale's lookup tables turn (Y, U, V) into R, G, B
  (``ff_yuv2rgb_c_init_tables``: a clipped luma table offset by per-chroma terms),
  rebuilt here from the same integer coefficients (``ff_yuv2rgb_coeffs``).
- **not reproduced**: frames of odd width (swscale then interpolates chroma across
  rows at full resolution, ``SWS_FULL_CHR_H_INT``, and writes RGB without tables)
  or odd height (its vertical chroma filter is then not exactly 3/4 and 1/4): up
  to 2 levels apart on the test clips for odd widths, and more where chroma has
  sharp edges; gray from frames tagged
  BT.709 or BT.2020 (FFmpeg 8 converts those to BT.601 luma through their chroma),
  and P010: swscale dithers 10 bits down to 8 with an ordered pattern whose exact
  arithmetic was not matched (1 level apart on a few pixels). `reproducible` says
  which frames these functions match; `NvdecSource` decodes the rest with PyAV.

Every function takes torch tensors on any device (CPU tensors in the tests, CUDA
tensors in `NvdecSource`) and runs there: nothing visits the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
import torch

# swscale's YCbCr -> RGB coefficients {crv, cbu, cgu, cgv} (libswscale/yuv2rgb.c,
# ff_yuv2rgb_coeffs), by FFmpeg colour-space tag (AVColorSpace). Tags not listed
# (unspecified, reserved, BT.470BG, SMPTE 170M) use BT.601, as swscale does.
_COEFFICIENTS: Mapping[str, tuple[int, int, int, int]] = MappingProxyType(
    {
        "bt601": (104597, 132201, 25675, 53279),
        "bt709": (117489, 138438, 13975, 34925),
        "fcc": (104448, 132798, 24759, 53109),
        "smpte240m": (117579, 136230, 16907, 35559),
        "bt2020": (110013, 140363, 12277, 42626),
    }
)
MATRICES: tuple[str, ...] = tuple(_COEFFICIENTS)
_MATRIX_OF_TAG = MappingProxyType({1: "bt709", 4: "fcc", 7: "smpte240m", 9: "bt2020", 10: "bt2020"})
# AVCOL_RANGE_JPEG: full range. Anything else (unspecified, MPEG) is limited range.
_FULL_RANGE_TAG = 2
# Headroom of swscale's luma table on each side (YUVRGB_TABLE_LUMA_HEADROOM).
_LUMA_HEADROOM = 512


def matrix_of(colorspace_tag: int | None) -> str:
    """The matrix swscale uses for an FFmpeg colour-space tag (``frame.colorspace``)."""
    return _MATRIX_OF_TAG.get(colorspace_tag or 0, "bt601")


def is_full_range(color_range_tag: int | None) -> bool:
    """Whether an FFmpeg colour-range tag (``frame.color_range``) means full range."""
    return color_range_tag == _FULL_RANGE_TAG


@attrs.frozen(eq=False)
class YuvTables:
    """swscale's YCbCr -> RGB lookup tables for one matrix and range, on one device.

    ``R = luma[Y + red_v[V]]``, ``G = luma[Y + green_u[U] + green_v[V]]``,
    ``B = luma[Y + blue_u[U]]`` (int64 index tables, 256 entries each).
    """

    luma: torch.Tensor
    red_v: torch.Tensor
    green_u: torch.Tensor
    green_v: torch.Tensor
    blue_u: torch.Tensor


def yuv_tables(matrix: str = "bt601", full_range: bool = False, device: Any = "cpu") -> YuvTables:
    """swscale's rgb24 tables (`ff_yuv2rgb_c_init_tables`, 24 bpp) for ``matrix``.

    Raises:
        ValueError: an unknown matrix.
    """
    if matrix not in _COEFFICIENTS:
        raise ValueError(f"matrix must be one of {', '.join(MATRICES)}; got {matrix!r}")
    crv, cbu, cgu, cgv = _COEFFICIENTS[matrix]
    cgu, cgv = -cgu, -cgv
    cy, oy = 1 << 16, 0
    if full_range:
        crv, cbu, cgu, cgv = (_c_div(value * 224, 255) for value in (crv, cbu, cgu, cgv))
    else:
        cy, oy = cy * 255 // 219, 16 << 16
    # Chroma coefficients in units of the luma table's step (cy), rounded as in C.
    crv, cbu, cgu, cgv = (_c_div(value * (1 << 16) + 0x8000, cy) for value in (crv, cbu, cgu, cgv))
    offset = (384 if full_range else 326) + _LUMA_HEADROOM
    steps = torch.arange(1024 + 2 * _LUMA_HEADROOM, dtype=torch.int64)
    luma = ((steps * cy - (384 << 16) - _LUMA_HEADROOM * cy - oy + 0x8000) >> 16).clamp(0, 255)
    levels = torch.arange(256, dtype=torch.int64)

    def term(coefficient: int) -> torch.Tensor:
        # fill_table/fill_gv_table: (c * level) >> 16, less (c >> 9) so level 128 is ~0.
        return ((coefficient * levels) >> 16) - (coefficient >> 9)

    return YuvTables(
        luma=luma.to(torch.uint8).to(device),
        red_v=(term(crv) + offset).to(device),
        green_u=(term(cgu) + offset).to(device),
        green_v=term(cgv).to(device),
        blue_u=(term(cbu) + offset).to(device),
    )


def _c_div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as C's ``/``."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


def split_nv12(surface: torch.Tensor, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Luma (H, W) and interleaved chroma (ceil(H/2), ceil(W/2), 2) views of an NV12
    (or P010) surface laid out as one (rows, pitch) array: luma rows, then chroma rows.

    Raises:
        ValueError: the surface is too small for the frame.
    """
    chroma_height, chroma_width = (height + 1) // 2, (width + 1) // 2
    if (
        surface.dim() != 2
        or surface.shape[0] < height + chroma_height
        or surface.shape[1] < 2 * chroma_width
    ):
        raise ValueError(
            f"an NV12 surface of shape {tuple(surface.shape)} cannot hold a {width}x{height} frame"
        )
    luma = surface[:height, :width]
    chroma = surface[height : height + chroma_height, : 2 * chroma_width]
    return luma, chroma.reshape(chroma_height, chroma_width, 2)


def reproducible(width: int, height: int, matrix: str, channels: int) -> str | None:
    """Why NV12 frames of this kind are not converted exactly as PyAV does, or None."""
    if width % 2 or height % 2:
        return f"odd frame size {width}x{height} (swscale resamples chroma differently)"
    if channels == 1 and matrix != "bt601":
        return f"gray from {matrix} frames (FFmpeg converts them to BT.601 luma)"
    return None


def nv12_to_rgb(luma: torch.Tensor, chroma: torch.Tensor, tables: YuvTables) -> torch.Tensor:
    """(H, W, 3) uint8 RGB image from 8-bit luma (H, W) and chroma (H/2, W/2, 2),
    as swscale's nv12 -> rgb24 with ``tables`` (see the module docstring)."""
    height, width = luma.shape
    y = luma.to(torch.int64)
    u = _upsample_rows(chroma[..., 0].to(torch.int64), height)
    v = _upsample_rows(chroma[..., 1].to(torch.int64), height)
    # Both pixels of a horizontal pair take the pair's chroma sample.
    u = u.repeat_interleave(2, dim=1)[:, :width]
    v = v.repeat_interleave(2, dim=1)[:, :width]
    red = tables.luma[y + tables.red_v[v]]
    green = tables.luma[y + tables.green_u[u] + tables.green_v[v]]
    blue = tables.luma[y + tables.blue_u[u]]
    return torch.stack((red, green, blue), dim=-1)


def _upsample_rows(plane: torch.Tensor, height: int) -> torch.Tensor:
    """Chroma rows (ceil(H/2), W/2) to H rows: 3/4 own row + 1/4 the nearer neighbour."""
    rows = torch.arange(height, device=plane.device)
    own = rows // 2
    neighbour = (own + (rows % 2) * 2 - 1).clamp(0, plane.shape[0] - 1)
    return (3 * plane[own] + plane[neighbour] + 2) >> 2
