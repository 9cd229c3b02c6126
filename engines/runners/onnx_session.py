"""ONNX Runtime sessions for sleap-live's runners: execution providers and their options.

Torch-free: the CPU path and a torch-free GPU deployment import only onnxruntime
and numpy. Provider options are ONNX Runtime's documented names (CUDA and TensorRT
execution providers); `OutputShapes` reads which outputs can be preallocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.cache import cache_root
from sleap_live.engines.errors import (
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.host.outputs import BATCH_AXIS, INSTANCE_AXIS
from sleap_live.engines.optional import GPU_INSTALL_HINT, ORT_INSTALL_HINT
from sleap_live.engines.ort_options import session_options

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
GPU_PROVIDERS = (CUDA, TENSORRT)
EXECUTION_PROVIDERS = {"cuda": CUDA, "tensorrt": TENSORRT}
# ONNX Runtime's TensorRT provider caches (engines, timing) in the cache root.
ORT_TENSORRT_FOLDER = "onnxruntime-tensorrt"
# The largest batch the TensorRT provider's optimisation profile admits (batch 1 to
# this, the pipeline's default recorded batch included): within it one engine serves
# every batch size; a larger batch makes ONNX Runtime build another.
TENSORRT_MAX_BATCH = 8
TENSORRT_PROFILE_OPTIONS = (
    "trt_profile_min_shapes",
    "trt_profile_opt_shapes",
    "trt_profile_max_shapes",
)

Provider = str | tuple[str, Mapping[str, Any]]
# Output name -> one name per axis (see `sleap_live.engines.host.outputs.OutputSpec`).
OutputAxes = Mapping[str, Sequence[str]]

ELEMENT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bool)": np.bool_,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
}


def providers_for(
    device: str,
    execution_provider: str = "cuda",
    *,
    trt_cache_dir: str | Path | None = None,
    trt_cache: bool = True,
    trt_fp16: bool = False,
) -> list[Provider]:
    """The execution providers for a device name: "cpu", "cuda" or "cuda:N".

    Args:
        device: where to run.
        execution_provider: on a GPU, "cuda" (the CUDA provider) or "tensorrt"
            (ONNX Runtime's TensorRT provider, the CUDA provider behind it for
            whatever TensorRT does not take).
        trt_cache_dir: TensorRT: the folder of its engine and timing caches
            (default: `onnxruntime-tensorrt/` in `cache_root()`); ONNX Runtime keys each engine by
            the model, the GPU and the TensorRT version, and rebuilds otherwise.
        trt_cache: TensorRT: keep engines and timing caches (False: build them
            for this session only, `--no-cache`).
        trt_fp16: TensorRT: let it build float16 kernels.

    Raises:
        RuntimeUnavailableError: an unknown device, or TensorRT on the CPU.
        ValueError: an unknown execution provider.
    """
    if execution_provider not in EXECUTION_PROVIDERS:
        raise ValueError(
            f"unknown execution provider {execution_provider!r} "
            f"(expected one of {tuple(EXECUTION_PROVIDERS)})"
        )
    if device == "cpu":
        if execution_provider == "tensorrt":
            raise RuntimeUnavailableError("the TensorRT execution provider needs a CUDA device")
        return [CPU]
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise RuntimeUnavailableError(
            f"unsupported device {device!r} (use 'cpu', 'cuda' or 'cuda:N')"
        )
    device_id = int(index or 0)
    # TF32 off: ONNX Runtime's CUDA provider computes matrix products in TF32 by default
    # (`use_tf32`), whose 10-bit mantissa cannot hold the resize's exact integer sums
    # (weights up to 2^15), so resized pixels would differ from the CPU's by a level.
    # The TensorRT build clears its TF32 flag for the same reason.
    cuda: Provider = (CUDA, {"device_id": device_id, "use_tf32": "0"})
    if execution_provider == "cuda":
        return [cuda]
    cache = str(Path(trt_cache_dir) if trt_cache_dir is not None else ort_tensorrt_cache_dir())
    tensorrt = {
        "device_id": device_id,
        "trt_engine_cache_enable": str(trt_cache),
        "trt_engine_cache_path": cache,
        "trt_timing_cache_enable": str(trt_cache),
        "trt_timing_cache_path": cache,
        "trt_fp16_enable": str(bool(trt_fp16)),
    }
    return [(TENSORRT, tensorrt), cuda]


def _gpu_build_hint() -> str:
    """How to get a CUDA provider: install the GPU build, or take it back from the CPU build.

    `onnxruntime` and `onnxruntime-gpu` install into the same package folder; with both
    installed, whichever pip wrote last wins, and the CPU build's files hide the CUDA
    provider.
    """
    import importlib.metadata

    installed = set()
    for distribution in ("onnxruntime", "onnxruntime-gpu"):
        try:
            importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        installed.add(distribution)
    if installed == {"onnxruntime", "onnxruntime-gpu"}:
        return (
            "; onnxruntime and onnxruntime-gpu are both installed and the CPU build's files "
            "won: pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"
        )
    return f"; install the GPU build: {GPU_INSTALL_HINT}"


def ort_tensorrt_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Where ONNX Runtime's TensorRT provider caches its engines: in sleap-live's cache root."""
    return cache_root(cache_dir) / ORT_TENSORRT_FOLDER


