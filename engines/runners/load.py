"""`load_runner`: one entry point from whatever model the user has to a `Runner`.

The kind of model given picks its runner's constructor (`RUNNERS`, in
`sleap_live.engines.runners.constructors`); which engines run each kind, and the
options, precisions and devices of each, are the engine table's
(`sleap_live.engines.engine_table`).

"auto" runs ONNX Runtime on the CPU (or OpenVINO where it measured faster, see
`runners.cpu_choice`) and on a GPU with onnxruntime-gpu, torch on a GPU otherwise.
Model directories run with ONNX Runtime are exported first, verified on the frames
of `verify_frames` in which the torch model finds animals (with a one-line note
where it finds none; `sleap_live.engines.export.frames`) and kept in the export
cache, and on the CPU each
frame shape gets a graph specialised to it (`sleap_live.engines.export.on_demand`);
TensorRT engines are built for each frame size and cached
(`sleap_live.engines.export.tensorrt_on_demand`); torch-compile compiles each batch
shape's specialised graph with inductor and keeps its caches
(`sleap_live.engines.runners.torch_compile`). Every artifact goes under one
cache root (`sleap_live.engines.cache.cache_root`; `cache=False` keeps nothing).
"auto" picks the engine before anything is loaded and never changes it: an export
that fails or does not verify is an `ExportError`, not a quiet switch to torch.
`.onnx` files and sleap-nn export directories load without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sleap_live.engines import engine_table
from sleap_live.engines.cache import cache_root
from sleap_live.engines.engine_table import ENGINES, FP32, INT8
from sleap_live.engines.errors import ModelNotFoundError
from sleap_live.engines.export.tensorrt import ENGINE_SUFFIXES
from sleap_live.engines.load_options import LoadOptions
from sleap_live.engines.notify import Notify, quiet
from sleap_live.engines.openmp import prefer_passive_wait
from sleap_live.engines.runners import constructors as make
from sleap_live.engines.runners import devices
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.compile_modes import COMPILE_MODES
from sleap_live.engines.runners.constructors import Request
from sleap_live.engines.settings import InferenceSettings

__all__ = ["COMPILE_MODES", "ENGINES", "ENGINE_SUFFIXES", "RUNNERS", "load_runner"]

# The models ONNX Runtime runs at int8 (`sleap_live.engines.runners.int8`).
INT8_KINDS = (".onnx", "model directories")

# The runner of each kind of model (`_kind`); each refuses the engines that cannot run it.
RUNNERS: dict[str, Callable[[Request], Runner]] = {
    "tensorrt": make.tensorrt_runner,  # engine "tensorrt" (any model), or an engine file
    "torch-compile": make.torch_compile_runner,  # engine "torch-compile", model directories
    ".xml": make.openvino_file_runner,
    ".onnx": make.onnx_file_runner,
    ".pt": make.torchscript_runner,
    "other file": make.unknown_file,
    "sleap-nn export": make.sleap_nn_export_runner,
    "model directories": make.model_dir_runner,
}


def load_runner(
    paths: str | Path | Sequence[str | Path],
    *,
    engine: str = "auto",
    device: str = "auto",
    threads: int | None = None,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    progress: Notify | None = None,
    settings: InferenceSettings | None = None,
    **options: Any,
) -> Runner:
    """Loads a model and returns a `Runner` for it.

    Args:
        paths: one path, or a list of one or two (see the module docstring).
        engine: one of `ENGINES`.
        device: "auto" (a CUDA GPU when one can be used, else the CPU), "cpu",
            "cuda" or "cuda:N".
        threads: CPU threads per operator (torch's `num_threads`, ONNX Runtime's
            `intra_op_threads`); None keeps the engine's default (one per core).
        cache: read and write exports, specialised graphs, compiled models,
            engines and the CPU engine choice in the cache root; False makes them
            in memory for this run and neither reads nor writes the cache.
        cache_dir: the cache root (default: `cache_root()`).
        progress: told, in one line, what a slow step is doing (loading the torch
            model, exporting, verifying, building an engine), for a status display.
        settings: the inference settings (`InferenceSettings`). Model directories
            are built with them (default: sleap-nn predict's); an export runs with
            the settings it was made with, or with these where they differ only in
            what is applied on the host (bottom-up grouping): graph-side ones that
            differ are refused, saying to re-export. A sleap-nn export directory
            takes none.
        **options: `opset`, `verify` and `verify_frames` of the in-memory export;
            for TensorRT, `frame_size` ((height, width[, channels]): build now, not
            on the first batch), `batch_size` (default 8), `precision` ("fp32" or
            "fp16"), `engine_cache` (a directory) and `stream`; for OpenVINO,
            `precision` ("fp32" or "bf16"); for ONNX Runtime (and "auto") on the
            CPU, `precision` "int8" quantises the networks of an `.onnx` export or
            model directories (`sleap_live.engines.runners.int8`; fp32 runs instead
            where int8 measures slower or further off than documented, unless
            `keep_int8=True`); for
            torch-compile, `compile_mode` (a `torch.compile` mode; default
            "reduce-overhead" on CUDA, "default" on the CPU) and `stream`;
            on a GPU with torch or ONNX Runtime, `stream`, `cuda_graphs` (torch;
            ONNX Runtime says in one line that it does not offer them and runs
            without) and (ONNX Runtime) `execution_provider` ("cuda" or "tensorrt").

    Raises:
        ValueError, TypeError: an unknown engine, device or option, or an engine
            that cannot run this kind of model.
        ModelNotFoundError, ModelConfigError, CheckpointError: the model cannot be read.
        RuntimeUnavailableError: the engine or device is not available.
        ExportError: an export that fails or does not verify; the message says to
            run with `--engine torch` or skip the verification instead.
    """
    LoadOptions(engine, device, threads, cache, cache_dir, settings, options)  # checks them
    models = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    _check_models(models)
    prefer_passive_wait()  # before any engine loads torch (see `sleap_live.engines.openmp`)
    root = cache_root(cache_dir) if cache else None
    request = Request(models, engine, device, threads, root, progress or quiet, settings, options)
    kind = _kind(request)
    if engine in ("auto", "onnx"):
        _check_onnx_precision(request, kind)
    runner = RUNNERS[kind](request)
    if settings is not None:
        make.run_with(runner, settings, ", ".join(map(str, models)))
    return runner


def _check_models(models: list[Path]) -> None:
    if not 1 <= len(models) <= 3:
        raise ValueError(
            "give one model, two model directories for top-down, or three for top-down "
            f"with an embedding model; got {len(models)} paths"
        )
    for path in models:
        if not path.exists():
            raise ModelNotFoundError(f"{path}: no such model file or directory")


def _check_onnx_precision(request: Request, kind: str) -> None:
    """Engines "auto" and "onnx" take precision "fp32", or "int8" for a sleap-live
    `.onnx` export or model directories on the CPU."""
    precision = request.options.get("precision", FP32)
    precisions = engine_table.engine("onnx").precisions
    if precision not in precisions:
        raise ValueError(
            f"precision {precision!r} with engine {request.engine!r}: ONNX Runtime runs "
            f"{' or '.join(precisions)} (bf16 runs with engine 'openvino', fp16 with "
            "'tensorrt')"
        )
    if precision != INT8:
        if request.options.get("keep_int8"):
            raise ValueError("keep_int8 is an option of precision 'int8'")
        return
    if kind not in INT8_KINDS:
        raise ValueError(
            f"{request.paths[0]}: precision int8 quantises sleap-live '.onnx' exports and "
            "model directories"
        )
    if request.gpu or devices.onnx_device(request.device) != "cpu":
        raise ValueError("precision int8 runs on the CPU (device 'cpu'), without GPU options")


def _kind(request: Request) -> str:
    """The row of `RUNNERS` the model given is."""
    from sleap_live.engines.load.dirs import is_sleap_nn_export_dir

    first, alone = request.paths[0], len(request.paths) == 1
    if request.engine == "tensorrt" or (alone and first.suffix in ENGINE_SUFFIXES):
        return "tensorrt"
    if request.engine == "torch-compile":
        return "torch-compile"
    if alone and first.is_file():
        return first.suffix if first.suffix in RUNNERS else "other file"
    if alone and is_sleap_nn_export_dir(first):
        return "sleap-nn export"
    return "model directories"
