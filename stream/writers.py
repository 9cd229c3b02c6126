"""Outputs of a pipeline run: poses to a SLEAP .slp file, frames to a video file.

Both writers (`SlpWriter` in `slp_writer`, `VideoRecorder` here) are used from one
thread and are context managers; `close()` is idempotent and leaves a complete,
readable file behind, and each writer locks its file while it is open. `open_outputs`
opens the writers a pipeline's output options ask for, each behind a queue of its
own that one sink thread drains (`OpenWriters.loops`), so a slow save or encode never
holds up the stage that feeds them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs
import av
import numpy as np

from sleap_live.engines.types import ModelInfo
from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty
from sleap_live.stream.outputs_guard import OutputLock, check_outputs
from sleap_live.stream.overlay_recorder import OverlayRecorder
from sleap_live.stream.slp_writer import DEFAULT_SAVE_INTERVAL, SlpWriter
from sleap_live.stream.sources import Source
from sleap_live.stream.types import PoseRecord

# Pose records are small, so the .slp writer's queue is deep: a journal append
# or the final save does not hold up the stage feeding it.
SLP_QUEUE_CAPACITY = 4096

# Frames waiting for the video recorder; images are large, so keep ~1 s at 30 fps.
RECORD_QUEUE_CAPACITY = 32


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


class VideoRecorder:
    """Encodes frames to a video file with PyAV, one output frame per `write()`.

    The pipeline records exactly the frames it emitted poses for, in order, so
    frame k of the recording is the k-th pose record (see `SlpWriter(renumber=True)`).
    Frames are stored at a constant `fps`; when a live run drops frames the
    recording is therefore shorter than the wall-clock run.

    H.264 (libx264, yuv420p) needs even dimensions; an odd height or width is
    padded with one black row or column at the bottom or right, which leaves
    pixel coordinates unchanged. B-frames are off so every reader seeks
    frame-accurately and frames leave the encoder without reordering delay.

    Args:
        path: video file to write (its suffix picks the container, e.g. .mp4).
        fps: frame rate stored in the file.
        frame_shape: (height, width, channels) of the frames, channels 1 or 3 (RGB).
        crf: x264 constant rate factor (0 lossless, 18 visually lossless, 23 default).
        preset: x264 speed preset; faster presets keep up with faster cameras.

    Raises:
        ValueError: bad fps, frame shape or suffix.
        FileNotFoundError: the folder `path` would be written in does not exist.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fps: float,
        frame_shape: tuple[int, int, int],
        *,
        crf: int = 18,
        preset: str = "veryfast",
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
        self.frame_shape = tuple(int(v) for v in frame_shape)
        height, width, channels = self.frame_shape
        self._pad = ((0, height % 2), (0, width % 2), (0, 0))
        self._pixel_format = "rgb24" if channels == 3 else "gray"
        self._lock = OutputLock(self.path, "the recording")
        try:
            self._container = av.open(str(self.path), "w")
        except ValueError:
            self._lock.release()
            if self._lock.created:
                self.path.unlink(missing_ok=True)
            raise _not_a_video_format(self.path) from None
        except BaseException:
            self._lock.release()
            raise
        try:
            self._stream = self._container.add_stream("libx264", rate=_as_fraction(fps))
            self._stream.width = width + width % 2
            self._stream.height = height + height % 2
            self._stream.pix_fmt = "yuv420p"
            self._stream.options = {"crf": str(crf), "preset": preset, "bf": "0"}
        except Exception:
            self._container.close()
            self._lock.release()
            raise
        self.n_frames_written = 0
        self.finished = False
        self._closed = False

    def write(self, image: np.ndarray) -> None:
        """Encode one (H, W, C) uint8 frame.

        Raises:
            ValueError: the recorder is closed or the frame has another shape.
        """
        if self._closed:
            raise ValueError(f"{self.path}: write() after close()")
        if image.shape != self.frame_shape or image.dtype != np.uint8:
            raise ValueError(
                f"{self.path}: frame is {image.dtype} {image.shape}, recorder expects "
                f"uint8 {self.frame_shape}"
            )
        if any(after for _, after in self._pad):
            image = np.pad(image, self._pad)
        plane = image if self._pixel_format == "rgb24" else image[..., 0]
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(plane), self._pixel_format)
        frame.pts = self.n_frames_written
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.n_frames_written += 1

    def close(self) -> None:
        """Flush the encoder and finish the file; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
        finally:
            try:
                self._container.close()
            finally:
                self._lock.release()
        self.finished = True

    def describe(self) -> str:
        """What the recording holds, in one line."""
        if self.finished:
            return f"recording: {self.path} ({self.n_frames_written} frames)"
        return (
            f"recording: {self.path} is unfinished ({self.n_frames_written} frames encoded); "
            "it may not play"
        )

    def __enter__(self) -> VideoRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@attrs.frozen
class OutputOptions:
    """What a pipeline writes besides its ring buffer.

    Attributes:
        output: .slp file for every pose record, or None.
        record: video file for the processed frames, or None; the .slp then links
            to it and numbers its frames as the recording does.
        save_interval: most seconds a finished frame waits before it is saved to
            `output`'s journal (what a crash can cost); None saves on close only.
        record_overlay: video file for the processed frames with their poses drawn
            (`OverlayRecorder`), or None.
    """

    output: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    record: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    save_interval: float | None = DEFAULT_SAVE_INTERVAL
    record_overlay: Path | None = attrs.field(
        default=None, converter=attrs.converters.optional(Path)
    )


Writer = SlpWriter | VideoRecorder | OverlayRecorder


class OpenWriters:
    """Open writers, each behind its own bounded queue.

    The owner runs every loop of `loops` in a thread of its own, feeds records and
    frames with `write`, and calls `close` once nothing more comes: each loop then
    drains its queue, closes its writer and returns.
    """

    def __init__(self, writers: Mapping[str, tuple[Channel[Any], Writer]]):
        self._writers = dict(writers)

    @property
    def loops(self) -> dict[str, Callable[[], None]]:
        """One loop per writer, by name ("slp", "record"), for the owner's threads."""
        return {
            name: functools.partial(_drain, queue, writer)
            for name, (queue, writer) in self._writers.items()
        }

    def write(self, record: PoseRecord, image: np.ndarray) -> None:
        """Queue a pose record for the .slp writer and its frame for the recorder.

        Waits while a queue is full. A writer that already failed is skipped: its
        loop's error reaches the owner through that loop's thread.
        """
        for name, item in (("slp", record), ("record", image), ("overlay", (record, image))):
            if name in self._writers:
                try:
                    self._writers[name][0].put(item)
                except ChannelClosed:
                    pass

    def close(self) -> None:
        """Let every loop finish what is queued and close its writer. Idempotent."""
        for queue, _ in self._writers.values():
            queue.close()

    def depths(self) -> dict[str, int]:
        """Items waiting in each writer's queue, by writer name."""
        return {name: queue.stats().depth for name, (queue, _) in self._writers.items()}

    def describe(self) -> list[str]:
        """One line per output saying what it holds now (never more than is on disk)."""
        return [writer.describe() for _, writer in self._writers.values()]


