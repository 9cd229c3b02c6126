"""Windowed rates and latency percentiles, on a fake clock."""

from __future__ import annotations

import pytest

from sleap_live.stream.stats import LatencyWindow, RateMeter
from tests.stream import fakes as stream_fakes


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rate_over_the_window_and_decay_when_events_stop():
    clock = FakeClock()
    meter = RateMeter(2.0, clock=clock)
    assert meter.rate() == 0.0
    for _ in range(90):  # 30 per second for 3 s
        clock.now += 1 / 30
        meter.add()
    assert meter.rate() == pytest.approx(30.0, rel=0.05)
    clock.now += 1.0
    assert meter.rate() == pytest.approx(15.0, rel=0.05)
    clock.now += 1.5
    assert meter.rate() == 0.0


def test_rate_before_a_full_window_uses_the_time_elapsed():
    clock = FakeClock()
    meter = RateMeter(2.0, clock=clock)
    clock.now = 10.0
    meter.start()
    clock.now = 10.5
    meter.add(8)
    assert meter.rate() == pytest.approx(16.0)


def test_rate_meter_rejects_a_bad_window():
    with pytest.raises(ValueError, match="window must be positive seconds, got 0"):
        RateMeter(0)


def test_latency_percentiles_cover_only_recent_values():
    window = LatencyWindow(size=100)
    assert window.percentiles(50, 99) == (None, None)
    for value in range(1000):
        window.add(value / 1000)
    p50, p99 = window.percentiles(50, 99)
    assert p50 == pytest.approx(0.9495) and p99 == pytest.approx(0.999, abs=1e-3)
    with pytest.raises(ValueError, match="at least 1"):
        LatencyWindow(0)


def test_eta_from_remaining_frames_and_rate():
    assert stream_fakes.pipeline_stats().eta == pytest.approx(3.0)
    assert stream_fakes.pipeline_stats(frames_total=None).eta is None
    assert stream_fakes.pipeline_stats(fps=0.0).eta is None
