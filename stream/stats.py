"""Pipeline telemetry: windowed rates, latency percentiles, the stage timeline and
the snapshot record.

Meters are written by pipeline stages and read by whoever asks for
`Pipeline.stats` (a dashboard refreshing a few times a second, a test, a user).
Both sides may be on different threads; each meter guards its own state.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from sleap_live.stream.batching import StageTimes
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.types import Frame, PoseRecord

# Batches whose stage times `StageMeters.timeline` keeps: the first ones show the
# overlap, and a camera running for hours must not grow a list without end.
TIMELINE_BATCHES = 512


class RateMeter:
    """Events per second over a sliding time window.

    Args:
        window: length of the window in seconds.
        clock: the current time in seconds; only read, so any callable that
            returns seconds will do. Injectable for tests.

    Notes:
        Before a full window has passed since `start()`, the rate is taken over
        the time elapsed so far, so the first readings are not biased low.
        Samples older than the window are discarded on every call, so memory is
        bounded by the event rate times the window.
    """

    def __init__(self, window: float = 2.0, *, clock: Clock = MONOTONIC) -> None:
        if window <= 0:
            raise ValueError(f"RateMeter window must be positive seconds, got {window!r}")
        self._window = window
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        self._in_window = 0
        self._started_at = clock()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Forget every sample and start timing from now."""
        with self._lock:
            self._samples.clear()
            self._in_window = 0
            self._started_at = self._clock()

    def add(self, count: int = 1) -> None:
        """Record `count` events happening now."""
        with self._lock:
            now = self._clock()
            self._samples.append((now, count))
            self._in_window += count
            self._trim(now)

    def rate(self) -> float:
        """Events per second over the last window (0.0 before any time has passed)."""
        with self._lock:
            now = self._clock()
            self._trim(now)
            span = min(self._window, now - self._started_at)
            return self._in_window / span if span > 0 else 0.0

    def _trim(self, now: float) -> None:
        horizon = now - self._window
        while self._samples and self._samples[0][0] <= horizon:
            self._in_window -= self._samples.popleft()[1]


class LatencyWindow:
    """Percentiles of the most recent `size` durations.

    Args:
        size: how many recent values the percentiles are computed over.
    """

    def __init__(self, size: int = 1000) -> None:
        if size < 1:
            raise ValueError(f"LatencyWindow size must be at least 1, got {size!r}")
        self._values: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        """Record one duration in seconds."""
        with self._lock:
            self._values.append(seconds)

    def percentiles(self, *quantiles: float) -> tuple[float | None, ...]:
        """The requested percentiles (0-100) in seconds, or None for each if empty."""
        with self._lock:
            values = np.fromiter(self._values, dtype=np.float64, count=len(self._values))
        if values.size == 0:
            return tuple(None for _ in quantiles)
        return tuple(float(v) for v in np.percentile(values, quantiles))


@attrs.frozen
class ConsumerStats:
    """How one consumer (an `on_poses` callback or an iterator) keeps up.

    Attributes:
        name: the callback's name, or "iterator".
        delivered: records handed to the consumer.
        skipped: records the consumer never saw because it fell behind.
        error: the exception the callback raised (``"KeyError: 'arena'"``), after
            which it was detached; None while it has not failed.
        stalled: it spent longer than its stall timeout on one record, so the
            pipeline stopped waiting for it (a lossless consumer was detached, or
            `stop` abandoned its thread).
    """

    name: str
    delivered: int
    skipped: int
    error: str | None = None
    stalled: bool = False


@attrs.frozen
class PublishStats:
    """What the pose publisher (`pipeline.attach(publisher)`, `--publish`) sent.

    Attributes:
        endpoint: the ZeroMQ endpoint bound.
        sent: messages handed to ZeroMQ, one per pose record (with no subscriber
            connected, ZeroMQ discards them).
        skipped: records the publisher never sent because it fell behind the ring.
            Messages ZeroMQ drops for a subscriber whose queue is full are not seen
            here; subscribers count them from gaps in the messages' ``sequence``.
        subscribers: subscriptions held now (one per subscriber and topic).
    """

    endpoint: str
    sent: int
    skipped: int
    subscribers: int


