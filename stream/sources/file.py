"""Video files decoded with PyAV: any container and codec FFmpeg reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np

from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import SourceError, SourceNotFoundError
from sleap_live.stream.sources import _av
from sleap_live.stream.sources._base import SourceBase
from sleap_live.stream.sources._depth import ImageConverter
from sleap_live.stream.types import Frame


class FileSource(SourceBase):
    """Frames of a video file, decoded on the CPU with FFmpeg's threaded decoders.

    Gray video has one channel: a gray pixel format's, or, for a video in a colour
    format whose first frame is gray, the red plane of every frame, as sleap-io reads
    it for sleap-nn (`_av.gray_content`). Other video is RGB.

    Frames come as fast as they decode (``is_live`` is False); `ReplaySource` paces a
    file like a camera. Each frame is stamped when the decoder hands it over. Frame
    indices are positions in the file, so with ``start=10`` the first frame has
    index 10 (a start frame is reached by seeking to the keyframe before it).

    Truncated or damaged files: every frame that decodes is yielded, then
    `SourceError` is raised naming the file and the problem, so a consumer keeps what
    it already processed and still learns the video is incomplete. Damage is detected
    from PyAV's decode and read errors, packets FFmpeg flags as cut short, and a file
    ending before the frame count (or duration) its header declares. A file that ends
    cleanly and declares neither cannot be told apart from a complete one. A single
    undecodable packet is skipped so that later frames still come out. With frame
    threading, the few frames in flight when a decode error hits may be lost.

    Attributes:
        path: the video file.
        n_frames: frames in the requested range, from the frame count the header
            declares or, when it declares none (e.g. Matroska), estimated from its
            duration and frame rate; None if neither is known.

    Args:
        path: the video file.
        start: index of the first frame to yield.
        stop: index one past the last frame to yield; None reads to the end.
        source_id: name stamped on every frame; defaults to the path as given.
        clock: what frames are stamped with.
        bit_depth: bits per sample the video's data uses, scaled to 8 (see
            `_depth.ImageConverter`); None: its pixel format's depth.
        read_timeout: most seconds a frame may take before a pipeline reports the
            source stalled; default: the frame interval plus 5 s (`math.inf`: never).

    Raises:
        SourceNotFoundError: if the file does not exist.
        SourceError: if it cannot be opened or holds no video stream (PyAV's reason
            is in the message).
        ValueError: if start/stop are not a valid range, start is past the end, or
            bit_depth is not 8 to 16 or more than the pixel format holds.
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
        bit_depth: int | None = None,
        read_timeout: float | None = None,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        super().__init__(source_id if source_id is not None else os.fspath(path), read_timeout)
        self.video_file = self.path
        self._start, self._stop_index = _frame_range(start, stop)
        if not self.path.exists():
            raise SourceNotFoundError(f"{self.path}: no such file")
        if self.path.is_dir():
            raise SourceError(f"{self.path}: is a directory, not a video file")
        try:
            self._container = _av.open_input(os.fspath(self.path))
        except av.error.FFmpegError as error:
            raise SourceError(f"{self.path}: cannot open video: {_av.reason(error)}") from error
        try:
            self._stream = _av.video_stream(self._container, str(self.path))
        except SourceError:
            self._container.close()
            raise
        self.fps = _av.rate_of(self._stream)
        height, width, channels = _av.frame_shape(self._stream)
        # A gray recording in a colour format is read as sleap-io reads it for sleap-nn:
        # the red plane of every frame (see `_av.gray_content`).
        self._red_plane = channels == 3 and _av.first_frame_gray(os.fspath(self.path))
        self.frame_shape = (height, width, 1 if self._red_plane else channels)
        try:
            self._to_image = ImageConverter(
                self._stream.codec_context.pix_fmt, channels, bit_depth, str(self.path)
            )
        except ValueError:
            self._container.close()
            raise
        self.bit_depth = self._to_image.bit_depth
        self._declared_frames = self._stream.frames or None
        self._expected_frames = self._declared_frames or self._frames_from_duration()
        if self._expected_frames is not None and self._start >= self._expected_frames:
            self._container.close()
            raise ValueError(
                f"{self.path}: start={self._start} is past the end ({self._expected_frames} frames)"
            )
        self.n_frames = self._range_length()

    def _frames_from_duration(self) -> int | None:
        """Frame count implied by the declared duration, or None.

        The container's duration is used only when the video is its only stream, so a
        longer audio track cannot inflate it.
        """
        if self.fps is None:
            return None
        time_base = self._stream.time_base
        if self._stream.duration is not None and time_base is not None:
            seconds = float(self._stream.duration * time_base)
        elif self._container.duration is not None and len(self._container.streams) == 1:
            seconds = self._container.duration / av.time_base
        else:
            return None
        return round(seconds * self.fps) or None

    def _range_length(self) -> int | None:
        if self._expected_frames is None:
            return None
        end = self._expected_frames
        if self._stop_index is not None:
            end = min(end, self._stop_index)
        return max(0, end - self._start)

    def _frames(self) -> Iterator[Frame]:
        log = _DecodeLog()
        seeked = self._start > 0 and self._seek(self._start)
        index: int | None = None if seeked else 0
        last_index = -1
        for frame in self._decoded(log):
            captured = self._clock()
            if index is None:
                index = self._index_of(frame)
                if index is None or index > self._start:
                    found = "no timestamp" if index is None else f"index {index}"
                    raise SourceError(
                        f"{self.path}: cannot seek to frame {self._start}: "
                        f"the first frame after seeking has {found}"
                    )
            if self._stop_index is not None and index >= self._stop_index:
                return
            if index >= self._start:
                _av.check_size(frame, self.frame_shape, str(self.path), index, "the video started")
                yield Frame(index, captured, self.source_id, self._image(frame))
            last_index = index
            index += 1
            if self._stop.is_set():
                return
        if self._stop.is_set():
            return
        self._check_complete(log, seeked, last_index)

    def _image(self, frame: av.VideoFrame) -> np.ndarray:
        image = self._to_image(frame)
        return np.ascontiguousarray(image[..., :1]) if self._red_plane else image

    def _check_complete(self, log: _DecodeLog, seeked: bool, last_index: int) -> None:
        """Raise `SourceError` if the file ended damaged or short of what it declares."""
        if self._declared_frames is not None:
            # Packets, not frames: a valid file's edit list may hide decoded frames.
            if not seeked and log.packets < self._declared_frames:
                log.note(
                    "short",
                    f"the header declares {self._declared_frames} frames "
                    f"but only {log.packets} could be read",
                )
        elif self._expected_frames is not None and last_index + 1 < self._expected_frames - 1:
            log.note(
                "short",
                f"its duration implies about {self._expected_frames} frames "
                f"but it ends after {last_index + 1}",
            )
        if log.frames >= log.packets:
            # Judged by what decodes: a packet flagged as cut short whose frame came out
            # whole (at the seam of byte-concatenated MPEG-TS files) lost nothing.
            log.problems.pop("cut", None)
        if log.problems:
            delivered = (
                f"frames up to index {last_index} were delivered"
                if last_index >= 0
                else "no frame could be decoded"
            )
            raise SourceError(
                f"{self.path}: video is truncated or damaged "
                f"({'; '.join(log.problems.values())}); {delivered}"
            )

    def _decoded(self, log: _DecodeLog) -> Iterator[av.VideoFrame]:
        """Decoded frames in order, skipping packets that fail; problems go to ``log``."""
        try:
            for packet in _av.packets(self._container, self._stream, self._stop):
                if packet.size:
                    log.packets += 1
                if packet.is_corrupt:
                    log.note("cut", f"packet {log.packets} is cut short")
                yield from log.decoded(self._decode_packet(packet, log))
        except av.error.FFmpegError as error:
            log.note("read", f"reading failed after {log.packets} packets: {_av.reason(error)}")
            # The demuxer's end-of-stream flush packet never came; drain the decoder.
            yield from log.decoded(self._decode_packet(None, log))

    def _decode_packet(self, packet: av.Packet | None, log: _DecodeLog) -> list[av.VideoFrame]:
        try:
            return self._stream.decode(packet)
        except av.error.FFmpegError as error:
            log.note("decode", f"decoding failed: {_av.reason(error)}")
            return []

    def _seek(self, start: int) -> bool:
        """Seek to the keyframe at or before frame ``start``; False if it cannot seek."""
        stream = self._stream
        if self.fps is None or stream.time_base is None:
            return False
        offset = Fraction(start) / self._rate()
        target = (stream.start_time or 0) + int(offset / stream.time_base)
        try:
            self._container.seek(target, stream=stream, backward=True)
        except av.error.FFmpegError:
            # Unseekable input: decode from the start and drop frames until `start`.
            return False
        return True

    def _index_of(self, frame: av.VideoFrame) -> int | None:
        """A frame's position in the file, from its timestamp."""
        if frame.pts is None or frame.time_base is None:
            return None
        stream = self._stream
        seconds = (frame.pts - (stream.start_time or 0)) * frame.time_base
        return round(seconds * self._rate())

    def _rate(self) -> Fraction:
        """The stream's frame rate, exact; only called when `fps` is known."""
        rate = self._stream.average_rate or self._stream.guessed_rate
        assert rate is not None, "the stream declares no frame rate"
        return Fraction(rate)

    def _release(self) -> None:
        self._container.close()


class _DecodeLog:
    """What happened while decoding one file: packets read, frames decoded and the
    first problem of each kind."""

    def __init__(self) -> None:
        self.packets = 0
        self.frames = 0
        self.problems: dict[str, str] = {}

    def decoded(self, frames: list[av.VideoFrame]) -> list[av.VideoFrame]:
        """`frames`, counted."""
        self.frames += len(frames)
        return frames

    def note(self, kind: str, detail: str) -> None:
        self.problems.setdefault(kind, detail)


def _frame_range(start: int, stop: int | None) -> tuple[int, int | None]:
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an int >= 0, got {start!r}")
    if stop is not None:
        if isinstance(stop, bool) or not isinstance(stop, int):
            raise ValueError(f"stop must be an int or None, got {stop!r}")
        if stop <= start:
            raise ValueError(f"stop must be greater than start, got start={start}, stop={stop}")
    return start, stop
