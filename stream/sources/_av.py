"""PyAV helpers shared by the file and camera sources: opening, pixel formats, conversion."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

import av
import av.container
import av.error
import av.video.stream
import numpy as np

from sleap_live.stream.errors import SourceError

# Single-channel pixel formats: gray at any depth, gray with alpha, and 1-bit mono.
_GRAY_FORMAT_PREFIXES = ("gray", "ya", "mono")


def reason(error: BaseException) -> str:
    """PyAV's description of what went wrong, without the repeated file name."""
    if isinstance(error, av.error.FFmpegError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def open_input(
    url: str,
    *,
    format: str | None = None,
    options: Mapping[str, str] | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> av.container.InputContainer:
    """`av.open` for reading; PyAV's own errors propagate for the caller to explain."""
    return av.open(url, mode="r", format=format, options=dict(options or {}), timeout=timeout)


def video_stream(container: av.container.InputContainer, name: str) -> av.video.stream.VideoStream:
    """The first video stream, set up for threaded decoding.

    Raises:
        SourceError: if there is no video stream or it has no frame size.
    """
    if not container.streams.video:
        kinds: list[str] = sorted({stream.type for stream in container.streams}) or ["none"]
        raise SourceError(f"{name}: no video stream (streams found: {', '.join(kinds)})")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    if not stream.codec_context.width or not stream.codec_context.height:
        raise SourceError(f"{name}: video stream has no frame size; the file may be damaged")
    return stream


def packets(
    container: av.container.InputContainer,
    stream: av.video.stream.VideoStream,
    stop: threading.Event,
) -> Iterator[av.Packet]:
    """The demux loop: `stream`'s packets until the input ends or `stop` is set.

    PyAV's read errors (`av.error.FFmpegError`) propagate for the caller to judge.
    """
    demuxed = container.demux(stream)
    while not stop.is_set():
        try:
            packet = next(demuxed)
        except StopIteration:
            return
        yield packet


def is_gray(pixel_format: str | None) -> bool:
    """Whether frames in this FFmpeg pixel format have one channel."""
    return pixel_format is not None and pixel_format.startswith(_GRAY_FORMAT_PREFIXES)


def frame_shape(stream: av.video.stream.VideoStream) -> tuple[int, int, int]:
    """(height, width, channels) of the images made from this stream's frames."""
    context = stream.codec_context
    channels = 1 if is_gray(context.pix_fmt) else 3
    return (context.height, context.width, channels)


def gray_content(frame: av.VideoFrame) -> bool:
    """Whether a colour frame holds a gray image, by sleap-io's test: as RGB, its red
    and blue planes are equal.

    sleap-io (which sleap-nn reads videos with, to train as to predict) makes this
    test on a video's first frame and then hands out only the red plane of every
    frame, so a gray recording stored as YUV (as most H.264 is) reaches the model as
    its own levels. Converted with sleap-nn's RGB-to-gray weights instead, which sum
    to 0.9999 and are truncated, every pixel would come out one level darker.
    """
    image = frame.to_ndarray(format="rgb24")
    return bool(np.array_equal(image[..., 0], image[..., 2]))


def first_frame_gray(url: str) -> bool:
    """`gray_content` of a video's first frame; False when it has none that decodes
    (reading it later reports why)."""
    try:
        with open_input(url) as container:
            if not container.streams.video:
                return False
            for frame in container.decode(container.streams.video[0]):
                return gray_content(frame)
    except av.error.FFmpegError:
        pass
    return False


def to_image(frame: av.VideoFrame, channels: int) -> np.ndarray:
    """(H, W, channels) contiguous uint8 image: gray for 1 channel, RGB for 3."""
    if channels == 1:
        return np.ascontiguousarray(frame.to_ndarray(format="gray")[:, :, None])
    return np.ascontiguousarray(frame.to_ndarray(format="rgb24"))


def rate_of(stream: av.video.stream.VideoStream) -> float | None:
    """Frames per second the stream declares, or None if it declares none."""
    rate = stream.average_rate or stream.guessed_rate
    return float(rate) if rate else None


def check_size(
    frame: av.VideoFrame, shape: tuple[int, int, int], name: str, index: int, opened: str
) -> None:
    """Raise `SourceError` where frame `index` of `name` is not the size `opened`
    (e.g. "the camera opened") at, `shape`: resolution changes are not supported."""
    height, width, _ = shape
    if (frame.height, frame.width) != (height, width):
        raise SourceError(
            f"{name}: frame {index} is {frame.width}x{frame.height} but {opened} "
            f"at {width}x{height}; resolution changes are not supported"
        )
