"""The re-identification stage: a vector for each predicted instance.

Reproduces sleap-nn 0.3.5's fused route (`sleap-nn predict -m centroid -m
centered_instance -m embedding`), which embeds each predicted pose after the pose
models ran (`inference/embedding.py`, its `EmbeddingDataset`):

1. Channels: the frame is converted to grey (torchvision's luma, truncated to
   uint8) unless the embedding model was trained with `ensure_rgb`: sleap-nn
   embeds grey crops by default (`_resolve_embedding_channels`), whatever the
   backbone's `in_channels` (a 3-channel network repeats the grey channel).
2. Crop centre: the mean of the pose's found nodes in float32, or the embedding
   config's anchor node where found (`generate_centroids`). An instance without
   one gets no vector (NaN here).
3. Crop: sleap-nn cuts a box `crop_size - 1` pixels wide, from `c - s/2 + 0.5` to
   `c + s/2 - 0.5`, out of the whole uint8 frame and stretches it to `crop_size`
   with Skia (bilinear sampling, anti-aliased edges on a black canvas, uint8
   output). Each output pixel is the bilinear sample at its centre, indices
   clamped to the frame, times the fraction of its source span inside the frame,
   rounded half up (`skia_crops`); measured equal to Skia's on interior crops,
   within 2 grey levels on about 1 % of the pixels of crops over the frame's edge.
4. Per crop and channel, standardisation on the 0-255 scale: `(x - mean) / max(std
   + 1e-5, 1)` (`EmbeddingLightningModule._standardize`).
5. The network's bottleneck, pooled, fully connected layers, L2 normalisation
   (`decoder_heads.EmbeddingHead`).
"""

from __future__ import annotations

import torch
from torch import nn

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.preprocess import ensure_channels
from sleap_live.engines.graph.resize import size_of, static_size
from sleap_live.engines.load.spec import ModelSpec

EMBEDDING_HEAD = "EmbeddingHead"
# sleap-nn's standardisation (`_standardize`, `data/normalization.py`).
STD_EPS = 1e-5
STD_FLOOR = 1.0


class EmbeddingStage(nn.Module):
    """Instance poses in frame pixels to unit vectors, as sleap-nn embeds them.

    Args:
        network: the embedding model's network (an `EmbeddingHead` output).
        spec: the embedding model.

    Raises:
        ModelConfigError: the crop size is not a multiple of the backbone's input
            stride (sleap-nn's network would see a crop it cannot halve evenly).
    """

    def __init__(self, network: nn.Module, spec: ModelSpec) -> None:
        super().__init__()
        crop_size = spec.preprocess.crop_size
        if crop_size is None or crop_size % spec.backbone.input_stride:
            raise ModelConfigError(
                f"{spec.config_path}: crop_size {crop_size} is not a multiple of the "
                f"backbone's stride {spec.backbone.input_stride}"
            )
        self.network = network
        self.crop_size = crop_size
        self.rgb = spec.preprocess.ensure_rgb
        self.anchor = spec.anchor_part
        self.dim = spec.head(EMBEDDING_HEAD).embedding_dim

    def forward(
        self,
        frames: torch.Tensor,
        instance_frame: torch.Tensor,
        points: torch.Tensor,
        scale: torch.Tensor,
    ) -> torch.Tensor:
        """(M, dim) float32 vectors of the instances, NaN rows for those without a centre.

        Args:
            frames: (B, H, W, C) channels-last frames the crops are cut from, size-matched.
            instance_frame: (M,) index in the batch of each instance's frame.
            points: (M, nodes, 2) xy in frame pixels, NaN for nodes not found.
            scale: the size matching's factor from frame pixels to `frames`' pixels.
        """
        channels = ensure_channels(frames.permute(0, 3, 1, 2), self.rgb, not self.rgb)
        frames = channels.permute(0, 2, 3, 1)
        centres = pose_centres(points, self.anchor) * scale
        found = torch.isfinite(centres).all(dim=-1)
        centres = torch.where(found[:, None], centres, 0.0)
        crops = skia_crops(frames, instance_frame, centres, self.crop_size)
        vectors = self.network(standardize(crops.permute(0, 3, 1, 2)))[EMBEDDING_HEAD]
        return torch.where(found[:, None], vectors, float("nan"))


