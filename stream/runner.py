"""The pipeline's runner: one the caller passes in, or one loaded from model paths."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sleap_live.engines.runners.base import Runner

ModelOrRunner = Runner | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def as_runner(
    model_or_runner: ModelOrRunner, *, engine: str, device: str, **load_options: Any
) -> tuple[Runner, bool]:
    """The runner to use, and whether the caller now owns it (True when loaded here).

    Args:
        model_or_runner: a `Runner`, or one or more model paths for `load_runner`.
        engine: runtime used when loading ("auto", "torch", "onnx").
        device: device used when loading ("auto", "cpu", "cuda", ...).
        **load_options: `load_runner`'s other options when loading (`cache`,
            `cache_dir`, `progress`, `threads`, export options, ...).
    """
    if isinstance(model_or_runner, Runner):
        return model_or_runner, False
    # Imported here: loading models may need torch, and a pipeline given a runner
    # (say ONNX Runtime only) should not pay for importing it.
    from sleap_live.engines.runners.load import load_runner

    paths = (
        [model_or_runner] if isinstance(model_or_runner, (str, os.PathLike)) else model_or_runner
    )
    runner = load_runner(
        [os.fspath(path) for path in paths], engine=engine, device=device, **load_options
    )
    return runner, True
