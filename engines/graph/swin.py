"""sleap-nn's Swin Transformer backbone as lean torch modules that load its checkpoints.

The encoder is torchvision's Swin Transformer (v1) feature stack as sleap-nn
configures it (`architectures/swint.py`), written here without torchvision:

- stem: a `patch_size` convolution at `stem_patch_stride` with padding 1, then a
  channels-last LayerNorm (eps 1e-5, as every norm here);
- per stage, `depths[s]` blocks `x + attn(norm1(x))`, then `x + mlp(norm2(x))`
  (linear to 4x, exact GELU, linear back); attention runs in `window_size`
  windows after zero-padding the map to whole windows; every second block first
  rolls the map up-left by half a window and masks attention between the
  regions the roll brought together (a -100 bias), unless the padded map is no
  larger than a window in that direction;
- attention: one linear layer to q, k, v per head, q scaled by head_dim ** -0.5,
  a learned relative position bias per head, softmax, a linear projection;
- between stages, patch merging: odd sizes padded by one, each 2x2 neighbourhood
  concatenated (top-left, bottom-left, top-right, bottom-right), LayerNorm, a
  bias-free linear layer to twice the channels;
- a final LayerNorm on the last stage.

The skip features are the stem's and each patch merging's outputs; the deepest is
the normed last stage. The middle block, decoder and heads are
`engines/graph/encoder_decoder.py`.

Every size the windows, padding, roll and mask depend on is computed from the
tensor's shape with tensor ops, so the module traces to ONNX with dynamic height
and width; only "is the map larger than a window" becomes a tensor factor on the
roll amount rather than a branch.

Checkpoint keys under `model.backbone.enc.`: `features.0.0` (stem convolution),
`features.0.2` (stem norm); stage `s` at `features.{2s+1}.{k}.`: `norm1`,
`attn.qkv`, `attn.proj`, `attn.relative_position_bias_table`,
`attn.relative_position_index` (derived from the window size: compared, not
loaded), `norm2`, `mlp.0`, `mlp.3`; merging `s` at `features.{2s+2}.`:
`reduction`, `norm`; `norm` (the final norm).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sleap_live.engines.graph.encoder_decoder import EncoderDecoderNetwork, patch_stem, run_stages
from sleap_live.engines.graph.resize import as_scalar, size_of
from sleap_live.engines.load.backbone_specs import SwinTSpec
from sleap_live.engines.load.spec import ModelSpec

LAYER_NORM_EPS = 1e-5
MLP_RATIO = 4
# The bias that keeps rolled-together regions apart (torchvision's value).
MASKED = -100.0


def relative_position_index(window: int) -> torch.Tensor:
    """(window², ) int64 index of each query-key offset into the bias table."""
    coords = torch.stack(
        torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")
    ).flatten(1)
    offsets = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    return (offsets[:, :, 0] * (2 * window - 1) + offsets[:, :, 1]).flatten()


def _rolled(x: torch.Tensor, shift: torch.Tensor, dim: int) -> torch.Tensor:
    """`torch.roll(x, -shift, dim)` for a (1,) tensor shift, as a gather."""
    size = size_of(x, dim)
    index = (torch.arange(as_scalar(size), device=x.device) + shift) % size
    return x.index_select(dim, index)


def _windows(x: torch.Tensor, window: int) -> torch.Tensor:
    """(B, H, W, ...) with H, W whole windows -> (B * windows, window², ...)."""
    tail = x.shape[3:]
    columns = size_of(x, 2) // window
    x = x.reshape(-1, window, as_scalar(columns), window, *tail)
    return x.transpose(1, 2).reshape(-1, window * window, *tail)


def _unwindows(
    x: torch.Tensor, window: int, height: torch.Tensor, width: torch.Tensor
) -> torch.Tensor:
    """`_windows`' inverse onto a (B, height, width, C) map."""
    channels = x.shape[-1]
    columns = width // window
    x = x.reshape(-1, as_scalar(columns), window, window, channels).transpose(1, 2)
    return x.reshape(-1, as_scalar(height), as_scalar(width), channels)


