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

sleap-nn runs steps 1-4 with torchvision on uint8 CPU tensors. Its resizes are
therefore torch's native uint8 antialiased bilinear kernel: int16 fixed-point
weights, a horizontal pass and then a vertical one, each rounded back to uint8.

Eager mode on CPU runs the very torch/torchvision kernels sleap-nn runs. Traced
graphs (and other devices) use exact re-implementations built from ops that
export: `resize_uint8_exportable` rebuilds the resize kernel from gathers and
exact float32 sums (the `aten` antialias ops do not export to ONNX), with its
weight tables computed in float64 from the dynamic sizes as torch computes them;
channel conversions compute both branches and select on the channel count.
Every size is derived from tensor shapes, never from Python ints frozen at trace
time, so an exported graph accepts any frame size and either channel count.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np
import torch
import torch.nn.functional as F

from sleap_live.engines.errors import InputMismatchError
from sleap_live.engines.load.spec import ModelSpec

# torchvision's `rgb_to_grayscale` weights, which sleap-nn uses for both conversions,
# and their float32 values, which torchvision computes with.
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
_GRAY_WEIGHTS_F32 = tuple(float(np.float32(weight)) for weight in GRAY_WEIGHTS)

# torch picks the largest fixed-point precision whose largest weight still fits
# in int16, trying precisions below this bound.
_MAX_WEIGHT_PRECISION = 22


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
    """

    in_channels: int
    max_stride: int = 1
    scale: float = 1.0
    ensure_rgb: bool = False
    ensure_grayscale: bool = False
    max_height: int | None = None
    max_width: int | None = None

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
    if frames.dtype != torch.uint8:
        raise InputMismatchError(f"frames must be uint8, got {frames.dtype}")
    if frames.ndim != 4:
        raise InputMismatchError(
            f"frames must be (batch, height, width, channels), got shape {tuple(frames.shape)}"
        )
    channels = frames.shape[3]
    if isinstance(channels, int) and channels not in (1, 3):
        raise InputMismatchError(f"frames must have 1 or 3 channels, got {channels}")
    return frames.permute(0, 3, 1, 2)


def size_of(image: torch.Tensor, dim: int) -> torch.Tensor:
    """The size of `dim` as a (1,) int64 tensor that tracing keeps dynamic.

    One element rather than zero dimensions: the TorchScript ONNX exporter
    computes float64 arithmetic on zero-dimensional tensors in float32, which
    would break the exactness of the resize tables.
    """
    size = image.shape[dim]
    if isinstance(size, torch.Tensor):  # under tracing, shapes are recorded tensors
        return size.reshape(1)
    return torch.tensor([size], device=image.device)


def _as_size(size: int | torch.Tensor, device: torch.device) -> torch.Tensor:
    if isinstance(size, torch.Tensor):
        return size.reshape(1)
    return torch.tensor([size], device=device)


def _scalar(size: torch.Tensor) -> torch.Tensor:
    """A (1,) size as the zero-dimensional tensor `arange` and `pad` take."""
    return size.reshape(())


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


def _to_grey(image: torch.Tensor, convert: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`convert(rgb)` for 3-channel images, the image itself for 1-channel ones.

    Eager mode picks the branch; a traced graph computes both and selects on
    the channel count, so its channel axis stays dynamic.
    """
    channels = image.shape[1]
    if isinstance(channels, int):  # eager; under tracing shapes are tensors
        return image if channels == 1 else convert(image)
    return torch.where(size_of(image, 1) == 3, convert(_as_three_channels(image)), image[:, :1])


def ensure_channels(image: torch.Tensor, ensure_rgb: bool, ensure_grayscale: bool) -> torch.Tensor:
    """sleap-nn's `ensure_rgb` / `ensure_grayscale` on uint8 (B, C, H, W) frames.

    Grey to RGB repeats the channel; RGB to grey is torchvision's luma truncated
    to uint8 (so white becomes 254, as in sleap-nn).
    """
    if ensure_rgb:
        return _as_three_channels(image)
    if ensure_grayscale:
        return _to_grey(image, lambda rgb: luma(rgb).to(torch.uint8))
    return image


def match_channels(image: torch.Tensor, in_channels: int) -> torch.Tensor:
    """The network's own channel conversion on normalised float input.

    sleap-nn's model repeats a grey channel for a 3-channel network and converts
    RGB with the luma weights (no rounding) for a 1-channel one.
    """
    if in_channels == 3:
        return _as_three_channels(image)
    return _to_grey(image, luma)


