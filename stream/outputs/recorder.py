"""Frames to a video file: `VideoRecorder` (PyAV), its codecs and its capture-time
sidecar (``NAME.mkv.timestamps.csv``)."""

from __future__ import annotations

import csv
import functools
import os
from collections.abc import Mapping
from pathlib import Path

import attrs
import av
import numpy as np

from sleap_live.output_rule import claim_output
from sleap_live.stream.outputs.base import EncodedOutput
from sleap_live.stream.outputs.overlay_writer import StagedVideo
from sleap_live.stream.types import PoseRecord


def check_recording_path(path: Path) -> None:
    """Raises `ValueError`, naming `path`, unless its suffix is one FFmpeg writes: a
    recording named like a model or a .slp is refused before any work."""
    if path.suffix.lstrip(".").lower() not in _written_suffixes():
        raise _not_a_video_format(path)


@functools.cache
def _written_suffixes() -> frozenset[str]:
    """File name extensions of every container format FFmpeg can write."""
    suffixes: set[str] = set()
    for name in av.formats_available:
        try:
            suffixes.update(av.ContainerFormat(name, "w").extensions)
        except ValueError:  # an input-only format
            continue
    return frozenset(suffixes)


def _not_a_video_format(path: Path) -> ValueError:
    return ValueError(
        f"{path}: cannot record to a {path.suffix or 'suffix-less'} file: it is not a video "
        "format FFmpeg can write; use .mp4, .mkv or .avi"
    )


@attrs.frozen
class RecordCodec:
    """How `VideoRecorder` encodes with one codec.

    Attributes:
        encoder: FFmpeg encoder name.
        lossless: whether decoded frames equal the frames written, bit for bit.
        pixel_formats: the stored pixel format for RGB and for grayscale frames.
        containers: file suffixes whose containers take the codec.
        quality: default CRF, or None where the codec takes no quality setting.
        options: encoder options besides the quality.
    """

    encoder: str
    lossless: bool
    pixel_formats: tuple[str, str]
    containers: frozenset[str] | None = None
    quality: int | None = None
    options: Mapping[str, str] = attrs.field(factory=dict)


def _lossy(encoder: str, quality: int, options: Mapping[str, str]) -> RecordCodec:
    """An x264-family codec: yuv420p (even sizes), a CRF, the veryfast preset."""
    yuv = ("yuv420p", "yuv420p")
    return RecordCodec(
        encoder, False, yuv, quality=quality, options={"preset": "veryfast", **options}
    )


# B-frames are off so every reader seeks frame-accurately and frames leave the
# encoder without reordering delay.
RECORD_CODECS: Mapping[str, RecordCodec] = {
    "h264": _lossy("libx264", 18, {"bf": "0"}),
    "h265": _lossy("libx265", 23, {"x265-params": "bframes=0:log-level=error"}),
    # FFV1 stores RGB as bgr0 and gray as gray: both exact, at any frame size.
    "ffv1": RecordCodec(
        "ffv1",
        True,
        ("bgr0", "gray"),
        frozenset({"mkv", "avi", "nut"}),
        options={"level": "3", "slicecrc": "1"},
    ),
}
DEFAULT_RECORD_CODEC = "h264"

# The capture times of a recording's frames, beside it (see `VideoRecorder`).
TIMESTAMPS_SUFFIX = ".timestamps.csv"
TIMESTAMP_COLUMNS = ("frame", "source_frame_index", "capture_time")


def timestamps_path(recording: Path) -> Path:
    """The capture-time sidecar of `recording`: ``NAME.mkv.timestamps.csv`` beside it."""
    return recording.with_name(recording.name + TIMESTAMPS_SUFFIX)


def check_record_codec(path: Path, codec: str, quality: int | None) -> None:
    """Raises `ValueError`, naming the option, unless `codec` and `quality` suit `path`."""
    if codec not in RECORD_CODECS:
        raise ValueError(
            f"--record-codec: unknown codec {codec!r}; use one of {', '.join(RECORD_CODECS)}"
        )
    chosen = RECORD_CODECS[codec]
    if quality is not None and chosen.quality is None:
        raise ValueError(f"--record-quality: {codec} is lossless and takes no quality setting")
    if quality is not None and not 0 <= quality <= 51:
        raise ValueError(f"--record-quality: the CRF must be 0 to 51, got {quality}")
    suffix = path.suffix.lstrip(".").lower()
    if chosen.containers is not None and suffix not in chosen.containers:
        raise ValueError(
            f"{path}: a {codec} recording needs a "
            f"{' or '.join('.' + name for name in sorted(chosen.containers))} file"
        )