class WindowAttention(nn.Module):
    """Multi-head self-attention within windows, optionally shifted by half a window."""

    def __init__(self, channels: int, heads: int, window: int, shifted: bool) -> None:
        super().__init__()
        self.heads = heads
        self.window = window
        self.shift = window // 2 if shifted else 0
        self.qkv = nn.Linear(channels, 3 * channels)
        self.proj = nn.Linear(channels, channels)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self.register_buffer("relative_position_index", relative_position_index(window))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        window = self.window
        height, width = size_of(x, 1), size_of(x, 2)
        pad_bottom = (window - height % window) % window
        pad_right = (window - width % window) % window
        x = F.pad(x, (0, 0, 0, as_scalar(pad_right), 0, as_scalar(pad_bottom)))
        padded_height, padded_width = height + pad_bottom, width + pad_right
        shifts = None
        if self.shift:
            # No shift along a direction the padded map fits in one window.
            shifts = (
                (padded_height > window).long() * self.shift,
                (padded_width > window).long() * self.shift,
            )
            x = _rolled(_rolled(x, shifts[0], 1), shifts[1], 2)
        tokens = _windows(x, window)
        attended = self._attend(tokens, padded_height, padded_width, shifts)
        x = _unwindows(attended, window, padded_height, padded_width)
        if shifts is not None:
            x = _rolled(_rolled(x, -shifts[0], 1), -shifts[1], 2)
        return x[:, : as_scalar(height), : as_scalar(width), :]

    def _attend(
        self,
        tokens: torch.Tensor,
        padded_height: torch.Tensor,
        padded_width: torch.Tensor,
        shifts: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> torch.Tensor:
        n_tokens, channels = tokens.shape[1], tokens.shape[2]
        head_dim = channels // self.heads
        qkv = self.qkv(tokens).reshape(-1, n_tokens, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * head_dim**-0.5, qkv[1], qkv[2]
        attn = q.matmul(k.transpose(-2, -1))
        bias = self.relative_position_bias_table[self.relative_position_index]
        attn = attn + bias.reshape(n_tokens, n_tokens, -1).permute(2, 0, 1).unsqueeze(0)
        if shifts is not None:
            mask = self._mask(padded_height, padded_width, shifts, tokens.device)
            windows = mask.shape[0]
            attn = attn.reshape(-1, windows, self.heads, n_tokens, n_tokens)
            attn = (attn + mask[None, :, None]).reshape(-1, self.heads, n_tokens, n_tokens)
        attn = torch.softmax(attn, dim=-1)
        x = attn.matmul(v).transpose(1, 2).reshape(-1, n_tokens, channels)
        return self.proj(x)

    def _mask(
        self,
        padded_height: torch.Tensor,
        padded_width: torch.Tensor,
        shifts: tuple[torch.Tensor, torch.Tensor],
        device: torch.device,
    ) -> torch.Tensor:
        """(windows, window², window²): MASKED between tokens from different regions.

        The rolled map has three bands per direction: the part that stayed in
        place, the last window's part that stayed, and the wrapped-around part.
        """
        bands = []
        for size, shift in zip((padded_height, padded_width), shifts, strict=True):
            positions = torch.arange(as_scalar(size), device=device)
            band = (positions >= size - self.window).long() + (positions >= size - shift).long()
            bands.append(band)
        regions = (bands[0][:, None] * 3 + bands[1][None, :])[None, :, :, None]
        regions = _windows(regions, self.window)[..., 0]
        different = regions[:, None, :] != regions[:, :, None]
        return torch.where(different, MASKED, 0.0).to(torch.float32)


class SwinBlock(nn.Module):
    """`x + attn(norm1(x))`, then `x + mlp(norm2(x))`, on (B, H, W, C) maps."""

    def __init__(self, channels: int, heads: int, window: int, shifted: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(channels, eps=LAYER_NORM_EPS)
        self.attn = WindowAttention(channels, heads, window, shifted)
        self.norm2 = nn.LayerNorm(channels, eps=LAYER_NORM_EPS)
        self.mlp = nn.ModuleDict(
            {
                "expand": nn.Linear(channels, MLP_RATIO * channels),
                "project": nn.Linear(MLP_RATIO * channels, channels),
            }
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        y = self.mlp["project"](F.gelu(self.mlp["expand"](self.norm2(x))))
        return x + y


class PatchMerging(nn.Module):
    """Each 2x2 neighbourhood to one position with twice the channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * channels, eps=LAYER_NORM_EPS)
        self.reduction = nn.Linear(4 * channels, 2 * channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_bottom, pad_right = size_of(x, 1) % 2, size_of(x, 2) % 2
        x = F.pad(x, (0, 0, 0, as_scalar(pad_right), 0, as_scalar(pad_bottom)))
        corners = (x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2])
        return self.reduction(self.norm(torch.cat(corners, dim=-1)))


class SwinEncoder(nn.Module):
    """Stem, stages and patch mergings; returns the normed last stage and the skips."""

    def __init__(self, backbone: SwinTSpec) -> None:
        super().__init__()
        channels = backbone.channels
        self.stem = patch_stem(backbone, backbone.patch_size)
        self.stem_norm = nn.LayerNorm(channels[0], eps=LAYER_NORM_EPS)
        self.stages = nn.ModuleList(
            nn.Sequential(
                *(
                    SwinBlock(width, heads, backbone.window_size, shifted=k % 2 == 1)
                    for k in range(depth)
                )
            )
            for width, depth, heads in zip(
                channels, backbone.depths, backbone.num_heads, strict=True
            )
        )
        self.mergings = nn.ModuleList(PatchMerging(width) for width in channels[:-1])
        self.norm = nn.LayerNorm(channels[-1], eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self.stem_norm(self.stem(x).permute(0, 2, 3, 1))
        x, skips = run_stages(x, self.stages, self.mergings, _channels_first)
        return _channels_first(self.norm(x)), skips

    def sleap_nn_names(self) -> tuple[dict[str, str], dict[str, str]]:
        """Our module paths mapped to sleap-nn's under `backbone.enc`, and the keys of
        the derived buffers (relative position indices) likewise."""
        names = {"stem": "features.0.0", "stem_norm": "features.0.2", "norm": "norm"}
        derived = {}
        for s, stage in enumerate(self.stages):
            for k in range(len(stage)):
                ours, theirs = f"stages.{s}.{k}", f"features.{2 * s + 1}.{k}"
                for part in ("norm1", "norm2", "attn.qkv", "attn.proj", "attn"):
                    names[f"{ours}.{part}"] = f"{theirs}.{part}"
                names[f"{ours}.mlp.expand"] = f"{theirs}.mlp.0"
                names[f"{ours}.mlp.project"] = f"{theirs}.mlp.3"
                derived[f"{ours}.attn.relative_position_index"] = (
                    f"{theirs}.attn.relative_position_index"
                )
        for s in range(len(self.mergings)):
            for part in ("norm", "reduction"):
                names[f"mergings.{s}.{part}"] = f"features.{2 * s + 2}.{part}"
        return names, derived


def build_swin_network(spec: ModelSpec) -> EncoderDecoderNetwork:
    """A randomly initialised Swin network for `spec`, in eval mode."""
    backbone = spec.backbone
    if not isinstance(backbone, SwinTSpec):
        raise TypeError(f"{spec.config_path}: not a Swin model")
    encoder = SwinEncoder(backbone)
    names, derived = encoder.sleap_nn_names()
    return EncoderDecoderNetwork(spec, encoder, names, derived, backbone.patch_size).eval()


def _channels_first(x: torch.Tensor) -> torch.Tensor:
    """A (B, H, W, C) map as (B, C, H, W)."""
    return x.permute(0, 3, 1, 2)