def _resize_tables(
    in_size: torch.Tensor, out_size: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch's uint8 antialiased bilinear taps for one axis.

    Returns:
        `(indices, weights, precision)`: source indices (out, taps) int64 clamped
        into the input; int16-valued weights (out, taps) float32, zero past each
        output's support; and the fixed-point precision, (1,) int64.
    """
    in_f = in_size.double()
    scale = in_f / out_size.double()
    upsampling = scale < 1.0
    support = torch.where(upsampling, torch.ones_like(scale), scale)
    inv_scale = torch.where(upsampling, torch.ones_like(scale), 1.0 / scale)
    taps = torch.ceil(support).long() * 2 + 1

    device = in_size.device
    center = scale * (torch.arange(_scalar(out_size), dtype=torch.float64, device=device) + 0.5)
    # C casts truncate toward zero, which is what `.long()` does.
    first = torch.clamp((center - support + 0.5).long(), min=0)
    last = torch.minimum((center + support + 0.5).long(), in_size)
    tap = torch.arange(_scalar(taps), device=device)
    source = first[:, None] + tap
    weights = torch.clamp(
        1.0 - ((source.double() - center[:, None] + 0.5) * inv_scale).abs(), min=0.0
    )
    weights = torch.where(source < last[:, None], weights, torch.zeros_like(weights))
    total = weights.sum(1, keepdim=True)
    weights = torch.where(total != 0.0, weights / total, weights)

    # The first precision whose doubled largest weight overflows int16 stops the
    # search; the fits are monotone, so counting them finds it.
    steps = torch.arange(_MAX_WEIGHT_PRECISION, dtype=torch.float64, device=device)
    largest = weights.amax().reshape(1)
    fits = torch.floor(0.5 + largest * torch.pow(2.0, steps + 1.0)) < 32768.0
    precision = fits.long().sum(0, keepdim=True)
    fixed = torch.floor(0.5 + weights * torch.pow(2.0, precision.double())).float()
    indices = torch.minimum(source, in_size - 1)
    return indices, fixed, precision


def _resize_leading_axis(
    image: torch.Tensor, in_size: torch.Tensor, out_size: torch.Tensor
) -> torch.Tensor:
    """One exact resize pass along the first axis of a uint8 (L, N) matrix.

    Gathers every output's taps (whole rows, so the gather copies contiguous
    blocks) and sums them with torch's int16 weights in one batched matmul,
    then rounds as torch does: `(sum + 2^(p-1)) >> p`, saturated to uint8.
    The integer sums can exceed float32's exact range (2^24) for strong
    downscales, so each weight is split as `high * 2^q + low`, `q = p - 15`
    (when positive): the `high` sum stays below 2^24 and the small `low` sum
    only carries into it once rounded. Every partial sum is an exact integer,
    so the matmul's summation order does not matter.

    Returns:
        (out, N) uint8.
    """
    indices, weights, precision = _resize_tables(in_size, out_size)
    taps = indices.shape[1]
    picked = image.index_select(0, indices.reshape(-1)).float()
    picked = picked.reshape(-1, taps, image.shape[1])  # (out, taps, N)

    shift = torch.clamp(precision - 15, min=0).double()
    unit = torch.pow(2.0, shift).float()
    high = torch.floor(weights / unit)
    low = weights - high * unit
    sums = torch.matmul(torch.stack([high, low], dim=1), picked)  # (out, 2, N)
    low_sum = sums[:, 1] + torch.pow(2.0, precision.double() - 1.0).float()
    total = sums[:, 0] + torch.floor(low_sum / unit)
    rounded = torch.floor(total / torch.pow(2.0, precision.double() - shift).float())
    return torch.clamp(rounded, 0.0, 255.0).to(torch.uint8)


def resize_uint8_exportable(
    image: torch.Tensor, height: int | torch.Tensor, width: int | torch.Tensor
) -> torch.Tensor:
    """`resize_uint8` from gathers and exact float32 sums, which export to ONNX.

    A pass whose size does not change has a single unit weight per output and
    passes its input through.
    """
    batch, channels = image.shape[0], image.shape[1]
    in_height, in_width = size_of(image, 2), size_of(image, 3)
    columns = image.permute(3, 0, 1, 2).reshape(image.shape[3], -1)  # (W, B*C*H)
    columns = _resize_leading_axis(columns, in_width, _as_size(width, image.device))
    resized = columns.reshape(-1, batch, channels, image.shape[2])  # (W', B, C, H)
    rows = resized.permute(3, 1, 2, 0).reshape(image.shape[2], -1)  # (H, B*C*W')
    rows = _resize_leading_axis(rows, in_height, _as_size(height, image.device))
    return rows.reshape(-1, batch, channels, resized.shape[0]).permute(1, 2, 0, 3)


def resize_uint8(
    image: torch.Tensor, height: int | torch.Tensor, width: int | torch.Tensor
) -> torch.Tensor:
    """Antialiased bilinear resize of uint8 (B, C, H, W) images, exactly as torch does it.

    What torchvision's `resize` (and so sleap-nn) runs on uint8 CPU tensors:
    `F.interpolate(image, (height, width), mode="bilinear", antialias=True)`,
    with int16 fixed-point weights, width first, then height, each pass rounded
    to uint8. Eager CPU tensors go to that kernel; traced graphs and other
    devices get `resize_uint8_exportable`, which computes the same numbers.

    Args:
        image: uint8 (B, C, H, W).
        height: output height, an int or a (1,) int64 tensor.
        width: output width, an int or a (1,) int64 tensor.
    """
    if torch.jit.is_tracing() or image.device.type != "cpu":
        return resize_uint8_exportable(image, height, width)
    size = (int(height), int(width))
    if size == tuple(image.shape[2:]):
        return image
    return F.interpolate(image, size=size, mode="bilinear", align_corners=False, antialias=True)


def pad_bottom_right(
    image: torch.Tensor, pad_height: torch.Tensor, pad_width: torch.Tensor
) -> torch.Tensor:
    """Zero-pads the bottom and right edges by (1,) int64 amounts."""
    return F.pad(image, (0, _scalar(pad_width), 0, _scalar(pad_height)))


def sizematch(
    image: torch.Tensor, max_height: int | None, max_width: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """sleap-nn's size matcher: letterbox-resize into (max_height, max_width).

    The frame is scaled by `min(max_height / H, max_width / W)` (up or down), its
    size rounded half-to-even in float64 as Python's `round` does, resized, and
    padded bottom/right. A missing maximum means the frame's own size.

    Returns:
        `(image, eff_scale)`: the uint8 letterboxed images and the scale factor,
        (1,) float32 (sleap-nn divides coordinates by it).
    """
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


def rescale(image: torch.Tensor, scale: float) -> torch.Tensor:
    """sleap-nn's input scaling: resize to `int(H * scale) x int(W * scale)`."""
    if scale == 1.0:
        return image
    height = torch.floor(size_of(image, 2).double() * scale).long()
    width = torch.floor(size_of(image, 3).double() * scale).long()
    return resize_uint8(image, height, width)


