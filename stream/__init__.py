"""sleap-live stream: sources, the realtime pipeline, the ring buffer, its consumers and
the outputs (the command line is `sleap_live.cli`).

Each name below is imported from its module on first use, so importing one part of the
stream (`sleap_live.stream.errors`, say) does not load them all (sleap_io, h5py, aiohttp).
"""

# The type checker's imports below are the lazy names' declarations, used by no code here.
# ruff: noqa: F401

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sleap_live.stream.clock import MONOTONIC, Clock
    from sleap_live.stream.consumers import PipelineRun, RingConsumer
    from sleap_live.stream.errors import (
        PipelineError,
        PublishError,
        SourceError,
        SourceNotFoundError,
        SourceStalledError,
        StreamError,
    )
    from sleap_live.stream.many import ManyResult, VideoResult, run_many
    from sleap_live.stream.outputs.options import OutputOptions
    from sleap_live.stream.outputs.recorder import VideoRecorder
    from sleap_live.stream.outputs.slp import SlpWriter
    from sleap_live.stream.pipeline import Pipeline
    from sleap_live.stream.publish import Publisher
    from sleap_live.stream.ring import RingBuffer, RingReader
    from sleap_live.stream.sources import open_source
    from sleap_live.stream.sources.group import SourceGroup
    from sleap_live.stream.stats import ConsumerStats, PipelineStats, PublishStats
    from sleap_live.stream.tracking import TrackingSettings
    from sleap_live.stream.types import Frame, PoseRecord

# Each public name and the module it comes from.
_ORIGINS = {
    "MONOTONIC": "sleap_live.stream.clock",
    "Clock": "sleap_live.stream.clock",
    "ConsumerStats": "sleap_live.stream.stats",
    "Frame": "sleap_live.stream.types",
    "ManyResult": "sleap_live.stream.many",
    "OutputOptions": "sleap_live.stream.outputs.options",
    "Pipeline": "sleap_live.stream.pipeline",
    "PipelineError": "sleap_live.stream.errors",
    "PipelineRun": "sleap_live.stream.consumers",
    "PipelineStats": "sleap_live.stream.stats",
    "PoseRecord": "sleap_live.stream.types",
    "PublishError": "sleap_live.stream.errors",
    "PublishStats": "sleap_live.stream.stats",
    "Publisher": "sleap_live.stream.publish",
    "RingBuffer": "sleap_live.stream.ring",
    "RingConsumer": "sleap_live.stream.consumers",
    "RingReader": "sleap_live.stream.ring",
    "SlpWriter": "sleap_live.stream.outputs.slp",
    "SourceError": "sleap_live.stream.errors",
    "SourceGroup": "sleap_live.stream.sources.group",
    "SourceNotFoundError": "sleap_live.stream.errors",
    "SourceStalledError": "sleap_live.stream.errors",
    "StreamError": "sleap_live.stream.errors",
    "TrackingSettings": "sleap_live.stream.tracking",
    "VideoRecorder": "sleap_live.stream.outputs.recorder",
    "VideoResult": "sleap_live.stream.many",
    "open_source": "sleap_live.stream.sources",
    "run_many": "sleap_live.stream.many",
}

__all__ = list(_ORIGINS)


def __getattr__(name: str) -> Any:
    origin = _ORIGINS.get(name)
    if origin is None:
        raise AttributeError(f"module 'sleap_live.stream' has no attribute {name!r}")
    return getattr(importlib.import_module(origin), name)


def __dir__() -> list[str]:
    return sorted({*__all__, *globals()})
