"""Runs a sleap-live ONNX export with ONNX Runtime, on the CPU or a CUDA GPU.

Only `onnxruntime`, numpy and the export's own metadata are needed (torch is used
only on a GPU, when installed), so this runner works in a torch-free deployment.

On the CPU the session is tuned for one caller at a time: every graph
optimisation, sequential execution, and ONNX Runtime's default intra-op pool (one
thread per physical core) unless told otherwise.

On a CUDA GPU (`onnxruntime-gpu`), with the CUDA execution provider or the
TensorRT one (`providers_for(..., execution_provider="tensorrt")`, engines cached
on disk), inputs and outputs go through I/O binding, never through `session.run`:

- with CUDA torch installed, `sleap_live.engines.runners.onnx_binding.TorchBinding`:
  torch CUDA tensors bound by pointer in and out, outputs the output contract
  fixes preallocated as torch tensors, the session computing on the runner's own
  torch stream (a dedicated one unless given; its real handle is the session's
  `user_compute_stream`, never the legacy default stream's null handle), every
  hand-off ordered on that stream, one synchronisation per run;
- without torch, `BoundIO`: a numpy batch copied up once, fixed-shape outputs in
  device buffers (`OrtValue`) allocated once per batch size, the rest allocated by
  ONNX Runtime, everything copied back in one go after ONNX Runtime's own
  synchronisation.

ONNX Runtime's CUDA graphs are not offered (`cuda_graphs=True` runs without them,
after a one-line notice). ONNX Runtime captures them in the first runs of each
shape in CUDA's global capture mode, which its own code calls single-threaded
only: in a pipeline, the decode threads' CUDA calls (NVDEC, allocations,
synchronisations) would invalidate the capture or fail during it, and a run's
first batch of a new shape (the last, shorter batch of a file) can come at any
time. Capturing them all before those threads start would need every batch
shape known in advance. CUDA graphs come from the torch runner instead, which
captures in thread-local mode (`sleap_live.engines.runners.cuda`), and TensorRT.

An output's shape is fixed when each of its axes (named by the output contract,
`sleap_live.engines.host.outputs`) is sized in the graph, is the batch axis, or is
an axis of the same name that the graph sizes in another output (see
`OutputShapes`); an instance axis never is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from sleap_live.engines.errors import ModelConfigError, RuntimeUnavailableError
from sleap_live.engines.host.frames import as_numpy
from sleap_live.engines.host.outputs import output_axes
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import METADATA_KEY, ExportMetadata, check_graph_sizes
from sleap_live.engines.notify import Notify, notice
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.runners.onnx_session import (
    BATCH_AXIS,
    CPU,
    CUDA,
    ELEMENT_TYPES,
    GPU_INSTALL_HINT,
    INSTANCE_AXIS,
    TENSORRT,
    OutputAxes,
    OutputShapes,
    Provider,
    create_session,
    device_of,
    providers_for,
    torch_has_cuda,
    with_compute_stream,
    with_tensorrt_profile,
)
from sleap_live.engines.runners.specialise import SpecialisedGraphs, SpecialisedSessions
from sleap_live.engines.types import FramePoses, ModelInfo

__all__ = [
    "BATCH_AXIS",
    "CPU",
    "CUDA",
    "ELEMENT_TYPES",
    "GPU_INSTALL_HINT",
    "INSTANCE_AXIS",
    "TENSORRT",
    "BoundIO",
    "OnnxRunner",
    "OutputAxes",
    "Provider",
    "create_session",
    "device_of",
    "providers_for",
]

LOG = logging.getLogger("sleap_live.engines.runners")
ORT_GRAPHS_NOT_OFFERED = (
    "ONNX Runtime captures CUDA graphs in global mode, which the pipeline's decode "
    "threads would break; use --engine torch or tensorrt for CUDA graphs"
)


class OnnxRunner:
    """Runs a sleap-live `.onnx` export.

    Args:
        model: path of the `.onnx` file, or its bytes.
        providers: execution providers in priority order (see `providers_for`:
            CPU, CUDA, or TensorRT with its engine cache); the default is the CPU.
        intra_op_threads: threads per operator; None keeps ONNX Runtime's default
            (one per physical core).
        stream: GPU with CUDA torch: the `torch.cuda.Stream` the session computes
            on (None: a stream of the runner's own on its device; never the
            legacy default stream, see the module docstring).
        cuda_graphs: GPU: accepted for the runners' common options; ONNX
            Runtime's CUDA graphs are not offered (see the module docstring),
            so the runner says so in one line and runs without them.
        specialised: on the CPU, where graphs specialised to one frame shape
            come from: each frame shape then runs on its own once it gave the
            same outputs as this graph, bit for bit, on its first batch (see
            `sleap_live.engines.runners.specialise`).
        notify: told in one line when a frame shape keeps this graph, and why.

    Attributes:
        info: the model's `ModelInfo`, read from the embedded metadata.
        metadata: the whole embedded `ExportMetadata`.
        device: "cpu" or "cuda:N".

    Raises:
        ModelNotFoundError, ModelConfigError: see `create_session`; also when the
            model carries no sleap-live metadata.
        RuntimeUnavailableError: see `create_session`.
        ValueError: `stream` or `cuda_graphs` on the CPU, `specialised` on a GPU.
    """

    def __init__(
        self,
        model: str | Path | bytes,
        providers: Sequence[Provider] = (CPU,),
        *,
        intra_op_threads: int | None = None,
        stream: Any = None,
        cuda_graphs: bool = False,
        specialised: SpecialisedGraphs | None = None,
        notify: Notify = notice,
    ) -> None:
        origin = "ONNX model bytes" if isinstance(model, bytes) else str(model)
        self.device = device_of(providers)
        if self.device == "cpu" and (stream is not None or cuda_graphs):
            raise ValueError("stream and cuda_graphs need a CUDA execution provider")
        if self.device != "cpu" and specialised is not None:
            raise ValueError("graphs specialised to a frame shape run on the CPU")
        if cuda_graphs:
            LOG.warning(f"CUDA graphs off, running without them: {ORT_GRAPHS_NOT_OFFERED}")
        # A torch stream makes the session compute where the runner's torch work runs.
        stream = _torch_stream(self.device, stream)
        if stream is not None:
            providers = with_compute_stream(providers, stream.cuda_stream)
        providers = with_tensorrt_profile(providers, model)
        session = create_session(model, providers, intra_op_threads=intra_op_threads)
        document = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        if document is None:
            raise ModelConfigError(
                f"{origin}: no '{METADATA_KEY}' metadata; not exported by sleap-live "
                "(for a `sleap-nn export` output, pass its directory instead)"
            )
        metadata = ExportMetadata.from_json(document, origin)
        self.metadata: ExportMetadata | None = metadata
        self.info: ModelInfo = metadata.info
        self._input_channels = metadata.input_channels
        (graph_input,) = session.get_inputs()
        self._input_name = graph_input.name
        self._output_names = [output.name for output in session.get_outputs()]
        axes = output_axes(
            self.info.model_type,
            metadata.output_layout,
            boxes=bool(self.info.box_categories),
            embeddings=self.info.embedding_dim is not None,
        )
        graph_outputs = [(output.name, output.shape) for output in session.get_outputs()]
        check_graph_sizes(self.info, graph_outputs, axes, origin)
        shapes = OutputShapes.of_session(session, axes)
        self._io: Any = None
        if self.device != "cpu":
            if stream is not None:
                from sleap_live.engines.runners.onnx_binding import TorchBinding

                self._io = TorchBinding(session, self.device, shapes, stream=stream)
            else:
                self._io = BoundIO.for_device(session, self.device, axes)
        self._session: Any = session
        self._specialised_sessions: SpecialisedSessions | None = None
        if specialised is not None:
            self._specialised_sessions = SpecialisedSessions(
                session,
                specialised,
                lambda graph: create_session(graph, providers, intra_op_threads=intra_op_threads),
                notify,
            )

    def session_for(self, frame_shape: tuple[int, int, int]) -> Any:
        """The ONNX Runtime session that runs frames of (height, width, channels)."""
        if self._specialised_sessions is None:
            return self._session
        return self._specialised_sessions.session_for(frame_shape)

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) batch.

        Args:
            frames: numpy array, or a torch tensor (on the session's GPU for a
                copy-free CUDA run).
            stream: a CUDA stream the frames were made ready on: the session's
                stream waits for it (a CPU runner synchronises it before reading
                device frames).

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
        """
        frames, batch_size = begin_run(self, self._session, frames, self._input_channels)
        if self._io is None:
            if stream is not None and not isinstance(frames, np.ndarray):
                stream.synchronize()
            if self._specialised_sessions is not None:
                outputs = self._specialised_sessions.run(as_numpy(frames))
            else:
                values = self._session.run(None, {self._input_name: as_numpy(frames)})
                outputs = dict(zip(self._output_names, values, strict=True))
        elif isinstance(self._io, BoundIO):
            if stream is not None:
                stream.synchronize()
            outputs = self._io.run(frames)
        else:
            outputs = self._io.run(frames, stream)
        return decode(self.info, outputs, batch_size)

    def close(self) -> None:
        """Releases the session and its buffers; idempotent."""
        self._io = None
        self._session = None
        self._specialised_sessions = None