def pose_centres(points: torch.Tensor, anchor: int | None) -> torch.Tensor:
    """(M, 2) crop centres: the anchor node where found, else the mean of each
    coordinate's found values (NaN for an instance with none), as
    `generate_centroids` computes them."""
    found = ~torch.isnan(points)
    counts = found.sum(dim=-2).clamp(min=1).to(points.dtype)
    means = torch.where(found, points, 0.0).sum(dim=-2) / counts
    means = torch.where(found.any(dim=-2), means, float("nan"))
    if anchor is None:
        return means
    anchored = points[:, anchor]
    return torch.where(torch.isnan(anchored).any(dim=-1, keepdim=True), means, anchored)


def skia_crops(
    frames: torch.Tensor, instance_frame: torch.Tensor, centres: torch.Tensor, size: int
) -> torch.Tensor:
    """(M, size, size, C) float32 crops on the 0-255 scale, as Skia stretches sleap-nn's
    `size - 1` pixel box around each centre to `size` pixels (module docstring).

    The frame size stays dynamic in a traced graph (`size_of`).
    """
    height, width = size_of(frames, 1), size_of(frames, 2)
    step = (size - 1) / size
    offsets = torch.arange(size, device=frames.device, dtype=torch.float32)
    origin = centres - size / 2 + 0.5  # (M, 2): the box's top-left corner
    (x0, x1, fx), x_cover = _axis(origin[:, 0], offsets, step, width)
    (y0, y1, fy), y_cover = _axis(origin[:, 1], offsets, step, height)
    flat = frames.reshape(-1, static_size(frames, 3)).to(torch.float32)
    base = (instance_frame * (height * width))[:, None, None]
    fx, fy = fx[:, None, :, None], fy[:, :, None, None]

    def sample(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return flat[base + rows[:, :, None] * width + cols[:, None, :]]

    top = sample(y0, x0) * (1 - fx) + sample(y0, x1) * fx
    bottom = sample(y1, x0) * (1 - fx) + sample(y1, x1) * fx
    values = top * (1 - fy) + bottom * fy
    cover = (y_cover[:, :, None] * x_cover[:, None, :])[..., None]
    return torch.floor(values * cover + 0.5).clamp(0.0, 255.0)


def _axis(
    origin: torch.Tensor, offsets: torch.Tensor, step: float, extent: torch.Tensor
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """One axis of `skia_crops`: the clamped neighbour indices and weight of each
    output pixel's sample, and the fraction of its source span inside the frame."""
    start = origin[:, None] + offsets * step  # (M, size)
    sample = start + 0.5 * step - 0.5
    low = torch.floor(sample)
    weight = sample - low
    low = low.to(torch.int64)
    last = extent - 1
    first = torch.minimum(low.clamp(min=0), last)
    second = torch.minimum((low + 1).clamp(min=0), last)
    inside = torch.minimum(start + step, extent.to(torch.float32)) - start.clamp(min=0.0)
    cover = inside.clamp(min=0.0) / step
    return (first, second, weight), cover.clamp(max=1.0)


def standardize(crops: torch.Tensor) -> torch.Tensor:
    """(M, C, h, w) crops standardised per crop and channel, as sleap-nn does."""
    count = static_size(crops, 2) * static_size(crops, 3)
    mean = crops.sum(dim=(2, 3), keepdim=True) / count
    std = (((crops - mean) ** 2).sum(dim=(2, 3), keepdim=True) / count).sqrt() + STD_EPS
    return (crops - mean) / std.clamp(min=STD_FLOOR)
