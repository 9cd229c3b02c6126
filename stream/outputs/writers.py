"""Outputs of a pipeline run: poses to a pose file (.slp, .h5, .nwb, .csv), frames to a video.

Every output (`SlpWriter` in `slp`, `VideoRecorder` here, `OverlayRecorder`) is an
`Output` (see `base`), used from one thread, and a context manager; `close()` is
idempotent and leaves a complete, readable file behind, and each output locks its
file while it is open. `open_outputs` opens the outputs a pipeline's output options
ask for, each behind a queue of its own that one sink thread drains
(`OpenWriters.loops`), so a slow save or encode never holds up the stage that feeds
them.
"""

from __future__ import annotations

import csv
import functools
import os
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs
import av
import numpy as np

from sleap_live.engines.runners.base import Runner
from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty
from sleap_live.stream.outputs.base import Output
from sleap_live.stream.outputs.exports import check_suffix, sidecars
from sleap_live.stream.outputs.guard import OutputLock, check_outputs, claim_output
from sleap_live.stream.outputs.overlay_recorder import OverlayRecorder
from sleap_live.stream.outputs.provenance import run_provenance
from sleap_live.stream.outputs.recovery import JournalClaim
from sleap_live.stream.outputs.slp import DEFAULT_SAVE_INTERVAL, SlpWriter
from sleap_live.stream.outputs.staging import StagedOutput
from sleap_live.stream.sources import Source
from sleap_live.stream.sources.group import SourceGroup, per_source_path
from sleap_live.stream.types import PoseRecord

# Pose records are small, so the .slp writer's queue is deep: a journal append
# or the final save does not hold up the stage feeding it.
SLP_QUEUE_CAPACITY = 4096

# Frames waiting for the video recorder; images are large, so keep ~1 s at 30 fps.
RECORD_QUEUE_CAPACITY = 32

