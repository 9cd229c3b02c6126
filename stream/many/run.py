"""`run_many`: a model over many recorded videos, an output per video, with resume.

The same call goes from a folder on one machine to a Ray cluster: ``workers=1``
runs in this process, ``workers=N`` in N local processes, ``cluster=`` on Ray; each
gives the same poses, since each runs every video alone through the same
`VideoWorker`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from sleap_live.engines.load_options import LoadOptions
from sleap_live.stream.many.finish import OUTPUTS_TO, OutputsTo
from sleap_live.stream.many.local import Interrupted, Reporter, run_here, run_in_processes
from sleap_live.stream.many.videos import (
    DEFAULT_NAME_PATTERN,
    VideoJob,
    escaped,
    find_videos,
    plan_jobs,
)
from sleap_live.stream.many.worker import VideoResult, WorkOptions, failed, skipped
from sleap_live.stream.outputs.slp import DEFAULT_SAVE_INTERVAL
from sleap_live.stream.sources import SourceOptions
from sleap_live.stream.tracking.settings import TrackingSettings

# Videos in flight per worker: the next one decodes while the current one finishes.
DEFAULT_STREAMS = 2
# Further attempts at a video whose worker was lost (killed, out of memory).
DEFAULT_RETRIES = 2


@attrs.frozen
class ManyResult:
    """What a many-videos run did, a `VideoResult` per video in the order found.

    Attributes:
        results: one per video: done, skipped (complete already) or failed.
        mode: where it ran: "this process", "N local workers" or "Ray (ADDRESS)".
        interrupted: the Ctrl-C (or other stopping signal) that stopped the run,
            which the caller raises again once it has shown the results; None: it
            ran to its end.
    """

    results: tuple[VideoResult, ...]
    mode: str
    interrupted: KeyboardInterrupt | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def failed(self) -> tuple[VideoResult, ...]:
        return tuple(result for result in self.results if result.status == "failed")

    @property
    def left(self) -> tuple[VideoResult, ...]:
        """The videos not started because the run's `duration` was up."""
        return tuple(result for result in self.results if result.status == "left")

    @property
    def ok(self) -> bool:
        """Whether no video failed: each is done, was complete already, or was left
        for the next run when the run's `duration` was up."""
        return not self.failed


def with_threads(load: LoadOptions, workers: int | None, cluster: str | None) -> LoadOptions:
    """`load` with its engine threads per worker where it gives none: on Ray 1 (an
    actor per CPU); locally each worker's share of this machine's cores, so together
    they use each core once; None for one worker in this process (the engine's
    default, a thread per core)."""
    if load.threads is not None:
        return load
    if cluster is not None:
        return attrs.evolve(load, threads=1)
    if workers is None or workers <= 1:
        return load
    return attrs.evolve(load, threads=max(1, (os.cpu_count() or 1) // workers))


@attrs.frozen
class ManySettings:
    """How a many-videos run goes about its videos: `run_many`'s arguments of the
    same names, checked when made.

    Raises:
        ValueError: a count below 1, negative retries or duration, an unknown
            `outputs_to`, or "driver" without `cluster`.
    """

    overwrite: bool = False
    workers: int | None = None
    streams: int = DEFAULT_STREAMS
    cluster: str | None = None
    retries: int = DEFAULT_RETRIES
    outputs_to: OutputsTo = "worker"
    duration: float | None = None

    def __attrs_post_init__(self) -> None:
        for name, value in (("workers", self.workers or 1), ("streams", self.streams)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")
        if self.duration is not None and self.duration < 0:
            raise ValueError(f"duration must be 0 or more seconds, got {self.duration}")
        if self.outputs_to not in OUTPUTS_TO:
            raise ValueError(
                f"outputs_to must be one of {', '.join(OUTPUTS_TO)}, got {self.outputs_to!r}"
            )
        if self.outputs_to == "driver" and self.cluster is None:
            raise ValueError(
                "outputs to the driver apply with a Ray cluster; without one the workers "
                "write to this machine's output folder already"
            )


def run_many(
    videos: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    models: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    output_dir: str | os.PathLike[str] | None = None,
    name_pattern: str = DEFAULT_NAME_PATTERN,
    overwrite: bool = False,
    workers: int | None = None,
    streams: int = DEFAULT_STREAMS,
    cluster: str | None = None,
    retries: int = DEFAULT_RETRIES,
    outputs_to: OutputsTo = "worker",
    load: LoadOptions | None = None,
    batch_size: int | None = None,
    source: SourceOptions | None = None,
    save_interval: float | None = DEFAULT_SAVE_INTERVAL,
    tracking: TrackingSettings | None = None,
    duration: float | None = None,
    report: Reporter | None = None,
) -> ManyResult:
    """Run `models` over every video `videos` names, each into a pose file of its own.

    Outputs are written under a hidden name and renamed when their video is done,
    so an output that exists is complete: it is skipped (unless `overwrite`), and a
    run killed halfway is resumed by running it again (a half-written output is
    discarded and its video redone). A video that fails is reported in its result
    and the others go on.

    Args:
        videos: video files, folders (their videos) and glob patterns (`find_videos`).
        models: the model path, or two for top-down (as `load_runner` takes them).
        output_dir: the outputs' folder (default: the working directory).
        name_pattern: each output's name; ``{stem}``, ``{name}`` and ``{parent}``
            are the video's name without suffix, its whole name and its folder's
            name; the suffix picks the format (.slp, .h5, .nwb, .csv).
        overwrite: redo videos whose output is complete (replaced once the new one is).
        workers: 1 runs in this process; more, that many local processes (which
            import the caller's main module: keep a script's top-level work under
            ``if __name__ == "__main__":``); with
            `cluster`, the Ray actors (default: 1 here; on Ray as many as the
            cluster holds: an actor per `threads` CPUs, or with a ``cuda`` device
            an actor per GPU).
        streams: videos in flight per worker, sharing its engine.
        cluster: None (this machine), "local" (Ray started here) or
            "ray://HOST:PORT" (a Ray cluster); needs the `cluster` extra.
        retries: further attempts at a video whose worker process was lost.
        outputs_to: with `cluster`, who writes the outputs: "worker" (each Ray
            worker, to `output_dir`, which every machine must see at the same path)
            or "driver" (each Ray worker returns its outputs' bytes and this process
            writes them, under the same rules: hidden until complete, resumable).
        load: how each worker loads the model (`LoadOptions`, default: its
            defaults); threads None there gives each worker its share
            (`with_threads`).
        batch_size, save_interval: as for `Pipeline`.
        source: how each video is read (`open_source`'s options, such as its
            ``decoder``, ``bit_depth`` and ``read_timeout``).
        tracking: track ids with these settings (None: none); each video is tracked
            on its own by the worker that runs it, with the ids a run over that
            video alone gives.
        duration: seconds after which no video starts (None: no limit); the videos
            in flight then finish and the rest are left ("left") for the next run,
            as under a job's time limit.
        report: told as each video starts and finishes (a progress display).

    Raises:
        VideoListError: `videos` names no video, a bad name pattern or output
            folder, or two videos that would write one output.
        ValueError: as `ManySettings`.
        RuntimeUnavailableError: `cluster` without Ray installed.
    """
    settings = ManySettings(overwrite, workers, streams, cluster, retries, outputs_to, duration)
    given = [videos] if isinstance(videos, str | os.PathLike) else list(videos)
    model_paths = [models] if isinstance(models, str | os.PathLike) else list(models)
    jobs = plan_jobs(
        find_videos(given),
        pattern=name_pattern,
        output_dir=None if output_dir is None else Path(output_dir),
    )
    options = WorkOptions(
        models=tuple(os.fspath(Path(path).absolute()) for path in model_paths),
        load=with_threads(load or LoadOptions(), workers, cluster),
        batch_size=batch_size,
        source=source or SourceOptions(),
        save_interval=save_interval,
        tracking=tracking,
    )
    run = run_jobs(jobs, options, settings, report)
    if run.interrupted is not None:
        raise run.interrupted
    return run


def run_jobs(
    jobs: Sequence[VideoJob],
    options: WorkOptions,
    settings: ManySettings,
    report: Reporter | None = None,
) -> ManyResult:
    """`run_many` on planned jobs (`plan_jobs`), worker options and run settings; a
    run in this process, in local workers or on Ray stopped by Ctrl-C returns what
    it did, with `ManyResult.interrupted`."""
    overwrite, workers, cluster = settings.overwrite, settings.workers, settings.cluster
    deadline = None if settings.duration is None else time.monotonic() + settings.duration
    # Absolute paths: worker processes and Ray actors may run in other folders.
    jobs = [
        attrs.evolve(job, video=job.video.absolute(), output=job.output.absolute()) for job in jobs
    ]
    todo = [job for job in jobs if overwrite or not (job.complete or job.problem)]
    done = {job.index: skipped(job) for job in jobs if not overwrite and job.complete}
    # Something at an output's name that is no pose file of its video: refused, in
    # one line, rather than skipped as done or replaced (it may be the user's).
    done.update(
        (job.index, failed(job, _not_an_output(job)))
        for job in jobs
        if not overwrite and job.problem
    )
    if report is not None:
        for result in done.values():
            report.finished(result)
    run: Callable[[], list[VideoResult]]
    if cluster is not None:
        from sleap_live.stream.many.cluster import run_on_ray

        mode = f"Ray ({cluster})" + (
            ", outputs written by the driver" if settings.outputs_to == "driver" else ""
        )
        run = functools.partial(
            run_on_ray,
            todo,
            options,
            address=cluster,
            workers=workers,
            streams=settings.streams,
            retries=settings.retries,
            # A CUDA run: an actor per GPU, each given one by Ray.
            gpus_per_worker=1.0 if options.load.device.startswith("cuda") else 0.0,
            outputs_to=settings.outputs_to,
            deadline=deadline,
            report=report,
        )
    elif workers is not None and workers > 1:
        mode = f"{workers} local workers"
        run = functools.partial(
            run_in_processes,
            todo,
            options,
            workers=workers,
            streams=settings.streams,
            retries=settings.retries,
            deadline=deadline,
            report=report,
        )
    else:
        mode = "this process"
        run = functools.partial(
            run_here, todo, options, streams=settings.streams, deadline=deadline, report=report
        )
    try:
        results = run()
    except Interrupted as stopped:
        # What finished, what stopped and what was left, for the table.
        done.update((result.index, result) for result in stopped.results)
        return ManyResult(tuple(done[i] for i in sorted(done)), mode, stopped.interrupt)
    done.update((result.index, result) for result in results)
    return ManyResult(tuple(done[index] for index in sorted(done)), mode)


def _not_an_output(job: VideoJob) -> str:
    return (
        f"{escaped(job.output)} {job.problem}; not skipped as done nor replaced: move it "
        "away, or run with --overwrite to replace it"
    )
