"""What every sleap-nn network shares behind its encoder: middle block, decoder, heads.

sleap-nn's UNet (`engines/graph/network.py`) and its ConvNeXt and Swin networks
(`engines/graph/encoder_decoder.py`) differ in their encoders only. Behind the
encoder each runs, step for step:

- a 2x2 max pool on the deepest encoder output (floored; see network.py for why);
- a middle block: `convs_per_block - 1` expanding convolutions, then one more, at
  the bottleneck's channels, with ReLU;
- decoder blocks: x2 upsampling (bilinear, `align_corners=False`, or a 3x3 stride-2
  transposed convolution with ReLU), concatenation `[skip, upsampled]` with the
  encoder output of the same stride, then refining convolutions with ReLU; blocks
  past the last skip refine without a join;
- heads: a 1x1 convolution on the decoder output at the head's stride (the
  bottleneck when the decoder is empty), ending in a sigmoid for class maps and for
  centroid heads with `use_sigmoid_activation`. The class-vector head max-pools the
  bottleneck globally, runs `num_fc_layers` fully connected layers with ReLU and
  a final one, then a softmax. The embedding head pools the bottleneck (GeM, max
  or average), runs its fully connected layers the same way and L2-normalises the
  vector. A box detector's SSD head reads every pyramid
  level's map (a decoder output, or the bottleneck at its stride) through a conv
  tower and two 3x3 predictors (`SSDPredictor`).

A 1-channel input to a 3-channel model is repeated, a 3-channel input to a
1-channel model converted to gray (0.2989 R + 0.587 G + 0.114 B), as sleap-nn's
`Model.forward` does.

`DecoderHeadsNetwork` builds and runs these parts and loads their weights from a
sleap-nn checkpoint; a subclass builds its encoder and says where the checkpoint
keeps the middle block and decoder. The heads' keys, after the `model.` prefix:

    head_layers.{h}.{HeadName}.0                   heads.{HeadName}.conv
    head_layers.{h}.pre_classification{i}_fc       heads.ClassVectorsHead.hidden.{i}
    head_layers.{h}.ClassVectorsHead               heads.ClassVectorsHead.out
    head_layers.{h}.pre_embedding_pool.p           heads.EmbeddingHead.p (GeM only)
    head_layers.{h}.pre_embedding{i}_fc            heads.EmbeddingHead.hidden.{i}
    head_layers.{h}.EmbeddingHead                  heads.EmbeddingHead.out
    head_layers.{h}.{towers|cls_preds|box_preds}.{rest}
                                                   heads.SSDHead.{towers|cls_preds|box_preds}.{rest}

each followed by `.weight` or `.bias`, `h` being the head's position in `spec.heads`.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Sequence
from pathlib import Path

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from sleap_live.engines.errors import CheckpointError, ModelConfigError
from sleap_live.engines.host.frames import GRAY_WEIGHTS
from sleap_live.engines.load.spec import HeadSpec, ModelSpec

# sleap-nn's UNet does not pass convs_per_block on to its decoder, whose blocks
# therefore always refine with this many convolutions (ConvNeXt's and Swin's too).
DECODER_CONVS = 2
_TRANSPOSED_KERNEL_SIZE = 3


def max_pool(x: torch.Tensor) -> torch.Tensor:
    """sleap-nn's 2x2 max pool in its steady state (odd sizes floored)."""
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
            x = max_pool(x)
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


# sleap-nn's GeM (`architectures/heads.py`): its exponent is clamped to this range in
# the forward pass, and activations are floored at `GEM_EPS` before the power.
GEM_P_MIN, GEM_P_MAX = 1.0, 6.0
GEM_EPS = 1e-6


