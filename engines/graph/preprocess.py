"""In-graph preprocessing: uint8 frames to the network's normalised, padded input.

Reproduces sleap-nn's checkpoint-path preprocessing bit for bit, so the poses
match `sleap-nn predict`:

1. channel coercion (`ensure_rgb` / `ensure_grayscale`) on the uint8 frames;
2. the size matcher: letterbox-resize to `(max_height, max_width)` and pad
   bottom/right;
3. the input `scale` resize;
4. zero padding bottom/right to a multiple of the backbone's `max_stride`;
5. `/ 255` to float32;
6. the model's own 1 <-> 3 channel conversion when the frames still do not have
   the network's channel count (this one runs on float values).

sleap-nn runs steps 1-4 with torchvision on uint8 CPU tensors, so its resizes
are torch's native uint8 antialiased kernel, reproduced exactly (and exportably)
in `resize`.

Eager mode on CPU runs the very torch/torchvision kernels sleap-nn runs. Traced
graphs (and other devices) use exact re-implementations built from ops that
export: the resize of `resize.resize_uint8_exportable`, and channel conversions
that compute both branches and select on the channel count. Every size is
derived from tensor shapes, never from Python ints frozen at trace time, so an
exported graph accepts any frame size and either channel count.

The TensorRT profile (`frame_values_input`) takes the same steps on float32
"values": the uint8 frames cast to float32 at the graph's input, every later step
in float32 with uint8 rounding kept where sleap-nn rounds (`resize.resize_values`),
sizes fixed at trace time and computed in Python as torch computes them in float64.
Its frames come with the channel count the model's frames need (`frame_channels`;
the host converts others exactly as sleap-nn does), so it needs no luma.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
import numpy as np
import torch
import torch.nn.functional as F

from sleap_live.engines.errors import InputMismatchError, ModelConfigError
from sleap_live.engines.graph.resize import (
    as_scalar,
    resize_specialised_values,
    resize_uint8,
    resize_values,
    size_of,
    static_size,
)
from sleap_live.engines.host.frames import GRAY_WEIGHTS
from sleap_live.engines.load.spec import ModelSpec

# The float32 values of the luma weights, which torchvision computes with.
_GRAY_WEIGHTS_F32 = tuple(float(np.float32(weight)) for weight in GRAY_WEIGHTS)


@attrs.frozen
class PreprocessConfig:
    """How frames become one model's input.

    Attributes:
        in_channels: channels the network takes (1 or 3).
        max_stride: the backbone's total stride; input is padded to a multiple.
        scale: input scale factor applied after size matching (sleap-nn's
            `preprocessing.scale`).
        ensure_rgb: convert grayscale frames to 3 channels first.
        ensure_grayscale: convert RGB frames to 1 channel first.
        max_height: size-matcher target height, or None for the frame's own.
        max_width: size-matcher target width, or None for the frame's own.
        sleap1_resize: SLEAP 1.x's order and resize: normalise first, then scale
            with a plain bilinear resize (half-pixel centres, no antialiasing, as
            `tf.image.resize`), then pad; for SLEAP 1.x models.
    """

    in_channels: int
    max_stride: int = 1
    scale: float = 1.0
    ensure_rgb: bool = False
    ensure_grayscale: bool = False
    max_height: int | None = None
    max_width: int | None = None
    sleap1_resize: bool = False

    def __attrs_post_init__(self) -> None:
        if self.in_channels not in (1, 3):
            raise ValueError(f"in_channels must be 1 or 3, got {self.in_channels}")
        if self.max_stride < 1:
            raise ValueError(f"max_stride must be >= 1, got {self.max_stride}")
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")
        if self.ensure_rgb and self.ensure_grayscale:
            raise ValueError("ensure_rgb and ensure_grayscale cannot both be set")

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> PreprocessConfig:
        """The preprocessing sleap-nn predict applies for a model on its own.

        Inputs are padded to the backbone's `max_stride`, as sleap-nn pads them.
        """
        return cls(
            in_channels=spec.in_channels,
            max_stride=spec.max_stride,
            scale=spec.preprocess.scale,
            ensure_rgb=spec.preprocess.ensure_rgb,
            ensure_grayscale=spec.preprocess.ensure_grayscale,
            max_height=spec.preprocess.max_height,
            max_width=spec.preprocess.max_width,
            sleap1_resize=spec.sleap1,
        )

    @property
    def sizematched(self) -> bool:
        """Whether frames go through the size matcher."""
        return self.max_height is not None or self.max_width is not None


def frames_to_nchw(frames: torch.Tensor) -> torch.Tensor:
    """Checks decoder frames and returns them as a uint8 (B, C, H, W) view.

    Raises:
        InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
    """
    _check_frames(frames)
    return frames.permute(0, 3, 1, 2)


def _check_frames(frames: torch.Tensor) -> None:
    if frames.dtype != torch.uint8:
        raise InputMismatchError(f"frames must be uint8, got {frames.dtype}")
    if frames.ndim != 4:
        raise InputMismatchError(
            f"frames must be (batch, height, width, channels), got shape {tuple(frames.shape)}"
        )
    channels = frames.shape[3]
    if isinstance(channels, int) and channels not in (1, 3):
        raise InputMismatchError(f"frames must have 1 or 3 channels, got {channels}")


def luma(image: torch.Tensor) -> torch.Tensor:
    """Grey level of a (B, 3, H, W) image, as torchvision computes it.

    torchvision evaluates `r * 0.2989` and then adds the other two products
    with `add_(..., alpha=...)`, which rounds once per step (a fused
    multiply-add). In eager mode those very ops run; a traced graph does the
    steps in float64 and rounds after each, which gives the same float32 values
    (checked on all 2^24 uint8 colours), so truncating to uint8 agrees too.

    Returns:
        (B, 1, H, W) float32.
    """
    if not torch.jit.is_tracing():
        red, green, blue = image.unbind(1)
        weights = GRAY_WEIGHTS
        gray = red.mul(weights[0]).add_(green, alpha=weights[1]).add_(blue, alpha=weights[2])
        return gray.unsqueeze(1)
    red, green, blue = image.double().unbind(1)
    w_red, w_green, w_blue = _GRAY_WEIGHTS_F32
    gray = (red * w_red).float()
    gray = (gray.double() + green * w_green).float()
    gray = (gray.double() + blue * w_blue).float()
    return gray.unsqueeze(1)


def _as_three_channels(image: torch.Tensor) -> torch.Tensor:
    """A (B, 3, H, W) view of a 1- or 3-channel image (grey repeated)."""
    return image.expand(image.shape[0], 3, image.shape[2], image.shape[3])


def _to_grey(
    image: torch.Tensor, convert: Callable[[torch.Tensor], torch.Tensor], specialised: bool
) -> torch.Tensor:
    """`convert(rgb)` for 3-channel images, the image itself for 1-channel ones.

    Eager mode and `specialised` graphs pick the branch; a dynamic traced graph
    computes both and selects on the channel count, so its channel axis stays
    dynamic.
    """
    channels = static_size(image, 1) if specialised else image.shape[1]
    if isinstance(channels, int):  # eager; under tracing shapes are tensors
        return image if channels == 1 else convert(image)
    return torch.where(size_of(image, 1) == 3, convert(_as_three_channels(image)), image[:, :1])


def ensure_channels(
    image: torch.Tensor, ensure_rgb: bool, ensure_grayscale: bool, *, specialised: bool = False
) -> torch.Tensor:
    """sleap-nn's `ensure_rgb` / `ensure_grayscale` on uint8 (B, C, H, W) frames.

    Grey to RGB repeats the channel; RGB to grey is torchvision's luma truncated
    to uint8 (so white becomes 254, as in sleap-nn). `specialised`: see `frame_input`.
    """
    if ensure_rgb:
        return _as_three_channels(image)
    if ensure_grayscale:
        return _to_grey(image, lambda rgb: luma(rgb).to(torch.uint8), specialised)
    return image


def match_channels(
    image: torch.Tensor, in_channels: int, *, specialised: bool = False
) -> torch.Tensor:
    """The network's own channel conversion on normalised float input.

    sleap-nn's model repeats a grey channel for a 3-channel network and converts
    RGB with the luma weights (no rounding) for a 1-channel one. `specialised`: see
    `frame_input`.
    """
    if in_channels == 3:
        return _as_three_channels(image)
    return _to_grey(image, luma, specialised)


def pad_bottom_right(
    image: torch.Tensor, pad_height: torch.Tensor, pad_width: torch.Tensor
) -> torch.Tensor:
    """Zero-pads the bottom and right edges by (1,) int64 amounts."""
    return F.pad(image, (0, as_scalar(pad_width), 0, as_scalar(pad_height)))


def sizematch(
    image: torch.Tensor, max_height: int | None, max_width: int | None, *, specialised: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """sleap-nn's size matcher: letterbox-resize into (max_height, max_width).

    The frame is scaled by `min(max_height / H, max_width / W)` (up or down), its
    size rounded half-to-even in float64 as Python's `round` does, resized, and
    padded bottom/right. A missing maximum means the frame's own size.
    `specialised`: see `frame_input`.

    Returns:
        `(image, eff_scale)`: the uint8 letterboxed images and the scale factor,
        (1,) float32 (sleap-nn divides coordinates by it).
    """
    if specialised:
        return _sizematch_specialised(image, max_height, max_width)
    height, width = size_of(image, 2), size_of(image, 3)
    target_height = height if max_height is None else torch.full_like(height, max_height)
    target_width = width if max_width is None else torch.full_like(width, max_width)
    eff_scale = torch.minimum(
        target_height.double() / height.double(), target_width.double() / width.double()
    )
    fit_height = torch.round(height.double() * eff_scale).long()
    fit_width = torch.round(width.double() * eff_scale).long()
    resized = resize_uint8(image, fit_height, fit_width)
    padded = pad_bottom_right(resized, target_height - fit_height, target_width - fit_width)
    return padded, eff_scale.float()


def _sizematch_specialised(
    image: torch.Tensor, max_height: int | None, max_width: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sizematch` with the frame size frozen: the same float64 arithmetic in Python."""
    height, width = static_size(image, 2), static_size(image, 3)
    target_height = height if max_height is None else max_height
    target_width = width if max_width is None else max_width
    # Python floats are float64 and `round` rounds half to even, as torch does.
    eff_scale = min(target_height / height, target_width / width)
    fit_height, fit_width = round(height * eff_scale), round(width * eff_scale)
    resized = resize_uint8(image, fit_height, fit_width, specialised=True)
    padded = _pad_specialised(resized, target_height - fit_height, target_width - fit_width)
    return padded, torch.tensor([eff_scale], dtype=torch.float32, device=image.device)


