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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from sleap_live.engines.load.config_reader import (
    MAX_CHANNELS,
    MAX_KERNEL_SIZE,
    MAX_REPEATS,
    MAX_STRIDE,
    ConfigReader,
)

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
Architecture = TypeVar("Architecture")


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
class _EncoderBackboneSpec:
    """What the ConvNeXt and Swin backbones share: the options beyond the encoder.

    Attributes:
        decoder: the options shared by ConvNeXt and Swin.
    """

    decoder: DecoderSpec

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
class ConvNextSpec(_EncoderBackboneSpec):
    """sleap-nn's ConvNeXt backbone (`backbone_config.convnext`).

    Attributes:
        decoder: the options shared with Swin.
        depths: ConvNeXt blocks per stage.
        channels: channels per stage.
        stem_patch_kernel: side of the stem's patch convolution.
        model_type: the config's `model_type` (a preset name or another).
    """

    depths: tuple[int, ...]
    channels: tuple[int, ...]
    stem_patch_kernel: int
    model_type: str


@attrs.frozen
class SwinTSpec(_EncoderBackboneSpec):
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

    embed: int
    depths: tuple[int, ...]
    num_heads: tuple[int, ...]
    patch_size: int
    window_size: int
    model_type: str

    @property
    def channels(self) -> tuple[int, ...]:
        return tuple(self.embed * 2**stage for stage in range(len(self.depths)))


# A backbone made of an encoder and the decoder options (`_EncoderBackboneSpec`).
EncoderBackboneSpec = ConvNextSpec | SwinTSpec


def parse_convnext(reader: ConfigReader, section: Mapping, where: str) -> ConvNextSpec:
    """`backbone_config.convnext` as a `ConvNextSpec`.

    Raises:
        ModelConfigError: a value is missing, of the wrong kind, or describes a
            network sleap-nn cannot build.
    """

    def read_arch(arch: Mapping) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (
            _stage_list(reader, arch, "depths", f"{where}.arch", MAX_REPEATS),
            _stage_list(reader, arch, "channels", f"{where}.arch", MAX_CHANNELS),
        )

    model_type, (depths, channels) = _architecture(
        reader, section, where, CONVNEXT_PRESETS, read_arch
    )
    return ConvNextSpec(
        decoder=_parse_decoder(reader, section, where),
        depths=depths,
        channels=channels,
        stem_patch_kernel=_positive(reader, section, "stem_patch_kernel", where, MAX_KERNEL_SIZE),
        model_type=model_type,
    )


def parse_swint(reader: ConfigReader, section: Mapping, where: str) -> SwinTSpec:
    """`backbone_config.swint` as a `SwinTSpec`.

    Raises:
        ModelConfigError: a value is missing, of the wrong kind, or describes a
            network sleap-nn cannot build.
    """

    def read_arch(arch: Mapping) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        return (
            _positive(reader, arch, "embed", f"{where}.arch", MAX_CHANNELS),
            _stage_list(reader, arch, "depths", f"{where}.arch", MAX_REPEATS),
            _stage_list(reader, arch, "num_heads", f"{where}.arch", MAX_CHANNELS),
        )

    model_type, (embed, depths, num_heads) = _architecture(
        reader, section, where, SWINT_PRESETS, read_arch
    )
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
        patch_size=_positive(reader, section, "patch_size", where, MAX_KERNEL_SIZE),
        window_size=_positive(reader, section, "window_size", where, MAX_KERNEL_SIZE),
        model_type=model_type,
    )


def _parse_decoder(reader: ConfigReader, section: Mapping, where: str) -> DecoderSpec:
    def value(key: str) -> Any:
        return reader.required(section, key, where)

    spec = DecoderSpec(
        in_channels=_positive(reader, section, "in_channels", where, MAX_CHANNELS),
        kernel_size=_positive(reader, section, "kernel_size", where, MAX_KERNEL_SIZE),
        filters_rate=reader.number(value("filters_rate"), f"{where}.filters_rate"),
        convs_per_block=_positive(reader, section, "convs_per_block", where, MAX_REPEATS),
        up_interpolate=reader.boolean(value("up_interpolate"), f"{where}.up_interpolate"),
        output_stride=reader.power_of_two(
            value("output_stride"), f"{where}.output_stride", MAX_STRIDE
        ),
        max_stride=reader.power_of_two(value("max_stride"), f"{where}.max_stride", MAX_STRIDE),
        stem_patch_stride=reader.power_of_two(
            value("stem_patch_stride"), f"{where}.stem_patch_stride", MAX_STRIDE
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


def _architecture(
    reader: ConfigReader,
    section: Mapping,
    where: str,
    presets: Mapping[str, Architecture],
    read_arch: Callable[[Mapping], Architecture],
) -> tuple[str, Architecture]:
    """The config's `model_type` and the architecture it picks, as sleap-nn picks it:
    a preset by name, else `arch` (read by `read_arch`), else the "tiny" preset."""
    model_type = str(reader.optional(section, "model_type", where, str, "tiny"))
    if model_type in presets:
        return model_type, presets[model_type]
    arch = section.get("arch")
    if arch is None:
        return model_type, presets["tiny"]
    return model_type, read_arch(reader.mapping(arch, f"{where}.arch"))


def _positive(reader: ConfigReader, section: Mapping, key: str, where: str, most: int) -> int:
    """The required positive integer `key` of `section`, at most `most`."""
    value = reader.required(section, key, where)
    return reader.integer(value, f"{where}.{key}", minimum=1, most=most)


def _stage_list(
    reader: ConfigReader, arch: Mapping, key: str, where: str, most: int
) -> tuple[int, ...]:
    values = reader.required(arch, key, where)
    if (
        not isinstance(values, list)
        or len(values) != STAGES
        or not all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= most for v in values
        )
    ):
        raise reader.error(
            f"{where}.{key} is {values!r}; expected {STAGES} integers from 1 to {most}"
        )
    return tuple(values)