class EmbeddingHead(nn.Module):
    """sleap-nn's `EmbeddingHead.make_head`: pool, fully connected layers with ReLU,
    linear layer, then (if `normalize`) L2 normalisation."""

    def __init__(
        self,
        in_features: int,
        n_hidden: int,
        hidden_units: int,
        dim: int,
        pool: str,
        normalize: bool,
    ) -> None:
        super().__init__()
        self.pool = pool
        self.normalize = normalize
        if pool == "gem":
            self.p = nn.Parameter(torch.tensor(3.0))
        self.hidden = nn.ModuleList(
            nn.Linear(in_features if i == 0 else hidden_units, hidden_units)
            for i in range(n_hidden)
        )
        self.out = nn.Linear(hidden_units if n_hidden else in_features, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pool == "gem":
            p = self.p.clamp(GEM_P_MIN, GEM_P_MAX)
            x = x.clamp(min=GEM_EPS).pow(p).mean(dim=(-2, -1)).pow(1.0 / p)
        elif self.pool == "max":
            x = torch.amax(x, dim=(-2, -1))
        else:
            x = x.mean(dim=(-2, -1))
        for layer in self.hidden:
            x = torch.relu(layer(x))
        x = self.out(x)
        return F.normalize(x, dim=1) if self.normalize else x


class SSDPredictor(nn.Module):
    """sleap-nn's `_SSDPredictor` (`architectures/heads.py`): per pyramid level a
    tower of 3x3 convolutions with ReLU, then 3x3 class-logit and box-delta
    predictors; all levels' anchors concatenated, finest level first.

    `forward` takes each level's (B, C_l, h_l, w_l) map, finest first, and returns
    (B, A, logits + 4): per anchor, in (level, row, column, anchor shape) order,
    the class logits (background first) then the 4 box deltas.
    """

    def __init__(
        self, in_channels: Sequence[int], per_cell: int, logits: int, channels: int, convs: int
    ) -> None:
        super().__init__()
        self.logits = logits
        self.towers = nn.ModuleList()
        self.cls_preds = nn.ModuleList()
        self.box_preds = nn.ModuleList()
        for c_in in in_channels:
            layers: list[nn.Module] = []
            for i in range(convs):
                layers += [nn.Conv2d(c_in if i == 0 else channels, channels, 3, 1, 1), nn.ReLU()]
            c_out = channels if convs else c_in
            self.towers.append(nn.Sequential(*layers))
            self.cls_preds.append(nn.Conv2d(c_out, per_cell * logits, 3, 1, 1))
            self.box_preds.append(nn.Conv2d(c_out, per_cell * 4, 3, 1, 1))

    def forward(self, *features: torch.Tensor) -> torch.Tensor:
        outputs = []
        for x, tower, cls_pred, box_pred in zip(
            features, self.towers, self.cls_preds, self.box_preds, strict=True
        ):
            x = tower(x)
            logits = cls_pred(x).permute(0, 2, 3, 1).reshape(x.shape[0], -1, self.logits)
            deltas = box_pred(x).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 4)
            outputs.append(torch.cat([logits, deltas], dim=-1))
        return torch.cat(outputs, dim=1)


@attrs.frozen
class DecoderLevel:
    """One decoder block as its network sizes it.

    Attributes:
        channels: the block's output channels.
        skip_channels: channels of the encoder output it joins (0: no join).
        n_convs: its refining convolutions.
    """

    channels: int
    skip_channels: int
    n_convs: int


@attrs.frozen
class CheckpointLayout:
    """Where a sleap-nn checkpoint keeps the middle block and the decoder.

    Attributes:
        middle_layers: the layer-name stem of each middle block part (expand, then
            contract), followed there by `{kind}_conv{j}`.
        decoder_stack: the module path of the decoder stack, under `backbone.`.
        decoder_layer: the layer-name stem of decoder block `i`, followed there by
            `{i}_s{a}_to_s{b}_{trans_conv|refine_conv{j}}`.
    """

    middle_layers: tuple[str, str]
    decoder_stack: str
    decoder_layer: str


