"""Runs a torch `InferenceModel` (eager or a loaded TorchScript export)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.types import FramePoses, ModelInfo


class TorchRunner:
    """Runs an inference model with torch under `inference_mode`.

    Args:
        model: the inference model; moved to `device` and put in eval mode.
        device: "cpu", "cuda" or "cuda:N".
        num_threads: intra-op threads for CPU inference. torch's default is the
            number of physical cores; this sets it process-wide
            (`torch.set_num_threads`), so give it only when this runner is the
            process's main torch user.
        input_channels: channel counts the model accepts itself; frames with
            another count are converted before the call. Eager inference models
            take both; a TorchScript export records what it takes.

    Attributes:
        info: the model's `ModelInfo`.
        device: the torch device the model runs on, e.g. "cpu" or "cuda:0".
    """

    def __init__(
        self,
        model: InferenceModel,
        device: str = "cpu",
        *,
        num_threads: int | None = None,
        input_channels: Sequence[int] = (1, 3),
    ) -> None:
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
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.info: ModelInfo = model.info
        self.device = str(target)
        self._target = target
        self._output_names = tuple(model.output_names)
        self._input_channels = tuple(input_channels)
        self._model: InferenceModel | None = model.to(target).eval()

    def run(self, frames: Any) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) numpy array or torch tensor.

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
        """
        frames, batch_size = begin_run(self, self._model, frames, self._input_channels)
        if isinstance(frames, np.ndarray):
            tensor = torch.from_numpy(np.ascontiguousarray(frames)).to(self._target)
        else:
            tensor = frames.to(self._target, non_blocking=True)
        with torch.inference_mode():
            outputs = self._model(tensor)
        arrays = {
            name: output.cpu().numpy()
            for name, output in zip(self._output_names, outputs, strict=True)
        }
        return decode(self.info, arrays, batch_size)

    def close(self) -> None:
        """Drops the model (and its device memory); idempotent."""
        self._model = None
