"""The infer stage's step: one batch through the runner, timed and checked.

A batch of host frames goes to `runner.run` as it is. A batch of device frames
(see `batching.DeviceStreams`) runs on its inference stream, after that stream
waits for the batch's stack on the copy stream, and the runner is given that
stream (`run(images, stream=...)`): a GPU runner queues its work there, or on a
stream of its own that first waits for it (ONNX Runtime's session stream is fixed
when the session is made).
"""

from __future__ import annotations

import attrs
import numpy as np

from sleap_live.engines.runners.base import Runner
from sleap_live.engines.types import FramePoses
from sleap_live.stream.batching import Batch
from sleap_live.stream.clock import Clock
from sleap_live.stream.errors import PipelineError
from sleap_live.stream.stats import StageMeters


@attrs.frozen(eq=False)
class EngineResult:
    """A batch and its frames' poses, in order, on their way to the emit stage."""

    batch: Batch
    poses: list[FramePoses]


class EngineStep:
    """Runs batches through one runner, stamping `batch.times.engine` (on the
    pipeline's clock) and telling the meters how long each engine call took."""

    def __init__(self, runner: Runner, clock: Clock, meters: StageMeters) -> None:
        self._runner = runner
        self._clock = clock
        self._meters = meters

    def warm_up(self, batch_size: int, frame_shape: tuple[int, ...]) -> None:
        """Run the engine once on a blank host batch, untimed."""
        self._runner.run(np.zeros((batch_size, *frame_shape), np.uint8))

    def run(self, batch: Batch) -> EngineResult:
        """The poses of each frame of `batch`, in order.

        Raises:
            PipelineError: the runner returned poses for another number of frames.
        """
        started = self._clock()
        poses = self._run(batch)
        batch.times.engine = (started, self._clock())
        self._meters.engine_ran(batch.times.engine[1] - started)
        if len(poses) != len(batch.frames):
            raise PipelineError(
                f"runner returned poses for {len(poses)} frames, "
                f"given a batch of {len(batch.frames)}"
            )
        return EngineResult(batch, poses)

    def _run(self, batch: Batch) -> list[FramePoses]:
        """The runner on one batch; a device batch on the inference stream, after its stack."""
        if batch.streams is None:
            return self._runner.run(batch.images)
        import torch

        inference = batch.streams.inference
        inference.wait_event(batch.ready)
        with torch.cuda.stream(inference):
            return self._runner.run(batch.images, stream=inference)
