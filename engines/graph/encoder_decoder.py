"""sleap-nn's ConvNeXt and Swin networks around their encoders: middle block, decoder, heads.

Both backbones (`engines/graph/convnext.py`, `swin.py`) hand this module an encoder
that returns its deepest stage and its skip features. Around it sleap-nn builds
(`architectures/convnext.py`, `swint.py`, `encoder_decoder.py`):

- a 2x2 max pool on the deepest stage (floored; sleap-nn's "same" pool pads an odd
  size on its first call only, and sizes are even whenever the frame is padded to
  the network's stride, as predict pads it);
- a middle block: `convs_per_block - 1` expanding 3x3 (`kernel_size`) convolutions
  to `int(last stage channels * filters_rate)` channels, then one more, with ReLU;
- the UNet's decoder: block `i` upsamples x2 (bilinear, or a transposed
  convolution with ReLU), joins `[skip, upsampled]` with the `i`-th skip feature
  (the downsampling outputs, deepest first, then the stem's), and refines with two
  convolutions at `int(first stage channels * filters_rate ** max(0, 3 - i))`
  channels; blocks past the last skip refine with one convolution and no join;
- the heads of `engines/graph/network.py`, on the decoder output at their stride
  (class vectors on the middle block's output).

Checkpoint keys under `model.backbone.`: `middle_blocks.{m}.blocks.
convnext_middle_{expand|contract}_conv{j}` and `dec.decoder_stack.{i}.blocks.
dec{i}_s{a}_to_s{b}_{trans_conv|refine_conv{j}}`; the encoder's under `enc.` are
the backbone module's business.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.network import (
    DECODER_CONVS,
    ClassVectorsHead,
    ConvBlock,
    ConvHead,
    UpBlock,
    head_sleap_nn_names,
    load_sleap_nn_weights,
    match_channels,
)
from sleap_live.engines.load.backbone_specs import ConvNextSpec, DecoderSpec, SwinTSpec
from sleap_live.engines.load.spec import HeadSpec, ModelSpec

# The encoders' stages: a stem, then three downsamplings (the skip features).
ENCODER_SKIPS = 4


class Encoder(Protocol):
    """An encoder: the deepest stage's output and the skips, deepest first."""

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]: ...