# What an output's queue holds: a pose record and its frame (None for an output that
# takes no frames).
QueuedItem = tuple[PoseRecord, "np.ndarray | None"]


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
        even_size: the codec needs even width and height (chroma subsampling).
        containers: file suffixes whose containers take the codec.
        quality: default CRF, or None where the codec takes no quality setting.
        options: encoder options besides the quality.
    """

    encoder: str
    lossless: bool
    pixel_formats: tuple[str, str]
    even_size: bool
    containers: frozenset[str] | None = None
    quality: int | None = None
    options: Mapping[str, str] = attrs.field(factory=dict)


# B-frames are off so every reader seeks frame-accurately and frames leave the
# encoder without reordering delay.
RECORD_CODECS: Mapping[str, RecordCodec] = {
    "h264": RecordCodec(
        "libx264",
        False,
        ("yuv420p", "yuv420p"),
        True,
        quality=18,
        options={"preset": "veryfast", "bf": "0"},
    ),
    "h265": RecordCodec(
        "libx265",
        False,
        ("yuv420p", "yuv420p"),
        True,
        quality=23,
        options={"preset": "veryfast", "x265-params": "bframes=0:log-level=error"},
    ),
    # FFV1 stores RGB as bgr0 and gray as gray: both exact, at any frame size.
    "ffv1": RecordCodec(
        "ffv1",
        True,
        ("bgr0", "gray"),
        False,
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


class VideoRecorder:
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
    the recorder closes (the output rule, `staging`), which the pipeline does however
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
        overwrite: replace an existing `path` (`guard.claim_output`).

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
        pad_rows, pad_columns = (height % 2, width % 2) if chosen.even_size else (0, 0)
        self._pad = ((0, pad_rows), (0, pad_columns), (0, 0))
        self._pixel_format = "rgb24" if channels == 3 else "gray"
        self.timestamps = timestamps_path(self.path)
        claim_output(self.path, "the recording", overwrite=overwrite)
        claim_output(self.timestamps, "the recording's timestamps", overwrite=overwrite)
        self._staged = StagedOutput(self.path, "the recording")
        try:
            self._lock = OutputLock(self._staged.target, "the recording")
        except BaseException:
            self._staged.discard()
            raise
        try:
            self._container = av.open(str(self._staged.file()), "w")
        except ValueError:
            self._abandon()
            raise _not_a_video_format(self.path) from None
        except BaseException:
            self._abandon()
            raise
        try:
            stream = self._container.add_stream(chosen.encoder, rate=_as_fraction(fps))
            assert isinstance(stream, av.VideoStream)
            self._stream = stream
            self._stream.width = width + pad_columns
            self._stream.height = height + pad_rows
            self._stream.pix_fmt = chosen.pixel_formats[0 if channels == 3 else 1]
            options: dict[str, object] = dict(chosen.options)
            if preset is not None:
                options["preset"] = preset
            quality = crf if crf is not None else chosen.quality
            if quality is not None:
                options["crf"] = str(quality)
            self._stream.options = options
            self._times = open(
                self._staged.file(self.timestamps.name), "w", newline="", encoding="utf-8"
            )
            self._times_writer = csv.writer(self._times)
            self._times_writer.writerow(TIMESTAMP_COLUMNS)
        except BaseException:
            self._container.close()
            self._abandon()
            raise
        self.quality = quality
        self.n_frames_written = 0
        self.finished = False
        self._closed = False

    takes_frames = True

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
        if self._closed:
            raise ValueError(f"{self.path}: encode() after close()")
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
        self._times_writer.writerow(
            (
                self.n_frames_written,
                "" if source_frame_index is None else source_frame_index,
                "" if capture_time is None else repr(float(capture_time)),
            )
        )
        self.n_frames_written += 1

    def seconds_until_due(self) -> float | None:
        """None: every frame is encoded as it comes, nothing waits to be saved."""
        return None

    def flush(self) -> None:
        """Nothing to do: frames are encoded as they come."""

    def close(self) -> None:
        """Flush the encoder, finish the file and rename it and its timestamps into
        place (the video last); idempotent. Without frames, or on an error, nothing
        is renamed: an earlier recording at `path` stays."""
        if self._closed:
            return
        if not self.n_frames_written:
            self.discard()
            return
        self._closed = True
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            self._times.close()
            self._staged.commit(self.timestamps.name, self.path.name)
        except BaseException:
            self._container.close()
            self._times.close()
            self._abandon()
            raise
        self._lock.release()
        self.finished = True

    def discard(self) -> None:
        """Stop without finishing the recording: nothing is renamed into place, so an
        earlier recording at `path` (and its timestamps) stays as it was; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._container.close()
        finally:
            self._times.close()
            self._abandon()

    def _abandon(self) -> None:
        """Remove what was staged, and the lock's file where this recorder made it."""
        self._staged.discard()
        if self._lock.created and self._lock.fd is not None:
            self._staged.target.unlink(missing_ok=True)
        self._lock.release()

    def describe(self) -> str:
        """What the recording holds, in one line."""
        if self.finished:
            return f"recording: {self.path} ({self.n_frames_written} frames)"
        if self._closed:
            return f"recording: {self.path} not written ({self.n_frames_written} frames)"
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
    """What a pipeline writes besides its ring buffer; checked when made, before any work.

    Attributes:
        output: pose file for every pose record (.slp, .h5, .nwb or .csv, see
            `exports`), or None.
        record: video file for the processed frames, or None. The pose file links
            to it (numbering its frames as the recording does) when it is lossless,
            or when the source is not a file (a camera, a stream: there is no other
            picture); otherwise to the source video, with the recording named in
            the provenance.
        record_codec: a key of `RECORD_CODECS` ("ffv1" is the lossless one).
        record_quality: CRF of a lossy codec; None: the codec's default.
        save_interval: most seconds a finished frame waits before it is saved to
            `output`'s journal (what a crash can cost); None saves on close only.
        provenance: entries added to the outputs' provenance (for example
            ``models``: `provenance.model_records` of the model paths).
        record_overlay: video file for the processed frames with their poses drawn
            (`OverlayRecorder`), or None.
        claim: `output`'s journal, claimed before the run (`JournalClaim`), which
            its writer then writes into; None: the writer opens it. Dropped by
            `for_source` (each source's file has a journal of its own).
        overwrite: replace outputs that exist (``--overwrite``); without it an
            existing output is refused before any work (`guard.claim_output`).

    Raises:
        ValueError: an unknown pose suffix, codec, or a quality the codec cannot
            take; a recording path that is no video format.
    """

    output: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    record: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    save_interval: float | None = DEFAULT_SAVE_INTERVAL
    record_codec: str = DEFAULT_RECORD_CODEC
    record_quality: int | None = None
    provenance: Mapping[str, Any] = attrs.field(factory=dict)
    record_overlay: Path | None = attrs.field(
        default=None, converter=attrs.converters.optional(Path)
    )
    claim: JournalClaim | None = attrs.field(default=None, eq=False, repr=False)
    overwrite: bool = False

    def __attrs_post_init__(self) -> None:
        if self.output is not None:
            check_suffix(self.output)
        if self.record is not None:
            check_recording_path(self.record)
            check_record_codec(self.record, self.record_codec, self.record_quality)
        if self.record_overlay is not None:
            check_recording_path(self.record_overlay)

    def for_source(self, source_id: str) -> OutputOptions:
        """These options for one source of several: every file named
        ``STEM.SOURCE.SUFFIX`` (see `per_source_path`)."""

        def own(path: Path | None) -> Path | None:
            return None if path is None else per_source_path(path, source_id)

        return attrs.evolve(
            self,
            output=own(self.output),
            record=own(self.record),
            record_overlay=own(self.record_overlay),
            claim=None,
        )

    def paths(self) -> dict[str, Path | None]:
        """Every file the outputs write, by the option that names it (for `check_outputs`)."""
        paths: dict[str, Path | None] = {
            "output": self.output,
            "record": self.record,
            "overlay": self.record_overlay,
        }
        if self.output is not None:
            for sidecar in sidecars(self.output):
                paths[f"output ({sidecar.name})"] = sidecar
        if self.record is not None:
            paths["record (its timestamps)"] = timestamps_path(self.record)
        return paths


