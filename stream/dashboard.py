"""Terminal views of a running pipeline: a live dashboard and a progress bar.

Both are pull-based renderables: each time rich refreshes the screen (a few
times a second, from `rich.live.Live`'s own thread) they call `get_stats()` for
a fresh `PipelineStats` snapshot and draw it. The pipeline never calls into the
UI, so a slow terminal cannot slow inference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sleap_live.stream.stats import PipelineStats

StatsGetter = Callable[[], PipelineStats]

REFRESH_PER_SECOND = 4


class Dashboard:
    """Live-run telemetry: rates, capture-to-pose latency, drops, instances, queues.

    Args:
        get_stats: returns the current snapshot (usually `lambda: pipeline.stats`).
        title: shown above the table.
    """

    def __init__(self, get_stats: StatsGetter, *, title: str = "sleap-live") -> None:
        self._get_stats = get_stats
        self._title = title

    def __rich__(self) -> RenderableType:
        return render_dashboard(self._get_stats(), title=self._title)


class ProgressView:
    """A progress bar for runs through a file: frames done, fps and time left.

    Args:
        get_stats: returns the current snapshot (usually `lambda: pipeline.stats`).
        width: width of the bar in characters.
    """

    def __init__(self, get_stats: StatsGetter, *, width: int = 40) -> None:
        self._get_stats = get_stats
        self._width = width

    def __rich__(self) -> RenderableType:
        return render_progress(self._get_stats(), width=self._width)


def render_dashboard(stats: PipelineStats, *, title: str = "sleap-live") -> Table:
    """The dashboard table for one snapshot."""
    table = Table.grid(padding=(0, 2))
    table.title = (
        f"{title} · {stats.policy} · batch {stats.batch_size} · {_duration(stats.elapsed)}"
        + ("" if stats.running else " · stopped")
    )
    table.title_justify = "left"
    table.add_column(style="bold")
    table.add_column()
    dropped = stats.frames_dropped
    # Of the frames that are through: a replay's skipped frames were never captured.
    through = stats.frames_processed + dropped
    share = f" ({dropped / through:.1%})" if through else ""
    table.add_row(
        "frames",
        f"captured {stats.frames_captured}  processed {stats.frames_processed}  "
        f"dropped {dropped}{share}",
    )
    if len(stats.dropped_by_source) > 1:
        table.add_row(
            "dropped",
            "  ".join(f"{source} {n}" for source, n in stats.dropped_by_source.items()),
        )
    table.add_row("rate", f"{stats.fps:.1f} fps  (capture {stats.capture_fps:.1f} fps)")
    table.add_row(
        "latency",
        f"p50 {_ms(stats.latency_p50)}  p99 {_ms(stats.latency_p99)}  "
        f"(engine p50 {_ms(stats.engine_latency_p50)}  p99 {_ms(stats.engine_latency_p99)})",
    )
    table.add_row("instances", f"{stats.instances_last_frame} in last frame")
    if stats.tracking_p50 is not None:
        table.add_row(
            "tracking",
            f"{stats.tracks} tracks  (p50 {_ms(stats.tracking_p50)}  "
            f"p99 {_ms(stats.tracking_p99)} a frame)",
        )
    table.add_row("queues", "  ".join(f"{k} {v}" for k, v in stats.queue_depths.items()))
    for consumer in stats.consumers:
        line = Text(f"{consumer.name}: {consumer.delivered} delivered, {consumer.skipped} skipped")
        if consumer.error is not None:
            line.append(f", failed: {consumer.error}", style="bold red")
        elif consumer.stalled:
            line.append(", stalled: no longer waited for", style="bold yellow")
        table.add_row("consumer", line)
    if (publish := stats.publish) is not None:
        table.add_row(
            "publish",
            f"{publish.endpoint}: {publish.sent} sent, {publish.skipped} skipped, "
            f"{publish.subscribers} subscribed",
        )
    return table


def render_progress(stats: PipelineStats, *, width: int = 40) -> RenderableType:
    """A one-line progress bar for one snapshot (no bar when the length is unknown)."""
    total = stats.frames_total
    done = stats.frames_processed
    eta = stats.eta
    if total is not None and done > total:
        # A length estimated from a duration (concatenated MPEG-TS restarts its
        # timestamps) that the decoded frames outran: the length is unknown.
        total = eta = None
    parts = [
        f"{done}/{total} frames" if total is not None else f"{done} frames",
        f"{stats.fps:.1f} fps",
        f"ETA {_duration(eta)}" if eta is not None and stats.running else _duration(stats.elapsed),
    ]
    text = Text(" · ".join(parts))
    if total is None:
        return text
    line = Table.grid(padding=(0, 1))
    line.add_row(ProgressBar(total=max(total, 1), completed=min(done, total), width=width), text)
    return line


@contextlib.contextmanager
def live_display(renderable: RenderableType, console: Console) -> Iterator[None]:
    """Redraw `renderable` a few times a second while the block runs.

    On an interactive terminal this is a `rich.live.Live`. Elsewhere (a pipe, a
    log file) nothing is drawn while running and the final state is printed once
    at the end, on lines of its own.
    """
    if not console.is_terminal:
        try:
            yield
        finally:
            console.print(renderable)
        return
    with Live(
        renderable,
        console=console,
        refresh_per_second=REFRESH_PER_SECOND,
        redirect_stdout=False,
        redirect_stderr=False,
    ):
        yield


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.1f} ms"


def _duration(seconds: float) -> str:
    total = int(seconds)
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"
