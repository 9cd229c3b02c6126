"""Typed access to a config's plain YAML values, with errors that name the file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sleap_live.engines.errors import ModelConfigError

_MISSING = object()


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

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{where} is {value!r}; expected an integer >= {minimum}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.error(f"{where} is {value!r}; expected a positive number")
        return float(value)

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(f"{where} is {value!r}; expected true or false")
        return value

    def power_of_two(self, value: Any, where: str) -> int:
        value = self.integer(value, where, minimum=1)
        if value & (value - 1):
            raise self.error(f"{where} is {value}; expected a power of two")
        return value


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
