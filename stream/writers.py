"""Outputs of a pipeline run: poses to a SLEAP .slp file, frames to a video file.

Both writers are used from one thread and are context managers; `close()` is
idempotent and always leaves a complete, readable file behind. `open_outputs`
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
import sleap_io as sio

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import ChannelClosed
from sleap_live.stream.sources import Source
from sleap_live.stream.types import PoseRecord

# A periodic save rewrites the whole file, so its cost grows with the run. Saves
# are spaced at least this many times their own duration apart, which keeps
# saving below ~1/SAVE_COST_RATIO of the writer's time on arbitrarily long runs.
SAVE_COST_RATIO = 10.0

# Pose records are small, so the .slp writer's queue is deep: a periodic save
# that takes a few seconds does not hold up the stage feeding it.
SLP_QUEUE_CAPACITY = 4096

# Frames waiting for the video recorder; images are large, so keep ~1 s at 30 fps.
RECORD_QUEUE_CAPACITY = 32


def to_sio_skeleton(skeleton: Skeleton) -> sio.Skeleton:
    """Convert an engine skeleton to a sleap-io one (same node order and edges)."""
    names = list(skeleton.node_names)
    edges = [(names[src], names[dst]) for src, dst in skeleton.edges]
    return sio.Skeleton(nodes=names, edges=edges, name=skeleton.name)


class SlpWriter:
    """Collects pose records and saves them as predictions in a SLEAP .slp file.

    Every instance becomes a `sleap_io.PredictedInstance` with its point scores and
    instance score; for multi-class models each identity becomes one
    `sleap_io.Track` named after its class. Frames in which nothing was found are
    kept as empty labeled frames, so "processed, nothing there" stays distinct
    from "never processed". Instances with no point found at all are left out.

    The file is rewritten in full on `close()` and, during long runs, every
    `save_interval` seconds (or less often when saving gets slow, see
    `SAVE_COST_RATIO`). Each save goes to a temporary file beside `path` that is
    then renamed over it, so `path` always holds a complete file with every frame
    written up to the last save, whatever interrupts the run.

    Args:
        path: the .slp file to write.
        skeleton: the model's skeleton.
        video: the video the poses belong to: a file path (it need not be
            readable now; the .slp links to it) or a name for a live source.
        frame_shape: (height, width, channels) of the frames.
        fps: frame rate stored with the video, if known.
        n_frames: frames in the video, if known; otherwise the highest frame index
            written plus one.
        class_names: identity names of a multi-class model (one track each).
        renumber: number labeled frames 0, 1, 2, ... in the order written, to
            match a recording of exactly the processed frames; otherwise use
            `PoseRecord.frame_index`.
        save_interval: seconds between periodic saves; None saves only on close.
        provenance: extra metadata stored in the file (JSON-serialisable values).
        clock: time source for the save schedule; injectable for tests.

    Raises:
        ValueError: `path` does not end in .slp, or `frame_shape` is not (H, W, C).
        FileNotFoundError: the folder `path` would be written in does not exist.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        skeleton: Skeleton,
        *,
        video: str | os.PathLike[str],
        frame_shape: tuple[int, int, int],
        fps: float | None = None,
        n_frames: int | None = None,
        class_names: tuple[str, ...] = (),
        renumber: bool = False,
        save_interval: float | None = 10.0,
        provenance: Mapping[str, Any] | None = None,
        clock: Clock = MONOTONIC,
    ) -> None:
        self.path = Path(path)
        if self.path.suffix != ".slp":
            raise ValueError(f"{self.path}: pose output must be a .slp file")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"{self.path}: folder {self.path.parent} does not exist")
        if len(frame_shape) != 3:
            raise ValueError(f"{self.path}: frame_shape must be (H, W, C), got {frame_shape!r}")
        self._skeleton = to_sio_skeleton(skeleton)
        self._n_nodes = skeleton.n_nodes
        self._tracks = [sio.Track(name=name) for name in class_names]
        self._frame_shape = tuple(int(v) for v in frame_shape)
        self._n_frames = n_frames
        video_name = str(video)
        if Path(video_name).exists():
            video_name = str(Path(video_name).resolve())
        self._video = sio.Video(filename=video_name, open_backend=False)
        if fps is not None:
            self._video.backend_metadata["fps"] = float(fps)
        self._renumber = renumber
        self._save_interval = save_interval
        self._provenance = dict(provenance or {})
        self._clock = clock
        self._frames: list[sio.LabeledFrame] = []
        self._last_frame_index = -1
        self._next_save = clock() + save_interval if save_interval is not None else None
        self._closed = False

    @property
    def n_frames_written(self) -> int:
        """Labeled frames collected so far."""
        return len(self._frames)

    def write(self, record: PoseRecord) -> None:
        """Add the poses of one frame; saves the file when a periodic save is due.

        The record's arrays are copied, so a ring-buffer view may be passed.

        Raises:
            ValueError: the writer is closed, or the record's node count does not
                match the skeleton.
        """
        if self._closed:
            raise ValueError(f"{self.path}: write() after close()")
        poses = record.poses
        if poses.points.shape[1:] != (self._n_nodes, 2):
            raise ValueError(
                f"{self.path}: poses have points of shape {poses.points.shape}, expected "
                f"(instances, {self._n_nodes}, 2) for this skeleton"
            )
        frame_index = len(self._frames) if self._renumber else record.frame_index
        instances = [
            self._instance(poses, i)
            for i in range(poses.n_instances)
            if np.isfinite(poses.points[i]).any()
        ]
        self._frames.append(
            sio.LabeledFrame(video=self._video, frame_idx=frame_index, instances=instances)
        )
        self._last_frame_index = max(self._last_frame_index, frame_index)
        if self._next_save is not None and self._clock() >= self._next_save:
            self.flush()

    def _instance(self, poses: FramePoses, i: int) -> sio.PredictedInstance:
        identity = int(poses.identities[i])
        track = self._tracks[identity] if 0 <= identity < len(self._tracks) else None
        return sio.PredictedInstance.from_numpy(
            np.array(poses.points[i], dtype=np.float64),
            skeleton=self._skeleton,
            point_scores=np.array(poses.point_scores[i], dtype=np.float64),
            score=float(poses.instance_scores[i]),
            track=track,
        )

    def flush(self) -> None:
        """Save every frame written so far, atomically replacing `path`."""
        started = self._clock()
        n_frames = self._n_frames if self._n_frames is not None else self._last_frame_index + 1
        self._video.backend_metadata["shape"] = (n_frames, *self._frame_shape)
        labels = sio.Labels(
            labeled_frames=list(self._frames),
            videos=[self._video],
            skeletons=[self._skeleton],
            tracks=list(self._tracks),
            provenance=dict(self._provenance),
        )
        partial = self.path.with_name(f".{self.path.stem}.partial.slp")
        try:
            sio.save_slp(labels, str(partial), verbose=False)
            os.replace(partial, self.path)
        finally:
            partial.unlink(missing_ok=True)
        if self._save_interval is not None:
            finished = self._clock()
            spacing = max(self._save_interval, SAVE_COST_RATIO * (finished - started))
            self._next_save = finished + spacing

    def close(self) -> None:
        """Save the final file; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.flush()

    def __enter__(self) -> SlpWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
        if not fps > 0:
            raise ValueError(f"{self.path}: recording fps must be positive, got {fps!r}")
        if len(frame_shape) != 3 or frame_shape[2] not in (1, 3):
            raise ValueError(
                f"{self.path}: frame_shape must be (H, W, 1 or 3), got {frame_shape!r}"
            )
        self.frame_shape = tuple(int(v) for v in frame_shape)
        height, width, channels = self.frame_shape
        self._pad = ((0, height % 2), (0, width % 2), (0, 0))
        self._pixel_format = "rgb24" if channels == 3 else "gray"
        self._container = av.open(str(self.path), "w")
        try:
            self._stream = self._container.add_stream("libx264", rate=_as_fraction(fps))
            self._stream.width = width + width % 2
            self._stream.height = height + height % 2
            self._stream.pix_fmt = "yuv420p"
            self._stream.options = {"crf": str(crf), "preset": preset, "bf": "0"}
        except Exception:
            self._container.close()
            raise
        self.n_frames_written = 0
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
            self._container.close()

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
        save_interval: seconds between periodic saves of `output`; None saves on close only.
    """

    output: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    record: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    save_interval: float | None = 10.0