def with_compute_stream(providers: Sequence[Provider], stream_handle: int) -> list[Provider]:
    """GPU providers told to compute on a CUDA stream (its `cudaStream_t` as an int).

    Raises:
        ValueError: a null handle (the legacy default stream): ONNX Runtime reads
            it as "no user stream" and computes on a stream of its own, which
            work queued on the caller's streams is not ordered against.
    """
    if not stream_handle:
        raise ValueError(
            "ONNX Runtime needs a real CUDA stream to compute on, not the null handle "
            "(the legacy default stream), which it reads as none"
        )
    return [
        _with_options(provider, _stream_options(_provider_name(provider), stream_handle))
        for provider in providers
    ]


def _stream_options(name: str, stream_handle: int) -> dict[str, str]:
    """How a GPU provider is told its compute stream.

    The CUDA provider takes the flag and the handle. The TensorRT provider's options are
    parsed by ONNX Runtime's Python binding, which throws "Invalid TensorRT EP option"
    for `has_user_compute_stream` (onnxruntime-gpu 1.31.1: the binding holds that
    message and `user_compute_stream`, not the flag; tests/data/onnxruntime_gpu_options.json)
    and sets the flag from the handle alone (onnxruntime PR #20168).
    """
    handle = {"user_compute_stream": str(stream_handle)}
    return handle if name == TENSORRT else {"has_user_compute_stream": "1", **handle}


def with_tensorrt_profile(
    providers: Sequence[Provider],
    model: str | Path | bytes,
    max_batch: int = TENSORRT_MAX_BATCH,
) -> list[Provider]:
    """The TensorRT provider given an optimisation profile for batches 1 to `max_batch`.

    Without one, ONNX Runtime's TensorRT provider builds its engine for the shapes
    it has seen and builds it again when a batch falls outside them (batch 1 after
    batch 8). The profile needs the frame size, so it is set where the graph fixes
    it (`export --profile tensorrt` exports); graphs of any frame size, and
    providers given a profile already, are left as they are. Other providers are
    returned unchanged.
    """
    names = [_provider_name(provider) for provider in providers]
    if TENSORRT not in names:
        return list(providers)
    tensorrt = providers[names.index(TENSORRT)]
    if any(option in _provider_options(tensorrt) for option in TENSORRT_PROFILE_OPTIONS):
        return list(providers)
    input_name, frame = _frame_input(model)
    if frame is None:
        return list(providers)
    size = "x".join(str(n) for n in frame)
    shapes = (f"{input_name}:1x{size}", *[f"{input_name}:{max_batch}x{size}"] * 2)
    profile = dict(zip(TENSORRT_PROFILE_OPTIONS, shapes, strict=True))
    return [
        (TENSORRT, {**_provider_options(provider), **profile})
        if _provider_name(provider) == TENSORRT
        else provider
        for provider in providers
    ]


