"""The pipeline's runner: one the caller passes in, or one loaded from model paths.

`load_for_source` is how both `Pipeline` and `sleap-live run` load model paths for a
run on a source, so a Python user gets the command line's runner: an export made
on demand is verified on the first frames of the video the run reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.runners.base import Runner
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources import FileSource, Source
from sleap_live.stream.sources.group import SourceGroup

ModelPaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
ModelOrRunner = Runner | ModelPaths

# Frames of a video an export is verified on: the exporter checks two at their own
# size and three on a larger, odd-sized canvas.
VERIFY_FRAMES = 5


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

    An export made on demand is verified on the first `VERIFY_FRAMES` frames of the
    source's video file, read at the source's bit depth (`source_video`); a
    camera, network stream or iterator has no such file, and its export is
    verified on the model's training-label frames (`load_runner`'s default).
    ``verify_frames`` or ``verify=False`` in `load_options` override this.

    Raises:
        SourceError: the source's video has no frames to verify on.
    """
    # Imported here: loading models may need torch, and a pipeline given a runner
    # (say ONNX Runtime only) should not pay for importing it.
    from sleap_live.engines.runners.load import load_runner

    if load_options.get("verify", True) and load_options.get("verify_frames") is None:
        frames = verify_frames_of(source)
        if frames is not None:  # else load_runner's default: the training labels' frames
            load_options["verify_frames"] = frames
    paths = [models] if isinstance(models, str | os.PathLike) else models
    return load_runner([os.fspath(path) for path in paths], **load_options)


def source_video(source: Source | SourceGroup) -> Path | None:
    """The video file `source` (the first of a group) reads, or None (a camera, a
    network stream, an iterator): its `video_file`."""
    first = source.sources[0] if isinstance(source, SourceGroup) else source
    return first.video_file


def verify_frames_of(source: Source | SourceGroup) -> np.ndarray | None:
    """The first `VERIFY_FRAMES` frames of `source`'s video (`source_video`) at its
    bit depth, or None where it reads no video file."""
    video = source_video(source)
    if video is None:
        return None
    first = source.sources[0] if isinstance(source, SourceGroup) else source
    return first_frames(video, bit_depth=first.bit_depth)


def first_frames(
    video: Path, count: int = VERIFY_FRAMES, *, bit_depth: int | None = None
) -> np.ndarray:
    """The first `count` frames of `video` (fewer if it is shorter), uint8 (N, H, W, C),
    `bit_depth` bits per sample scaled to 8 (None: the pixel format's depth).

    Raises:
        SourceNotFoundError, SourceError: the video is missing, unreadable or empty.
    """
    with FileSource(video, stop=count, bit_depth=bit_depth) as source:
        images = [frame.image for frame in source]
    if not images:
        raise SourceError(f"{video}: no frames to verify a model export on")
    return np.stack(images)
