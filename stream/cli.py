"""`sleap-live`: run pose models on video files and cameras from the terminal.

Commands::

    sleap-live run VIDEO -m MODEL [-m MODEL2] [-o out.slp] [--batch-size N] ...
    sleap-live run --camera 0 -m MODEL [--width W --height H --fps F] [--duration S]
    sleap-live --camera 0 -m MODEL ...          (``run`` may be left out)
    sleap-live replay VIDEO --fps 30 -m MODEL   (a file paced like a camera)
    sleap-live export ...                       (see ``sleap-live export -h``)

A file is processed losslessly in batches with a progress bar; a camera or a
replay runs with the live policy and a dashboard. Ctrl-C or SIGTERM stops
capture, finishes the frames already in the engine and saves the outputs.

Exit status: 0 done, 1 a source, model or output failed, 2 bad arguments,
130 interrupted (Ctrl-C), 143 terminated (SIGTERM). Every expected error is
one line on stderr: ``sleap-live: error: <message>``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from sleap_live.engines.errors import EngineError
from sleap_live.stream.dashboard import Dashboard, ProgressView, live_display
from sleap_live.stream.errors import StreamError
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.sources import Source, open_source

PROG = "sleap-live"
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM

# Subcommands implemented elsewhere: each module has `main(argv) -> int` with its
# own argument parser; `sleap-live NAME ARGS...` calls it with ARGS.
DELEGATED = {"export": "sleap_live.engines.export.onnx", "bench": "sleap_live.stream.bench"}
COMMANDS = ("run", "replay", *DELEGATED)


class UsageError(Exception):
    """The command line is wrong; exits with status 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled like Ctrl-C, with its own exit status."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors become one line, not usage plus message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sleap-live` console script.

    Args:
        argv: arguments without the program name; defaults to `sys.argv[1:]`.

    Returns:
        The exit status (see the module docstring).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return _delegate(argv[0], argv[1:])
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["run", *argv]
    console = Console(stderr=True)
    try:
        args = _parser().parse_args(argv)
        _check(args)
    except UsageError as error:
        return _fail(str(error), EXIT_USAGE)
    try:
        with _sigterm_as_interrupt():
            return _run(args, console)
    except Terminated:
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (StreamError, EngineError, OSError) as error:
        return _fail(_one_line(error), EXIT_ERROR)
    except ValueError as error:
        return _fail(_one_line(error), EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    model = common.add_argument_group("model")
    model.add_argument(
        "-m",
        "--model",
        dest="models",
        action="append",
        required=True,
        metavar="MODEL",
        help="model directory or export; give -m twice for top-down (centroid + instance)",
    )
    model.add_argument("--engine", choices=("auto", "torch", "onnx"), default="auto")
    model.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    model.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="N",
        help="frames per engine call (default: 8 for files, 1 for live sources)",
    )
    out = common.add_argument_group("outputs")
    out.add_argument(
        "-o",
        "--output",
        type=Path,
        help="poses to this .slp file (default for files: VIDEO.predictions.slp)",
    )
    out.add_argument(
        "--record",
        type=Path,
        metavar="VIDEO",
        help="record the processed frames to this video (the .slp output then links to it)",
    )
    run = common.add_argument_group("run")
    run.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar or dashboard")

    parser = _Parser(
        prog=PROG,
        description="Realtime pose estimation with sleap-nn models.",
        epilog=f"`run` may be left out: `{PROG} VIDEO -m MODEL`, `{PROG} --camera 0 -m MODEL`.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_parser = commands.add_parser(
        "run", parents=[common], help="run a model on a video file or a camera"
    )
    run_parser.add_argument(
        "video", nargs="?", type=Path, metavar="VIDEO", help="video file (or use --camera)"
    )
    camera = run_parser.add_argument_group("camera")
    camera.add_argument("--camera", metavar="DEVICE", help="camera index (0) or device path")
    camera.add_argument("--width", type=_positive_int, help="requested frame width")
    camera.add_argument("--height", type=_positive_int, help="requested frame height")
    camera.add_argument("--fps", type=_positive_float, help="requested frame rate")
    replay = commands.add_parser(
        "replay", parents=[common], help="replay a video file at its frame rate, like a camera"
    )
    replay.add_argument("video", type=Path, metavar="VIDEO", help="video file")
    replay.add_argument("--fps", type=_positive_float, help="replay rate (default: the video's)")
    for name in DELEGATED:
        commands.add_parser(name, help=f"see `{PROG} {name} -h`")
    return parser