class OpenWriters:
    """Open writers, each behind its own bounded queue.

    The owner runs every loop of `loops` in a thread of its own, feeds records and
    frames with `write`, and calls `close` once nothing more comes: each loop then
    drains its queue, closes its writer and returns.
    """

    def __init__(self, writers: Mapping[str, tuple[Channel[Any], SlpWriter | VideoRecorder]]):
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
        for name, item in (("slp", record), ("record", image)):
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


def open_outputs(
    options: OutputOptions, source: Source, info: ModelInfo, *, clock: Clock = MONOTONIC
) -> OpenWriters:
    """Open the writers `options` ask for, for poses of `info`'s model on `source`.

    Raises:
        ValueError, FileNotFoundError: an output path is unusable (nothing is left open).
    """
    writers: dict[str, tuple[Channel[Any], SlpWriter | VideoRecorder]] = {}
    recording = options.record is not None
    if options.record is not None:
        recorder = VideoRecorder(options.record, source.fps or 30.0, source.frame_shape)
        writers["record"] = (Channel(RECORD_QUEUE_CAPACITY), recorder)
    if options.output is not None:
        try:
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
        except BaseException:
            if recording:
                writers["record"][1].close()
            raise
        writers["slp"] = (Channel(SLP_QUEUE_CAPACITY), slp)
    return OpenWriters(writers)


def _drain(queue: Channel[Any], writer: SlpWriter | VideoRecorder) -> None:
    try:
        for item in queue:
            writer.write(item)
    except BaseException:
        queue.close()  # nothing more is accepted, so the feeding stage never waits on it
        raise
    finally:
        writer.close()


def _as_fraction(fps: float) -> Fraction:
    """A frame rate as an exact fraction (29.97 -> 30000/1001) for the stream time base."""
    return Fraction(fps).limit_denominator(1001)