def pad_to_stride(image: torch.Tensor, stride: int) -> torch.Tensor:
    """Zero-pads bottom/right so height and width are multiples of `stride`."""
    if stride == 1:
        return image
    height, width = size_of(image, 2), size_of(image, 3)
    return pad_bottom_right(
        image, (stride - height % stride) % stride, (stride - width % stride) % stride
    )


def normalize(image: torch.Tensor) -> torch.Tensor:
    """uint8 to float32 in [0, 1], dividing as sleap-nn does (not multiplying)."""
    return image.float() / 255.0


def network_input(image: torch.Tensor, config: PreprocessConfig) -> torch.Tensor:
    """Scale, pad, normalise and match channels of uint8 (B, C, H, W) images.

    These are the steps after the size matcher; top-down crops take only these.
    """
    image = pad_to_stride(rescale(image, config.scale), config.max_stride)
    return match_channels(normalize(image), config.in_channels)


def size_matched_frames(
    frames: torch.Tensor, config: PreprocessConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Channel coercion and size matching of uint8 (B, C, H, W) frames.

    Returns:
        `(frames, eff_scale)`: uint8 frames as the model's stages see them, and
        the size matcher's scale, (1,) float32 (1 without a size matcher).
    """
    frames = ensure_channels(frames, config.ensure_rgb, config.ensure_grayscale)
    if not config.sizematched:
        return frames, torch.ones(1, dtype=torch.float32, device=frames.device)
    return sizematch(frames, config.max_height, config.max_width)


def frame_input(
    frames: torch.Tensor, config: PreprocessConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole preprocessing of uint8 (B, C, H, W) frames for one model.

    Returns:
        `(input, eff_scale)`: the float32 network input and the size matcher's
        scale, (1,) float32.
    """
    frames, eff_scale = size_matched_frames(frames, config)
    return network_input(frames, config), eff_scale


class Preprocessor(torch.nn.Module):
    """`frame_input` as a module: uint8 (B, C, H, W) frames to `(input, eff_scale)`."""

    def __init__(self, config: PreprocessConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return frame_input(frames, self.config)