@attrs.frozen
class PipelineStats:
    """A snapshot of a running (or finished) pipeline; every field is read-only.

    Attributes:
        policy: "live" or "recorded".
        batch_size: most frames run through the engine at once.
        running: True until every stage has finished.
        elapsed: seconds since the pipeline started.
        frames_total: frames in the source, or None for live or unknown-length sources.
        frames_captured: frames read from the source.
        frames_processed: frames whose poses were emitted.
        frames_dropped: frames that never reached the output: those the source
            skipped (a replay falling behind its rate), those discarded because
            inference fell behind (never under the recorded policy), and those
            captured but discarded by `stop()` before the engine took them. Once
            the pipeline has stopped, frames_processed + frames_dropped is every
            frame the source captured or skipped.
        fps: processed frames per second over the recent window; once stopped,
            over the whole run.
        capture_fps: captured frames per second over the recent window; once
            stopped, over the whole run.
        latency_p50: median capture-to-pose latency in seconds over recent frames,
            None before the first frame.
        latency_p99: 99th percentile of the same.
        engine_latency_p50: median time the runner took per batch, in seconds.
        engine_latency_p99: 99th percentile of the same.
        queue_depths: items waiting in each channel between stages, by channel name.
        instances_last_frame: instances found in the most recent frame.
        consumers: one entry per attached consumer.
        publish: the pose publisher's counts, None without one.
        dropped_by_source: `frames_dropped` by source id (several sources: a
            `SourceGroup`); a source with none dropped is there with 0.
        tracking_p50: median seconds the tracker took per frame (emit stage), None
            without tracking or before the first frame.
        tracking_p99: 99th percentile of the same.
        tracks: tracks started so far (every source together); 0 without tracking.
        frames_with_instances: frames processed in which the model found any
            instance, or a box detector any box (none over a whole run: the model
            may not fit the video).
    """

    policy: str
    batch_size: int
    running: bool
    elapsed: float
    frames_total: int | None
    frames_captured: int
    frames_processed: int
    frames_dropped: int
    fps: float
    capture_fps: float
    latency_p50: float | None
    latency_p99: float | None
    engine_latency_p50: float | None
    engine_latency_p99: float | None
    queue_depths: Mapping[str, int]
    instances_last_frame: int
    consumers: tuple[ConsumerStats, ...] = ()
    publish: PublishStats | None = None
    dropped_by_source: Mapping[str, int] = attrs.field(factory=dict)
    tracking_p50: float | None = None
    tracking_p99: float | None = None
    tracks: int = 0
    frames_with_instances: int = 0

    @property
    def eta(self) -> float | None:
        """Seconds until the source is exhausted at the current rate, if knowable."""
        if self.frames_total is None or self.fps <= 0:
            return None
        return max(self.frames_total - self.frames_processed, 0) / self.fps


