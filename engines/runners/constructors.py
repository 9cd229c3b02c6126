"""The runner of each kind of model: the constructors `load_runner`'s table calls.

Each takes the `Request` (what `load_runner` was asked), refuses engines that
cannot run its kind of model (`require`), and builds the runner; exports and
engines made on the way come from `sleap_live.engines.export`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.engine_table import EXPORT_OPTIONS, GPU_OPTIONS
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.tensorrt import ENGINE_SUFFIXES
from sleap_live.engines.notify import Notify, notice
from sleap_live.engines.runners import devices
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.cpu_runners import CpuRunners
from sleap_live.engines.settings import InferenceSettings, check_exported_settings, with_settings


@attrs.frozen
class Request:
    """What `load_runner` was asked: the model paths, and its arguments."""

    paths: list[Path]
    engine: str
    device: str
    threads: int | None
    cache: Path | None  # the cache root; None with `cache=False`
    progress: Notify
    settings: InferenceSettings | None
    options: dict[str, Any]

    @property
    def gpu(self) -> dict[str, Any]:
        """The GPU options given, as the torch and ONNX runners' keyword arguments."""
        return {name: self.options[name] for name in GPU_OPTIONS if name in self.options}

    @property
    def export_options(self) -> dict[str, Any]:
        return {name: self.options[name] for name in EXPORT_OPTIONS if name in self.options}

    @property
    def cpu(self) -> CpuRunners:
        dirs = tuple(path for path in self.paths if path.is_dir())
        return CpuRunners(self.engine, self.device, self.threads, self.options, self.cache, dirs)


def require(engine: str, needed: str, what: str) -> None:
    """Refuses an engine other than "auto" or `needed` for `what`."""
    if engine not in ("auto", needed):
        raise ValueError(f"{what}; it runs with engine '{needed}', not {engine!r}")


def run_with(runner: Runner, settings: InferenceSettings, origin: str) -> None:
    """Gives `runner` `settings`, or closes it and raises where its graph was built
    with other graph-side settings (`check_exported_settings`)."""
    info = runner.info
    try:
        check_exported_settings(info.model_type, info.settings, settings, origin)
    except ModelConfigError:
        runner.close()
        raise
    runner.info = with_settings(info, settings)
    if runner.metadata is not None:
        runner.metadata = attrs.evolve(runner.metadata, info=runner.info)


def unknown_file(request: Request) -> Runner:
    raise ValueError(
        f"{request.paths[0]}: unknown model file type (expected a sleap-live '.onnx', '.xml' "
        "(OpenVINO) or '.pt' export, or a model directory)"
    )


def openvino_file_runner(request: Request) -> Runner:
    require(request.engine, "openvino", f"{request.paths[0]} is an OpenVINO IR export")
    return request.cpu.openvino(request.paths[0])


def onnx_file_runner(request: Request) -> Runner:
    path, gpu = request.paths[0], request.gpu
    if request.cpu.runs(gpu):
        return request.cpu.runner(path)
    from sleap_live.engines.runners.onnx import OnnxRunner

    require(request.engine, "onnx", f"{path} is an ONNX export")
    providers, options = _onnx_arguments(request, devices.onnx_device(request.device))
    return OnnxRunner(path, providers, intra_op_threads=request.threads, **options)


def torchscript_runner(request: Request) -> Runner:
    from sleap_live.engines.export.torchscript import load_torchscript
    from sleap_live.engines.runners.torch import TorchRunner

    path = request.paths[0]
    require(request.engine, "torch", f"{path} is a TorchScript export")
    model = load_torchscript(path)
    return TorchRunner(
        model,
        devices.torch_device(request.device),
        input_channels=model.metadata.input_channels,
        num_threads=request.threads,
        **_torch_options(request),
    )


def sleap_nn_export_runner(request: Request) -> Runner:
    from sleap_live.engines.runners.sleap_nn_export import SleapNNExportRunner

    path = request.paths[0]
    if request.settings is not None:
        raise ModelConfigError(
            f"{path}: a sleap-nn export directory runs with the settings it was exported "
            "with; give the model directories it was exported from to choose them"
        )
    require(request.engine, "onnx", f"{path} is a sleap-nn export directory")
    if request.gpu.keys() - {"execution_provider"}:
        raise ValueError(f"{path}: a sleap-nn export runs without stream or cuda_graphs options")
    providers, _ = _onnx_arguments(request, devices.onnx_device(request.device))
    return SleapNNExportRunner(path, providers, intra_op_threads=request.threads)


def model_dir_runner(request: Request) -> Runner:
    """The torch model of model directories, or their ONNX export: cached, else made now.

    The graph-side settings are part of the cache key; the host-side ones are
    applied to whichever graph is loaded (`run_with`).
    """
    from sleap_live.engines.export import on_demand
    from sleap_live.engines.load.export_cache import ExportCache

    paths, device, threads = request.paths, request.device, request.threads
    progress = request.progress
    _check_model_dirs(paths)
    settings = request.settings or InferenceSettings()
    if request.engine == "torch" or (request.engine == "auto" and not devices.onnx_can_use(device)):
        progress("loading the torch model")
        from sleap_live.engines.graph.build import load_inference_model
        from sleap_live.engines.runners.torch import TorchRunner

        model = load_inference_model(paths, settings)
        torch_device = devices.torch_device(device)
        return TorchRunner(model, torch_device, num_threads=threads, **_torch_options(request))

    from sleap_live.engines.runners.onnx import OnnxRunner

    export_options = request.export_options
    cache = None if request.cache is None else ExportCache(request.cache, notice)
    specialised = on_demand.SpecialisedGraphExports(
        paths, export_options, cache, progress, settings
    )
    onnx_device = devices.onnx_device(device)
    providers, runner_options = _onnx_arguments(request, onnx_device)

    def onnx_runner(onnx_bytes: bytes) -> Runner:
        if onnx_device != "cpu":
            return OnnxRunner(onnx_bytes, providers, intra_op_threads=threads, **runner_options)
        if request.cpu.int8:  # graphs specialised to a frame shape are float32's
            return request.cpu.runner(onnx_bytes)
        specialised.prepare(export_options.get("verify_frames"))
        if request.cpu.runs(request.gpu):
            return request.cpu.runner(onnx_bytes, specialised)
        return OnnxRunner(
            onnx_bytes,
            providers,
            intra_op_threads=threads,
            specialised=specialised,
            **runner_options,
        )

    runner, cached = on_demand.cached_or_exported(
        paths, export_options, cache, progress, settings, onnx_runner
    )
    if cached and runner.metadata is not None:
        runner.metadata = on_demand.with_sources_here(runner.metadata, paths)
        # The entry may have been made with other host-side settings.
        run_with(runner, settings, ", ".join(map(str, paths)))
    return runner


