"""`sleap-live track POSES.slp -o OUT.slp`: track saved poses again, as a live run would.

The tracking is `sleap_live.stream.tracking.files.retrack_file`; this module parses
sleap-nn's tracking options and shows a progress bar while it works.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli.options import (
    PROG,
    add_command,
    add_output_option,
    add_overwrite_option,
    progress_bar,
    say,
)
from sleap_live.cli.tracking_options import add_tracking_options, settings_from


def add_parser(commands: Any) -> None:
    """Adds `track` to the subcommands of the top-level parser."""
    track = add_command(
        commands,
        "track",
        handle,
        description="Give every predicted instance of POSES a track, frame by frame in "
        "order, with the tracker and options `run --tracking` uses (sleap-nn's names and "
        "defaults); the tracks it had are replaced, hand-labelled instances kept. The "
        "result goes to OUT (.slp, .h5, .nwb or .csv), never over POSES.",
        epilog=(
            "examples:\n"
            f"  {PROG} track session.slp -o session.tracked.slp\n"
            f"  {PROG} track session.slp -o tracked.slp --candidates-method local_queues "
            "--max-tracks 2"
        ),
    )
    track.add_argument("poses", type=Path, metavar="POSES", help="the pose file to track")
    add_output_option(
        track, "OUT", "the tracked poses (default: POSES.tracked.slp in the working directory)"
    )
    add_overwrite_option(track, "OUT")
    add_tracking_options(track, always=True)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs `track`; returns the exit status (errors propagate to `main`)."""
    from sleap_live.stream.tracking.files import retrack_file

    settings = settings_from(args)
    output = args.output or Path(f"{args.poses.stem}.tracked.slp")
    with progress_bar(console) as bar:
        task = bar.add_task(f"tracking {args.poses}", total=None)
        summary = retrack_file(
            args.poses,
            output,
            settings,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            overwrite=args.overwrite,
        )
    say(
        console,
        f"{output}: {summary.instances} instances in {summary.frames} frames on "
        f"{summary.tracks} tracks",
    )
    return 0