def _check(args: argparse.Namespace) -> None:
    if len(args.models) > 2:
        raise UsageError("give -m once, or twice for a top-down model")
    if args.output is not None and args.output.suffix != ".slp":
        raise UsageError(f"{args.output}: the pose output (-o) must be a .slp file")
    if args.command != "run":
        return
    if (args.video is None) == (args.camera is None):
        raise UsageError("give a VIDEO file or --camera DEVICE (one of them)")
    if args.camera is None:
        given = [f"--{name}" for name in ("width", "height", "fps") if getattr(args, name)]
        if given:
            raise UsageError(f"{', '.join(given)} only apply with --camera")
    elif (args.width is None) != (args.height is None):
        raise UsageError("give --width and --height together")


def _run(args: argparse.Namespace, console: Console) -> int:
    # Imported here, so --help and argument errors answer without loading torch.
    from sleap_live.engines.runners.load import load_runner

    source = _open(args)
    with source:
        runner = load_runner(args.models, engine=args.engine, device=args.device)
        try:
            output = args.output
            if output is None and args.command == "run" and args.camera is None:
                output = args.video.with_name(f"{args.video.name}.predictions.slp")
            pipeline = Pipeline(
                source, runner, batch_size=args.batch_size, output=output, record=args.record
            )
            try:
                _process(pipeline, args, console)
            except KeyboardInterrupt:
                _summarise(pipeline, output, args.record, console)
                raise
            _summarise(pipeline, output, args.record, console)
        finally:
            runner.close()
    return EXIT_OK


def _open(args: argparse.Namespace) -> Source:
    if args.command == "replay":
        return open_source(args.video, replay=True, fps=args.fps)
    if args.video is not None:
        return open_source(args.video, camera=False)
    device: int | str = int(args.camera) if args.camera.isdigit() else args.camera
    return open_source(device, camera=True, width=args.width, height=args.height, fps=args.fps)


def _process(pipeline: Pipeline, args: argparse.Namespace, console: Console) -> None:
    """Run until the source ends, --duration passes or a signal arrives; then stop."""
    view = ProgressView if pipeline.policy == "recorded" else Dashboard
    display = (
        contextlib.nullcontext()
        if args.quiet
        else live_display(view(lambda: pipeline.stats), console)
    )
    with display:
        pipeline.start()
        try:
            pipeline.join(args.duration)
        except KeyboardInterrupt:
            console.print("stopping: finishing the frames in flight and saving outputs")
            pipeline.stop()
            raise
        pipeline.stop()


def _summarise(
    pipeline: Pipeline, output: Path | None, record: Path | None, console: Console
) -> None:
    stats = pipeline.stats
    line = (
        f"{stats.frames_processed} frames in {stats.elapsed:.1f} s "
        f"({stats.frames_processed / stats.elapsed if stats.elapsed else 0:.1f} fps)"
    )
    if stats.frames_dropped:
        line += f", {stats.frames_dropped} dropped"
    if stats.latency_p50 is not None and stats.policy == "live":
        line += (
            f", latency p50 {stats.latency_p50 * 1000:.1f} ms p99 {stats.latency_p99 * 1000:.1f} ms"
        )
    console.print(line, highlight=False)
    for what, path in (("poses", output), ("recording", record)):
        if path is not None:
            console.print(f"{what}: {path}", highlight=False, soft_wrap=True)


def _delegate(name: str, argv: list[str]) -> int:
    try:
        module = importlib.import_module(DELEGATED[name])
    except ModuleNotFoundError as error:
        if error.name != DELEGATED[name]:
            raise  # the command exists but one of its dependencies is missing
        return _fail(f"`{PROG} {name}` is not available in this installation", EXIT_USAGE)
    return int(module.main(argv))


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` in the main thread, so it stops cleanly like Ctrl-C."""

    def terminate(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _one_line(error: BaseException) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


if __name__ == "__main__":
    sys.exit(main())