class DecoderHeadsNetwork(nn.Module, abc.ABC):
    """An encoder (the subclass's) followed by sleap-nn's middle block, decoder and heads.

    A subclass builds its encoder, then calls `_build_middle`, `_build_decoder`,
    `_build_heads` and `_map_keys` in that order, and implements `encode`.

    Attributes:
        spec: the model this network implements.
        sleap_nn_keys: our state_dict keys mapped to the checkpoint's keys.
        derived_keys: checkpoint entries computed from the config (Swin's relative
            position indices), checked against ours rather than loaded.
        head_sources: (head name, indices into [bottleneck, decoder outputs...] of
            the feature maps it reads), in `spec.heads` order.
    """

    # Made by the `_build_*` methods, after the subclass's encoder: the order in
    # which modules are assigned is the state_dict's order.
    middle: nn.ModuleList
    decoder: nn.ModuleList
    heads: nn.ModuleDict

    def __init__(self, spec: ModelSpec, layout: CheckpointLayout) -> None:
        super().__init__()
        self.spec = spec
        self.layout = layout
        self.head_sources: tuple[tuple[str, tuple[int, ...]], ...] = ()
        self.sleap_nn_keys: dict[str, str] = {}
        self.derived_keys: dict[str, str] = {}

    @abc.abstractmethod
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The deepest encoder output (before its pool) and the skips, deepest first."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x, skips = self.encode(match_channels(x, self.spec.backbone.in_channels))
        x = max_pool(x)
        for block in self.middle:
            x = block(x)
        features = [x]
        for i, block in enumerate(self.decoder):
            x = block(x, skips[i] if i < len(skips) else None)
            features.append(x)
        return {
            name: self.heads[name](*(features[s] for s in sources))
            for name, sources in self.head_sources
        }

    def load_sleap_nn_state_dict(self, state_dict: dict[str, torch.Tensor], source: Path) -> None:
        """Load weights stored under sleap-nn's checkpoint keys.

        Raises:
            CheckpointError: a weight is missing, unexpected, or of the wrong shape,
                or a derived value differs from ours, naming `source` and the key.
        """
        load_sleap_nn_weights(
            self, self.sleap_nn_keys, self.derived_keys, state_dict, source, self.spec.config_path
        )

    def _config_error(self, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{self.spec.config_path}: {problem}")

    def _build_middle(
        self,
        in_channels: int,
        bottom: int,
        convs_per_block: int,
        kernel_size: int,
        names: dict[str, str],
    ) -> None:
        """Make the middle block from `in_channels` to `bottom` channels."""
        self.middle = nn.ModuleList()
        parts = (("expand", convs_per_block - 1), ("contract", 1))
        for m, (kind, n_convs) in enumerate(parts):
            self.middle.append(ConvBlock(in_channels, bottom, n_convs, kernel_size, False))
            in_channels = bottom
            layer = f"backbone.middle_blocks.{m}.blocks.{self.layout.middle_layers[m]}"
            for j in range(n_convs):
                names[f"middle.{m}.convs.{j}"] = f"{layer}{kind}_conv{j}"

    def _build_decoder(
        self,
        bottom: int,
        stride: int,
        levels: Sequence[DecoderLevel],
        kernel_size: int,
        transposed: bool,
        resize_to_skip: bool,
        names: dict[str, str],
    ) -> dict[int, int]:
        """Make the decoder blocks below a `bottom`-channel bottleneck at `stride`.

        Returns:
            {stride: index into [bottleneck, decoder outputs...]}.
        """
        self.decoder = nn.ModuleList()
        strides_to_features = {stride: 0}
        in_channels = bottom
        for i, level in enumerate(levels):
            block = UpBlock(
                in_channels,
                level.channels,
                level.skip_channels,
                level.n_convs,
                kernel_size,
                transposed=transposed,
                resize_to_skip=resize_to_skip,
            )
            self.decoder.append(block)
            prefix = (
                f"backbone.{self.layout.decoder_stack}.decoder_stack.{i}.blocks."
                f"{self.layout.decoder_layer}{i}_s{stride}_to_s{stride // 2}"
            )
            if block.upsample is not None:
                names[f"decoder.{i}.upsample"] = f"{prefix}_trans_conv"
            for j in range(len(block.refine)):
                names[f"decoder.{i}.refine.{j}"] = f"{prefix}_refine_conv{j}"
            in_channels = level.channels
            stride //= 2
            strides_to_features[stride] = i + 1
        return strides_to_features

    def _build_heads(
        self, bottom: int, strides_to_features: dict[int, int], names: dict[str, str]
    ) -> None:
        """Make the heads on the `bottom`-channel bottleneck and the decoder outputs."""
        feature_channels = [bottom] + [block.refine[0].out_channels for block in self.decoder]
        self.heads = nn.ModuleDict()
        sources: list[tuple[str, tuple[int, ...]]] = []
        for h, head in enumerate(self.spec.heads):
            if head.anchors is None:
                source = self._head_source(head, strides_to_features)
                sources.append((head.name, (source,)))
                self.heads[head.name] = self._make_head(head, feature_channels[source])
            else:
                levels = self._level_sources(head.anchors.strides, strides_to_features)
                sources.append((head.name, levels))
                self.heads[head.name] = SSDPredictor(
                    [feature_channels[s] for s in levels],
                    head.anchors.per_cell,
                    len(head.classes) + 1,
                    head.anchors.head_channels,
                    head.anchors.head_convs,
                )
            names.update(head_sleap_nn_names(head, h))
        self.head_sources = tuple(sources)

    def _head_source(self, head: HeadSpec, strides_to_features: dict[int, int]) -> int:
        """Index into [bottleneck, decoder outputs...] of the feature map a head reads."""
        if head.name in ("ClassVectorsHead", "EmbeddingHead") or not self.decoder:
            return 0
        source = strides_to_features.get(head.output_stride, 0)
        if source == 0:
            produced = sorted(s for s, i in strides_to_features.items() if i)
            raise self._config_error(
                f"{head.name} output_stride {head.output_stride} is not a decoder stride {produced}"
            )
        return source

    def _level_sources(
        self, strides: Sequence[int], strides_to_features: dict[int, int]
    ) -> tuple[int, ...]:
        """Indices of the maps a multi-scale head reads, one per stride: a decoder
        output or the bottleneck (sleap-nn's `_feature_at_stride`)."""
        absent = [s for s in strides if s not in strides_to_features]
        if absent:
            raise self._config_error(
                f"the SSD head reads strides {list(strides)} but the backbone gives "
                f"{sorted(strides_to_features)}; {absent} are missing (sleap-nn refuses this too)"
            )
        return tuple(strides_to_features[s] for s in strides)

    def _make_head(self, head: HeadSpec, in_channels: int) -> nn.Module:
        if head.name == "EmbeddingHead":
            return EmbeddingHead(
                in_channels,
                head.num_fc_layers,
                head.num_fc_units,
                head.embedding_dim,
                head.pool,
                head.normalize,
            )
        if head.name != "ClassVectorsHead":
            return ConvHead(in_channels, head.n_channels, sigmoid=head.activation == "sigmoid")
        if head.num_fc_layers == 0 and head.global_pool and in_channels != head.num_fc_units:
            raise self._config_error(
                f"ClassVectorsHead with num_fc_layers 0 needs num_fc_units {in_channels} "
                "(sleap-nn cannot run this config either)"
            )
        return ClassVectorsHead(
            in_channels, head.num_fc_layers, head.num_fc_units, head.n_channels, head.global_pool
        )

    def _map_keys(self, names: dict[str, str], derived_keys: dict[str, str]) -> None:
        """Fill in `sleap_nn_keys` from our module paths mapped to sleap-nn's (`names`)
        and `derived_keys` (our keys mapped to the checkpoint's, not loaded)."""
        self.derived_keys = derived_keys
        self.sleap_nn_keys = {
            key: f"model.{names[key.rpartition('.')[0]]}.{key.rpartition('.')[2]}"
            for key in self.state_dict()
            if key not in derived_keys
        }


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


def head_sleap_nn_names(head: HeadSpec, position: int) -> dict[str, str]:
    """Our module paths of a head mapped to sleap-nn's."""
    theirs = f"head_layers.{position}"
    if head.anchors is not None:
        convs = range(0, 2 * head.anchors.head_convs, 2)
        return {
            f"heads.{head.name}.{part}": f"{theirs}.{part}"
            for level in range(len(head.anchors.strides))
            for part in (
                *(f"towers.{level}.{j}" for j in convs),
                f"cls_preds.{level}",
                f"box_preds.{level}",
            )
        }
    if head.name == "EmbeddingHead":
        names = {
            f"heads.{head.name}.hidden.{i}": f"{theirs}.pre_embedding{i}_fc"
            for i in range(head.num_fc_layers)
        }
        names[f"heads.{head.name}.out"] = f"{theirs}.EmbeddingHead"
        # A module path whose last part is the parameter: `_map_keys` splits there.
        names[f"heads.{head.name}"] = f"{theirs}.pre_embedding_pool"
        return names
    if head.name != "ClassVectorsHead":
        return {f"heads.{head.name}.conv": f"{theirs}.{head.name}.0"}
    names = {
        f"heads.{head.name}.hidden.{i}": f"{theirs}.pre_classification{i}_fc"
        for i in range(head.num_fc_layers)
    }
    names[f"heads.{head.name}.out"] = f"{theirs}.ClassVectorsHead"
    return names
