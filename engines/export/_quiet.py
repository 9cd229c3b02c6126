"""Keeps the exporters quiet: native stdout (and stderr), tracer warnings that say
nothing, and errors in one line.

What the tracer does say about the model (a Python value frozen from a shape,
say) is collected, so an error can quote it when the export then fails to verify.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

# Warnings torch raises on every TorchScript-based export that say nothing about
# this model: the exporter's own deprecation, and a note on negative indices in
# advanced indexing (inference models index with `nonzero` results, never negative).
_EXPORTER_NOISE = (
    r"You are using the legacy TorchScript-based ONNX export",
    r"The feature will be removed",
    r"Exporting aten::index operator of advanced indexing",
    r"`torch\.jit\.trace",
)


@contextlib.contextmanager
def tracer_notes() -> Iterator[list[str]]:
    """Silences exporter noise; the list it yields gets the tracer's other warnings.

    The list is filled when the block ends, one first sentence per distinct warning.
    """
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for pattern in _EXPORTER_NOISE:
            warnings.filterwarnings("ignore", message=pattern)
        yield notes
    notes.extend(dict.fromkeys(_first_sentence(str(warning.message)) for warning in caught))


@contextlib.contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """Discards what native code writes to stdout (file descriptor 1) meanwhile.

    torch 2.13's TorchScript-based exporter always enables its C++ log (it tests a
    function object for truth), which prints the whole traced graph to stdout
    whenever an export fails; the `ExportError` raised instead says what failed.
    """
    with _native_silenced(sys.stdout, 1):
        yield


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Discards what native code writes to stderr (file descriptor 2) meanwhile.

    TensorFlow logs through absl before any setting of its log level is read (oneDNN
    notes, CUDA probing on a machine without a GPU), lines that say nothing about the
    export; an import that fails still raises its error.
    """
    with _native_silenced(sys.stderr, 2):
        yield


@contextlib.contextmanager
def _native_silenced(stream: Any, descriptor: int) -> Iterator[None]:
    stream.flush()
    saved = os.dup(descriptor)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), descriptor)
        yield
    finally:
        os.dup2(saved, descriptor)
        os.close(saved)


@contextlib.contextmanager
def loading(path: object, what: str) -> Iterator[None]:
    """Any error while the export at `path` loads becomes one line: `path` is not `what`,
    and why (a foreign or damaged file raises many kinds).

    Raises:
        ModelConfigError: the load failed.
    """
    from sleap_live.engines.errors import ModelConfigError

    try:
        yield
    except Exception as error:
        raise ModelConfigError(f"{path}: not {what} ({first_line(error)})") from error


def first_line(error: BaseException) -> str:
    """The first line of an exception's message, or its type name if it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _first_sentence(text: str) -> str:
    return text.strip().splitlines()[0].split(". ")[0] if text.strip() else ""