def _torch_stream(device: str, stream: Any) -> Any:
    """The torch stream a GPU session computes on, or None without CUDA torch.

    A stream of the runner's own when none is given: torch's current stream is
    the legacy default stream unless the caller chose another, and its null
    handle would leave ONNX Runtime on an unordered stream of its own.
    """
    if device == "cpu" or not torch_has_cuda():
        if stream is not None:
            raise RuntimeUnavailableError("stream= needs torch with CUDA")
        return None
    import torch

    return stream if stream is not None else torch.cuda.Stream(torch.device(device))


class BoundIO:
    """One I/O binding reused across runs of a session, without torch (see the module docstring).

    Runners use it on GPU sessions when torch has no CUDA; it works the same on the
    CPU (`device_type` "cpu"), which is how it is tested without a GPU. Device
    buffers for outputs of known shape (`OutputShapes`) are cached per batch size;
    their contents are copied to fresh host arrays at the end of each run, so
    results handed to the caller are never overwritten by a later run. Outputs
    with an instance axis, or whose axes are not given, are left to ONNX Runtime.

    Args:
        session: the `onnxruntime.InferenceSession`.
        device_type: "cuda" or "cpu", where inputs and outputs are bound.
        device_id: the device's index.
        output_axes: axis names per output (`sleap_live.engines.host.outputs.output_axes`).
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
            (output.name, ELEMENT_TYPES.get(output.type)) for output in session.get_outputs()
        ]
        self._shapes = OutputShapes.of_session(session, output_axes)
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
        for name, _ in self._outputs:
            if name in buffers:
                binding.bind_ortvalue_output(name, buffers[name])
            else:
                binding.bind_output(name, self._device_type, self._device_id)
        self._session.run_with_iobinding(binding)
        outputs = binding.copy_outputs_to_cpu()
        del device_frames
        return {name: array for (name, _), array in zip(self._outputs, outputs, strict=True)}

    def _output_buffers(self, batch_size: int) -> dict[str, Any]:
        if batch_size not in self._buffers:
            buffers = {}
            for name, dtype in self._outputs:
                shape = self._shapes(name, batch_size)
                if shape is not None and dtype is not None:
                    buffers[name] = self._ort.OrtValue.ortvalue_from_shape_and_type(
                        shape, dtype, self._device_type, self._device_id
                    )
            self._buffers[batch_size] = buffers
        return self._buffers[batch_size]
