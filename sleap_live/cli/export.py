"""`sleap-live export`: one or two sleap-nn model directories to one verified model file.

The export itself is `sleap_live.engines.export_model`; this module parses the
command line, shows progress, and prints what the export's sidecar metadata
records: the model type and, unless --no-verify, the largest difference from the
torch module per output on each checked frame batch.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from sleap_live.cli.options import UsageError, add_verify_options, positive_int, verify_options

SUMMARY = "export model directories to one ONNX or TorchScript file, verified against torch"
# The exporter's formats and default opset, written here so that building the
# parser does not import torch; tests/stream/test_cli.py checks them against
# `export_model`.
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}
DEFAULT_OPSET = 17


def add_parser(commands: Any) -> None:
    """Adds `export` to the subcommands of the top-level parser."""
    parser = commands.add_parser(
        "export",
        help=SUMMARY,
        description="Export one sleap-nn model directory, or a centroid and a "
        "centered-instance directory (top-down), to one self-contained graph: uint8 "
        "frames in, peaks or instances out. Unless --no-verify, the export is compared "
        "with the torch module on frames that show animals, at two sizes, and fails if "
        "they disagree.",
    )
    parser.add_argument(
        "model_dirs",
        nargs="+",
        metavar="MODEL_DIR",
        help="model directory; give a centroid and a centered-instance directory for top-down",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="output file, or a directory to write model.onnx / model.pt into "
        "(default: FIRST_MODEL_DIR/sleap_live.onnx, or .pt for torchscript)",
    )
    parser.add_argument(
        "-f", "--format", choices=tuple(SUFFIXES), default="onnx", help="what to export to"
    )
    parser.add_argument(
        "--opset", type=positive_int, default=DEFAULT_OPSET, help="ONNX opset version"
    )
    add_verify_options(
        parser,
        frames_default="frames of the model directories' training labels, else synthetic frames",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Exports, then prints the model type and the verification table (stderr)."""
    if len(args.model_dirs) > 2:
        raise UsageError("give one model directory, or two for a top-down model")
    verify = verify_options(args)
    # Imported here: the exporter loads torch, which --help and the other commands
    # do not need.
    from sleap_live.engines import export_model
    from sleap_live.engines.export import TOLERANCE
    from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path

    output = args.output or Path(args.model_dirs[0]) / f"sleap_live{SUFFIXES[args.format]}"
    with console.status("exporting") as status:
        path = export_model(
            args.model_dirs,
            output,
            format=args.format,
            opset=args.opset,
            progress=status.update,
            **verify,
        )
    metadata = ExportMetadata.from_json(sidecar_path(path).read_text(), str(path))
    console.print(
        f"exported [bold]{metadata.info.model_type}[/bold] model to {escape(str(path))}",
        soft_wrap=True,
    )
    if metadata.verification:
        print_wide(console, verification_table(metadata.verification, TOLERANCE))
    return 0


def verification_table(checks: Sequence[Mapping[str, Any]], tolerance: float) -> Table:
    """One row per output, one column per checked frame batch.

    Outputs are the long list (up to seven names), batches the short one, so the
    table grows downwards rather than past the terminal's width.
    """
    source = checks[0].get("frame_source")
    table = Table(
        title=f"largest difference from torch (tolerance {tolerance:g})",
        caption=None if source is None else f"frames: {source}",
    )
    table.add_column("output")
    for check in checks:
        shape = "×".join(str(n) for n in check["frames"])
        found = "" if check["instances"] is None else f"\n{check['instances']} instances"
        table.add_column(f"{shape}{found}", justify="right")
    for name in checks[0]["max_abs_diff"]:
        table.add_row(name, *(f"{check['max_abs_diff'][name]:.2g}" for check in checks))
    return table


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
