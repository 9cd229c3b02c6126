"""TensorRT engines built from sleap-live ONNX exports, and the engine cache.

An engine is built for one GPU, one TensorRT version, one precision and one frame
size, and written as one self-contained file that runs alone. The parts, one job
each:

- `tensorrt_engine`: the engine file (its key, header and plan; read and write);
- `tensorrt_build`: building an engine from an ONNX export (parser, builder
  config, profiles, precision and TF32, timing cache);
- `tensorrt_cache`: the engines of one model in a directory, rebuilt when their
  key differs or their file is damaged;
- here: what the host has (`import_tensorrt`, `current_gpu`) and
  `export_tensorrt`, and every name of the parts, so that callers import this
  module alone.

`tensorrt` is imported lazily (`import_tensorrt`), so this module imports on a
host without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import attrs

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.export.tensorrt_build import (
    DEFAULT_WORKSPACE_BYTES,
    BuildSettings,
    OnnxModel,
    build_engine,
    model_hash,
    read_onnx_model,
)
from sleap_live.engines.export.tensorrt_cache import (
    EngineCache,
    timing_cache_name,
)
from sleap_live.engines.export.tensorrt_engine import (
    HEADER_SCHEMA,
    HEADER_VERSION,
    MAGIC,
    PRECISIONS,
    CorruptEngineError,
    EngineFile,
    EngineKey,
    FrameShape,
    GpuInfo,
    parse_engine_file,
    read_engine_file,
    write_engine_file,
)
from sleap_live.engines.optional import GPU_INSTALL_HINT

if TYPE_CHECKING:
    from sleap_live.engines.export.formats import ExportOptions

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_WORKSPACE_BYTES",
    "ENGINE_SUFFIXES",
    "GPU_INSTALL_HINT",
    "HEADER_SCHEMA",
    "HEADER_VERSION",
    "MAGIC",
    "PRECISIONS",
    "BuildSettings",
    "CorruptEngineError",
    "EngineCache",
    "EngineFile",
    "EngineKey",
    "FrameShape",
    "GpuInfo",
    "OnnxModel",
    "build_engine",
    "current_gpu",
    "export_tensorrt",
    "import_tensorrt",
    "model_hash",
    "parse_engine_file",
    "read_engine_file",
    "read_onnx_model",
    "timing_cache_name",
    "write_engine_file",
]

ENGINE_SUFFIXES = (".engine", ".plan")
DEFAULT_BATCH_SIZE = 8


def import_tensorrt() -> ModuleType:
    """The `tensorrt` module.

    Raises:
        RuntimeUnavailableError: TensorRT is not installed.
    """
    try:
        return importlib.import_module("tensorrt")
    except ImportError as error:
        raise RuntimeUnavailableError(f"TensorRT is not installed ({GPU_INSTALL_HINT})") from error


def current_gpu(device: str = "cuda:0") -> GpuInfo:
    """The name and compute capability of a CUDA device, asked of torch.

    Raises:
        RuntimeUnavailableError: torch has no CUDA, or no such device.
    """
    import torch

    index = int(device.partition(":")[2] or 0)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise RuntimeUnavailableError(f"no CUDA GPU {device!r}: TensorRT engines need one")
    properties = torch.cuda.get_device_properties(index)
    return GpuInfo(properties.name, (int(properties.major), int(properties.minor)))


def export_tensorrt(
    paths: Sequence[str | Path], output: str | Path, options: ExportOptions
) -> Path:
    """Exports model directories to `output/model.onnx` and builds its engine beside it
    (`export_model` with format "tensorrt").

    Another GPU's engine for the same export can be added to the same directory by
    running the export there again; engines that are already current are kept.

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the export directory.
        options: `frame_size` (height, width) or (height, width, channels) of the
            stream's frames, without channels the model's own; `batch_size` (the
            throughput profile's), `precision` (one of `PRECISIONS`), `device` (the
            CUDA device to build on), `notify` (told about rebuilds, one line each),
            and those of the ONNX export (`export_traced`), which is always of the
            "tensorrt" profile, at `frame_size`.

    Returns:
        The engine file's path.

    Raises:
        ValueError: no `frame_size`.
        RuntimeUnavailableError: TensorRT or a CUDA GPU is missing.
        ExportError: the ONNX export or the build failed.
    """
    from sleap_live.engines.export.exporter import export_traced

    if options.frame_size is None:
        raise ValueError("a TensorRT export needs frame_size (height, width[, channels])")
    trt = import_tensorrt()
    gpu = current_gpu(options.device)
    height, width, *channels = options.frame_size
    onnx_options = attrs.evolve(options, format="onnx", profile="tensorrt")
    onnx_path = export_traced(paths, Path(output) / "model.onnx", onnx_options)
    model = read_onnx_model(onnx_path)
    shape = (height, width, channels[0] if channels else model.metadata.input_channels[0])
    cache = EngineCache(
        onnx_path.parent, model, "model", trt, gpu, options.precision, notify=options.notify
    )
    cache.engine(shape, options.batch_size)
    return cache.path(cache.key(shape, options.batch_size))
