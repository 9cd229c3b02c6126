"""sleap-live stream: sources, the realtime pipeline, the ring buffer, its consumers and
the outputs (the command line is `sleap_live.cli`)."""

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
    "SourceStalledError",
    "StreamError",
    "TrackingSettings",
    "VideoRecorder",
    "VideoResult",
    "open_source",
    "run_many",
]
