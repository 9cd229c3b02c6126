"""What float32 can promise about an inference model's outputs: the bound that
`sleap_live.engines.host.agreement` tells float noise from real differences by.

Two bounds, the second only where the first is exceeded:

- `graph_bound`, from the graph alone. An output of the networks is the end of a
  chain of sums: every convolution and linear layer adds up `in_channels / groups x
  kernel` products (its contraction length), and each addition may round by one
  unit roundoff u = 2^-24. To first order the relative error of a confidence-map
  value is at most u times the sum of the contraction lengths along the networks
  (`accumulation_depth`). A refined peak is the confidence-weighted mean of the
  offsets in its window (integral refinement, offsets up to (W - 1) / 2 cells):
  perturbing every weight by a relative e moves it by at most (W - 1) e cells, at
  least 2 where the window is smaller (SLEAP 1.x's offset heads move a peak by up to
  a cell). A cell spans `InferenceModel.peak_cells_px` frame pixels, and a top-down
  model's centroid error moves its crops, so the stages' cells add up.
- `measured_bound`, for graphs whose maps are ill-conditioned (a flat peak, a
  refinement window whose weights nearly cancel: sleap-nn's own multi-class
  bottom-up test model moves a refined peak by 0.012 px between float32 and float64,
  eight times the first bound). The networks are run once more in float64 on the same
  frames; the float32 run's distance from it is the graph's own rounding error on
  those frames, and another correct float32 run (another summation order, another
  convolution algorithm) may be as far on the other side and a few times worse:
  `MEASURED_FACTOR` times it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np
import torch

from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.host.agreement import PIXEL_OUTPUTS, UNIT_ROUNDOFF, Fp32Bound
from sleap_live.engines.settings import InferenceSettings

# Cells a refined peak may move per unit of relative map error, at least.
MIN_REACH_CELLS = 2
# Another correct float32 run may differ from the float64 one by this many times
# the float32 run's own distance from it (twice for the two sides, and a few times
# for algorithms that round more: Winograd convolutions, fused kernels).
MEASURED_FACTOR = 8.0


def accumulation_depth(module: torch.nn.Module) -> int:
    """The sum of the contraction lengths of every convolution and linear layer in
    `module` (an upper bound of the longest chain of sums behind one output)."""
    depth = 0
    for layer in module.modules():
        if isinstance(layer, torch.nn.modules.conv._ConvNd):
            depth += layer.in_channels // layer.groups * math.prod(layer.kernel_size)
        elif isinstance(layer, torch.nn.Linear):
            depth += layer.in_features
    return depth


def relative_error(module: torch.nn.Module) -> float:
    """The first-order bound of the relative float32 error of `module`'s outputs:
    unit roundoff times its `accumulation_depth`."""
    return UNIT_ROUNDOFF * accumulation_depth(module)


def graph_bound(model: InferenceModel) -> Fp32Bound:
    """The bound from the graph alone (module docstring)."""
    depth = accumulation_depth(model)
    relative = UNIT_ROUNDOFF * depth
    settings = model.info.settings or InferenceSettings()
    window = settings.integral_patch_size if settings.integral_refinement else 1
    reach = max(window - 1, MIN_REACH_CELLS)
    return Fp32Bound(
        points_px=relative * reach * sum(model.peak_cells_px()),
        scores=relative,
        peak_threshold=model.info.peak_threshold,
        how=f"from the graph: {depth} sums deep",
    )


def measured_bound(model: InferenceModel, frames: np.ndarray) -> Fp32Bound:
    """`graph_bound`, grown to `MEASURED_FACTOR` times the model's own float32
    rounding error on `frames` (module docstring)."""
    bound = graph_bound(model)
    reference = _run(model, frames)
    exact = _run(_float64_networks(model), frames)
    points = scores = 0.0
    for name, single, double in zip(model.output_names, reference, exact, strict=True):
        if single.dtype.kind != "f" or single.shape != double.shape:
            continue
        both = ~np.isnan(single) & ~np.isnan(double)
        if name in PIXEL_OUTPUTS:
            gap = np.linalg.norm(single - double, axis=-1)[both.all(axis=-1)]
            points = max(points, float(gap.max(initial=0.0)))
        elif both.any():
            relative = np.abs(single[both] - double[both]) / np.maximum(1.0, np.abs(double[both]))
            scores = max(scores, float(relative.max()))
    return bound.widened(
        MEASURED_FACTOR * points,
        MEASURED_FACTOR * scores,
        f"{bound.how}, and {MEASURED_FACTOR:g}x the model's own float32 error on these "
        f"frames ({points:.2g} px)",
    )


def _run(model: torch.nn.Module, frames: np.ndarray) -> list[np.ndarray]:
    with torch.inference_mode():
        outputs: Sequence[torch.Tensor] = model(torch.from_numpy(frames))
    return [
        output.double().numpy() if output.is_floating_point() else output.numpy()
        for output in outputs
    ]


class _Float64(torch.nn.Module):
    """A network computed in float64, taking and giving float32 tensors."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network.double()

    def forward(self, *inputs: torch.Tensor) -> object:
        return _to(self.network(*(_to(value, torch.float64) for value in inputs)), torch.float32)


def _to(value: object, dtype: torch.dtype) -> object:
    """`value`'s floating-point tensors (in tuples, lists and dicts too) cast to `dtype`."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_to(item, dtype) for item in value)
    if isinstance(value, dict):
        return {key: _to(item, dtype) for key, item in value.items()}
    return value


def _float64_networks(model: InferenceModel) -> InferenceModel:
    """A copy of `model` whose networks (modules named `...network`) compute in
    float64; preprocessing and postprocessing stay as they are."""
    copied = copy.deepcopy(model)
    for name, module in list(copied.named_modules()):
        parent, _, attribute = name.rpartition(".")
        if attribute.endswith("network") and not isinstance(module, _Float64):
            setattr(copied.get_submodule(parent), attribute, _Float64(module))
    return copied
