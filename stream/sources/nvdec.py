"""Video files decoded on the GPU with NVDEC (PyNvVideoCodec), frames kept on the device.

PyNvVideoCodec's `ThreadedDecoder` decodes ahead on its own thread into device
memory; each decoded frame is an NV12 surface that reaches torch through DLPack
with no copy. The decoder reuses its surfaces for later frames, so every surface
is converted (`nv12`, bit-identical to PyAV's conversion of the same NV12 frame)
into one of the source's own device buffers, and that work has finished, before
the next frames are asked for. Frames then carry a torch CUDA tensor as `image`.

Which decoder a file gets is decided by `choose_decoder`; `open_file` opens it
and falls back to PyAV (`FileSource`) with a one-line notice naming what is
missing. Only what `nv12` reproduces exactly is decoded here: 8-bit 4:2:0 H.264,
HEVC or AV1 at an even frame size; anything else (10-bit P010 frames, odd sizes,
other codecs) goes to PyAV, so poses never depend on the decoder chosen.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import SourceError, SourceNotFoundError, first_line
from sleap_live.stream.sources import _av
from sleap_live.stream.sources._base import SourceBase
from sleap_live.stream.sources._depth import check_bit_depth
from sleap_live.stream.types import Frame

DECODERS: tuple[str, ...] = ("auto", "nvdec", "pyav")
INSTALL_HINT = "pip install PyNvVideoCodec"
# What NVDEC decodes that `nv12` converts exactly: FFmpeg codec and pixel format names.
NVDEC_CODECS = frozenset({"h264", "hevc", "av1"})
NVDEC_PIXEL_FORMATS = frozenset({"yuv420p", "yuvj420p", "nv12"})
# Frames decoded per request, and device image buffers the source cycles through.
DECODE_BATCH = 4
DEFAULT_BUFFERS = 64

logger = logging.getLogger(__name__)


class NvdecStartError(SourceError):
    """NVDEC could not start here: PyNvVideoCodec would not import, no GPU, the driver's
    video libraries are missing, or the decoder refused to open; `open_file` then
    decodes with PyAV instead."""


@attrs.frozen
class StreamInfo:
    """What PyAV reads from a file's header, to choose a decoder and describe frames.

    ``gray_content``: the first frame, though in a colour format, is gray
    (`_av.gray_content`); frames are then its red plane, as `FileSource` hands out.
    """

    codec: str
    pixel_format: str | None
    width: int
    height: int
    colorspace: int | None
    color_range: int | None
    fps: float | None
    n_frames: int | None
    gray_content: bool = False


def probe(path: str | os.PathLike[str]) -> StreamInfo:
    """The first video stream's codec, format, size, colour tags, rate and length.

    Raises:
        SourceNotFoundError: no such file.
        SourceError: it cannot be opened or has no video stream.
    """
    if not Path(path).is_file():
        raise SourceNotFoundError(f"{path}: no such file")
    import av.error

    try:
        container = _av.open_input(os.fspath(path))
    except av.error.FFmpegError as error:
        raise SourceError(f"{path}: cannot open video: {_av.reason(error)}") from error
    try:
        stream = _av.video_stream(container, str(path))
        context = stream.codec_context
        return StreamInfo(
            codec=context.name,
            pixel_format=context.pix_fmt,
            width=context.width,
            height=context.height,
            colorspace=getattr(context, "colorspace", None),
            color_range=getattr(context, "color_range", None),
            fps=_av.rate_of(stream),
            n_frames=stream.frames or None,
            gray_content=not _av.is_gray(context.pix_fmt) and _av.first_frame_gray(str(path)),
        )
    finally:
        container.close()


def nvdec_unavailable(info: StreamInfo) -> str | None:
    """Why NVDEC cannot decode this stream exactly here, or None if it can."""
    if importlib.util.find_spec("PyNvVideoCodec") is None:
        return f"PyNvVideoCodec is not installed ({INSTALL_HINT})"
    try:
        import_pynvvideocodec()
    except SourceError as error:
        return str(error)
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device is available to torch"
    if info.codec not in NVDEC_CODECS:
        return f"NVDEC does not decode {info.codec} (it decodes {', '.join(sorted(NVDEC_CODECS))})"
    if info.pixel_format not in NVDEC_PIXEL_FORMATS:
        return (
            f"{info.pixel_format} frames are not converted bit-identically to PyAV's "
            "(8-bit 4:2:0 only)"
        )
    from sleap_live.stream.sources import nv12

    channels = 1 if _av.is_gray(info.pixel_format) else 3
    return nv12.reproducible(info.width, info.height, nv12.matrix_of(info.colorspace), channels)


@attrs.frozen
class DecoderChoice:
    """The decoder a file gets, and the notice to show when it is not the one asked for."""

    decoder: str
    notice: str | None


def choose_decoder(requested: str, info: StreamInfo) -> DecoderChoice:
    """``"nvdec"`` or ``"pyav"`` for a file, from ``requested`` (one of `DECODERS`).

    ``"auto"`` and ``"nvdec"`` pick NVDEC when `nvdec_unavailable` finds nothing
    missing; otherwise PyAV, with a one-line notice saying why.

    Raises:
        ValueError: an unknown decoder name.
    """
    if requested not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}; got {requested!r}")
    if requested == "pyav":
        return DecoderChoice("pyav", None)
    reason = nvdec_unavailable(info)
    if reason is None:
        return DecoderChoice("nvdec", None)
    return _pyav_instead(reason)


def _pyav_instead(reason: object) -> DecoderChoice:
    return DecoderChoice("pyav", f"NVDEC not used: {reason}; decoding with PyAV on the CPU")


def report(choice: DecoderChoice, requested: str) -> None:
    """Log a fallback's notice: a warning when NVDEC was asked for, info under auto."""
    if choice.notice is not None:
        logger.log(logging.WARNING if requested == "nvdec" else logging.INFO, choice.notice)


