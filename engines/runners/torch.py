"""Runs a torch `InferenceModel` (eager or a loaded TorchScript export).

On the CPU frames go to the model as they are (a numpy batch is wrapped, not
copied) and outputs come back as views.

On a CUDA device every step stays on the GPU: the model itself converts
channels, resizes, pads and normalises in torch, so frames never visit the host
or OpenCV. A CUDA tensor is used in place; a numpy batch is copied up once
through a pinned buffer, asynchronously. The work is queued on one stream (given
to one run, or to the runner, else a stream of the runner's own on its device:
never the legacy default stream), ordered after what the caller queued on its
current stream; outputs come back through pinned buffers after one
synchronisation. With `cuda_graphs=True` the model runs as
specialised graphs (`sleap_live.engines.graph.specialised`: one per batch shape, traced
at its first batch, with no host round trip), each captured in a CUDA graph (see
`sleap_live.engines.runners.cuda.GraphedForward`: warm-up on a side stream,
thread-local capture) and replayed; `status` says what runs. A batch in which a
frame fills every centroid slot of a model that keeps every centroid runs on the
model itself (see `SpecialisedModel.may_have_dropped`). A TorchScript export is
captured as it is, when its outputs are fixed-size (bottom-up; instance lists are
not, and run eagerly after a one-line notice).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.torchscript import LoadedTorchScript
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.specialised import (
    BatchShape,
    SpecialisedModel,
    specialised_input_channels,
    specialised_output_names,
)
from sleap_live.engines.host.outputs import output_axes
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import OUTPUT_LAYOUTS, ExportMetadata
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.runners.cuda import (
    DEFAULT_MAX_GRAPHS,
    LOG,
    Capture,
    Forward,
    GraphedForward,
    HostCopies,
    HostStaging,
    capture_cuda_graph,
    order_after_caller,
    torch_device,
)
from sleap_live.engines.types import FramePoses, ModelInfo


class TorchRunner:
    """Runs an inference model with torch under `inference_mode`.

    Args:
        model: the inference model; moved to `device` and put in eval mode.
        device: "cpu", "cuda" or "cuda:N".
        num_threads: intra-op threads for CPU inference. torch's default is the
            number of physical cores; this sets it process-wide
            (`torch.set_num_threads`), so give it only when this runner is the
            process's main torch user. Idle threads sleep rather than spin when
            sleap-live loaded torch (`sleap_live.engines.openmp`),
            so a busy core slows a run rather than collapsing it.
        input_channels: channel counts the model accepts itself; frames with
            another count are converted before the call. Eager inference models
            take both; a TorchScript export records what it takes.
        stream: CUDA only: the `torch.cuda.Stream` runs queue their work on
            (None: a stream of the runner's own on its device).
        cuda_graphs: CUDA only: capture the model's specialised graph of each
            batch shape in a CUDA graph after a warm-up run, and replay it (see
            the module docstring).
        max_graphs: CUDA graphs kept; the least recently used shape's is dropped.
        capture: captures a CUDA graph (tests pass a stand-in).

    Attributes:
        info: the model's `ModelInfo`.
        device: the torch device the model runs on, e.g. "cpu" or "cuda:0".

    Raises:
        RuntimeUnavailableError: a CUDA device without a CUDA GPU, or an unknown
            device.
        ValueError: `stream` or `cuda_graphs` on the CPU.
    """

    def __init__(
        self,
        model: InferenceModel,
        device: str = "cpu",
        *,
        num_threads: int | None = None,
        input_channels: Sequence[int] = (1, 3),
        stream: Any = None,
        cuda_graphs: bool = False,
        max_graphs: int = DEFAULT_MAX_GRAPHS,
        capture: Capture = capture_cuda_graph,
    ) -> None:
        target = torch_device(device)
        if target.type == "cpu" and (stream is not None or cuda_graphs):
            raise ValueError("stream and cuda_graphs need a CUDA device (device='cuda')")
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.info: ModelInfo = model.info
        self.metadata: ExportMetadata | None = None  # a torch module, not an ONNX graph
        self.device = str(target)
        self._target = target
        self._output_names = tuple(model.output_names)
        self._input_channels = tuple(input_channels)
        self._model: InferenceModel | None = model.to(target).eval()
        cuda = target.type == "cuda"
        self._stream = torch.cuda.Stream(target) if cuda and stream is None else stream
        self._specialised: SpecialisedModels | None = None
        self._graphed: GraphedForward | None = None
        self._eager_reason: str | None = None  # why cuda_graphs=True runs eagerly
        if cuda_graphs and isinstance(model, LoadedTorchScript):
            axes = model_output_axes(model)
            self._graphed = GraphedForward(
                self._model, self._output_names, axes, capture=capture, max_graphs=max_graphs
            )
        elif cuda_graphs:
            try:
                self._input_channels = specialised_input_channels(model)
            except ModelConfigError as error:
                self._eager_reason = f"no specialised graph ({error})"
                LOG.warning("CUDA graphs off, running eagerly: %s", self._eager_reason)
            else:
                self._specialised = SpecialisedModels(self._model, target, max_graphs)
                self._output_names = self._specialised.output_names
                # Every output of a specialised graph is fixed by the batch's shape.
                self._graphed = GraphedForward(
                    self._specialised,
                    self._output_names,
                    None,
                    capture=capture,
                    max_graphs=max_graphs,
                )
        self._staging = HostStaging(pin=True) if cuda else None
        self._copies = HostCopies(pin=True) if cuda else None

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) numpy array or torch tensor.

        Args:
            frames: the batch; on a CUDA runner, best a tensor on its device.
            stream: CUDA only: the stream for this run, instead of the runner's
                (e.g. the pipeline's inference stream). A CPU runner waits for it
                before it reads device frames.

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
        """
        frames, batch_size = begin_run(self, self._model, frames, self._input_channels)
        forward = cast(Forward, self._model if self._graphed is None else self._graphed)
        arrays = self._run(forward, frames, stream)
        if self._specialised is not None and self._specialised.may_have_dropped(frames, arrays):
            assert self._model is not None
            self._specialised.eager_batches += 1
            arrays = self._run(cast(Forward, self._model), frames, stream, eager=True)
        return decode(self.info, arrays, batch_size)

    @property
    def status(self) -> str:
        """What runs, in one line: eager torch, or CUDA graphs of what (and how many)."""
        if self._graphed is None:
            reason = self._eager_reason
            return "eager" if reason is None else f"eager (CUDA graphs off: {reason})"
        if self._specialised is None:
            return f"TorchScript export: {self._graphed.status}"
        eager = self._specialised.eager_batches
        rerun = f"; {eager} batches rerun eagerly (every centroid slot full)" if eager else ""
        return f"specialised graphs: {self._graphed.status}{rerun}"

    def _run(
        self, forward: Forward, frames: Any, stream: Any, *, eager: bool = False
    ) -> dict[str, np.ndarray]:
        names = tuple(self._model.output_names) if eager and self._model else self._output_names
        if self._copies is None:
            return self._run_on_cpu(forward, frames, stream, names)
        return self._run_on_cuda(forward, frames, stream, names)

    def _run_on_cpu(
        self, model: Forward, frames: Any, stream: Any, names: Sequence[str]
    ) -> dict[str, np.ndarray]:
        if isinstance(frames, np.ndarray):
            tensor = torch.from_numpy(np.ascontiguousarray(frames))
        else:
            if stream is not None:
                stream.synchronize()
            # Blocking: a non-blocking device-to-host copy could be read unfinished.
            tensor = frames.to(self._target)
        with torch.inference_mode():
            outputs = model(tensor)
        return {name: output.cpu().numpy() for name, output in zip(names, outputs, strict=True)}

    def _run_on_cuda(
        self, forward: Forward, frames: Any, stream: Any, names: Sequence[str]
    ) -> dict[str, np.ndarray]:
        assert self._staging is not None and self._copies is not None
        # The run's stream, else the runner's own: never the legacy default stream.
        stream = stream if stream is not None else self._stream
        order_after_caller(stream, self._target)
        with torch.cuda.stream(stream), torch.inference_mode():
            if isinstance(frames, np.ndarray):
                tensor = self._staging.upload(frames, self._target)
            else:
                tensor = frames.to(self._target, non_blocking=True)
            outputs = forward(tensor)
            named = dict(zip(names, outputs, strict=True))
            return self._copies.fetch(named, stream)

    def close(self) -> None:
        """Drops the model, its CUDA graphs and buffers (and their device memory); idempotent."""
        self._model = None
        self._graphed = None
        self._specialised = None


class SpecialisedModels:
    """A model's specialised graph of each batch shape, traced at its first batch.

    Called with a batch, runs that batch shape's graph (the forward
    `GraphedForward` captures). At most `max_graphs` are kept, the least recently
    used dropped beyond it.

    Attributes:
        output_names: the graphs' outputs' names, in order.
        eager_batches: batches the runner reran on the model itself.
    """

    def __init__(self, model: InferenceModel, device: torch.device, max_graphs: int) -> None:
        self._model = model
        self._device = device
        self._max_graphs = max_graphs
        self._graphs: OrderedDict[BatchShape, SpecialisedModel] = OrderedDict()
        self.output_names = specialised_output_names(model)
        self.eager_batches = 0

    def __call__(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.graph_for(BatchShape.of(frames))(frames)

    def graph_for(self, shape: BatchShape) -> SpecialisedModel:
        """The graph of `shape`, traced now if it is not held."""
        graph = self._graphs.get(shape)
        if graph is None:
            graph = SpecialisedModel(self._model, shape, self._device)
            self._graphs[shape] = graph
            while len(self._graphs) > self._max_graphs:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(shape)
        return graph

    def may_have_dropped(self, frames: Any, outputs: dict[str, np.ndarray]) -> bool:
        """Whether the batch's graph may have lost centroids (see `SpecialisedModel`)."""
        return self.graph_for(BatchShape.of(frames)).may_have_dropped(outputs)


def model_output_axes(model: InferenceModel) -> dict[str, tuple[str, ...]]:
    """The output contract's axes of each of the model's outputs, in its profile's layout."""
    info = model.info
    return output_axes(
        info.model_type,
        OUTPUT_LAYOUTS[model.profile],
        boxes=bool(info.box_categories),
        embeddings=info.embedding_dim is not None,
    )
