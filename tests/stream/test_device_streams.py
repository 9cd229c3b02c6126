"""The pipeline's CUDA hand-offs, on the CPU with a recording stand-in for torch.cuda:
decode -> stack (copy stream) -> engine (inference stream), each ordered by an event."""

from __future__ import annotations

import torch

from sleap_live.stream import batching
from sleap_live.stream.engine_step import EngineStep
from sleap_live.stream.stats import StageMeters
from sleap_live.stream.types import Frame
from tests.engines import fake_cuda
from tests.stream import fakes


class StreamRecordingRunner(fakes.FakeRunner):
    """Records the stream each run was given and torch's current stream during it."""

    def __init__(self, cuda) -> None:
        super().__init__()
        self.cuda = cuda
        self.seen: list[tuple[int, int]] = []

    def run(self, frames, *, stream=None):
        self.seen.append((stream.cuda_stream, self.cuda.current.cuda_stream))
        self.cuda.calls.append(("run",))
        return super().run(frames.numpy())


def test_a_device_batch_is_stacked_released_and_run_in_event_order(monkeypatch):
    cuda = fake_cuda.install(monkeypatch)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    streams = batching.DeviceStreams(cuda.Stream("cuda:0"), cuda.Stream("cuda:0"))
    copy, inference = streams.copy.cuda_stream, streams.inference.cuda_stream
    released = []
    frames = [
        Frame(i, float(i), "s", torch.from_numpy(fakes.frame_image(i)), released.append)
        for i in range(2)
    ]
    cuda.calls.clear()
    batch = batching._stacked(frames, fakes.FakeClock(), streams)
    assert released == [streams.copy, streams.copy]  # the buffers, once the stack is queued
    runner = StreamRecordingRunner(cuda)
    result = EngineStep(runner, fakes.FakeClock(), StageMeters()).run(batch)
    assert len(result.poses) == 2
    # The engine runs on the inference stream, given it, after it waits for the stack.
    assert runner.seen == [(inference, inference)]
    steps = [call for call in cuda.calls if call[0] != "leave stream"]
    assert steps == [
        ("enter stream", copy),
        ("record", copy),
        ("wait_event", inference, batch.ready),
        ("enter stream", inference),
        ("run",),
    ]
