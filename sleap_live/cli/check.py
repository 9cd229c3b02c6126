"""`sleap-live check-tensorrt`: what TensorRT's ONNX importer would refuse or change in a graph.

The lint itself is `sleap_live.engines.export.check_tensorrt`; this module prints
its findings, one line each, and exits like a linter: 0 clean, 1 findings, 2 when
the file is missing or is not an ONNX model.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli.options import PROG, add_command, fail


def add_parser(commands: Any) -> None:
    """Adds `check-tensorrt` to the subcommands of the top-level parser."""
    parser = add_command(
        commands,
        "check-tensorrt",
        handle,
        description="Read an ONNX graph and report, node by node, what TensorRT 10's ONNX "
        "importer refuses or silently changes: element types it does not take inside a "
        "network (uint8, float64, bool where an op excludes it), unsupported operators, "
        "data-dependent shapes, TopK limits. One line per finding (node, op, reason, the "
        "rule's source). Exit status: 0 clean, 1 findings, 2 the file is missing or not ONNX.",
    )
    parser.add_argument("model", type=Path, metavar="MODEL.onnx", help="the ONNX graph to check")


def handle(args: argparse.Namespace, console: Console) -> int:
    """Prints the findings (stdout) and returns the lint's exit status."""
    del console
    from sleap_live.engines.errors import ModelNotFoundError
    from sleap_live.engines.export.check_tensorrt import (
        EXIT_UNREADABLE,
        UnreadableGraphError,
        check_tensorrt,
        exit_code,
        format_findings,
    )

    try:
        findings = check_tensorrt(args.model)
    except (ModelNotFoundError, UnreadableGraphError) as error:
        return fail(str(error), EXIT_UNREADABLE)
    print(format_findings(findings))
    if findings:
        # After the findings, on stderr: stdout stays one finding a line.
        print(f"{len(findings)} findings. {next_step(args.model)}", file=sys.stderr)
    return exit_code(findings)


def next_step(model: Path) -> str:
    """What to do about findings in `model`: for a sleap-live export of the default
    profile, the `export` command that makes the graph TensorRT takes as it is."""
    from sleap_live.engines.errors import EngineError
    from sleap_live.engines.load.metadata import TENSORRT_PROFILE, read_onnx_metadata
    from sleap_live.engines.settings import SLOTTED_TYPES

    try:
        metadata = read_onnx_metadata(model)
    except EngineError:
        return (
            "Not a sleap-live export: export the model with "
            f"`{PROG} export MODEL_DIR --profile tensorrt` for a graph TensorRT takes as it is."
        )
    if metadata.profile == TENSORRT_PROFILE:
        return (
            "This graph was exported with --profile tensorrt, which should lint clean: "
            "please report it with the sleap-live version and the model type."
        )
    dirs = " ".join(shlex.quote(str(source["path"])) for source in metadata.sources)
    command = f"{PROG} export {dirs or 'MODEL_DIR'} --profile tensorrt"
    info = metadata.info
    slots = ""
    if info.model_type in SLOTTED_TYPES:
        command += f" --max-instances {info.max_instances or 'N'}"
        if info.max_instances is None:
            slots = (
                " (N: the most animals a frame can hold; the graph has that many instance "
                "slots per frame)"
            )
    output = shlex.quote(str(model.with_name(f"{model.stem}.tensorrt.onnx")))
    return (
        "This is a default-profile export; TensorRT takes a graph exported for it as it "
        f"is, built at your videos' frame size: `{command} --verify-video VIDEO "
        f"-o {output}`{slots}."
    )