def _frame_input(model: str | Path | bytes) -> tuple[str, tuple[int, ...] | None]:
    """The graph input's name, and its frame dims (height, width, channels) where all are
    fixed; read with `onnx`, without the weights."""
    import onnx

    try:
        if isinstance(model, bytes):
            proto = onnx.load_model_from_string(model)
        else:
            proto = onnx.load(str(model), load_external_data=False)
    except Exception as error:  # onnx raises DecodeError, ValueError, ... on junk
        origin = "ONNX model bytes" if isinstance(model, bytes) else str(model)
        raise ModelConfigError(f"{origin}: not an ONNX model ({error})") from error
    (graph_input,) = [
        value
        for value in proto.graph.input
        if value.name not in {init.name for init in proto.graph.initializer}
    ]
    dims = graph_input.type.tensor_type.shape.dim[1:]
    if not all(dim.HasField("dim_value") for dim in dims):
        return graph_input.name, None
    return graph_input.name, tuple(int(dim.dim_value) for dim in dims)


def create_session(
    model: str | Path | bytes,
    providers: Sequence[Provider] = (CPU,),
    *,
    intra_op_threads: int | None = None,
) -> Any:
    """An `onnxruntime.InferenceSession` configured for streaming inference.

    Args:
        model: path of an `.onnx` file, or its bytes.
        providers: execution providers in priority order, as names or
            `(name, options)` pairs. A GPU provider without `user_compute_stream`
            computes on a stream of ONNX Runtime's own, which then also
            synchronises at the end of each run (`OnnxRunner` gives its stream).
        intra_op_threads: threads per operator; None keeps ONNX Runtime's default
            (one per physical core).

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: ONNX Runtime cannot load the model.
        RuntimeUnavailableError: onnxruntime or a requested provider is missing,
            or the CUDA provider could not start.
    """
    try:
        import onnxruntime as ort
    except ImportError as error:
        raise RuntimeUnavailableError(
            f"ONNX Runtime is not installed ({ORT_INSTALL_HINT})"
        ) from error
    origin = "ONNX model bytes" if isinstance(model, bytes) else str(model)
    if not isinstance(model, bytes) and not Path(model).is_file():
        raise ModelNotFoundError(f"{model}: no such ONNX file")
    names = [_provider_name(provider) for provider in providers]
    available = ort.get_available_providers()
    for name in names:
        if name not in available:
            hint = _gpu_build_hint() if name in GPU_PROVIDERS else ""
            raise RuntimeUnavailableError(
                f"{name} is not available in onnxruntime {ort.__version__} "
                f"(available: {', '.join(available)}){hint}"
            )
    if set(names) & set(GPU_PROVIDERS) and hasattr(ort, "preload_dlls"):
        # Lets onnxruntime-gpu find the CUDA/cuDNN libraries shipped in pip wheels.
        ort.preload_dlls()
    for provider in providers:
        cache = _provider_options(provider).get("trt_engine_cache_path")
        if _provider_name(provider) == TENSORRT and cache:
            Path(cache).mkdir(parents=True, exist_ok=True)

    options = session_options()
    if intra_op_threads is not None:
        options.intra_op_num_threads = intra_op_threads
    source = model if isinstance(model, bytes) else str(model)
    try:
        session = ort.InferenceSession(source, options, providers=providers)
    except Exception as error:  # onnxruntime raises its own exception types
        raise ModelConfigError(f"{origin}: onnxruntime cannot load it ({error})") from error
    missing = [name for name in names if name not in session.get_providers()]
    if missing:
        raise RuntimeUnavailableError(
            f"{origin}: onnxruntime could not start {', '.join(missing)} "
            "(is a GPU present, with the CUDA and cuDNN versions this onnxruntime needs?)"
        )
    return session


