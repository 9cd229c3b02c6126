"""TensorRT engines made while a model loads, for each frame size it runs.

`load_runner(engine="tensorrt")` runs a sleap-live `.onnx` export or model
directories: their engines are built on the first batch of each frame size (or at
load time for `frame_size`, and for a "tensorrt" profile graph, which has one size)
and kept in an engine cache (`EngineCache`): beside the `.onnx` export, or, for
model directories (exported in memory, one "tensorrt" profile graph per frame
size), in the `tensorrt/` folder of sleap-live's cache root. With no cache
directory (`--no-cache`), engines are built in memory for this run only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from sleap_live.engines.errors import ExportError
from sleap_live.engines.export import tensorrt as trt_export
from sleap_live.engines.export.tensorrt_engine import EngineFile, FrameShape, GpuInfo
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.engines.notify import Notify, notice
from sleap_live.engines.settings import InferenceSettings, check_slots
from sleap_live.engines.types import ModelInfo

# Where engines of model directories go in sleap-live's cache root.
TENSORRT_FOLDER = "tensorrt"
# The engine of one frame shape: cached, else built now.
EngineSource = Callable[[FrameShape], EngineFile]


def onnx_file_engines(
    path: Path,
    directory: Path | None,
    trt: ModuleType,
    gpu: GpuInfo,
    precision: str,
    batch_size: int,
    notify: Notify = notice,
) -> tuple[ExportMetadata, EngineSource]:
    """The engines of a sleap-live `.onnx` export, cached in `directory` (None: not kept).

    A "tensorrt" profile graph has one frame size: its engine is built now.
    """
    model = trt_export.read_onnx_model(path)
    cache = trt_export.EngineCache(directory, model, path.stem, trt, gpu, precision, notify=notify)
    fixed = (model.metadata.tensorrt or {}).get("frame_shape")
    if fixed is not None:
        cache.engine(tuple(fixed), batch_size)
    return model.metadata, lambda frame: cache.engine(frame, batch_size)


def model_dir_engines(
    paths: list[Path],
    settings: InferenceSettings | None,
    export_options: dict[str, Any],
    directory: Path | None,
    trt: ModuleType,
    gpu: GpuInfo,
    precision: str,
    batch_size: int,
    frame_size: tuple[int, ...] | None,
    progress: Notify,
    notify: Notify = notice,
) -> tuple[ModelInfo, EngineSource]:
    """The engines of model directories: each frame size exported in memory, then built.

    Args:
        frame_size: (height, width) or (height, width, channels) to build for now,
            or None to build on the first batch of each size.
        progress: told what a slow step is doing (loading, exporting, building).

    Raises:
        ModelConfigError: a model whose instance count the engine needs is not given one.
    """
    from sleap_live.engines.graph.build import load_inference_model

    progress("loading the torch model")
    inference_model = load_inference_model(paths, settings)
    # Said now, not at the first batch, which is when the engine would be built.
    check_slots(inference_model.info.model_type, inference_model.info.max_instances)
    caches: dict[FrameShape, trt_export.EngineCache] = {}

    def engine_for(frame: FrameShape) -> EngineFile:
        """Exports the model for this frame size (once) and gets its engine."""
        if frame not in caches:
            size = f"{frame[1]}x{frame[0]}x{frame[2]} frames"
            progress(f"building the TensorRT engine for {size}")
            onnx_bytes = tensorrt_onnx_bytes(inference_model, paths, frame, export_options)
            model = trt_export.read_onnx_model(onnx_bytes)
            caches[frame] = trt_export.EngineCache(
                directory, model, model.sha256[:16], trt, gpu, precision, notify=notify
            )
        return caches[frame].engine(frame, batch_size)

    info = inference_model.info
    if frame_size is not None:
        height, width, *channels = (int(n) for n in frame_size)
        engine_for((height, width, channels[0] if channels else info.input_channels))
    return info, engine_for


def tensorrt_onnx_bytes(
    model: Any, paths: list[Path], frame: FrameShape, export_options: dict[str, Any]
) -> bytes:
    """The in-memory "tensorrt" profile export of model directories for one frame size."""
    from sleap_live.engines.export.exporter import export_graph

    try:
        return export_graph(
            model, sources=paths, profile="tensorrt", frame_size=frame[:2], **export_options
        )
    except ExportError as error:
        raise ExportError(
            f"cannot run {', '.join(map(str, paths))} with TensorRT: {error}; "
            "or run the model with torch (--engine torch)"
        ) from error
