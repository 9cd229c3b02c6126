"""The ConvNeXt and Swin Transformer backbones of a sleap-nn config as small records.

sleap-nn builds both the same way around a different encoder (`architectures/
convnext.py`, `swint.py`): a patch stem at `stem_patch_stride`, four stages joined
by three x2 downsamplings, one more 2x2 max pool, a middle block of plain
convolutions at `filters_rate` times the last stage's channels, and the UNet's
decoder joining each upsampled map with an encoder output. The decoder's base
width is the first stage's channels.

What is read, as sleap-nn's `from_config` reads it:

- `model_type` picks a preset architecture ("tiny", "small", "base", and "large"
  for ConvNeXt); only a name outside the presets lets `arch` take effect, and a
  missing `arch` then falls back to "tiny".
- ConvNeXt `arch`: `depths` and `channels` per stage. Swin `arch`: `embed` (the
  first stage's channels, doubling per stage), `depths` and `num_heads`.
- The network's own stride is `stem_patch_stride * 16` whatever `max_stride`
  says; `max_stride` is what predict pads frames to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from sleap_live.engines.load.config_reader import ConfigReader

# sleap-nn's preset architectures (`ConvNextWrapper`, `SwinTWrapper`).
CONVNEXT_PRESETS: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "tiny": ((3, 3, 9, 3), (96, 192, 384, 768)),
    "small": ((3, 3, 27, 3), (96, 192, 384, 768)),
    "base": ((3, 3, 27, 3), (128, 256, 512, 1024)),
    "large": ((3, 3, 27, 3), (192, 384, 768, 1536)),
}
SWINT_PRESETS: Mapping[str, tuple[int, tuple[int, ...], tuple[int, ...]]] = {
    "tiny": (96, (2, 2, 6, 2), (3, 6, 12, 24)),
    "small": (96, (2, 2, 18, 2), (3, 6, 12, 24)),
    "base": (128, (2, 2, 18, 2), (4, 8, 16, 32)),
}
# Both encoders have four stages: three downsamplings after the stem.
STAGES = 4


@attrs.frozen
class DecoderSpec:
    """What the ConvNeXt and Swin backbones share beyond their encoders.

    Attributes:
        in_channels: channels of the network input (1 grayscale, 3 RGB).
        kernel_size: side of the middle and decoder convolutions.
        filters_rate: factor between the channels of consecutive decoder levels,
            and of the middle block over the last stage.
        convs_per_block: convolutions of the middle block (its expanding part
            has one less).
        up_interpolate: bilinear upsampling if True, transposed convolutions if False.
        output_stride: stride of the finest decoder output.
        max_stride: what predict pads frames to (`max_stride` of the config).
        stem_patch_stride: stride of the patch stem.
    """

    in_channels: int
    kernel_size: int
    filters_rate: float
    convs_per_block: int
    up_interpolate: bool
    output_stride: int
    max_stride: int
    stem_patch_stride: int

    @property
    def network_stride(self) -> int:
        """Stride of the middle block: the stem, three downsamplings, one pool."""
        return self.stem_patch_stride * 2 ** (STAGES - 1) * 2

    @property
    def up_blocks(self) -> int:
        """Decoder blocks, computed as sleap-nn does."""
        below_stem = self.network_stride // (self.stem_patch_stride * self.output_stride)
        return int(math.log2(below_stem)) + int(math.log2(self.stem_patch_stride))


@attrs.frozen
class ConvNextSpec:
    """sleap-nn's ConvNeXt backbone (`backbone_config.convnext`).

    Attributes:
        decoder: the options shared with Swin.
        depths: ConvNeXt blocks per stage.
        channels: channels per stage.
        stem_patch_kernel: side of the stem's patch convolution.
        model_type: the config's `model_type` (a preset name or another).
    """

    decoder: DecoderSpec
    depths: tuple[int, ...]
    channels: tuple[int, ...]
    stem_patch_kernel: int
    model_type: str

    @property
    def in_channels(self) -> int:
        return self.decoder.in_channels

    @property
    def max_stride(self) -> int:
        return self.decoder.max_stride

    @property
    def input_stride(self) -> int:
        return self.decoder.network_stride


@attrs.frozen
class SwinTSpec:
    """sleap-nn's Swin Transformer backbone (`backbone_config.swint`).

    Attributes:
        decoder: the options shared with ConvNeXt.
        embed: channels of the first stage; each later stage doubles them.
        depths: Swin blocks per stage (alternately unshifted and shifted).
        num_heads: attention heads per stage.
        patch_size: side of the stem's patch convolution.
        window_size: side of the attention windows.
        model_type: the config's `model_type` (a preset name or another).
    """

    decoder: DecoderSpec
    embed: int
    depths: tuple[int, ...]
    num_heads: tuple[int, ...]
    patch_size: int
    window_size: int
    model_type: str

    @property
    def channels(self) -> tuple[int, ...]:
        return tuple(self.embed * 2**stage for stage in range(len(self.depths)))

    @property
    def in_channels(self) -> int:
        return self.decoder.in_channels

    @property
    def max_stride(self) -> int:
        return self.decoder.max_stride

    @property
    def input_stride(self) -> int:
        return self.decoder.network_stride


def parse_convnext(reader: ConfigReader, section: Mapping, where: str) -> ConvNextSpec:
    """`backbone_config.convnext` as a `ConvNextSpec`.

    Raises:
        ModelConfigError: a value is missing, of the wrong kind, or describes a
            network sleap-nn cannot build.
    """
    model_type = _model_type(reader, section, where)
    if model_type in CONVNEXT_PRESETS:
        depths, channels = CONVNEXT_PRESETS[model_type]
    else:
        arch = _arch(reader, section, where)
        if arch is None:
            depths, channels = CONVNEXT_PRESETS["tiny"]
        else:
            depths = _stage_list(reader, arch, "depths", f"{where}.arch")
            channels = _stage_list(reader, arch, "channels", f"{where}.arch")
    spec = ConvNextSpec(
        decoder=_parse_decoder(reader, section, where),
        depths=depths,
        channels=channels,
        stem_patch_kernel=reader.integer(
            reader.required(section, "stem_patch_kernel", where),
            f"{where}.stem_patch_kernel",
            minimum=1,
        ),
        model_type=model_type,
    )
    return spec


def parse_swint(reader: ConfigReader, section: Mapping, where: str) -> SwinTSpec:
    """`backbone_config.swint` as a `SwinTSpec`.

    Raises:
        ModelConfigError: a value is missing, of the wrong kind, or describes a
            network sleap-nn cannot build.
    """
    model_type = _model_type(reader, section, where)
    if model_type in SWINT_PRESETS:
        embed, depths, num_heads = SWINT_PRESETS[model_type]
    else:
        arch = _arch(reader, section, where)
        if arch is None:
            embed, depths, num_heads = SWINT_PRESETS["tiny"]
        else:
            embed = reader.integer(
                reader.required(arch, "embed", f"{where}.arch"), f"{where}.arch.embed", minimum=1
            )
            depths = _stage_list(reader, arch, "depths", f"{where}.arch")
            num_heads = _stage_list(reader, arch, "num_heads", f"{where}.arch")
    for stage, heads in enumerate(num_heads):
        if (embed * 2**stage) % heads:
            raise reader.error(
                f"{where}.arch: stage {stage} has {embed * 2**stage} channels, not a "
                f"multiple of its {heads} attention heads"
            )
    return SwinTSpec(
        decoder=_parse_decoder(reader, section, where),
        embed=embed,
        depths=depths,
        num_heads=num_heads,
        patch_size=reader.integer(
            reader.required(section, "patch_size", where), f"{where}.patch_size", minimum=1
        ),
        window_size=reader.integer(
            reader.required(section, "window_size", where), f"{where}.window_size", minimum=1
        ),
        model_type=model_type,
    )


def _parse_decoder(reader: ConfigReader, section: Mapping, where: str) -> DecoderSpec:
    def value(key: str) -> Any:
        return reader.required(section, key, where)

    spec = DecoderSpec(
        in_channels=reader.integer(value("in_channels"), f"{where}.in_channels", minimum=1),
        kernel_size=reader.integer(value("kernel_size"), f"{where}.kernel_size", minimum=1),
        filters_rate=reader.number(value("filters_rate"), f"{where}.filters_rate"),
        convs_per_block=reader.integer(
            value("convs_per_block"), f"{where}.convs_per_block", minimum=1
        ),
        up_interpolate=reader.boolean(value("up_interpolate"), f"{where}.up_interpolate"),
        output_stride=reader.power_of_two(value("output_stride"), f"{where}.output_stride"),
        max_stride=reader.power_of_two(value("max_stride"), f"{where}.max_stride"),
        stem_patch_stride=reader.power_of_two(
            value("stem_patch_stride"), f"{where}.stem_patch_stride"
        ),
    )
    if spec.in_channels not in (1, 3):
        raise reader.error(f"{where}.in_channels is {spec.in_channels}; expected 1 or 3")
    if spec.convs_per_block < 2:
        raise reader.error(
            f"{where}.convs_per_block is 1; sleap-nn's middle block then cannot run "
            "(it expects the expanded channels)"
        )
    if spec.output_stride > spec.network_stride // 2:
        raise reader.error(
            f"{where}.output_stride {spec.output_stride} leaves no decoder below the "
            f"network's stride {spec.network_stride}"
        )
    return spec


def _model_type(reader: ConfigReader, section: Mapping, where: str) -> str:
    value = reader.optional(section, "model_type", where, str, "tiny")
    return str(value)


def _arch(reader: ConfigReader, section: Mapping, where: str) -> Mapping | None:
    arch = section.get("arch")
    return None if arch is None else reader.mapping(arch, f"{where}.arch")


def _stage_list(reader: ConfigReader, arch: Mapping, key: str, where: str) -> tuple[int, ...]:
    values = reader.required(arch, key, where)
    if (
        not isinstance(values, list)
        or len(values) != STAGES
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)
    ):
        raise reader.error(f"{where}.{key} is {values!r}; expected {STAGES} positive integers")
    return tuple(values)