def torch_compile_runner(request: Request) -> Runner:
    """A `TorchCompileRunner` for model directories (engine "torch-compile")."""
    from sleap_live.engines.graph.build import load_inference_model
    from sleap_live.engines.runners.torch_compile import COMPILE_FOLDER, TorchCompileRunner

    paths = request.paths
    if len(paths) == 1 and paths[0].is_file():
        raise ValueError(
            f"{paths[0]}: engine 'torch-compile' compiles model directories; give the "
            "directories this file was exported from"
        )
    _check_model_dirs(paths)
    request.progress("loading the torch model")
    model = load_inference_model(paths, request.settings or InferenceSettings())
    options = request.options
    return TorchCompileRunner(
        model,
        devices.torch_device(request.device),
        num_threads=request.threads,
        mode=options.get("compile_mode"),
        cache_dir=None if request.cache is None else request.cache / COMPILE_FOLDER,
        progress=request.progress,
        stream=options.get("stream"),
    )


def tensorrt_runner(request: Request) -> Runner:
    """A `TensorRTRunner` for an engine file, a sleap-live `.onnx` or model directories."""
    from sleap_live.engines.export import tensorrt as trt_export
    from sleap_live.engines.export import tensorrt_on_demand as on_demand
    from sleap_live.engines.runners.tensorrt import TensorRTRunner

    paths, options, first = request.paths, request.options, request.paths[0]
    require(request.engine, "tensorrt", f"{first} is a TensorRT engine")
    if len(paths) == 1 and first.is_file() and first.suffix not in (*ENGINE_SUFFIXES, ".onnx"):
        raise ValueError(
            f"{first}: TensorRT runs '.engine' files, sleap-live '.onnx' exports or model "
            "directories"
        )
    trt = trt_export.import_tensorrt()
    cuda = devices.tensorrt_device(request.device)
    run_options: dict[str, Any] = {"device": cuda, "stream": options.get("stream"), "tensorrt": trt}
    if first.suffix in ENGINE_SUFFIXES:
        return TensorRTRunner.from_engine_file(first, **run_options)

    gpu = trt_export.current_gpu(cuda)
    precision = options.get("precision", "fp32")
    batch_size = int(options.get("batch_size", trt_export.DEFAULT_BATCH_SIZE))
    given = options.get("engine_cache")
    if first.suffix == ".onnx":  # its engines go beside it
        directory = None if request.cache is None else Path(given or first.parent)
        metadata, engines = on_demand.onnx_file_engines(
            first, directory, trt, gpu, precision, batch_size
        )
        return TensorRTRunner(metadata.info, metadata.input_channels, engines, **run_options)

    from sleap_live.engines.load.dirs import is_sleap_nn_export_dir

    if len(paths) == 1 and is_sleap_nn_export_dir(first):
        raise ValueError(
            f"{first} is a sleap-nn export directory; it runs with engine 'onnx'; for "
            "TensorRT, give the model directories it was exported from"
        )
    _check_model_dirs(paths)
    root = request.cache
    directory = None if root is None else Path(given or root / on_demand.TENSORRT_FOLDER)
    info, engines = on_demand.model_dir_engines(
        paths,
        request.settings,
        request.export_options,
        directory,
        trt,
        gpu,
        precision,
        batch_size,
        options.get("frame_size"),
        request.progress,
    )
    return TensorRTRunner(info, (info.input_channels,), engines, **run_options)


def _check_model_dirs(paths: list[Path]) -> None:
    from sleap_live.engines.load.dirs import CHECKPOINT, TRAINING_CONFIG

    for path in paths:
        if not path.is_dir():
            raise ValueError(
                f"{path}: expected a model directory ({TRAINING_CONFIG} and {CHECKPOINT}) "
                f"alongside {paths[0]}"
            )


def _onnx_arguments(request: Request, device: str) -> tuple[list[Any], dict[str, Any]]:
    """ONNX Runtime's providers for `device`, and the runner's stream and graph options."""
    from sleap_live.engines.runners.onnx_session import ort_tensorrt_cache_dir, providers_for

    gpu = request.gpu
    runner = {name: value for name, value in gpu.items() if name != "execution_provider"}
    provider = gpu.get("execution_provider", "cuda")
    if request.cache is None:
        return providers_for(device, provider, trt_cache=False), runner
    trt_cache = ort_tensorrt_cache_dir(request.cache)
    return providers_for(device, provider, trt_cache_dir=trt_cache), runner


def _torch_options(request: Request) -> dict[str, Any]:
    if "execution_provider" in request.gpu:
        raise ValueError("execution_provider is an ONNX Runtime option; torch runs without it")
    return request.gpu