class OpenWriters:
    """Open outputs, each behind its own bounded queue.

    The owner runs every loop of `loops` in a thread of its own, feeds records and
    frames with `write`, and calls `close` once nothing more comes: each loop then
    drains its queue, closes its output and returns.

    Args:
        outputs: each output with its queue, by name ("slp", "record", "overlay").
    """

    def __init__(self, outputs: Mapping[str, tuple[Channel[QueuedItem], Output]]):
        self._outputs = dict(outputs)

    @property
    def loops(self) -> dict[str, Callable[[], None]]:
        """One loop per output, by name ("slp", "record"), for the owner's threads."""
        return {
            name: functools.partial(_drain, queue, output)
            for name, (queue, output) in self._outputs.items()
        }

    @property
    def takes_frames(self) -> bool:
        """Whether any output uses the frames (else `write` may be given None)."""
        return any(output.takes_frames for _, output in self._outputs.values())

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Queue a pose record, with its frame for the outputs that take frames.

        Waits while a queue is full. An output that already failed is skipped: its
        loop's error reaches the owner through that loop's thread.
        """
        for queue, output in self._outputs.values():
            try:
                queue.put((record, image if output.takes_frames else None))
            except ChannelClosed:
                pass

    def close(self) -> None:
        """Let every loop finish what is queued and close its output. Idempotent."""
        for queue, _ in self._outputs.values():
            queue.close()

    def depths(self) -> dict[str, int]:
        """Items waiting in each output's queue, by output name."""
        return {name: queue.stats().depth for name, (queue, _) in self._outputs.items()}

    def describe(self) -> list[str]:
        """One line per output saying what it holds now (never more than is on disk)."""
        return [output.describe() for _, output in self._outputs.values()]

    def abandon(self) -> None:
        """Discard outputs whose loops never ran: nothing is written."""
        for _, output in self._outputs.values():
            output.discard()


class SourceWriters:
    """The open writers of several sources: each source's records and frames go to
    that source's own files; otherwise the same as `OpenWriters`.

    Args:
        by_source: each source's writers, by source id.
    """

    def __init__(self, by_source: Mapping[str, OpenWriters]) -> None:
        self._by_source = dict(by_source)

    @property
    def loops(self) -> dict[str, Callable[[], None]]:
        """One loop per writer, named "WRITER SOURCE" ("slp camera:0")."""
        return {
            f"{name} {source}": loop
            for source, writers in self._by_source.items()
            for name, loop in writers.loops.items()
        }

    @property
    def takes_frames(self) -> bool:
        """Whether any output uses the frames (else `write` may be given None)."""
        return any(writers.takes_frames for writers in self._by_source.values())

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Queue a record and its frame for the outputs of the record's source."""
        self._by_source[record.source_id].write(record, image)

    def close(self) -> None:
        for writers in self._by_source.values():
            writers.close()

    def depths(self) -> dict[str, int]:
        return {
            f"{name} {source}": depth
            for source, writers in self._by_source.items()
            for name, depth in writers.depths().items()
        }

    def describe(self) -> list[str]:
        return [line for writers in self._by_source.values() for line in writers.describe()]


