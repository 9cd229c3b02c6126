"""sleap-nn's UNet as a lean torch module that loads its checkpoints.

`build_network(spec)` rebuilds the network a `ModelSpec` describes (`load_model_network`
in `sleap_live.engines.graph.networks` also loads its weights). `Network.forward` takes
float32 (batch, channels, height, width) images scaled to [0, 1] and padded exactly as
sleap-nn feeds its model, and returns a dict of head outputs keyed by sleap-nn head
class name ("CentroidConfmapsHead", ...). Height and width must be multiples of
`spec.backbone.input_stride` (sleap-nn pads to `max_stride`, which is the same
thing unless the UNet has a stem).

The computation is sleap-nn's, step for step (the encoder and stem are this
module's; the middle block, decoder, heads and channel matching, which ConvNeXt and
Swin share, are `engines/graph/decoder_heads.py`'s):

- Encoder blocks: a 2x2 max pool (except the very first block), then
  `convs_per_block` convolutions with ReLU; the encoder ends with one more pool.
  Channels grow as `int(filters * filters_rate ** level)`.
- An optional stem in front of the encoder: the same blocks with 7x7 kernels,
  ending with a pool too.
- Middle block: `convs_per_block - 1` expanding convolutions then one more, all at
  `int(filters * filters_rate ** levels)` channels.
- Decoder blocks at the encoder's channels, level for level, each joining the
  encoder output of its stride and refining with two convolutions (always two:
  sleap-nn does not apply `convs_per_block` to its decoder); then the heads.

sleap-nn's "same" max pooling zero-pads an odd size only on a layer's first call
and then switches its padding off, so from the second batch of a `predict` run on
it floors odd sizes. Ours always floors: the steady state, which is what sleap-nn
gives for every frame but its first batch. Odd sizes reach a pool only in stem
models (sleap-nn pads inputs to `max_stride`, but a stem doubles the real stride);
there its decoder resizes an upsampled map to the size of the skip it joins, and so
do our stem models' decoder blocks (a no-op when sizes agree). Everything else is
free of data-dependent branches, so the module traces and exports to ONNX with
dynamic height and width.

Checkpoint keys map one to one onto ours; `Network.sleap_nn_keys` holds the map:

    sleap-nn key, after the `model.` prefix        ours
    backbone.stem.stem_stack.{b}.blocks.stem{b}_conv{j}
                                                   stem.{b}.convs.{j}
    backbone.encoders.0.encoder_stack.{b}.blocks.stack0_enc{b}_conv{j}
                                                   encoder.{b}.convs.{j}
    backbone.middle_blocks.{m}.blocks.stack0_enc{n}_middle_{kind}_conv{j}
                                                   middle.{m}.convs.{j}
    backbone.decoders.0.decoder_stack.{i}.blocks.stack0_dec{i}_s{a}_to_s{b}_trans_conv
                                                   decoder.{i}.upsample
    backbone.decoders.0.decoder_stack.{i}.blocks.stack0_dec{i}_s{a}_to_s{b}_refine_conv{j}
                                                   decoder.{i}.refine.{j}
    head_layers.{h}.{HeadName}.0                   heads.{HeadName}.conv
    head_layers.{h}.pre_classification{i}_fc       heads.ClassVectorsHead.hidden.{i}
    head_layers.{h}.ClassVectorsHead               heads.ClassVectorsHead.out

each followed by `.weight` or `.bias`. `kind` is `expand` (m = 0) or `contract`
(m = 1), `n` the number of encoder blocks plus 1 + m, `a` and `b` the strides
before and after the block, and `h` the head's position in `spec.heads`.
"""

from __future__ import annotations

import torch
from torch import nn

from sleap_live.engines.graph.decoder_heads import (
    DECODER_CONVS,
    CheckpointLayout,
    ConvBlock,
    DecoderHeadsNetwork,
    DecoderLevel,
    max_pool,
)
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, UNetSpec

STEM_KERNEL_SIZE = 7


