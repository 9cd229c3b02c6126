"""The contract between the torch inference models, the exporters and the runners.

An inference model is one `torch.nn.Module` that takes uint8 frames exactly as
decoders hand them, (batch, height, width, channels) with any frame size and 1 or 3
channels, and does all preprocessing, the network and peak finding inside, so the
same graph exports to ONNX and runs anywhere. Its outputs are named tensors whose
layout depends on the model type (see `OUTPUT_NAMES`); turning them into
`FramePoses` (PAF grouping, identity assignment) happens on the host in
`sleap_live.engines.postprocess`.
"""

from __future__ import annotations

import torch

from sleap_live.engines.types import ModelInfo

# Instance-list outputs: M instances over the whole batch, M data-dependent.
#   instance_frame (M,) int64 batch index; points (M, nodes, 2) float32 frame pixels,
#   NaN where missing; point_scores (M, nodes) float32; instance_scores (M,) float32.
INSTANCE_OUTPUTS = ("instance_frame", "points", "point_scores", "instance_scores")


class InferenceModel(torch.nn.Module):
    """Base class of every sleap-live inference model.

    Subclasses set `info` and `output_names` and implement `forward`, which maps a
    uint8 (B, H, W, C) tensor to a tuple of tensors in `output_names` order.
    """

    info: ModelInfo
    output_names: tuple[str, ...]

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError
