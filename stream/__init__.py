"""sleap-live stream: sources, the realtime pipeline, the ring buffer, its consumers and
the outputs (the command line is `sleap_live.cli`).

Each name below is imported from its module on first use, so importing one part of the
stream (`sleap_live.stream.errors`, say) does not load them all (sleap_io, h5py, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sleap_live import _lazy_names

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
    from sleap_live.stream.sources import SourceOptions, open_source
    from sleap_live.stream.sources.group import SourceGroup
    from sleap_live.stream.stats import ConsumerStats, PipelineStats, PublishStats
    from sleap_live.stream.tracking import TrackingSettings
    from sleap_live.stream.types import Frame, PoseRecord

__all__ = [
    "MONOTONIC",
    "Clock",
    "ConsumerStats",
    "Frame",
    "ManyResult",
    "OutputOptions",
    "Pipeline",
    "PipelineError",
    "PipelineRun",
    "PipelineStats",
    "PoseRecord",
    "PublishError",
    "PublishStats",
    "Publisher",
    "RingBuffer",
    "RingConsumer",
    "RingReader",
    "SlpWriter",
    "SourceError",
    "SourceGroup",
    "SourceNotFoundError",
    "SourceOptions",
    "SourceStalledError",
    "StreamError",
    "TrackingSettings",
    "VideoRecorder",
    "VideoResult",
    "open_source",
    "run_many",
]

# The modules of the public names.
_ORIGINS = {
    **dict.fromkeys(("MONOTONIC", "Clock"), "sleap_live.stream.clock"),
    **dict.fromkeys(("PipelineRun", "RingConsumer"), "sleap_live.stream.consumers"),
    **dict.fromkeys(
        (
            "PipelineError",
            "PublishError",
            "SourceError",
            "SourceNotFoundError",
            "SourceStalledError",
            "StreamError",
        ),
        "sleap_live.stream.errors",
    ),
    **dict.fromkeys(("ManyResult", "VideoResult", "run_many"), "sleap_live.stream.many"),
    **dict.fromkeys(("RingBuffer", "RingReader"), "sleap_live.stream.ring"),
    **dict.fromkeys(("ConsumerStats", "PipelineStats", "PublishStats"), "sleap_live.stream.stats"),
    **dict.fromkeys(("Frame", "PoseRecord"), "sleap_live.stream.types"),
    "OutputOptions": "sleap_live.stream.outputs.options",
    "VideoRecorder": "sleap_live.stream.outputs.recorder",
    "SlpWriter": "sleap_live.stream.outputs.slp",
    "Pipeline": "sleap_live.stream.pipeline",
    "Publisher": "sleap_live.stream.publish",
    **dict.fromkeys(("SourceOptions", "open_source"), "sleap_live.stream.sources"),
    "SourceGroup": "sleap_live.stream.sources.group",
    "TrackingSettings": "sleap_live.stream.tracking",
}

__getattr__, __dir__ = _lazy_names(__name__, _ORIGINS)
