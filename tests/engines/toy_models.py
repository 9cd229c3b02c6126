"""Small inference models with the real models' export-relevant traits, for tests.

`ToyInstanceModel` takes uint8 (B, H, W, C) frames of any size with 1 or 3
channels, converts channels, resizes by a scale factor, pads to its stride, runs a
few convolutions, finds local peaks with a threshold and `nonzero` (so the number
of instances depends on the data) and reports instance lists (`INSTANCE_OUTPUTS`).
The variants break one export rule each; `eager_outputs` runs any of them.

Test modules load this file through `tests/engines/conftest.py` fixtures.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.types import ModelInfo, Skeleton

NODE_NAMES = ("head", "body", "tail")
EDGES = ((0, 1), (1, 2))


class ToyInstanceModel(InferenceModel):
    """Blob detector with learned per-node offsets and scores; see the module docstring."""

    def __init__(
        self,
        input_channels: int = 3,
        scale: float = 0.5,
        stride: int = 4,
        threshold: float = 0.45,
        model_type: str = "topdown",
        seed: int = 0,
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        n_nodes = len(NODE_NAMES)
        self.scale = scale
        self.stride = stride
        self.threshold = threshold
        self.input_channels = input_channels
        self.features = torch.nn.Conv2d(input_channels, 8, 3, padding=1)
        self.heads = torch.nn.Conv2d(8, 3 * n_nodes, 1)
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
        offsets = torch.arange(n_nodes, dtype=torch.float32) * 6 - 6
        self.register_buffer("node_offsets", torch.stack([offsets, offsets * 0.5], -1))
        self.register_buffer("blur", _gaussian_kernel(7, 2.0))
        self.info = ModelInfo(
            model_type=model_type,
            skeleton=Skeleton(NODE_NAMES, EDGES, name="toy"),
            input_channels=input_channels,
            max_instances=20,
            peak_threshold=threshold,
        )

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.stride / self.scale,)

    def to_model_channels(self, x: torch.Tensor) -> torch.Tensor:
        # Works for either input channel count without branching on the shape.
        if self.input_channels == 3:
            return x.expand(-1, 3, -1, -1)
        return x.mean(dim=1, keepdim=True)

    def resize(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=self.scale, mode="bilinear", align_corners=False)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = frames.permute(0, 3, 1, 2).float() / 255
        x = self.to_model_channels(x)
        x = self.resize(x)
        height, width = x.shape[-2], x.shape[-1]
        x = F.pad(x, (0, (-width) % self.stride, 0, (-height) % self.stride))

        brightness = F.conv2d(x.mean(dim=1, keepdim=True), self.blur, padding=3)
        is_peak = (brightness == F.max_pool2d(brightness, 3, 1, 1)) & (brightness > self.threshold)
        peaks = torch.nonzero(is_peak[:, 0])
        frame, row, col = peaks[:, 0], peaks[:, 1], peaks[:, 2]

        heads = self.heads(torch.relu(self.features(x)))[frame, :, row, col]
        n_nodes = self.node_offsets.shape[0]
        anchor = torch.stack([col, row], -1).float() / self.scale
        points = (
            anchor[:, None, :]
            + self.node_offsets
            + torch.tanh(heads[:, : 2 * n_nodes].reshape(-1, n_nodes, 2))
        )
        point_scores = torch.sigmoid(heads[:, 2 * n_nodes :])
        found = point_scores > 0.3
        points = torch.where(found[..., None], points, torch.full_like(points, float("nan")))
        point_scores = torch.where(found, point_scores, torch.full_like(point_scores, float("nan")))
        instance_scores = brightness[frame, 0, row, col]
        return frame, points, point_scores, instance_scores


class FrozenSizeModel(ToyInstanceModel):
    """Scales points by the frame width read as a Python number: tracing freezes it."""

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        frame, points, point_scores, instance_scores = super().forward(frames)
        return frame, points * (float(frames.shape[2]) / 100), point_scores, instance_scores


class BranchingChannelsModel(ToyInstanceModel):
    """Converts channels with a Python branch on the shape, which tracing freezes."""

    def to_model_channels(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != self.input_channels:
            return x.mean(dim=1, keepdim=True)
        return x


class AntialiasedModel(ToyInstanceModel):
    """Downscales with torch's antialiased bilinear resize (no ONNX equivalent)."""

    def resize(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(
            x, scale_factor=self.scale, mode="bilinear", align_corners=False, antialias=True
        )


def eager_outputs(model: torch.nn.Module, frames: np.ndarray) -> list[np.ndarray]:
    """`model`'s outputs on uint8 (B, H, W, C) numpy frames, run eagerly, as numpy arrays."""
    with torch.inference_mode():
        return [output.numpy() for output in model(torch.from_numpy(frames))]


def _gaussian_kernel(size: int, sigma: float) -> torch.Tensor:
    offsets = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    profile = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = profile[:, None] * profile[None, :]
    return (kernel / kernel.sum())[None, None]