def _pad_specialised(image: torch.Tensor, pad_height: int, pad_width: int) -> torch.Tensor:
    """Zero-pads bottom/right by int amounts; no pass at all when both are 0."""
    if pad_height == 0 and pad_width == 0:
        return image
    return F.pad(image, (0, pad_width, 0, pad_height))


def rescale(image: torch.Tensor, scale: float, *, specialised: bool = False) -> torch.Tensor:
    """sleap-nn's input scaling: resize to `int(H * scale) x int(W * scale)`.

    `specialised`: see `frame_input`; a specialised resize returns float32 holding the uint8
    values (`resize_specialised_values`), which `pad_to_stride` and `normalize` take as
    they are.
    """
    if scale == 1.0:
        return image
    if specialised:
        height = math.floor(static_size(image, 2) * scale)
        width = math.floor(static_size(image, 3) * scale)
        if (height, width) == (static_size(image, 2), static_size(image, 3)):
            return image
        return resize_specialised_values(image, height, width)
    height = torch.floor(size_of(image, 2).double() * scale).long()
    width = torch.floor(size_of(image, 3).double() * scale).long()
    return resize_uint8(image, height, width)


def pad_to_stride(image: torch.Tensor, stride: int, *, specialised: bool = False) -> torch.Tensor:
    """Zero-pads bottom/right so height and width are multiples of `stride`.

    `specialised`: see `frame_input`.
    """
    if stride == 1:
        return image
    if specialised:
        height, width = static_size(image, 2), static_size(image, 3)
        return _pad_specialised(image, -height % stride, -width % stride)
    height, width = size_of(image, 2), size_of(image, 3)
    return pad_bottom_right(
        image, (stride - height % stride) % stride, (stride - width % stride) % stride
    )


