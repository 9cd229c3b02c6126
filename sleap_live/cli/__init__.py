"""`sleap-live`: run, replay, export and benchmark pose models from the terminal.

`sleap-live -h` lists the commands, with an example of each (`parser`'s epilog);
`run` may be left out (`sleap-live --camera 0 -m MODEL`).

One parser holds every subcommand, each added by its module (`run.py`, `cameras.py`,
`export.py`, `bench.py`, `check.py`, `recover.py`, `render.py`, `track.py`,
`serve_web.py`, `experiment.py`) from the options they share (`options.py`,
`tracking_options.py`); a command's module is imported only to run it or to build its
options, so each command loads what it needs alone.
`python -m sleap_live` is the same command.

Exit status: 0 done, 1 a run failed or an input is missing or unusable, 2 bad arguments,
130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP), 131
quit (SIGQUIT), on Linux 138, 140, 142 (SIGUSR1, SIGUSR2, SIGALRM): 128 plus the signal's
number. Every expected error is one line on
stderr: `sleap-live: error: <message>`.

Signals: the first Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM:
a closed terminal or Ctrl-\\ saves like Ctrl-C) stops the command cleanly (a run finishes
the frames in flight and saves its outputs); a second one only says what is
still being done and how to leave; a third exits at once, after the command has
said what its outputs hold, without waiting for its threads.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from types import FrameType

from rich.console import Console

from sleap_live.cli.options import PROG, SUMMARIES, Parser, UsageError, fail
from sleap_live.engines.errors import EngineError
from sleap_live.stream.errors import StreamError
from sleap_live.stream.stages import STOP_SIGNALS

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_USAGE", "main", "parser"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
COMMANDS = tuple(SUMMARIES)


def _module(command: str) -> str:
    """The module of `sleap_live.cli` that adds `command`'s parser (`add_parser`, with
    the other commands of the module) and runs it: named after the command, but for
    `replay` (in `run`) and `check-tensorrt` (`check`)."""
    return {"replay": "run", "check-tensorrt": "check"}.get(command, command.replace("-", "_"))


class Terminated(KeyboardInterrupt):
    """Another stopping signal arrived (SIGTERM, SIGHUP, ...: `STOP_SIGNALS`); handled
    like Ctrl-C, with its own exit status."""


class ForcedExit(KeyboardInterrupt):
    """A third Ctrl-C or SIGTERM: leave at once, without waiting for the command's threads."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sleap-live` console script and of `python -m sleap_live`.

    Args:
        argv: arguments without the program name; defaults to `sys.argv[1:]`.

    Returns:
        The exit status (see the module docstring).
    """
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["run", *argv]
    console = Console(stderr=True)
    try:
        args = parser(argv[0] if argv else None).parse_args(argv)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    interrupts = _Interrupts()
    status = _handle(args, console, interrupts)
    if as_program and _hdf5_objects_open():
        # A save failed in HDF5 and left objects of its file open: closing them, as
        # interpreter exit would, can crash inside HDF5. The error is said (every
        # output closed, the journal kept); leave without closing them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _handle(args: argparse.Namespace, console: Console, interrupts: _Interrupts) -> int:
    """Runs the command's handler; returns the exit status (see the module docstring)."""
    try:
        with interrupts.installed():
            return int(args.handler(args, console))
    except ForcedExit:
        # Stage threads may still hold locks (h5py's) that interpreter shutdown
        # would wait for forever: leave without it, as the user asked.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(interrupts.status)
    except UsageError as error:
        return fail(str(error), EXIT_USAGE)
    except Terminated:
        return interrupts.status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (StreamError, EngineError, OSError) as error:
        return fail(_one_line(error), EXIT_ERROR)
    except ValueError as error:
        from sleap_live.stream.experiment.experiment import ExperimentError

        if isinstance(error, ExperimentError):  # one line per mistake in the file
            for problem in error.problems:
                fail(f"{error.source}: {problem}", EXIT_ERROR)
            return EXIT_ERROR
        # Arguments the parser cannot judge (e.g. -o vs --format).
        return fail(_one_line(error), EXIT_USAGE)


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line: every subcommand with its options.

    Args:
        command: build the options of this command alone (and of the others its module
            adds; `main`: the command it runs), the others with their summaries only,
            so that a command imports what its own options need and nothing for the
            others'; None: every command's options.
    """
    top = Parser(
        prog=PROG,
        description="Realtime pose estimation with sleap-nn models.",
        epilog=(
            "examples:\n"
            f"  {PROG} run VIDEO -m MODEL_DIR -o poses.slp\n"
            f"  {PROG} --camera 0 -m MODEL_DIR -o session.slp   (`run` may be left out)\n"
            f"  {PROG} replay VIDEO --fps 30 -m MODEL_DIR\n"
            f"  {PROG} cameras   (the cameras and their modes)\n"
            f"  {PROG} export MODEL_DIR -o exported/\n"
            f"  {PROG} bench VIDEO -m MODEL_DIR\n"
            f"  {PROG} recover session.slp   (after a kill: the .slp from its journal)\n"
            f"  {PROG} check-tensorrt exported/model.onnx\n"
            f"  {PROG} render poses.slp -o overlay.mp4\n"
            f"  {PROG} track poses.slp -o tracked.slp   (sleap-nn's tracker on saved poses)\n"
            f"  {PROG} experiment check exp.yaml -m MODEL_DIR   (a closed-loop experiment)\n"
            f"\n`{PROG} COMMAND -h` lists a command's options."
        ),
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    built: set[str] = set()
    for name in COMMANDS:
        module = _module(name)
        if command is not None and module != _module(command):
            commands.add_parser(name, help=SUMMARIES[name])
        elif module not in built:
            importlib.import_module(f"sleap_live.cli.{module}").add_parser(commands)
            built.add(module)
    return top


class _Interrupts:
    """The stopping signals (`STOP_SIGNALS`) for one command: the first stops it, the
    second says what is still being done, the third leaves at once (`ForcedExit`).

    Attributes:
        first: the first signal received, or None.
    """

    def __init__(self) -> None:
        self.first: int | None = None
        self._count = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        try:
            yield
        finally:
            # After a signal stopped the command, the process is on its way out with
            # that signal's status and its outputs saved. Interpreter shutdown puts
            # back the default action of any signal with a Python handler, which would
            # turn one more signal into a death by it; an ignored signal stays ignored.
            late = previous if self.first is None else dict.fromkeys(STOP_SIGNALS, signal.SIG_IGN)
            for signum, handler in late.items():
                signal.signal(signum, handler)

    @property
    def status(self) -> int:
        """The exit status the first signal calls for."""
        return EXIT_INTERRUPTED if self.first is None else 128 + self.first

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._count += 1
        if self._count == 1:
            self.first = signum
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
        if self._count == 2:
            print(
                f"{PROG}: still finishing the frames in flight and saving the outputs; "
                "interrupt once more to exit at once: the frames saved so far stay in the "
                f"journal beside each pose output (FILE.journal), and `{PROG} recover "
                "FILE` writes them to FILE",
                file=sys.stderr,
                flush=True,
            )
            return
        raise ForcedExit()


def _hdf5_objects_open() -> bool:
    if "h5py" not in sys.modules:
        return False
    from sleap_live.stream.outputs.recovery import hdf5_objects_open

    return hdf5_objects_open() > 0


def _one_line(error: BaseException) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())
