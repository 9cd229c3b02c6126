"""What every `sleap-live` subcommand shares: the parser, its help layout, options, types.

The model options (`-m`, `--engine`, `--device`) and `--batch-size` are defined
here once and added to each subcommand that loads a model, so they are spelled,
checked and documented the same way everywhere.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from sleap_live.engines.runners.load import ENGINES

PROG = "sleap-live"


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
        return "\n\n".join(
            paragraph
            if "\n" in paragraph
            else super(HelpFormatter, self)._fill_text(paragraph, width, indent)
            for paragraph in text.split("\n\n")
        )

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or not action.option_strings or action.required:
            return text
        if action.default is None:
            return text
        if action.default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors become one line, not usage plus message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def add_model_options(
    parser: argparse.ArgumentParser, *, batch_size: int | None, batch_size_help: str
) -> None:
    """`-m/--model` (once, or twice for top-down), `--engine`, `--device`, `--batch-size`.

    Args:
        parser: the subcommand's parser.
        batch_size: the default of `--batch-size` (None: the pipeline's, per policy).
        batch_size_help: its help text, saying the default where it is None.
    """
    model = parser.add_argument_group("model")
    model.add_argument(
        "-m",
        "--model",
        dest="models",
        action="append",
        required=True,
        metavar="MODEL",
        help="model directory, sleap-live .onnx/.pt export or sleap-nn export directory; "
        "give -m twice for top-down (centroid + centered instance)",
    )
    model.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="torch, onnx (ONNX Runtime), or auto: ONNX Runtime wherever it can run, else torch",
    )
    model.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    model.add_argument(
        "--batch-size",
        type=positive_int,
        default=batch_size,
        metavar="N",
        help=batch_size_help,
    )


def check_models(args: argparse.Namespace) -> None:
    """Raises `UsageError` unless -m was given once, or twice (top-down)."""
    if len(args.models) > 2:
        raise UsageError("give -m once, or twice for a top-down model")


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def count(text: str) -> int:
    """argparse type: a whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value
