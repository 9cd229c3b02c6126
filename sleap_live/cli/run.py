"""`sleap-live run` (a video file or a camera) and `sleap-live replay` (a file paced live).

A file is processed losslessly in batches with a progress bar; a camera or a
replay runs with the live policy and a dashboard. Ctrl-C or SIGTERM stops
capture, finishes the frames already in the engine and saves the outputs, even
while the source is blocked; a source that delivers nothing for --read-timeout
seconds ends the run with an error, after its frames are saved.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli import many
from sleap_live.cli.camera_options import (
    add_camera_options,
    check_camera_options,
    open_cameras,
)
from sleap_live.cli.loading import load_runner_for
from sleap_live.cli.options import (
    IN_MEMORY_EXPORT,
    PROG,
    UsageError,
    add_cache_options,
    add_command,
    add_decoder_option,
    add_experiment_option,
    add_inference_options,
    add_model_options,
    add_output_option,
    add_verify_options,
    bit_depth,
    check_models,
    check_preview_options,
    count,
    frame_rate,
    run_provenance,
    say,
    seconds,
    video_or_url,
    whole_number,
)
from sleap_live.cli.tracking_options import add_tracking_options, tracking_settings
from sleap_live.engines.load.dirs import gives_embeddings
from sleap_live.stream.batching import choose_policy
from sleap_live.stream.dashboard import Dashboard, ProgressView, live_display
from sleap_live.stream.errors import PreviewError, PublishError
from sleap_live.stream.experiment.closed_loop import ClosedLoop, events_csv_path
from sleap_live.stream.memory import check_batch_memory
from sleap_live.stream.outputs.exports import check_suffix
from sleap_live.stream.outputs.guard import check_outputs
from sleap_live.stream.outputs.options import OutputOptions
from sleap_live.stream.outputs.recorder import DEFAULT_RECORD_CODEC, RECORD_CODECS
from sleap_live.stream.outputs.recovery import JournalClaim
from sleap_live.stream.outputs.slp import DEFAULT_SAVE_INTERVAL
from sleap_live.stream.pipeline import Pipeline, check_poseless_run
from sleap_live.stream.preview import DEFAULT_HOST, DEFAULT_MAX_FPS, DEFAULT_PORT, PreviewServer
from sleap_live.stream.preview import exposure_warning as preview_exposure_warning
from sleap_live.stream.publish import Publisher, check_endpoint
from sleap_live.stream.publish import exposure_warning as publish_exposure_warning
from sleap_live.stream.source_reader import open_within
from sleap_live.stream.sources import (
    READ_TIMEOUT_MARGIN,
    Source,
    default_read_timeout,
    open_source,
)
from sleap_live.stream.sources.group import SourceGroup, as_group
from sleap_live.stream.tracking.settings import TrackingSettings

OUTPUT_FORMATS_HELP = (
    ". The suffix picks the format: .slp (SLEAP), .h5 (SLEAP analysis HDF5), .nwb (NWB, "
    "ndx-pose) or .csv (a row per frame and instance). Poses are saved while the run lasts "
    "to FILE.journal, the crash-safe record, and FILE is written from it at the end; after "
    f"a kill, `{PROG} recover FILE` writes it"
)


def add_parser(commands: Any) -> None:
    """Adds `run` and `replay` to the subcommands of the top-level parser."""
    run = add_command(
        commands,
        "run",
        handle,
        description="Run a model on a video file or a camera. A file runs losslessly, in "
        "batches, with a progress bar; a camera runs live (the newest frames first, dropping "
        "what the engine cannot keep up with) with a dashboard. Ctrl-C or SIGTERM stops "
        "capture, finishes the frames in flight and saves the outputs.",
        epilog=f"`run` may be left out:\n  {PROG} VIDEO -m MODEL\n  {PROG} --camera 0 -m MODEL",
    )
    run.add_argument(
        "video",
        nargs="*",
        type=video_or_url,
        metavar="VIDEO",
        help="video file, or a live stream's URL (rtsp://, http(s)://, udp://, rtp://, srt://, "
        "rtmp://, tcp://), run like a camera; or give --camera; or several videos, a folder "
        "or a glob pattern (see 'many videos')",
    )
    _add_common_options(
        run,
        frames_default="frames spread over VIDEO; for a camera, frames of the model "
        "directories' training labels, else synthetic frames",
        batch_size_help="frames per engine call (default: 8 for files, 1 for cameras)",
        output_help="poses to this file (default: for a file, STEM.predictions.slp in the "
        "working directory, STEM being the video's name without its suffix; none for a "
        "camera or a stream)",
    )
    add_camera_options(run)
    add_tracking_options(run)
    many.add_many_options(run)

    replay = add_command(
        commands,
        "replay",
        handle,
        description="Replay a video file at its frame rate as if it were a camera: the live "
        "policy, batch 1 and a dashboard, to try live mode without a camera.",
    )
    replay.add_argument("video", type=video_or_url, metavar="VIDEO", help="video file")
    _add_common_options(
        replay,
        frames_default="frames spread over VIDEO",
        batch_size_help="frames per engine call (default: 1, as for a camera)",
        output_help="poses to this file (default: STEM.predictions.slp in the working "
        "directory, STEM being the video's name without its suffix)",
    )
    replay.add_argument(
        "--fps", type=frame_rate, help="replay rate (default: the video's frame rate)"
    )
    add_tracking_options(replay)


def _add_common_options(
    parser: argparse.ArgumentParser, *, frames_default: str, batch_size_help: str, output_help: str
) -> None:
    # The pipeline picks the batch size from its policy: 8 recorded, 1 live.
    add_model_options(parser, batch_size=None, batch_size_help=batch_size_help)
    add_inference_options(parser)
    add_decoder_option(parser)
    parser.add_argument(
        "--bit-depth",
        type=bit_depth,
        metavar="BITS",
        help="bits per sample the video's or camera's data uses (8 to 16), scaled to 8 bits "
        "for the model: 12 for 12-bit data stored in a 16-bit video (default: the pixel "
        "format's depth; a 16-bit source whose first frame uses 12 bits or fewer is warned "
        "about)",
    )
    add_verify_options(parser, frames_default=frames_default, description=IN_MEMORY_EXPORT)
    add_cache_options(parser)
    out = parser.add_argument_group("outputs")
    add_output_option(out, "FILE", output_help + OUTPUT_FORMATS_HELP)
    out.add_argument(
        "--record",
        type=Path,
        metavar="VIDEO",
        help="record the processed frames to this video, and their capture times to "
        "VIDEO.timestamps.csv (default: no recording). The poses link to the recording "
        "when it is lossless (ffv1) or the source is a camera or stream; otherwise to "
        "the source video, and the provenance names the recording",
    )
    out.add_argument(
        "--record-codec",
        choices=tuple(RECORD_CODECS),
        default=DEFAULT_RECORD_CODEC,
        help="codec of --record: h264 and h265 are lossy (CRF), ffv1 is lossless (.mkv or "
        ".avi) (default: %(default)s)",
    )
    out.add_argument(
        "--record-quality",
        type=whole_number(0, 51),
        metavar="CRF",
        help="CRF of a lossy --record-codec, 0 (best) to 51 (default: 18 for h264, 23 for h265)",
    )
    out.add_argument(
        "--record-overlay",
        type=Path,
        metavar="VIDEO",
        help="record the processed frames with their poses drawn to this video, and "
        "--experiment's regions and rule states (default: no overlay recording)",
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="replace outputs that exist (-o, --record, --record-overlay), each once the new "
        "one is written; over many videos, redo videos whose output exists (default: refuse "
        "an existing output before any work; over many videos, skip those videos)",
    )
    out.add_argument(
        "--save-interval",
        type=seconds,
        default=DEFAULT_SAVE_INTERVAL,
        metavar="S",
        help="save finished frames to the pose file's journal at least every S seconds: what a "
        "crash can cost",
    )
    out.add_argument(
        "--publish",
        type=_endpoint,
        metavar="ENDPOINT",
        help="publish every frame's poses to other programs on this ZeroMQ endpoint "
        "(tcp://127.0.0.1:5555, or ipc://PATH): one message per frame, the topic "
        "poses/SOURCE and a msgpack map; needs the publish extra (default: no publishing)",
    )
    loop = parser.add_argument_group("closed loop")
    add_experiment_option(
        loop,
        "run this closed-loop experiment (YAML, docs/closed-loop.md) on the tracked "
        "poses: its rules' onsets and offsets go to its devices, to an events CSV beside "
        "-o (STEM.events.csv) and into a .slp or .nwb output (default: none)",
    )
    loop.add_argument(
        "--experiment-outputs",
        action="store_true",
        help="on a recorded video, drive the experiment's devices (default: simulated there, "
        "so a file rehearses the experiment; a camera, stream or replay drives them)",
    )
    view = parser.add_argument_group("preview")
    view.add_argument(
        "--preview",
        action="store_true",
        help="serve a live preview in the browser: the frames with the poses (and "
        "--experiment's regions and rule states) drawn and the "
        f"dashboard's figures, at most {DEFAULT_MAX_FPS:g} frames a second (skipping frames for "
        "the page, never for the model); its address is printed once the model is ready; "
        "needs the preview extra (default: no preview)",
    )
    view.add_argument(
        "--preview-hold",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="when the run ends, keep showing the last frame and the run's figures until "
        "Ctrl-C; --no-preview-hold: stop with the run (default: hold in a terminal)",
    )
    view.add_argument(
        "--preview-port",
        type=_port,
        metavar="PORT",
        help=f"TCP port of --preview; 0 takes any free one (default: {DEFAULT_PORT})",
    )
    view.add_argument(
        "--preview-host",
        metavar="HOST",
        help="address --preview listens on; 0.0.0.0 shows it to every machine that can reach "
        f"this one (default: {DEFAULT_HOST}, this machine only)",
    )
    stop = parser.add_argument_group("session")
    stop.add_argument(
        "--duration",
        type=seconds,
        metavar="S",
        help="stop after S seconds; over many videos, start no video after S seconds "
        "(default: at the end of the source, or Ctrl-C)",
    )
    stop.add_argument(
        "--read-timeout",
        type=seconds,
        metavar="S",
        help="a source that delivers no frame for S seconds (a camera on external trigger "
        "that is never triggered, a stalled stream) has stalled: the run stops with an error, "
        "saving every frame before (default: the source's frame interval plus "
        f"{READ_TIMEOUT_MARGIN:g} s)",
    )
    stop.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar or dashboard (default: show them)",
    )


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs `run` or `replay`; returns the exit status (errors propagate to `main`)."""
    if args.command == "run":
        if many.wants_many(args):
            if args.experiment is not None:
                raise UsageError("--experiment runs on one video, stream or camera")
            return many.handle(args, console)
        args.video = args.video[0] if args.video else None
    _check(args)
    check_poseless_run(args.models, tracked=args.tracking, output=args.output)
    # The models are read for vectors only when the run tracks: other runs pay nothing.
    tracking = tracking_settings(args, args.tracking and gives_embeddings(args.models))
    # A video file; None for a camera or a stream URL.
    video = args.video if isinstance(args.video, Path) else None
    output = args.output
    if output is None and video is not None:
        # In the working directory, not beside the video (whose folder may be
        # read-only, shared, or a camera's upload folder).
        output = Path.cwd() / f"{video.stem}.predictions.slp"
    closed_loop = _closed_loop(args)
    events = None if closed_loop is None or output is None else events_csv_path(output)
    check_outputs(
        {
            "-o": output,
            "--record": args.record,
            "--record-overlay": args.record_overlay,
            **({} if events is None else {"--experiment events": events}),
        },
        {
            "VIDEO": [video],
            "-m": [Path(model) for model in args.models],
            "--verify-video": [args.verify_video],
        },
        overwrite=args.overwrite,
    )
    # Built once, here: a bad recording path or codec is refused before any work.
    outputs = OutputOptions(
        output=output,
        record=args.record,
        save_interval=args.save_interval,
        record_codec=args.record_codec,
        record_quality=args.record_quality,
        provenance=run_provenance(args),
        record_overlay=args.record_overlay,
        overwrite=args.overwrite,
    )
    # The pose output's journal is opened (and locked) before any server binds: a
    # journal that cannot be opened fails the run with no server started, and its
    # descriptor is the run's whatever peers connect. A server that cannot bind
    # gives the claim up again, leaving no journal behind.
    claim = None if output is None else JournalClaim(output, overwrite=args.overwrite)
    try:
        with (
            _bind_publisher(args, console) as publisher,
            _bind_preview(args, console) as preview,
        ):
            return _run(args, console, outputs, publisher, preview, claim, tracking, closed_loop)
    finally:
        if claim is not None:
            claim.release()  # nothing once the run's writer took it