class StageMeters:
    """What a pipeline's stages count and time, turned into `PipelineStats` on request.

    Each counter is written by one stage thread; `snapshot` may run on any thread.

    Args:
        clock: the pipeline's clock, for rates and elapsed time.
    """

    def __init__(self, clock: Clock = MONOTONIC) -> None:
        self._clock = clock
        self.captured = 0
        self.processed = 0
        self.batch_frames_dropped = 0
        self.frames_discarded = 0
        # Frames of each source these meters counted as dropped or discarded.
        self._lost_by_source: Counter[str] = Counter()
        self.instances_last_frame = 0
        self.frames_with_instances = 0
        self._capture_rate = RateMeter(clock=clock)
        self._process_rate = RateMeter(clock=clock)
        self._latency = LatencyWindow()
        self._engine_latency = LatencyWindow()
        self._tracking_time = LatencyWindow()
        self.tracks = 0
        self._started_at: float | None = None
        self._stopped_at: float | None = None
        # Stage times of the first TIMELINE_BATCHES batches, appended by emit only.
        self._timeline: list[StageTimes] = []

    def start(self) -> None:
        """The pipeline started: elapsed time and rates count from now."""
        self._started_at = self._clock()
        self._capture_rate.start()
        self._process_rate.start()

    def stop(self) -> None:
        """The last record was emitted: elapsed time stops here."""
        self._stopped_at = self._clock()

    def frame_captured(self) -> None:
        self.captured += 1
        self._capture_rate.add()

    def batch_dropped(self, frames: Sequence[Frame]) -> None:
        """A live batch of these frames was replaced by a newer one before the engine."""
        self.batch_frames_dropped += len(frames)
        self._lost_by_source.update(frame.source_id for frame in frames)

    def discarded(self, frames: Sequence[Frame]) -> None:
        """These captured frames were let go by a stopping pipeline, unprocessed."""
        self.frames_discarded += len(frames)
        self._lost_by_source.update(frame.source_id for frame in frames)

    def engine_ran(self, seconds: float) -> None:
        self._engine_latency.add(seconds)

    def frame_tracked(self, seconds: float, tracks: int) -> None:
        """The tracker took `seconds` on a frame; `tracks` started so far."""
        self._tracking_time.add(seconds)
        self.tracks = tracks

    def record_emitted(self, record: PoseRecord) -> None:
        self.processed += 1
        self._process_rate.add()
        self._latency.add(record.latency)
        self.instances_last_frame = record.poses.n_instances
        boxes, masks = record.poses.boxes, record.poses.masks
        self.frames_with_instances += (
            record.poses.n_instances > 0
            or (boxes is not None and boxes.n_boxes > 0)
            or (masks is not None and masks.n_masks > 0)
        )

    def batch_emitted(self, times: StageTimes) -> None:
        """A batch's records are out: its stage times join the timeline while it has room."""
        if len(self._timeline) < TIMELINE_BATCHES:
            self._timeline.append(times)

    def timeline(self) -> list[StageTimes]:
        """Stage times of the first `TIMELINE_BATCHES` batches emitted, in order."""
        return list(self._timeline)

    def snapshot(
        self,
        *,
        policy: str,
        batch_size: int,
        running: bool,
        frames_total: int | None,
        frames_dropped: Mapping[str, int],
        queue_depths: Mapping[str, int],
        consumers: Sequence[ConsumerStats],
    ) -> PipelineStats:
        """The stats record; `frames_dropped` adds the frames dropped outside these
        meters, by source id (every source of the pipeline, 0 where none)."""
        latency = self._latency.percentiles(50, 99)
        engine = self._engine_latency.percentiles(50, 99)
        tracking = self._tracking_time.percentiles(50, 99)
        if self._started_at is None:
            elapsed = 0.0
        else:
            end = self._stopped_at if self._stopped_at is not None else self._clock()
            elapsed = end - self._started_at
        if self._stopped_at is None:
            fps, capture_fps = self._process_rate.rate(), self._capture_rate.rate()
        else:  # the windows empty once frames stop coming: report the run's rates
            fps = self.processed / elapsed if elapsed > 0 else 0.0
            capture_fps = self.captured / elapsed if elapsed > 0 else 0.0
        return PipelineStats(
            policy=policy,
            batch_size=batch_size,
            running=running,
            elapsed=elapsed,
            frames_total=frames_total,
            frames_captured=self.captured,
            frames_processed=self.processed,
            frames_dropped=sum(frames_dropped.values())
            + self.batch_frames_dropped
            + self.frames_discarded,
            fps=fps,
            capture_fps=capture_fps,
            latency_p50=latency[0],
            latency_p99=latency[1],
            engine_latency_p50=engine[0],
            engine_latency_p99=engine[1],
            queue_depths=dict(queue_depths),
            instances_last_frame=self.instances_last_frame,
            frames_with_instances=self.frames_with_instances,
            consumers=tuple(consumers),
            dropped_by_source={
                source: outside + self._lost_by_source[source]
                for source, outside in frames_dropped.items()
            },
            tracking_p50=tracking[0],
            tracking_p99=tracking[1],
            tracks=self.tracks,
        )
