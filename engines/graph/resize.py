"""torch's uint8 antialiased bilinear resize, as a kernel that also exports to ONNX.

sleap-nn resizes uint8 CPU tensors with torchvision, which runs torch's native
antialiased bilinear kernel: int16 fixed-point weights, a horizontal pass and then
a vertical one, each rounded back to uint8. Eager CPU tensors go to that very
kernel. Traced graphs (and other devices) use `resize_uint8_exportable`, which
rebuilds it from gathers and exact float32 sums (the `aten` antialias ops do not
export to ONNX), with its weight tables computed in float64 from the dynamic
sizes as torch computes them. Sizes are derived from tensor shapes, never from
Python ints frozen at trace time, so an exported graph accepts any frame size.

A specialised graph (sizes frozen at trace time) shrinks an axis by a whole factor
(`in = factor * out`, e.g. an input scale of 0.5 on an even size) without any
gather or transpose: torch's taps then repeat every `factor` pixels, so the pass
is a matrix product of blocks of consecutive pixels (`WholeFactorPass`), in
float32 where every partial sum is an exact multiple of 2^-precision.

The TensorRT profile resizes with `resize_values`: float32 images holding uint8
values, sizes fixed at trace time, and the weight tables computed on the host
(`resize_tables`, in float64 as torch's C++ kernel computes them) and embedded as
float32 constants (the weights are int16-valued, so float32 holds them exactly).
Its sums are elementwise products reduced in float32, every partial sum an
integer below 2^24, with no MatMul: TF32, which TensorRT applies to matrix
products and convolutions only, cannot change them, and neither can float32.
"""

from __future__ import annotations

import math
import warnings

import attrs
import numpy as np
import torch
import torch.nn.functional as F

# torch picks the largest fixed-point precision whose largest weight still fits
# in int16, trying precisions below this bound.
_MAX_WEIGHT_PRECISION = 22
# float32 holds every integer below this exactly.
_EXACT_FLOAT32 = 2**24
# A whole-factor pass reads at most this many pixels of its own per block of outputs
# (the width of its matrix product), and takes blocks of at least `_MIN_BLOCK` outputs.
_MAX_BLOCK_INPUTS = 64
_MIN_BLOCK = 4


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


def as_scalar(size: torch.Tensor) -> torch.Tensor:
    """A (1,) size as the zero-dimensional tensor `arange` and `pad` take."""
    return size.reshape(())


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
    center = scale * (torch.arange(as_scalar(out_size), dtype=torch.float64, device=device) + 0.5)
    # C casts truncate toward zero, which is what `.long()` does.
    first = torch.clamp((center - support + 0.5).long(), min=0)
    last = torch.minimum((center + support + 0.5).long(), in_size)
    tap = torch.arange(as_scalar(taps), device=device)
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
    # One gather with the (out, taps) indices, not a gather and a reshape: N is 0
    # for an empty batch (no crops), and ONNX's Reshape reads a 0 in its target
    # shape as "copy the input's axis", which a 2-D input does not have.
    picked = image[indices].float()  # (out, taps, N)

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
    image: torch.Tensor,
    height: int | torch.Tensor,
    width: int | torch.Tensor,
    *,
    specialised: bool = False,
) -> torch.Tensor:
    """`resize_uint8` from gathers and exact float32 sums, which export to ONNX.

    A pass whose size does not change has a single unit weight per output and
    passes its input through. With `specialised` (int `height` and `width`, the
    image's size frozen into the graph), such a pass is left out, and a pass
    that shrinks its axis by a whole factor is a `WholeFactorPass`.
    """
    if specialised:
        if not isinstance(height, int) or not isinstance(width, int):
            raise TypeError("a specialised resize takes int sizes")
        return _as_dtype(_resize_specialised(image, height, width), torch.uint8)
    batch, channels = image.shape[0], image.shape[1]
    in_height, in_width = size_of(image, 2), size_of(image, 3)
    columns = image.permute(3, 0, 1, 2).reshape(image.shape[3], -1)  # (W, B*C*H)
    columns = _resize_leading_axis(columns, in_width, _as_size(width, image.device))
    # No -1 beside the batch axis: with an empty batch it could be any size. A 0
    # batch in an ONNX Reshape target copies the input's axis 1, which is 0 then too.
    resized = columns.reshape(columns.shape[0], batch, channels, image.shape[2])  # (W', B, C, H)
    rows = resized.permute(3, 1, 2, 0).reshape(image.shape[2], -1)  # (H, B*C*W')
    rows = _resize_leading_axis(rows, in_height, _as_size(height, image.device))
    return rows.reshape(rows.shape[0], batch, channels, resized.shape[0]).permute(1, 2, 0, 3)


