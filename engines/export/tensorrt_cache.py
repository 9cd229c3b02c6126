"""The engine cache: engines of one ONNX model in a directory, built when missing or stale.

Engines of several GPUs sit side by side in one directory: the file name carries
the key's fields (`EngineKey.file_name`), and the header carries the whole key,
compared in full before a cached engine is used. A cached engine whose key
differs is rebuilt, never trusted; an unreadable one is rebuilt with a one-line
notice. A timing cache per GPU and TensorRT version (`timing_cache_name`) sits
beside the engines and makes rebuilds fast.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import attrs

from sleap_live.engines.export.tensorrt_build import (
    BuildSettings,
    OnnxModel,
    build_engine,
    save_or_notify,
)
from sleap_live.engines.export.tensorrt_engine import (
    CorruptEngineError,
    EngineFile,
    EngineKey,
    FrameShape,
    GpuInfo,
    read_engine_file,
)
from sleap_live.engines.notify import Notify, notice


def timing_cache_name(gpu: GpuInfo, tensorrt_version: str) -> str:
    """The timing cache file of one GPU and TensorRT version (shared by every model)."""
    return f"timing.{gpu.slug}.trt{tensorrt_version}.cache"


@attrs.define
class EngineCache:
    """Engines of one ONNX model in a directory, built when missing or stale.

    Args:
        directory: where engines and timing caches live (created when needed);
            None keeps nothing: engines are built for this run only.
        model: the ONNX export engines are built from.
        stem: file name stem of its engines ("model" beside `model.onnx`).
        trt: the `tensorrt` module.
        gpu: the GPU engines are built for.
        precision: one of `PRECISIONS`.
        settings: build settings.
        notify: told about rebuilds and unwritable files, one line each.
    """

    directory: Path | None
    model: OnnxModel
    stem: str
    trt: ModuleType
    gpu: GpuInfo
    precision: str = "fp32"
    settings: BuildSettings = attrs.field(factory=BuildSettings)
    notify: Notify = notice

    def key(self, frame: FrameShape, batch_size: int) -> EngineKey:
        return EngineKey(
            model_sha256=self.model.sha256,
            gpu=self.gpu,
            tensorrt_version=str(self.trt.__version__),
            precision=self.precision,
            frame=frame,
            batch_size=batch_size,
        )

    def path(self, key: EngineKey) -> Path:
        if self.directory is None:
            raise ValueError("an engine cache without a directory keeps no engine files")
        return self.directory / key.file_name(self.stem)

    def engine(self, frame: FrameShape, batch_size: int) -> EngineFile:
        """The engine for `frame`-sized batches of up to `batch_size`: cached or built."""
        key = self.key(frame, batch_size)
        if self.directory is None:
            settings, notify = self.settings, self.notify
            return build_engine(self.trt, self.model, key, settings=settings, notify=notify)
        path = self.path(key)
        if path.is_file():
            try:
                cached = read_engine_file(path)
            except CorruptEngineError as error:
                self.notify(f"{error}; rebuilding it")
            else:
                if cached.key == key:
                    return cached
                self.notify(f"{path} was built for {_difference(cached.key, key)}; rebuilding it")
        built = build_engine(
            self.trt,
            self.model,
            key,
            settings=self.settings,
            timing_cache=self.directory / timing_cache_name(self.gpu, key.tensorrt_version),
            notify=self.notify,
        )
        save_or_notify(path, built.to_bytes(), self.notify, "TensorRT engine")
        return built


def _difference(cached: EngineKey, wanted: EngineKey) -> str:
    """What differs between two keys, in words: "another model (sha256 ab12… not cd34…)"."""
    old, new = cached.to_dict(), wanted.to_dict()
    fields = [name for name in new if old[name] != new[name]]
    if fields == ["model_sha256"]:
        return f"another model (sha256 {old['model_sha256'][:12]}, not {new['model_sha256'][:12]})"
    return "other " + ", ".join(f"{name} ({old[name]}, not {new[name]})" for name in fields)
