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
- the heads, on the decoder output at their stride (class vectors on the middle
  block's output).

The middle block, decoder and heads are the UNet's (`engines/graph/decoder_heads.py`);
this module sizes them for ConvNeXt and Swin, and holds what the two encoders share:
the patch stem, and running the stages with a downsampling between each two.

Checkpoint keys under `model.backbone.`: `middle_blocks.{m}.blocks.
convnext_middle_{expand|contract}_conv{j}` and `dec.decoder_stack.{i}.blocks.
dec{i}_s{a}_to_s{b}_{trans_conv|refine_conv{j}}`; the encoder's under `enc.` are
the backbone module's business.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sleap_live.engines.graph.decoder_heads import (
    DECODER_CONVS,
    CheckpointLayout,
    DecoderHeadsNetwork,
    DecoderLevel,
)
from sleap_live.engines.load.backbone_specs import DecoderSpec, EncoderBackboneSpec
from sleap_live.engines.load.spec import ModelSpec

# The encoders' stages: a stem, then three downsamplings (the skip features).
ENCODER_SKIPS = 4
# The stem convolution's padding, fixed in sleap-nn for both encoders.
STEM_PADDING = 1
# Where sleap-nn's ConvNeXt and Swin networks keep their middle block and decoder.
LAYOUT = CheckpointLayout(
    middle_layers=("convnext_middle_", "convnext_middle_"),
    decoder_stack="dec",
    decoder_layer="dec",
)


class EncoderDecoderNetwork(DecoderHeadsNetwork):
    """A ConvNeXt or Swin encoder with sleap-nn's middle block, decoder and heads.

    Built from the encoder module, its module paths mapped to sleap-nn's under
    `backbone.enc` (and those of its derived buffers), and the side of its stem's
    patch convolution (which decides whether the decoder must resize to its skips).

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
        stem_kernel: int,
    ) -> None:
        backbone = spec.backbone
        if not isinstance(backbone, EncoderBackboneSpec):
            raise TypeError(f"{spec.config_path}: not a ConvNeXt or Swin model")
        super().__init__(spec, LAYOUT)
        self.encoder = encoder
        decoder = backbone.decoder
        channels = backbone.channels
        names = {
            f"encoder.{ours}": f"backbone.enc.{theirs}" for ours, theirs in encoder_names.items()
        }
        bottom = int(channels[-1] * decoder.filters_rate)
        self._build_middle(
            channels[-1], bottom, decoder.convs_per_block, decoder.kernel_size, names
        )
        skips = list(reversed(channels))
        levels = [
            DecoderLevel(
                _decoder_channels(decoder, channels[0], i),
                skips[i] if i < ENCODER_SKIPS else 0,
                DECODER_CONVS if i < ENCODER_SKIPS else 1,
            )
            for i in range(decoder.up_blocks)
        ]
        strides_to_features = self._build_decoder(
            bottom,
            decoder.network_stride,
            levels,
            decoder.kernel_size,
            transposed=not decoder.up_interpolate,
            resize_to_skip=not _stem_is_exact(backbone, stem_kernel),
            names=names,
        )
        self._build_heads(bottom, strides_to_features, names)
        self._map_keys(
            names,
            {
                f"encoder.{ours}": f"model.backbone.enc.{theirs}"
                for ours, theirs in derived_keys.items()
            },
        )

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        deepest, skips = self.encoder(x)
        return deepest, skips


def patch_stem(backbone: EncoderBackboneSpec, kernel: int) -> nn.Conv2d:
    """The encoder's stem: a `kernel` convolution at the stem's stride to the first stage."""
    return nn.Conv2d(
        backbone.in_channels,
        backbone.channels[0],
        kernel,
        stride=backbone.decoder.stem_patch_stride,
        padding=STEM_PADDING,
    )


def run_stages(
    x: torch.Tensor,
    stages: nn.ModuleList,
    downsamples: nn.ModuleList,
    as_map: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Run the stages from the stem's output `x`, downsampling between each two.

    Returns:
        The last stage's output and the skip features (`as_map` of the stem's and
        each downsampling's outputs), deepest first.
    """
    skips = [as_map(x)]
    for s, stage in enumerate(stages):
        x = stage(x)
        if s < len(downsamples):
            x = downsamples[s](x)
            skips.insert(0, as_map(x))
    return x, skips


def _stem_is_exact(backbone: EncoderBackboneSpec, stem_kernel: int) -> bool:
    """Whether every skip matches its upsampled map, so no resize is needed.

    The stem (padding 1) halves sizes exactly when 2 < kernel <= 2 + stride; then
    frames padded to the network's stride keep every later size even.
    """
    exact = 2 < stem_kernel <= 2 + backbone.decoder.stem_patch_stride
    return exact and backbone.max_stride % backbone.input_stride == 0


def _decoder_channels(decoder: DecoderSpec, base: int, block: int) -> int:
    """Channels of decoder block `block`, computed as sleap-nn does."""
    return int(base * decoder.filters_rate ** max(0, ENCODER_SKIPS - 1 - block))
