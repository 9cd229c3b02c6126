"""ONNX Runtime I/O binding of torch tensors: `OnnxRunner`'s CUDA path when torch has CUDA.

Frames are bound by pointer: a CUDA tensor on the session's device as it is (no
copy), a numpy batch after one pinned upload on the runner's stream. Outputs
whose shape the output contract fixes (`sleap_live.engines.host.outputs`: every
bottom-up output, and any fixed-capacity output an export declares) are bound to
torch tensors allocated once per batch size; the rest are left to ONNX Runtime.
ONNX Runtime runs on the runner's stream (`user_compute_stream`). When every
output is preallocated, ONNX Runtime is told not to synchronise at the end of the
run (`disable_synchronize_execution_providers`): the copies to pinned host
buffers are queued behind the graph on the same stream and one synchronisation
covers both. Otherwise (instance lists) ONNX Runtime synchronises, as it must to
size them, and copies the outputs out itself.

With CUDA graphs (the session was created with them, see `OnnxRunner`), each input
shape gets its own binding, bound once to a static input tensor and the
preallocated outputs, and its own graph id (`gpu_graph_id`): ONNX Runtime captures
the graph in the shape's first runs and replays it after; new frames are copied
into the static input in place. ONNX Runtime cannot drop a captured graph, so at
most `max_graphs` shapes get one; other shapes run without (`gpu_graph_id` -1),
after a one-line notice.

On the CPU (`device` "cpu") the same code binds CPU tensors; that is how it is
tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import attrs
import numpy as np
import torch

from sleap_live.engines.notify import Notify
from sleap_live.engines.runners.cuda import (
    DEFAULT_MAX_GRAPHS,
    LOG,
    HostCopies,
    HostStaging,
    order_after_caller,
)
from sleap_live.engines.runners.onnx_session import ELEMENT_TYPES

# Run options ONNX Runtime reads (onnxruntime_run_options_config_keys.h).
GRAPH_ID = "gpu_graph_id"
NO_GRAPH = "-1"
NO_SYNC = "disable_synchronize_execution_providers"

_TORCH_DTYPES = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.uint8): torch.uint8,
}


@attrs.define
class BoundShape:
    """The binding of one input shape (or batch size, without CUDA graphs).

    Attributes:
        binding: its `onnxruntime.IOBinding`.
        outputs: the preallocated outputs, by name.
        run_options: the `onnxruntime.RunOptions` its runs use.
        graph_input: the static input a CUDA graph reads, or None without one.
    """

    binding: Any
    outputs: dict[str, torch.Tensor]
    run_options: Any
    graph_input: torch.Tensor | None = None


class TorchBinding:
    """Binds torch tensors to a session's inputs and outputs (see the module docstring).

    Args:
        session: the `onnxruntime.InferenceSession`.
        device: "cuda:N" (the session's device) or "cpu".
        output_shape: `(output name, batch size) -> shape`, or None where the
            data decide it (an `OutputShapes`).
        stream: CUDA: the `torch.cuda.Stream` the session computes on.
        cuda_graphs: the session was created with CUDA graphs on (every output
            must then have a fixed shape).
        max_graphs: input shapes that get a CUDA graph.
        notice: where one-line notices go.
    """

    def __init__(
        self,
        session: Any,
        device: str,
        output_shape: Callable[[str, int], tuple[int, ...] | None],
        *,
        stream: Any = None,
        cuda_graphs: bool = False,
        max_graphs: int = DEFAULT_MAX_GRAPHS,
        notice: Notify = LOG.warning,
    ) -> None:
        import onnxruntime as ort

        self._ort = ort
        self._session = session
        self._device = torch.device(device)
        self._device_type = self._device.type
        self._device_id = self._device.index or 0
        cuda = self._device_type == "cuda"
        if cuda and stream is None:
            raise ValueError("a CUDA binding needs the session's compute stream")
        self._stream = stream
        (graph_input,) = session.get_inputs()
        self._input_name = graph_input.name
        self._outputs = [
            (output.name, _numpy_dtype(output.type)) for output in session.get_outputs()
        ]
        self._output_shape = output_shape
        if cuda_graphs and any(output_shape(name, 1) is None for name, _ in self._outputs):
            raise ValueError("CUDA graphs need every output preallocated")
        self._cuda_graphs = cuda_graphs
        self._max_graphs = max_graphs
        self._graphs = 0
        self._notice = notice
        self._staging = HostStaging(pin=cuda)
        self._copies = HostCopies(pin=cuda)
        self._shapes: dict[Any, BoundShape] = {}

    @property
    def bound_shapes(self) -> Mapping[Any, BoundShape]:
        """The bindings made so far, by input shape (CUDA graphs) or batch size."""
        return self._shapes

    def run(self, frames: Any, stream: Any = None) -> dict[str, np.ndarray]:
        """Runs the session on a uint8 (B, H, W, C) numpy array or torch tensor.

        Args:
            frames: the batch.
            stream: a stream the frames were made ready on, waited for first.
        """
        with self._on_stream(stream):
            tensor = self._on_device(frames)
            bound = self._bound(tuple(int(n) for n in tensor.shape))
            if bound.graph_input is not None:
                bound.graph_input.copy_(tensor)
            else:
                bound.binding.clear_binding_inputs()
                bound.binding.clear_binding_outputs()
                self._bind_input(bound.binding, tensor)
                self._bind_outputs(bound.binding, bound.outputs)
            self._session.run_with_iobinding(bound.binding, bound.run_options)
            if len(bound.outputs) == len(self._outputs):
                return self._copies.fetch(bound.outputs, self._synchronize)
            values = bound.binding.copy_outputs_to_cpu()
            # The binding held only the frames' pointer: they had to outlive the run.
            del tensor
            return {name: value for (name, _), value in zip(self._outputs, values, strict=True)}

    def _on_stream(self, stream: Any) -> AbstractContextManager[Any]:
        if self._stream is None:
            if stream is not None:
                stream.synchronize()
            return nullcontext()
        if stream is not None and stream != self._stream:
            self._stream.wait_stream(stream)
        order_after_caller(self._stream, self._device)
        return torch.cuda.stream(self._stream)

    def _on_device(self, frames: Any) -> torch.Tensor:
        if isinstance(frames, np.ndarray):
            return self._staging.upload(frames, self._device)
        return frames.to(self._device, non_blocking=True).contiguous()

    def _synchronize(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()

    def _bound(self, shape: tuple[int, ...]) -> BoundShape:
        key = shape if self._cuda_graphs else shape[0]
        bound = self._shapes.get(key)
        if bound is None:
            bound = self._bind_shape(shape)
            self._shapes[key] = bound
        return bound

    def _bind_shape(self, shape: tuple[int, ...]) -> BoundShape:
        outputs = {}
        for name, dtype in self._outputs:
            output_shape = self._output_shape(name, shape[0])
            if output_shape is not None and dtype is not None:
                outputs[name] = torch.empty(
                    output_shape, dtype=_TORCH_DTYPES[dtype], device=self._device
                )
        run_options = self._ort.RunOptions()
        if len(outputs) == len(self._outputs):
            run_options.add_run_config_entry(NO_SYNC, "1")
        bound = BoundShape(self._session.io_binding(), outputs, run_options)
        if not self._cuda_graphs:
            return bound
        if self._graphs == self._max_graphs:
            run_options.add_run_config_entry(GRAPH_ID, NO_GRAPH)
            self._notice(
                f"CUDA graphs: {self._max_graphs} input shapes already have one; "
                f"frames of shape {shape} run without"
            )
            return bound
        # Graph ids start at 1: ONNX Runtime reserves 0.
        self._graphs += 1
        run_options.add_run_config_entry(GRAPH_ID, str(self._graphs))
        bound.graph_input = torch.empty(shape, dtype=torch.uint8, device=self._device)
        self._bind_input(bound.binding, bound.graph_input)
        self._bind_outputs(bound.binding, outputs)
        return bound

    def _bind_input(self, binding: Any, tensor: torch.Tensor) -> None:
        binding.bind_input(
            self._input_name,
            self._device_type,
            self._device_id,
            np.uint8,
            tuple(tensor.shape),
            tensor.data_ptr(),
        )

    def _bind_outputs(self, binding: Any, outputs: Mapping[str, torch.Tensor]) -> None:
        for name, dtype in self._outputs:
            buffer = outputs.get(name)
            if buffer is None:
                binding.bind_output(name, self._device_type, self._device_id)
            else:
                binding.bind_output(
                    name,
                    self._device_type,
                    self._device_id,
                    dtype,
                    tuple(buffer.shape),
                    buffer.data_ptr(),
                )


def _numpy_dtype(onnx_type: str) -> np.dtype | None:
    dtype = ELEMENT_TYPES.get(onnx_type)
    return None if dtype is None else np.dtype(dtype)