def open_outputs(
    options: OutputOptions, source: Source, info: ModelInfo, *, clock: Clock = MONOTONIC
) -> OpenWriters:
    """Open the writers `options` ask for, for poses of `info`'s model on `source`.

    Each output is checked first (see `check_outputs`): not the source's file,
    not the other output, in a writable folder. Each is locked while it is open.

    Raises:
        ValueError, FileNotFoundError, OutputError: an output path is unusable
            (nothing is left open, nothing is overwritten).
    """
    source_file = Path(source.source_id)
    check_outputs(
        {"output": options.output, "record": options.record, "overlay": options.record_overlay},
        {"source": [source_file] if source_file.is_file() else []},
    )
    writers: dict[str, tuple[Channel[Any], Writer]] = {}
    recording = options.record is not None
    if options.output is not None:
        slp = SlpWriter(
            options.output,
            info.skeleton,
            video=options.record if options.record is not None else source.source_id,
            frame_shape=source.frame_shape,
            fps=source.fps,
            n_frames=None if recording else source.n_frames,
            class_names=info.class_names,
            renumber=recording,
            save_interval=options.save_interval,
            provenance={
                "sleap_live_source": source.source_id,
                "sleap_live_model_type": info.model_type,
            },
            clock=clock,
        )
        writers["slp"] = (Channel(SLP_QUEUE_CAPACITY), slp)
    if options.record is not None:
        try:
            recorder = VideoRecorder(options.record, source.fps or 30.0, source.frame_shape)
        except BaseException:
            if "slp" in writers:
                slp.discard()
            raise
        writers["record"] = (Channel(RECORD_QUEUE_CAPACITY), recorder)
    if options.record_overlay is not None:
        try:
            overlay = OverlayRecorder(
                options.record_overlay,
                source.fps or 30.0,
                source.frame_shape,
                info.skeleton,
                info.class_names,
            )
        except BaseException:
            if "slp" in writers:
                slp.discard()
            if "record" in writers:
                recorder.close()
            raise
        writers["overlay"] = (Channel(RECORD_QUEUE_CAPACITY), overlay)
    return OpenWriters(writers)


def _drain(queue: Channel[Any], writer: Writer) -> None:
    """Feed `writer` from `queue` until it is closed and drained; then close the writer.

    Between items, the .slp writer saves as soon as a save falls due, so a pause
    in the stream (a stalled camera) never holds finished frames back.
    """
    try:
        while True:
            timeout = writer.seconds_until_due() if isinstance(writer, SlpWriter) else None
            try:
                item = queue.get(timeout)
            except ChannelEmpty:
                if isinstance(writer, SlpWriter) and writer.seconds_until_due() == 0:
                    writer.flush()
                continue
            except ChannelClosed:
                break
            writer.write(item)
    except BaseException:
        queue.close()  # nothing more is accepted, so the feeding stage never waits on it
        raise
    finally:
        writer.close()


def _as_fraction(fps: float) -> Fraction:
    """A frame rate as an exact fraction (29.97 -> 30000/1001) for the stream time base."""
    return Fraction(fps).limit_denominator(1001)
