"""Torch plumbing the GPU runners share: uploads, pinned host copies, CUDA graphs.

Only runners that run on a CUDA device through torch import this module. Every
piece also works on CPU tensors with pinning off and a stand-in for the CUDA graph,
which is how the host logic is tested without a GPU:

- `HostStaging` uploads numpy batches through one reused pinned buffer (one host
  copy, then an asynchronous host-to-device copy on the current stream);
- `HostCopies` brings outputs back through reused pinned buffers: every copy is
  queued on the stream the outputs were computed on, then one synchronisation of
  that stream, then small host copies, so the
  arrays handed out are never overwritten by a later run;
- `GraphedForward` runs a model through CUDA graphs captured per input shape (a
  bounded number kept), when the output contract says every output's shape is
  fixed by the input's, or the forward is a specialised graph's
  (`sleap_live.engines.graph.specialised`); otherwise it runs eagerly, after a one-line
  notice, and says so in its `status`.

Notices go to the `sleap_live.engines.runners` logger; with logging left
unconfigured, Python prints them to stderr as one line.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Protocol

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.notify import Notify
from sleap_live.engines.runners.onnx_session import BATCH_AXIS, INSTANCE_AXIS

LOG = logging.getLogger("sleap_live.engines.runners")

DEFAULT_MAX_GRAPHS = 4
# Eager runs on a side stream before a capture, as torch's CUDA graph notes ask
# (lazy initialisation, cuDNN/cuBLAS workspaces) - on top of the eager run that
# decided the capture.
CAPTURE_WARMUP_RUNS = 2

Forward = Callable[[torch.Tensor], Sequence[torch.Tensor]]


class _FlatBuffers:
    """Host buffers by name, grown as needed, handed out as views of the size asked for."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self._flat: dict[str, torch.Tensor] = {}

    def view(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        count = int(np.prod(shape, dtype=np.int64))
        flat = self._flat.get(name)
        if flat is None or flat.dtype != dtype or flat.numel() < count:
            capacity = max(count, 2 * flat.numel() if flat is not None else 0)
            flat = torch.empty(capacity, dtype=dtype, pin_memory=self.pin)
            self._flat[name] = flat
        return flat[:count].view(tuple(shape))

    def allocations(self) -> dict[str, int]:
        """Elements allocated per name (for tests and memory accounting)."""
        return {name: flat.numel() for name, flat in self._flat.items()}


class HostStaging:
    """Uploads numpy frames to a device through one reused (pinned) host buffer.

    Args:
        pin: pin the buffer (CUDA devices); the copy is then asynchronous on the
            current stream, and the next upload waits for it before reusing the
            buffer.
    """

    def __init__(self, pin: bool) -> None:
        self._buffers = _FlatBuffers(pin)
        self._copied: Any = None

    def upload(self, frames: np.ndarray, device: torch.device) -> torch.Tensor:
        """A copy of `frames` on `device`, queued on the current stream."""
        if self._copied is not None:
            self._copied.synchronize()
        staged = self._buffers.view("frames", frames.shape, torch.uint8)
        np.copyto(staged.numpy(), frames)
        tensor = staged.to(device, non_blocking=self._buffers.pin, copy=True)
        if self._buffers.pin:
            self._copied = torch.cuda.Event()
            self._copied.record()
        return tensor


class HostCopies:
    """Brings device outputs to the host with one synchronisation per run.

    Args:
        pin: copy through pinned buffers, asynchronously (CUDA devices).
    """

    def __init__(self, pin: bool) -> None:
        self._buffers = _FlatBuffers(pin)

    def fetch(self, outputs: Mapping[str, torch.Tensor], stream: Any) -> dict[str, np.ndarray]:
        """Host arrays of `outputs`, which the caller owns.

        Args:
            outputs: device tensors by name.
            stream: the CUDA stream the outputs were computed on: the copies are
                queued there, behind that work, whatever the caller's current
                stream, and the stream is synchronised once, after every copy is
                queued. None for CPU tensors.
        """
        staged = {}
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            for name, tensor in outputs.items():
                host = self._buffers.view(name, tensor.shape, tensor.dtype)
                host.copy_(tensor, non_blocking=self._buffers.pin)
                staged[name] = host
        if stream is not None:
            stream.synchronize()
        return {name: host.numpy().copy() for name, host in staged.items()}

    def allocations(self) -> dict[str, int]:
        return self._buffers.allocations()


def data_dependent_output(
    output_axes: Mapping[str, Sequence[str]],
    output_names: Sequence[str],
    shapes: Sequence[Sequence[int]],
    batch_size: int,
) -> str | None:
    """Why the outputs of a run are not fixed by the input's shape, or None if they are.

    An output's shape is fixed when the output contract (`output_axes`, e.g.
    `sleap_live.engines.host.outputs.output_axes` of the graph's layout) names it
    and gives it no instance axis, and its batch axis (if any) holds the batch:
    only then can a CUDA graph or a preallocated buffer hold it run after run.
    """
    for name, shape in zip(output_names, shapes, strict=True):
        axes = output_axes.get(name)
        if axes is None:
            return f"output {name!r} is not in the output contract"
        if INSTANCE_AXIS in axes:
            return f"output {name!r} is an instance list, as long as the data make it"
        if len(axes) != len(shape):
            return f"output {name!r} has shape {tuple(shape)}, not the contract's {tuple(axes)}"
        if BATCH_AXIS in axes and shape[list(axes).index(BATCH_AXIS)] != batch_size:
            return f"output {name!r} does not have the batch on its batch axis"
    return None


class CapturedGraph(Protocol):
    """A forward captured for one input shape: its static input and outputs."""

    @property
    def input(self) -> torch.Tensor: ...

    @property
    def outputs(self) -> tuple[torch.Tensor, ...]: ...

    def replay(self) -> None:
        """Runs the captured work on the current stream, from `input` into `outputs`."""
        ...


Capture = Callable[[Forward, torch.Tensor], CapturedGraph]


@attrs.frozen
class TorchCudaGraph:
    """A `torch.cuda.CUDAGraph` with its static input and outputs."""

    graph: Any
    input: torch.Tensor
    outputs: tuple[torch.Tensor, ...]

    def replay(self) -> None:
        self.graph.replay()


def capture_cuda_graph(forward: Forward, example: torch.Tensor) -> TorchCudaGraph:
    """Captures `forward` on a copy of `example` (a CUDA tensor) into a CUDA graph.

    Warms up on a side stream first, then captures on torch's capture stream in
    "thread_local" mode, so CUDA calls the pipeline's other threads make (decoding)
    do not invalidate the capture. Each graph keeps its own memory pool: graphs of
    different shapes are replayed in any order.
    """
    static_input = example.clone()
    current = torch.cuda.current_stream(example.device)
    side = torch.cuda.Stream(device=example.device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUP_RUNS):
            forward(static_input)
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = tuple(forward(static_input))
    return TorchCudaGraph(graph, static_input, outputs)


class GraphCache:
    """Captured graphs by key, the most recently used kept, at most `max_graphs`."""

    def __init__(self, capture: Capture, max_graphs: int = DEFAULT_MAX_GRAPHS) -> None:
        if max_graphs < 1:
            raise ValueError(f"max_graphs must be at least 1, got {max_graphs}")
        self._capture = capture
        self._max_graphs = max_graphs
        self._graphs: OrderedDict[Hashable, CapturedGraph] = OrderedDict()

    def get(self, key: Hashable) -> CapturedGraph | None:
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
        return graph

    def capture(self, key: Hashable, forward: Forward, example: torch.Tensor) -> CapturedGraph:
        """Captures a graph for `key`, dropping the least recently used beyond the bound."""
        graph = self._capture(forward, example)
        self._graphs[key] = graph
        while len(self._graphs) > self._max_graphs:
            self._graphs.popitem(last=False)
        return graph

    def keys(self) -> list[Hashable]:
        """Keys held, least recently used first."""
        return list(self._graphs)


class GraphedForward:
    """A model's forward through CUDA graphs, one per input shape.

    The first run of a shape is eager (its result is returned); when its outputs
    are fixed-shape (`data_dependent_output`) a graph is captured for the shape,
    and later runs of that shape copy the input into the graph's static input and
    replay it. Outputs of a replay are the graph's static buffers: read them
    before the next call. Outputs of data-dependent size, or a failed capture,
    turn graphs off for good, after a one-line notice.

    Args:
        forward: the model's forward.
        output_names: its outputs' names, in order.
        output_axes: the output contract's axes of each output (see
            `data_dependent_output`); None: the forward's outputs are fixed by its
            input's shape (a specialised graph's), every shape is captured.
        capture: captures a graph (`capture_cuda_graph`; tests pass a stand-in).
        max_graphs: graphs kept; the least recently used is dropped beyond it.
        notify: where the one-line notice goes.
    """

    def __init__(
        self,
        forward: Forward,
        output_names: Sequence[str],
        output_axes: Mapping[str, Sequence[str]] | None,
        *,
        capture: Capture = capture_cuda_graph,
        max_graphs: int = DEFAULT_MAX_GRAPHS,
        notify: Notify = LOG.warning,
    ) -> None:
        self._forward = forward
        self._output_names = tuple(output_names)
        self._output_axes = None if output_axes is None else dict(output_axes)
        self._graphs = GraphCache(capture, max_graphs)
        self._notify = notify
        self.eager_reason: str | None = None

    @property
    def graphs(self) -> GraphCache:
        return self._graphs

    @property
    def status(self) -> str:
        """What runs, in one line: CUDA graphs (and how many are held), or eager and why."""
        if self.eager_reason is not None:
            return f"eager (CUDA graphs off: {self.eager_reason})"
        return f"CUDA graphs ({len(self._graphs.keys())} captured, one per input shape)"

    def __call__(self, tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.eager_reason is not None:
            return tuple(self._forward(tensor))
        key = (tuple(tensor.shape), tensor.dtype, str(tensor.device))
        graph = self._graphs.get(key)
        if graph is not None:
            graph.input.copy_(tensor)
            graph.replay()
            return graph.outputs
        outputs = tuple(self._forward(tensor))
        reason = None
        if self._output_axes is not None:
            reason = data_dependent_output(
                self._output_axes,
                self._output_names,
                [output.shape for output in outputs],
                int(tensor.shape[0]),
            )
        if reason is None:
            try:
                self._graphs.capture(key, self._forward, tensor)
            except Exception as error:  # torch raises RuntimeError and its own types
                reason = f"capture failed ({type(error).__name__}: {error})".replace("\n", " ")
        if reason is not None:
            self.eager_reason = reason
            self._notify(f"CUDA graphs off, running eagerly: {reason}")
        return outputs


def order_after_caller(stream: Any, device: torch.device) -> None:
    """Makes `stream` wait for work queued so far on the caller's current stream."""
    caller = torch.cuda.current_stream(device)
    if stream != caller:
        stream.wait_stream(caller)


def torch_device(device: str) -> torch.device:
    """`device` ("cpu", "cuda" or "cuda:N") as the torch device a runner computes on;
    a bare "cuda" is the current GPU, so the runner stays there.

    Raises:
        RuntimeUnavailableError: CUDA asked for where torch sees no GPU, or another
            device type.
    """
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeUnavailableError(
            f"device {device!r} requested but torch {torch.__version__} sees no CUDA GPU "
            "(install a CUDA build of torch, or use device='cpu')"
        )
    if target.type not in ("cpu", "cuda"):
        raise RuntimeUnavailableError(f"unsupported device {device!r} (use 'cpu' or 'cuda')")
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    return target
