"""Frame sources: video files, cameras, network streams, paced replay and Python iterables.

Every source is opened by its constructor (so a bad path or device fails at once),
is a context manager, exposes `Source`'s attributes, and is iterated once, yielding
`Frame` records whose iteration releases the source's resources when it ends.
`open_source` picks the right kind from one argument.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Protocol, cast, runtime_checkable

import attrs

from sleap_live.stream.clock import Clock
from sleap_live.stream.sources._base import READ_TIMEOUT_MARGIN, default_read_timeout
from sleap_live.stream.sources.camera import CameraSource
from sleap_live.stream.sources.file import FileSource
from sleap_live.stream.sources.iterator import IteratorSource
from sleap_live.stream.sources.network import URL_SCHEMES, NetworkSource, is_url
from sleap_live.stream.sources.nvdec import DECODERS, NvdecSource, open_file
from sleap_live.stream.sources.replay import ReplaySource
from sleap_live.stream.types import Frame

__all__ = [
    "DECODERS",
    "READ_TIMEOUT_MARGIN",
    "SOURCE_KINDS",
    "URL_SCHEMES",
    "CameraSource",
    "FileSource",
    "IteratorSource",
    "NetworkSource",
    "NvdecSource",
    "ReplaySource",
    "Source",
    "SourceOptions",
    "default_read_timeout",
    "is_url",
    "open_source",
]

SOURCE_KINDS = (
    "a video file path (str or Path; replay=True paces it like a camera)",
    'a camera: an int index, "camera:N", "camera:<device>", or a device string with camera=True',
    "a live stream URL (rtsp://, http(s)://, udp://, rtp://, srt://, rtmp://, tcp://)",
    "an iterable of uint8 frames, or a zero-argument callable returning a frame or None",
)

_CAMERA_PREFIX = "camera:"

# Which keyword options apply to which kind of source, for open_source's checks.
_FILE_OPTIONS = frozenset(
    {"start", "stop", "source_id", "clock", "decoder", "device", "bit_depth", "read_timeout"}
)
_OPTIONS = MappingProxyType(
    {
        "camera": frozenset(
            {
                "width",
                "height",
                "fps",
                "input_format",
                "backend",
                "options",
                "controls",
                "source_id",
                "clock",
                "bit_depth",
                "read_timeout",
            }
        ),
        "file": _FILE_OPTIONS,
        "replay": _FILE_OPTIONS | {"fps", "drop_late"},
        "iterator": frozenset({"fps", "live", "copy", "source_id", "clock", "read_timeout"}),
        "network": frozenset({"options", "source_id", "clock", "bit_depth", "read_timeout"}),
    }
)


@runtime_checkable
class Source(Protocol):
    """What every frame source provides.

    Attributes:
        source_id: name stamped on every frame.
        fps: frames per second, or None if unknown.
        frame_shape: (height, width, channels) of every image; channels 1 (gray) or
            3 (RGB).
        n_frames: frames expected, or None if unknown or unbounded (cameras).
        is_live: True if frames arrive on their own clock (cameras, paced replay):
            a consumer that falls behind should drop frames rather than wait.
        read_timeout: seconds a frame may take to arrive before a pipeline reading
            the source reports it stalled (`default_read_timeout` of ``fps`` unless
            given; ``math.inf``: never).
        skipped: frames the source itself skipped (a replay falling behind its
            rate), which a pipeline adds to its dropped frames; 0 for most sources.
        bit_depth: bits per sample of the data, scaled to 8 (given, or the pixel
            format's); None for frames handed over already 8-bit (iterators).
        decoder: what decodes the frames: ``"pyav"`` (FFmpeg on the CPU),
            ``"nvdec"`` (the GPU), or ``"none"`` for frames handed over decoded.
        decoder_notice: why a GPU decoder asked for was not used, or None.
        video_file: the video file the frames are decoded from (a file or a replay
            of one); None for cameras, network streams and iterators.
    """

    source_id: str
    fps: float | None
    frame_shape: tuple[int, int, int]
    n_frames: int | None
    is_live: bool

    @property
    def read_timeout(self) -> float: ...

    @property
    def skipped(self) -> int: ...

    @property
    def bit_depth(self) -> int | None: ...

    @property
    def decoder(self) -> str: ...

    @property
    def decoder_notice(self) -> str | None: ...

    @property
    def video_file(self) -> Path | None: ...

    def __iter__(self) -> Iterator[Frame]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


@attrs.frozen(kw_only=True)
class SourceOptions:
    """What `open_source` takes besides ``spec``: how to read the source.

    Options left at None keep each source's default. An option the chosen kind does
    not take is an error rather than silently ignored (`open_source`).

    Attributes:
        camera: force (True) or forbid (False) reading ``spec`` as a camera.
        replay: pace a video file at its frame rate (or ``fps``) like a camera.
        fps: camera frame rate to request, replay rate, or an iterator's nominal rate.
        width: camera frame width to request (with ``height``).
        height: camera frame height to request (with ``width``).
        start: first frame index of a file or replay.
        stop: frame index one past the last of a file or replay.
        input_format: camera pixel format to request (e.g. ``"mjpeg"``).
        backend: FFmpeg capture device for a camera (default by platform).
        options: extra FFmpeg options for a camera or a network stream.
        controls: V4L2 controls of a camera (exposure, gain...) to set before capture.
        drop_late: whether a replay skips frames its consumer was too slow for.
        live: whether an iterator's frames arrive on their own clock.
        copy: whether an iterator source copies each frame.
        source_id: name stamped on every frame.
        clock: what frames are stamped (and a replay paced) with; give a pipeline
            the same one.
        decoder: what decodes a file or replay: ``"pyav"`` (the default: FFmpeg on
            the CPU), ``"nvdec"`` (NVDEC on the GPU, frames as CUDA tensors) or
            ``"auto"`` (NVDEC where it decodes the file exactly, else PyAV). When
            NVDEC is not used, a one-line notice says why: logged as a warning if
            ``"nvdec"`` was asked for, at info level under ``"auto"``, and kept
            as the source's ``decoder_notice``; ``decoder`` says which one runs.
        device: the CUDA device NVDEC decodes a file or replay on (``"cuda:N"``;
            default ``"cuda"``, the current one).
        bit_depth: bits per sample the data of a file, replay, camera or stream uses (8 to
            16): its largest value becomes 255. Default: the pixel format's depth;
            a 16-bit source whose first frame uses 12 bits or fewer gets a warning
            (logged), since scaled from 16 bits it is near-black.
        read_timeout: seconds without a frame after which a pipeline reading the
            source stops and reports it stalled (`SourceStalledError`), having
            processed every frame before; default: the source's frame interval plus
            5 s (`default_read_timeout`); ``math.inf`` waits for ever.
    """

    camera: bool | None = None
    replay: bool = False
    fps: float | None = None
    width: int | None = None
    height: int | None = None
    start: int | None = None
    stop: int | None = None
    input_format: str | None = None
    backend: str | None = None
    options: Mapping[str, str] | None = None
    controls: Mapping[str, str] | None = None
    drop_late: bool | None = None
    live: bool | None = None
    copy: bool | None = None
    source_id: str | None = None
    clock: Clock | None = None
    decoder: str | None = None
    device: str | None = None
    bit_depth: int | None = None
    read_timeout: float | None = None


def open_source(
    spec: str | os.PathLike[str] | int | Iterable[Any] | Callable[[], Any],
    options: SourceOptions | None = None,
    /,
    **given: Any,
) -> Source:
    """Open the source ``spec`` describes, read as `options` and the `SourceOptions`
    fields ``given`` by name (``open_source("clip.mp4", replay=True)``) say.

    Kinds, decided once from ``spec``:

    - a video file path (str or `os.PathLike`) -> `FileSource`, or `ReplaySource`
      with ``replay=True``;
    - a str URL of one of `URL_SCHEMES` (``"rtsp://..."``, ``"http://..."``) ->
      `NetworkSource`, a live stream read like a camera (unless ``camera=True``);
    - an int, ``"camera:N"`` or ``"camera:<device>"`` -> `CameraSource`; with
      ``camera=True`` any str is a device string (``"/dev/video2"``,
      ``"video=Logitech BRIO"``); with ``camera=False`` a str is always a file;
    - an iterable of frames, or a zero-argument callable -> `IteratorSource`.

    Returns:
        The opened source; use it in a ``with`` block or call ``close()``.

    Raises:
        ValueError: if ``spec`` is none of the supported kinds, or an option does not
            apply to its kind.
        TypeError: a name ``given`` that is no `SourceOptions` field.
        SourceNotFoundError: if the file or camera does not exist.
        SourceError: if it exists but cannot be opened.
    """
    chosen = SourceOptions(**given) if options is None else attrs.evolve(options, **given)
    kind = _kind_of(spec, chosen.camera, chosen.replay)
    kwargs = {
        name: value
        for name, value in attrs.asdict(chosen, recurse=False).items()
        if value is not None and name not in ("camera", "replay")
    }
    unsupported = sorted(set(kwargs) - _OPTIONS[kind])
    if unsupported:
        raise ValueError(
            f"option{'s' if len(unsupported) > 1 else ''} {', '.join(unsupported)} "
            f"cannot be used with a {kind} source (it takes {', '.join(sorted(_OPTIONS[kind]))})"
        )
    # `_kind_of` has narrowed `spec` to what each kind takes.
    if kind == "camera":
        return CameraSource(_camera_device(cast("int | str | os.PathLike[str]", spec)), **kwargs)
    if kind == "file":
        return open_file(cast("str | os.PathLike[str]", spec), **kwargs)
    if kind == "replay":
        return ReplaySource(cast("str | os.PathLike[str]", spec), **kwargs)
    if kind == "network":
        return NetworkSource(cast("str", spec), **kwargs)
    return IteratorSource(cast("Iterable[Any] | Callable[[], Any]", spec), **kwargs)


def _kind_of(spec: Any, camera: bool | None, replay: bool) -> str:
    if camera is not None and not isinstance(camera, bool):
        raise ValueError(f"camera must be True, False or None, got {camera!r}")
    kind: str | None = None
    if spec is None or isinstance(spec, bool | bytes):
        kind = None
    elif isinstance(spec, int):
        kind = "camera"
    elif isinstance(spec, str) and spec.startswith(_CAMERA_PREFIX) and camera is not False:
        kind = "camera"
    elif not camera and is_url(spec):
        kind = "network"
    elif isinstance(spec, str | os.PathLike):
        kind = "camera" if camera else "file"
    elif isinstance(spec, Iterable) or callable(spec):
        kind = "iterator"
    if kind is None or (camera is not None and camera != (kind == "camera")):
        raise ValueError(
            f"cannot open {spec!r}"
            + (f" with camera={camera}" if camera is not None else "")
            + "; supported sources are: "
            + "; ".join(SOURCE_KINDS)
        )
    if replay:
        if kind != "file":
            raise ValueError(f"replay=True paces video files only, not a {kind} source")
        return "replay"
    return kind


def _camera_device(spec: int | str | os.PathLike[str]) -> int | str:
    if isinstance(spec, int):
        return spec
    device = os.fspath(spec)
    if device.startswith(_CAMERA_PREFIX):
        device = device[len(_CAMERA_PREFIX) :]
        if not device:
            raise ValueError('"camera:" needs an index or a device, e.g. "camera:0"')
        if device.isdigit():
            return int(device)
    return device
