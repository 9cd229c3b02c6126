"""Runs sleap-live TensorRT engines on a CUDA stream.

One execution context per optimisation profile (latency: batch 1; throughput:
batches 2 to N), chosen by batch size. Device buffers, and pinned host buffers for
the outputs, are allocated once per (profile, input shape) and reused; every run
sets the address of every I/O tensor, enqueues `execute_async_v3` on the given
stream, queues the outputs' copies to the host, and synchronises once, where the
host needs the results. Runs enqueue on the stream given, else on a stream of the
runner's own (never the legacy default stream), after it waits for the work the
caller queued on its current stream; deserialisation, building and every run
happen with the runner's device current, so `cuda:N` runs on GPU N. A torch CUDA
batch on the engine's device is read in place
(zero copy); a numpy batch is copied up once into the input buffer. Outputs then
decode on the host like every runner's (`sleap_live.engines.host.postprocess`).

TensorRT needs every output's shape to follow from the input's: graphs with
instance lists whose length the data decide (NonZero) are refused with a one-line
error naming the export profile that has fixed-capacity outputs.

Memory goes through a small interface (`DeviceMemory`); `TorchMemory` implements
it with torch tensors, on CUDA for real runs and on the CPU in tests, where a fake
`tensorrt` module stands in for the real one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import numpy as np

from sleap_live.engines.errors import EngineError, InputMismatchError, ModelConfigError
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.types import FramePoses, ModelInfo

if TYPE_CHECKING:
    # `sleap_live.engines.export` loads torch (its exporter); this module imports without it.
    from sleap_live.engines.export.tensorrt import EngineFile

FrameShape = tuple[int, int, int]
EngineSource = Callable[[FrameShape], "EngineFile"]


class DeviceMemory(Protocol):
    """Buffers, copies and synchronisation on one device, for one runner."""

    def device_buffer(self, shape: Sequence[int], dtype: np.dtype) -> Any:
        """An uninitialised device buffer."""
        ...

    def host_buffer(self, shape: Sequence[int], dtype: np.dtype) -> Any:
        """An uninitialised (pinned, where the device allows) host buffer."""
        ...

    def address(self, buffer: Any) -> int:
        """The device address of a buffer or of a resident batch."""
        ...

    def resident(self, frames: Any) -> Any | None:
        """`frames` itself when the engine can read it in place, else None."""
        ...

    def upload(self, frames: Any, buffer: Any, stream: Any) -> None:
        """Queues the copy of a batch into a device buffer on `stream`."""
        ...

    def download(self, buffer: Any, host: Any, stream: Any) -> None:
        """Queues the copy of a device buffer into a host buffer on `stream`."""
        ...

    def as_numpy(self, host: Any) -> np.ndarray:
        """A host buffer's contents as a new numpy array (the buffer is reused)."""
        ...

    def stream_handle(self, stream: Any) -> int:
        """The `cudaStream_t` TensorRT enqueues on."""
        ...

    def default_stream(self) -> Any:
        """The stream runs use when none is given: the runner's own, made once."""
        ...

    def order_after_caller(self, stream: Any) -> None:
        """Makes `stream` wait for the work queued so far on the caller's current stream."""
        ...

    def on_device(self) -> AbstractContextManager[Any]:
        """A context with the runner's device current: TensorRT deserialises engines,
        builds them, makes contexts and enqueues on the current device."""
        ...

    def synchronize(self, stream: Any) -> None:
        """Waits until the work queued on `stream` is done."""
        ...


class TorchMemory:
    """`DeviceMemory` through torch tensors on `device` ("cuda:N", or "cpu" in tests)."""

    def __init__(self, device: str) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        if self._cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._stream: Any = None

    def _dtype(self, dtype: np.dtype) -> Any:
        return self._torch.from_numpy(np.empty(0, dtype)).dtype

    def device_buffer(self, shape: Sequence[int], dtype: np.dtype) -> Any:
        return self._torch.empty(tuple(shape), dtype=self._dtype(dtype), device=self.device)

    def host_buffer(self, shape: Sequence[int], dtype: np.dtype) -> Any:
        return self._torch.empty(tuple(shape), dtype=self._dtype(dtype), pin_memory=self._cuda)

    def address(self, buffer: Any) -> int:
        return int(buffer.data_ptr())

    def resident(self, frames: Any) -> Any | None:
        if isinstance(frames, self._torch.Tensor) and frames.device == self.device:
            return frames if frames.is_contiguous() else None
        return None

    def upload(self, frames: Any, buffer: Any, stream: Any) -> None:
        if isinstance(frames, np.ndarray):
            frames = self._torch.from_numpy(np.ascontiguousarray(frames))
        with self._on(stream):
            buffer.copy_(frames, non_blocking=True)

    def download(self, buffer: Any, host: Any, stream: Any) -> None:
        with self._on(stream):
            host.copy_(buffer, non_blocking=True)

    def as_numpy(self, host: Any) -> np.ndarray:
        return np.array(host.numpy())

    def stream_handle(self, stream: Any) -> int:
        return int(stream.cuda_stream) if self._cuda else 0

    def default_stream(self) -> Any:
        if self._cuda and self._stream is None:
            self._stream = self._torch.cuda.Stream(self.device)
        return self._stream

    def order_after_caller(self, stream: Any) -> None:
        if self._cuda:
            caller = self._torch.cuda.current_stream(self.device)
            if stream != caller:
                stream.wait_stream(caller)

    def on_device(self) -> AbstractContextManager[Any]:
        return self._torch.cuda.device(self.device) if self._cuda else nullcontext()

    def synchronize(self, stream: Any) -> None:
        if self._cuda:
            stream.synchronize()

    def _on(self, stream: Any) -> AbstractContextManager[Any]:
        return self._torch.cuda.stream(stream) if self._cuda else nullcontext()