def resize_specialised_values(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """A specialised `resize_uint8_exportable` whose result is float32 holding the uint8 values.

    A caller that normalises next takes the values as they are, without a cast
    back to uint8 and another to float32.

    Args:
        image: uint8 (B, C, H, W), its height, width and channels frozen in the graph.
        height: output height.
        width: output width.
    """
    return _as_dtype(_resize_specialised(image, height, width), torch.float32)


def _resize_specialised(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Width, then height, each pass only if it resizes; uint8 or float32 values out.

    Whole-factor passes (`WholeFactorPass`) run on float32 values (the uint8
    image cast once), the others on uint8; the result has the last pass's dtype.
    """
    for axis, size in ((3, width), (2, height)):
        in_size = static_size(image, axis)
        if in_size == size:
            continue
        plan = WholeFactorPass.plan(in_size, size)
        if plan is not None:
            image = plan.apply(_as_dtype(image, torch.float32), axis)
            continue
        image = _as_dtype(image, torch.uint8)
        image = _resize_axis(image, axis, _as_size(in_size, image.device), size)
    return image


def _as_dtype(image: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`image` as `dtype`; no cast at all (not even one the tracer records) when it is."""
    return image if image.dtype == dtype else image.to(dtype)


@attrs.frozen(eq=False)
class WholeFactorPass:
    """One specialised resize pass that shrinks its axis by a whole factor, as matrix products.

    With `in = factor * out`, every output `i` takes the same weights (the
    kernel) at the same offsets from input `factor * i`, except a few outputs at
    each end whose taps the image's edge cuts. Outputs are taken in blocks of
    `block`: a block reads its own `factor * block` inputs and a halo of
    `before` inputs of the block before it and `after` of the block after it
    (zeros past the image's edges). The pass is the product of each block's own
    inputs with `own` plus the product of its halo slots with `halo`; the halo
    slots are those neighbouring inputs, one correction per edge output (what
    that output's own weights add to the kernel's, on the inputs under it; zero
    in every other block) and a constant 1 that carries the rounding half.

    Weights are torch's int16-valued fixed-point weights times 2^-precision, so
    every product and partial sum is an exact float32 multiple of 2^-precision
    (`plan` checks the bound), and `floor` of an output is torch's
    `(sum + 2^(precision-1)) >> precision`.

    Attributes:
        factor: input pixels per output.
        block: outputs per block.
        before: halo inputs from the block before.
        after: halo inputs from the block after.
        left: (edge outputs at the start, span) corrections' weights on the first
            `span` inputs.
        right: (edge outputs at the end, span) corrections' weights on the last
            `span` inputs.
        own: (factor * block, block) weights of a block's own inputs.
        halo: (before + after + edge outputs + 1, block) weights of its halo slots.
    """

    factor: int
    block: int
    before: int
    after: int
    left: np.ndarray
    right: np.ndarray
    own: np.ndarray
    halo: np.ndarray

    @classmethod
    def plan(cls, in_size: int, out_size: int) -> WholeFactorPass | None:
        """The pass from `in_size` to `out_size`, or None where it does not apply.

        It applies when `in_size` is a whole multiple (at least 2) of `out_size`,
        the outputs split into blocks of a useful size, the taps differ from
        the kernel's only at the ends, and float32 holds every partial sum.
        """
        factor = in_size // out_size
        if factor < 2 or factor * out_size != in_size:
            return None
        block = _block_size(out_size, factor)
        if block is None:
            return None
        indices, fixed, precision = resize_tables(in_size, out_size)
        # Each output's taps as {offset from factor * i: int16-valued weight}.
        taps = [
            {
                int(index) - factor * i: float(weight)
                for index, weight in zip(row_indices, row_weights, strict=True)
                if weight
            }
            for i, (row_indices, row_weights) in enumerate(zip(indices, fixed, strict=True))
        ]
        # The kernel: the widest taps, those of an output the edges do not cut.
        kernel = max(taps, key=len)
        first, last = min(kernel), max(kernel)
        edges: list[int] = []
        bound = 0.0
        for i, row in enumerate(taps):
            regular = {o: w for o, w in kernel.items() if 0 <= factor * i + o < in_size}
            if row != regular:
                edges.append(i)
            offsets = set(row) | set(regular)
            difference = sum(abs(row.get(o, 0.0) - regular.get(o, 0.0)) for o in offsets)
            bound = max(bound, sum(abs(w) for w in regular.values()) + difference)
        if 255 * bound + 2.0 ** (precision - 1) >= _EXACT_FLOAT32:
            return None
        n_left = sum(1 for i in edges if i < out_size // 2)
        n_right = len(edges) - n_left
        ends = list(range(n_left)) + list(range(out_size - n_right, out_size))
        before, after = max(-first, 0), max(last - factor + 1, 0)
        own_inputs = factor * block
        if edges != ends or max(n_left, n_right, before, after) > min(block, own_inputs):
            return None

        scale = 2.0**-precision

        def corrections(rows: list[int], at_end: bool) -> np.ndarray:
            """Each edge output's weights minus the kernel's, on the inputs at its end."""
            dense = np.zeros((len(rows), in_size))
            for row, i in enumerate(rows):
                for offset in set(taps[i]) | set(kernel):
                    source = factor * i + offset
                    if 0 <= source < in_size:
                        dense[row, source] = taps[i].get(offset, 0.0) - kernel.get(offset, 0.0)
            used = np.flatnonzero(np.abs(dense).sum(0))
            span = 0 if len(used) == 0 else (in_size - used[0] if at_end else used[-1] + 1)
            kept = dense[:, in_size - span :] if at_end else dense[:, :span]
            return kept * scale

        own = np.zeros((own_inputs, block))
        halo = np.zeros((before + after + n_left + n_right + 1, block))
        for q in range(block):
            for offset, weight in kernel.items():
                position = factor * q + offset
                if position < 0:
                    halo[before + position, q] = weight * scale
                elif position < own_inputs:
                    own[position, q] = weight * scale
                else:
                    halo[before + position - own_inputs, q] = weight * scale
        slot = before + after
        for q in range(n_left):
            halo[slot + q, q] = 1.0
        for q in range(n_right):
            halo[slot + n_left + q, block - n_right + q] = 1.0
        halo[-1] = 0.5
        return cls(
            factor,
            block,
            before,
            after,
            corrections(edges[:n_left], at_end=False),
            corrections(edges[n_left:], at_end=True),
            own,
            halo,
        )

    def apply(self, values: torch.Tensor, axis: int) -> torch.Tensor:
        """The pass along `axis` (2 or 3) of float32 (B, C, H, W) images holding uint8 values."""
        in_size = static_size(values, axis)
        own_inputs = self.factor * self.block
        blocks = in_size // own_inputs
        slots = []
        for d in range(self.before):  # input own * j - before + d, for blocks j >= 1
            start = own_inputs - self.before + d
            taken = _take(values, axis, start, in_size - self.before + d, own_inputs)
            slots.append(_pad_axis(taken, axis, 1, 0))
        for d in range(self.after):  # input own * (j + 1) + d, for blocks j < blocks - 1
            taken = _take(values, axis, own_inputs + d, in_size, own_inputs)
            slots.append(_pad_axis(taken, axis, 0, 1))
        for weights, at_end in ((self.left, False), (self.right, True)):
            if len(weights) == 0:
                continue
            span = weights.shape[1]
            start = in_size - span if at_end else 0
            source = _take(values, axis, start, start + span, 1)
            corrections = _contract(source, _table(weights.T, values), axis)
            for row in range(len(weights)):
                slot = _take(corrections, axis, row, row + 1, 1)
                slots.append(
                    _pad_axis(slot, axis, blocks - 1 if at_end else 0, 0 if at_end else blocks - 1)
                )
        slots.append(_pad_axis(_take(values, axis, 0, 0, 1), axis, 0, blocks, value=1.0))
        halo = torch.stack(slots, axis + 1)
        own, halo_weights = _table(self.own, values), _table(self.halo, values)
        if axis == 3:
            channels, height = static_size(values, 1), static_size(values, 2)
            halo_sums = torch.matmul(halo, halo_weights).reshape(-1, self.block)
            sums = torch.addmm(halo_sums, values.reshape(-1, own_inputs), own)
            sums = sums.reshape(-1, channels, height, blocks * self.block)
        else:
            channels, width = static_size(values, 1), static_size(values, 3)
            # Whole rows to copy: the halo joins each block's own rows.
            rows = torch.cat([values.reshape(-1, channels, blocks, own_inputs, width), halo], 3)
            sums = torch.matmul(torch.cat([own, halo_weights]).T, rows)
            sums = sums.reshape(-1, channels, blocks * self.block, width)
        return torch.floor(sums)


def _block_size(out_size: int, factor: int) -> int | None:
    """The largest divisor of `out_size` whose block reads at most `_MAX_BLOCK_INPUTS`
    inputs of its own, or None when it is below `_MIN_BLOCK` (and not all of them)."""
    largest = max(1, _MAX_BLOCK_INPUTS // factor)
    block = max(d for d in range(1, min(largest, out_size) + 1) if out_size % d == 0)
    return block if block >= _MIN_BLOCK or block == out_size else None


def _take(image: torch.Tensor, axis: int, start: int, stop: int | None, step: int) -> torch.Tensor:
    """`image[..., start:stop:step, ...]` along `axis`."""
    index = (slice(None),) * axis + (slice(start, stop, step),)
    return image[index]


def _pad_axis(
    image: torch.Tensor, axis: int, before: int, after: int, value: float = 0.0
) -> torch.Tensor:
    """`image` padded along `axis` (2 or 3) with `before` and `after` entries of `value`."""
    pads = (before, after) if axis == 3 else (0, 0, before, after)
    return F.pad(image, pads, value=value)


def _table(weights: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return _on_device(weights, np.float32, like.device)


def _on_device(table: np.ndarray, dtype: type, device: torch.device) -> torch.Tensor:
    """A host-computed table made on `device` itself.

    Made on the host and then moved, a traced graph would keep it as a CPU constant
    and copy it to the device on every call: a copy from pageable memory synchronises
    the stream, which CUDA graph capture refuses (the graph then runs eagerly).
    """
    return torch.as_tensor(np.ascontiguousarray(table, dtype=dtype), device=device)


def _contract(image: torch.Tensor, weights: torch.Tensor, axis: int) -> torch.Tensor:
    """`weights` (in, out) applied along `axis` (2 or 3) of a (B, C, H, W) image."""
    if axis == 3:
        return torch.matmul(image, weights)
    return torch.matmul(weights.T, image)


def _resize_axis(image: torch.Tensor, axis: int, in_size: torch.Tensor, size: int) -> torch.Tensor:
    """A pass of a specialised `resize_uint8_exportable` along `axis` (3: the width,
    2: the height): that axis moved first, resized, and moved back."""
    order = (axis, *(dim for dim in range(4) if dim != axis))
    rest = [image.shape[dim] for dim in order[1:]]
    lines = image.permute(*order).reshape(static_size(image, axis), rest[0] * rest[1] * rest[2])
    lines = _resize_leading_axis(lines, in_size, _as_size(size, image.device))
    return lines.reshape(size, *rest).permute(*(order.index(dim) for dim in range(4)))


def resize_uint8(
    image: torch.Tensor,
    height: int | torch.Tensor,
    width: int | torch.Tensor,
    *,
    specialised: bool = False,
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
        specialised: int sizes and the image's own size frozen into a traced graph;
            passes that keep their axis's size are left out.
    """
    if torch.jit.is_tracing() or image.device.type != "cpu":
        return resize_uint8_exportable(image, height, width, specialised=specialised)
    size = (int(height), int(width))
    if size == tuple(image.shape[2:]):
        return image
    return F.interpolate(image, size=size, mode="bilinear", align_corners=False, antialias=True)


def static_size(image: torch.Tensor, dim: int) -> int:
    """The size of `dim` as a Python int, frozen into a traced graph on purpose.

    The TensorRT profile's graphs are made for one frame size, so their sizes are
    constants; the tracer's warning about freezing them is expected and silenced.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return int(image.shape[dim])


def resize_tables(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """torch's uint8 antialiased bilinear taps for one axis, computed on the host.

    The arithmetic of torch's C++ kernel (`_compute_index_ranges_int16_weights`),
    in float64 as it runs there: the same numbers as `_resize_tables` computes in
    a graph, from Python ints.

    Returns:
        `(indices, weights, precision)`: source indices (out, taps) int64 clamped
        into the input; int16-valued weights (out, taps) float64, zero past each
        output's support; and the fixed-point precision.
    """
    scale = in_size / out_size
    support = 1.0 if scale < 1.0 else scale
    inv_scale = 1.0 if scale < 1.0 else 1.0 / scale
    taps = math.ceil(support) * 2 + 1
    center = scale * (np.arange(out_size, dtype=np.float64) + 0.5)
    # C casts truncate toward zero.
    first = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    last = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size)
    source = first[:, None] + np.arange(taps)
    weights = np.maximum(1.0 - np.abs((source - center[:, None] + 0.5) * inv_scale), 0.0)
    weights = np.where(source < last[:, None], weights, 0.0)
    # Summed tap by tap, in the kernel's order.
    total = np.zeros(out_size)
    for tap in range(taps):
        total = total + weights[:, tap]
    weights = np.where(
        total[:, None] != 0.0, weights / np.where(total != 0.0, total, 1.0)[:, None], weights
    )
    largest = float(weights.max())
    precision = 0
    while precision < _MAX_WEIGHT_PRECISION and int(0.5 + largest * 2.0 ** (precision + 1)) < 32768:
        precision += 1
    fixed = np.floor(0.5 + weights * 2.0**precision)
    return np.minimum(source, in_size - 1), fixed, precision


def _resize_values_axis(image: torch.Tensor, axis: int, out_size: int) -> torch.Tensor:
    """One exact resize pass along `axis` of float32 (B, C, H, W) uint8 values.

    The weights split as `high * 2^q + low` (see `_resize_leading_axis`) so that
    every partial sum stays an exact float32 integer.
    """
    in_size = static_size(image, axis)
    if in_size == out_size:
        return image
    indices, fixed, precision = resize_tables(in_size, out_size)
    taps = indices.shape[1]
    shift = max(precision - 15, 0)
    unit = 2.0**shift
    high = np.floor(fixed / unit)
    low = fixed - high * unit
    picked = image.index_select(axis, _on_device(indices.reshape(-1), np.int64, image.device))
    shape = list(image.shape)
    shape[0] = -1  # the batch axis stays dynamic
    shape[axis : axis + 1] = [out_size, taps]
    picked = picked.reshape(shape)
    # Weights broadcast as (out, taps) followed by one unit axis per later image axis.
    trailing = (1,) * (3 - axis)

    def weighted_sum(weights: np.ndarray) -> torch.Tensor:
        table = _on_device(weights.reshape(out_size, taps, *trailing), np.float32, image.device)
        return (picked * table).sum(axis + 1)

    low_sum = weighted_sum(low) + 2.0 ** (precision - 1)
    total = weighted_sum(high) + torch.floor(low_sum / unit)
    rounded = torch.floor(total / 2.0 ** (precision - shift))
    return torch.clamp(rounded, 0.0, 255.0)


def resize_values(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """`resize_uint8` on float32 (B, C, H, W) images holding uint8 values.

    Width first, then height, each pass rounded to uint8 values as torch rounds
    them; the result is float32 too. Sizes are fixed at trace time.
    """
    return _resize_values_axis(_resize_values_axis(image, 3, width), 2, height)
