"""torch-compile's modes, without torch: the CLI offers them, the runner checks them."""

from __future__ import annotations

# `torch.compile` modes; those of `CUDA_GRAPH_MODES` replay inductor's kernels as
# CUDA graphs and need a CUDA device.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
