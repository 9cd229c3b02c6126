"""Runs a sleap-live ONNX export with ONNX Runtime, on the CPU or a CUDA GPU.

Only `onnxruntime`, numpy and the export's own metadata are needed (torch is used
only when frames arrive as torch tensors), so this runner works in a torch-free
deployment.

On the CPU the session is tuned for one caller at a time: every graph
optimisation, sequential execution, and ONNX Runtime's default intra-op pool (one
thread per physical core) unless told otherwise.

On a CUDA GPU (`onnxruntime-gpu`) inputs and outputs go through one reused I/O
binding: a CUDA torch tensor is bound in place (no host round trip), a numpy batch
is copied up once; outputs whose shape is fixed by the batch size (bottom-up
outputs, per frame; see `sleap_live.engines.host.outputs`) are bound to device
buffers allocated once per batch size, the rest (instance lists, whose length the
data decide) to buffers ONNX Runtime allocates. ONNX Runtime synchronises its
stream once at the end of the run (it must: instance counts are data-dependent),
then all outputs come back to the host in one copy; there are no other
synchronisations, staging copies or per-run allocations of fixed-shape outputs.
When torch has CUDA, the session runs on
torch's current stream (`user_compute_stream`), so work queued on that stream to
produce the frames is ordered before inference without an explicit sync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from sleap_live.engines.errors import (
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.host.frames import as_numpy
from sleap_live.engines.host.outputs import OUTPUTS_BY_MODEL_TYPE, output_spec
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import METADATA_KEY, ExportMetadata
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.types import FramePoses, ModelInfo

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
GPU_INSTALL_HINT = "pip install sleap-live[gpu]"

Provider = str | tuple[str, Mapping[str, Any]]
# Output name -> one name per axis (see `sleap_live.engines.host.outputs.OutputSpec`).
OutputAxes = Mapping[str, Sequence[str]]

BATCH_AXIS = "batch"
# Instance lists are as long as the data make them; never preallocated.
INSTANCE_AXIS = "instances"

_ELEMENT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bool)": np.bool_,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
}


def providers_for(device: str) -> list[Provider]:
    """The execution providers for a device name: "cpu", "cuda" or "cuda:N"."""
    if device == "cpu":
        return [CPU]
    kind, _, index = device.partition(":")
    if kind == "cuda":
        return [(CUDA, {"device_id": int(index or 0)})]
    raise RuntimeUnavailableError(f"unsupported device {device!r} (use 'cpu', 'cuda' or 'cuda:N')")


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
            `(name, options)` pairs. CUDA options default to torch's current
            stream when torch has CUDA.
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
            "onnxruntime is not installed (pip install onnxruntime)"
        ) from error
    origin = "ONNX model bytes" if isinstance(model, bytes) else str(model)
    if not isinstance(model, bytes) and not Path(model).is_file():
        raise ModelNotFoundError(f"{model}: no such ONNX file")
    providers = [_with_defaults(provider) for provider in providers]
    names = [_provider_name(provider) for provider in providers]
    available = ort.get_available_providers()
    for name in names:
        if name not in available:
            hint = f"; install the GPU build: {GPU_INSTALL_HINT}" if name == CUDA else ""
            raise RuntimeUnavailableError(
                f"{name} is not available in onnxruntime {ort.__version__} "
                f"(available: {', '.join(available)}){hint}"
            )
    if CUDA in names and hasattr(ort, "preload_dlls"):
        # Lets onnxruntime-gpu find the CUDA/cuDNN libraries shipped in pip wheels.
        ort.preload_dlls()

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Idle operator threads would otherwise spin for a while after every run,
    # taking the cores that decode and the pipeline's other stages need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
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


class OnnxRunner:
    """Runs a sleap-live `.onnx` export.

    Args:
        model: path of the `.onnx` file, or its bytes.
        providers: execution providers in priority order (see `providers_for`);
            the default is the CPU.
        intra_op_threads: threads per operator; None keeps ONNX Runtime's default
            (one per physical core).

    Attributes:
        info: the model's `ModelInfo`, read from the embedded metadata.
        metadata: the whole embedded `ExportMetadata`.
        device: "cpu" or "cuda:N".

    Raises:
        ModelNotFoundError, ModelConfigError: see `create_session`; also when the
            model carries no sleap-live metadata.
        RuntimeUnavailableError: see `create_session`.
    """

    def __init__(
        self,
        model: str | Path | bytes,
        providers: Sequence[Provider] = (CPU,),
        *,
        intra_op_threads: int | None = None,
    ) -> None:
        origin = "ONNX model bytes" if isinstance(model, bytes) else str(model)
        session = create_session(model, providers, intra_op_threads=intra_op_threads)
        document = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        if document is None:
            raise ModelConfigError(
                f"{origin}: no '{METADATA_KEY}' metadata; not exported by sleap-live "
                "(for a `sleap-nn export` output, pass its directory instead)"
            )
        self.metadata = ExportMetadata.from_json(document, origin)
        self.info: ModelInfo = self.metadata.info
        (graph_input,) = session.get_inputs()
        self._input_name = graph_input.name
        self._output_names = [output.name for output in session.get_outputs()]
        self.device = device_of(providers)
        self._io = BoundIO.for_device(session, self.device, contract_axes(self.info.model_type))
        self._session: Any = session

    def run(self, frames: Any) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) batch.

        Args:
            frames: numpy array, or a torch tensor (on the session's GPU for a
                copy-free CUDA run).

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
        """
        frames, batch_size = begin_run(self, self._session, frames, self.metadata.input_channels)
        if self._io is not None:
            outputs = self._io.run(frames)
        else:
            values = self._session.run(None, {self._input_name: as_numpy(frames)})
            outputs = dict(zip(self._output_names, values, strict=True))
        return decode(self.info, outputs, batch_size)

    def close(self) -> None:
        """Releases the session and its buffers; idempotent."""
        self._io = None
        self._session = None