def sleap1_rescale(image: torch.Tensor, scale: float) -> torch.Tensor:
    """SLEAP 1.x's input scaling of float images: `tf.image.resize` to
    `int(H * scale) x int(W * scale)`, bilinear with half-pixel centres, no antialiasing."""
    if scale == 1.0:
        return image
    return F.interpolate(
        image, scale_factor=scale, mode="bilinear", align_corners=False, recompute_scale_factor=True
    )


def normalize(image: torch.Tensor) -> torch.Tensor:
    """uint8 (or float32 uint8 values) to float32 in [0, 1], dividing as sleap-nn does."""
    return image.float() / 255.0


def network_input(
    image: torch.Tensor, config: PreprocessConfig, *, specialised: bool = False
) -> torch.Tensor:
    """Scale, pad, normalise and match channels of uint8 (B, C, H, W) images.

    These are the steps after the size matcher; top-down crops take only these.
    `specialised`: see `frame_input`.
    """
    if config.sleap1_resize:
        image = sleap1_rescale(normalize(image), config.scale)
        image = pad_to_stride(image, config.max_stride, specialised=specialised)
        return match_channels(image, config.in_channels, specialised=specialised)
    image = rescale(image, config.scale, specialised=specialised)
    image = pad_to_stride(image, config.max_stride, specialised=specialised)
    return match_channels(normalize(image), config.in_channels, specialised=specialised)


