"""How the commands load their model from the parsed options (`options` parses them).

`load_options` builds the one `LoadOptions` record a command's options describe:
`run` and `bench` load with it here (`load_runner_for`), a run over many videos hands
it to every worker (`many`).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli.options import engine_options, inference_settings, say
from sleap_live.engines.load_options import LoadOptions
from sleap_live.engines.notify import Notify
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.runner import deferred_spread_frames, load_for_source
from sleap_live.stream.sources import Source
from sleap_live.stream.sources.group import SourceGroup


def load_options(args: argparse.Namespace) -> LoadOptions:
    """The `LoadOptions` of a parser with `add_model_options`, `add_cache_options`,
    `add_verify_options` and `add_inference_options`: the engine, device, cache,
    inference settings, engine options and whether to verify (the frames to verify
    on are the caller's: `load_runner_for`, or each worker's video).

    Raises:
        UsageError: an engine option with an engine that does not take it
            (`engine_options`).
    """
    return LoadOptions(
        engine=args.engine,
        device=args.device,
        cache=args.cache,
        cache_dir=args.cache_dir,
        settings=inference_settings(args),
        options={**engine_options(args), "verify": args.verify},
    )


@contextlib.contextmanager
def loading_status(console: Console, *, quiet: bool = False) -> Iterator[Notify]:
    """A `progress` callback for `load_runner` that shows its steps as one status line.

    On a terminal the line is a spinner that shows the latest step from the first
    step on (nothing shows when loading needs no slow step) and goes when loading
    ends; elsewhere (a log, a pipe) each step is printed as a line. `quiet` shows
    nothing.
    """
    status: Any = None

    def show(step: str) -> None:
        nonlocal status
        if quiet:
            return
        if not console.is_terminal:
            say(console, step)
        elif status is None:
            status = console.status(step)
            status.start()
        else:
            status.update(step)

    try:
        yield show
    finally:
        if status is not None:
            status.stop()


def load_runner_for(
    args: argparse.Namespace,
    console: Console,
    verify_on: Source | SourceGroup | Path | None,
    *,
    quiet: bool = False,
) -> Runner:
    """The runner for `-m`, loaded with `load_options(args)`, its slow steps shown as
    one status line (`loading_status`).

    Args:
        verify_on: what an export is verified on without --verify-video: the source
            the command runs on, loaded as `Pipeline` loads (`load_for_source`), or a
            video file's frames spread over its length; None: the training labels' frames.

    Raises:
        SourceNotFoundError, SourceError: a video to verify on is missing,
            unreadable or empty.
    """
    verify = verify_options(args)
    if isinstance(verify_on, Path) and verify["verify"] and "verify_frames" not in verify:
        verify["verify_frames"] = deferred_spread_frames(verify_on)
    arguments = {**load_options(args).arguments(), **verify}
    with loading_status(console, quiet=quiet) as progress:
        if isinstance(verify_on, Path) or verify_on is None:
            return load_runner(args.models, progress=progress, **arguments)
        return load_for_source(args.models, verify_on, progress=progress, **arguments)


def verify_options(args: argparse.Namespace) -> dict[str, Any]:
    """`verify`, and `verify_frames` from --verify-video, for `export_model` or
    `load_runner`; without --verify-video the caller chooses the frames.

    Args:
        args: parsed options of a parser with `add_verify_options`.

    Raises:
        SourceNotFoundError, SourceError: the video is missing, unreadable or empty.
    """
    if not args.verify:
        return {"verify": False}
    if args.verify_video is not None:
        return {"verify": True, "verify_frames": deferred_spread_frames(args.verify_video)}
    return {"verify": True}