class Network(DecoderHeadsNetwork):
    """sleap-nn's UNet backbone and heads for one `ModelSpec`.

    Attributes:
        spec: the model this network implements.
        sleap_nn_keys: our state_dict keys mapped to the checkpoint's keys.
        derived_keys: checkpoint entries computed from the config (none for a UNet).
    """

    def __init__(self, spec: ModelSpec) -> None:
        unet = spec.backbone
        if not isinstance(unet, UNetSpec):
            raise TypeError(f"{spec.config_path}: not a UNet model")
        super().__init__(
            spec,
            CheckpointLayout(
                middle_layers=(
                    f"stack0_enc{unet.down_blocks + 1}_middle_",
                    f"stack0_enc{unet.down_blocks + 2}_middle_",
                ),
                decoder_stack="decoders.0",
                decoder_layer="stack0_dec",
            ),
        )
        self.unet = unet
        if unet.stacks != 1:
            raise self._config_error(
                f"unet.stacks is {unet.stacks}; sleap-nn's UNet runs only 1 stack"
            )
        if unet.middle_block and unet.convs_per_block < 2:
            raise self._config_error(
                "unet.middle_block with convs_per_block 1 cannot be built (sleap-nn fails too)"
            )
        # Our module paths mapped to sleap-nn's, filled in as modules are made.
        names: dict[str, str] = {}
        skip_channels = self._build_encoder(unet, names)
        bottom = _level(unet, unet.down_blocks + unet.stem_blocks)
        deepest = _level(unet, unet.down_blocks + unet.stem_blocks - 1)
        if unet.middle_block:
            self._build_middle(deepest, bottom, unet.convs_per_block, unet.kernel_size, names)
        else:
            self.middle = nn.ModuleList()
            # sleap-nn sizes the decoder (and a head on an empty decoder) for the
            # middle block's channels whether or not there is one.
            if deepest != bottom:
                raise self._config_error(
                    f"unet.middle_block false gives the decoder {deepest} channels where "
                    f"sleap-nn's UNet expects {bottom} (it cannot run this config either)"
                )
        strides_to_features = self._build_decoder(
            bottom,
            unet.input_stride,
            self._decoder_levels(unet, skip_channels),
            unet.kernel_size,
            transposed=not unet.up_interpolate,
            resize_to_skip=unet.stem_blocks > 0,
            names=names,
        )
        self._build_heads(bottom, strides_to_features, names)
        self._map_keys(names, {})

    def _build_encoder(self, unet: UNetSpec, names: dict[str, str]) -> list[int]:
        """Make the stem and encoder blocks; returns the skip channels, deepest first."""
        self.stem = nn.ModuleList()
        channels = unet.in_channels
        for b in range(unet.stem_blocks):
            block = ConvBlock(
                channels, _level(unet, b), unet.convs_per_block, STEM_KERNEL_SIZE, pool=b > 0
            )
            self.stem.append(block)
            channels = _level(unet, b)
            for j in range(unet.convs_per_block):
                names[f"stem.{b}.convs.{j}"] = (
                    f"backbone.stem.stem_stack.{b}.blocks.stem{b}_conv{j}"
                )
        skip_channels = [channels] if unet.stem_blocks else []
        self.encoder = nn.ModuleList()
        for b in range(unet.down_blocks):
            n = b + unet.stem_blocks
            block = ConvBlock(
                channels, _level(unet, n), unet.convs_per_block, unet.kernel_size, pool=n > 0
            )
            self.encoder.append(block)
            channels = _level(unet, n)
            skip_channels.insert(0, channels)
            for j in range(unet.convs_per_block):
                names[f"encoder.{b}.convs.{j}"] = (
                    f"backbone.encoders.0.encoder_stack.{b}.blocks.stack0_enc{b}_conv{j}"
                )
        return skip_channels

    def _decoder_levels(self, unet: UNetSpec, skip_channels: list[int]) -> list[DecoderLevel]:
        """The decoder blocks as sleap-nn sizes them, refusing what it cannot run."""
        levels = []
        for i in range(unet.up_blocks):
            out = _level(unet, max(0, unet.down_blocks + unet.stem_blocks - 1 - i))
            concat = not (unet.stem_blocks and i >= unet.down_blocks + unet.stem_blocks)
            has_skip = i < len(skip_channels)
            if concat != has_skip:
                raise self._config_error(
                    f"unet.stem_stride {unet.stem_stride} with output_stride "
                    f"{unet.output_stride} leaves decoder block {i} without its skip "
                    "connection (sleap-nn cannot run this config either)"
                )
            skip = skip_channels[i] if has_skip else 0
            if has_skip and skip != out:
                raise self._config_error(
                    f"decoder block {i} joins a {skip}-channel skip where {out} is built"
                )
            levels.append(DecoderLevel(out, skip, DECODER_CONVS if concat else 1))
        return levels

    def _make_head(self, head: HeadSpec, in_channels: int) -> nn.Module:
        if head.name == "ClassVectorsHead" and not self.unet.middle_block:
            raise self._config_error(
                "ClassVectorsHead needs unet.middle_block (sleap-nn fails without one)"
            )
        return super()._make_head(head, in_channels)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        skips = []
        if len(self.stem):
            for block in self.stem:
                x = block(x)
            x = max_pool(x)
            skips.append(x)
        for block in self.encoder:
            x = block(x)
            skips.insert(0, x)
        return x, skips


def _level(unet: UNetSpec, n: int) -> int:
    """Channels of the UNet's level `n`, computed as sleap-nn does."""
    return int(unet.filters * unet.filters_rate**n)


def build_network(spec: ModelSpec) -> Network:
    """A randomly initialised `Network` for `spec`, in eval mode.

    Raises:
        ModelConfigError: the UNet options form a network sleap-nn cannot run.
    """
    return Network(spec).eval()
