"""`sleap-live cameras`: the capture devices of this machine and the modes each offers."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from sleap_live.cli.options import PROG, add_command


def add_parser(commands: Any) -> None:
    """Adds `cameras` to the subcommands of the top-level parser."""
    cameras = add_command(
        commands,
        "cameras",
        handle,
        description="List the capture devices: on Linux every V4L2 node that captures video "
        "(/dev/videoN) with its pixel formats, frame sizes and frame rates; on macOS "
        "(avfoundation) and Windows (dshow) the devices FFmpeg finds, by the name --camera "
        "takes (FFmpeg does not report their modes). A mode is requested with --width, "
        "--height, --fps and --camera-option input_format=FORMAT. Prints 'no cameras found' "
        "and exits 0 when there are none.",
        epilog=f"examples:\n  {PROG} cameras\n  {PROG} --camera /dev/video2 "
        "--camera-option input_format=mjpeg --width 1280 --height 720 --fps 60 -m MODEL",
    )
    cameras.add_argument(
        "--backend",
        choices=("v4l2", "avfoundation", "dshow"),
        help="FFmpeg input device to list (default: this platform's: v4l2 on Linux, "
        "avfoundation on macOS, dshow on Windows)",
    )


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs `cameras`; the listing goes to stdout. Returns the exit status."""
    from sleap_live.stream.sources import devices

    found = devices.list_cameras(args.backend)
    if not found:
        print("no cameras found")
        return 0
    for line in devices.describe_cameras(found):
        print(line)
    return 0