class NvdecSource(SourceBase):
    """Frames of a video file decoded by NVDEC; each `Frame.image` is a CUDA tensor.

    Frame indices and timestamps follow `FileSource`: indices are positions in the
    file (``start=10`` gives index 10 first), each frame is stamped on ``clock``
    when it is handed over. Images are (H, W, C) uint8 tensors on ``device``, RGB
    for colour video and the red plane alone for a gray one (`StreamInfo`), in
    ``buffers`` device buffers used in turn (`ReusedBuffers`). A consumer that
    copies an image on a CUDA stream calls the frame's ``release`` with that
    stream (the pipeline's batcher does, after stacking): the buffer is written
    again only after that copy, by a CUDA event. An image never released stays
    valid until ``buffers`` more frames have been read.

    Args:
        path: the video file; NVDEC must be able to decode it (see `choose_decoder`).
        start: index of the first frame to yield.
        stop: index one past the last frame to yield; None reads to the end.
        source_id: name stamped on every frame; defaults to the path as given.
        clock: what frames are stamped with.
        device: the CUDA device to decode on ("cuda:N"; "cuda": the current one).
        buffers: device image buffers cycled through (at least 2).
        info: the file's `probe`, if already read.
        read_timeout: most seconds a frame may take before a pipeline reports the
            source stalled; default: the frame interval plus 5 s (`math.inf`: never).

    Raises:
        SourceNotFoundError, SourceError: as `probe`.
        NvdecStartError: NVDEC cannot start here (PyNvVideoCodec, the GPU or its
            driver) or cannot open the file.
        ValueError: a bad range or buffer count.
    """

    is_live = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        start: int = 0,
        stop: int | None = None,
        source_id: str | None = None,
        clock: Clock = MONOTONIC,
        device: str = "cuda:0",
        buffers: int = DEFAULT_BUFFERS,
        info: StreamInfo | None = None,
        read_timeout: float | None = None,
    ) -> None:
        import torch

        from sleap_live.stream.sources import nv12

        super().__init__(source_id if source_id is not None else os.fspath(path), read_timeout)
        if start < 0 or (stop is not None and stop <= start):
            raise ValueError(f"start and stop must be 0 <= start < stop; got {start}, {stop}")
        if buffers < 2:
            raise ValueError(f"buffers must be at least 2, got {buffers}")
        self.path = Path(path)
        self.video_file = self.path
        self._clock = clock
        self._start, self._stop_index = start, stop
        self.info = info if info is not None else probe(path)
        self.fps = self.info.fps
        self.bit_depth = 8  # NVDEC decodes 8-bit video only (`open_file` refuses more)
        gray = _av.is_gray(self.info.pixel_format) or self.info.gray_content
        self.frame_shape = (self.info.height, self.info.width, 1 if gray else 3)
        total = self.info.n_frames
        if total is not None and stop is not None:
            total = min(total, stop)
        self.n_frames = None if total is None else max(0, total - start)
        self.device = _indexed(torch.device(device))
        self._full_range = nv12.is_full_range(self.info.color_range)
        # Decode and conversion run on this stream, apart from inference's.
        self.stream: Any = None
        try:
            self._tables = nv12.yuv_tables(
                nv12.matrix_of(self.info.colorspace), self._full_range, self.device
            )
            self._buffers = ReusedBuffers(
                [
                    torch.empty(self.frame_shape, dtype=torch.uint8, device=self.device)
                    for _ in range(buffers)
                ],
                self._wait_for,
            )
            if self.device.type == "cuda":
                self.stream = torch.cuda.Stream(self.device)
        except (RuntimeError, AssertionError) as error:  # no GPU, no driver, CUDA errors
            raise NvdecStartError(
                f"{path}: NVDEC cannot start on {self.device}: {first_line(error)}"
            ) from error
        self._decoder = _open_decoder(self.path, self.device, self.stream, start)

    def _frames(self) -> Iterator[Frame]:
        index = self._start
        while not self._stop.is_set():
            decoded = self._decoder.get_batch_frames(DECODE_BATCH)
            if not decoded:
                return
            images = []
            for surface in decoded:
                slot, buffer = self._buffers.take()
                images.append((slot, self._copy_out(surface, buffer)))
            # The decoder may overwrite these surfaces once asked for more frames:
            # the copies must be complete first.
            self._synchronize()
            for slot, image in images:
                if self._stop_index is not None and index >= self._stop_index:
                    return
                release = functools.partial(self._release_after, slot)
                yield Frame(index, self._clock(), self.source_id, image, release)
                index += 1

    def _release_after(self, slot: int, stream: Any) -> None:
        """`Frame.release`: buffer `slot` is reused only after the work queued on `stream`."""
        if self.stream is None:  # host tensors (tests): nothing runs ahead of the host
            return
        import torch

        copied = torch.cuda.Event()
        copied.record(stream)
        self._buffers.copied(slot, copied)

    def _wait_for(self, copied: Any) -> None:
        if self.stream is not None:
            self.stream.wait_event(copied)

    def _copy_out(self, surface: Any, buffer: Any) -> Any:
        import torch

        from sleap_live.stream.sources import nv12

        height, width, channels = self.frame_shape
        with _on(self.stream):
            planes = torch.from_dlpack(surface)
            luma, chroma = nv12.split_nv12(planes, height, width)
            rgb = nv12.nv12_to_rgb(luma, chroma, self._tables)
            # Gray content: the red plane, as FileSource hands it out.
            buffer.copy_(rgb[..., :1] if channels == 1 else rgb)
        return buffer

    def _synchronize(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()

    def _release(self) -> None:
        end = getattr(self._decoder, "end", None)
        if end is not None:
            end()
        self._decoder = None
        self._buffers.clear()


class ReusedBuffers:
    """A source's device image buffers, taken in turn, each reused only once its last
    frame's consumer has copied it.

    A consumer that copies a frame's image on a CUDA stream calls `Frame.release`
    with that stream; the source records an event there (`copied`), and before it
    writes the buffer again its own stream waits for that event (`wait`), so the
    copy always reads the frame it was given, however far the GPU runs behind the
    host. A buffer whose frame was never released (a frame read outside a pipeline)
    is reused after the others, as before: valid until `len(buffers)` more frames.

    Args:
        wait: makes the source's stream wait for an event.
    """

    def __init__(self, buffers: list[Any], wait: Callable[[Any], None]) -> None:
        self._buffers = buffers
        self._copied: list[Any] = [None] * len(buffers)
        self._wait = wait
        self._next = 0

    def take(self) -> tuple[int, Any]:
        """The next buffer's slot and buffer, once its last copy is ordered before."""
        slot = self._next
        self._next = (slot + 1) % len(self._buffers)
        copied, self._copied[slot] = self._copied[slot], None
        if copied is not None:
            self._wait(copied)
        return slot, self._buffers[slot]

    def copied(self, slot: int, event: Any) -> None:
        """Buffer `slot`'s consumer queued its copy before `event` (a CUDA event)."""
        self._copied[slot] = event

    def clear(self) -> None:
        self._buffers.clear()
        self._copied.clear()


def _indexed(device: Any) -> Any:
    """A CUDA device with its index ("cuda" is the current device): NVDEC, the
    buffers and the stream all on that one GPU."""
    import torch

    if device.type == "cuda" and device.index is None:
        try:
            return torch.device("cuda", torch.cuda.current_device())
        except (RuntimeError, AssertionError) as error:
            raise NvdecStartError(f"NVDEC cannot start: {first_line(error)}") from error
    return device


def _on(stream: Any) -> Any:
    """A context that makes `stream` torch's current stream (no-op for None)."""
    import contextlib

    import torch

    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def import_pynvvideocodec() -> Any:
    """The `PyNvVideoCodec` module, or `NvdecStartError` saying in one line why not.

    Its import fails in more ways than ImportError: without the driver's video
    libraries (a container without the video capability) it raises RuntimeError,
    and a missing shared library can surface as OSError.
    """
    try:
        import PyNvVideoCodec as nvc  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as error:
        raise NvdecStartError(
            f"PyNvVideoCodec cannot be imported ({first_line(error)}; {INSTALL_HINT})"
        ) from error
    except Exception as error:  # RuntimeError, OSError: the driver's libraries are missing
        raise NvdecStartError(
            f"PyNvVideoCodec cannot start ({type(error).__name__}: {first_line(error)}); "
            "it needs the NVIDIA driver's video libraries (in a container: "
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility,video)"
        ) from error
    return nvc


