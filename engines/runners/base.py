"""The one interface every engine implements (a uint8 batch in, poses out), and the
start of `run` they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from sleap_live.engines.errors import EngineError
from sleap_live.engines.host.frames import as_numpy, check_frames, convert_channels
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.engines.types import FramePoses, ModelInfo


@runtime_checkable
class Runner(Protocol):
    """Runs a pose model on batches of frames.

    `frames` is a uint8 array (or torch tensor, possibly on a CUDA device for GPU
    runners) of shape (batch, height, width, channels), exactly as decoders hand
    frames over; every preprocessing step happens inside the runner. A runner is
    used from one thread at a time.

    Attributes:
        info: what the model is and the settings it runs with.
        device: where it runs ("cpu", "cuda:0", ...).
        metadata: the export's embedded metadata (model, sources, verification)
            for runners of a sleap-live ONNX graph; None for the others.
    """

    info: ModelInfo
    device: str
    metadata: ExportMetadata | None

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of the batch, in order.

        `stream`: the CUDA stream the frames were made ready on and the run queues
        its work on (GPU runners; None: the runner's own). CPU runners take None only.
        """
        ...

    def close(self) -> None:
        """Release sessions and device buffers; idempotent."""
        ...


def refuse_stream(runner: object, stream: Any) -> None:
    """What a CPU runner's `run` says to a CUDA stream: it has none to run on."""
    if stream is not None:
        raise ValueError(f"{type(runner).__name__} runs on the CPU: it takes no CUDA stream")


def begin_run(
    runner: object, engine: object | None, frames: Any, channels: Sequence[int]
) -> tuple[Any, int]:
    """What every runner's `run` does first, before its engine sees the frames.

    Args:
        runner: the runner, named in the error when it is closed.
        engine: its model or session; None once the runner is closed.
        frames: the batch handed to `run`.
        channels: channel counts the engine takes itself; frames with another
            count are converted to the first: on the host (`convert_channels`),
            or, for a tensor on a GPU, on its device by the graph's own torch code
            (the same values), so device frames never visit the host.

    Returns:
        `(frames, batch_size)`: the frames as given (numpy array or torch tensor),
        or converted (a numpy array, or a tensor on the frames' device).

    Raises:
        EngineError: the runner is closed.
        InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
    """
    if engine is None:
        raise EngineError(f"this {type(runner).__name__} is closed")
    batch_size, _, _, count = check_frames(frames)
    if count not in channels:
        if getattr(getattr(frames, "device", None), "type", "cpu") != "cpu":  # a GPU tensor
            frames = _convert_on_device(frames, channels[0])
        else:
            frames = convert_channels(as_numpy(frames), channels[0])
    return frames, batch_size


def _convert_on_device(frames: Any, channels: int) -> Any:
    """`convert_channels` of a torch tensor, on its device, with the graph's own code."""
    from sleap_live.engines.graph.preprocess import ensure_channels

    image = ensure_channels(
        frames.permute(0, 3, 1, 2), ensure_rgb=channels == 3, ensure_grayscale=channels == 1
    )
    return image.permute(0, 2, 3, 1).contiguous()
