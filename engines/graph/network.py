"""sleap-nn's UNet and output heads as lean torch modules that load its checkpoints.

`build_network(spec)` rebuilds the network a `ModelSpec` describes (`load_model_network`
in `sleap_live.engines.graph.networks` also loads its weights). `Network.forward` takes
float32 (batch, channels, height, width) images scaled to [0, 1] and padded exactly as
sleap-nn feeds its model, and returns a dict of head outputs keyed by sleap-nn head
class name ("CentroidConfmapsHead", ...). Height and width must be multiples of
`spec.backbone.input_stride` (sleap-nn pads to `max_stride`, which is the same
thing unless the UNet has a stem).

The computation is sleap-nn's, step for step:

- Encoder blocks: a 2x2 max pool (except the very first block), then
  `convs_per_block` convolutions with ReLU; the encoder ends with one more pool.
  Channels grow as `int(filters * filters_rate ** level)`.
- An optional stem in front of the encoder: the same blocks with 7x7 kernels,
  ending with a pool too.
- Middle block: `convs_per_block - 1` expanding convolutions then one more, all at
  `int(filters * filters_rate ** levels)` channels.
- Decoder blocks: x2 upsampling (bilinear, `align_corners=False`, or a 3x3 stride-2
  transposed convolution with ReLU), concatenation `[skip, upsampled]` with the
  encoder output of the same stride, then two convolutions with ReLU (always two:
  sleap-nn does not apply `convs_per_block` to its decoder).
- Heads: a 1x1 convolution on the decoder output at the head's stride (the
  bottleneck when the decoder is empty), ending in a sigmoid for class maps and for
  centroid heads with `use_sigmoid_activation`. The class-vector head max-pools the
  bottleneck globally, runs `num_fc_layers` fully connected layers with ReLU and
  a final one, then a softmax.
- A 1-channel input to a 3-channel model is repeated, a 3-channel input to a
  1-channel model converted to gray (0.2989 R + 0.587 G + 0.114 B), as sleap-nn's
  `Model.forward` does.

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

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from sleap_live.engines.errors import CheckpointError, ModelConfigError
from sleap_live.engines.host.frames import GRAY_WEIGHTS
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, UNetSpec

STEM_KERNEL_SIZE = 7
# sleap-nn's UNet does not pass convs_per_block on to its decoder, whose blocks
# therefore always refine with this many convolutions.
DECODER_CONVS = 2
_TRANSPOSED_KERNEL_SIZE = 3


def _max_pool(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, kernel_size=2, stride=2, ceil_mode=False)


class ConvBlock(nn.Module):
    """Optional 2x2 max pool, then 3x3 (or `kernel_size`) convolutions with ReLU."""

    def __init__(
        self, in_channels: int, channels: int, n_convs: int, kernel_size: int, pool: bool
    ) -> None:
        super().__init__()
        self.pool = pool
        self.convs = nn.ModuleList(
            nn.Conv2d(in_channels if j == 0 else channels, channels, kernel_size, padding="same")
            for j in range(n_convs)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pool:
            x = _max_pool(x)
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x


class UpBlock(nn.Module):
    """x2 upsampling, concatenation with a skip connection, refining convolutions."""

    def __init__(
        self,
        in_channels: int,
        channels: int,
        skip_channels: int,
        n_convs: int,
        kernel_size: int,
        transposed: bool,
        resize_to_skip: bool,
    ) -> None:
        super().__init__()
        self.resize_to_skip = resize_to_skip
        self.upsample = (
            nn.ConvTranspose2d(
                in_channels,
                channels,
                _TRANSPOSED_KERNEL_SIZE,
                stride=2,
                padding=1,
                output_padding=1,
            )
            if transposed
            else None
        )
        upsampled = channels if transposed else in_channels
        self.refine = nn.ModuleList(
            nn.Conv2d(
                upsampled + skip_channels if j == 0 else channels,
                channels,
                kernel_size,
                padding="same",
            )
            for j in range(n_convs)
        )

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        if self.upsample is None:
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        else:
            x = torch.relu(self.upsample(x))
        if skip is not None:
            if self.resize_to_skip:
                x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            x = torch.cat((skip, x), dim=1)
        for conv in self.refine:
            x = torch.relu(conv(x))
        return x


class ConvHead(nn.Module):
    """1x1 convolution to the head's channels, optionally ending in a sigmoid."""

    def __init__(self, in_channels: int, channels: int, sigmoid: bool) -> None:
        super().__init__()
        self.sigmoid = sigmoid
        self.conv = nn.Conv2d(in_channels, channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if not self.sigmoid:
            return x
        # Spelled out rather than torch.sigmoid: ONNX Runtime's Sigmoid kernel is an
        # approximation that flushes to 0 below about -17.5, which turns saturated
        # class maps into ties and changes identity assignment against torch.
        return 1.0 / (1.0 + torch.exp(-x))


class ClassVectorsHead(nn.Module):
    """Global max pool, fully connected layers with ReLU, linear layer, softmax."""

    def __init__(
        self, in_features: int, n_hidden: int, hidden_units: int, n_classes: int, pool: bool
    ) -> None:
        super().__init__()
        self.pool = pool
        self.hidden = nn.ModuleList(
            nn.Linear(in_features if i == 0 else hidden_units, hidden_units)
            for i in range(n_hidden)
        )
        self.out = nn.Linear(hidden_units, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.amax(x, dim=(-2, -1)) if self.pool else torch.flatten(x, start_dim=1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return torch.softmax(self.out(x), dim=-1)


class Network(nn.Module):
    """sleap-nn's UNet backbone and heads for one `ModelSpec`.

    Attributes:
        spec: the model this network implements.
        sleap_nn_keys: our state_dict keys mapped to the checkpoint's keys.
        derived_keys: checkpoint entries computed from the config (none for a UNet).
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        unet = spec.backbone
        if not isinstance(unet, UNetSpec):
            raise TypeError(f"{spec.config_path}: not a UNet model")
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
        self._build_middle(unet, names)
        strides_to_features = self._build_decoder(unet, skip_channels, names)
        self.head_sources = self._build_heads(strides_to_features, names)
        self.sleap_nn_keys: dict[str, str] = {
            key: f"model.{names[key.rpartition('.')[0]]}.{key.rpartition('.')[2]}"
            for key in self.state_dict()
        }
        # Checkpoint entries the config determines (a UNet has none; see
        # `load_sleap_nn_weights`).
        self.derived_keys: dict[str, str] = {}

    def _config_error(self, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{self.spec.config_path}: {problem}")

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

    def _build_middle(self, unet: UNetSpec, names: dict[str, str]) -> None:
        channels = _level(unet, unet.down_blocks + unet.stem_blocks - 1)
        bottom = _level(unet, unet.down_blocks + unet.stem_blocks)
        self.middle = nn.ModuleList()
        if unet.middle_block:
            parts = (("expand", unet.convs_per_block - 1), ("contract", 1))
            for m, (kind, n_convs) in enumerate(parts):
                self.middle.append(ConvBlock(channels, bottom, n_convs, unet.kernel_size, False))
                channels = bottom
                n = unet.down_blocks + 1 + m
                for j in range(n_convs):
                    names[f"middle.{m}.convs.{j}"] = (
                        f"backbone.middle_blocks.{m}.blocks.stack0_enc{n}_middle_{kind}_conv{j}"
                    )
        # sleap-nn sizes the decoder (and a head on an empty decoder) for the middle
        # block's channels whether or not there is one.
        if channels != bottom:
            raise self._config_error(
                f"unet.middle_block false gives the decoder {channels} channels where "
                f"sleap-nn's UNet expects {bottom} (it cannot run this config either)"
            )

    def _build_decoder(
        self, unet: UNetSpec, skip_channels: list[int], names: dict[str, str]
    ) -> dict[int, int]:
        """Make the decoder blocks; returns {stride: index into [bottleneck, blocks...]}."""
        channels = _level(unet, unet.down_blocks + unet.stem_blocks)
        stride = unet.input_stride
        strides_to_features = {stride: 0}
        self.decoder = nn.ModuleList()
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
            block = UpBlock(
                channels,
                out,
                skip,
                DECODER_CONVS if concat else 1,
                unet.kernel_size,
                transposed=not unet.up_interpolate,
                resize_to_skip=unet.stem_blocks > 0,
            )
            self.decoder.append(block)
            prefix = (
                f"backbone.decoders.0.decoder_stack.{i}.blocks."
                f"stack0_dec{i}_s{stride}_to_s{stride // 2}"
            )
            if block.upsample is not None:
                names[f"decoder.{i}.upsample"] = f"{prefix}_trans_conv"
            for j in range(len(block.refine)):
                names[f"decoder.{i}.refine.{j}"] = f"{prefix}_refine_conv{j}"
            channels = out
            stride //= 2
            strides_to_features[stride] = i + 1
        return strides_to_features

    def _build_heads(
        self, strides_to_features: dict[int, int], names: dict[str, str]
    ) -> tuple[tuple[str, int], ...]:
        """Make the heads; returns (head name, index of the feature map it reads)."""
        unet = self.unet
        feature_channels = [_level(unet, unet.down_blocks + unet.stem_blocks)]
        feature_channels += [block.refine[0].out_channels for block in self.decoder]
        self.heads = nn.ModuleDict()
        sources = []
        for h, head in enumerate(self.spec.heads):
            source = self._head_source(head, strides_to_features)
            sources.append((head.name, source))
            self.heads[head.name] = self._make_head(head, feature_channels[source])
            names.update(head_sleap_nn_names(head, h))
        return tuple(sources)

    def _head_source(self, head: HeadSpec, strides_to_features: dict[int, int]) -> int:
        """Index into [bottleneck, decoder outputs...] of the feature map a head reads."""
        if head.name == "ClassVectorsHead" or not self.decoder:
            return 0
        source = strides_to_features.get(head.output_stride, 0)
        if source == 0:
            produced = sorted(s for s, i in strides_to_features.items() if i)
            raise self._config_error(
                f"{head.name} output_stride {head.output_stride} is not a decoder stride {produced}"
            )
        return source

    def _make_head(self, head: HeadSpec, in_channels: int) -> nn.Module:
        if head.name != "ClassVectorsHead":
            return ConvHead(in_channels, head.n_channels, sigmoid=head.activation == "sigmoid")
        if not self.unet.middle_block:
            raise self._config_error(
                "ClassVectorsHead needs unet.middle_block (sleap-nn fails without one)"
            )
        if head.num_fc_layers == 0 and head.global_pool and in_channels != head.num_fc_units:
            raise self._config_error(
                f"ClassVectorsHead with num_fc_layers 0 needs num_fc_units {in_channels} "
                "(sleap-nn cannot run this config either)"
            )
        return ClassVectorsHead(
            in_channels, head.num_fc_layers, head.num_fc_units, head.n_channels, head.global_pool
        )

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = match_channels(x, self.spec.backbone.in_channels)
        skips = []
        if len(self.stem):
            for block in self.stem:
                x = block(x)
            x = _max_pool(x)
            skips.append(x)
        for block in self.encoder:
            x = block(x)
            skips.insert(0, x)
        x = _max_pool(x)
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
                naming `source` and the first such key.
        """
        load_sleap_nn_weights(
            self, self.sleap_nn_keys, {}, state_dict, source, self.spec.config_path
        )


def match_channels(x: torch.Tensor, in_channels: int) -> torch.Tensor:
    """`x` with the model's channels, converted as sleap-nn's `Model.forward` does."""
    # A traced graph has a fixed channel count, so baking this branch in is right.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        channels = int(x.shape[-3])
    if channels == in_channels or channels not in (1, 3):
        return x
    if channels == 1:
        return x.repeat(1, 3, 1, 1)
    r, g, b = x.unbind(dim=-3)
    return (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b).unsqueeze(-3)


def load_sleap_nn_weights(
    module: nn.Module,
    sleap_nn_keys: dict[str, str],
    derived_keys: dict[str, str],
    state_dict: dict[str, torch.Tensor],
    source: Path,
    config_path: Path,
) -> None:
    """Load `module`'s weights from a state dict under sleap-nn's keys.

    Args:
        module: the network; every state_dict key is in `sleap_nn_keys` or
            `derived_keys`.
        sleap_nn_keys: our keys mapped to the checkpoint's, loaded.
        derived_keys: our keys mapped to checkpoint entries that the config
            determines (buffers), compared with ours and not loaded.
        state_dict: the checkpoint's weights.
        source: the checkpoint, for errors.
        config_path: the training config, for errors.

    Raises:
        CheckpointError: a weight is missing, unexpected, of the wrong shape, or a
            derived entry differs from ours, naming `source` and the first such key.
    """
    own = module.state_dict()
    mapped = {}
    for key, theirs in {**sleap_nn_keys, **derived_keys}.items():
        if theirs not in state_dict:
            raise CheckpointError(
                f"{source}: checkpoint lacks {theirs}; it does not match {config_path.name}"
            )
        value = state_dict[theirs]
        if value.shape != own[key].shape:
            raise CheckpointError(
                f"{source}: {theirs} has shape {tuple(value.shape)} but "
                f"{config_path.name} implies {tuple(own[key].shape)}"
            )
        if key in derived_keys:
            if not torch.equal(value, own[key]):
                raise CheckpointError(
                    f"{source}: {theirs} differs from what {config_path.name} implies"
                )
            value = own[key]
        mapped[key] = value
    expected = set(sleap_nn_keys.values()) | set(derived_keys.values())
    unexpected = sorted(set(state_dict) - expected)
    if unexpected:
        raise CheckpointError(
            f"{source}: checkpoint has {len(unexpected)} weights the config does not "
            f"describe, first {unexpected[0]}"
        )
    module.load_state_dict(mapped, strict=True)


def _level(unet: UNetSpec, n: int) -> int:
    """Channels of the UNet's level `n`, computed as sleap-nn does."""
    return int(unet.filters * unet.filters_rate**n)


def head_sleap_nn_names(head: HeadSpec, position: int) -> dict[str, str]:
    """Our module paths of a head mapped to sleap-nn's."""
    theirs = f"head_layers.{position}"
    if head.name != "ClassVectorsHead":
        return {f"heads.{head.name}.conv": f"{theirs}.{head.name}.0"}
    names = {
        f"heads.{head.name}.hidden.{i}": f"{theirs}.pre_classification{i}_fc"
        for i in range(head.num_fc_layers)
    }
    names[f"heads.{head.name}.out"] = f"{theirs}.ClassVectorsHead"
    return names


def build_network(spec: ModelSpec) -> Network:
    """A randomly initialised `Network` for `spec`, in eval mode.

    Raises:
        ModelConfigError: the UNet options form a network sleap-nn cannot run.
    """
    return Network(spec).eval()