def device_of(providers: Sequence[Provider]) -> str:
    """The device the first provider runs on: "cpu" or "cuda:N"."""
    if _provider_name(providers[0]) in GPU_PROVIDERS:
        return f"cuda:{int(_provider_options(providers[0]).get('device_id', 0))}"
    return "cpu"


class OutputShapes:
    """Each output's shape for a batch size, where the graph and the output contract fix it.

    An output's shape is known when each of its axes (named in `output_axes`) is
    sized in the graph, is the batch axis, or is an axis of the same name that the
    graph sizes in another output: a bottom-up graph leaves `peak_scores` (batch,
    nodes, peak_slots) symbolic where `peaks` (batch, nodes, peak_slots, xy) is
    static. Outputs with an instance axis, or whose axes are not given, are not.

    Args:
        outputs: `(name, graph dims)` per output, as `session.get_outputs()` gives
            them (ints, or names/None for symbolic dims).
        output_axes: axis names per output (`sleap_live.engines.host.outputs.output_axes`).
    """

    def __init__(
        self, outputs: Sequence[tuple[str, Sequence[Any]]], output_axes: OutputAxes
    ) -> None:
        self._dims = {name: list(dims) for name, dims in outputs}
        self._axes = {
            name: tuple(output_axes[name])
            for name, dims in outputs
            if name in output_axes and len(output_axes[name]) == len(dims)
        }
        self._axis_sizes = _axis_sizes(
            [(dims, self._axes[name]) for name, dims in outputs if name in self._axes]
        )

    @classmethod
    def of_session(cls, session: Any, output_axes: OutputAxes) -> OutputShapes:
        return cls([(output.name, output.shape) for output in session.get_outputs()], output_axes)

    def __call__(self, name: str, batch_size: int) -> tuple[int, ...] | None:
        """The shape of output `name` for `batch_size` frames, or None when the data decide it."""
        axes = self._axes.get(name)
        if axes is None:
            return None
        return _fixed_shape(self._dims[name], axes, self._axis_sizes, batch_size)

    def data_dependent(self) -> str | None:
        """Why some output's shape is not fixed by the batch size, or None if none is."""
        for name in self._dims:
            if name not in self._axes:
                return f"output {name!r} is not in the output contract"
            if self(name, 1) is None:
                return f"output {name!r} is as long as the data make it"
        return None


def _axis_sizes(outputs: Sequence[tuple[Sequence[Any], Sequence[str]]]) -> dict[str, int]:
    """Axis name -> size, for the axes some output's graph dims give a size."""
    sizes: dict[str, int] = {}
    for dims, axes in outputs:
        for dim, axis in zip(dims, axes, strict=True):
            if isinstance(dim, int) and axis not in (BATCH_AXIS, INSTANCE_AXIS):
                sizes.setdefault(axis, dim)
    return sizes


def _fixed_shape(
    dims: Sequence[Any], axes: Sequence[str], axis_sizes: Mapping[str, int], batch_size: int
) -> tuple[int, ...] | None:
    """An output's shape for `batch_size` frames, or None when the data decide it."""
    if INSTANCE_AXIS in axes:
        return None
    shape = []
    for dim, axis in zip(dims, axes, strict=True):
        if isinstance(dim, int):
            shape.append(dim)
        elif axis == BATCH_AXIS:
            shape.append(batch_size)
        elif axis in axis_sizes:
            shape.append(axis_sizes[axis])
        else:
            return None
    return tuple(shape)


def _provider_name(provider: Provider) -> str:
    return provider if isinstance(provider, str) else provider[0]


def _provider_options(provider: Provider) -> Mapping[str, Any]:
    return {} if isinstance(provider, str) else provider[1]


def _with_options(provider: Provider, options: Mapping[str, Any]) -> Provider:
    """A GPU provider with `options` added where not set; other providers as they are."""
    name = _provider_name(provider)
    if name not in GPU_PROVIDERS:
        return provider
    return (name, {**options, **_provider_options(provider)})


def torch_has_cuda() -> bool:
    """Whether torch is importable with CUDA, without importing it for nothing."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