def size_matched_frames(
    frames: torch.Tensor, config: PreprocessConfig, *, specialised: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Channel coercion and size matching of uint8 (B, C, H, W) frames.

    `specialised`: see `frame_input`.

    Returns:
        `(frames, eff_scale)`: uint8 frames as the model's stages see them, and
        the size matcher's scale, (1,) float32 (1 without a size matcher).
    """
    frames = ensure_channels(
        frames, config.ensure_rgb, config.ensure_grayscale, specialised=specialised
    )
    if not config.sizematched:
        return frames, torch.ones(1, dtype=torch.float32, device=frames.device)
    return sizematch(frames, config.max_height, config.max_width, specialised=specialised)


def frame_input(
    frames: torch.Tensor, config: PreprocessConfig, *, specialised: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole preprocessing of uint8 (B, C, H, W) frames for one model.

    Args:
        frames: uint8 (B, C, H, W).
        config: the model's preprocessing.
        specialised: trace with the frames' height, width and channel count frozen
            into the graph (a graph specialised to one frame shape): every size
            is a Python int, so a resize or padding that would not change the
            image (the size matcher at the training frame size, a scale of 1,
            sizes already multiples of the stride) and a channel conversion the
            frames do not need leave no pass in the graph. The same numbers as a
            dynamic graph; only the passes that compute nothing are gone.

    Returns:
        `(input, eff_scale)`: the float32 network input and the size matcher's
        scale, (1,) float32.
    """
    frames, eff_scale = size_matched_frames(frames, config, specialised=specialised)
    return network_input(frames, config, specialised=specialised), eff_scale


def frame_channels(config: PreprocessConfig) -> int:
    """The channel count of the frames a TensorRT-profile graph takes.

    What sleap-nn's channel coercion leaves, or the network's own count.

    Raises:
        ModelConfigError: the network would convert RGB to grey on float input,
            which float32 cannot do with torchvision's fused rounding.
    """
    if config.ensure_grayscale:
        return 1
    if config.ensure_rgb and config.in_channels == 1:
        raise ModelConfigError(
            "a 1-channel network trained with ensure_rgb converts RGB to grey in float "
            "arithmetic that the tensorrt profile cannot reproduce; export the default profile"
        )
    return 3 if config.ensure_rgb else config.in_channels


def frame_values(frames: torch.Tensor) -> torch.Tensor:
    """Checks decoder frames; returns them as float32 (B, C, H, W), cast before anything.

    Raises:
        InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
    """
    _check_frames(frames)
    return frames.float().permute(0, 3, 1, 2)


def _check_values(frames: torch.Tensor) -> None:
    if frames.dtype != torch.float32:
        raise InputMismatchError(f"frame values must be float32, got {frames.dtype}")


def size_matched_values(
    image: torch.Tensor, config: PreprocessConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """`size_matched_frames` for float32 (B, C, H, W) values with `frame_channels`.

    Returns:
        `(values, eff_scale)`: the letterboxed float32 values and the size
        matcher's scale, (1,) float32.

    Raises:
        InputMismatchError: the frames do not have `frame_channels(config)` channels.
    """
    _check_values(image)
    channels, wanted = static_size(image, 1), frame_channels(config)
    if channels != wanted:
        raise InputMismatchError(
            f"this tensorrt-profile model takes {wanted}-channel frames, got {channels}"
        )
    if config.ensure_rgb:
        image = _as_three_channels(image)
    if not config.sizematched:
        return image, torch.ones(1, dtype=torch.float32, device=image.device)
    height, width = static_size(image, 2), static_size(image, 3)
    target_height = height if config.max_height is None else config.max_height
    target_width = width if config.max_width is None else config.max_width
    # Python floats are float64 and `round` rounds half to even, as torch does.
    eff_scale = min(target_height / height, target_width / width)
    fit_height, fit_width = round(height * eff_scale), round(width * eff_scale)
    resized = resize_values(image, fit_height, fit_width)
    padded = F.pad(resized, (0, target_width - fit_width, 0, target_height - fit_height))
    return padded, torch.tensor([eff_scale], dtype=torch.float32, device=image.device)


def network_input_values(image: torch.Tensor, config: PreprocessConfig) -> torch.Tensor:
    """`network_input` for float32 (B, C, H, W) values: scale, pad, normalise, channels."""
    _check_values(image)
    if config.sleap1_resize:
        image = sleap1_rescale(image, config.scale)  # linear: the same as after normalising
    elif config.scale != 1.0:
        height = math.floor(static_size(image, 2) * config.scale)
        width = math.floor(static_size(image, 3) * config.scale)
        image = resize_values(image, height, width)
    stride = config.max_stride
    height, width = static_size(image, 2), static_size(image, 3)
    image = F.pad(
        image, (0, (stride - width % stride) % stride, 0, (stride - height % stride) % stride)
    )
    image = normalize(image)
    channels = static_size(image, 1)
    if channels == config.in_channels:
        return image
    if config.in_channels == 3:
        return _as_three_channels(image)
    raise ModelConfigError(
        f"a {config.in_channels}-channel network given {channels}-channel frames "
        "converts them in float arithmetic that the tensorrt profile cannot reproduce"
    )


def frame_values_input(
    frames: torch.Tensor, config: PreprocessConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """`frame_input` for float32 (B, C, H, W) values (the TensorRT profile)."""
    values, eff_scale = size_matched_values(frames, config)
    return network_input_values(values, config), eff_scale


class Preprocessor(torch.nn.Module):
    """`frame_input` as a module: uint8 (B, C, H, W) frames to `(input, eff_scale)`."""

    def __init__(self, config: PreprocessConfig) -> None:
        super().__init__()
        self.config = config

    def forward(
        self, frames: torch.Tensor, specialised: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return frame_input(frames, self.config, specialised=specialised)
