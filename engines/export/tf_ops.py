"""Each ATen operation's TensorFlow form, one small function per operation, and
`OPS`, the table `tf_graph` looks them up in (see its notes: layout, integers).

Every form takes the program's node (its `meta["val"]` is torch's output: dtype,
shape) and the operation's arguments, TensorFlow tensors where torch's were tensors.
An operation is one function (or a factory's form) and one row of `OPS`;
tests/engines/test_tf_graph.py runs each row against torch on an example of its own.

Imports TensorFlow (so does `tf_graph`, through this module): the exporters import
them only when they build a graph.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
import tensorflow as tf
import torch

aten = torch.ops.aten
Op = Callable[..., Any]


class UnsupportedOperation(Exception):
    """An ATen operation (or an argument of one) this converter has no TensorFlow form for."""


def np_dtype(dtype: np.dtype) -> Any:
    """The numpy dtype a constant of `dtype` is held in (int64 as int32)."""
    return np.int32 if dtype == np.int64 else dtype


def tf_dtype(dtype: torch.dtype) -> Any:
    """The TensorFlow dtype of a torch dtype (int64 as int32).

    Raises:
        UnsupportedOperation: a dtype without one.
    """
    table = {
        torch.float32: tf.float32,
        torch.float64: tf.float64,
        torch.float16: tf.float16,
        torch.uint8: tf.uint8,
        torch.int8: tf.int8,
        torch.int16: tf.int16,
        torch.int32: tf.int32,
        torch.int64: tf.int32,  # int32 inside (see tf_graph's notes)
        torch.bool: tf.bool,
    }
    if dtype not in table:
        raise UnsupportedOperation(f"dtype {dtype}")
    return table[dtype]


def meta(node: torch.fx.Node) -> Any:
    return node.meta["val"]


def out_dtype(node: torch.fx.Node) -> Any:
    return tf_dtype(meta(node).dtype)


def out_shape(node: torch.fx.Node) -> list[int]:
    return [int(size) for size in meta(node).shape]


def rank(x: Any) -> int:
    return len(x.shape)


def dim_of(x: Any, dim: int) -> int:
    return dim + rank(x) if dim < 0 else dim


def axes_of(x: Any, dims: Sequence[int] | None) -> list[int] | None:
    """A reduction's axes: every one where `dims` is None or empty (torch's rule)."""
    return None if not dims else [dim_of(x, d) for d in dims]


def as_tensor(value: Any, dtype: Any) -> Any:
    if isinstance(value, tf.Tensor):
        return value if value.dtype == dtype else tf.cast(value, dtype)
    return tf.constant(value, dtype=dtype)


def compute_dtype(node: torch.fx.Node) -> Any:
    """The dtype torch computes a comparison of the node's two arguments in."""
    values = [arg.meta["val"] if isinstance(arg, torch.fx.Node) else arg for arg in node.args[:2]]
    return tf_dtype(torch.result_type(*values))


def binary(function: Callable[[Any, Any], Any], *, compare: bool = False) -> Op:
    def op(node: torch.fx.Node, a: Any, b: Any, **kwargs: Any) -> Any:
        dtype = compute_dtype(node) if compare else out_dtype(node)
        return function(as_tensor(a, dtype), as_tensor(b, dtype))

    return op


def logical(on_bool: Callable[..., Any], on_int: Callable[..., Any]) -> Op:
    def op(node: torch.fx.Node, *args: Any) -> Any:
        dtype = out_dtype(node)
        args = tuple(as_tensor(arg, dtype) for arg in args)
        return (on_bool if dtype == tf.bool else on_int)(*args)

    return op


def unary(function: Callable[[Any], Any]) -> Op:
    def op(node: torch.fx.Node, x: Any) -> Any:
        return function(as_tensor(x, out_dtype(node)))

    return op