def _run(
    args: argparse.Namespace,
    console: Console,
    outputs: OutputOptions,
    publisher: Publisher | None,
    preview: PreviewServer | None,
    claim: JournalClaim | None,
    tracking: TrackingSettings | None,
    closed_loop: ClosedLoop | None = None,
) -> int:
    # Opening reads the source's first data, which a stalled source never sends.
    timeout = args.read_timeout or default_read_timeout(args.fps)
    if args.command == "run" and args.camera is not None:
        source = as_group(open_cameras(args, timeout))
    else:
        source = as_group(open_within(lambda: _open(args), timeout, str(args.video)))
    with source:
        if source.per_source and claim is not None:
            # Each camera's poses go to a file of its own, journaled by its writer.
            claim.release()
            claim = None
        _check_batch_size(args, source)
        # Loaded as `Pipeline` loads model paths: verified on the source's video.
        runner = load_runner_for(args, console, source, quiet=args.quiet)
        try:
            pipeline = Pipeline(
                source,
                runner,
                batch_size=args.batch_size,
                outputs=outputs,
                claim=claim,
                tracking=tracking,
                experiment=closed_loop,
            )
            for consumer in (publisher, preview):
                if consumer is not None:
                    pipeline.attach(consumer)
            if preview is not None:
                # Once the model is ready (a page opened earlier would show nothing for
                # as long as the model loads); even with --quiet: without it a page on a
                # free port cannot be found.
                console.print(f"preview on {preview.url}", highlight=False)
                if preview.exposed:
                    warning = preview_exposure_warning(preview.url)
                    console.print(warning, highlight=False, soft_wrap=True)
            if not args.quiet:
                _print_path(source.sources[0], runner, args.decoder, console)
                if publisher is not None:
                    console.print(f"publishing poses on {publisher.endpoint}", highlight=False)
            try:
                _process(pipeline, args, console)
            except KeyboardInterrupt:
                _summarise(pipeline, outputs.output, console)
                raise
            _summarise(pipeline, outputs.output, console)
        finally:
            runner.close()
    # The ended run's last frame and figures, served until Ctrl-C; not by a preview
    # that failed during the run (and said so then).
    if preview is not None and _holds(args, console) and preview.can_hold:
        console.print(
            f"the run ended; the preview on {preview.url} shows its last frame and figures "
            "until Ctrl-C",
            highlight=False,
            soft_wrap=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            preview.hold()
    return 0


def _closed_loop(args: argparse.Namespace) -> ClosedLoop | None:
    """The experiment of --experiment, its file read and its shape checked before any
    work (its names are checked against the model once it is loaded)."""
    if args.experiment is None:
        if args.experiment_outputs:
            raise UsageError("--experiment-outputs applies with --experiment")
        return None
    return ClosedLoop(
        args.experiment,
        simulate=False if args.experiment_outputs else None,
        overwrite=args.overwrite,
    )


def _endpoint(text: str) -> str:
    """argparse type: a ZeroMQ endpoint to publish on."""
    try:
        return check_endpoint(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _bind_publisher(
    args: argparse.Namespace, console: Console
) -> contextlib.AbstractContextManager[Any]:
    """The `Publisher` of --publish, bound before any work (a null context without it);
    a one-line warning when other machines can reach it.

    Raises:
        PublishError: naming --publish and the endpoint.
    """
    if args.publish is None:
        return contextlib.nullcontext()
    try:
        publisher = Publisher(args.publish)
    except PublishError as error:
        raise PublishError(f"--publish {args.publish}: {error.reason}") from None
    warning = publish_exposure_warning(args.publish)
    if warning is not None:
        # Printed even with --quiet, as the preview's address is.
        console.print(warning, highlight=False, soft_wrap=True)
    return publisher


def _port(text: str) -> int:
    """argparse type: a TCP port, 0 (any free one) to 65535."""
    value = count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535, got {value}")
    return value


def _bind_preview(
    args: argparse.Namespace, console: Console
) -> contextlib.AbstractContextManager[Any]:
    """The `PreviewServer` of --preview, bound before any work (a null context without
    it); its address is printed once the model is ready.

    Raises:
        PreviewError: naming --preview and the address.
    """
    if not args.preview:
        return contextlib.nullcontext()
    host = DEFAULT_HOST if args.preview_host is None else args.preview_host
    port = DEFAULT_PORT if args.preview_port is None else args.preview_port
    try:
        return PreviewServer(host, port, linger=_holds(args, console))
    except PreviewError as error:
        raise PreviewError(f"--preview: {error}") from None


def _holds(args: argparse.Namespace, console: Console) -> bool:
    """Whether the preview shows the run's last frame until Ctrl-C once the source ends:
    --preview-hold, else where someone is at a terminal to press it."""
    return console.is_terminal if args.preview_hold is None else args.preview_hold


def _print_path(source: Source, runner: Any, decoder: str, console: Console) -> None:
    """The path line (``path: pyav decode -> OnnxRunner on cpu``), after the fallback
    notice under --decoder auto (with --decoder nvdec the notice is a logged warning,
    shown already); and a line when the model is a centroid model alone (a top-down
    pair given without its centered-instance model): its poses are one point per animal."""
    if source.decoder_notice is not None and decoder == "auto":
        console.print(source.decoder_notice, highlight=False, soft_wrap=True)
    path = f"path: {source.decoder} decode -> {type(runner).__name__} on {runner.device}"
    console.print(path, highlight=False, soft_wrap=True)
    info = runner.info
    if info.model_type == "centroid":
        node = ", ".join(info.skeleton.node_names)
        console.print(
            f"a centroid model alone: one point per animal ({node}), no body parts; for whole "
            "poses give its centered-instance model too (a second -m)",
            highlight=False,
            soft_wrap=True,
        )


def _check(args: argparse.Namespace) -> None:
    check_models(args)
    check_preview_options(args)
    if args.output is not None:
        try:
            check_suffix(args.output)
        except ValueError as error:
            raise UsageError(str(error)) from None
    if isinstance(args.video, str):  # a stream URL
        if args.command == "replay":
            raise UsageError(
                f"{args.video}: replay paces a video file; a stream is live already "
                f"(run it with `{PROG} run URL`)"
            )
        if args.decoder != "pyav":
            raise UsageError("--decoder applies to video files; streams are read with PyAV")
    if args.command != "run":
        return
    if (args.video is None) == (args.camera is None):
        raise UsageError("give a VIDEO file or --camera DEVICE (one of them)")
    if args.camera is not None and args.decoder != "pyav":
        raise UsageError("--decoder applies to video files; cameras are read with PyAV")
    check_camera_options(args)


def _check_batch_size(args: argparse.Namespace, source: SourceGroup) -> None:
    """Whether --batch-size fits in memory, checked before the model loads (several
    cameras' batch holds one frame of each: `check_camera_options`)."""
    if args.batch_size is None or source.per_source:
        return
    policy, batch_size = choose_policy(None, source.is_live, args.batch_size)
    try:
        check_batch_memory(policy, batch_size, source.frame_shape)
    except ValueError as error:
        raise UsageError(f"--batch-size: {error}") from None


def _open(args: argparse.Namespace) -> Source:
    depth, timeout = args.bit_depth, args.read_timeout
    # NVDEC decodes on the GPU the engine runs on (`--device cuda:N`).
    gpu = args.device if args.device.startswith("cuda") else None
    if isinstance(args.video, str):  # a stream URL (`_check` refused one to replay)
        return open_source(args.video, bit_depth=depth, read_timeout=timeout)
    replay = args.command == "replay"
    return open_source(
        args.video,
        camera=False,
        replay=replay,
        fps=args.fps if replay else None,  # run's --fps is a camera's
        decoder=args.decoder,
        device=gpu,
        bit_depth=depth,
        read_timeout=timeout,
    )


def _process(pipeline: Pipeline, args: argparse.Namespace, console: Console) -> None:
    """Runs until the source ends, --duration passes or a signal arrives; then stops."""
    view = ProgressView if pipeline.policy == "recorded" else Dashboard
    display = (
        contextlib.nullcontext()
        if args.quiet
        else live_display(view(lambda: pipeline.stats), console)
    )
    with display:
        try:
            pipeline.start()
            pipeline.join(args.duration)
        except KeyboardInterrupt:
            console.print(
                "stopping: finishing the frames in flight and saving outputs; press Ctrl-C "
                "twice more to exit at once (the journal keeps the frames saved so far)"
            )
            pipeline.stop()
            raise
        pipeline.stop()


def _summarise(pipeline: Pipeline, output: Path | None, console: Console) -> None:
    stats = pipeline.stats
    line = (
        f"{stats.frames_processed} frames in {stats.elapsed:.1f} s "
        f"({stats.frames_processed / stats.elapsed if stats.elapsed else 0:.1f} fps)"
    )
    if stats.policy == "recorded" and stats.frames_dropped:
        # A recorded run drops nothing; these were decoded ahead when a stop came.
        line += f", stopped with {stats.frames_dropped} frames decoded ahead, not processed"
    elif stats.frames_dropped or stats.policy == "live":
        line += f", {stats.frames_dropped} dropped"
        if len(stats.dropped_by_source) > 1:
            line += " (" + ", ".join(f"{n} {s}" for s, n in stats.dropped_by_source.items()) + ")"
    if stats.latency_p50 is not None and stats.latency_p99 is not None and stats.policy == "live":
        line += (
            f", latency p50 {stats.latency_p50 * 1000:.1f} ms p99 {stats.latency_p99 * 1000:.1f} ms"
        )
    console.print(line, highlight=False)
    if stats.frames_processed and not stats.frames_with_instances:
        console.print(
            f"warning: the model found no animal in any of the {stats.frames_processed} "
            "frames: it may not fit this video (a model trained on gray video given colour "
            "frames, other animals, another scale); --preview or `sleap-live render` shows "
            "the frames it saw",
            highlight=False,
            soft_wrap=True,
        )
    if stats.tracking_p50 is not None and stats.tracking_p99 is not None:
        console.print(
            f"tracking: {stats.tracks} tracks, p50 {stats.tracking_p50 * 1000:.2f} ms "
            f"p99 {stats.tracking_p99 * 1000:.2f} ms a frame",
            highlight=False,
        )
    # What the files hold now, never what was asked for.
    saved = pipeline.outputs.describe()
    if not saved and output is not None:
        saved = [f"poses: none written to {output} (stopped before the pipeline started)"]
    for saying in saved:
        say(console, saying)
    if pipeline.experiment is not None:
        _summarise_experiment(pipeline.experiment, console)
    if stats.publish is not None:
        console.print(
            f"published: {stats.publish.sent} messages on {stats.publish.endpoint} "
            f"({stats.publish.skipped} skipped)",
            highlight=False,
            soft_wrap=True,
        )


def _summarise_experiment(closed_loop: ClosedLoop, console: Console) -> None:
    stats = closed_loop.stats()
    where = "" if closed_loop.log.csv_path is None else f", logged to {closed_loop.log.csv_path}"
    say(
        console,
        f"experiment: {stats.events} onsets and offsets over {stats.frames} frames"
        f"{' (devices simulated)' if stats.simulated else ''}{where}",
    )
    for device in stats.devices:
        if device.error is not None or device.dropped:
            say(
                console,
                f"experiment device {device.name}: {device.sent} sent, {device.dropped} not sent"
                + ("" if device.error is None else f" ({device.error})"),
            )
