"""Overlay videos written with PyAV: RGB frames in, H.264 or lossless FFV1 out.

The video is encoded in a private folder beside the output and renamed onto the
output only when it is finished (the output rule, `output_rule`), so a failed or
cut-short render never leaves a broken file where a good one was. The output is
locked (`OutputLock`) meanwhile. `StagedVideo` does this for the recorder's
videos too.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import IO, cast

import av
import numpy as np

from sleap_live.output_rule import StagedOutput, claim_output
from sleap_live.stream.outputs.guard import OutputLock

# Codec name -> (FFmpeg encoder, pixel format, encoder options). H.264 without
# B-frames so every reader seeks frame-accurately; FFV1 stores RGB exactly.
CODECS: dict[str, tuple[str, str, dict[str, str]]] = {
    "h264": ("libx264", "yuv420p", {"crf": "18", "preset": "veryfast", "bf": "0"}),
    "ffv1": ("ffv1", "bgr0", {}),
}
DEFAULT_CODEC = "h264"


class OverlayWriter:
    """Encodes (H, W, 3) uint8 RGB frames to `path`, one output frame per `write()`.

    H.264 (yuv420p) needs even dimensions: an odd height or width is padded with one
    black row or column at the bottom or right, which leaves coordinates unchanged.

    Args:
        path: the video to write; its suffix picks the container (.mp4, .mkv, .avi).
        fps: frame rate stored in the file.
        size: (height, width) of the frames.
        codec: a key of `CODECS`.
        what: how errors name the output (e.g. "the overlay video").
        overwrite: replace an existing `path` (`output_rule.claim_output`).

    Raises:
        ValueError: bad fps, size, codec, or a suffix FFmpeg cannot write.
        OutputError: the output cannot be written or another run holds it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fps: float,
        size: tuple[int, int],
        *,
        codec: str = DEFAULT_CODEC,
        what: str = "the overlay video",
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        if codec not in CODECS:
            raise ValueError(f"{self.path}: unknown codec {codec!r}; use one of {sorted(CODECS)}")
        if not 0 < fps < float("inf"):
            raise ValueError(f"{self.path}: fps must be positive, got {fps!r}")
        height, width = (int(v) for v in size)
        if height < 1 or width < 1:
            raise ValueError(f"{self.path}: frame size must be positive, got {size!r}")
        self.size = (height, width)
        encoder, pixel_format, options = CODECS[codec]
        claim_output(self.path, what, overwrite=overwrite)
        not_a_video = ValueError(
            f"{self.path}: {self.path.suffix or 'a suffix-less name'} is not a video format "
            "FFmpeg can write; use .mp4, .mkv or .avi"
        )
        self._video = StagedVideo(
            self.path,
            what,
            not_a_video,
            encoder,
            fps,
            (height, width),
            pixel_format,
            dict(options),
        )
        # True once the finished video is at `path`.
        self.written = False

    @property
    def n_frames_written(self) -> int:
        return self._video.n_frames

    def write(self, image: np.ndarray) -> None:
        """Encode one (H, W, 3) uint8 RGB frame.

        Raises:
            ValueError: the writer is closed or the frame has another shape.
        """
        if self._video.closed:
            raise ValueError(f"{self.path}: write() after close()")
        if image.shape != (*self.size, 3) or image.dtype != np.uint8:
            raise ValueError(
                f"{self.path}: frame is {image.dtype} {image.shape}, expected uint8 "
                f"{(*self.size, 3)}"
            )
        self._video.encode(image, "rgb24")

    def close(self) -> None:
        """Flush the encoder and move the finished video onto `path`; idempotent.

        Without frames, or on an error, nothing is written and `path` is left as it was.
        """
        if self._video.finish():
            self.written = True

    def discard(self) -> None:
        """Stop without writing `path` (left as it was); idempotent."""
        self._video.abandon()

    def __enter__(self) -> OverlayWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        # Ctrl-C keeps the frames drawn so far; any other error leaves no file.
        if exc_type is None or issubclass(exc_type, KeyboardInterrupt):
            self.close()
        else:
            self.discard()


class StagedVideo:
    """A video encoded into a staged file (the output rule, `output_rule`) under its
    output's lock, renamed into place by `finish`; what both the overlay writer and
    the recorder write with.

    An odd height or width of a yuv420p video is padded with one black row or column
    at the bottom or right, which leaves coordinates unchanged.

    Args:
        path: the output; `what` names it in errors.
        not_a_video: raised where FFmpeg writes no format of `path`'s suffix.
        encoder, pixel_format, options: the FFmpeg encoder, its stored pixel format
            and its options.
        fps: the frame rate stored (as an exact fraction: 29.97 -> 30000/1001).
        size: (height, width) of the frames.

    Raises:
        ValueError: `not_a_video`.
        OutputError: the output cannot be written or another run holds it.
    """

    def __init__(
        self,
        path: Path,
        what: str,
        not_a_video: ValueError,
        encoder: str,
        fps: float,
        size: tuple[int, int],
        pixel_format: str,
        options: dict[str, object],
    ) -> None:
        height, width = size
        pad_rows, pad_columns = (height % 2, width % 2) if pixel_format == "yuv420p" else (0, 0)
        self._pad = ((0, pad_rows), (0, pad_columns), (0, 0)) if pad_rows or pad_columns else None
        self.staged = StagedOutput(path, what)
        try:
            self._lock = OutputLock(self.staged.target, what)
        except BaseException:
            self.staged.discard()
            raise
        self.closed = False
        self.n_frames = 0
        self.sidecar: IO[str] | None = None
        try:
            self._container = av.open(str(self.staged.file()), "w")
        except ValueError:
            self._unlock()
            raise not_a_video from None
        except BaseException:
            self._unlock()
            raise
        try:
            rate = Fraction(fps).limit_denominator(1001)
            stream = cast(av.video.stream.VideoStream, self._container.add_stream(encoder, rate))
            stream.width = width + pad_columns
            stream.height = height + pad_rows
            stream.pix_fmt = pixel_format
            stream.options = options
        except BaseException:
            self.abandon()
            raise
        self._stream = stream

    def encode(self, image: np.ndarray, pixel_format: str) -> None:
        """Encode one (H, W, C) uint8 frame as the next; ``"gray"`` takes channel 0."""
        if self._pad is not None:
            image = np.pad(image, self._pad)
        plane = image[..., 0] if pixel_format == "gray" else image
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(plane), pixel_format)
        frame.pts = self.n_frames
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.n_frames += 1

    def finish(self, *names: str) -> bool:
        """Encode the encoder's last frames, close the file (and `sidecar`, a file
        staged beside it) and rename them into place (`names`: `StagedOutput.commit`),
        then unlock; whether it was written. Without frames nothing is (`abandon`);
        on an error nothing is renamed and what was staged is removed. Idempotent."""
        if self.closed:
            return False
        if not self.n_frames:
            self.abandon()
            return False
        self.closed = True
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            if self.sidecar is not None:
                self.sidecar.close()
            self.staged.commit(*names)
        except BaseException:
            self._container.close()
            if self.sidecar is not None:
                self.sidecar.close()
            self._unlock()
            raise
        self._lock.release()
        return True

    def abandon(self) -> None:
        """Stop without renaming anything into place; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self._container.close()
        finally:
            if self.sidecar is not None:
                self.sidecar.close()
            self._unlock()

    def _unlock(self) -> None:
        """Remove what was staged, and the lock's file where it was made for this video."""
        self.staged.discard()
        if self._lock.created and self._lock.fd is not None:
            self.staged.target.unlink(missing_ok=True)
        self._lock.release()