class VideoRecorder(EncodedOutput):
    """Encodes frames to a video file with PyAV, one output frame per `encode()`.

    As an `Output` of a pipeline, `write(record, image)` encodes the record's frame.

    The pipeline records exactly the frames it emitted poses for, in order, so
    frame k of the recording is the k-th pose record (see `SlpWriter(renumber=True)`).
    Frames are stored at a constant `fps`, so frame k plays at k / fps and every
    reader finds it by its index; when a live run drops frames the recording is
    therefore shorter than the wall-clock run. The times the frames were captured
    are in a sidecar, ``NAME.timestamps.csv`` (`timestamps_path`): one row per
    frame, `TIMESTAMP_COLUMNS` (the frame's index in the recording, in the source,
    and its capture time in seconds on the source's clock), written as frames come.

    Both are written in a private folder beside `path` and renamed into place when
    the recorder closes (the output rule, `output_rule`), which the pipeline does however
    the run ends: until then an earlier recording at `path` is untouched, and a
    discarded (failed) recording never replaces it. A killed process leaves them in
    that hidden folder (``.NAME.PID.HEX.partial``).

    Codecs (`RECORD_CODECS`): "h264" (default, lossy, CRF 18) and "h265" (lossy,
    CRF 23) store yuv420p and need even sizes, so an odd height or width is padded
    with one black row or column at the bottom or right (pixel coordinates stay
    the same); "ffv1" (in .mkv or .avi) is lossless: decoded frames equal the
    frames written, bit for bit.

    Args:
        path: video file to write (its suffix picks the container, e.g. .mp4).
        fps: frame rate stored in the file.
        frame_shape: (height, width, channels) of the frames, channels 1 or 3 (RGB).
        codec: a key of `RECORD_CODECS`.
        crf: constant rate factor of a lossy codec (0 best, 51 worst); None: the
            codec's default.
        preset: x264/x265 speed preset; faster presets keep up with faster cameras.
        overwrite: replace an existing `path` (`output_rule.claim_output`).

    Raises:
        ValueError: bad fps, frame shape, codec, quality or suffix.
        FileNotFoundError: the folder `path` would be written in does not exist.
        OutputError: `path` exists (without `overwrite`), cannot be written, or
            another run holds it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fps: float,
        frame_shape: tuple[int, int, int],
        *,
        codec: str = DEFAULT_RECORD_CODEC,
        crf: int | None = None,
        preset: str | None = None,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"{self.path}: folder {self.path.parent} does not exist")
        if not self.path.suffix:
            raise ValueError(f"{self.path}: give the recording a video suffix such as .mp4")
        if not 0 < fps < float("inf"):
            raise ValueError(f"{self.path}: recording fps must be positive, got {fps!r}")
        if len(frame_shape) != 3 or frame_shape[2] not in (1, 3):
            raise ValueError(
                f"{self.path}: frame_shape must be (H, W, 1 or 3), got {frame_shape!r}"
            )
        check_record_codec(self.path, codec, crf)
        self.codec = codec
        chosen = RECORD_CODECS[codec]
        self.lossless = chosen.lossless
        self.frame_shape = tuple(int(v) for v in frame_shape)
        height, width, channels = self.frame_shape
        self._pixel_format = "rgb24" if channels == 3 else "gray"
        self.timestamps = timestamps_path(self.path)
        claim_output(self.path, "the recording", overwrite=overwrite)
        claim_output(self.timestamps, "the recording's timestamps", overwrite=overwrite)
        options: dict[str, object] = dict(chosen.options)
        if preset is not None:
            options["preset"] = preset
        quality = crf if crf is not None else chosen.quality
        if quality is not None:
            options["crf"] = str(quality)
        self._video = StagedVideo(
            self.path,
            "the recording",
            _not_a_video_format(self.path),
            chosen.encoder,
            fps,
            (height, width),
            chosen.pixel_formats[0 if channels == 3 else 1],
            options,
        )
        try:
            self._video.sidecar = self._times = open(
                self._video.staged.file(self.timestamps.name), "w", newline="", encoding="utf-8"
            )
            self._times_writer = csv.writer(self._times)
            self._times_writer.writerow(TIMESTAMP_COLUMNS)
        except BaseException:
            self._video.abandon()
            raise
        self.quality = quality
        self.finished = False

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Encode `image`, the frame of `record`, noting its index and capture time.

        Raises:
            ValueError: the recorder is closed, no frame was given, or it has
                another shape.
        """
        if image is None:
            raise ValueError(f"{self.path}: a recording needs the frame of each record")
        self.encode(image, source_frame_index=record.frame_index, capture_time=record.capture_time)

    def encode(
        self,
        image: np.ndarray,
        *,
        source_frame_index: int | None = None,
        capture_time: float | None = None,
    ) -> None:
        """Encode one (H, W, C) uint8 frame; note its source index and capture time.

        Raises:
            ValueError: the recorder is closed or the frame has another shape.
        """
        if self._video.closed:
            raise ValueError(f"{self.path}: encode() after close()")
        if image.shape != self.frame_shape or image.dtype != np.uint8:
            raise ValueError(
                f"{self.path}: frame is {image.dtype} {image.shape}, recorder expects "
                f"uint8 {self.frame_shape}"
            )
        index = self._video.n_frames
        self._video.encode(image, self._pixel_format)
        self._times_writer.writerow(
            (
                index,
                "" if source_frame_index is None else source_frame_index,
                "" if capture_time is None else repr(float(capture_time)),
            )
        )

    def close(self) -> None:
        """Flush the encoder, finish the file and rename it and its timestamps into
        place (the video last); idempotent. Without frames, or on an error, nothing
        is renamed: an earlier recording at `path` stays."""
        if self._video.finish(self.timestamps.name, self.path.name):
            self.finished = True

    def discard(self) -> None:
        """Stop without finishing the recording: nothing is renamed into place, so an
        earlier recording at `path` (and its timestamps) stays as it was; idempotent."""
        self._video.abandon()

    def describe(self) -> str:
        """What the recording holds, in one line."""
        if self.finished:
            return f"recording: {self.path} ({self.n_frames_written} frames)"
        if self._video.closed:
            return f"recording: {self.path} not written ({self.n_frames_written} frames)"
        return (
            f"recording: {self.path} is unfinished ({self.n_frames_written} frames encoded); "
            "it may not play"
        )

    @property
    def n_frames_written(self) -> int:
        return self._video.n_frames
