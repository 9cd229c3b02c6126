"""The cameras this machine has, and the modes each can capture in (`sleap-live cameras`).

On Linux every ``/dev/video*`` node that captures video is asked for its pixel formats,
frame sizes and frame rates, and its controls (exposure, gain...), through V4L2, with
`linuxpy` (the library written for V4L2's ioctls). On macOS (avfoundation) and Windows
(dshow) FFmpeg's own device listing names the cameras (``list_devices``); those devices
do not report modes through FFmpeg's API, so none are listed there.

What touches the system is injectable: the folder holding the device nodes and the
function that queries one node (Linux), and the function that runs FFmpeg's listing
(the others), so every rule here is tested without a camera.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

from sleap_live.stream.sources.camera import default_backend

# FFmpeg's name (what `--camera-option input_format=NAME` takes) of common V4L2 pixel
# formats; a format not here is shown by its V4L2 name.
_FFMPEG_PIXEL_FORMATS = {
    "MJPEG": "mjpeg",
    "JPEG": "mjpeg",
    "YUYV": "yuyv422",
    "UYVY": "uyvy422",
    "YVYU": "yvyu422",
    "NV12": "nv12",
    "NV21": "nv21",
    "YUV420": "yuv420p",
    "YVU420": "yuv420p",
    "YUV422P": "yuv422p",
    "GREY": "gray",
    "Y10": "gray10le",
    "Y12": "gray12le",
    "Y16": "gray16le",
    "Y16_BE": "gray16be",
    "RGB24": "rgb24",
    "BGR24": "bgr24",
    "H264": "h264",
    "HEVC": "hevc",
}


@attrs.frozen
class CameraMode:
    """One way a camera can capture: a pixel format at a frame size, at some rates.

    Attributes:
        pixel_format: FFmpeg's name of the format where known (``"mjpeg"``,
            ``"yuyv422"``), else the device's own.
        size: ``"WxH"``, or ``"WxH to WxH"`` for a device that takes any size in a range.
        rates: frame rates the device offers at this size, highest first; empty
            where it does not say.
    """

    pixel_format: str
    size: str
    rates: tuple[float, ...] = ()


@attrs.frozen
class CameraControl:
    """A V4L2 control a camera has, as ``--camera-control NAME=VALUE`` sets it.

    Attributes:
        name: linuxpy's and v4l2-ctl's name (``exposure_time_absolute``).
        minimum: the lowest value it takes.
        maximum: the highest value it takes.
    """

    name: str
    minimum: int
    maximum: int


@attrs.frozen
class CameraDevice:
    """A capture device: what to pass to ``--camera``, its name, and its modes.

    Attributes:
        device: the device as ``--camera`` takes it (``/dev/video0``, ``0``,
            ``video=Integrated Camera``).
        name: the device's own name.
        backend: the FFmpeg input device that reads it.
        modes: the modes it reported (none where the backend does not report them).
        problem: why the device could not be asked for its modes, or None.
        controls: its V4L2 controls (none elsewhere).
    """

    device: str
    name: str
    backend: str
    modes: tuple[CameraMode, ...] = ()
    problem: str | None = None
    controls: tuple[CameraControl, ...] = ()


@attrs.frozen
class V4l2Node:
    """What a V4L2 device node says about itself (`query_v4l2_node`)."""

    name: str
    captures: bool
    modes: tuple[CameraMode, ...]
    controls: tuple[CameraControl, ...] = ()


def list_cameras(
    backend: str | None = None,
    *,
    dev_root: str | Path = "/dev",
    query_node: Callable[[Path], V4l2Node] | None = None,
    ffmpeg_listing: Callable[[str], Sequence[str]] | None = None,
) -> list[CameraDevice]:
    """The capture devices `backend` can read (default: this platform's camera backend).

    Args:
        backend: ``"v4l2"``, ``"avfoundation"`` or ``"dshow"``.
        dev_root: the folder of V4L2 device nodes.
        query_node: asks one V4L2 node for its name and modes (default: `query_v4l2_node`).
        ffmpeg_listing: the log lines of FFmpeg's device listing for a backend
            (default: `ffmpeg_device_listing`).

    Raises:
        SourceError: on a platform without a camera backend (from `default_backend`).
        ValueError: a backend that cannot list devices.
    """
    backend = backend or default_backend()
    if backend in ("v4l2", "video4linux2"):
        return v4l2_cameras(Path(dev_root), query_node or query_v4l2_node)
    if backend in ("avfoundation", "dshow"):
        lines = (ffmpeg_listing or ffmpeg_device_listing)(backend)
        if backend == "avfoundation":
            return avfoundation_cameras(lines)
        return dshow_cameras(lines)
    raise ValueError(f"cannot list the cameras of {backend!r}; it lists v4l2, avfoundation, dshow")


def v4l2_cameras(dev_root: Path, query_node: Callable[[Path], V4l2Node]) -> list[CameraDevice]:
    """Every ``videoN`` node under `dev_root` that captures video, in N's order.

    A node that cannot be queried (busy with exclusive access, no permission) is
    listed with the reason; nodes that only carry metadata (a UVC camera's second
    node) are left out.
    """
    cameras = []
    for path in sorted(dev_root.glob("video*"), key=_node_number):
        if not path.name[len("video") :].isdigit():
            continue
        try:
            node = query_node(path)
        except OSError as error:
            reason = error.strerror or str(error)
            cameras.append(CameraDevice(str(path), "?", "v4l2", problem=f"cannot query: {reason}"))
            continue
        if node.captures:
            cameras.append(
                CameraDevice(str(path), node.name, "v4l2", node.modes, controls=node.controls)
            )
    return cameras


def _node_number(path: Path) -> tuple[int, str]:
    digits = path.name[len("video") :]
    return (int(digits) if digits.isdigit() else -1, path.name)


def query_v4l2_node(path: Path) -> V4l2Node:
    """A V4L2 node's name, whether it captures, and its modes, through linuxpy.

    Raises:
        OSError: the node cannot be opened or queried.
    """
    from linuxpy.video.device import BufferType, Capability, Device, FrameSizeType

    with Device(path) as device:
        info = device.info
        captures = Capability.VIDEO_CAPTURE in info.device_capabilities
        if not captures:
            return V4l2Node(info.card, False, ())
        rates: dict[tuple[str, str], list[float]] = {}
        for frame_type in info.frame_types:
            key = (_format_name(frame_type.pixel_format.name), _size(frame_type))
            rates.setdefault(key, []).extend(_rates(frame_type))
        for image_format in device.info.buffer_formats(BufferType.VIDEO_CAPTURE):
            for size in device.info.format_frame_sizes(image_format.pixel_format):
                if size.type != FrameSizeType.DISCRETE:
                    key = (_format_name(image_format.pixel_format.name), _size_range(size.info))
                    rates.setdefault(key, [])
        controls = tuple(
            CameraControl(str(control.config_name), int(control.minimum), int(control.maximum))
            for control in device.controls.values()
            if hasattr(control, "config_name") and hasattr(control, "minimum")
        )
        return V4l2Node(info.card, True, modes_from(rates), controls)


def _size(frame_type: Any) -> str:
    return f"{frame_type.width}x{frame_type.height}"


def _size_range(stepwise: Any) -> str:
    return (
        f"{stepwise.min_width}x{stepwise.min_height} to {stepwise.max_width}x{stepwise.max_height}"
    )


def _rates(frame_type: Any) -> list[float]:
    """The rates of one V4L2 frame interval entry: one, or the ends of a range."""
    rates = {float(Fraction(frame_type.min_fps)), float(Fraction(frame_type.max_fps))}
    return [rate for rate in rates if rate > 0]


def _format_name(v4l2_name: str) -> str:
    return _FFMPEG_PIXEL_FORMATS.get(v4l2_name, v4l2_name)


def modes_from(rates: dict[tuple[str, str], list[float]]) -> tuple[CameraMode, ...]:
    """Modes from (pixel format, size) -> rates, in the device's order, rates highest first."""
    return tuple(
        CameraMode(pixel_format, size, tuple(sorted(set(found), reverse=True)))
        for (pixel_format, size), found in rates.items()
    )


def ffmpeg_device_listing(backend: str) -> list[str]:
    """The log lines of FFmpeg's ``list_devices`` for `backend`, captured through PyAV.

    FFmpeg answers the listing by logging the devices and failing the open, so the
    failure is expected and the log is the answer.
    """
    import av
    import av.error
    import av.logging

    level = av.logging.get_level()
    with av.logging.Capture() as logs:
        av.logging.set_level(av.logging.INFO)
        try:
            url = "" if backend == "avfoundation" else "dummy"
            av.open(url, format=backend, options={"list_devices": "true"}).close()
        except (av.error.FFmpegError, ValueError):
            pass
        finally:
            av.logging.set_level(level)
    return [message.rstrip("\n") for _, _, message in logs]


_AVFOUNDATION_ENTRY = re.compile(r"^\[(\d+)\] (.+)$")
_DSHOW_ENTRY = re.compile(r'^"(.+)"(?: \((video|audio|none)\))?$')


def avfoundation_cameras(lines: Iterable[str]) -> list[CameraDevice]:
    """The video devices in avfoundation's listing (``[N] NAME`` under its video heading)."""
    entries = _entries(lines, lambda text: text.endswith("devices:"), _AVFOUNDATION_ENTRY)
    return [CameraDevice(m[1], m[2], "avfoundation") for m, in_video in entries if in_video]


def dshow_cameras(lines: Iterable[str]) -> list[CameraDevice]:
    """The video devices in dshow's listing, as ``video=NAME`` (what ``--camera`` takes).

    FFmpeg 4.4 and later tag each device ``"NAME" (video)``; earlier versions list
    them under a "DirectShow video devices" heading.
    """
    entries = _entries(lines, lambda text: text.startswith("DirectShow"), _DSHOW_ENTRY)
    return [
        CameraDevice(f"video={m[1]}", m[1], "dshow")
        for m, in_video in entries
        if m[2] == "video" or (m[2] is None and in_video)
    ]


def _entries(
    lines: Iterable[str], heading: Callable[[str], bool], entry: re.Pattern[str]
) -> Iterator[tuple[re.Match[str], bool]]:
    """Each line of a device listing that `entry` matches, and whether it stands under
    a video heading (the last line `heading` picks out names video)."""
    in_video = False
    for line in lines:
        text = line.strip()
        if heading(text):
            in_video = "video" in text
        elif match := entry.match(text):
            yield match, in_video


def describe_cameras(cameras: Sequence[CameraDevice]) -> list[str]:
    """The lines `sleap-live cameras` prints: a device, then one line per mode."""
    lines = []
    for camera in cameras:
        lines.append(f"{camera.device}: {camera.name} ({camera.backend})")
        if camera.problem is not None:
            lines.append(f"  {camera.problem}")
        for mode in camera.modes:
            rates = ", ".join(f"{rate:g}" for rate in mode.rates)
            lines.append(
                f"  {mode.pixel_format:<10} {mode.size:<11}" + (f" {rates} fps" if rates else "")
            )
        if camera.controls:
            lines.append(
                "  controls: "
                + ", ".join(f"{c.name} {c.minimum}..{c.maximum}" for c in camera.controls)
            )
    return lines
