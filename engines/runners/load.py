"""`load_runner`: one entry point from whatever model the user has to a `Runner`.

Accepted models:

- one or two sleap-nn model directories (a top-down model is a centroid directory
  and a centered-instance directory, given together in any order);
- a sleap-live ONNX export (`.onnx`) or TorchScript export (`.pt`);
- a directory written by `sleap-nn export` (`export_metadata.json` + `model.onnx`);
- a sleap-live TensorRT engine file (`.engine`/`.plan`), which runs alone.

Engines: "torch" runs the torch inference model (eager, or the TorchScript
export); "onnx" runs ONNX Runtime, exporting model directories to an ONNX graph
first, verified on frames with animals (`verify_frames`, e.g. the first frames of
the video about to be run; see `sleap_live.engines.export.frames` for where frames
come from otherwise) and kept in the export cache, from which later runs load it
without building the torch model or importing torch
(`sleap_live.engines.load.export_cache`; `cache=False` exports in memory only).
On the CPU, each frame shape also gets a graph specialised to it (`StaticGraphs`,
cached the same way, made while loading for the shape of `verify_frames`), which
the runner uses once it matched the general graph bit for bit
(`sleap_live.engines.runners.specialise`). "auto" picks ONNX Runtime on the CPU (it
ran the toy models faster than eager torch, see scripts/bench_engines.py) and on
a GPU when `onnxruntime-gpu` is installed, torch otherwise. "tensorrt" runs a
TensorRT engine on a CUDA GPU: an engine file as it is, or engines built from an
ONNX export (cached beside it) or from model directories (exported in memory,
cached in `default_cache_dir()` or `engine_cache`), for frames of `frame_size` at
once, or for each new frame size on its first batch (see `sleap_live.engines.export.tensorrt`).

"auto" picks the engine before anything is loaded and never changes it: an
export that fails or does not verify is an `ExportError`, not a quiet switch to
torch. `.onnx` files and sleap-nn export directories load without importing
torch (with `device="auto"`, the CUDA driver itself is asked whether a GPU is there).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.errors import (
    EngineError,
    ExportError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.load.export_cache import (
    CacheKey,
    ExportCache,
    Notify,
    cache_key,
    default_cache_dir,
    embedded_key,
    notice,
    with_embedded_key,
)
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.specialise import FrameShape, ShapeGraphs
from sleap_live.engines.settings import (
    InferenceSettings,
    check_exported_settings,
    check_slots,
    with_settings,
)

# Told what a slow step of loading is doing, in one line.
Progress = Notify

# `.engine`/`.plan`: TensorRT engine files (`sleap_live.engines.export.tensorrt`).
ENGINE_SUFFIXES = (".engine", ".plan")

ENGINES = ("auto", "torch", "onnx", "openvino", "tensorrt")
DEVICES = ("auto", "cpu", "cuda")
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N a GPU index)"
# Options of the in-memory ONNX export of model directories (engine "onnx").
EXPORT_OPTIONS = ("opset", "verify", "verify_frames")
# Options of engine "tensorrt" (see `_tensorrt_runner`).
TENSORRT_OPTIONS = ("frame_size", "batch_size", "precision", "engine_cache", "stream")
# Options of engine "openvino" (see `OpenVINORunner`).
OPENVINO_OPTIONS = ("precision",)
# GPU options of engines "torch" and "onnx" (see `_gpu_options`).
GPU_OPTIONS = ("stream", "cuda_graphs", "execution_provider")


def load_runner(
    paths: str | Path | Sequence[str | Path],
    *,
    engine: str = "auto",
    device: str = "auto",
    threads: int | None = None,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    settings: InferenceSettings | None = None,
    **options: Any,
) -> Runner:
    """Loads a model and returns a `Runner` for it.

    Args:
        paths: one path, or a list of one or two (see the module docstring).
        engine: "auto", "torch", "onnx" or "tensorrt".
        device: "auto" (a CUDA GPU when one can be used, else the CPU), "cpu",
            "cuda" or "cuda:N".
        threads: CPU threads per operator for whichever engine runs (torch's
            `num_threads`, ONNX Runtime's `intra_op_threads`); None keeps the
            engine's default (one per physical core).
        cache: model directories run with ONNX Runtime: load their export from
            the export cache, exporting (and caching) it only when it is not there
            (see `sleap_live.engines.load.export_cache`); False exports in memory
            and neither reads nor writes the cache.
        cache_dir: sleap-live's cache directory (default: `default_cache_dir()`).
        progress: called with one line saying what a slow step is doing (loading
            the torch model, exporting, verifying), for a status display.
        settings: the inference settings (`InferenceSettings`). Model directories
            are built with them (default: sleap-nn predict's); an export runs with
            the settings it was made with (default), or with these where they
            differ only in what is applied on the host (bottom-up grouping):
            graph-side ones that differ are refused, saying to re-export. The
            runner's `info.settings` are those it runs with.
        **options: for model directories run with ONNX Runtime or TensorRT,
            `opset`, `verify` and `verify_frames` of the in-memory export (see
            `export_onnx_bytes`); for TensorRT, `frame_size` ((height, width) or
            (height, width, channels): build the engine now rather than on the
            first batch), `batch_size` (the throughput profile's, default 8),
            `precision` ("fp32" or "fp16"), `engine_cache` (a directory) and
            `stream` (the `torch.cuda.Stream` runs enqueue on). On a GPU with
            torch or ONNX Runtime: `stream` likewise, `cuda_graphs` (capture
            fixed-shape runs as CUDA graphs) and, for ONNX Runtime,
            `execution_provider` ("cuda" or "tensorrt", ONNX Runtime's TensorRT
            provider with its engine cache).

    Returns:
        A `TorchRunner`, `OnnxRunner`, `SleapNNExportRunner` or `TensorRTRunner`.

    Raises:
        ValueError: unknown engine or device, or an engine that cannot run this
            kind of model.
        ModelNotFoundError, ModelConfigError, CheckpointError: the model cannot
            be read.
        RuntimeUnavailableError: the engine or device is not available.
        ExportError: model directories run with ONNX Runtime ("onnx", or "auto"
            on the CPU) whose export fails or does not verify; the message says
            to run with `--engine torch` or skip the verification instead.
        ModelConfigError: `settings` that an export was not built with, or any
            for a sleap-nn export directory.
    """
    runner = _load(paths, engine, device, threads, cache, cache_dir, progress, settings, options)
    if settings is not None:
        _run_with(runner, settings, ", ".join(map(str, _paths(paths))))
    return runner


def _paths(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    return [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]


def _run_with(runner: Runner, settings: InferenceSettings, origin: str) -> None:
    """Gives `runner` `settings`, or closes it and raises where its graph was built
    with other graph-side settings (`check_exported_settings`)."""
    info = runner.info
    try:
        check_exported_settings(info.model_type, info.settings, settings, origin)
    except ModelConfigError:
        runner.close()
        raise
    runner.info = with_settings(info, settings)
    metadata = getattr(runner, "metadata", None)
    if metadata is not None:
        runner.metadata = attrs.evolve(metadata, info=runner.info)  # type: ignore[attr-defined]


def _load(
    paths: str | Path | Sequence[str | Path],
    engine: str,
    device: str,
    threads: int | None,
    cache: bool,
    cache_dir: str | Path | None,
    progress: Progress | None,
    settings: InferenceSettings | None,
    options: dict[str, Any],
) -> Runner:
    models = _paths(paths)
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (expected one of {ENGINES})")
    if not is_device(device):
        raise ValueError(f"unknown device {device!r} (expected {DEVICE_FORMS})")
    if not 1 <= len(models) <= 2:
        raise ValueError(
            f"give one model, or two model directories for top-down; got {len(models)} paths"
        )
    engine_options = {"tensorrt": TENSORRT_OPTIONS, "openvino": OPENVINO_OPTIONS}
    known = (*EXPORT_OPTIONS, *engine_options.get(engine, GPU_OPTIONS))
    unknown = set(options) - set(known)
    if unknown:
        raise TypeError(f"load_runner got unknown options {sorted(unknown)}")
    for path in models:
        if not path.exists():
            raise ModelNotFoundError(f"{path}: no such model file or directory")

    first = models[0]
    if engine == "tensorrt" or (len(models) == 1 and first.suffix in ENGINE_SUFFIXES):
        _require(engine, "tensorrt", f"{first} is a TensorRT engine")
        return _tensorrt_runner(models, device, options, settings)
    gpu = _gpu_options(options)
    cpu = _CpuRunners(
        engine, device, threads, options, Path(cache_dir or default_cache_dir()) if cache else None
    )
    if len(models) == 1 and first.is_file():
        if first.suffix == ".xml":
            _require(engine, "openvino", f"{first} is an OpenVINO IR export")
            return cpu.openvino(first)
        if first.suffix == ".onnx":
            return _onnx_file_runner(first, engine, device, threads, gpu, cpu)
        if first.suffix == ".pt":
            return _torchscript_runner(first, engine, device, threads, gpu)
        raise ValueError(
            f"{first}: unknown model file type (expected a sleap-live '.onnx', '.xml' (OpenVINO) "
            "or '.pt' export, or a model directory)"
        )
    from sleap_live.engines.load.dirs import is_sleap_nn_export_dir

    if len(models) == 1 and is_sleap_nn_export_dir(first):
        if settings is not None:
            raise ModelConfigError(
                f"{first}: a sleap-nn export directory runs with the settings it was exported "
                "with; give the model directories it was exported from to choose them"
            )
        return _sleap_nn_export_runner(first, engine, device, threads, gpu)
    _check_model_dirs(models)
    export_options = {name: options[name] for name in EXPORT_OPTIONS if name in options}
    caching = ExportCache(cache_dir or default_cache_dir(), notice) if cache else None
    return _model_dir_runner(
        models,
        engine,
        device,
        threads,
        export_options,
        gpu,
        caching,
        progress or _quiet,
        cpu,
        settings or InferenceSettings(),
    )


def _gpu_options(options: dict[str, Any]) -> dict[str, Any]:
    """The GPU options given, as the torch and ONNX runners' keyword arguments."""
    return {name: options[name] for name in GPU_OPTIONS if name in options}


def _onnx_arguments(device: str, gpu: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """ONNX Runtime's providers for `device`, and the runner's stream and graph options."""
    from sleap_live.engines.runners.onnx import providers_for

    runner = {name: value for name, value in gpu.items() if name != "execution_provider"}
    return providers_for(device, gpu.get("execution_provider", "cuda")), runner


def _check_model_dirs(paths: list[Path]) -> None:
    from sleap_live.engines.load.dirs import CHECKPOINT, TRAINING_CONFIG

    first = paths[0]
    for path in paths:
        if not path.is_dir():
            raise ValueError(
                f"{path}: expected a model directory ({TRAINING_CONFIG} and {CHECKPOINT}) "
                f"alongside {first}"
            )


def _onnx_file_runner(
    path: Path, engine: str, device: str, threads: int | None, gpu: dict[str, Any], cpu: _CpuRunners
) -> Runner:
    if cpu.runs(gpu):
        return cpu.runner(path)
    from sleap_live.engines.runners.onnx import OnnxRunner

    _require(engine, "onnx", f"{path} is an ONNX export")
    providers, runner = _onnx_arguments(_onnx_device(device), gpu)
    return OnnxRunner(path, providers, intra_op_threads=threads, **runner)


@attrs.frozen
class _CpuRunners:
    """Engine "openvino", and "auto" on the CPU (ONNX Runtime unless OpenVINO measured faster).

    Attributes:
        engine, device, threads: as given to `load_runner`.
        options: `load_runner`'s options (`precision`; `verify_frames` to check bf16
            and to time the CPU engines on, see `sleap_live.engines.runners.cpu_choice`).
        cache_dir: sleap-live's cache directory (OpenVINO's compiled models, the
            auto choice), or None with `cache=False`.
    """

    engine: str
    device: str
    threads: int | None
    options: dict[str, Any]
    cache_dir: Path | None

    def runs(self, gpu: dict[str, Any]) -> bool:
        """Whether this picks the runner: engine "openvino", or "auto" on the CPU."""
        if self.engine == "openvino":
            if self.device not in ("auto", "cpu") or gpu:
                raise ValueError("OpenVINO runs on the CPU (--device cpu), without GPU options")
            return True
        return self.engine == "auto" and not gpu and _onnx_device(self.device) == "cpu"

    def runner(self, model: Path | bytes, specialised: ShapeGraphs | None = None) -> Any:
        """An `OpenVINORunner` (engine "openvino"), or auto's choice on the CPU.

        `specialised`: the ONNX Runtime runner's static graphs (see `OnnxRunner`).
        """
        if self.engine == "openvino":
            return self.openvino(model)
        from sleap_live.engines.runners.cpu_choice import choose_cpu_runner
        from sleap_live.engines.runners.onnx import OnnxRunner

        return choose_cpu_runner(
            model,
            lambda: OnnxRunner(model, intra_op_threads=self.threads, specialised=specialised),
            lambda: self.openvino(model),
            frames=self.options.get("verify_frames"),
            threads=self.threads,
            cache_dir=self.cache_dir,
        )

    def openvino(self, model: Path | bytes) -> Any:
        from sleap_live.engines.runners.openvino import OpenVINORunner

        return OpenVINORunner(
            model,
            precision=self.options.get("precision", "fp32"),
            threads=self.threads,
            check_frames=self.options.get("verify_frames"),
            cache_dir=None if self.cache_dir is None else self.cache_dir / "openvino",
        )


def _torchscript_runner(
    path: Path, engine: str, device: str, threads: int | None, gpu: dict[str, Any]
) -> Runner:
    from sleap_live.engines.export.torchscript import load_torchscript
    from sleap_live.engines.runners.torch import TorchRunner

    _require(engine, "torch", f"{path} is a TorchScript export")
    model = load_torchscript(path)
    return TorchRunner(
        model,
        _torch_device(device),
        input_channels=model.metadata.input_channels,
        num_threads=threads,
        **_torch_options(gpu),
    )


def _sleap_nn_export_runner(
    path: Path, engine: str, device: str, threads: int | None, gpu: dict[str, Any]
) -> Runner:
    from sleap_live.engines.runners.sleap_nn_export import SleapNNExportRunner

    _require(engine, "onnx", f"{path} is a sleap-nn export directory")
    if gpu.keys() - {"execution_provider"}:
        raise ValueError(f"{path}: a sleap-nn export runs without stream or cuda_graphs options")
    providers, _ = _onnx_arguments(_onnx_device(device), gpu)
    return SleapNNExportRunner(path, providers, intra_op_threads=threads)


def _model_dir_runner(
    paths: list[Path],
    engine: str,
    device: str,
    threads: int | None,
    export_options: dict[str, Any],
    gpu: dict[str, Any],
    cache: ExportCache | None,
    progress: Progress,
    cpu: _CpuRunners,
    settings: InferenceSettings,
) -> Runner:
    """The torch model of model directories, or their ONNX export: cached, else made now.

    The graph-side settings are part of the cache key; the host-side ones are
    applied to whichever graph is loaded (`load_runner`).
    """
    if engine == "torch" or (engine == "auto" and not _onnx_can_use(device)):
        progress("loading the torch model")
        from sleap_live.engines.graph.build import load_inference_model
        from sleap_live.engines.runners.torch import TorchRunner

        model = load_inference_model(paths, settings)
        return TorchRunner(model, _torch_device(device), num_threads=threads, **_torch_options(gpu))

    from sleap_live.engines.runners.onnx import OnnxRunner

    onnx_device = _onnx_device(device)
    providers, runner_options = _onnx_arguments(onnx_device, gpu)
    static = StaticGraphs(paths, export_options, cache, progress, settings)
    frames = export_options.get("verify_frames")

    def onnx_runner(onnx_bytes: bytes) -> OnnxRunner:
        if onnx_device != "cpu":
            return OnnxRunner(onnx_bytes, providers, intra_op_threads=threads, **runner_options)
        if isinstance(frames, np.ndarray) and frames.ndim == 4:
            # Made while loading rather than on the first batch, which a camera waits for.
            shape = (int(frames.shape[1]), int(frames.shape[2]), int(frames.shape[3]))
            try:
                static.graph(shape)
            except EngineError as error:
                notice(f"no graph specialised to the frames' shape ({error})")
        if cpu.runs(gpu):
            return cpu.runner(onnx_bytes, static)
        return OnnxRunner(
            onnx_bytes, providers, intra_op_threads=threads, specialised=static, **runner_options
        )

    key = None if cache is None else cache_key(paths, export_options, settings=settings)
    if cache is None or key is None:
        return onnx_runner(
            _exported_onnx(paths, export_options, progress, "exporting model", settings)
        )
    cached = cache.read(key)
    if cached is not None:
        try:
            runner = onnx_runner(cached)
        except ModelConfigError as error:  # ONNX Runtime cannot load it, or its metadata is off
            cache.discard(key, f"not loadable ({error})")
        else:
            if embedded_key(runner.metadata) == key.digest:
                _name_sources_here(runner, paths)
                # The entry may have been made with other host-side settings.
                _run_with(runner, settings, ", ".join(map(str, paths)))
                return runner
            runner.close()
            cache.discard(key, "keyed differently in its own metadata")
    headline = "exporting model (first run, cached for next time)"
    onnx_bytes = with_embedded_key(
        _exported_onnx(paths, export_options, progress, headline, settings), key
    )
    cache.write(key, onnx_bytes)
    return onnx_runner(onnx_bytes)


def _name_sources_here(runner: Any, paths: list[Path]) -> None:
    """Point a cached export's source records at the model folders given now.

    The cache is keyed by the models' bytes, not their folders, so a copy of a model
    elsewhere hits the entry its first export wrote, which names that export's
    folders; what a run records as its models (the outputs' provenance) must be
    these ones.
    """
    from sleap_live.engines.load.dirs import TRAINING_CONFIG

    here = {}
    for path in paths:
        config = path / TRAINING_CONFIG
        if config.is_file():
            here[hashlib.sha256(config.read_bytes()).hexdigest()] = str(path.resolve())
    sources = tuple(
        {**source, "path": here.get(source.get("sha256"), source.get("path"))}
        for source in runner.metadata.sources
    )
    runner.metadata = attrs.evolve(runner.metadata, sources=sources)


def _exported_onnx(
    paths: list[Path],
    export_options: dict[str, Any],
    progress: Progress,
    headline: str,
    settings: InferenceSettings,
) -> bytes:
    """The model directories' in-memory ONNX export, each step told to `progress`."""
    progress(f"{headline}: loading the torch model")
    from sleap_live.engines.export import export_onnx_bytes
    from sleap_live.engines.graph.build import load_inference_model

    model = load_inference_model(paths, settings)
    try:
        return export_onnx_bytes(
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


class StaticGraphs:
    """Static graphs of model directories (`ShapeGraphs`): from the export cache, else exported.

    A static graph is keyed by the model directories (see `cache_key`), the
    opset and the frame shape (`static_frame_shape`); it is never verified
    against torch (`OnnxRunner` checks it against the dynamic graph instead), so
    the dynamic graph's verification options are not part of its key. The torch
    model is built once, for the first graph that is not cached. A rejected graph
    is removed from the cache (the runner says why).

    Args:
        paths: the model directories.
        export_options: the dynamic graph's export options (`EXPORT_OPTIONS`).
        cache: the export cache, or None not to cache.
        progress: told what a slow step is doing.
        settings: the inference settings the graphs are built with (in their key).
    """

    def __init__(
        self,
        paths: list[Path],
        export_options: dict[str, Any],
        cache: ExportCache | None,
        progress: Progress,
        settings: InferenceSettings | None = None,
    ) -> None:
        self._settings = InferenceSettings() if settings is None else settings
        self._paths = paths
        self._options = export_options
        self._cache = cache
        self._progress = progress
        self._graphs: dict[FrameShape, bytes] = {}
        self._failures: dict[FrameShape, EngineError] = {}
        self._model: Any = None

    def key(self, shape: FrameShape) -> CacheKey | None:
        """The cache key of the static graph for `shape`."""
        options = {name: self._options[name] for name in ("opset",) if name in self._options}
        keyed = {**options, "static_frame_shape": list(shape)}
        return cache_key(self._paths, keyed, settings=self._settings)

    def graph(self, shape: FrameShape) -> bytes:
        """The static graph for `shape` (see `ShapeGraphs`).

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

    def reject(self, shape: FrameShape, reason: str) -> None:
        """Forgets the graph for `shape` and removes it from the cache."""
        del reason  # the runner tells it
        self._graphs.pop(shape, None)
        key = None if self._cache is None else self.key(shape)
        if key is not None and self._cache is not None:
            self._cache.remove(key)

    def _exported(self, shape: FrameShape, key: CacheKey | None) -> bytes:
        from sleap_live.engines.export import export_static_onnx_bytes
        from sleap_live.engines.graph.build import load_inference_model

        height, width, channels = shape
        headline = f"specialising the model to {width}x{height}x{channels} frames"
        if self._model is None:
            self._progress(f"{headline}: loading the torch model")
            self._model = load_inference_model(self._paths, self._settings)
        graph = export_static_onnx_bytes(
            self._model,
            shape,
            sources=self._paths,
            progress=lambda step: self._progress(f"{headline}: {step}"),
            **{name: self._options[name] for name in ("opset",) if name in self._options},
        )
        if key is not None and self._cache is not None:
            graph = with_embedded_key(graph, key)
            self._cache.write(key, graph)
        return graph


def _quiet(step: str) -> None:
    del step


def _torch_options(gpu: dict[str, Any]) -> dict[str, Any]:
    if "execution_provider" in gpu:
        raise ValueError("execution_provider is an ONNX Runtime option; torch runs without it")
    return gpu


def _tensorrt_runner(
    paths: list[Path], device: str, options: dict[str, Any], settings: InferenceSettings | None
) -> Runner:
    """A `TensorRTRunner` for an engine file, a sleap-live `.onnx` or model directories."""
    from sleap_live.engines.export import tensorrt as trt_export
    from sleap_live.engines.runners.tensorrt import TensorRTRunner

    first = paths[0]
    if len(paths) == 1 and first.is_file() and first.suffix not in (*ENGINE_SUFFIXES, ".onnx"):
        raise ValueError(
            f"{first}: TensorRT runs '.engine' files, sleap-live '.onnx' exports or model "
            "directories"
        )
    trt = trt_export.import_tensorrt()
    cuda = _tensorrt_device(device)
    run_options: dict[str, Any] = {"device": cuda, "stream": options.get("stream"), "tensorrt": trt}
    if first.suffix in ENGINE_SUFFIXES:
        return TensorRTRunner.from_engine_file(first, **run_options)

    gpu = trt_export.current_gpu(cuda)
    precision = options.get("precision", "fp32")
    batch_size = int(options.get("batch_size", trt_export.DEFAULT_BATCH_SIZE))
    frame_size = options.get("frame_size")
    if first.suffix == ".onnx":
        model = trt_export.read_onnx_model(first)
        directory = Path(options.get("engine_cache") or first.parent)
        cache = trt_export.EngineCache(directory, model, first.stem, trt, gpu, precision)
        fixed = (model.metadata.tensorrt or {}).get("frame_shape")
        if fixed is not None:  # a "tensorrt" profile graph: one frame size, built now
            cache.engine(tuple(fixed), batch_size)
        metadata = model.metadata
        return TensorRTRunner(
            metadata.info,
            metadata.input_channels,
            lambda frame: cache.engine(frame, batch_size),
            **run_options,
        )

    from sleap_live.engines.graph.build import load_inference_model
    from sleap_live.engines.load.dirs import is_sleap_nn_export_dir

    if len(paths) == 1 and is_sleap_nn_export_dir(first):
        raise ValueError(
            f"{first} is a sleap-nn export directory; it runs with engine 'onnx'; for "
            "TensorRT, give the model directories it was exported from"
        )
    _check_model_dirs(paths)
    inference_model = load_inference_model(paths, settings)
    # Said now, not at the first batch, which is when the engine would be built.
    check_slots(inference_model.info.model_type, inference_model.info.max_instances)
    export_options = {name: options[name] for name in EXPORT_OPTIONS if name in options}
    directory = Path(options.get("engine_cache") or trt_export.default_cache_dir())
    caches: dict[tuple[int, int, int], Any] = {}

    def engine_for(frame: tuple[int, int, int]) -> Any:
        """Exports the model for this frame size (once) and gets its engine."""
        if frame not in caches:
            onnx_bytes = _tensorrt_onnx_bytes(inference_model, paths, frame, export_options)
            model = trt_export.read_onnx_model(onnx_bytes)
            caches[frame] = trt_export.EngineCache(
                directory, model, model.sha256[:16], trt, gpu, precision
            )
        return caches[frame].engine(frame, batch_size)

    info = inference_model.info
    if frame_size is not None:
        height, width, *channels = (int(n) for n in frame_size)
        engine_for((height, width, channels[0] if channels else info.input_channels))
    return TensorRTRunner(info, (info.input_channels,), engine_for, **run_options)


def _tensorrt_onnx_bytes(
    model: Any, paths: list[Path], frame: tuple[int, int, int], export_options: dict[str, Any]
) -> bytes:
    """The in-memory "tensorrt" profile export of model directories for one frame size."""
    from sleap_live.engines.export import export_onnx_bytes

    try:
        return export_onnx_bytes(
            model, sources=paths, profile="tensorrt", frame_size=frame[:2], **export_options
        )
    except ExportError as error:
        raise ExportError(
            f"cannot run {', '.join(map(str, paths))} with TensorRT: {error}; "
            "or run the model with torch (--engine torch)"
        ) from error


def is_device(device: str) -> bool:
    """Whether `device` is one of `DEVICE_FORMS`: "auto", "cpu", "cuda" or "cuda:N"."""
    kind, colon, index = device.partition(":")
    if not colon:
        return kind in DEVICES
    return kind == "cuda" and index.isascii() and index.isdigit()


def _tensorrt_device(device: str) -> str:
    """The CUDA device TensorRT runs on ("cuda:N"); one-line errors where there is none."""
    if device == "cpu":
        raise ValueError("TensorRT runs on a CUDA GPU; on the CPU use --engine onnx or torch")
    if not _gpu_present():
        raise RuntimeUnavailableError(
            "no CUDA GPU found (TensorRT needs an NVIDIA GPU and its driver); "
            "on the CPU use --engine onnx"
        )
    if device in ("auto", "cuda"):
        return "cuda:0"
    return device


def _require(engine: str, needed: str, what: str) -> None:
    if engine not in ("auto", needed):
        raise ValueError(f"{what}; it runs with engine '{needed}', not {engine!r}")


def _torch_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _onnx_device(device: str) -> str:
    """The ONNX Runtime device: "auto" means CUDA only if onnxruntime-gpu can use it."""
    if device != "auto":
        return device
    return "cuda" if _ort_has_cuda() and _gpu_present() else "cpu"


def _onnx_can_use(device: str) -> bool:
    """Whether ONNX Runtime can run on `device` ("auto": on the device auto picks)."""
    if device == "cpu":
        return True
    if device == "auto":
        return _ort_has_cuda() or not _gpu_present()
    return _ort_has_cuda()


def _ort_has_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def _gpu_present() -> bool:
    """Whether a CUDA GPU is usable, asked of the driver itself.

    A ctypes call into the CUDA driver rather than `torch.cuda`, so that a run of
    an ONNX export never loads torch (and a host without torch still finds its GPU).
    """
    import ctypes
    import sys

    library = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        driver = ctypes.CDLL(library)
    except OSError:
        return False
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0