def constant(node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
    # A value no input decides (arange): computed by torch itself, from the node.
    value = node.target(*args, **{k: v for k, v in kwargs.items() if k != "device"}).numpy()
    return tf.constant(value.astype(np_dtype(value.dtype)))


def filled(node: torch.fx.Node, like_or_size: Any, value: Any, **kwargs: Any) -> Any:
    # full(size, value) and full_like(x, value): the node knows the shape.
    return tf.fill(out_shape(node), as_tensor(value, out_dtype(node)))


def cast(node: torch.fx.Node, x: Any, **kwargs: Any) -> Any:
    """_to_copy and scalar_tensor: the value in the node's dtype."""
    return as_tensor(x, out_dtype(node))


def scaled(function: Callable[[Any, Any], Any]) -> Op:
    """add and sub: `function(a, alpha * b)`."""

    def op(node: torch.fx.Node, a: Any, b: Any, alpha: Any = 1) -> Any:
        dtype = out_dtype(node)
        b = as_tensor(b, dtype)
        return function(as_tensor(a, dtype), b if alpha == 1 else b * as_tensor(alpha, dtype))

    return op


def div_mode(node: torch.fx.Node, a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    dtype = out_dtype(node)
    a, b = as_tensor(a, dtype), as_tensor(b, dtype)
    if rounding_mode is None:
        return tf.math.divide(a, b)
    if rounding_mode == "floor":
        return tf.math.floordiv(a, b)
    if dtype.is_integer:
        return tf.math.truncatediv(a, b)
    quotient = a / b
    return tf.where(quotient < 0, tf.math.ceil(quotient), tf.math.floor(quotient))


def reshape(node: torch.fx.Node, x: Any, *args: Any, **kwargs: Any) -> Any:
    return tf.reshape(x, out_shape(node))


def unsqueeze(node: torch.fx.Node, x: Any, dim: int) -> Any:
    return tf.expand_dims(x, dim + rank(x) + 1 if dim < 0 else dim)


def identity(node: torch.fx.Node, x: Any, **kwargs: Any) -> Any:
    return x


def pad(node: torch.fx.Node, x: Any, padding: Sequence[int], value: Any = 0) -> Any:
    pairs = [[0, 0] for _ in range(rank(x))]
    for index in range(len(padding) // 2):
        pairs[rank(x) - 1 - index] = [int(padding[2 * index]), int(padding[2 * index + 1])]
    crops = tuple(
        slice(max(-low, 0), size - max(-high, 0))
        for (low, high), size in zip(pairs, x.shape, strict=True)
    )
    x = x[crops]
    positive = [[max(low, 0), max(high, 0)] for low, high in pairs]
    return tf.pad(x, positive, constant_values=as_tensor(value, x.dtype))


def slice_(
    node: torch.fx.Node, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Any:
    dim = dim_of(x, dim)
    size = int(x.shape[dim])
    begin, stop, stride = slice(start, end, step).indices(size)
    index = [slice(None)] * rank(x)
    index[dim] = slice(begin, stop, stride)
    return x[tuple(index)]


def select(node: torch.fx.Node, x: Any, dim: int, index: int) -> Any:
    dim = dim_of(x, dim)
    size = int(x.shape[dim])
    return tf.gather(x, index + size if index < 0 else index, axis=dim)


def cat(node: torch.fx.Node, tensors: Sequence[Any], dim: int = 0) -> Any:
    dtype = out_dtype(node)
    tensors = [as_tensor(t, dtype) for t in tensors]
    return tf.concat(tensors, axis=dim_of(tensors[0], dim))


def reduce(function: Callable[..., Any]) -> Op:
    def op(
        node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False, **kwargs: Any
    ) -> Any:
        x = as_tensor(x, out_dtype(node))
        return function(x, axis=axes_of(x, dim), keepdims=keepdim)

    return op


def norm(
    node: torch.fx.Node,
    x: Any,
    ord: Any = 2,
    dim: Any = None,
    keepdim: bool = False,
    **kwargs: Any,
) -> Any:
    if ord != 2:
        raise UnsupportedOperation(f"linalg_vector_norm of order {ord}")
    x = as_tensor(x, out_dtype(node))
    return tf.sqrt(tf.reduce_sum(x * x, axis=axes_of(x, dim), keepdims=keepdim))


def argmax(node: torch.fx.Node, x: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    if dim is None:
        x, dim = tf.reshape(x, [-1]), 0
    dim = dim_of(x, dim)
    found = tf.math.argmax(x, axis=dim, output_type=tf.int32)
    return tf.expand_dims(found, dim) if keepdim else found


def topk(
    node: torch.fx.Node,
    x: Any,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,
) -> Any:
    dim = dim_of(x, dim)
    order = [d for d in range(rank(x)) if d != dim] + [dim]
    moved = tf.transpose(x, order) if dim != rank(x) - 1 else x
    values, indices = tf.math.top_k(moved if largest else -moved, k=k, sorted=True)
    if not largest:
        values = -values
    if dim != rank(x) - 1:
        back = np.argsort(order).tolist()
        values, indices = tf.transpose(values, back), tf.transpose(indices, back)
    return values, indices


def where(node: torch.fx.Node, condition: Any, a: Any, b: Any) -> Any:
    dtype = out_dtype(node)
    return tf.where(as_tensor(condition, tf.bool), as_tensor(a, dtype), as_tensor(b, dtype))


def clamp(node: torch.fx.Node, x: Any, min: Any = None, max: Any = None) -> Any:
    dtype = out_dtype(node)
    x = as_tensor(x, dtype)
    if min is not None:
        x = tf.maximum(x, as_tensor(min, dtype))
    if max is not None:
        x = tf.minimum(x, as_tensor(max, dtype))
    return x


def index_select(node: torch.fx.Node, x: Any, dim: int, index: Any) -> Any:
    return tf.gather(x, index, axis=dim_of(x, dim))


def gather(node: torch.fx.Node, x: Any, dim: int, index: Any, **kwargs: Any) -> Any:
    dim = dim_of(x, dim)
    shape = [int(size) for size in index.shape]
    grids = tf.meshgrid(*[tf.range(size, dtype=tf.int32) for size in shape], indexing="ij")
    grids[dim] = tf.cast(index, tf.int32)
    return tf.gather_nd(x, tf.stack(grids, axis=-1))


def index(node: torch.fx.Node, x: Any, indices: Sequence[Any]) -> Any:
    positions = [i for i, item in enumerate(indices) if item is not None]
    if not positions:
        return x
    sizes = [int(size) for size in x.shape]
    rest = [d for d in range(rank(x)) if d not in positions]
    moved = tf.transpose(x, positions + rest)
    tensors = []
    for position in positions:
        item = indices[position]
        if item.dtype == tf.bool:
            raise UnsupportedOperation("indexing with a boolean mask")
        item = tf.cast(item, tf.int32)
        tensors.append(tf.where(item < 0, item + sizes[position], item))
    broadcast = tensors[0].shape
    for tensor in tensors[1:]:
        broadcast = tf.broadcast_static_shape(broadcast, tensor.shape)
    stacked = tf.stack([tf.broadcast_to(t, broadcast) for t in tensors], axis=-1)
    found = tf.gather_nd(moved, stacked)
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    if adjacent and positions[0] > 0:
        # torch puts the indexed dimensions where the first of them was.
        b = len(broadcast)
        order = (
            list(range(b, b + positions[0]))
            + list(range(b))
            + list(range(b + positions[0], rank(found)))
        )
        found = tf.transpose(found, order)
    return found


def nhwc(x: Any) -> Any:
    return tf.transpose(x, [0, 2, 3, 1])


def nchw(x: Any) -> Any:
    return tf.transpose(x, [0, 3, 1, 2])


def convolution(
    node: torch.fx.Node,
    x: Any,
    weight: Any,
    bias: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> Any:
    if rank(x) != 4:
        raise UnsupportedOperation(f"a {rank(x) - 2}-d convolution")
    x = nhwc(x)
    if transposed:
        if groups != 1 or any(d != 1 for d in dilation):
            raise UnsupportedOperation("a grouped or dilated transposed convolution")
        # torch: (in, out, kh, kw); TensorFlow: (kh, kw, out, in).
        kernel = tf.transpose(weight, [2, 3, 1, 0])
        batch, height, width = int(x.shape[0]), int(x.shape[1]), int(x.shape[2])
        kh, kw = int(weight.shape[2]), int(weight.shape[3])
        full = [(height - 1) * stride[0] + kh, (width - 1) * stride[1] + kw]
        out = tf.nn.conv2d_transpose(
            x, kernel, [batch, *full, int(kernel.shape[2])], strides=list(stride),
            padding="VALID",
        )  # fmt: skip
        wanted = out_shape(node)[2:]
        extra = [max(padding[i] + wanted[i] - full[i], 0) for i in range(2)]
        if any(extra):
            out = tf.pad(out, [[0, 0], [0, extra[0]], [0, extra[1]], [0, 0]])
        out = out[:, padding[0] : padding[0] + wanted[0], padding[1] : padding[1] + wanted[1]]
    else:
        if any(padding):
            x = tf.pad(x, [[0, 0], [padding[0]] * 2, [padding[1]] * 2, [0, 0]])
        kernel = tf.transpose(weight, [2, 3, 1, 0])  # (kh, kw, in/groups, out)
        channels = int(x.shape[3])
        # TensorFlow dilates only with stride 1: such a convolution is computed at
        # stride 1 and subsampled.
        subsample = any(d > 1 for d in dilation) and any(s > 1 for s in stride)
        steps = [1, 1] if subsample else list(stride)
        if groups == 1:
            out = tf.nn.conv2d(x, kernel, strides=steps, padding="VALID", dilations=list(dilation))
        elif groups == channels and int(kernel.shape[2]) == 1:
            multiplier = int(kernel.shape[3]) // channels
            depthwise = tf.reshape(
                kernel, [int(kernel.shape[0]), int(kernel.shape[1]), channels, multiplier]
            )
            out = tf.nn.depthwise_conv2d(
                x, depthwise, strides=[1, *steps, 1], padding="VALID",
                dilations=list(dilation),
            )  # fmt: skip
        else:
            xs = tf.split(x, groups, axis=3)
            ks = tf.split(kernel, groups, axis=3)
            out = tf.concat(
                [
                    tf.nn.conv2d(xi, ki, strides=steps, padding="VALID", dilations=list(dilation))
                    for xi, ki in zip(xs, ks, strict=True)
                ],
                axis=3,
            )
        if subsample:
            out = out[:, :: stride[0], :: stride[1]]
    if bias is not None:
        out = tf.nn.bias_add(out, bias)
    return nchw(out)


def max_pool(
    node: torch.fx.Node,
    x: Any,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
    ceil_mode: bool = False,
) -> Any:
    if any(d != 1 for d in dilation) or rank(x) != 4:
        raise UnsupportedOperation("a dilated or not 2-d max pooling")
    kernel = list(kernel) * (2 // len(kernel))
    stride = list(stride or kernel) * (2 // len(stride or kernel))
    padding = list(padding) * (2 // len(padding))
    wanted = (
        out_shape(node)[2:]
        if not isinstance(meta(node), tuple)
        else [int(size) for size in meta(node)[0].shape[2:]]
    )
    sizes = [int(x.shape[2]), int(x.shape[3])]
    ends = [
        max((wanted[i] - 1) * stride[i] + kernel[i] - sizes[i] - padding[i], padding[i])
        for i in range(2)
    ]
    x = nhwc(x)
    if any(padding) or any(ends):
        low = x.dtype.min
        x = tf.pad(
            x, [[0, 0], [padding[0], ends[0]], [padding[1], ends[1]], [0, 0]],
            constant_values=low,
        )  # fmt: skip
    out = tf.nn.max_pool2d(x, kernel, stride, "VALID")
    out = out[:, : wanted[0], : wanted[1]]
    return nchw(out), None


def bilinear(
    node: torch.fx.Node,
    x: Any,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> Any:
    out = x
    wanted = out_shape(node)[2:]
    for axis, (size_in, size_out) in enumerate(
        zip([int(x.shape[2]), int(x.shape[3])], wanted, strict=True)
    ):
        dst = np.arange(size_out, dtype=np.float32)
        if align_corners:
            scale = np.float32((size_in - 1) / (size_out - 1)) if size_out > 1 else np.float32(0)
            src = dst * scale
        else:
            if scale_factors is not None and scale_factors[axis] > 0:
                scale = np.float32(1.0 / scale_factors[axis])
            else:
                scale = np.float32(size_in / size_out)
            src = np.maximum(scale * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
        low = np.minimum(np.floor(src).astype(np.int32), size_in - 1)
        high = np.minimum(low + 1, size_in - 1)
        weight = (src - low).astype(np.float32)
        shape = [1, 1, size_out, 1] if axis == 0 else [1, 1, 1, size_out]
        w = tf.constant(weight.reshape(shape))
        a = tf.gather(out, low, axis=2 + axis)
        b = tf.gather(out, high, axis=2 + axis)
        out = (1 - w) * a + w * b
    return out


def addmm(node: torch.fx.Node, bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    product = tf.linalg.matmul(a, b)
    if alpha != 1:
        product = product * alpha
    return product + (bias if beta == 1 else bias * beta)


def gelu(node: torch.fx.Node, x: Any, approximate: str = "none") -> Any:
    if approximate == "tanh":
        return tf.nn.gelu(x, approximate=True)
    # tf.nn.gelu's exact form computes with Erfc, which TF.js has no kernel for.
    return 0.5 * x * (1.0 + tf.math.erf(x * np.float32(1 / math.sqrt(2))))


def layer_norm(
    node: torch.fx.Node, x: Any, shape: Sequence[int], weight: Any, bias: Any, eps: float
) -> Any:
    axes = list(range(rank(x) - len(shape), rank(x)))
    mean = tf.reduce_mean(x, axis=axes, keepdims=True)
    centred = x - mean
    variance = tf.reduce_mean(centred * centred, axis=axes, keepdims=True)
    rstd = tf.math.rsqrt(variance + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def bitwise_not(node: torch.fx.Node, x: Any) -> Any:
    return tf.logical_not(x) if x.dtype == tf.bool else tf.bitwise.invert(x)


def comparisons() -> dict[Any, Op]:
    """The six comparisons, of two tensors and of a tensor and a number, each computed
    in the dtype torch compares in."""
    functions = {
        "ge": tf.greater_equal,
        "gt": tf.greater,
        "le": tf.less_equal,
        "lt": tf.less,
        "eq": tf.equal,
        "ne": tf.not_equal,
    }
    return {
        getattr(getattr(aten, name), overload): binary(function, compare=True)
        for name, function in functions.items()
        for overload in ("Tensor", "Scalar")
    }


# Every ATen operation a program may hold that has a TensorFlow form here.
OPS: Mapping[Any, Op] = MappingProxyType(
    {
        aten._assert_tensor_metadata.default: lambda node, *args, **kwargs: None,
        operator.getitem: lambda node, value, index: value[index],
        aten._to_copy.default: cast,
        aten.clone.default: identity,
        aten.alias.default: identity,
        aten.permute.default: lambda node, x, dims: tf.transpose(x, [dim_of(x, d) for d in dims]),
        aten.view.default: reshape,
        aten._unsafe_view.default: reshape,
        aten.reshape.default: reshape,
        aten.expand.default: lambda node, x, *args, **kw: tf.broadcast_to(x, out_shape(node)),
        aten.unsqueeze.default: unsqueeze,
        aten.squeeze.dim: reshape,
        aten.squeeze.dims: reshape,
        aten.constant_pad_nd.default: pad,
        aten.slice.Tensor: slice_,
        aten.select.int: select,
        aten.cat.default: cat,
        aten.add.Tensor: scaled(tf.add),
        aten.sub.Tensor: scaled(tf.subtract),
        aten.mul.Tensor: binary(tf.multiply),
        aten.div.Tensor: binary(tf.math.divide),
        aten.div.Tensor_mode: div_mode,
        aten.maximum.default: binary(tf.maximum),
        aten.minimum.default: binary(tf.minimum),
        **comparisons(),
        aten.bitwise_and.Tensor: logical(tf.logical_and, tf.bitwise.bitwise_and),
        aten.bitwise_or.Tensor: logical(tf.logical_or, tf.bitwise.bitwise_or),
        aten.bitwise_not.default: bitwise_not,
        aten.logical_and.default: logical(tf.logical_and, tf.logical_and),
        aten.logical_or.default: logical(tf.logical_or, tf.logical_or),
        aten.logical_not.default: bitwise_not,
        aten.relu.default: unary(tf.nn.relu),
        aten.sigmoid.default: unary(tf.math.sigmoid),
        aten.floor.default: unary(tf.math.floor),
        aten.ceil.default: unary(tf.math.ceil),
        aten.round.default: unary(tf.math.round),
        aten.neg.default: unary(tf.math.negative),
        aten.exp.default: unary(tf.math.exp),
        aten.sqrt.default: unary(tf.math.sqrt),
        aten.reciprocal.default: unary(tf.math.reciprocal),
        aten.abs.default: unary(tf.math.abs),
        aten.isnan.default: lambda node, x: tf.math.is_nan(x),
        aten.amax.default: reduce(tf.reduce_max),
        aten.amin.default: reduce(tf.reduce_min),
        aten.mean.dim: reduce(tf.reduce_mean),
        aten.sum.dim_IntList: reduce(tf.reduce_sum),
        aten.any.default: lambda node, x: tf.reduce_any(as_tensor(x, tf.bool)),
        aten.linalg_vector_norm.default: norm,
        aten.argmax.default: argmax,
        aten.topk.default: topk,
        aten.where.self: where,
        aten.clamp.default: clamp,
        aten.index_select.default: index_select,
        aten.gather.default: gather,
        aten.index.Tensor: index,
        aten.convolution.default: convolution,
        aten.max_pool2d_with_indices.default: max_pool,
        aten.upsample_bilinear2d.vec: bilinear,
        aten.addmm.default: addmm,
        aten.mm.default: lambda node, a, b: tf.linalg.matmul(a, b),
        aten._softmax.default: lambda node, x, dim, half: tf.nn.softmax(x, axis=dim_of(x, dim)),
        aten.gelu.default: gelu,
        aten.native_layer_norm.default: layer_norm,
        aten.bmm.default: lambda node, a, b: tf.linalg.matmul(a, b),
        aten.remainder.Scalar: binary(tf.math.floormod),
        aten.remainder.Tensor: binary(tf.math.floormod),
        aten.arange.start_step: constant,
        aten.arange.default: constant,
        aten.arange.start: constant,
        aten.scalar_tensor.default: cast,
        aten.full.default: filled,
        aten.full_like.default: filled,
        aten.zeros_like.default: lambda node, x, **kw: tf.zeros(out_shape(node), out_dtype(node)),
        aten.ones_like.default: lambda node, x, **kw: tf.ones(out_shape(node), out_dtype(node)),
    }
)
