"""`sleap-live render POSES.slp -o overlay.mp4`: the poses of a .slp drawn on its video.

The drawing and encoding are `sleap_live.stream.outputs.render.render_slp`; this module
parses the style and the frame range and shows a progress bar while it works.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import TimeRemainingColumn

from sleap_live.cli.options import (
    PROG,
    UsageError,
    add_command,
    add_experiment_option,
    add_output_option,
    add_overwrite_option,
    count,
    positive_float,
    progress_bar,
    say,
)
from sleap_live.stream.outputs.overlay import COLOR_SCHEMES, MARKER_SHAPES, PALETTES, OverlayStyle
from sleap_live.stream.outputs.overlay_writer import CODECS, DEFAULT_CODEC

if TYPE_CHECKING:
    from sleap_live.stream.experiment.overlay import ExperimentOverlay


def add_parser(commands: Any) -> None:
    """Adds `render` to the subcommands of the top-level parser."""
    render = add_command(
        commands,
        "render",
        handle,
        description="Draw the skeleton of every instance in POSES.slp on the video it was "
        "predicted from and write every frame of the range, with or without poses, to a new "
        "video: frame k of the output is frame START + k of the video. Nothing is written "
        "to -o until the video is complete; Ctrl-C keeps the frames drawn so far.",
        epilog=(
            "examples:\n"
            f"  {PROG} render poses.slp -o overlay.mp4\n"
            f"  {PROG} render poses.slp -o first_minute.mp4 --frames 0:1800 --color-by instance\n"
            f"  {PROG} render poses.slp -o lossless.mkv --codec ffv1 --marker-size 6"
        ),
    )
    render.add_argument("slp", type=Path, metavar="POSES.slp", help="the poses to draw")
    add_output_option(
        render,
        "VIDEO",
        "the video to write, .mp4, .mkv or .avi "
        "(default: POSES.overlay.mp4 in the working directory)",
    )
    render.add_argument(
        "--video",
        type=Path,
        metavar="PATH",
        help="the video to draw on, when it has moved (default: the one the .slp names, "
        "as written, then relative to the .slp's folder)",
    )
    render.add_argument(
        "--color-by",
        choices=COLOR_SCHEMES,
        default="auto",
        help="one colour per track (the same in every frame), per instance of a frame, or "
        "per body part; auto: by track when the .slp has tracks, else by instance",
    )
    render.add_argument(
        "--palette",
        choices=PALETTES,
        default="standard",
        metavar="NAME",
        help=f"sleap-io colour palette: {', '.join(PALETTES)}",
    )
    render.add_argument(
        "--marker-size", type=positive_float, default=4.0, help="node marker radius in pixels"
    )
    render.add_argument(
        "--marker-shape", choices=MARKER_SHAPES, default="circle", help="node marker shape"
    )
    render.add_argument(
        "--line-width", type=positive_float, default=2.0, help="edge width in pixels"
    )
    render.add_argument("--start", type=count, help="first frame to write (default: 0)")
    render.add_argument(
        "--stop", type=count, help="frame to stop before (default: the end of the video)"
    )
    render.add_argument(
        "--frames",
        type=_frame_range,
        metavar="A:B",
        help="frames A to B-1, either side may be left out; instead of --start/--stop "
        "(default: every frame)",
    )
    render.add_argument(
        "--codec",
        choices=sorted(CODECS),
        default=DEFAULT_CODEC,
        help="h264 (small, lossy) or ffv1 (lossless, larger; best in .mkv)",
    )
    add_experiment_option(
        render,
        "also draw this closed-loop experiment (docs/closed-loop.md): its regions "
        "(green while a rule reading them is on) and a square per rule (green: on), the "
        "rules' states from the .slp's events of its run (default: poses only)",
    )
    add_overwrite_option(render, "VIDEO")


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs `render`; returns the exit status (errors propagate to `main`)."""
    from sleap_live.stream.outputs.render import render_slp

    start, stop = _range(args)
    output = args.output or Path(f"{args.slp.stem}.overlay.mp4")
    style = OverlayStyle(
        color_by=args.color_by,
        palette=args.palette,
        marker_size=args.marker_size,
        marker_shape=args.marker_shape,
        line_width=args.line_width,
    )
    written = 0
    with progress_bar(console, TimeRemainingColumn()) as bar:
        task = bar.add_task(f"rendering {output}", total=None)

        def advance(done: int, total: int | None) -> None:
            nonlocal written
            written = done
            bar.update(task, completed=done, total=total)

        try:
            rendered = render_slp(
                args.slp,
                output,
                style=style,
                start=start,
                stop=stop,
                video=args.video,
                codec=args.codec,
                progress=advance,
                overwrite=args.overwrite,
                decorate=_experiment_overlay(args),
            )
        except KeyboardInterrupt:
            if written:
                say(
                    console,
                    f"{output}: interrupted; kept the {written} frames drawn so far "
                    f"({start} to {start + written - 1})",
                )
            raise
    last = rendered.start + rendered.n_frames - 1
    say(
        console,
        f"{rendered.output}: {rendered.n_frames} frames ({rendered.start} to {last} of "
        f"{rendered.video}), {rendered.n_posed} with poses",
    )
    return 0


def _range(args: argparse.Namespace) -> tuple[int, int | None]:
    if args.frames is not None:
        if args.start is not None or args.stop is not None:
            raise UsageError("argument --frames: not allowed with --start or --stop")
        start, stop = args.frames
    else:
        start, stop = args.start or 0, args.stop
    if stop is not None and stop <= start:
        raise UsageError(f"the frame range is empty: stop {stop} is not after start {start}")
    return start, stop


def _frame_range(text: str) -> tuple[int, int | None]:
    """argparse type: "A:B", "A:" or ":B", frames A to B-1."""
    first, colon, last = text.partition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"expected A:B (e.g. 0:300), got {text!r}")
    start = count(first) if first.strip() else 0
    stop = count(last) if last.strip() else None
    return start, stop


def _experiment_overlay(args: argparse.Namespace) -> ExperimentOverlay | None:
    """The drawing of --experiment, its rules' states from the .slp's events."""
    if args.experiment is None:
        return None
    import sleap_io as sio

    from sleap_live.stream.experiment import load_experiment
    from sleap_live.stream.experiment.overlay import ExperimentOverlay, spans_of

    experiment = load_experiment(args.experiment)
    events = sio.load_slp(str(args.slp), open_videos=False).events
    return ExperimentOverlay(experiment, spans_of(events))
