"""Pipeline telemetry: windowed rates, latency percentiles and the snapshot record.

Meters are written by pipeline stages and read by whoever asks for
`Pipeline.stats` (a dashboard refreshing a few times a second, a test, a user).
Both sides may be on different threads; each meter guards its own state.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

import attrs
import numpy as np

Clock = Callable[[], float]


class RateMeter:
    """Events per second over a sliding time window.

    Args:
        window: length of the window in seconds.
        clock: returns the current time in seconds; injectable for tests.

    Notes:
        Before a full window has passed since `start()`, the rate is taken over
        the time elapsed so far, so the first readings are not biased low.
        Samples older than the window are discarded on every call, so memory is
        bounded by the event rate times the window.
    """

    def __init__(self, window: float = 2.0, *, clock: Clock = time.monotonic) -> None:
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
    """

    name: str
    delivered: int
    skipped: int


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
        frames_dropped: captured frames discarded because inference fell behind
            (always 0 for the recorded policy).
        fps: processed frames per second over the recent window.
        capture_fps: captured frames per second over the recent window.
        latency_p50: median capture-to-pose latency in seconds over recent frames,
            None before the first frame.
        latency_p99: 99th percentile of the same.
        engine_latency_p50: median time the runner took per batch, in seconds.
        engine_latency_p99: 99th percentile of the same.
        queue_depths: items waiting in each channel between stages, by channel name.
        instances_last_frame: instances found in the most recent frame.
        consumers: one entry per attached consumer.
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

    @property
    def eta(self) -> float | None:
        """Seconds until the source is exhausted at the current rate, if knowable."""
        if self.frames_total is None or self.fps <= 0:
            return None
        return max(self.frames_total - self.frames_processed, 0) / self.fps
