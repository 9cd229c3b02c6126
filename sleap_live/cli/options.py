"""What every `sleap-live` subcommand shares: the parser, its help layout, options, types.

The model options (`-m`, `--engine`, `--device`, `--batch-size`), the
verification options (`--verify-video`, `--no-verify`), the export cache
options (`--no-cache`, `--cache-dir`) and the inference settings
(`--peak-threshold`, `--max-instances`, ...) are defined here once and
added to each subcommand they apply to, so they are spelled, checked and
documented the same way everywhere.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
from rich.console import Console

from sleap_live.engines.engine_table import CLI_PRECISIONS, ENGINES, engines_taking
from sleap_live.engines.settings import (
    DEFAULT_SETTINGS,
    LEGACY_POSTPROCESSES,
    InferenceSettings,
)

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

PROG = "sleap-live"
# What the verification options mean to commands other than `export`.
IN_MEMORY_EXPORT = (
    "A model directory that runs with ONNX Runtime is exported in memory first and "
    "checked against torch on frames that show animals."
)
# Upper bounds of the numeric options: far beyond any real use, and below what
# breaks (a timer past `threading.TIMEOUT_MAX`, a batch no memory holds).
MAX_BATCH_SIZE = 1024
MAX_SECONDS = 365 * 24 * 3600
MAX_FPS = 10_000


# Each command's one-line summary: what the top-level `-h` lists.
SUMMARIES = {
    "run": "run a model on a video file, or on a camera with --camera",
    "replay": "replay a video file at its frame rate, as if it were a camera",
    "cameras": "list the cameras of this machine and their modes (pixel formats, sizes, rates)",
    "export": "export model directories to ONNX, TorchScript, torch.export, OpenVINO, TensorRT, "
    "TFLite, Core ML, TensorFlow SavedModel, TF.js or a web page, verified",
    "bench": "measure what the pipeline costs on top of the engine, on this machine",
    "check-tensorrt": "list what TensorRT's ONNX importer would refuse or silently change in "
    "a graph",
    "recover": "write the pose file of a run that was killed before it could, from its journal",
    "render": "draw the poses of a .slp on its video and write the result as a new video",
    "track": "track the poses of a pose file again (sleap-nn's tracker) and write a new file",
    "serve-web": "serve a web export (export --format web) on 127.0.0.1, to open in a browser",
    "experiment": "check an experiment file against a model's skeleton (one line per mistake)",
}
# What runs a command: its parsed arguments and the console, to the exit status.
Handler = Callable[[argparse.Namespace, Console], int]


class UsageError(Exception):
    """The command line is wrong; exits with status 2."""


class HelpFormatter(argparse.HelpFormatter):
    """Wraps prose, keeps laid-out text (examples) as written, shows every option's default.

    A paragraph of a description or epilog that holds a line break was laid out
    by hand and is printed as it is; any other is wrapped to the terminal.

    Help texts that already say "(default: ...)" are left alone, so an option whose
    default is not a plain value (None meaning "the video's rate") says in words
    what it is; any other default is appended as argparse's
    `ArgumentDefaultsHelpFormatter` would. Required options have no default.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.split("\n\n"):
            if "\n" not in paragraph:  # prose: wrap it
                paragraph = super()._fill_text(paragraph, width, indent)
            paragraphs.append(paragraph)
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        says_default = "(default" in text
        has_default = action.default not in (None, argparse.SUPPRESS)
        if says_default or not has_default or not action.option_strings or action.required:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors become one line, not usage plus message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def add_command(
    commands: Any,
    name: str,
    handler: Handler,
    *,
    description: str,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """Adds command `name` (its summary from `SUMMARIES`) to the top-level parser's
    subcommands; `handler` runs it. Returns the command's parser, to add its options."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=SUMMARIES[name], description=description, epilog=epilog
    )
    parser.set_defaults(handler=handler)
    return parser


def fail(message: str, status: int) -> int:
    """Says `message` as the command line's one-line error, on stderr; returns `status`."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def say(console: Console, text: str) -> None:
    """Prints `text` as it is: no markup, no highlighting, never wrapped (a line holds
    paths and messages, which may hold brackets and run past the terminal's width)."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def add_model_options(
    parser: argparse.ArgumentParser, *, batch_size: int | None, batch_size_help: str
) -> None:
    """`-m/--model` (once, or twice for top-down), `--engine`, `--device`, `--batch-size`.

    Args:
        batch_size: the default of `--batch-size` (None: the pipeline's, per policy).
        batch_size_help: its help text, saying the default where it is None.
    """
    from sleap_live.engines.runners.compile_modes import COMPILE_MODES
    from sleap_live.engines.runners.devices import DEVICE_FORMS

    model = parser.add_argument_group("model")
    add_model_argument(
        model,
        "model directory, sleap-live .onnx/.pt export or sleap-nn export directory; "
        "give -m twice for top-down (centroid + centered instance)",
    )
    model.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="torch, onnx (ONNX Runtime), openvino (OpenVINO on the CPU), tensorrt (a CUDA "
        "GPU), torch-compile (torch.compile with inductor, CUDA graphs on a GPU; compiles "
        "each batch shape once, a minute or so on a CPU, then keeps it in the cache), or "
        "auto: ONNX Runtime wherever it can run, else torch; on the CPU, OpenVINO "
        "instead where it is installed and measured faster (once per model and machine, on "
        "the verification frames; the choice is printed)",
    )
    model.add_argument(
        "--precision",
        choices=CLI_PRECISIONS,
        help="fp32; bf16 with --engine openvino on CPUs that have it; int8 with --engine onnx "
        "or auto on the CPU: the networks quantised by ONNX Runtime (pre/postprocessing stay "
        "fp32), calibrated on the verification frames (else the training labels' frames) and "
        "cached. The reduced precisions print their error against fp32 on those frames at "
        "load, int8 its speed-up too; int8 slower than fp32 or with its median point more "
        "than 0.1 px from fp32's runs fp32 instead, saying so (default: fp32)",
    )
    model.add_argument(
        "--keep-int8",
        action="store_true",
        help="--precision int8: run int8 even where its check at load finds it slower than "
        "fp32 or further off than 0.1 px",
    )
    model.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        help="--engine torch-compile: the torch.compile mode (default: reduce-overhead, "
        "inductor's kernels replayed as CUDA graphs, on a GPU; default on the CPU)",
    )
    model.add_argument("--device", type=device, default="auto", help=DEVICE_FORMS)
    model.add_argument(
        "--batch-size",
        type=bounded_batch_size,
        default=batch_size,
        metavar="N",
        help=batch_size_help,
    )


def add_model_argument(parser: Any, help: str) -> None:
    """`-m/--model MODEL`, required and repeated for a top-down pair and its embedding
    model (`args.models`).

    Args:
        parser: the subcommand's parser, or a group of it.
        help: what MODEL may be, for this command.
    """
    parser.add_argument(
        "-m",
        "--model",
        dest="models",
        action="append",
        required=True,
        metavar="MODEL",
        help=help,
    )


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """`load_runner`'s engine options from `add_model_options`' (only those given).

    Raises:
        UsageError: --precision with an engine that does not take it (bf16: openvino;
            int8: onnx or auto; fp32: those three), --keep-int8 without --precision
            int8, --compile-mode without --engine torch-compile.
    """
    options: dict[str, Any] = {}
    if args.precision is not None:
        engines = engines_taking(args.precision)
        if args.engine not in engines:
            raise UsageError(
                f"--precision {args.precision} is an option of --engine {' or '.join(engines)}"
            )
        options["precision"] = args.precision
    if args.keep_int8:
        if args.precision != "int8":
            raise UsageError("--keep-int8 is an option of --precision int8")
        options["keep_int8"] = True
    if args.compile_mode is not None:
        if args.engine != "torch-compile":
            raise UsageError("--compile-mode is an option of --engine torch-compile")
        options["compile_mode"] = args.compile_mode
    return options


INFERENCE_SETTINGS_HELP = (
    "sleap-nn predict's options of the same names (with - for _), and its defaults. A model "
    "directory is built with them. An exported model runs with the settings it was exported "
    "with when none is given; when one is, every one not given takes its default, and a "
    "setting built into the graph that differs from the export's is refused (re-export the "
    "model): only --min-line-scores, --min-instance-peaks and a bottom-up model's "
    "--max-instances are applied at run time."
)


def add_inference_options(parser: argparse.ArgumentParser) -> None:
    """The inference settings (`InferenceSettings`), each flag named after its field."""
    group = parser.add_argument_group("inference settings", INFERENCE_SETTINGS_HELP)
    default = DEFAULT_SETTINGS

    def add(name: str, parse: Callable[[str], Any], metavar: str, help: str) -> None:
        group.add_argument(flag(name), type=_setting(name, parse), metavar=metavar, help=help)

    add(
        "peak_threshold",
        float,
        "X",
        f"confidence map peaks must be above this, 0 to 1 (default: {default.peak_threshold})",
    )
    add(
        "centroid_peak_threshold",
        float,
        "X",
        "top-down: the centroid stage's threshold (default: --peak-threshold)",
    )
    add(
        "max_instances",
        int,
        "N",
        "most instances per frame: a top-down model's highest centroids, a bottom-up model's "
        "best scoring instances (default: every instance found; a top-down model run with "
        "TensorRT needs N, its fixed number of instance slots per frame)",
    )
    group.add_argument(
        "--integral-refinement",
        choices=("integral", "none"),
        help="sub-pixel refinement of peaks (default: integral)",
    )
    group.add_argument(
        "--legacy-postprocess",
        choices=LEGACY_POSTPROCESSES,
        help="SLEAP 1.x models: peaks as SLEAP 1.x found them (its offset-refinement head "
        "where the model has one) or as sleap-nn predict does (integral refinement) "
        f"(default: {default.legacy_postprocess})",
    )
    add(
        "integral_patch_size",
        int,
        "N",
        f"side of the refinement window, odd (default: {default.integral_patch_size})",
    )
    add(
        "max_edge_length_ratio",
        float,
        "X",
        "bottom-up: PAF lines longer than this fraction of the larger image side are "
        f"penalised (default: {default.max_edge_length_ratio})",
    )
    add(
        "dist_penalty_weight",
        float,
        "X",
        f"bottom-up: weight of that penalty (default: {default.dist_penalty_weight})",
    )
    add(
        "n_points",
        int,
        "N",
        f"bottom-up: samples along each candidate PAF line (default: {default.n_points})",
    )
    add(
        "min_instance_peaks",
        _count_or_fraction,
        "N|F",
        "bottom-up: drop instances with fewer peaks; a whole number is a count, a decimal "
        "(0.5) a fraction of the nodes (sleap-nn predict reads every value as a fraction) "
        f"(default: {default.min_instance_peaks})",
    )
    add(
        "min_line_scores",
        float,
        "X",
        f"bottom-up: drop matched PAF lines scoring below this (default: "
        f"{default.min_line_scores})",
    )


def _count_or_fraction(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _setting(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse type: `parse`, then checked as `InferenceSettings` checks field `name`."""

    def checked(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        try:
            InferenceSettings(**{name: value})
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    return checked


def inference_settings(args: argparse.Namespace) -> InferenceSettings | None:
    """The settings of `add_inference_options`' flags; None when none was given (or the
    command has none): a model directory then gets the defaults, an export its own."""
    given = {
        field: getattr(args, field)
        for field in attrs.fields_dict(InferenceSettings)
        if getattr(args, field, None) is not None
    }
    if not given:
        return None
    if "integral_refinement" in given:
        given["integral_refinement"] = given["integral_refinement"] == "integral"
    return InferenceSettings(**given)


def add_decoder_option(parser: argparse.ArgumentParser) -> None:
    """`--decoder`: what decodes a video file (PyAV on the CPU, or NVDEC on the GPU)."""
    from sleap_live.stream.sources import DECODERS

    parser.add_argument(
        "--decoder",
        choices=DECODERS,
        default="pyav",
        help="pyav (FFmpeg on the CPU), nvdec (NVDEC on the GPU via PyNvVideoCodec, frames "
        "kept on the device), or auto: NVDEC where it decodes the video exactly, else PyAV; "
        "a one-line notice says why NVDEC was not used",
    )


def add_verify_options(
    parser: argparse.ArgumentParser, *, frames_default: str, description: str | None = None
) -> None:
    """`--verify-video VIDEO` or `--no-verify`: how an export is checked against torch.

    `sleap-live export` always exports; the other commands export a model directory
    in memory when it runs with ONNX Runtime, and check it the same way.

    Args:
        frames_default: what the check runs on without --verify-video, in words.
        description: shown under the group's title.
    """
    group = parser.add_argument_group("verification", description)
    check = group.add_mutually_exclusive_group()
    check.add_argument(
        "--verify-video",
        type=Path,
        metavar="VIDEO",
        help="verify on frames of this video in which the model finds animals, searched "
        f"for over its whole length (default: {frames_default})",
    )
    check.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip the numerical comparison with the torch module (default: compare)",
    )


def add_cache_options(parser: argparse.ArgumentParser) -> None:
    """`--no-cache` or `--cache-dir DIR`: where a model directory's ONNX export is kept."""
    group = parser.add_argument_group(
        "export cache",
        "A model directory's ONNX export is cached, keyed by its config and checkpoint, "
        "sleap-live's version and the export options, so only its first run exports it; "
        "later runs start from the cached graph (verified when it was made, on that run's "
        "frames).",
    )
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="export in memory and neither read nor write the cache (default: use it)",
    )
    where.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="sleap-live's cache directory, exports in DIR/onnx (default: "
        "$SLEAP_LIVE_CACHE_DIR, else the user cache directory: ~/.cache/sleap-live on Linux)",
    )


