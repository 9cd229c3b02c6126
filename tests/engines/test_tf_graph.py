"""`tf_graph`: ATen operations as TensorFlow operations, on small modules whose cases
the fixture models do not reach (ceil-mode and padded pooling, negative padding,
grouped, depthwise, strided and transposed convolutions with output padding, top-k on
a middle axis, advanced indexing apart and together, align-corners resizing): each
gives torch's numbers; and each row of `tf_ops.OPS` on an example of its own
(`EXAMPLES`, one generated test per operation). Needs TensorFlow (skips without it, as
in CI's main venv)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("tensorflow", reason='needs pip install "sleap-live[saved-model]"')


class Pooling(torch.nn.Module):
    def forward(self, x):
        a = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)
        b = F.max_pool2d(x, 2, ceil_mode=True)
        return a, b, F.pad(x, (-1, 2, 1, -2), value=0.5)


class Convolutions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.grouped = torch.nn.Conv2d(4, 6, 3, padding=1, groups=2)
        self.depthwise = torch.nn.Conv2d(4, 8, 3, stride=2, padding=2, dilation=2, groups=4)
        self.up = torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return self.grouped(x), self.depthwise(x), self.up(x)


class Indexing(torch.nn.Module):
    def forward(self, x):
        rows = torch.tensor([2, 0, -1])
        cols = torch.tensor([1, 3, 0])
        values, indices = torch.topk(x, 2, dim=1)
        apart = x[rows, :, cols]  # indexed axes apart: they go first
        together = x[:, rows, cols]  # adjacent: they stay where they were
        resized = F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True)
        return values, indices, apart, together, resized


@pytest.mark.parametrize(
    ("module", "shape"),
    [(Pooling(), (1, 4, 7, 9)), (Convolutions(), (1, 4, 7, 9)), (Indexing(), (4, 4, 5, 6))],
    ids=["pooling", "convolutions", "indexing"],
)
def test_the_tensorflow_graph_gives_torchs_numbers(module, shape):
    import tensorflow as tf

    from sleap_live.engines.export.tf_graph import core_program, tf_function

    torch.manual_seed(0)
    x = torch.rand(shape)
    module = module.eval()
    with torch.no_grad():
        expected = module(x)
    function = tf_function(core_program(module, x))
    actual = function(tf.constant(x.numpy()))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        want = want.numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


# --- each operation of the table, on an example of its own -------------------------------

aten = torch.ops.aten
_random = torch.Generator().manual_seed(0)


def _rand(*shape: int) -> torch.Tensor:
    return torch.rand(shape, generator=_random) * 4 - 2


def _ints(*shape: int) -> torch.Tensor:
    return torch.randint(-5, 6, shape, generator=_random)


def _call(*args, **kwargs):
    return args, kwargs


_A, _B, _M = _rand(2, 3), _rand(2, 3), _rand(2, 3) > 0
_X = _rand(2, 4, 6, 5)  # (N, C, H, W)
# Each operation of `tf_ops.OPS` with arguments torch runs it on: the test of each
# row is generated from its example, and a row without one fails.
EXAMPLES = {
    aten._assert_tensor_metadata.default: _call(_A, dtype=torch.float32),
    operator.getitem: _call((_A, _B), 1),
    aten._to_copy.default: _call(_A * 3, dtype=torch.int32),
    aten.clone.default: _call(_A),
    aten.alias.default: _call(_A),
    aten.permute.default: _call(_X, [0, 2, -1, 1]),
    aten.view.default: _call(_A, [3, 2]),
    aten._unsafe_view.default: _call(_A, [6]),
    aten.reshape.default: _call(_X, [2, -1]),
    aten.expand.default: _call(_rand(1, 3), [4, 3]),
    aten.unsqueeze.default: _call(_A, -1),
    aten.squeeze.dim: _call(_rand(2, 1, 3), 1),
    aten.squeeze.dims: _call(_rand(2, 1, 3, 1), [1, 3]),
    aten.constant_pad_nd.default: _call(_X, [1, -1, 2, 0], 0.5),
    aten.slice.Tensor: _call(_X, 2, 1, -1, 2),
    aten.select.int: _call(_X, 1, -1),
    aten.cat.default: _call([_A, _B * 2], -1),
    aten.add.Tensor: _call(_A, _B, alpha=2),
    aten.sub.Tensor: _call(_A, 0.5),
    aten.mul.Tensor: _call(_ints(2, 3), _ints(2, 3)),
    aten.div.Tensor: _call(_A, _B + 3),
    aten.div.Tensor_mode: _call(_A * 5, _B + 3, rounding_mode="trunc"),
    aten.maximum.default: _call(_A, _B),
    aten.minimum.default: _call(_A, _B),
    aten.ge.Tensor: _call(_A, _B),
    aten.ge.Scalar: _call(_ints(2, 3), 0.5),
    aten.gt.Tensor: _call(_ints(2, 3), _A),
    aten.gt.Scalar: _call(_A, 0),
    aten.le.Tensor: _call(_A, _B),
    aten.le.Scalar: _call(_ints(2, 3), 1),
    aten.lt.Tensor: _call(_A, _B),
    aten.lt.Scalar: _call(_A, -0.5),
    aten.eq.Tensor: _call(_ints(2, 3), _ints(2, 3)),
    aten.eq.Scalar: _call(_ints(2, 3), 2),
    aten.ne.Tensor: _call(_M, _B > 0),
    aten.ne.Scalar: _call(_ints(2, 3), 0),
    aten.bitwise_and.Tensor: _call(_ints(2, 3), _ints(2, 3)),
    aten.bitwise_or.Tensor: _call(_M, _B > 0),
    aten.bitwise_not.default: _call(_ints(2, 3)),
    aten.logical_and.default: _call(_M, _B > 0),
    aten.logical_or.default: _call(_M, _B > 0),
    aten.logical_not.default: _call(_M),
    aten.relu.default: _call(_A),
    aten.sigmoid.default: _call(_A),
    aten.floor.default: _call(_A),
    aten.ceil.default: _call(_A),
    aten.round.default: _call(torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.4])),
    aten.neg.default: _call(_A),
    aten.exp.default: _call(_A),
    aten.sqrt.default: _call(_A.abs()),
    aten.reciprocal.default: _call(_A.abs() + 0.5),
    aten.abs.default: _call(_A),
    aten.isnan.default: _call(torch.tensor([0.0, float("nan"), 1.0])),
    aten.amax.default: _call(_X, [1, 2], True),
    aten.amin.default: _call(_X, [-1]),
    aten.mean.dim: _call(_X, [2, 3], True),
    aten.sum.dim_IntList: _call(_X, []),
    aten.any.default: _call(_M),
    aten.linalg_vector_norm.default: _call(_X, 2, [1]),
    aten.argmax.default: _call(_X, 1, True),
    aten.topk.default: _call(_X, 3, 2, False),
    aten.where.self: _call(_M, _A, _B),
    aten.clamp.default: _call(_A, -0.5, 0.5),
    aten.index_select.default: _call(_X, 2, torch.tensor([4, 0, 2])),
    aten.gather.default: _call(_A, 1, torch.tensor([[2, 0], [1, 1]])),
    aten.index.Tensor: _call(_X, [None, torch.tensor([0, -1]), torch.tensor([1, 3])]),
    aten.convolution.default: _call(
        _X, _rand(6, 2, 3, 3), _rand(6), [2, 1], [1, 2], [1, 1], False, [0, 0], 2
    ),
    aten.max_pool2d_with_indices.default: _call(_X, [3, 3], [2, 2], [1, 1], [1, 1], True),
    aten.upsample_bilinear2d.vec: _call(_X, [9, 4], False, None),
    aten.addmm.default: _call(_rand(3), _A, _rand(3, 3), beta=0.5, alpha=2),
    aten.mm.default: _call(_A, _rand(3, 4)),
    aten._softmax.default: _call(_X, 1, False),
    aten.gelu.default: _call(_A),
    aten.native_layer_norm.default: _call(_X, [6, 5], _rand(6, 5), _rand(6, 5), 1e-5),
    aten.bmm.default: _call(_rand(2, 3, 4), _rand(2, 4, 5)),
    aten.remainder.Scalar: _call(_ints(2, 3), 3),
    aten.remainder.Tensor: _call(_A * 3, _B.abs() + 0.5),
    aten.arange.start_step: _call(2, 11, 3, dtype=torch.int64),
    aten.arange.default: _call(5, dtype=torch.float32),
    aten.arange.start: _call(-2, 4, dtype=torch.int64),
    aten.scalar_tensor.default: _call(3.5, dtype=torch.float32),
    aten.full.default: _call([2, 3], 1.5, dtype=torch.float32),
    aten.full_like.default: _call(_A, 7),
    aten.zeros_like.default: _call(_ints(2, 3)),
    aten.ones_like.default: _call(_A),
}


def _node(op, args, kwargs, value) -> torch.fx.Node:
    """The program's node for `op` on `args`: its tensor arguments placeholders holding
    their values, its own value torch's result (what the forms read of a node)."""
    graph = torch.fx.Graph()

    def placeholder(arg):
        if not isinstance(arg, torch.Tensor):
            return arg
        node = graph.placeholder(f"x{len(graph.nodes)}")
        node.meta["val"] = arg
        return node

    node = graph.call_function(op, torch.fx.node.map_aggregate(args, placeholder), dict(kwargs))
    node.meta["val"] = value
    return node


