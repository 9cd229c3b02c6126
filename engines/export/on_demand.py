"""Exports made while a model loads: model directories to ONNX graphs, and graphs
specialised to frame shapes, each from the export cache or exported now (and cached).

`load_runner` runs model directories with ONNX Runtime on their ONNX export:
`cached_or_exported` loads the cached graph when the cache has one that loads and
carries its key, else exports (and verifies) the graph now and caches it (see
`sleap_live.engines.load.export_cache`). On the CPU, each frame shape also gets a
graph specialised to it (`SpecialisedGraphExports`, cached the same way), which
the ONNX Runtime runner uses once it matched the general graph bit for bit
(`sleap_live.engines.runners.specialise`).

Torch is loaded only when something has to be exported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import attrs
import numpy as np

from sleap_live.engines.errors import EngineError, ExportError, ModelConfigError
from sleap_live.engines.host.frames import DeferredFrames
from sleap_live.engines.load.export_cache import (
    CacheKey,
    ExportCache,
    cache_key,
    embedded_key,
    with_embedded_key,
)
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.engines.load.spec import TRAINING_CONFIG
from sleap_live.engines.notify import Notify, notice
from sleap_live.engines.settings import InferenceSettings

# (height, width, channels) of the frames a graph is specialised to.
FrameShape = tuple[int, int, int]
FIRST_EXPORT = "exporting model (first run, cached for next time)"


class LoadedGraph(Protocol):
    """What a graph's bytes are loaded into (a runner): its embedded metadata, and `close`."""

    @property
    def metadata(self) -> ExportMetadata | None: ...

    def close(self) -> None: ...


Loaded = TypeVar("Loaded", bound=LoadedGraph)


def cached_or_exported(
    paths: list[Path],
    export_options: dict[str, Any],
    cache: ExportCache | None,
    progress: Notify,
    settings: InferenceSettings,
    load: Callable[[bytes], Loaded],
) -> tuple[Loaded, bool]:
    """`load` of the model directories' ONNX graph: the cached one, else exported now.

    A cached graph that does not load (`ModelConfigError`) or whose embedded key is
    not its entry's is discarded with a notice and exported again. The graph-side
    settings are part of the key; the host-side ones are for the caller to apply.

    Returns:
        What `load` made, and whether its graph came from the cache.
    """
    key = None if cache is None else general_graph_key(paths, export_options, settings)
    if cache is None or key is None:
        onnx_bytes = exported_onnx(paths, export_options, progress, "exporting model", settings)
        return load(onnx_bytes), False
    cached = cache.read(key)
    if cached is not None:
        try:
            loaded = load(cached)
        except ModelConfigError as error:  # ONNX Runtime cannot load it, or its metadata is off
            cache.discard(key, f"not loadable ({error})")
        else:
            if loaded.metadata is not None and embedded_key(loaded.metadata) == key.digest:
                return loaded, True
            loaded.close()
            cache.discard(key, "keyed differently in its own metadata")
    onnx_bytes = with_embedded_key(
        exported_onnx(paths, export_options, progress, FIRST_EXPORT, settings), key
    )
    cache.write(key, onnx_bytes)
    return load(onnx_bytes), False


def general_graph_key(
    paths: Sequence[Path], export_options: dict[str, Any], settings: InferenceSettings
) -> CacheKey | None:
    """The cache key of the model directories' general (dynamic) graph. It is verified
    unless told otherwise (`export_graph`), so `verify=True` given keys the same
    entry as `verify` left out."""
    return cache_key(paths, {"verify": True, **export_options}, settings=settings)


def exported_onnx(
    paths: list[Path],
    export_options: dict[str, Any],
    progress: Notify,
    headline: str,
    settings: InferenceSettings,
) -> bytes:
    """The model directories' in-memory ONNX export, each step told to `progress`."""
    progress(f"{headline}: loading the torch model")
    from sleap_live.engines.export.exporter import export_graph
    from sleap_live.engines.graph.build import load_inference_model

    model = load_inference_model(paths, settings)
    try:
        return export_graph(
            model,
            sources=paths,
            progress=lambda step: progress(f"{headline}: {step}"),
            **export_options,
        )
    except ExportError as error:
        raise ExportError(
            f"cannot run {', '.join(map(str, paths))} with ONNX Runtime: {error}; "
            "or run the model with torch (--engine torch)"
        ) from error


