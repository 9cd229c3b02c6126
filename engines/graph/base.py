"""The contract between the torch inference models, the exporters and the runners.

An inference model is one `torch.nn.Module` that takes uint8 frames exactly as
decoders hand them, (batch, height, width, channels) with any frame size and 1 or 3
channels, and does all preprocessing, the network and peak finding inside, so the
same graph exports to ONNX and runs anywhere. Its outputs are named tensors whose
layout depends on the model type (see `OUTPUT_NAMES`); turning them into
`FramePoses` (PAF grouping, identity assignment) happens on the host in
`sleap_live.engines.host.postprocess`.
"""

from __future__ import annotations

import torch

from sleap_live.engines.types import ModelInfo


class InferenceModel(torch.nn.Module):
    """Base class of every sleap-live inference model.

    Subclasses set `info` and `output_names` and implement `forward`, which maps a
    uint8 (B, H, W, C) tensor to a tuple of tensors in `output_names` order.
    """

    info: ModelInfo
    output_names: tuple[str, ...]

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError
