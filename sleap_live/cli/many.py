"""`sleap-live run VIDEO... | DIR | GLOB`: many recorded videos, an output each.

`run` hands its arguments here when they name more than one video (several files,
a folder, a glob pattern) or when an option of this group is given; this module
only parses and checks them, calls `run_many` with a progress display, and prints
the summary table. Exit status 1 when any video failed.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
from pathlib import Path

import attrs
from rich.console import Console

from sleap_live.cli.camera_options import check_camera_options
from sleap_live.cli.loading import load_options
from sleap_live.cli.options import (
    PROG,
    UsageError,
    check_models,
    check_preview_options,
    positive_int,
    run_provenance,
    say,
)
from sleap_live.cli.tracking_options import tracking_settings
from sleap_live.engines.load.dirs import gives_embeddings
from sleap_live.stream.dashboard import live_display
from sleap_live.stream.many.display import ManyProgress, describe, summary_table
from sleap_live.stream.many.finish import OUTPUTS_TO
from sleap_live.stream.many.run import (
    DEFAULT_RETRIES,
    DEFAULT_STREAMS,
    ManySettings,
    run_jobs,
    with_threads,
)
from sleap_live.stream.many.videos import DEFAULT_NAME_PATTERN, escaped, find_videos, plan_jobs
from sleap_live.stream.many.worker import WorkOptions
from sleap_live.stream.pipeline import check_poseless_run
from sleap_live.stream.sources import SourceOptions

# The options of a single run that cannot apply over many videos, and why. Each
# names one file, one endpoint or one live source, or serves one run's poses as they
# are made, which over many videos are made by several workers (processes, Ray
# actors on other machines) at once. Everything else applies to every video
# (tracking included: each video is tracked on its own by the worker that runs it),
# or to the run (--duration: no video starts after it).
SINGLE_RUN_OPTIONS = {
    "output": "-o names one file; give --output-dir and --name-pattern",
    "record": "--record copies one run's frames to a video; these videos are recorded already",
    "record_quality": "--record-quality applies with --record, which is for one video",
    "record_overlay": "--record-overlay writes one video; draw each output on its video "
    "afterwards with `sleap-live render OUTPUT -o VIDEO`",
    "publish": "--publish binds one endpoint for one run's poses as they are made; over "
    "many videos they are made by several workers at once (read the outputs)",
    "preview": "--preview shows one run's frames as they are made; over many videos they "
    "are made by several workers at once",
    "camera": "--camera is live; a run over many takes recorded videos",
}


def add_many_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run over many videos (each default None, so `wants_many`
    sees which were given)."""
    group = parser.add_argument_group(
        "many videos",
        "Given several videos, a folder (its videos) or a glob pattern ('videos/*.mp4', "
        "'**' recurses), or any option of this group, `run` writes an output per video, "
        "skips videos whose output exists (an output appears only once its video is "
        "done, so a run killed halfway is resumed by running it again), goes on past a "
        "video that fails, and ends with a table of every video (exit 1 if any failed). "
        "With --duration S, no video starts after S seconds: those in flight finish, the "
        "rest are left for the next run (under a job's time limit, S a video's time short "
        "of it).",
    )
    group.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="folder of the outputs (default: the working directory)",
    )
    group.add_argument(
        "--name-pattern",
        metavar="PATTERN",
        help="each output's name: {stem} is the video's name without its suffix, {name} "
        "its whole name, {parent} its folder's name; the suffix picks the format "
        f"(default: {DEFAULT_NAME_PATTERN})",
    )
    group.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="worker processes on this machine, each with the model loaded once; with "
        "--cluster, Ray actors (default: 1, in this process; with --cluster, as many as "
        "the cluster has CPUs)",
    )
    group.add_argument(
        "--streams",
        type=positive_int,
        metavar="N",
        help="videos in flight per worker, sharing its engine: the next decodes while the "
        f"current one finishes (default: {DEFAULT_STREAMS})",
    )
    group.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="engine CPU threads per worker (default: the cores divided among the "
        "workers; one worker: every core; with --cluster: 1 per actor)",
    )
    group.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run on Ray (pip install 'sleap-live[cluster]'): local starts Ray on this "
        "machine, ray://HOST:PORT joins a cluster whose machines all see the videos and "
        "--output-dir at the same paths (default: no Ray)",
    )
    group.add_argument(
        "--outputs-to",
        choices=OUTPUTS_TO,
        help="with --cluster, who writes each output to --output-dir: worker (each Ray "
        "worker, so every machine must see --output-dir at the same path) or driver (each "
        "Ray worker returns the finished output and this machine writes it, with the same "
        "resume rules) (default: worker)",
    )
    group.add_argument(
        "--retries",
        type=int,
        metavar="N",
        help="further attempts at a video whose worker process was lost (killed, out of "
        f"memory); its half-written output is discarded (default: {DEFAULT_RETRIES})",
    )


def wants_many(args: argparse.Namespace) -> bool:
    """Whether `run`'s arguments ask for a many-videos run: more than one video, a
    folder, a glob pattern, or an option of `add_many_options`."""
    videos = args.video
    if len(videos) > 1:
        return True
    if videos and isinstance(videos[0], Path):
        path = videos[0]
        if path.is_dir() or (not path.exists() and glob.has_magic(os.fspath(path))):
            return True
    given = (
        args.output_dir,
        args.name_pattern,
        args.workers,
        args.streams,
        args.threads,
        args.cluster,
        args.retries,
        args.outputs_to,
    )
    return any(value is not None for value in given)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs `run` over many videos; returns 1 when any failed, else 0."""
    _check(args)
    pattern = args.name_pattern or DEFAULT_NAME_PATTERN
    check_poseless_run(args.models, tracked=args.tracking, output=Path(pattern))
    jobs = plan_jobs(
        find_videos(
            args.video,
            lambda line: say(console, line),
        ),
        pattern=pattern,
        output_dir=args.output_dir,
    )
    workers = args.workers
    options = WorkOptions(
        models=tuple(os.fspath(Path(model).absolute()) for model in args.models),
        load=with_threads(
            attrs.evolve(load_options(args), threads=args.threads), workers, args.cluster
        ),
        batch_size=args.batch_size,
        verify_video=None if args.verify_video is None else os.fspath(args.verify_video),
        source=SourceOptions(
            decoder=args.decoder, bit_depth=args.bit_depth, read_timeout=args.read_timeout
        ),
        save_interval=args.save_interval,
        # The models are read for vectors only when the run tracks.
        tracking=tracking_settings(args, args.tracking and gives_embeddings(args.models)),
        provenance=run_provenance(args),
    )
    cores = os.cpu_count() or 1
    if args.cluster is None and workers is not None and workers > cores:
        console.print(
            f"note: {workers} workers on {cores} cores take turns on them: each runs slower, "
            "and all together no faster than one per core",
            highlight=False,
        )
    progress = ManyProgress(len(jobs), console, prog=PROG)
    display = contextlib.nullcontext() if args.quiet else live_display(progress, console)
    with display:
        settings = ManySettings(
            overwrite=bool(args.overwrite),
            workers=workers,
            streams=args.streams or DEFAULT_STREAMS,
            cluster=args.cluster,
            retries=DEFAULT_RETRIES if args.retries is None else args.retries,
            outputs_to=args.outputs_to or "worker",
            duration=args.duration,
        )
        run = run_jobs(jobs, options, settings, progress)
    if not args.quiet:
        # The table is the command's result: on stdout (the progress is on stderr).
        Console().print(summary_table(run))
    for result in run.failed:
        # A line each on stderr, with --quiet too, for logs and scripts.
        say(console, f"{escaped(result.video)}: {describe(result)}")
    if run.left:
        why = "interrupted" if run.interrupted else f"--duration {args.duration:g} s was up"
        console.print(
            f"{len(run.left)} videos left for the next run ({why}): run the same command again",
            highlight=False,
        )
    if run.interrupted is not None:
        raise run.interrupted  # its exit status (130 for Ctrl-C), the table shown
    return 0 if run.ok else 1


def _check(args: argparse.Namespace) -> None:
    if not args.video:
        raise UsageError("give VIDEO files, a folder or a glob pattern")
    for name, reason in SINGLE_RUN_OPTIONS.items():
        if getattr(args, name) not in (None, False):
            raise UsageError(f"{reason} (a run over many videos was asked for)")
    for video in args.video:
        if isinstance(video, str):
            raise UsageError(f"{video}: a stream is live; run it alone (`run URL`)")
    if args.retries is not None and args.retries < 0:
        raise UsageError(f"--retries must be 0 or more, got {args.retries}")
    if args.outputs_to == "driver" and args.cluster is None:
        raise UsageError(
            "--outputs-to driver applies with --cluster; local workers write to this "
            "machine's --output-dir already"
        )
    # As for one video: -m once or twice; the camera and preview options only with
    # --camera and --preview (refused above), never silently ignored.
    check_models(args)
    check_camera_options(args)
    check_preview_options(args)
