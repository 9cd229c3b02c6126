"""`tf_graph`: ATen operations as TensorFlow operations, on small modules whose cases
the fixture models do not reach (ceil-mode and padded pooling, negative padding,
grouped, depthwise, strided and transposed convolutions with output padding, top-k on
a middle axis, advanced indexing apart and together, align-corners resizing): each
gives torch's numbers. Needs TensorFlow (skips without it, as in CI's main venv)."""

from __future__ import annotations

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
