"""Frames with more than 8 bits per sample (10, 12, 14, 16-bit video) as uint8 images.

A sample's range is what its source says it uses: ``bit_depth`` bits, so its
largest value ``2**bit_depth - 1`` becomes 255 (larger values saturate). Without a
``bit_depth`` the pixel format's own depth is used, which is right for 10 and
12-bit formats but not for a 16-bit container holding 12-bit data (common from
scientific cameras): scaled from 16 bits its frames are near-black. So a 16-bit
source given no ``bit_depth`` is checked on its first frame, and a warning says how
many bits that frame uses and how to say so.
"""

from __future__ import annotations

import logging

import av
import numpy as np

from sleap_live.stream.sources import _av

logger = logging.getLogger(__name__)

BIT_DEPTHS = tuple(range(8, 17))
# A 16-bit source whose first frame stays below this uses 12 bits or fewer.
_FEW_BITS = 2**12


def sample_bits(pixel_format: str | None) -> int:
    """Bits per sample of frames in this FFmpeg pixel format; 8 for 8 or fewer, or unknown."""
    try:
        components = av.VideoFormat(pixel_format).components if pixel_format else ()
    except ValueError:
        return 8
    return max([8, *(component.bits for component in components)])


def check_bit_depth(bit_depth: int | None) -> None:
    """Raises `ValueError` unless `bit_depth` is None or a whole number in `BIT_DEPTHS`."""
    if bit_depth is None:
        return
    if isinstance(bit_depth, bool) or not isinstance(bit_depth, int) or bit_depth not in BIT_DEPTHS:
        raise ValueError(
            f"bit_depth must be a whole number from {BIT_DEPTHS[0]} to {BIT_DEPTHS[-1]}, "
            f"got {bit_depth!r}"
        )


class ImageConverter:
    """Turns a source's decoded frames into uint8 (H, W, channels) images.

    8-bit frames are converted by FFmpeg as they are; deeper ones are read at 16
    bits and mapped through a lookup table that scales ``bit_depth`` bits to 8.

    Args:
        pixel_format: the stream's FFmpeg pixel format.
        channels: 1 (gray) or 3 (RGB).
        bit_depth: bits of each sample the data uses; None: the pixel format's.
        name: the source, for messages.

    Attributes:
        bit_depth: the bits scaled to 8.

    Raises:
        ValueError: `bit_depth` is not 8 to 16, or more than the pixel format holds.
    """

    def __init__(
        self, pixel_format: str | None, channels: int, bit_depth: int | None, name: str
    ) -> None:
        check_bit_depth(bit_depth)
        stored = sample_bits(pixel_format)
        if bit_depth is not None and bit_depth > stored:
            raise ValueError(
                f"{name}: bit depth {bit_depth} is more than the {stored} bits per sample "
                f"of its pixel format {pixel_format}"
            )
        self.bit_depth = bit_depth or stored
        self._channels = channels
        self._name = name
        self._pixel_format = pixel_format
        # Checked once, on the first frame: a 16-bit source told nothing of its depth.
        self._check_first = bit_depth is None and stored == 16
        self._table: np.ndarray | None = None
        if self.bit_depth > 8 or stored > 8:
            # The largest sample in the 16-bit units FFmpeg widens every depth to.
            top = ((1 << self.bit_depth) - 1) << (16 - stored)
            levels = np.minimum(np.arange(2**16), top)
            self._table = np.rint(levels * (255 / top)).astype(np.uint8)

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        if self._table is None:
            return _av.to_image(frame, self._channels)
        wide = "gray16le" if self._channels == 1 else "rgb48le"
        samples = frame.to_ndarray(format=wide)
        if self._check_first:
            self._check_first = False
            self._warn_if_few_bits(int(samples.max()))
        image = self._table[samples]
        return image[:, :, None] if self._channels == 1 else image

    def _warn_if_few_bits(self, largest: int) -> None:
        if largest >= _FEW_BITS:
            return
        logger.warning(
            "%s: %s holds 16 bits per sample but the first frame's largest value is %d "
            "(%d bits), so scaled from 16 bits it is near-black; give the bits per sample "
            "the data uses (--bit-depth, e.g. 12 for a 12-bit camera; bit_depth= in Python)",
            self._name,
            self._pixel_format,
            largest,
            largest.bit_length(),
        )
