"""sleap-live: sleap-nn pose models on live cameras and recorded video.

The names a user needs, from one place::

    import sleap_live

    with sleap_live.Pipeline(sleap_live.open_source("clip.mp4"), ["models/centroid",
                                                                  "models/centered_instance"],
                             outputs=sleap_live.OutputOptions(output="poses.slp")) as pipeline:
        pipeline.on_poses(lambda record: print(record.frame_index, record.poses.points))
        pipeline.join()

`Pipeline(source, model_paths)` loads, checks and runs the model exactly as
`sleap-live run` does on the same arguments. `export_model` writes every format the
`sleap-live export` command offers; `load_runner` gives the engine alone (a uint8
batch in, `FramePoses` out). The parts live in `sleap_live.engines` (models, exports,
runners) and `sleap_live.stream` (sources, the pipeline, the ring, the outputs).

Importing this package loads nothing heavy and changes nothing: each name is
imported from its module on first use (torch, in particular, only where a torch
model is built).
"""

# The type checker's imports below are the lazy names' declarations, used by no code here.
# ruff: noqa: F401

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sleap_live.engines import (
        CheckpointError,
        EngineError,
        ExportError,
        FramePoses,
        InferenceSettings,
        InputMismatchError,
        LoadOptions,
        ModelConfigError,
        ModelInfo,
        ModelNotFoundError,
        RuntimeUnavailableError,
        Skeleton,
        export_model,
        load_runner,
    )
    from sleap_live.engines.runners.base import Runner
    from sleap_live.stream import (
        Frame,
        ManyResult,
        OutputOptions,
        Pipeline,
        PipelineError,
        PipelineRun,
        PipelineStats,
        PoseRecord,
        Publisher,
        PublishError,
        RingConsumer,
        RingReader,
        SourceError,
        SourceGroup,
        SourceNotFoundError,
        SourceStalledError,
        StreamError,
        TrackingSettings,
        VideoResult,
        open_source,
        run_many,
    )

# Each public name and the module it comes from.
_ORIGINS = {
    # Running a model on a stream of frames.
    "Pipeline": "sleap_live.stream",
    "open_source": "sleap_live.stream",
    "SourceGroup": "sleap_live.stream",
    "OutputOptions": "sleap_live.stream",
    "Publisher": "sleap_live.stream",
    "RingConsumer": "sleap_live.stream",
    "PipelineRun": "sleap_live.stream",
    "RingReader": "sleap_live.stream",
    "PipelineStats": "sleap_live.stream",
    "TrackingSettings": "sleap_live.stream",
    # Many recorded videos, an output each: here, in local workers or on Ray.
    "run_many": "sleap_live.stream",
    "ManyResult": "sleap_live.stream",
    "VideoResult": "sleap_live.stream",
    # The records a run hands over.
    "Frame": "sleap_live.stream",
    "PoseRecord": "sleap_live.stream",
    "FramePoses": "sleap_live.engines",
    "ModelInfo": "sleap_live.engines",
    "Skeleton": "sleap_live.engines",
    # Models: settings, exports, engines.
    "InferenceSettings": "sleap_live.engines",
    "export_model": "sleap_live.engines",
    "load_runner": "sleap_live.engines",
    "LoadOptions": "sleap_live.engines",
    "Runner": "sleap_live.engines.runners.base",
    # Errors: every one a sleap-live command reports in one line.
    "EngineError": "sleap_live.engines",
    "CheckpointError": "sleap_live.engines",
    "ExportError": "sleap_live.engines",
    "InputMismatchError": "sleap_live.engines",
    "ModelConfigError": "sleap_live.engines",
    "ModelNotFoundError": "sleap_live.engines",
    "RuntimeUnavailableError": "sleap_live.engines",
    "StreamError": "sleap_live.stream",
    "PipelineError": "sleap_live.stream",
    "PublishError": "sleap_live.stream",
    "SourceError": "sleap_live.stream",
    "SourceNotFoundError": "sleap_live.stream",
    "SourceStalledError": "sleap_live.stream",
}

__all__ = sorted(_ORIGINS)


def _lazy_names(
    package: str, origins: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` (PEP 562) of `package`, whose public names
    are the keys of `origins`, each imported from the module its value names on first
    use: importing the package, or any one module of it, loads nothing else. This
    package, `sleap_live.engines` and `sleap_live.stream` use it.

    `__dir__` lists those names and the package's dunders (`__doc__`, `__all__`, ...),
    not the helpers it holds.
    """

    def getattr_(name: str) -> Any:
        origin = origins.get(name)
        if origin is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(origin), name)

    def dir_() -> list[str]:
        dunders = (name for name in vars(sys.modules[package]) if name.startswith("__"))
        return sorted({*origins, *dunders})

    return getattr_, dir_


__getattr__, __dir__ = _lazy_names(__name__, _ORIGINS)
