"""`sleap-live experiment check`: an experiment file checked against a model's skeleton.

Every mistake is one line on stdout (the file, where in it, what is wrong), like a
linter: exit 0 when the file is sound, 1 when it has mistakes or cannot be read, 2
when the model cannot be read. The model is only read (its skeleton and
identities), never run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from sleap_live.cli.options import PROG, add_command, add_model_argument, fail

if TYPE_CHECKING:
    from sleap_live.engines.types import Skeleton

EXIT_OK, EXIT_MISTAKES, EXIT_MODEL = 0, 1, 2


def add_parser(commands: Any) -> None:
    """Adds `experiment` (with `check`) to the subcommands of the top-level parser."""
    parser = add_command(
        commands,
        "experiment",
        handle,
        description="Closed-loop experiments (docs/closed-loop.md): rules on tracked poses "
        f"declared in a YAML file, run with `{PROG} run ... --experiment FILE`.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="check FILE against a model's skeleton and identities",
        description="Read an experiment file and check it against a model: its shape, its "
        "regions and devices, every node against the skeleton and every animal against the "
        "model's identities (or tracks, track_0, track_1, ..., with --tracking). One line per "
        "mistake on stdout. Exit status: 0 sound, 1 mistakes or an unreadable file, 2 the "
        "model cannot be read.",
    )
    check.add_argument("file", type=Path, metavar="FILE", help="the experiment (YAML)")
    add_model_argument(
        check,
        "model directory, export folder or .onnx the experiment will run with; repeat for "
        "a top-down pair",
    )
    check.add_argument(
        "--tracking",
        action="store_true",
        help="the run will track its animals: rules may name tracks (default: a track "
        "name is refused for a model without identities)",
    )


def handle(args: argparse.Namespace, console: Console) -> int:
    """Prints each mistake (stdout); returns the exit status."""
    del console
    from sleap_live.engines.errors import EngineError
    from sleap_live.stream.experiment import ExperimentError, check_experiment, load_experiment

    try:
        skeleton, class_names = model_names([Path(model) for model in args.models])
    except (EngineError, OSError) as error:
        return fail(str(error), EXIT_MODEL)
    try:
        experiment = load_experiment(args.file)
        check_experiment(
            experiment, skeleton, class_names, tracked=args.tracking, source=str(args.file)
        )
    except ExperimentError as error:
        print(error)
        print(f"{len(error.problems)} mistakes", file=sys.stderr)
        return EXIT_MISTAKES
    print(f"{args.file}: {len(experiment.rules)} rules, sound for this model")
    return EXIT_OK


def model_names(models: list[Path]) -> tuple[Skeleton, tuple[str, ...]]:
    """The skeleton and identities of a model, read without running it: a `sleap-nn
    export` folder from its metadata, an .onnx sleap-live exported from its own, a
    model directory from its config.

    Raises:
        EngineError: a model that cannot be read (missing, not a model).
    """
    from sleap_live.engines.load.dirs import (
        is_sleap_nn_export_dir,
        read_export_metadata,
        read_model_dir,
    )
    from sleap_live.engines.load.metadata import read_onnx_info
    from sleap_live.engines.types import Skeleton

    pairs: list[tuple[Skeleton, tuple[str, ...]]] = []
    for model in models:
        if is_sleap_nn_export_dir(model):
            metadata = read_export_metadata(model)
            names = tuple(str(name) for name in metadata.get("node_names") or ())
            classes = tuple(str(name) for name in metadata.get("class_names") or ())
            pairs.append((Skeleton(names), classes))
        elif model.suffix == ".onnx":
            info = read_onnx_info(model)
            pairs.append((info.skeleton, info.class_names))
        else:
            spec = read_model_dir(model)
            pairs.append((spec.skeleton, spec.class_names))
    # A top-down pair: the centroid model's one-node skeleton is not the animal's.
    skeleton = max((skeleton for skeleton, _ in pairs), key=lambda s: s.n_nodes)
    class_names = next((names for _, names in pairs if names), ())
    return skeleton, class_names
