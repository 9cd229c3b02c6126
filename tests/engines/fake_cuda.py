"""A recording stand-in for the parts of `torch.cuda` the GPU runners call, on the CPU.

`install(monkeypatch)` puts it in place of `torch.cuda`'s streams, events, device
and stream contexts: every stream it makes has a distinct, non-null handle and
records the device it was made on and what it was told to wait for; the current
stream is the legacy default stream (handle 0) unless a `torch.cuda.stream`
context says otherwise; `calls` lists everything in order. A runner that computes
on the legacy default stream, hands work between streams without a wait, or makes
its stream on another device shows it here.
"""

from __future__ import annotations

import contextlib
import itertools

import torch


class FakeStream:
    def __init__(self, cuda: FakeCuda, device, handle: int) -> None:
        self.cuda = cuda
        self.device = torch.device(device) if device is not None else None
        self.cuda_stream = handle
        self.waited: list[object] = []

    def wait_stream(self, other) -> None:
        self.waited.append(other)
        self.cuda.calls.append(("wait_stream", self.cuda_stream, other.cuda_stream))

    def wait_event(self, event) -> None:
        self.waited.append(event)
        self.cuda.calls.append(("wait_event", self.cuda_stream, event))

    def synchronize(self) -> None:
        self.cuda.calls.append(("synchronize", self.cuda_stream))

    def __repr__(self) -> str:
        return f"FakeStream({self.cuda_stream} on {self.device})"


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.stream = None

    def record(self, stream=None) -> None:
        self.stream = stream if stream is not None else self.cuda.current
        self.cuda.calls.append(("record", self.stream.cuda_stream))

    def synchronize(self) -> None:
        self.cuda.calls.append(("event synchronize",))


class FakeCuda:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.handles = itertools.count(0xA000, 0x100)
        self.legacy = FakeStream(self, None, 0)
        self.current = self.legacy
        self.device_index = 0
        self.made: list[FakeStream] = []

    def Stream(self, device=None, **kwargs) -> FakeStream:
        stream = FakeStream(self, device, next(self.handles))
        self.made.append(stream)
        self.calls.append(("stream", stream.cuda_stream, str(stream.device)))
        return stream

    def Event(self, **kwargs) -> FakeEvent:
        return FakeEvent(self)

    def current_stream(self, device=None) -> FakeStream:
        return self.current

    @contextlib.contextmanager
    def stream(self, stream):
        before, self.current = self.current, stream
        self.calls.append(("enter stream", stream.cuda_stream))
        try:
            yield
        finally:
            self.current = before
            self.calls.append(("leave stream", stream.cuda_stream))

    @contextlib.contextmanager
    def device(self, device):
        index = torch.device(device).index if not isinstance(device, int) else device
        before, self.device_index = self.device_index, index
        self.calls.append(("enter device", index))
        try:
            yield
        finally:
            self.device_index = before
            self.calls.append(("leave device", index))

    def current_device(self) -> int:
        return self.device_index


def install(monkeypatch) -> FakeCuda:
    cuda = FakeCuda()
    for name in ("Stream", "Event", "current_stream", "stream", "device", "current_device"):
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return cuda


class StandInGraph:
    """Stands in for a captured `torch.cuda.CUDAGraph`: replay reruns the forward
    from the static input into the static outputs, as a graph replay would."""

    def __init__(self, forward, example):
        self.forward = forward
        self.input = example.clone()
        self.outputs = tuple(output.clone() for output in forward(self.input))
        self.replays = 0

    def replay(self):
        self.replays += 1
        for static, fresh in zip(self.outputs, self.forward(self.input), strict=True):
            static.copy_(fresh)