def check_models(args: argparse.Namespace) -> None:
    """Raises `UsageError` unless -m was given once, twice (top-down) or three times
    (top-down with an embedding model)."""
    if len(args.models) > 3:
        raise UsageError(
            "give -m once, twice for a top-down model, or three times for a top-down "
            "model with an embedding model"
        )


def check_preview_options(args: argparse.Namespace) -> None:
    """Raises `UsageError` for `run`'s --preview-port, --preview-host or --preview-hold
    without --preview (never silently ignored)."""
    preview_options = (args.preview_port, args.preview_host, args.preview_hold)
    if not args.preview and any(option is not None for option in preview_options):
        raise UsageError("--preview-port, --preview-host and --preview-hold apply with --preview")


def run_provenance(args: argparse.Namespace) -> dict[str, Any]:
    """What a run's outputs record of the command: the models (`model_records`), the
    command, and its options as JSON values."""
    from sleap_live.stream.outputs.provenance import model_records

    options: dict[str, Any] = {}
    for name, value in vars(args).items():
        if name in ("handler", "command"):
            continue
        if isinstance(value, Path):
            value = os.fspath(value)
        elif isinstance(value, list):
            value = [os.fspath(item) if isinstance(item, Path) else item for item in value]
        options[name] = value
    return {"models": model_records(args.models), "command": args.command, "options": options}


