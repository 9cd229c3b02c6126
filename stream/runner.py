"""The pipeline's runner: one the caller passes in, or one loaded from model paths.

`load_for_source` is how both `Pipeline` and `sleap-live run` load model paths for a
run on a source, so a Python user gets the command line's runner: an export made
on demand is verified on frames spread over the whole video the run reads
(`spread_frames`), since animals often enter the arena after a recording starts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.host.frames import DeferredFrames, VideoFrames
from sleap_live.engines.load.dirs import refuse_unrun_models
from sleap_live.engines.runners.base import Runner
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources import FileSource, Source
from sleap_live.stream.sources.group import SourceGroup, as_group

ModelPaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
ModelOrRunner = Runner | ModelPaths

# Frames of a video an export is verified on: the exporter checks two at their own
# size and three on a larger, odd-sized canvas.
VERIFY_FRAMES = 5
# Candidate frames spread over a video, which the exporter searches for animals, and
# the seconds after which decoding more of them stops (each is a seek and a decode
# from the keyframe before it, so a long video is never decoded in full).
SPREAD_FRAMES = 24
SPREAD_SECONDS = 2.0


def as_runner(
    model_or_runner: ModelOrRunner,
    source: Source | SourceGroup,
    **load_options: Any,
) -> tuple[Runner, bool]:
    """The runner to use, and whether the caller now owns it (True when loaded here).

    Args:
        model_or_runner: a `Runner`, or one or more model paths for `load_for_source`.
        source: the source the run reads (its video verifies an export).
        **load_options: `load_runner`'s options when loading (`engine`, `device`,
            `settings`, `cache`, `cache_dir`, `progress`, `threads`, ...).
    """
    if isinstance(model_or_runner, Runner):
        return model_or_runner, False
    return load_for_source(model_or_runner, source, **load_options), True


def load_for_source(
    models: ModelPaths, source: Source | SourceGroup, **load_options: Any
) -> Runner:
    """`load_runner` for a run on `source`, as `sleap-live run` loads it.

    An export made on demand is verified on frames of the source's video file
    spread over its length (`spread_frames`), read at the source's bit depth
    (`verify_frames_of`) only if something needs them (an export, the CPU engine
    choice, a precision check: not a warm start), among which the exporter picks
    those with animals; a camera, network stream or iterator has no such file,
    and its export is verified on the model's training-label frames
    (`load_runner`'s default).
    ``verify_frames`` or ``verify=False`` in `load_options` override this.

    Raises:
        SourceError: the source's video has no frames to verify on (when they are
            read).
        UnsupportedModelError: a model is of a kind sleap-live does not run (told
            before any frame is read).
    """
    # Imported here: loading models may need torch, and a pipeline given a runner
    # (say ONNX Runtime only) should not pay for importing it.
    from sleap_live.engines.runners.load import load_runner

    paths = [models] if isinstance(models, str | os.PathLike) else models
    # A model sleap-live does not run is told before any frame is read.
    refuse_unrun_models(paths)
    if load_options.get("verify", True) and load_options.get("verify_frames") is None:
        frames = verify_frames_of(source)
        if frames is not None:  # else load_runner's default: the training labels' frames
            load_options["verify_frames"] = frames
    return load_runner([os.fspath(path) for path in paths], **load_options)


def verify_frames_of(source: Source | SourceGroup) -> DeferredFrames | None:
    """Frames spread over the video file `source` (the first of a group) reads, at its
    bit depth, read when first needed (`deferred_spread_frames`); None where it reads
    none (a camera, a network stream, an iterator: no `video_file`)."""
    first = as_group(source).sources[0]
    if first.video_file is None:
        return None
    return deferred_spread_frames(
        first.video_file, bit_depth=first.bit_depth, frame_shape=first.frame_shape
    )


def deferred_spread_frames(
    video: Path,
    *,
    bit_depth: int | None = None,
    frame_shape: tuple[int, int, int] | None = None,
) -> DeferredFrames:
    """`spread_frames` of `video`, read when something first needs them (a warm start,
    its export and engine choice cached, never does). Without `frame_shape` (a source
    reading `video` knows it), the video is opened now to learn it.

    Raises:
        SourceNotFoundError, SourceError: the video is missing or unreadable.
    """
    if frame_shape is None:
        with FileSource(video, bit_depth=bit_depth) as probe:
            frame_shape = probe.frame_shape
    return DeferredFrames(frame_shape, lambda: spread_frames(video, bit_depth=bit_depth))


def spread_frames(
    video: Path,
    count: int = SPREAD_FRAMES,
    *,
    bit_depth: int | None = None,
    budget_s: float = SPREAD_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> VideoFrames:
    """Up to `count` frames of `video` spread over its length (`spread_indices`), in
    that order, uint8 (N, H, W, C), naming `video`; decoding stops after `budget_s`
    seconds (once one frame is read), so the first frames read cover the video most
    evenly. A video of at most `count` frames, or of unknown length, gives its first
    `count`.

    Raises:
        SourceNotFoundError, SourceError: the video is missing, unreadable or empty.
    """
    with FileSource(video, bit_depth=bit_depth) as probe:
        total = probe.n_frames
    if total is None or total <= count:
        return first_frames(video, count, bit_depth=bit_depth)
    images: list[np.ndarray] = []
    deadline = clock() + budget_s
    for index in spread_indices(total, count):
        if images and clock() > deadline:
            break
        try:
            with FileSource(video, start=index, stop=index + 1, bit_depth=bit_depth) as sample:
                images.extend(frame.image for frame in sample)
        except (SourceError, ValueError):  # past a damaged or shorter-than-declared end
            continue
    if not images:
        return first_frames(video, count, bit_depth=bit_depth)
    return VideoFrames(np.stack(images), video)


def spread_indices(total: int, count: int) -> list[int]:
    """`count` frame indices (at most `total`) of a `total`-frame video: the first
    frame, then the middle, the quarters, the eighths, ... each round halving the
    gaps the earlier ones left."""
    picked = [0]
    seen = {0}
    step = 2
    while len(picked) < min(count, total):
        for odd in range(1, step, 2):
            index = odd * total // step
            if index not in seen and len(picked) < count:
                seen.add(index)
                picked.append(index)
        step *= 2
    return picked


def first_frames(
    video: Path, count: int = VERIFY_FRAMES, *, bit_depth: int | None = None
) -> VideoFrames:
    """The first `count` frames of `video` (fewer if it is shorter), uint8 (N, H, W, C)
    naming `video`, `bit_depth` bits per sample scaled to 8 (None: the pixel format's
    depth).

    Raises:
        SourceNotFoundError, SourceError: the video is missing, unreadable or empty.
    """
    with FileSource(video, stop=count, bit_depth=bit_depth) as source:
        images = [frame.image for frame in source]
    if not images:
        raise SourceError(f"{video}: no frames to verify a model export on")
    return VideoFrames(np.stack(images), video)