class EncoderDecoderNetwork(nn.Module):
    """A ConvNeXt or Swin encoder with sleap-nn's middle block, decoder and heads.

    Attributes:
        spec: the model this network implements.
        sleap_nn_keys: our state_dict keys mapped to the checkpoint's keys.
        derived_keys: checkpoint keys holding values computed from the config (Swin's
            relative position indices), checked against ours rather than loaded.
    """

    def __init__(
        self,
        spec: ModelSpec,
        encoder: nn.Module,
        encoder_names: dict[str, str],
        derived_keys: dict[str, str],
        resize_to_skip: bool,
    ) -> None:
        super().__init__()
        backbone = spec.backbone
        if not isinstance(backbone, (ConvNextSpec, SwinTSpec)):
            raise TypeError(f"{spec.config_path}: not a ConvNeXt or Swin model")
        self.spec = spec
        self.encoder = encoder
        decoder = backbone.decoder
        channels = backbone.channels
        names = {
            f"encoder.{ours}": f"backbone.enc.{theirs}" for ours, theirs in encoder_names.items()
        }
        self.middle = nn.ModuleList()
        bottom = int(channels[-1] * decoder.filters_rate)
        parts = (("expand", decoder.convs_per_block - 1, channels[-1]), ("contract", 1, bottom))
        for m, (kind, n_convs, in_channels) in enumerate(parts):
            self.middle.append(ConvBlock(in_channels, bottom, n_convs, decoder.kernel_size, False))
            for j in range(n_convs):
                names[f"middle.{m}.convs.{j}"] = (
                    f"backbone.middle_blocks.{m}.blocks.convnext_middle_{kind}_conv{j}"
                )
        self.decoder = nn.ModuleList()
        skips = list(reversed(channels))
        feature_channels = [bottom]
        strides_to_features = {}
        stride = decoder.network_stride
        in_channels = bottom
        for i in range(decoder.up_blocks):
            out = _decoder_channels(decoder, channels[0], i)
            has_skip = i < ENCODER_SKIPS
            block = UpBlock(
                in_channels,
                out,
                skips[i] if has_skip else 0,
                DECODER_CONVS if has_skip else 1,
                decoder.kernel_size,
                transposed=not decoder.up_interpolate,
                resize_to_skip=resize_to_skip,
            )
            self.decoder.append(block)
            prefix = f"backbone.dec.decoder_stack.{i}.blocks.dec{i}_s{stride}_to_s{stride // 2}"
            if block.upsample is not None:
                names[f"decoder.{i}.upsample"] = f"{prefix}_trans_conv"
            for j in range(len(block.refine)):
                names[f"decoder.{i}.refine.{j}"] = f"{prefix}_refine_conv{j}"
            in_channels = out
            stride //= 2
            feature_channels.append(out)
            strides_to_features[stride] = i + 1
        self.heads = nn.ModuleDict()
        sources = []
        for h, head in enumerate(spec.heads):
            source = (
                0
                if head.name == "ClassVectorsHead"
                else strides_to_features.get(head.output_stride)
            )
            if source is None:
                raise ModelConfigError(
                    f"{spec.config_path}: {head.name} output_stride {head.output_stride} is "
                    f"not a decoder stride {sorted(strides_to_features)}"
                )
            sources.append((head.name, source))
            self.heads[head.name] = _make_head(spec, head, feature_channels[source])
            names.update(head_sleap_nn_names(head, h))
        self.head_sources = tuple(sources)
        self.derived_keys = {
            f"encoder.{ours}": f"model.backbone.enc.{theirs}"
            for ours, theirs in derived_keys.items()
        }
        self.sleap_nn_keys: dict[str, str] = {
            key: f"model.{names[key.rpartition('.')[0]]}.{key.rpartition('.')[2]}"
            for key in self.state_dict()
            if key not in self.derived_keys
        }

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = match_channels(x, self.spec.backbone.in_channels)
        x, skips = self.encoder(x)
        x = F.max_pool2d(x, kernel_size=2, stride=2)
        for block in self.middle:
            x = block(x)
        features = [x]
        for i, block in enumerate(self.decoder):
            x = block(x, skips[i] if i < len(skips) else None)
            features.append(x)
        return {name: self.heads[name](features[source]) for name, source in self.head_sources}

    def load_sleap_nn_state_dict(self, state_dict: dict[str, torch.Tensor], source: Path) -> None:
        """Load weights stored under sleap-nn's checkpoint keys.

        Raises:
            CheckpointError: a weight is missing, unexpected, or of the wrong shape,
                or a derived value differs from ours, naming `source` and the key.
        """
        load_sleap_nn_weights(
            self, self.sleap_nn_keys, self.derived_keys, state_dict, source, self.spec.config_path
        )


def _decoder_channels(decoder: DecoderSpec, base: int, block: int) -> int:
    """Channels of decoder block `block`, computed as sleap-nn does."""
    return int(base * decoder.filters_rate ** max(0, ENCODER_SKIPS - 1 - block))


def _make_head(spec: ModelSpec, head: HeadSpec, in_channels: int) -> nn.Module:
    if head.name != "ClassVectorsHead":
        return ConvHead(in_channels, head.n_channels, sigmoid=head.activation == "sigmoid")
    if head.num_fc_layers == 0 and head.global_pool and in_channels != head.num_fc_units:
        raise ModelConfigError(
            f"{spec.config_path}: ClassVectorsHead with num_fc_layers 0 needs num_fc_units "
            f"{in_channels} (sleap-nn cannot run this config either)"
        )
    return ClassVectorsHead(
        in_channels, head.num_fc_layers, head.num_fc_units, head.n_channels, head.global_pool
    )