def _in_tensorflow(arg):
    """As `tf_graph` hands arguments to the forms: tensors as TensorFlow's, int64 as int32."""
    import tensorflow as tf

    from sleap_live.engines.export.tf_ops import np_dtype

    if isinstance(arg, torch.Tensor):
        value = arg.numpy()
        return tf.constant(value.astype(np_dtype(value.dtype)))
    if isinstance(arg, (list, tuple)):
        return type(arg)(_in_tensorflow(item) for item in arg)
    return arg


def _ops():
    from sleap_live.engines.export.tf_ops import OPS

    return OPS


@pytest.mark.parametrize("op", list(_ops()), ids=str)
def test_each_operation_gives_torchs_numbers(op):
    assert op in EXAMPLES, f"{op} has no example in EXAMPLES"
    args, kwargs = EXAMPLES[op]
    expected = op(*args, **kwargs)
    got = _ops()[op](_node(op, args, kwargs, expected), *_in_tensorflow(args), **kwargs)
    if expected is None:  # an assertion
        assert got is None
        return
    if isinstance(expected, torch.Tensor):
        expected, got = (expected,), (got,)
    compared = 0
    for want, have in zip(expected, got, strict=True):
        if have is None:  # max pooling's indices, which no program reads
            continue
        want = want.numpy()
        assert tuple(have.shape) == want.shape
        have = have.numpy()
        if want.dtype.kind == "f":
            assert have.dtype == want.dtype
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)
        else:  # int64 is int32 inside
            assert have.dtype.kind == want.dtype.kind
            np.testing.assert_array_equal(have, want)
        compared += 1
    assert compared


def test_every_example_is_an_operation_of_the_table():
    assert set(EXAMPLES) <= set(_ops())
