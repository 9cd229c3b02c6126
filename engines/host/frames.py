"""Checks and host-side channel conversion for frame batches handed to runners.

Works on numpy arrays and on torch tensors (without importing torch when given
numpy), so the ONNX runners stay usable in a torch-free deployment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.errors import InputMismatchError

# Frames given to verify an export on: uint8 (N, H, W, C), or batches of them of one size.
Frames = np.ndarray | Sequence[np.ndarray]


class DeferredFrames:
    """Verification frames read when something first needs their pixels.

    A run on a video file verifies an export on frames spread over the video
    (`sleap_live.stream.runner.spread_frames`): up to two seconds of seeking and
    decoding at 1024 x 1024 that a warm start, with its export, specialised graph
    and CPU engine choice all cached, never looks at. The frame shape (what the
    specialised graph and the engine choice are keyed by) is known without them.

    Args:
        frame_shape: (height, width, channels) of every frame.
        read: reads the frames, uint8 (N, H, W, C); called once, on first use.
    """

    def __init__(self, frame_shape: tuple[int, int, int], read: Callable[[], np.ndarray]) -> None:
        self.frame_shape = frame_shape
        self._read = read
        self._frames: np.ndarray | None = None

    def read(self) -> np.ndarray:
        """The frames, read now on the first call."""
        if self._frames is None:
            self._frames = self._read()
        return self._frames

    def __repr__(self) -> str:
        state = "unread" if self._frames is None else f"{len(self._frames)} read"
        return f"DeferredFrames(frame_shape={self.frame_shape}, {state})"


def given_frames(frames: Frames | DeferredFrames | None) -> Frames | None:
    """`frames` as pixels: deferred frames read now, others as they are."""
    return frames.read() if isinstance(frames, DeferredFrames) else frames


class VideoFrames(np.ndarray[Any, np.dtype[np.uint8]]):
    """uint8 (N, H, W, C) frames read from one video file, which they name (`video`),
    so that what verification says of them names the video it looked at.

    An array (numpy's subclassing, with `__array_finalize__`), so that everything
    given verification frames takes these as they are; an array made from them
    (a slice, a conversion) still names the video.
    """

    video: Path | None

    def __new__(cls, frames: np.ndarray, video: Path) -> VideoFrames:
        named = np.asarray(frames).view(cls)
        named.video = video
        return named

    def __array_finalize__(self, obj: Any) -> None:
        self.video = getattr(obj, "video", None)


# torchvision's `rgb_to_grayscale` weights, which sleap-nn's `ensure_grayscale` uses.
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)


def check_frames(frames: Any) -> tuple[int, int, int, int]:
    """Checks a uint8 (batch, height, width, channels) batch with 1 or 3 channels.

    Args:
        frames: numpy array or torch tensor.

    Returns:
        The shape.

    Raises:
        InputMismatchError: wrong type, dtype, rank or channel count.
    """
    dtype = getattr(frames, "dtype", None)
    shape = getattr(frames, "shape", None)
    if dtype is None or shape is None:
        raise InputMismatchError(
            f"frames must be a uint8 numpy array or torch tensor, got {type(frames).__name__}"
        )
    if str(dtype) not in ("uint8", "torch.uint8"):
        raise InputMismatchError(f"frames must be uint8, got {dtype} (convert or decode as uint8)")
    if len(shape) != 4:
        raise InputMismatchError(
            f"frames must be (batch, height, width, channels), got shape {tuple(shape)}; "
            "add a batch axis for a single frame"
        )
    if shape[3] not in (1, 3):
        raise InputMismatchError(
            f"frames must have 1 or 3 channels (last axis), got shape {tuple(shape)}"
        )
    if shape[0] == 0:
        raise InputMismatchError("frames batch is empty")
    batch, height, width, channels = (int(n) for n in shape)
    return batch, height, width, channels


def as_numpy(frames: Any) -> np.ndarray:
    """A numpy array or torch tensor of frames as a host numpy array."""
    if isinstance(frames, np.ndarray):
        return frames
    return frames.cpu().numpy()


def convert_channels(frames: np.ndarray, channels: int) -> np.ndarray:
    """Converts uint8 (B, H, W, C) frames to `channels` channels as sleap-nn does.

    Grey to RGB repeats the channel; RGB to grey is torchvision's luma, truncated
    to uint8 (each product and sum rounded to float32 as torchvision rounds it).

    Returns:
        The frames themselves when they already have `channels` channels.
    """
    if frames.shape[3] == channels:
        return frames
    if channels == 3:
        return np.repeat(frames, 3, axis=3)
    red, green, blue = (frames[..., index].astype(np.float64) for index in range(3))
    w_red, w_green, w_blue = (float(np.float32(weight)) for weight in GRAY_WEIGHTS)
    gray = (red * w_red).astype(np.float32)
    gray = (gray + green * w_green).astype(np.float32)
    gray = (gray + blue * w_blue).astype(np.float32)
    return gray.astype(np.uint8)[..., None]