def _open_decoder(path: Path, device: Any, stream: Any, start: int) -> Any:
    """PyNvVideoCodec's ThreadedDecoder for `path`, decoding NV12 into device memory."""
    nvc = import_pynvvideocodec()
    try:
        return nvc.ThreadedDecoder(
            os.fspath(path),
            buffer_size=2 * DECODE_BATCH,
            gpu_id=device.index if device.type == "cuda" else 0,
            cuda_context=0,
            cuda_stream=0 if stream is None else stream.cuda_stream,
            use_device_memory=True,
            output_color_type=nvc.OutputColorType.NATIVE,
            start_frame=start,
        )
    except Exception as error:  # PyNvVideoCodec raises RuntimeError and its own types
        raise NvdecStartError(f"{path}: NVDEC cannot open it: {first_line(error)}") from error


def open_file(
    path: str | os.PathLike[str],
    decoder: str = "pyav",
    *,
    start: int = 0,
    stop: int | None = None,
    source_id: str | None = None,
    clock: Clock = MONOTONIC,
    bit_depth: int | None = None,
    read_timeout: float | None = None,
    device: str = "cuda",
) -> SourceBase:
    """The file `path` as a `NvdecSource` or a `FileSource`, as `choose_decoder` picks,
    or a `FileSource` where NVDEC was picked but could not start (`NvdecStartError`).

    NVDEC decodes 8-bit video only, so a `bit_depth` above 8 is a `ValueError` there.

    ``device``: the CUDA device NVDEC decodes on ("cuda:N"; "cuda": the current one).

    The source's ``decoder`` attribute says which it is (``"nvdec"`` or ``"pyav"``),
    and ``decoder_notice`` why NVDEC was not used (None when it was, or not asked
    for). The notice is also logged once (`report`).
    """
    from sleap_live.stream.sources.file import FileSource

    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}; got {decoder!r}")
    choice = DecoderChoice("pyav", None)
    info: StreamInfo | None = None
    if decoder != "pyav":
        info = probe(path)
        choice = choose_decoder(decoder, info)
        report(choice, decoder)
    # What both decoders' sources are given.
    common: dict[str, Any] = {
        "start": start,
        "stop": stop,
        "source_id": source_id,
        "clock": clock,
        "read_timeout": read_timeout,
    }
    source: SourceBase | None = None
    if choice.decoder == "nvdec":
        check_bit_depth(bit_depth)
        if bit_depth not in (None, 8):
            raise ValueError(
                f"{path}: bit depth {bit_depth} is more than the 8 bits per sample NVDEC "
                "decodes this video to; use the pyav decoder"
            )
        try:
            source = NvdecSource(path, device=device, info=info, **common)
        except NvdecStartError as error:
            choice = _pyav_instead(error)
            report(choice, decoder)
    if source is None:
        source = FileSource(path, bit_depth=bit_depth, **common)
    source.decoder = choice.decoder
    source.decoder_notice = choice.notice
    return source
