"""One worker of a many-videos run: the model loaded once, then video after video.

`VideoWorker.process` runs one video through a `Pipeline` on the worker's runner,
into the video's unfinished output, renamed to the output once the video is done
(`finish`), and returns a `VideoResult` whatever happened: a video that fails is
a result, never an exception, so the others go on. Several videos may be in
flight in one worker at once (threads calling `process`): each has a pipeline and a
decoder of its own, and they share the one engine (`SharedRunner` lets one batch
through at a time), so the next video decodes while the current one finishes.

The same worker runs in this process (a sequential run), in local worker processes
and in Ray actors (`local`, `cluster`), so every way gives the same poses.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from sleap_live.engines.errors import EngineError
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.engines.load_options import LoadOptions
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.types import FramePoses, ModelInfo
from sleap_live.stream.errors import StreamError, one_line
from sleap_live.stream.many.finish import (
    discard_unfinished,
    finish,
    unfinished_files,
    unfinished_path,
)
from sleap_live.stream.many.videos import VideoJob
from sleap_live.stream.outputs.guard import check_outputs
from sleap_live.stream.outputs.options import OutputOptions
from sleap_live.stream.outputs.provenance import model_records
from sleap_live.stream.outputs.slp import DEFAULT_SAVE_INTERVAL
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.runner import deferred_spread_frames
from sleap_live.stream.sources import SourceOptions, open_source
from sleap_live.stream.tracking.settings import TrackingSettings

Status = Literal["done", "skipped", "failed", "left", "stopped"]
# Told, as a video's frames come, its job's index, its frames so far and its
# frame count (None where the video does not say).
FrameReport = Callable[[int, int, int | None], None]


class VideoStopped(StreamError):
    """The run was stopped (Ctrl-C) before the video was done; its output is not written.

    Attributes:
        frames: the frames it had processed.
    """

    def __init__(self, message: str, frames: int = 0) -> None:
        super().__init__(message)
        self.frames = frames


@attrs.frozen
class WorkOptions:
    """How every worker of a run loads the model and processes a video (picklable,
    so it travels to worker processes and Ray actors unchanged).

    Attributes:
        models: the model paths (one, or two for top-down), as `load_runner` takes.
        load: how the model is loaded (`LoadOptions`; its ``verify`` option, default
            True, checks an export made on demand against torch). Its threads are
            each engine call's (None: the engine's default, a thread per core);
            local workers and Ray actors are given their share.
        batch_size: frames per engine call (None: the recorded policy's, 8).
        verify_video: verify on this video's frames (None: the first video's).
        source: how each video is read (`open_source`'s options: its decoder, bit
            depth, read timeout); each is read as a file, its NVDEC decoding on the
            model's CUDA device.
        save_interval: seconds between saves to the unfinished output's journal.
        provenance: entries added to every output's provenance.
        tracking: the tracker's settings (None: no tracking); each video is tracked
            on its own, from its first frame, by the worker that runs it, so its ids
            are those of a run over that video alone.
    """

    models: tuple[str, ...]
    load: LoadOptions = attrs.field(factory=LoadOptions)
    batch_size: int | None = None
    verify_video: str | None = None
    source: SourceOptions = attrs.field(factory=SourceOptions)
    save_interval: float | None = DEFAULT_SAVE_INTERVAL
    provenance: Mapping[str, Any] = attrs.field(factory=dict)
    tracking: TrackingSettings | None = None


@attrs.frozen
class VideoResult:
    """What became of one video.

    Attributes:
        index: the job's place in the run.
        video: the video file.
        output: its pose file.
        status: "done", "skipped" (its output was complete already), "failed",
            "left" (not started: the run's time was up, or it was interrupted; the
            next run does it) or "stopped" (interrupted while it ran: its output
            not written; the next run redoes it).
        frames: frames processed (0 when skipped or failed before any).
        seconds: time from opening the video to its output in place.
        instances: instances found over all its frames.
        error: why it failed, in one line (None unless failed).
        redone: an unfinished output of an earlier attempt was discarded first.
        attempts: how many times it was started (retries after a lost worker count).
        worker: the process that did it (its pid; 0 when skipped).
    """

    index: int
    video: str
    output: str
    status: Status
    frames: int = 0
    seconds: float = 0.0
    instances: int = 0
    error: str | None = None
    redone: bool = False
    attempts: int = 1
    worker: int = 0

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def result_of(job: VideoJob, status: Status) -> VideoResult:
    """A result naming `job`'s video and output, its other fields their defaults
    (`attrs.evolve` fills them in)."""
    return VideoResult(job.index, str(job.video), str(job.output), status)


def skipped(job: VideoJob) -> VideoResult:
    """The result of a video whose output is complete already."""
    return attrs.evolve(result_of(job, "skipped"), attempts=0)


def left(job: VideoJob) -> VideoResult:
    """The result of a video not started because the run's time was up."""
    return attrs.evolve(result_of(job, "left"), attempts=0)


def failed(job: VideoJob, error: str, attempts: int = 1) -> VideoResult:
    """The result of a video that failed before it ran, or whose worker was lost."""
    return attrs.evolve(result_of(job, "failed"), error=error, attempts=attempts)


