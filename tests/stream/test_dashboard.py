"""The dashboard and progress bar, rendered into a fixed-width capture console."""

from __future__ import annotations

import io

from rich.console import Console

from sleap_live.stream.dashboard import Dashboard, ProgressView, live_display
from sleap_live.stream.stats import ConsumerStats, PipelineStats
from tests.stream import fakes as stream_fakes


def snapshot(**changes) -> PipelineStats:
    """A live run 75 s in."""
    live = dict(
        policy="live",
        batch_size=1,
        elapsed=75.3,
        frames_total=None,
        frames_captured=2000,
        frames_processed=1990,
        frames_dropped=10,
        fps=29.97,
        capture_fps=30.0,
        latency_p50=0.0412,
        latency_p99=0.063,
        engine_latency_p50=0.0301,
        engine_latency_p99=0.0352,
        queue_depths={"frames": 0, "batches": 1, "results": 0, "slp": 3},
        instances_last_frame=2,
        consumers=(ConsumerStats("on_poses", 1900, 90),),
    )
    return stream_fakes.pipeline_stats(**{**live, **changes})


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=80, color_system=None, force_terminal=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def test_dashboard_shows_rates_latency_drops_instances_and_queues():
    assert render(Dashboard(snapshot)) == (
        "sleap-live · live · batch 1 · 0:01:15\n"
        "frames     captured 2000  processed 1990  dropped 10 (0.5%)\n"
        "rate       30.0 fps  (capture 30.0 fps)\n"
        "latency    p50 41.2 ms  p99 63.0 ms  (engine p50 30.1 ms  p99 35.2 ms)\n"
        "instances  2 in last frame\n"
        "queues     frames 0  batches 1  results 0  slp 3\n"
        "consumer   on_poses: 1900 delivered, 90 skipped"
    )


def test_dashboard_before_the_first_frame():
    text = render(
        Dashboard(
            lambda: snapshot(
                running=False,
                elapsed=0.0,
                frames_captured=0,
                frames_processed=0,
                frames_dropped=0,
                latency_p50=None,
                latency_p99=None,
                engine_latency_p50=None,
                engine_latency_p99=None,
                consumers=(),
            )
        )
    )
    assert "sleap-live · live · batch 1 · 0:00:00 · stopped" in text
    assert "captured 0  processed 0  dropped 0\n" in text
    assert "p50 —  p99 —  (engine p50 —  p99 —)" in text


def test_dashboard_pulls_a_fresh_snapshot_on_every_render():
    calls = []

    def get_stats():
        calls.append(1)
        return snapshot(frames_processed=len(calls))

    dashboard = Dashboard(get_stats)
    assert "processed 1 " in render(dashboard)
    assert "processed 2 " in render(dashboard)


def test_progress_bar_with_known_length():
    stats = snapshot(
        policy="recorded", frames_total=300, frames_processed=120, fps=24.0, elapsed=5.0
    )
    text = render(ProgressView(lambda: stats, width=20))
    assert text.endswith("120/300 frames · 24.0 fps · ETA 0:00:07")
    assert text.startswith("━━━━━━━━")
    finished = render(
        ProgressView(lambda: snapshot(frames_total=300, frames_processed=300, running=False))
    )
    assert finished.endswith("300/300 frames · 30.0 fps · 0:01:15")


def test_progress_past_an_estimated_length_is_a_counter():
    stats = snapshot(policy="recorded", frames_total=30, frames_processed=45, fps=30.0)
    assert render(ProgressView(lambda: stats)) == "45 frames · 30.0 fps · 0:01:15"


def test_progress_without_length_is_a_counter():
    # A live run has no length, hence no bar and no ETA: frames, rate, elapsed time.
    assert render(ProgressView(snapshot)) == "1990 frames · 30.0 fps · 0:01:15"


def test_live_display_prints_the_final_state_on_a_plain_stream():
    console = Console(file=io.StringIO(), width=80, color_system=None, force_terminal=False)
    with live_display(Dashboard(snapshot), console):
        assert console.file.getvalue() == ""
    text = console.file.getvalue()
    assert "captured 2000" in text and text.endswith("\n")
    assert text.splitlines()[-1].rstrip().endswith("90 skipped")


def test_live_display_redraws_on_a_terminal():
    console = Console(file=io.StringIO(), width=80, color_system=None, force_terminal=True)
    with live_display(Dashboard(snapshot), console):
        pass
    assert "captured 2000" in console.file.getvalue()


def test_dashboard_shows_the_trackers_time_and_tracks():
    text = render(Dashboard(lambda: snapshot(tracking_p50=0.00031, tracking_p99=0.0009, tracks=2)))
    assert "tracking   2 tracks  (p50 0.3 ms  p99 0.9 ms a frame)" in text.splitlines()
