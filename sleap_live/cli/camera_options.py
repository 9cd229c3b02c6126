"""The camera options of `sleap-live run`: --camera (repeatable), --width, --height, --fps,
--camera-option and --camera-control, checked and turned into opened sources.

Several --camera run side by side through one engine (see `SourceGroup`); the
--camera-option values reach FFmpeg's capture device as `av.open` options, the
--camera-control values the camera's V4L2 controls (`controls.set_v4l2_controls`).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence

import attrs

from sleap_live.cli.options import PROG, UsageError, flag, frame_rate, positive_int
from sleap_live.stream.errors import SourceError
from sleap_live.stream.source_reader import open_within
from sleap_live.stream.sources import Source, is_url, open_source
from sleap_live.stream.sources.group import SourceGroup

CAMERA_OPTION_HELP = (
    "an FFmpeg capture-device option for every camera, or for one with CAMERA:KEY=VALUE "
    "(CAMERA as given to --camera); repeatable. v4l2 (Linux) takes input_format (the "
    f"camera's pixel format: mjpeg, yuyv422, gray...; `{PROG} cameras` lists them), "
    "framerate, video_size, timestamps (default, abs, mono2abs); avfoundation and dshow "
    "take pixel_format, framerate, video_size. Exposure and gain are camera controls, not "
    "FFmpeg options: see --camera-control. An option the camera refuses stops the run "
    "before any work, naming the camera and the options; FFmpeg ignores a key it does not "
    "know (default: none)"
)

CAMERA_CONTROL_HELP = (
    "a V4L2 camera control (Linux) to set before capture, for every camera or for one with "
    "CAMERA:NAME=VALUE; repeatable, set in the order given, e.g. --camera-control "
    "auto_exposure=1 --camera-control exposure_time_absolute=100 --camera-control gain=10. "
    f"`{PROG} cameras` and v4l2-ctl -L list a camera's controls and ranges; a control the "
    "camera lacks, or a value out of its range, stops the run before any work, naming the "
    "camera and the control. Other platforms: the camera's own tool (default: none)"
)


@attrs.frozen
class CameraOption:
    """One --camera-option: KEY=VALUE for `camera` (as given to --camera), or for all."""

    key: str
    value: str
    camera: str | None = None


def parse_camera_option(text: str) -> CameraOption:
    """``KEY=VALUE`` or ``CAMERA:KEY=VALUE`` as a `CameraOption`.

    Raises:
        ValueError: `text` is neither.
    """
    target, equals, value = text.partition("=")
    camera, colon, key = target.rpartition(":")
    if not equals or not key or (colon and not camera):
        raise ValueError(f"expected KEY=VALUE or CAMERA:KEY=VALUE, got {text!r}")
    return CameraOption(key, value, camera or None)


def camera_option(text: str) -> str:
    """argparse type: a --camera-option, checked and kept as written (the run's
    provenance records the options as given)."""
    try:
        parse_camera_option(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def add_camera_options(run: argparse.ArgumentParser) -> None:
    """The "camera" group of `run`."""
    camera = run.add_argument_group("camera")
    camera.add_argument(
        "--camera",
        metavar="DEVICE",
        action="append",
        help="camera index (0) or device path, instead of VIDEO; repeat it for several "
        "cameras at once (--camera 0 --camera 1): each engine call takes the newest frame "
        "of every camera, each record carries its camera's id (camera:0), and each camera's "
        "poses and recordings go to files of its own, -o session.slp giving "
        "session.camera-0.slp (default: none)",
    )
    for option, parse, what in (
        ("--width", positive_int, "frame width"),
        ("--height", positive_int, "frame height"),
        ("--fps", frame_rate, "frame rate"),
    ):
        camera.add_argument(option, type=parse, help=f"requested {what} (default: the camera's)")
    camera.add_argument(
        "--camera-option",
        type=camera_option,
        action="append",
        metavar="KEY=VALUE",
        help=CAMERA_OPTION_HELP,
    )
    camera.add_argument(
        "--camera-control",
        type=camera_option,
        action="append",
        metavar="NAME=VALUE",
        help=CAMERA_CONTROL_HELP,
    )


def check_camera_options(args: argparse.Namespace) -> None:
    """The camera options of `run`, checked before any work.

    Raises:
        UsageError: an option that needs --camera without it, a camera given twice,
            --width without --height, or a CAMERA:KEY=VALUE naming no --camera.
    """
    cameras: list[str] = args.camera or []
    if not cameras:
        given = [
            flag(name)
            for name in ("width", "height", "fps", "camera_option", "camera_control")
            if getattr(args, name)
        ]
        if given:
            raise UsageError(f"{', '.join(given)} only apply with --camera")
        return
    repeated = sorted({camera for camera in cameras if cameras.count(camera) > 1})
    if repeated:
        raise UsageError(f"--camera {repeated[0]} is given twice; give each camera once")
    if (args.width is None) != (args.height is None):
        raise UsageError("give --width and --height together")
    for kind, given in (("option", args.camera_option), ("control", args.camera_control)):
        for option in map(parse_camera_option, given or []):
            if option.camera is not None and option.camera not in cameras:
                raise UsageError(
                    f"--camera-{kind} {option.camera}:{option.key}={option.value}: "
                    f"{option.camera} is not a --camera of this run ({', '.join(cameras)})"
                )
    if len(cameras) > 1 and args.batch_size is not None and args.batch_size != len(cameras):
        raise UsageError(
            f"--batch-size: with {len(cameras)} cameras a batch holds one frame of each, "
            f"so it is {len(cameras)}; leave --batch-size out"
        )


def options_for(camera: str, given: Sequence[CameraOption]) -> dict[str, str]:
    """The options (or controls) of `camera`: those for every camera, then its own."""
    options = {option.key: option.value for option in given if option.camera is None}
    options.update({option.key: option.value for option in given if option.camera == camera})
    return options


def open_cameras(
    args: argparse.Namespace,
    timeout: float,
    open_one: Callable[[str], Source] | None = None,
) -> Source | SourceGroup:
    """The --camera sources, each opened within `timeout` seconds; several as a group.

    Args:
        timeout: most seconds one camera may take to open.
        open_one: opens one camera from its --camera value (default: `open_camera`).

    Raises:
        SourceError, SourceStalledError: a camera cannot be opened (those opened
            before it are closed), or the cameras give different frame sizes.
    """
    opener = open_one or (lambda camera: open_camera(args, camera))
    opened: list[Source] = []
    try:
        for camera in args.camera:
            # Named by its source id: camera:N for an index, else as given.
            name = f"camera:{camera}" if camera.isdigit() else camera
            opened.append(open_within(functools.partial(opener, camera), timeout, name))
        if len(opened) == 1:
            return opened[0]
        try:
            return SourceGroup(opened)
        except ValueError as error:
            raise SourceError(str(error)) from None
    except BaseException:
        for source in opened:
            source.close()
        raise


def open_camera(args: argparse.Namespace, camera: str) -> Source:
    """One --camera with the run's size, rate, bit depth, read timeout and options."""
    device: int | str = int(camera) if camera.isdigit() else camera
    options = options_for(camera, list(map(parse_camera_option, args.camera_option or [])))
    controls = options_for(camera, list(map(parse_camera_option, args.camera_control or [])))
    return open_source(
        device,
        # A stream URL given as --camera is read as the stream it is.
        camera=None if is_url(device) else True,
        width=args.width,
        height=args.height,
        fps=args.fps,
        options=options or None,
        controls=controls or None,
        bit_depth=args.bit_depth,
        read_timeout=args.read_timeout,
    )