def contract_axes(model_type: str) -> OutputAxes:
    """The axes of each output a sleap-live graph of `model_type` has (its output contract)."""
    return {name: output_spec(name).axes for name in OUTPUTS_BY_MODEL_TYPE.get(model_type, ())}


def device_of(providers: Sequence[Provider]) -> str:
    """The device the first provider runs on: "cpu" or "cuda:N"."""
    if _provider_name(providers[0]) == CUDA:
        return f"cuda:{int(_provider_options(providers[0]).get('device_id', 0))}"
    return "cpu"


class BoundIO:
    """One I/O binding reused across runs of a session (see the module docstring).

    Runners use it on CUDA sessions; it works the same on the CPU (`device_type`
    "cpu"), which is how it is tested without a GPU. Device buffers for outputs of
    known shape are cached per batch size; their contents are copied to fresh host
    arrays at the end of each run, so results handed to the caller are never
    overwritten by a later run.

    An output's shape is known when each of its axes (named in `output_axes`) is
    sized in the graph, is the batch axis, or is an axis of the same name that the
    graph sizes in another output: a bottom-up graph leaves `peak_scores` (batch,
    nodes, peak_slots) symbolic where `peaks` (batch, nodes, peak_slots, xy) is
    static. Outputs with an instance axis, or whose axes are not given, are left
    to ONNX Runtime.

    Args:
        session: the `onnxruntime.InferenceSession`.
        device_type: "cuda" or "cpu", where inputs and outputs are bound.
        device_id: the device's index.
        output_axes: axis names per output (e.g. `contract_axes`).
    """

    def __init__(
        self,
        session: Any,
        device_type: str,
        device_id: int = 0,
        *,
        output_axes: OutputAxes = MappingProxyType({}),
    ) -> None:
        import onnxruntime as ort

        self._ort = ort
        self._session = session
        self._device_type = device_type
        self._device_id = device_id
        self._torch_device = "cpu" if device_type == "cpu" else f"cuda:{device_id}"
        self._binding = session.io_binding()
        (graph_input,) = session.get_inputs()
        self._input_name = graph_input.name
        self._outputs = [
            (output.name, output.shape, _ELEMENT_TYPES.get(output.type))
            for output in session.get_outputs()
        ]
        self._axes = {
            name: tuple(output_axes[name])
            for name, dims, _ in self._outputs
            if name in output_axes and len(output_axes[name]) == len(dims)
        }
        self._axis_sizes = _axis_sizes(
            [(dims, self._axes[name]) for name, dims, _ in self._outputs if name in self._axes]
        )
        self._buffers: dict[int, dict[str, Any]] = {}

    @classmethod
    def for_device(
        cls, session: Any, device: str, output_axes: OutputAxes = MappingProxyType({})
    ) -> BoundIO | None:
        """The binding for a session on `device` ("cuda:N"), or None on the CPU."""
        if not device.startswith("cuda:"):
            return None
        return cls(session, "cuda", int(device.partition(":")[2]), output_axes=output_axes)

    def run(self, frames: Any) -> dict[str, np.ndarray]:
        binding = self._binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        device_frames = None
        if isinstance(frames, np.ndarray):
            # bind_cpu_input keeps a reference to the array until the next bind.
            binding.bind_cpu_input(self._input_name, np.ascontiguousarray(frames))
        else:
            # The binding holds only a pointer: `device_frames` must outlive the run.
            device_frames = frames.to(self._torch_device).contiguous()
            binding.bind_input(
                self._input_name,
                self._device_type,
                self._device_id,
                np.uint8,
                tuple(device_frames.shape),
                device_frames.data_ptr(),
            )
        buffers = self._output_buffers(int(frames.shape[0]))
        for name, _, _ in self._outputs:
            if name in buffers:
                binding.bind_ortvalue_output(name, buffers[name])
            else:
                binding.bind_output(name, self._device_type, self._device_id)
        self._session.run_with_iobinding(binding)
        outputs = binding.copy_outputs_to_cpu()
        del device_frames
        return {name: array for (name, _, _), array in zip(self._outputs, outputs, strict=True)}

    def _output_buffers(self, batch_size: int) -> dict[str, Any]:
        if batch_size not in self._buffers:
            buffers = {}
            for name, dims, dtype in self._outputs:
                axes = self._axes.get(name)
                shape = (
                    None if axes is None else _fixed_shape(dims, axes, self._axis_sizes, batch_size)
                )
                if shape is not None and dtype is not None:
                    buffers[name] = self._ort.OrtValue.ortvalue_from_shape_and_type(
                        shape, dtype, self._device_type, self._device_id
                    )
            self._buffers[batch_size] = buffers
        return self._buffers[batch_size]


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


def _with_defaults(provider: Provider) -> Provider:
    """Adds torch's current CUDA stream to CUDA provider options when possible."""
    if _provider_name(provider) != CUDA:
        return provider
    options = dict(_provider_options(provider))
    if "user_compute_stream" not in options and _torch_has_cuda():
        import torch

        device = torch.device("cuda", int(options.get("device_id", 0)))
        options["user_compute_stream"] = str(torch.cuda.current_stream(device).cuda_stream)
    return (CUDA, options)


def _torch_has_cuda() -> bool:
    """Whether torch is importable with CUDA, without importing it for nothing."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
