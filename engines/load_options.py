"""`LoadOptions`: how a model is loaded, in one frozen record checked when made.

A module of its own, importing plain records only (the engine table, the device
forms, the settings), so that the stream's modules (`Pipeline`, `run_many` and its
workers) hold the record without importing the runners or the exporters (which
import the stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines import engine_table
from sleap_live.engines.engine_table import EXPORT_OPTIONS
from sleap_live.engines.runners.devices import DEVICE_FORMS, is_device
from sleap_live.engines.settings import InferenceSettings


@attrs.frozen
class LoadOptions:
    """How a model is loaded: `load_runner`'s arguments bar the model paths and the
    progress callback, in one frozen record checked when it is made.

    The command line builds one from its options (a Python caller makes its own);
    `Pipeline` loads model paths with it, and `run_many` hands it unchanged (it
    pickles) to every worker process and Ray actor, which load with
    `load_runner(paths, **load.arguments())`.

    Attributes:
        engine, device, threads, cache, cache_dir, settings: `load_runner`'s.
        options: its other options (`**options`: the engine's, from the engine
            table, and the in-memory export's).

    Raises:
        ValueError: an unknown engine or device.
        TypeError: an option the engine does not take.
    """

    engine: str = "auto"
    device: str = "auto"
    threads: int | None = None
    cache: bool = True
    cache_dir: str | Path | None = None
    settings: InferenceSettings | None = None
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        row = engine_table.engine(self.engine)
        if not is_device(self.device):
            raise ValueError(f"unknown device {self.device!r} (expected {DEVICE_FORMS})")
        unknown = set(self.options) - {*EXPORT_OPTIONS, *row.options}
        if unknown:
            raise TypeError(f"load_runner got unknown options {sorted(unknown)}")

    def arguments(self) -> dict[str, Any]:
        """`load_runner`'s keyword arguments."""
        fields = attrs.asdict(self, recurse=False)
        options = fields.pop("options")
        return {**fields, **options}
