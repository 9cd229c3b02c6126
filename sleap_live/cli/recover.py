"""`sleap-live recover FILE`: write the pose file a killed run left as a journal.

A run saves its finished frames every few seconds to ``FILE.journal`` and writes
``FILE`` (.slp, .h5, .nwb or .csv) from it when it ends. After a kill, a crash or
a power cut the journal holds every frame up to its last save; this writes them
to FILE, in the format its suffix picks.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli.options import PROG, add_command, add_overwrite_option, say


def add_parser(commands: Any) -> None:
    """Adds `recover` to the subcommands of the top-level parser."""
    recover = add_command(
        commands,
        "recover",
        handle,
        description="A run saves its finished frames every few seconds (--save-interval) to "
        "a journal beside its pose output, FILE.journal, and writes FILE from it when it "
        "ends. After a kill, a crash or a power cut, this writes FILE (.slp, .h5, .nwb or "
        ".csv, by its suffix) from the journal: every frame saved before the crash. The "
        "journal is deleted once FILE is written.",
        epilog=f"example:\n  {PROG} recover session.slp",
    )
    recover.add_argument(
        "file", type=Path, metavar="FILE", help="the pose output (or its .journal)"
    )
    add_overwrite_option(recover, "FILE")


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs `recover`; returns the exit status (errors propagate to `main`)."""
    from sleap_live.stream.outputs.recovery import recover_slp

    contents = recover_slp(args.file, overwrite=args.overwrite)
    slp = args.file.with_name(args.file.name.removesuffix(".journal"))
    line = f"{slp}: recovered {contents.n_frames} frames"
    if contents.torn_bytes:
        line += f" (the save the crash cut short, {contents.torn_bytes} bytes, was dropped)"
    say(console, line)
    return 0
