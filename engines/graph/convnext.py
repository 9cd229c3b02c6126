"""sleap-nn's ConvNeXt backbone as lean torch modules that load its checkpoints.

The encoder is torchvision's ConvNeXt feature stack as sleap-nn configures it
(`architectures/convnext.py`, built from torchvision's `CNBlock` and
`LayerNorm2d`), written here without torchvision:

- stem: a `stem_patch_kernel` convolution at `stem_patch_stride` with padding 1,
  then a channels-last LayerNorm (eps 1e-6);
- per stage, `depths[s]` blocks, each `x + layer_scale * f(x)` where `f` is a 7x7
  depthwise convolution (padding 3), LayerNorm over channels (eps 1e-6), a linear
  layer to 4x the channels, exact (erf) GELU and a linear layer back;
- between stages, LayerNorm then a 2x2 stride-2 convolution to the next stage's
  channels.

Stochastic depth is off at inference. The skip features are the stem's output and
each downsampling's output (not the stages'), as sleap-nn takes them; the deepest
feature is the last stage's output. The middle block, decoder and heads are
`engines/graph/encoder_decoder.py`.

Checkpoint keys under `model.backbone.enc.features.`: `0.0` (stem convolution),
`0.1` (stem norm); stage `s` at `2s+1`: `{k}.block.0` (depthwise), `{k}.block.2`
(norm), `{k}.block.3` and `{k}.block.5` (linear layers), `{k}.layer_scale`;
downsampling `s` at `2s+2`: `0` (norm), `1` (convolution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sleap_live.engines.graph.encoder_decoder import EncoderDecoderNetwork, patch_stem, run_stages
from sleap_live.engines.load.backbone_specs import ConvNextSpec
from sleap_live.engines.load.spec import ModelSpec

LAYER_NORM_EPS = 1e-6
DEPTHWISE_KERNEL = 7
EXPANSION = 4


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a (batch, channels, height, width) tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(
            x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps
        )
        return x.permute(0, 3, 1, 2)


class ConvNextBlock(nn.Module):
    """`x + layer_scale * (depthwise conv, LayerNorm, linear, GELU, linear)(x)`."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(
            channels, channels, DEPTHWISE_KERNEL, padding=DEPTHWISE_KERNEL // 2, groups=channels
        )
        self.norm = nn.LayerNorm(channels, eps=LAYER_NORM_EPS)
        self.expand = nn.Linear(channels, EXPANSION * channels)
        self.project = nn.Linear(EXPANSION * channels, channels)
        self.layer_scale = nn.Parameter(torch.ones(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(x).permute(0, 2, 3, 1)
        y = self.project(F.gelu(self.expand(self.norm(y))))
        return x + self.layer_scale * y.permute(0, 3, 1, 2)


class ConvNextEncoder(nn.Module):
    """Stem, stages and downsamplings; returns the last stage and the skips."""

    def __init__(self, backbone: ConvNextSpec) -> None:
        super().__init__()
        channels = backbone.channels
        self.stem = patch_stem(backbone, backbone.stem_patch_kernel)
        self.stem_norm = LayerNorm2d(channels[0], eps=LAYER_NORM_EPS)
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNextBlock(width) for _ in range(depth)))
            for width, depth in zip(channels, backbone.depths, strict=True)
        )
        self.downsamples = nn.ModuleList(
            nn.Sequential(
                LayerNorm2d(channels[s], eps=LAYER_NORM_EPS),
                nn.Conv2d(channels[s], channels[s + 1], kernel_size=2, stride=2),
            )
            for s in range(len(channels) - 1)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return run_stages(self.stem_norm(self.stem(x)), self.stages, self.downsamples, _same)

    def sleap_nn_names(self) -> dict[str, str]:
        """Our module paths mapped to sleap-nn's under `backbone.enc`."""
        names = {"stem": "features.0.0", "stem_norm": "features.0.1"}
        for s, stage in enumerate(self.stages):
            for k in range(len(stage)):
                theirs = f"features.{2 * s + 1}.{k}"
                names[f"stages.{s}.{k}.depthwise"] = f"{theirs}.block.0"
                names[f"stages.{s}.{k}.norm"] = f"{theirs}.block.2"
                names[f"stages.{s}.{k}.expand"] = f"{theirs}.block.3"
                names[f"stages.{s}.{k}.project"] = f"{theirs}.block.5"
                names[f"stages.{s}.{k}"] = theirs  # layer_scale
        for s in range(len(self.downsamples)):
            names[f"downsamples.{s}.0"] = f"features.{2 * s + 2}.0"
            names[f"downsamples.{s}.1"] = f"features.{2 * s + 2}.1"
        return names


def build_convnext_network(spec: ModelSpec) -> EncoderDecoderNetwork:
    """A randomly initialised ConvNeXt network for `spec`, in eval mode."""
    backbone = spec.backbone
    if not isinstance(backbone, ConvNextSpec):
        raise TypeError(f"{spec.config_path}: not a ConvNeXt model")
    encoder = ConvNextEncoder(backbone)
    return EncoderDecoderNetwork(
        spec, encoder, encoder.sleap_nn_names(), {}, backbone.stem_patch_kernel
    ).eval()


def _same(x: torch.Tensor) -> torch.Tensor:
    """ConvNeXt's features are already (batch, channels, height, width) maps."""
    return x
