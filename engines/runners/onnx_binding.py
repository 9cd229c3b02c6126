"""ONNX Runtime I/O binding of torch tensors: `OnnxRunner`'s CUDA path when torch has CUDA.

Frames are bound by pointer: a CUDA tensor on the session's device as it is (no
copy), a numpy batch after one pinned upload on the runner's stream. Outputs
whose shape the output contract fixes (`sleap_live.engines.host.outputs`: every
bottom-up output, and any fixed-capacity output an export declares) are bound to
torch tensors allocated once per batch size; the rest are left to ONNX Runtime.

One stream orders everything: ONNX Runtime computes on the runner's own torch
stream (its real handle is the session's `user_compute_stream`; a null handle
would mean "no user stream" to ONNX Runtime, which then computes on a stream of
its own that nothing here waits for). Each run first makes that stream wait for
the stream the frames were made ready on and for the caller's current stream
(CUDA events, queued by `wait_stream`), then queues the upload, the session and
the copies to pinned host buffers on it, in that order. When every output is
preallocated, ONNX Runtime is told not to synchronise at the end of the run
(`disable_synchronize_execution_providers`): the host copies are queued behind the
graph on the same stream and one synchronisation covers both. Otherwise
(instance lists) ONNX Runtime synchronises, as it must to size them, and copies
the outputs out itself.

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

from sleap_live.engines.runners.cuda import HostCopies, HostStaging, order_after_caller
from sleap_live.engines.runners.onnx_session import ELEMENT_TYPES

# A run option ONNX Runtime reads (onnxruntime_run_options_config_keys.h).
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
    """The binding of one batch size.

    Attributes:
        binding: its `onnxruntime.IOBinding`.
        outputs: the preallocated outputs, by name.
        run_options: the `onnxruntime.RunOptions` its runs use.
    """

    binding: Any
    outputs: dict[str, torch.Tensor]
    run_options: Any


class TorchBinding:
    """Binds torch tensors to a session's inputs and outputs (see the module docstring).

    Args:
        session: the `onnxruntime.InferenceSession`.
        device: "cuda:N" (the session's device) or "cpu".
        output_shape: `(output name, batch size) -> shape`, or None where the
            data decide it (an `OutputShapes`).
        stream: CUDA: the `torch.cuda.Stream` the session computes on (the one
            whose handle is the session's `user_compute_stream`).
    """

    def __init__(
        self,
        session: Any,
        device: str,
        output_shape: Callable[[str, int], tuple[int, ...] | None],
        *,
        stream: Any = None,
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
        self._staging = HostStaging(pin=cuda)
        self._copies = HostCopies(pin=cuda)
        self._shapes: dict[int, BoundShape] = {}

    @property
    def bound_shapes(self) -> Mapping[int, BoundShape]:
        """The bindings made so far, by batch size."""
        return self._shapes

    def run(self, frames: Any, stream: Any = None) -> dict[str, np.ndarray]:
        """Runs the session on a uint8 (B, H, W, C) numpy array or torch tensor.

        Args:
            frames: the batch.
            stream: a stream the frames were made ready on, waited for first.
        """
        with self._on_stream(stream):
            tensor = self._on_device(frames)
            bound = self._bound(int(tensor.shape[0]))
            bound.binding.clear_binding_inputs()
            bound.binding.clear_binding_outputs()
            self._bind_input(bound.binding, tensor)
            self._bind_outputs(bound.binding, bound.outputs)
            self._session.run_with_iobinding(bound.binding, bound.run_options)
            if len(bound.outputs) == len(self._outputs):
                return self._copies.fetch(bound.outputs, self._stream)
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

    def _bound(self, batch_size: int) -> BoundShape:
        bound = self._shapes.get(batch_size)
        if bound is None:
            bound = self._shapes[batch_size] = self._bind_batch(batch_size)
        return bound

    def _bind_batch(self, batch_size: int) -> BoundShape:
        outputs = {}
        for name, dtype in self._outputs:
            output_shape = self._output_shape(name, batch_size)
            if output_shape is not None and dtype is not None:
                outputs[name] = torch.empty(
                    output_shape, dtype=_TORCH_DTYPES[dtype], device=self._device
                )
        run_options = self._ort.RunOptions()
        if len(outputs) == len(self._outputs):
            run_options.add_run_config_entry(NO_SYNC, "1")
        return BoundShape(self._session.io_binding(), outputs, run_options)

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
