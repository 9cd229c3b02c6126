"""Runs a torch `InferenceModel` (eager or a loaded TorchScript export).

On the CPU frames go to the model as they are (a numpy batch is wrapped, not
copied) and outputs come back as views.

On a CUDA device every step stays on the GPU: the model itself converts
channels, resizes, pads and normalises in torch, so frames never visit the host
or OpenCV. A CUDA tensor is used in place; a numpy batch is copied up once
through a pinned buffer, asynchronously. The work is queued on one stream (given
to one run, or to the runner, else a stream of the runner's own on its device:
never the legacy default stream), ordered after what the caller queued on its
current stream; outputs come back through pinned
buffers after one synchronisation. With `cuda_graphs=True` the model runs
through CUDA graphs captured per input shape (see
`sleap_live.engines.runners.cuda.GraphedForward`), when its outputs are fixed-size
(bottom-up; instance lists are not, and run eagerly after a one-line notice).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.host.outputs import output_axes
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import OUTPUT_LAYOUTS, ExportMetadata
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.runners.cuda import (
    DEFAULT_MAX_GRAPHS,
    Forward,
    GraphedForward,
    HostCopies,
    HostStaging,
    order_after_caller,
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
        cuda_graphs: CUDA only: capture the model in a CUDA graph per input
            shape after a warm-up run, and replay it (see the module docstring).
        max_graphs: CUDA graphs kept; the least recently used shape's is dropped.

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
    ) -> None:
        target = torch.device(device)
        if target.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeUnavailableError(
                f"device {device!r} requested but torch {torch.__version__} sees no CUDA GPU "
                "(install a CUDA build of torch, or use device='cpu')"
            )
        if target.type not in ("cpu", "cuda"):
            raise RuntimeUnavailableError(f"unsupported device {device!r} (use 'cpu' or 'cuda')")
        if target.type == "cpu" and (stream is not None or cuda_graphs):
            raise ValueError("stream and cuda_graphs need a CUDA device (device='cuda')")
        if target.type == "cuda" and target.index is None:
            target = torch.device("cuda", torch.cuda.current_device())
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
        self._graphed = (
            GraphedForward(
                self._model, self._output_names, model_output_axes(model), max_graphs=max_graphs
            )
            if cuda_graphs
            else None
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
        if self._copies is None:
            arrays = self._run_on_cpu(forward, frames, stream)
        else:
            arrays = self._run_on_cuda(forward, frames, stream)
        return decode(self.info, arrays, batch_size)

    def _run_on_cpu(self, model: Forward, frames: Any, stream: Any) -> dict[str, np.ndarray]:
        if isinstance(frames, np.ndarray):
            tensor = torch.from_numpy(np.ascontiguousarray(frames))
        else:
            if stream is not None:
                stream.synchronize()
            # Blocking: a non-blocking device-to-host copy could be read unfinished.
            tensor = frames.to(self._target)
        with torch.inference_mode():
            outputs = model(tensor)
        return {
            name: output.cpu().numpy()
            for name, output in zip(self._output_names, outputs, strict=True)
        }

    def _run_on_cuda(self, forward: Forward, frames: Any, stream: Any) -> dict[str, np.ndarray]:
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
            named = dict(zip(self._output_names, outputs, strict=True))
            return self._copies.fetch(named, stream)

    def close(self) -> None:
        """Drops the model, its CUDA graphs and buffers (and their device memory); idempotent."""
        self._model = None
        self._graphed = None


def model_output_axes(model: InferenceModel) -> dict[str, tuple[str, ...]]:
    """The output contract's axes of each of the model's outputs, in its profile's layout."""
    return output_axes(model.info.model_type, OUTPUT_LAYOUTS[model.profile])