def with_sources_here(metadata: ExportMetadata, paths: Sequence[Path]) -> ExportMetadata:
    """A cached export's metadata with its source records naming the model folders given now.

    The cache is keyed by the models' bytes, not their folders, so a copy of a model
    elsewhere hits the entry its first export wrote, which names that export's
    folders; what a run records as its models (the outputs' provenance) must be
    these ones.
    """
    here = {}
    for path in paths:
        config = path / TRAINING_CONFIG
        if config.is_file():
            here[hashlib.sha256(config.read_bytes()).hexdigest()] = str(path.resolve())
    sources = tuple(
        {**source, "path": here.get(str(source.get("sha256")), source.get("path"))}
        for source in metadata.sources
    )
    return attrs.evolve(metadata, sources=sources)


class SpecialisedGraphExports:
    """Graphs of model directories specialised to frame shapes: cached, else exported now.

    A specialised graph is keyed by the model directories (see `cache_key`), the
    opset and the frame shape (`static_frame_shape`); it is never verified
    against torch (the runner checks it against the general graph instead), so
    the general graph's verification options are not part of its key. The torch
    model is built once, for the first graph that is not cached. A rejected graph
    is removed from the cache (the runner says why).

    Args:
        paths: the model directories.
        export_options: the general graph's export options (`engine_table.EXPORT_OPTIONS`).
        cache: the export cache, or None not to cache.
        progress: told what a slow step is doing.
        settings: the inference settings the graphs are built with (in their key).
    """

    def __init__(
        self,
        paths: list[Path],
        export_options: dict[str, Any],
        cache: ExportCache | None,
        progress: Notify,
        settings: InferenceSettings | None = None,
    ) -> None:
        self._settings = InferenceSettings() if settings is None else settings
        self._paths = paths
        self._options = {name: value for name, value in export_options.items() if name == "opset"}
        self._cache = cache
        self._progress = progress
        self._graphs: dict[FrameShape, bytes] = {}
        self._failures: dict[FrameShape, EngineError] = {}
        self._model: Any = None

    def key(self, shape: FrameShape) -> CacheKey | None:
        """The cache key of the graph specialised to `shape`."""
        keyed = {**self._options, "static_frame_shape": list(shape)}
        return cache_key(self._paths, keyed, settings=self._settings)

    def graph(self, shape: FrameShape) -> bytes:
        """The graph specialised to `shape`.

        Raises:
            ExportError, ModelConfigError, ...: the export failed (now or before).
        """
        if shape in self._failures:
            raise self._failures[shape]
        if shape not in self._graphs:
            key = None if self._cache is None else self.key(shape)
            cached = None if key is None or self._cache is None else self._cache.read(key)
            try:
                self._graphs[shape] = cached if cached is not None else self._exported(shape, key)
            except EngineError as error:
                self._failures[shape] = error
                raise
        return self._graphs[shape]

    def prepare(self, frames: Any, notify: Notify = notice) -> None:
        """Makes the graph for the shape of `frames` (a uint8 (B, H, W, C) array, or
        `DeferredFrames`, which are not read) now.

        Made while loading rather than on the first batch, which a camera waits for;
        a failure is a notice (that shape then runs the general graph).
        """
        if isinstance(frames, DeferredFrames):
            shape = frames.frame_shape
        elif isinstance(frames, np.ndarray) and frames.ndim == 4:
            shape = (int(frames.shape[1]), int(frames.shape[2]), int(frames.shape[3]))
        else:
            return
        try:
            self.graph(shape)
        except EngineError as error:
            notify(f"no graph specialised to the frames' shape ({error})")

    def reject(self, shape: FrameShape, reason: str) -> None:
        """Forgets the graph for `shape` and removes it from the cache."""
        del reason  # the runner tells it
        self._graphs.pop(shape, None)
        key = None if self._cache is None else self.key(shape)
        if key is not None and self._cache is not None:
            self._cache.remove(key)

    def _exported(self, shape: FrameShape, key: CacheKey | None) -> bytes:
        from sleap_live.engines.export.exporter import export_graph
        from sleap_live.engines.graph.build import load_inference_model

        height, width, channels = shape
        headline = f"specialising the model to {width}x{height}x{channels} frames"
        if self._model is None:
            self._progress(f"{headline}: loading the torch model")
            self._model = load_inference_model(self._paths, self._settings)
        graph = export_graph(
            self._model,
            frame_shape=shape,
            sources=self._paths,
            progress=lambda step: self._progress(f"{headline}: {step}"),
            **self._options,
        )
        if key is not None and self._cache is not None:
            graph = with_embedded_key(graph, key)
            self._cache.write(key, graph)
        return graph
