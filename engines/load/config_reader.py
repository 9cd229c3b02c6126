"""Typed access to a config's plain YAML values, with errors that name the file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sleap_live.engines.errors import ModelConfigError

_MISSING = object()

# Bounds on a UNet that a config (sleap-nn's or SLEAP 1.x's) may ask for, checked
# before the network is sized, so a crafted config is refused in one line:
# - SLEAP 1.4's training editor offers UNet max strides 2 to 64
#   (sleap/config/training_editor_form.yaml), sleap-nn's configs 8 to 32; 1024 leaves
#   10 pooling levels.
MAX_STRIDE = 1024
# - SLEAP 1.x's defaults (filters 64, filters_rate 2, max_stride 64, middle block)
#   make 4,096 channels at the widest layer, sleap-nn's (32, 1.5, 16) 162; the
#   network's total size is bounded again by its weights file.
MAX_CHANNELS = 65536
# - Kernel sizes and block repeats (sleap-nn's defaults: kernel 3, 2 convolutions a
#   block, 1 stack): each module is built before the weights file can bound it.
MAX_KERNEL_SIZE = 64
MAX_REPEATS = 64
# - A tiling's tile is one network input; sleap-nn sizes it from the animals
#   (`compute_suggested_tile_size`), hundreds of pixels. 16384 (a 1 GB float32
#   grey input) is above any camera's frame, where tiling would be pointless.
MAX_TILE_SIZE = 16384


class ConfigReader:
    """Typed access to the config's plain YAML values with errors naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{self.path}: {problem}")

    def mapping(self, value: Any, where: str) -> Mapping:
        if not isinstance(value, Mapping):
            raise self.error(f"{where} is not a mapping")
        return value

    def section(self, parent: Mapping, where: str, key: str) -> Mapping:
        """The mapping at `where.key`, which must exist."""
        value = self.required(parent, key, where)
        return self.mapping(value, f"{where}.{key}" if where else key)

    def required(self, parent: Mapping, key: str, where: str) -> Any:
        if key not in parent:
            dotted = f"{where}.{key}" if where else key
            raise self.error(f"missing key {dotted}")
        return parent[key]

    def optional(self, parent: Mapping, key: str, where: str, kind: Any, default: Any) -> Any:
        value = parent.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(f"{where}.{key} is {value!r}; expected {_kind_name(kind)}")
        return value

    def supported(self, parent: Mapping, key: str, where: str, supported: tuple) -> None:
        """Refuses `where.key` unless it is absent, null or one of `supported`."""
        value = parent.get(key)
        if value is None or any(value == ok and type(value) is type(ok) for ok in supported):
            return
        raise self.error(
            f"{where}.{key} {yaml_value(value)} is not supported "
            f"(supported: {', '.join(yaml_value(ok, quote=False) for ok in supported)})"
        )

    def integer(self, value: Any, where: str, minimum: int, most: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{where} is {value!r}; expected an integer >= {minimum}")
        if most is not None and value > most:
            raise self.error(f"{where} is {value}; at most {most} is run")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.error(f"{where} is {value!r}; expected a positive number")
        return float(value)

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(f"{where} is {value!r}; expected true or false")
        return value

    def power_of_two(self, value: Any, where: str, most: int | None = None) -> int:
        value = self.integer(value, where, minimum=1, most=most)
        if value & (value - 1):
            raise self.error(f"{where} is {value}; expected a power of two")
        return value


def check_unet_channels(
    reader: ConfigReader, filters: int, rate: float, levels: int, where: str
) -> None:
    """Refuses a UNet level of no channels or of more than `MAX_CHANNELS`, level by
    level (both frameworks' `int(filters * filters_rate**n)`), so a huge rate is
    refused before it overflows. `levels`: the encoder's and the middle block's."""
    channels = float(filters)
    for level in range(levels):
        if not 1 <= channels <= MAX_CHANNELS:
            raise reader.error(
                f"{where}.filters_rate {rate!r} gives {filters} x {rate!r}^{level} channels "
                f"at level {level}; expected 1 to {MAX_CHANNELS}"
            )
        channels *= rate


def yaml_value(value: Any, quote: bool = True) -> str:
    """`value` as the config spells it: true/false, strings quoted if `quote`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if quote or not isinstance(value, str) else value


def _kind_name(kind: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if isinstance(kind, tuple):
        return "a number" if set(kind) == {int, float} else " or ".join(map(_kind_name, kind))
    if kind is Mapping:
        return "a mapping"
    return names.get(kind, kind.__name__)