@attrs.frozen
class _Tensor:
    name: str
    dtype: np.dtype


@attrs.define
class _Bindings:
    """The buffers of one (profile, input shape), allocated on its first run."""

    input: Any
    outputs: dict[str, Any]
    host: dict[str, Any]


class _Engine:
    """One deserialised engine: its contexts (one per profile) and their buffers."""

    def __init__(
        self, trt: ModuleType, runtime: Any, engine_file: EngineFile, memory: DeviceMemory
    ) -> None:
        key = engine_file.key
        engine = runtime.deserialize_cuda_engine(engine_file.plan)
        if engine is None:
            raise ModelConfigError(
                f"TensorRT {trt.__version__} cannot load the engine built with TensorRT "
                f"{key.tensorrt_version} for {key.gpu.name} (its log above says why); "
                "delete it to rebuild"
            )
        self.key = key
        self._engine = engine
        self._memory = memory
        names = [engine.get_tensor_name(index) for index in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        if len(inputs) != 1:
            raise ModelConfigError(f"the engine has inputs {inputs}; sleap-live graphs have one")
        self._input = _Tensor(inputs[0], np.dtype(trt.nptype(engine.get_tensor_dtype(inputs[0]))))
        self._outputs = [
            _Tensor(n, np.dtype(trt.nptype(engine.get_tensor_dtype(n))))
            for n in names
            if n not in inputs
        ]
        self._limits = [
            (int(minimum[0]), int(maximum[0]))
            for minimum, _, maximum in (
                engine.get_tensor_profile_shape(self._input.name, profile)
                for profile in range(engine.num_optimization_profiles)
            )
        ]
        stream = memory.default_stream()
        self._contexts = []
        for profile in range(len(self._limits)):
            context = engine.create_execution_context()
            if profile:
                context.set_optimization_profile_async(profile, memory.stream_handle(stream))
            self._contexts.append(context)
        memory.synchronize(stream)
        self._shapes: list[tuple[int, ...] | None] = [None] * len(self._contexts)
        self._bindings: dict[tuple[int, tuple[int, ...]], _Bindings] = {}

    @property
    def max_batch(self) -> int:
        return max(maximum for _, maximum in self._limits)

    def profile_for(self, batch_size: int) -> int:
        """The profile that runs `batch_size` frames: the narrowest that admits it."""
        fitting = [
            (maximum, index)
            for index, (minimum, maximum) in enumerate(self._limits)
            if minimum <= batch_size <= maximum
        ]
        if not fitting:
            raise InputMismatchError(f"no profile of the engine takes {batch_size} frames")
        return min(fitting)[1]

    def run(self, frames: Any, stream: Any) -> dict[str, np.ndarray]:
        memory = self._memory
        shape = tuple(int(n) for n in frames.shape)
        profile = self.profile_for(shape[0])
        context = self._contexts[profile]
        if self._shapes[profile] != shape:
            if not context.set_input_shape(self._input.name, shape):
                raise InputMismatchError(f"the engine refuses input shape {shape}")
            self._shapes[profile] = shape
        bindings = self._bindings.get((profile, shape))
        if bindings is None:
            bindings = self._bindings[profile, shape] = self._allocate(context, shape)
        resident = memory.resident(frames)
        if resident is None:
            memory.upload(frames, bindings.input, stream)
            resident = bindings.input
        context.set_tensor_address(self._input.name, memory.address(resident))
        for output in self._outputs:
            context.set_tensor_address(output.name, memory.address(bindings.outputs[output.name]))
        if not context.execute_async_v3(memory.stream_handle(stream)):
            raise EngineError("TensorRT could not enqueue the engine (its log above says why)")
        for output in self._outputs:
            memory.download(bindings.outputs[output.name], bindings.host[output.name], stream)
        memory.synchronize(stream)
        del resident  # a batch read in place must outlive the work queued on it
        return {name: memory.as_numpy(host) for name, host in bindings.host.items()}

    def _allocate(self, context: Any, shape: tuple[int, ...]) -> _Bindings:
        memory = self._memory
        output_shapes = {o.name: tuple(context.get_tensor_shape(o.name)) for o in self._outputs}
        unsized = [name for name, dims in output_shapes.items() if any(n < 0 for n in dims)]
        if unsized:
            raise ModelConfigError(
                f"outputs {', '.join(unsized)} of the engine are sized by the data (instance "
                "lists); TensorRT runs need fixed-capacity outputs: export with --profile tensorrt"
            )
        outputs = [(o.name, output_shapes[o.name], o.dtype) for o in self._outputs]
        return _Bindings(
            input=memory.device_buffer(shape, self._input.dtype),
            outputs={name: memory.device_buffer(dims, dtype) for name, dims, dtype in outputs},
            host={name: memory.host_buffer(dims, dtype) for name, dims, dtype in outputs},
        )


class TensorRTRunner:
    """Runs a sleap-live TensorRT engine (see the module docstring).

    Args:
        info: the model's record (skeleton, settings) its outputs decode with.
        input_channels: channel counts the engines take; frames with another
            count are converted on the host first.
        engines: gives the engine for a frame shape (height, width, channels):
            `fixed_engine` for one engine file, or an `EngineCache`'s `engine`
            method (building on the first batch of each new frame size).
        device: the CUDA device, "cuda:N".
        stream: the CUDA stream runs enqueue on (a `torch.cuda.Stream`); None:
            a stream of the runner's own on its device (`memory.default_stream`).
        memory: buffers and copies; default `TorchMemory(device)`.
        tensorrt: the `tensorrt` module; default `import_tensorrt()`.

    Attributes:
        info, input_channels, device: as given.

    Raises:
        RuntimeUnavailableError: TensorRT is not installed.
    """

    def __init__(
        self,
        info: ModelInfo,
        input_channels: Sequence[int],
        engines: EngineSource,
        *,
        device: str = "cuda:0",
        stream: Any = None,
        memory: DeviceMemory | None = None,
        tensorrt: ModuleType | None = None,
    ) -> None:
        from sleap_live.engines.export.tensorrt import import_tensorrt

        self._trt = tensorrt or import_tensorrt()
        self.info = info
        self.metadata: ExportMetadata | None = None  # the engines carry their own
        self.input_channels = tuple(input_channels)
        self.device = device
        self._memory = memory or TorchMemory(device)
        self._stream = stream
        self._source: EngineSource | None = engines
        self._runtime = self._trt.Runtime(self._trt.Logger(self._trt.Logger.WARNING))
        self._engines: dict[FrameShape, _Engine] = {}

    @classmethod
    def from_engine_file(cls, engine: str | Path | EngineFile, **options: Any) -> TensorRTRunner:
        """A runner of one engine file alone (its header holds the metadata)."""
        from sleap_live.engines.export.tensorrt import EngineFile, read_engine_file

        engine_file = engine if isinstance(engine, EngineFile) else read_engine_file(engine)
        metadata = engine_file.metadata
        return cls(metadata.info, metadata.input_channels, fixed_engine(engine_file), **options)

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) batch.

        Args:
            frames: numpy array, or a torch tensor (read in place when it is a
                contiguous tensor on the engine's device).
            stream: the CUDA stream to run on; default the runner's.

        Batches larger than the engine's largest profile run in slices of that size.

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3), or no
                engine serves their size.
            EngineError: the runner is closed, or TensorRT fails to enqueue.
        """
        frames, batch_size = begin_run(self, self._source, frames, self.input_channels)
        assert self._source is not None  # begin_run refuses closed runners
        frame: FrameShape = (int(frames.shape[1]), int(frames.shape[2]), int(frames.shape[3]))
        if stream is None:
            stream = self._stream if self._stream is not None else self._memory.default_stream()
        poses: list[FramePoses] = []
        with self._memory.on_device():
            engine = self._engines.get(frame)
            if engine is None:
                engine = _Engine(self._trt, self._runtime, self._source(frame), self._memory)
                self._engines[frame] = engine
            self._memory.order_after_caller(stream)
            step = engine.max_batch
            for start in range(0, batch_size, step):
                part = frames[start : start + step]
                poses += decode(self.info, engine.run(part, stream), int(part.shape[0]))
        return poses

    def close(self) -> None:
        """Releases the engines, contexts and buffers; idempotent."""
        self._engines.clear()
        self._source = None


def fixed_engine(engine_file: EngineFile) -> EngineSource:
    """An `EngineSource` of one engine: its own frame shape, refusing others in one line."""

    def engine_for(frame: FrameShape) -> EngineFile:
        if frame != engine_file.key.frame:
            height, width, channels = engine_file.key.frame
            raise InputMismatchError(
                f"this TensorRT engine takes {height}x{width}x{channels} frames, not "
                f"{'x'.join(map(str, frame))}; build one for this size "
                "(sleap-live export --format tensorrt --frame-size HxW)"
            )
        return engine_file

    return engine_for
