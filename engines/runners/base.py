"""The one interface every engine implements: a uint8 batch in, poses out."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from sleap_live.engines.types import FramePoses, ModelInfo


@runtime_checkable
class Runner(Protocol):
    """Runs a pose model on batches of frames.

    `frames` is a uint8 array (or torch tensor, possibly on a CUDA device for GPU
    runners) of shape (batch, height, width, channels), exactly as decoders hand
    frames over; every preprocessing step happens inside the runner. A runner is
    used from one thread at a time.
    """

    info: ModelInfo
    device: str

    def run(self, frames: Any) -> list[FramePoses]:
        """Poses for each frame of the batch, in order."""
        ...

    def close(self) -> None:
        """Release sessions and device buffers; idempotent."""
        ...
