"""`sleap-live export`: one or two sleap-nn model directories to one verified model file.

The export itself is `sleap_live.engines.export_model`; this module parses the
command line, shows progress, and prints what the export's sidecar metadata
records: the model type and, unless --no-verify, the largest difference from the
torch module per output on each checked frame batch.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from sleap_live.cli.options import (
    PROG,
    UsageError,
    add_command,
    add_inference_options,
    add_output_option,
    add_overwrite_option,
    add_verify_options,
    inference_settings,
    positive_int,
    say,
)
from sleap_live.engines.export import DEFAULT_OPSET, EXPORT_FORMATS
from sleap_live.engines.export.formats import FORMAT_NOTE, FORMAT_TABLE, FORMATS
from sleap_live.engines.load.metadata import DEFAULT_PROFILE, PROFILES

# The default output's ending per format (a folder's: tensorrt, web, saved_model, tfjs).
ENDINGS = {row.argument: row.ending for row in FORMAT_TABLE}


def add_parser(commands: Any) -> None:
    """Adds `export` to the subcommands of the top-level parser."""
    parser = add_command(
        commands,
        "export",
        handle,
        description="Export one sleap-nn model directory, or a centroid and a "
        "centered-instance directory (top-down), to one self-contained graph: uint8 "
        "frames in, peaks or instances out. Unless --no-verify, the export is compared "
        "with the torch module on frames that show animals, at two sizes, and fails if "
        "they disagree.",
        epilog="formats (--format):\n" + format_table() + "\n\n" + FORMAT_NOTE + " A format "
        "refuses, in one line, a model type it cannot hold. More: the documentation's "
        "Model formats page.",
    )
    parser.add_argument(
        "model_dirs",
        nargs="+",
        metavar="MODEL_DIR",
        help="model directory; give a centroid and a centered-instance directory for top-down",
    )
    add_output_option(
        parser,
        None,
        "output file, or a directory to write model.onnx / model.pt into "
        "(default: NAME.onnx in the working directory, NAME being the model directories' "
        "names joined by '+'; .pt for torchscript, .xml for openvino); for tensorrt, "
        "saved_model, tfjs and web, a directory (default: NAME_tensorrt, NAME_saved_model, "
        "NAME_tfjs, NAME_web in the working directory)",
    )
    parser.add_argument(
        "-f", "--format", choices=EXPORT_FORMATS, default="onnx", help="what to export to"
    )
    parser.add_argument(
        "--opset", type=positive_int, default=DEFAULT_OPSET, help="ONNX opset version"
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=DEFAULT_PROFILE,
        help="default: any frame size, instance lists; tensorrt (ONNX only): what TensorRT "
        "takes as it is (float32 inside, the verification frames' size, fixed instance slots)",
    )
    add_verify_options(
        parser,
        frames_default="frames of the model directories' training labels, else synthetic frames",
    )
    add_inference_options(parser)
    engine = parser.add_argument_group(
        "tensorrt",
        "--format tensorrt writes model.onnx into the output directory and builds its engine "
        "beside it on this machine's GPU; engines for other GPUs can be added to the same "
        "directory by exporting there again on them.",
    )
    engine.add_argument(
        "--frame-size",
        type=frame_size,
        action="append",
        metavar="HxW",
        help="frame size the engine (pt2, tflite, coreml, saved_model, tfjs: the program) runs "
        "at (default: that of --verify-video's frames); web: a frame size the page runs, "
        "repeatable (default: 480x640, 720x1280 and that of --verify-video's frames)",
    )
    engine.add_argument(
        "--batch-size", type=positive_int, default=8, metavar="N", help="largest batch"
    )
    engine.add_argument(
        "--precision",
        choices=("fp32", "fp16"),
        default="fp32",
        help="engine precision (fp16 needs a graph with its own float16 casts)",
    )
    engine.add_argument("--device", default="cuda:0", help="the GPU to build on")
    add_overwrite_option(parser, "the export")


FORMAT_COLUMNS = ("format", "writes", "CPU", "GPU", "graph", "verified against")


def format_table() -> str:
    """The formats as a table of plain text: one row per format, the columns aligned."""
    rows = [FORMAT_COLUMNS, *_format_rows()]
    widths = [max(len(row[index]) for row in rows) for index in range(len(FORMAT_COLUMNS) - 1)]
    lines = []
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


def format_table_markdown() -> str:
    """The same table in Markdown, as docs/export-formats.md holds it."""
    lines = ["| " + " | ".join(FORMAT_COLUMNS) + " |", "|" + "---|" * len(FORMAT_COLUMNS)]
    for row in _format_rows():
        lines.append("| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |")
    return "\n".join(lines)


def _format_rows() -> list[tuple[str, ...]]:
    return [
        (row.argument, row.writes, row.cpu, row.gpu, row.inside, row.verified)
        for row in FORMAT_TABLE
    ]


def handle(args: argparse.Namespace, console: Console) -> int:
    """Exports, then prints the model type and the verification table (stderr)."""
    from sleap_live.cli.loading import verify_options

    if len(args.model_dirs) > 3:
        raise UsageError(
            "give one model directory, two for a top-down model, or three for a top-down "
            "model with an embedding model"
        )
    # How the export is verified, and the inference settings built into it.
    options: dict[str, Any] = {**verify_options(args), "settings": inference_settings(args)}
    # Imported here: the exporter loads torch, which --help and the other commands
    # do not need.
    from sleap_live.engines import export_model

    sizes = args.frame_size or []
    if args.format == "tensorrt":
        if len(sizes) > 1:
            raise UsageError("--format tensorrt builds one frame size: give --frame-size once")
        frames = options.get("verify_frames")
        frame = sizes[0] if sizes else (None if frames is None else frames.shape[1:])
        if frame is None:
            raise UsageError("--format tensorrt needs --frame-size HxW (or --verify-video VIDEO)")
        options.update(
            frame_size=tuple(frame),
            batch_size=args.batch_size,
            precision=args.precision,
            device=args.device,
            notify=lambda line: console.print(escape(line), soft_wrap=True),
        )
    elif FORMATS[args.format].frame_sizes == "many":
        options["frame_sizes"] = sizes
    elif FORMATS[args.format].frame_sizes == "one":
        if len(sizes) > 1:
            raise UsageError(f"--format {args.format} holds one frame size: give --frame-size once")
        options["frame_size"] = sizes[0] if sizes else None
    else:  # a graph of any size: the profile says which
        options["profile"] = args.profile
    output = args.output or default_output(args.model_dirs, ENDINGS[args.format])
    with console.status("exporting") as status:
        path = export_model(
            args.model_dirs,
            output,
            format=args.format,
            opset=args.opset,
            progress=status.update,
            overwrite=args.overwrite,
            **options,
        )
    metadata = _metadata(path, args.format)
    console.print(
        f"exported [bold]{metadata.info.model_type}[/bold] model to {escape(str(path))}",
        soft_wrap=True,
    )
    if metadata.verification:
        print_wide(console, verification_table(metadata.verification))
    if args.format == "coreml":
        from sleap_live.engines.export.coreml import PREDICTION_NOT_RUN

        console.print(
            f"checked: coremltools' conversion checks and the package's input and outputs; "
            f"prediction {PREDICTION_NOT_RUN}",
            soft_wrap=True,
        )
    if args.format == "web":
        say(console, web_sizes(path))
        console.print(f"open it in a browser: {PROG} serve-web {escape(str(path))}", soft_wrap=True)
    return 0


def web_sizes(folder: Path) -> str:
    """One line: the frame sizes a web export's page runs (its `model.json`), and how
    to export another (the page refuses a frame of a size it holds no graph for)."""
    sizes = json.loads((folder / "model.json").read_text())["graphs"]
    return (
        f"the page runs frames of {', '.join(sizes)} (height x width); a video or camera of "
        "another size needs an export with --frame-size HxW, or --verify-video VIDEO for "
        "that video's size"
    )


def _metadata(path: Path, format: str) -> Any:
    """The metadata of the export at `path`: its sidecar's, or a TensorRT engine's header."""
    if format == "tensorrt":
        from sleap_live.engines.export.tensorrt import read_engine_file

        return read_engine_file(path).metadata
    if format == "web":
        from sleap_live.engines.export.web import MODEL_FILE

        path = path / MODEL_FILE
    if format in ("saved_model", "tfjs"):
        from sleap_live.engines.export.saved_model import read_saved_model_metadata

        return read_saved_model_metadata(path)
    from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path

    return ExportMetadata.from_json(sidecar_path(path).read_text(), str(path))


def default_output(model_dirs: list[str], ending: str) -> Path:
    """Where an export goes without -o: the working directory, never a model directory
    (a model folder is an input, and may be read-only or shared)."""
    name = "+".join(Path(model_dir).resolve().name for model_dir in model_dirs)
    return Path.cwd() / f"{name}{ending}"


def frame_size(text: str) -> tuple[int, int]:
    """argparse type: "HEIGHTxWIDTH", both at least 1."""
    height, _, width = text.lower().partition("x")
    try:
        size = (int(height), int(width))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HEIGHTxWIDTH, got {text!r}") from None
    if min(size) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1, got {text!r}")
    return size


def verification_table(checks: Sequence[Mapping[str, Any]]) -> Table:
    """One row per output, one column per checked frame batch, and a last row with
    each batch's outcome (float noise, or the near-ties it passed); the caption says
    the float32 bound the comparison used (`engines.host.agreement`).

    Outputs are the long list (up to seven names), batches the short one, so the
    table grows downwards rather than past the terminal's width.
    """
    source = checks[0].get("frame_source")
    against = checks[0].get("against", "torch")
    notes = [f"bound: {checks[0]['bound']}"] if "bound" in checks[0] else []
    notes += [] if source is None else [f"frames: {source}"]
    table = Table(
        title=f"largest difference from {against}",
        caption="\n".join(notes) or None,
    )
    table.add_column("output")
    for check in checks:
        shape = "×".join(str(n) for n in check["frames"])
        found = "" if check["instances"] is None else f"\n{check['instances']} instances"
        table.add_column(f"{shape}{found}", justify="right")
    for name in checks[0]["max_abs_diff"]:
        table.add_row(
            name, *(f"{check['max_abs_diff'].get(name, float('nan')):.2g}" for check in checks)
        )
    if "agreement" in checks[0]:
        table.add_row("outcome", *(_outcome(check) for check in checks))
    return table


def _outcome(check: Mapping[str, Any]) -> str:
    ties = check.get("ties", 0)
    return f"{ties} near-tie{'s' if ties != 1 else ''}" if ties else str(check["agreement"])


def print_wide(console: Console, table: Table) -> None:
    """Prints `table` at its natural width, even past the console's (never cut).

    rich fits everything to the console's width, squeezing columns down to "…";
    widened for this one table, the console prints it whole, and a narrow terminal
    wraps its lines instead.
    """
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    width = console.width
    console.width = max(width, natural)
    try:
        console.print(table)
    finally:
        console.width = width