class SharedRunner:
    """A runner shared by the pipelines of one worker: one engine call at a time.

    A `Runner` is used from one thread at a time; each video in flight has an
    infer thread of its own, so their calls take turns here. Each call still
    gets one video's batch, so the poses are those of a video run alone.
    """

    def __init__(self, runner: Runner) -> None:
        self.inner = runner
        self.info: ModelInfo = runner.info
        self.device: str = runner.device
        self.metadata: ExportMetadata | None = runner.metadata
        self._turn = threading.Lock()

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        with self._turn:
            return self.inner.run(frames, stream=stream)

    def close(self) -> None:
        self.inner.close()


class VideoWorker:
    """Loads the model on its first video and processes videos with it until closed.

    `process` may be called from several threads at once (videos in flight side
    by side); the model is loaded once, by the first.

    Args:
        options: how to load the model and run each video.
        on_frames: told each video's frames as they come (a progress display).
    """

    def __init__(self, options: WorkOptions, on_frames: FrameReport | None = None) -> None:
        self.options = options
        self._on_frames = on_frames
        self._runner: SharedRunner | None = None
        self._loading = threading.Lock()
        self._stopping = threading.Event()

    def process(self, job: VideoJob, attempt: int = 1) -> VideoResult:
        """Run one video into its output; a failure is returned, not raised.

        An unfinished output an earlier attempt left is discarded first; a video
        that fails leaves nothing behind but an error message.
        """
        started = time.monotonic()
        try:
            redone = discard_unfinished(job.output)
        except OSError as busy:
            # Another run is writing this output (or its folder is unwritable): its
            # files are not this attempt's to remove.
            return failed(job, one_line(busy), attempt)
        frames = instances = 0
        error: str | None = None
        status: Status = "done"
        try:
            frames, instances = self._run(job)
            finish(job.output)
        except VideoStopped as stopped:
            self._clean(job)
            status, frames, error = "stopped", stopped.frames, one_line(stopped)
        except (StreamError, EngineError, OSError, ValueError) as caught:
            self._clean(job)
            status, error = "failed", one_line(caught)
        return attrs.evolve(
            result_of(job, status),
            frames=frames,
            seconds=time.monotonic() - started,
            instances=instances,
            error=error,
            redone=redone,
            attempts=attempt,
            worker=os.getpid(),
        )

    def stop(self) -> None:
        """Stop every video in flight: each fails as stopped, its output not written."""
        self._stopping.set()

    def close(self) -> None:
        """Release the engine; idempotent."""
        with self._loading:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    def _run(self, job: VideoJob) -> tuple[int, int]:
        """Frames processed and instances found; the unfinished output written."""
        options = self.options
        unfinished = unfinished_path(job.output)
        check_outputs(
            {"the output": unfinished},
            {"VIDEO": [job.video], "-m": [Path(model) for model in options.models]},
        )
        device = options.load.device
        gpu = device if device.startswith("cuda") else None
        with open_source(job.video, options.source, camera=False, device=gpu) as source:
            runner, loaded_now = self._runner_for(job.video)
            if self._stopping.is_set():  # stopped while the model loaded
                raise VideoStopped(f"{job.video}: stopped before its first frame")
            pipeline = Pipeline(
                source,
                runner,
                batch_size=options.batch_size,
                policy="recorded",
                outputs=OutputOptions(
                    output=unfinished,
                    save_interval=options.save_interval,
                    provenance={
                        "models": model_records(list(options.models)),
                        # The engine itself, not the wrapper that shares it.
                        "engine": type(runner.inner).__name__,
                        **options.provenance,
                    },
                ),
                # The engine's one-time set-up happens once per worker.
                warmup=loaded_now,
                # A tracker of this video's own: no ids carried over from another.
                tracking=options.tracking,
            )
            frames = instances = 0
            for record in pipeline.records():
                if self._stopping.is_set():
                    raise VideoStopped(f"{job.video}: stopped after {frames} frames", frames)
                frames += 1
                instances += record.poses.n_instances
                if self._on_frames is not None:
                    self._on_frames(job.index, frames, source.n_frames)
        return frames, instances

    def _runner_for(self, video: Path) -> tuple[SharedRunner, bool]:
        """The worker's runner, and whether this call loaded it (verified on `video`'s
        frames spread over its length, unless another video was given)."""
        with self._loading:
            if self._runner is not None:
                return self._runner, False
            # Imported here: the runners import the exporters, which import the stream.
            from sleap_live.engines.runners.load import load_runner

            options = self.options
            verify: dict[str, Any] = {}
            if options.load.options.get("verify", True):
                frames_of = Path(options.verify_video or video)
                verify["verify_frames"] = deferred_spread_frames(
                    frames_of, bit_depth=options.source.bit_depth
                )
            runner = load_runner(list(options.models), **options.load.arguments(), **verify)
            self._runner = SharedRunner(runner)
            return self._runner, True

    def _clean(self, job: VideoJob) -> None:
        """Remove what a failed attempt left (best effort: a retry discards it too)."""
        for path in unfinished_files(job.output):
            try:
                path.unlink()
            except OSError:
                pass
