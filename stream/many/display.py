"""The terminal view of a many-videos run: one overall bar with the videos in
flight, and the summary table at the end.

`ManyProgress` is told as videos start and finish (it is the run's `Reporter`) and
is drawn by rich's refresh thread (`dashboard.live_display`), so drawing never
holds up a worker. Where the console is no terminal (a log, a pipe) it prints a
line per finished video instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sleap_live.stream.many.run import ManyResult
from sleap_live.stream.many.videos import VideoJob, escaped
from sleap_live.stream.many.worker import VideoResult

STATUS_STYLES = {
    "done": "green",
    "skipped": "dim",
    "failed": "bold red",
    "left": "yellow",
    "stopped": "bold yellow",
}


class ManyProgress:
    """Videos done out of the run's, their frames, the time left, and the files in flight.

    Args:
        total: videos in the run (skipped ones count as done at once).
        console: where lines go when it is no terminal.
        clock: seconds, for the rate and the time left.
        prog: the command's name, which starts the line an interrupt prints.
    """

    def __init__(
        self,
        total: int,
        console: Console,
        *,
        clock: Callable[[], float] = time.monotonic,
        prog: str = "sleap-live",
    ) -> None:
        self.total = total
        self._prog = prog
        self._console = console
        self._clock = clock
        self._started_at = clock()
        self._lock = threading.Lock()
        self._running: dict[int, str] = {}
        # Frames so far, and of how many, of each video in flight.
        self._current: dict[int, tuple[int, int | None]] = {}
        self._finished = 0
        self._skipped = 0
        self._failed = 0
        self._frames = 0

    def started(self, job: VideoJob) -> None:
        with self._lock:
            self._running[job.index] = escaped(job.video.name)

    def progress(self, index: int, frames: int, total: int | None) -> None:
        with self._lock:
            self._current[index] = (frames, total)

    def stopping(self, jobs: Sequence[VideoJob]) -> None:
        """Say at once what the interrupt stops, and how to leave sooner."""
        with self._lock:
            current = dict(self._current)
        names = [
            f"{shown(str(job.video))} (frame {current.get(job.index, (0, None))[0]})"
            for job in jobs
        ]
        doing = (
            f"stopping {', '.join(names)} at its next frame, its output not written (the "
            "next run redoes it), then the summary"
            if names
            else "starting no other video; the summary follows"
        )
        self._console.print(
            f"{self._prog}: interrupted: {doing}; press Ctrl-C twice more to exit at once",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    def finished(self, result: VideoResult) -> None:
        with self._lock:
            self._running.pop(result.index, None)
            self._current.pop(result.index, None)
            self._finished += 1
            self._frames += result.frames
            self._skipped += result.status == "skipped"
            self._failed += result.status == "failed"
            done = self._finished
        if not self._console.is_terminal and result.status not in ("skipped", "left"):
            self._console.print(
                f"[{done}/{self.total}] {shown(result.video)}: {describe(result)}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )

    def __rich__(self) -> RenderableType:
        with self._lock:
            finished, skipped, failed = self._finished, self._skipped, self._failed
            frames, running = self._frames, sorted(self._running.items())
            current = dict(self._current)
        # Frames of the videos in flight count as they come: an hour-long video moves.
        frames += sum(done for done, _ in current.values())
        elapsed = self._clock() - self._started_at
        line = Text(f"{finished}/{self.total} videos", style="bold")
        line.append(f"  {frames} frames")
        if elapsed > 0:
            line.append(f"  {frames / elapsed:.1f} fps")
        worked = finished - skipped
        if worked and finished < self.total:
            left = elapsed / worked * (self.total - finished)
            line.append(f"  ~{_duration(left)} left")
        if failed:
            line.append(f"  {failed} failed", style="bold red")
        bar = ProgressBar(total=max(self.total, 1), completed=finished, width=40)
        if not running:  # nothing in flight: no line that says so
            return Group(bar, line)
        now = Text("now: " + ", ".join(_in_flight(name, current.get(i)) for i, name in running))
        now.stylize("cyan")
        now.truncate(200, overflow="ellipsis")
        return Group(Group(bar, line), now)


def describe(result: VideoResult) -> str:
    """One video's outcome in a few words."""
    if result.status == "failed":
        return f"failed: {escaped(result.error or '')}"
    if result.status == "skipped":
        return f"skipped: {escaped(result.output)} is complete"
    if result.status == "left":
        return "left: not started (the next run does it)"
    if result.status == "stopped":
        return f"stopped by the interrupt after {result.frames} frames, its output not written"
    redone = ", a half-written output redone" if result.redone else ""
    return (
        f"{result.frames} frames at {result.fps:.1f} fps, {result.instances} instances "
        f"-> {escaped(result.output)}{redone}"
    )


def summary_table(run: ManyResult) -> Table:
    """A row per video: its name, frames, fps, instances, status (and why it failed)."""
    table = Table(title=f"sleap-live: {len(run.results)} videos ({run.mode})", title_justify="left")
    table.add_column("video", overflow="fold")
    table.add_column("frames", justify="right")
    table.add_column("fps", justify="right")
    table.add_column("instances", justify="right")
    table.add_column("status", overflow="fold")
    for result in run.results:
        worked = result.status == "done"
        status: str = result.status
        if result.status == "failed":
            status = f"failed: {escaped(_without_prefix(result.error or '', result.video))}"
        elif result.status == "left":
            status = "left (not started)"
        elif result.status == "stopped":
            status = f"stopped at frame {result.frames} (the next run redoes it)"
        elif result.redone:
            status = "done (redone)"
        elif result.attempts > 1:
            status = f"done (attempt {result.attempts})"
        table.add_row(
            shown(result.video),
            str(result.frames) if worked else "-",
            f"{result.fps:.1f}" if worked else "-",
            str(result.instances) if worked else "-",
            Text(status, style=STATUS_STYLES[result.status]),
        )
    counts = {
        status: sum(result.status == status for result in run.results)
        for status in ("done", "skipped", "failed", "stopped")
    }
    if not counts["stopped"]:
        del counts["stopped"]
    if run.left:
        counts["left for the next run"] = len(run.left)
    table.caption = ", ".join(f"{count} {status}" for status, count in counts.items())
    table.caption_justify = "left"
    return table


def _in_flight(name: str, frames: tuple[int, int | None] | None) -> str:
    """A video in flight, with its frames so far (of how many, where known)."""
    if frames is None:
        return name
    done, total = frames
    return f"{name} {done}/{total} frames" if total else f"{name} {done} frames"


def shown(path: str) -> str:
    """`path` relative to the working directory when it is inside it, else as it is,
    escaped (`videos.escaped`: a newline in a name does not break the table)."""
    try:
        return escaped(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return escaped(path)


def _without_prefix(error: str, video: str) -> str:
    """An error without the video's path it starts with (the table names the video)."""
    prefix = f"{video}: "
    return error[len(prefix) :] if error.startswith(prefix) else error


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
