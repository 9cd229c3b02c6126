"""SLEAP 1.x's UNet and heads in torch, loading a Keras `best_model.h5` with h5py.

`load_legacy_network(spec)` builds the network SLEAP 1.x (TensorFlow) built for a
`ModelSpec` read from a SLEAP 1.x model folder and loads its weights; no
TensorFlow is needed. Its `forward` takes what `Network.forward` takes and returns
the same dict (head outputs keyed by sleap-nn head class names), plus the offset
maps under `OFFSETS_HEAD` when the model has an offset-refinement head.

The computation is SLEAP 1.4's `UNet.from_config` + `Model.make_model`, layer for
layer (`sleap/nn/architectures/unet.py`, `encoder_decoder.py`, `sleap/nn/heads.py`):

- Encoder block b: a 2x2 max pool ("same" padding) before its convolutions except
  in block 0, then two 3x3 "same" convolutions with ReLU, `int(filters *
  filters_rate ** b)` channels; the block outputs are the skip sources. A last
  pool ends the encoder.
- Middle block: one "expand" and one "contract" 3x3 convolution with ReLU, both
  at the next level's channels (no block contraction).
- Decoder block i, from stride s to s/2: a 3x3 stride-2 "same" transposed
  convolution with ReLU, or x2 bilinear upsampling (half-pixel centers, as Keras's
  `UpSampling2D`); concatenation `[skip, upsampled]` with the encoder output at
  s/2; two 3x3 convolutions with ReLU at the level's channels.
- Keras's "same" transposed convolution pads only after the input, so its output
  is the full transposed convolution cut at 2x the input size from the start;
  torch's `padding=1` would cut one pixel from the start instead (sleap-nn 0.3.5's
  port does that, which is why its outputs differ from Keras's).
- Heads: a 1x1 convolution on the feature map at the head's stride (the decoder's
  output, or the input of the decoder block at that stride), sigmoid for class
  maps; the class-vector head max-pools globally (or flattens in Keras's
  height-width-channel order), then `num_fc_layers` dense layers with ReLU and a
  dense softmax layer. An `OffsetRefinementHead` sits beside the confidence map
  head at its stride: two channels (x, y) per part.

Keras stores a layer's weights at `model_weights/<layer>/<layer>/kernel:0` and
`bias:0`: convolution kernels as (height, width, in, out), transposed ones as
(height, width, out, in), dense kernels as (in, out). Head layers are named after
the head class, with a `_0` suffix in models from SLEAP 1.1 on.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sleap_live.engines.errors import CheckpointError, ModelConfigError
from sleap_live.engines.graph.decoder_heads import match_channels
from sleap_live.engines.load.checkpoint import check_weights_fit
from sleap_live.engines.load.keras_h5 import hard_member, read_weight
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, UNetSpec

# The key of the offset maps in the network's outputs.
OFFSETS_HEAD = "OffsetRefinementHead"
_KERNEL = 3


def _keras_max_pool(x: torch.Tensor) -> torch.Tensor:
    # Keras's "same" 2x2 pooling pads an odd side at its end: ceil_mode.
    return F.max_pool2d(x, kernel_size=2, stride=2, ceil_mode=True)


class _Convs(nn.Module):
    """3x3 "same" convolutions with ReLU, each a Keras `Conv2D` layer by name."""

    def __init__(self, in_channels: int, channels: tuple[int, ...], names: tuple[str, ...]):
        super().__init__()
        self.names = names
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, _KERNEL, padding="same")
            for c_in, c_out in zip((in_channels, *channels[:-1]), channels, strict=True)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x


class _UpBlock(nn.Module):
    def __init__(
        self, in_channels: int, skip_channels: int, channels: int, prefix: str, transposed: bool
    ) -> None:
        super().__init__()
        self.prefix = prefix
        self.upsample = (
            nn.ConvTranspose2d(in_channels, channels, _KERNEL, stride=2) if transposed else None
        )
        upsampled = channels if transposed else in_channels
        self.refine = _Convs(
            upsampled + skip_channels,
            (channels, channels),
            (f"{prefix}_refine_conv0", f"{prefix}_refine_conv1"),
        )

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        if self.upsample is None:
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        else:
            height, width = skip.shape[-2:]
            x = torch.relu(self.upsample(x)[..., :height, :width])
        return self.refine(torch.cat((skip, x), dim=1))


class _ClassVectors(nn.Module):
    def __init__(self, in_features: int, head: HeadSpec) -> None:
        super().__init__()
        self.pool = head.global_pool
        units = head.num_fc_units
        self.hidden = nn.ModuleList(
            nn.Linear(in_features if i == 0 else units, units) for i in range(head.num_fc_layers)
        )
        self.out = nn.Linear(units if head.num_fc_layers else in_features, head.n_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pool:
            x = torch.amax(x, dim=(-2, -1))
        else:
            x = torch.flatten(x.permute(0, 2, 3, 1), start_dim=1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return torch.softmax(self.out(x), dim=-1)


class LegacyNetwork(nn.Module):
    """The network SLEAP 1.x built for a `ModelSpec` with `legacy` set.

    Attributes:
        spec: the model this network implements.
        keras_names: our state_dict key prefixes mapped to Keras layer names.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        unet = spec.backbone
        if not isinstance(unet, UNetSpec):  # the legacy reader makes UNets only
            raise ModelConfigError(f"{spec.config_path}: a SLEAP 1.x network is a UNet")
        if unet.stem_stride:
            raise ModelConfigError(
                f"{spec.config_path}: a SLEAP 1.x UNet with a stem (stem_stride "
                f"{unet.stem_stride}) is not run by sleap-live"
            )

        def level(n: int) -> int:
            return int(unet.filters * unet.filters_rate**n)

        down = int(np.log2(unet.max_stride))
        channels = unet.in_channels
        self.encoder = nn.ModuleList()
        skip_channels = []
        for b in range(down):
            names = (f"stack0_enc{b}_conv0", f"stack0_enc{b}_conv1")
            self.encoder.append(_Convs(channels, (level(b), level(b)), names))
            channels = level(b)
            skip_channels.append(channels)
        self.middle = nn.ModuleList()
        if unet.middle_block:
            expand = (f"stack0_enc{down + 1}_middle_expand_conv0",)
            contract = (f"stack0_enc{down + 2}_middle_contract_conv0",)
            self.middle.append(_Convs(channels, (level(down),), expand))
            self.middle.append(_Convs(level(down), (level(down),), contract))
            channels = level(down)
        features = [channels]
        stride = unet.max_stride
        strides = {stride: 0}
        self.decoder = nn.ModuleList()
        for i in range(int(np.log2(unet.max_stride // unet.output_stride))):
            out = level(down - 1 - i)
            prefix = f"stack0_dec{i}_s{stride}_to_s{stride // 2}"
            block = _UpBlock(
                channels, skip_channels[down - 1 - i], out, prefix, not unet.up_interpolate
            )
            self.decoder.append(block)
            channels = out
            stride //= 2
            strides[stride] = i + 1
            features.append(out)
        self.heads = nn.ModuleDict()
        self.head_sources: list[tuple[str, int]] = []
        for head in spec.heads:
            source = 0 if head.name == "ClassVectorsHead" else strides.get(head.output_stride)
            if source is None:
                raise ModelConfigError(
                    f"{spec.config_path}: {head.name} output_stride {head.output_stride} "
                    f"is not a decoder stride {sorted(strides)}"
                )
            self.head_sources.append((head.name, source))
            if head.name == "ClassVectorsHead":
                self.heads[head.name] = _ClassVectors(features[source], head)
            else:
                self.heads[head.name] = nn.Conv2d(features[source], head.n_channels, 1)
            if head.name in (spec.legacy.offset_heads if spec.legacy else ()):
                self.head_sources.append((OFFSETS_HEAD, source))
                self.heads[OFFSETS_HEAD] = nn.Conv2d(features[source], 2 * head.n_channels, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        # SLEAP 1.x converts frames to the Keras model's input channels as sleap-nn
        # does; a traced graph has a fixed channel count, so the branch is baked in.
        x = match_channels(x, self.spec.backbone.in_channels)
        skips = []
        for b, block in enumerate(self.encoder):
            if b > 0:
                x = _keras_max_pool(x)
            x = block(x)
            skips.append(x)
        x = _keras_max_pool(x)
        for block in self.middle:
            x = block(x)
        features = [x]
        for i, up in enumerate(self.decoder):
            x = up(x, skips[len(skips) - 1 - i])
            features.append(x)
        outputs = {}
        for name, source in self.head_sources:
            out = self.heads[name](features[source])
            if name == "ClassMapsHead":
                # Spelled out for the reason `decoder_heads.ConvHead` gives.
                out = 1.0 / (1.0 + torch.exp(-out))
            outputs[name] = out
        return outputs

    def keras_layers(self) -> dict[str, tuple[nn.Module, str]]:
        """Each Keras layer name mapped to (our module, kind: conv, transposed or dense)."""
        layers: dict[str, tuple[nn.Module, str]] = {}
        blocks = [*self.encoder, *self.middle, *(up.refine for up in self.decoder)]
        for block in blocks:
            assert isinstance(block, _Convs)
            for name, conv in zip(block.names, block.convs, strict=True):
                layers[name] = (conv, "conv")
        for up in self.decoder:
            assert isinstance(up, _UpBlock)
            if up.upsample is not None:
                layers[f"{up.prefix}_trans_conv"] = (up.upsample, "transposed")
        for name, head in self.heads.items():
            if isinstance(head, _ClassVectors):
                for i, hidden in enumerate(head.hidden):
                    layers[f"pre_classification{i}_fc"] = (hidden, "dense")
                layers[name] = (head.out, "dense")
            else:
                layers[name] = (head, "conv")
        return layers

    def load_keras_weights(self, path: Path) -> None:
        """Loads the weights of a Keras `.h5` model file.

        Each weight's link, storage and shape are checked before it is read
        (`keras_h5.read_weight`).

        Raises:
            CheckpointError: the file is unreadable, lacks a layer, or a weight is a
                link, stored outside the file or of the wrong shape, naming the file
                and the layer.
        """
        try:
            with h5py.File(path, "r") as f:
                stored = hard_member(f, "model_weights", path, "model_weights")
                if not isinstance(stored, h5py.Group):
                    raise CheckpointError(f"{path}: no model_weights; not a Keras model file")
                for name, (module, kind) in self.keras_layers().items():
                    key = next((k for k in (name, f"{name}_0") if k in stored), None)
                    if key is None:
                        raise CheckpointError(
                            f"{path}: no layer {name}; it does not match "
                            f"{self.spec.config_path.name}"
                        )
                    where = f"model_weights/{key}/{key}"
                    layer = hard_member(stored, key, path, f"model_weights/{key}")
                    group = layer and hard_member(layer, key, path, where)
                    if not isinstance(group, h5py.Group):
                        raise CheckpointError(f"{path}: {where} is not a layer's weights")
                    own_weight, own_bias = module.weight, module.bias
                    assert isinstance(own_weight, torch.Tensor)
                    assert isinstance(own_bias, torch.Tensor)
                    # Keras's layouts: convolutions (h, w, in, out), transposed ones
                    # (h, w, out, in), dense (in, out); torch's reverse the first two
                    # and put the kernel's sides last.
                    order = (1, 0) if kind == "dense" else (2, 3, 1, 0)
                    shape = tuple(own_weight.shape[i] for i in order)
                    kernel = read_weight(group, "kernel:0", shape, path, f"{where}/kernel:0")
                    bias = read_weight(
                        group, "bias:0", tuple(own_bias.shape), path, f"{where}/bias:0"
                    )
                    with torch.no_grad():
                        weight = np.ascontiguousarray(kernel.transpose(np.argsort(order)))
                        own_weight.copy_(torch.from_numpy(weight))
                        own_bias.copy_(torch.from_numpy(bias))
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read as HDF5 ({e})") from None


def load_legacy_network(spec: ModelSpec) -> LegacyNetwork:
    """The SLEAP 1.x network of `spec` with its Keras weights, in eval mode.

    Raises:
        ModelConfigError: a UNet option sleap-live does not run.
        CheckpointError: the `.h5` file is unreadable, too small for the network the
            config describes, or does not match the config.
    """
    # Keras stores every weight as 4 uncompressed bytes (`keras_h5`), so a network the
    # file cannot hold is a config that does not match it.
    unet = spec.backbone
    assert isinstance(unet, UNetSpec)
    path = spec.checkpoint_path
    check_weights_fit(
        lambda: LegacyNetwork(spec),
        path,
        4,
        f"{spec.config_path}: model.backbone.unet (filters {unet.filters}, filters_rate "
        f"{unet.filters_rate}, max_stride {unet.max_stride}) and the heads",
        "float32 weights",
    )
    network = LegacyNetwork(spec)
    network.load_keras_weights(path)
    return network.eval()
