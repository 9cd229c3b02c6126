"""Overlay videos written with PyAV: RGB frames in, H.264 or lossless FFV1 out.

The video is encoded in a private folder beside the output and renamed onto the
output only when it is finished (the output rule, `staging`), so a failed or
cut-short render never leaves a broken file where a good one was. The output is
locked (`OutputLock`) meanwhile. `open_staged` and `abandon` do this for the
recorder's videos too.
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
        overwrite: replace an existing `path` (`guard.claim_output`).

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
        self._pad = pixel_format == "yuv420p" and (height % 2 or width % 2)
        claim_output(self.path, what, overwrite=overwrite)
        not_a_video = ValueError(
            f"{self.path}: {self.path.suffix or 'a suffix-less name'} is not a video format "
            "FFmpeg can write; use .mp4, .mkv or .avi"
        )
        self._staged, self._lock, self._container = open_staged(self.path, what, not_a_video)
        try:
            rate = Fraction(fps).limit_denominator(1001)
            stream = cast(av.video.stream.VideoStream, self._container.add_stream(encoder, rate))
            stream.width = width + width % 2 if self._pad else width
            stream.height = height + height % 2 if self._pad else height
            stream.pix_fmt = pixel_format
            stream.options = dict(options)
        except BaseException:
            self._container.close()
            abandon(self._staged, self._lock)
            raise
        self._stream = stream
        self.n_frames_written = 0
        # True once the finished video is at `path`.
        self.written = False
        self._closed = False

    def write(self, image: np.ndarray) -> None:
        """Encode one (H, W, 3) uint8 RGB frame.

        Raises:
            ValueError: the writer is closed or the frame has another shape.
        """
        if self._closed:
            raise ValueError(f"{self.path}: write() after close()")
        if image.shape != (*self.size, 3) or image.dtype != np.uint8:
            raise ValueError(
                f"{self.path}: frame is {image.dtype} {image.shape}, expected uint8 "
                f"{(*self.size, 3)}"
            )
        if self._pad:
            image = np.pad(image, ((0, self.size[0] % 2), (0, self.size[1] % 2), (0, 0)))
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), "rgb24")
        frame.pts = self.n_frames_written
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.n_frames_written += 1

    def close(self) -> None:
        """Flush the encoder and move the finished video onto `path`; idempotent.

        Without frames, or on an error, nothing is written and `path` is left as it was.
        """
        if self._closed:
            return
        if not self.n_frames_written:
            self.discard()
            return
        self._closed = True
        finish_staged(self._staged, self._lock, self._stream, self._container)
        self.written = True

    def discard(self) -> None:
        """Stop without writing `path` (left as it was); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._container.close()
        abandon(self._staged, self._lock)

    def __enter__(self) -> OverlayWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        # Ctrl-C keeps the frames drawn so far; any other error leaves no file.
        if exc_type is None or issubclass(exc_type, KeyboardInterrupt):
            self.close()
        else:
            self.discard()


def open_staged(
    path: Path, what: str, not_a_video: ValueError
) -> tuple[StagedOutput, OutputLock, av.container.OutputContainer]:
    """Stage `path` (the output rule, `staging`), lock its target and open the staged
    file for PyAV to write; nothing is left behind on failure.

    Raises:
        ValueError: `not_a_video`, where FFmpeg writes no format of `path`'s suffix.
        OutputError: the output cannot be written or another run holds it.
    """
    staged = StagedOutput(path, what)
    try:
        lock = OutputLock(staged.target, what)
    except BaseException:
        staged.discard()
        raise
    try:
        return staged, lock, av.open(str(staged.file()), "w")
    except ValueError:
        abandon(staged, lock)
        raise not_a_video from None
    except BaseException:
        abandon(staged, lock)
        raise


def finish_staged(
    staged: StagedOutput,
    lock: OutputLock,
    stream: av.video.stream.VideoStream,
    container: av.container.OutputContainer,
    *names: str,
    sidecar: IO[str] | None = None,
) -> None:
    """Encode the encoder's last frames, close the file (and `sidecar`, a file staged
    beside it) and rename them into place (`names`: `StagedOutput.commit`), then
    unlock; on an error nothing is renamed and what was staged is removed."""
    try:
        for packet in stream.encode():
            container.mux(packet)
        container.close()
        if sidecar is not None:
            sidecar.close()
        staged.commit(*names)
    except BaseException:
        container.close()
        if sidecar is not None:
            sidecar.close()
        abandon(staged, lock)
        raise
    lock.release()


def abandon(staged: StagedOutput, lock: OutputLock) -> None:
    """Remove what was staged, and the lock's file where it was made for this video."""
    staged.discard()
    if lock.created and lock.fd is not None:
        staged.target.unlink(missing_ok=True)
    lock.release()
