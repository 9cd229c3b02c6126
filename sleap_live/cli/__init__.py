"""`sleap-live`: run, replay, export and benchmark pose models from the terminal.

Commands::

    sleap-live run VIDEO -m MODEL [-m MODEL2] [-o out.slp] [--batch-size N] ...
    sleap-live run --camera 0 -m MODEL [--width W --height H --fps F] [--duration S]
    sleap-live --camera 0 -m MODEL ...          (`run` may be left out)
    sleap-live replay VIDEO --fps 30 -m MODEL   (a file paced like a camera)
    sleap-live export MODEL_DIR [MODEL_DIR2] -o OUT [--format onnx|torchscript]
    sleap-live bench VIDEO -m MODEL [--json bench.json]
    sleap-live check-tensorrt MODEL.onnx        (what TensorRT would refuse or change)

One parser holds every subcommand (`run.py`, `export.py`, `bench.py`, `check.py`), built from
the options they share (`options.py`). `python -m sleap_live` is the same command.

Exit status: 0 done, 1 a source, model or output failed, 2 bad arguments,
130 interrupted (Ctrl-C), 143 terminated (SIGTERM). Every expected error is
one line on stderr: `sleap-live: error: <message>`.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence

from rich.console import Console

from sleap_live.cli import bench, check, export, run
from sleap_live.cli.options import PROG, Parser, UsageError
from sleap_live.engines.errors import EngineError
from sleap_live.stream.errors import StreamError

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_USAGE", "main", "parser"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
COMMANDS = ("run", "replay", "export", "bench", "check-tensorrt")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled like Ctrl-C, with its own exit status."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sleap-live` console script and of `python -m sleap_live`.

    Args:
        argv: arguments without the program name; defaults to `sys.argv[1:]`.

    Returns:
        The exit status (see the module docstring).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["run", *argv]
    console = Console(stderr=True)
    try:
        args = parser().parse_args(argv)
    except UsageError as error:
        return _fail(str(error), EXIT_USAGE)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    try:
        with _sigterm_as_interrupt():
            return int(args.handler(args, console))
    except UsageError as error:
        return _fail(str(error), EXIT_USAGE)
    except Terminated:
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (StreamError, EngineError, OSError) as error:
        return _fail(_one_line(error), EXIT_ERROR)
    except ValueError as error:  # arguments the parser cannot judge (e.g. -o vs --format)
        return _fail(_one_line(error), EXIT_USAGE)


def parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand with its options."""
    top = Parser(
        prog=PROG,
        description="Realtime pose estimation with sleap-nn models.",
        epilog=(
            "examples:\n"
            f"  {PROG} run VIDEO -m MODEL_DIR -o poses.slp\n"
            f"  {PROG} --camera 0 -m MODEL_DIR -o session.slp   (`run` may be left out)\n"
            f"  {PROG} replay VIDEO --fps 30 -m MODEL_DIR\n"
            f"  {PROG} export MODEL_DIR -o exported/\n"
            f"  {PROG} bench VIDEO -m MODEL_DIR\n"
            f"  {PROG} check-tensorrt exported/model.onnx\n"
            f"\n`{PROG} COMMAND -h` lists a command's options."
        ),
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run.add_parsers(commands)
    export.add_parser(commands)
    bench.add_parser(commands)
    check.add_parser(commands)
    return top


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turns SIGTERM into `Terminated` in the main thread, so it stops cleanly like Ctrl-C."""

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