def open_outputs(
    options: OutputOptions,
    source: Source,
    runner: Runner,
    *,
    settings: Mapping[str, Any] | None = None,
    clock: Clock = MONOTONIC,
    tracked: bool = False,
) -> OpenWriters:
    """Open the writers `options` ask for, for poses of `runner`'s model on `source`.

    Each output is checked first (see `check_outputs`): not the source's file,
    not the other output, in a writable folder. Each is locked while it is open.
    The pose file's provenance is `provenance.run_provenance` of the run, with
    `settings` (the pipeline's) and `options.provenance`. `tracked`: the poses
    carry a tracker's track ids (the overlay colours by track).

    Raises:
        ValueError, FileNotFoundError, OutputError: an output path is unusable
            (nothing is left open, nothing is overwritten).
    """
    source_file = Path(source.source_id)
    source_is_file = source_file.is_file()
    check_outputs(
        options.paths(),
        {"source": [source_file] if source_is_file else []},
        overwrite=options.overwrite,
    )
    info = runner.info
    recording: dict[str, Any] | None = None
    if options.record is not None:
        lossless = RECORD_CODECS[options.record_codec].lossless
        recording = {
            "path": str(options.record.resolve()),
            "codec": options.record_codec,
            "quality": options.record_quality,
            "lossless": lossless,
            "timestamps": str(timestamps_path(options.record).resolve()),
        }
    # The poses link to the recording only where it is the best picture there is.
    links_recording = recording is not None and (recording["lossless"] or not source_is_file)
    outputs: dict[str, tuple[Channel[QueuedItem], Output]] = {}
    try:
        if options.output is not None:
            extra = {**options.provenance, "recording": recording}
            slp = SlpWriter(
                options.output,
                info.skeleton,
                video=options.record.resolve()
                if links_recording and options.record
                else source.source_id,
                frame_shape=source.frame_shape,
                fps=source.fps,
                n_frames=None if links_recording else source.n_frames,
                class_names=info.class_names,
                renumber=links_recording,
                save_interval=options.save_interval,
                provenance=run_provenance(
                    runner, source_id=source.source_id, settings=settings or {}, extra=extra
                ),
                clock=clock,
                claim=options.claim,
                tracked=tracked,
                overwrite=options.overwrite,
            )
            outputs["slp"] = (Channel(SLP_QUEUE_CAPACITY), slp)
        if options.record is not None:
            recorder = VideoRecorder(
                options.record,
                source.fps or 30.0,
                source.frame_shape,
                codec=options.record_codec,
                crf=options.record_quality,
                overwrite=options.overwrite,
            )
            outputs["record"] = (Channel(RECORD_QUEUE_CAPACITY), recorder)
        if options.record_overlay is not None:
            overlay = OverlayRecorder(
                options.record_overlay,
                source.fps or 30.0,
                source.frame_shape,
                info.skeleton,
                info.class_names,
                tracked=tracked,
                overwrite=options.overwrite,
            )
            outputs["overlay"] = (Channel(RECORD_QUEUE_CAPACITY), overlay)
    except BaseException:
        OpenWriters(outputs).abandon()  # those opened before the one that failed
        raise
    return OpenWriters(outputs)


def open_source_outputs(
    options: OutputOptions,
    group: SourceGroup,
    runner: Runner,
    *,
    settings: Mapping[str, Any] | None = None,
    clock: Clock = MONOTONIC,
    tracked: bool = False,
) -> SourceWriters:
    """`open_outputs` for each source of `group`, its files named after it
    (`OutputOptions.for_source`); the provenance names every source of the run.

    Raises:
        ValueError, FileNotFoundError, OutputError: an output path is unusable (the
            outputs opened before it are closed, none written).
    """
    opened: dict[str, OpenWriters] = {}
    run_settings = {**(settings or {}), "sources": list(group.source_ids)}
    try:
        for source in group.sources:
            opened[source.source_id] = open_outputs(
                options.for_source(source.source_id),
                source,
                runner,
                settings=run_settings,
                clock=clock,
                tracked=tracked,
            )
    except BaseException:
        for writers in opened.values():
            writers.abandon()
        raise
    return SourceWriters(opened)


def _drain(queue: Channel[QueuedItem], output: Output) -> None:
    """Feed `output` from `queue` until it is closed and drained; then close the output.

    Between items, the output saves as soon as a save falls due, so a pause in the
    stream (a stalled camera) never holds finished frames back.
    """
    try:
        while True:
            try:
                record, image = queue.get(output.seconds_until_due())
            except ChannelEmpty:
                if output.seconds_until_due() == 0:
                    output.flush()
                continue
            except ChannelClosed:
                break
            output.write(record, image)
    except BaseException:
        queue.close()  # nothing more is accepted, so the feeding stage never waits on it
        raise
    finally:
        output.close()


def _as_fraction(fps: float) -> Fraction:
    """A frame rate as an exact fraction (29.97 -> 30000/1001) for the stream time base."""
    return Fraction(fps).limit_denominator(1001)