def add_output_option(parser: Any, metavar: str | None, help: str) -> None:
    """``-o/--output PATH``: where a command writes; `help` says its default."""
    parser.add_argument("-o", "--output", type=Path, metavar=metavar, help=help)


def add_experiment_option(parser: Any, help: str) -> None:
    """``--experiment FILE``: a closed-loop experiment (docs/closed-loop.md) to run or draw."""
    parser.add_argument("--experiment", type=Path, metavar="FILE", help=help)


def progress_bar(console: Console, *columns: ProgressColumn) -> Progress:
    """A progress bar on a terminal, gone when it ends (nothing in a log or a pipe): the
    task's description, the bar, done of total, then `columns`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *columns,
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def add_overwrite_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--overwrite``: the flag every command that writes takes (`output_rule.claim_output`)."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace {what} if it exists, once the new one is written (default: refuse "
        "an existing output before any work)",
    )


def flag(dest: str) -> str:
    """The option of an argparse destination: ``--max-tracks`` for ``max_tracks``."""
    return f"--{dest.replace('_', '-')}"


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """argparse type: a whole number from `minimum` to `maximum` (None: no upper bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return parse


positive_int = whole_number(1)
count = whole_number(0)
# Frames per engine call. Whether the frames in flight fit in memory is checked once
# the frame size is known (`sleap_live.stream.memory.check_batch_memory`).
bounded_batch_size = whole_number(1, MAX_BATCH_SIZE)
bit_depth = whole_number(8, 16)  # bits per sample a video's data uses


def video_or_url(text: str) -> Path | str:
    """argparse type: a video file's path, or a stream URL kept as written (as a path
    its ``//`` would fold to ``/``)."""
    from sleap_live.stream.sources import is_url

    try:
        return text if is_url(text) else Path(text)
    except ValueError as error:  # a URL of a scheme that is not a stream
        raise argparse.ArgumentTypeError(str(error)) from None


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """argparse type: a duration or interval in seconds, above 0 and at most a year."""
    return _at_most(positive_float(text), MAX_SECONDS, "seconds (a year)")


def frame_rate(text: str) -> float:
    """argparse type: frames per second, above 0 and at most `MAX_FPS`."""
    return _at_most(positive_float(text), MAX_FPS, "frames per second")


def _at_most(value: float, maximum: float, unit: str) -> float:
    if value > maximum:
        raise argparse.ArgumentTypeError(f"must be at most {maximum:g} {unit}, got {value:g}")
    return value


def device(text: str) -> str:
    """argparse type: where the model runs, one of `DEVICE_FORMS`."""
    from sleap_live.engines.runners.devices import DEVICE_FORMS, is_device

    if not is_device(text):
        raise argparse.ArgumentTypeError(f"expected {DEVICE_FORMS}, got {text!r}")
    return text
