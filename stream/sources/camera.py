"""Cameras read through FFmpeg's capture devices (v4l2, avfoundation, dshow) with PyAV."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType

import av
import av.error

from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import SourceError, SourceNotFoundError
from sleap_live.stream.sources import _av
from sleap_live.stream.sources._base import SourceBase
from sleap_live.stream.sources._depth import ImageConverter
from sleap_live.stream.sources.controls import set_v4l2_controls
from sleap_live.stream.types import Frame

# FFmpeg input device used for cameras on each platform.
DEFAULT_BACKENDS = MappingProxyType({"linux": "v4l2", "darwin": "avfoundation", "win32": "dshow"})

# The option that picks the camera's own pixel format (e.g. "mjpeg", "yuyv422").
_PIXEL_FORMAT_OPTION = MappingProxyType({"v4l2": "input_format", "video4linux2": "input_format"})

# A camera that sends this many undecodable frames in a row is broken, not noisy.
_MAX_CONSECUTIVE_DECODE_ERRORS = 30


def default_backend(platform: str = sys.platform) -> str:
    """The FFmpeg capture device for cameras on this platform.

    Raises:
        SourceError: on a platform without a known camera device.
    """
    key = "linux" if platform.startswith("linux") else platform
    if key not in DEFAULT_BACKENDS:
        raise SourceError(
            f"no default camera backend for platform {platform!r}; pass backend= "
            f"(one of FFmpeg's input devices, e.g. {', '.join(sorted(DEFAULT_BACKENDS.values()))})"
        )
    return DEFAULT_BACKENDS[key]


def device_name(device: int | str, backend: str) -> str:
    """What FFmpeg's ``backend`` calls camera ``device`` (an index or a device string).

    Raises:
        ValueError: for an index with dshow, which names cameras rather than numbering them.
    """
    if isinstance(device, str):
        return device
    if backend in ("v4l2", "video4linux2"):
        return f"/dev/video{device}"
    if backend == "avfoundation":
        return f"{device}:none"
    raise ValueError(
        f"camera index {device} cannot be used with {backend}; pass the device by name, "
        'for dshow "video=<camera name>" '
        "(list them with: ffmpeg -list_devices true -f dshow -i dummy)"
    )


class CameraSource(SourceBase):
    """Frames from a live camera, stamped with `clock` when read.

    Decoding uses slice threads only: frame threading would hold several frames back
    and add their intervals to every frame's latency.

    Args:
        device: camera index (``0`` is ``/dev/video0`` on Linux, the first
            avfoundation camera on macOS) or a device string passed to FFmpeg as is
            (``"/dev/video2"``, ``"0:none"``, ``"video=Logitech BRIO"``).
        width: requested frame width; give it with ``height``.
        height: requested frame height; give it with ``width``.
        fps: requested frame rate.
        input_format: the camera's pixel format or codec to request, e.g. ``"mjpeg"``
            or ``"yuyv422"`` (v4l2 ``input_format``, elsewhere ``pixel_format``).
        backend: FFmpeg input device; defaults to v4l2, avfoundation or dshow by
            platform. Any FFmpeg input format works, e.g. ``"lavfi"`` with a
            ``testsrc`` graph as the device for a synthetic camera.
        options: further FFmpeg device options (``av.open``'s), applied last: e.g.
            v4l2's ``input_format``, ``framerate``, ``video_size``, ``timestamps``.
            Options the device refuses make opening fail, naming every option given;
            FFmpeg ignores a key that no part of it knows. Camera controls
            (exposure, gain) are not FFmpeg options: see `controls`.
        controls: V4L2 controls to set before capture, in order, e.g.
            ``{"auto_exposure": "1", "exposure_time_absolute": "100", "gain": "10"}``
            (see `controls.set_v4l2_controls`); v4l2 device nodes only.
        source_id: name stamped on every frame; defaults to ``"camera:<index>"`` or
            the device string.
        clock: what frames are stamped with.
        bit_depth: bits per sample the camera's data uses, scaled to 8 (see
            `_depth.ImageConverter`); None: its pixel format's depth.
        read_timeout: most seconds a frame may take (a camera on external
            trigger: the longest gap between triggers) before a pipeline reports
            the camera stalled; default: the frame interval plus 5 s (`math.inf`: never).

    Raises:
        SourceNotFoundError: if the device does not exist.
        SourceError: if it exists but cannot be opened (busy, unsupported size...), or
            a control cannot be set.
        ValueError: for inconsistent arguments.
    """

    is_live = True

    def __init__(
        self,
        device: int | str = 0,
        *,
        width: int | None = None,
        height: int | None = None,
        fps: float | None = None,
        input_format: str | None = None,
        backend: str | None = None,
        options: Mapping[str, str] | None = None,
        controls: Mapping[str, str] | None = None,
        source_id: str | None = None,
        clock: Clock = MONOTONIC,
        bit_depth: int | None = None,
        read_timeout: float | None = None,
    ) -> None:
        self._clock = clock
        if isinstance(device, bool) or not isinstance(device, int | str):
            raise ValueError(f"camera device must be an index or a device string, got {device!r}")
        if isinstance(device, int) and device < 0:
            raise ValueError(f"camera index must be >= 0, got {device}")
        self.backend = backend or default_backend()
        self.device = device_name(device, self.backend)
        super().__init__(
            source_id
            if source_id is not None
            else (f"camera:{device}" if isinstance(device, int) else device),
            read_timeout,
        )
        device_options = _device_options(self.backend, width, height, fps, input_format)
        device_options.update(options or {})
        is_v4l2_node = self.backend in ("v4l2", "video4linux2") and self.device.startswith("/dev/")
        if is_v4l2_node and not os.path.exists(self.device):
            raise SourceNotFoundError(f"{self.device}: no such camera device")
        if controls:
            if not is_v4l2_node:
                raise ValueError(
                    f"{self.device}: camera controls are set through V4L2 (Linux /dev/video "
                    f"devices), not {self.backend}; use the camera's own tool"
                )
            set_v4l2_controls(self.device, controls)
        try:
            self._container = _av.open_input(
                self.device, format=self.backend, options=device_options
            )
        except FileNotFoundError as error:
            raise SourceNotFoundError(f"{self.device}: no such camera device") from error
        except (av.error.FFmpegError, ValueError) as error:
            # FFmpeg does not say which option it refused: name every one given.
            given = ", ".join(f"{key}={value}" for key, value in (options or {}).items())
            raise SourceError(
                f"{self.device}: cannot open camera with {self.backend}"
                + (f" and options {given}" if given else "")
                + f": {_av.reason(error)}"
            ) from error
        self._adopt_stream(fps, bit_depth)

    def _adopt_stream(self, fps: float | None, bit_depth: int | None) -> None:
        """Sets up the opened `_container`'s video stream; closes it if that fails."""
        try:
            self._stream = _av.video_stream(self._container, self.device)
        except SourceError:
            self._container.close()
            raise
        self._stream.thread_type = "SLICE"
        self.fps = float(fps) if fps is not None else _av.rate_of(self._stream)
        self.frame_shape = _av.frame_shape(self._stream)
        try:
            self._to_image = ImageConverter(
                self._stream.codec_context.pix_fmt, self.frame_shape[2], bit_depth, self.device
            )
        except ValueError:
            self._container.close()
            raise
        self.bit_depth = self._to_image.bit_depth
        self.n_frames = None
        self.decode_errors = 0

    def _frames(self) -> Iterator[Frame]:
        index = 0
        consecutive_errors = 0
        try:
            for packet in _av.packets(self._container, self._stream, self._stop):
                captured = self._clock()
                try:
                    frames = self._stream.decode(packet)
                except av.error.FFmpegError as error:
                    # Cameras send the odd damaged frame (e.g. a cut MJPEG); skip it.
                    self.decode_errors += 1
                    consecutive_errors += 1
                    if consecutive_errors >= _MAX_CONSECUTIVE_DECODE_ERRORS:
                        raise SourceError(
                            f"{self.device}: {consecutive_errors} frames in a row failed to "
                            f"decode: {_av.reason(error)}"
                        ) from error
                    continue
                consecutive_errors = 0
                for frame in frames:
                    _av.check_size(frame, self.frame_shape, self.device, index, "the camera opened")
                    yield Frame(index, captured, self.source_id, self._to_image(frame))
                    index += 1
        except av.error.FFmpegError as error:
            raise SourceError(
                f"{self.device}: camera stopped after {index} frames: {_av.reason(error)}"
            ) from error

    def _release(self) -> None:
        self._container.close()


def _device_options(
    backend: str,
    width: int | None,
    height: int | None,
    fps: float | None,
    input_format: str | None,
) -> dict[str, str]:
    """FFmpeg device options for the requested size, rate and pixel format."""
    options: dict[str, str] = {}
    if (width is None) != (height is None):
        raise ValueError(f"give camera width and height together, got {width=} {height=}")
    if width is not None and height is not None:
        if width < 1 or height < 1:
            raise ValueError(f"camera size must be positive, got {width}x{height}")
        options["video_size"] = f"{width}x{height}"
    if fps is not None:
        if fps <= 0:
            raise ValueError(f"camera fps must be positive, got {fps}")
        options["framerate"] = f"{fps:g}"
    if input_format is not None:
        options[_PIXEL_FORMAT_OPTION.get(backend, "pixel_format")] = input_format
    return options
