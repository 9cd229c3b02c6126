"""Frames into engine batches: the policies and the channels each puts between capture,
batcher and engine, the batcher's step (frames of one source in order, or one frame of
each source of a group), and the CUDA streams of batches on a GPU.

Two policies decide what happens when a later stage is slower than capture:

- ``"live"`` (default for live sources): capture never waits. The frames and
  batches channels hold only the newest work (``drop_oldest``), so when inference
  falls behind the oldest waiting frame is discarded and counted, and every
  processed frame waited at most one frame interval before reaching the engine:
  capture-to-pose latency stays near one frame interval plus one engine run.
  Batches hold 1 frame by default, the lowest latency.
- ``"recorded"`` (default for files): nothing is ever dropped. Every channel
  blocks, so a slow stage slows capture instead. Batches hold 8 frames by
  default, and decoding runs ahead by two batches so the next batch is ready
  the moment the engine finishes the current one. Every stage but infer runs at
  the lowest CPU priority (see `priority`).

Frames whose images are CUDA tensors (a GPU decoder) are stacked on the device,
on a copy stream of their own, and the engine's stream waits for the stack through
a CUDA event (`DeviceStreams`): batch k+1 is decoded and stacked while batch k
runs, and no frame visits the host.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from typing import Any, Literal, get_args

import attrs
import numpy as np

from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, StreamError
from sleap_live.stream.slots import SlotPolicy, SourceSlots
from sleap_live.stream.sources.group import SourceGroup
from sleap_live.stream.types import Frame

Policy = Literal["live", "recorded"]
POLICIES: tuple[str, ...] = get_args(Policy)

# Live: one frame per batch is the lowest latency. Recorded: 8 is the batch size
# sleap-nn exports engines for by default (its `--max-batch-size`), so exported
# TensorRT engines accept it; it amortises per-call overhead (sleap-nn PR #418
# measured 3.4x the single-instance TensorRT throughput at batch 8 over batch 1);
# and two batches in flight keep decode-ahead memory small (16 MB of 1024² gray).
DEFAULT_BATCH_SIZE = {"live": 1, "recorded": 8}

# Recorded: a partial batch goes to the engine once no frame came for this long (on
# the pipeline's clock). Decoding a file never pauses that long, so full batches
# are unaffected; a source that stalls, or trickles frames (an SDK not marked
# live), cannot hold finished frames back in a half-filled batch.
RECORDED_BATCH_WAIT = 1.0


def choose_policy(
    policy: Policy | None, is_live: bool, batch_size: int | None
) -> tuple[Policy, int]:
    """The policy and batch size a pipeline runs with; defaults follow `is_live`.

    Raises:
        ValueError: an unknown policy or a batch size below 1.
    """
    if policy is None:
        policy = "live" if is_live else "recorded"
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE[policy]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int of at least 1, got {batch_size!r}")
    return policy, batch_size


@attrs.define(eq=False)
class StageTimes:
    """When one batch went through each stage, in seconds on the pipeline's clock.

    ``decode`` spans the capture stamps of the batch's first and last frame;
    ``stack`` the batcher stacking its images; ``engine`` the runner's call;
    ``postprocess`` the emit stage turning its poses into records and outputs.
    Each stage fills its own pair while it holds the batch.
    """

    decode: tuple[float, float]
    stack: tuple[float, float] = (0.0, 0.0)
    engine: tuple[float, float] = (0.0, 0.0)
    postprocess: tuple[float, float] = (0.0, 0.0)


STAGES: tuple[str, ...] = ("decode", "stack", "engine", "postprocess")


@attrs.frozen(eq=False)
class DeviceStreams:
    """The CUDA streams of a pipeline whose frames are on a GPU.

    Attributes:
        copy: the stream batches are stacked on.
        inference: the stream the runner runs on.
    """

    copy: Any
    inference: Any

    @classmethod
    def for_image(cls, image: Any) -> DeviceStreams | None:
        """Streams on the image's device if it is a CUDA tensor, else None (host path)."""
        device = getattr(image, "device", None)
        if device is None or getattr(device, "type", None) != "cuda":
            return None
        import torch

        return cls(torch.cuda.Stream(device), torch.cuda.Stream(device))


@attrs.frozen(eq=False)
class Batch:
    """Frames for one engine call, and their images stacked (B, H, W, C).

    Attributes:
        frames: the frames, in order.
        images: a numpy array, or a CUDA tensor when the frames are on a GPU.
        times: when it went through each stage.
        streams: the CUDA streams, for device batches.
        ready: CUDA event the inference stream must wait for before reading
            `images` (recorded on the copy stream after stacking), or None.
    """

    frames: tuple[Frame, ...]
    images: Any
    times: StageTimes
    streams: DeviceStreams | None = None
    ready: Any = None

    def image(self, position: int, *, on_host: bool) -> Any:
        """Frame `position`'s image; with `on_host` a numpy array (device images copied).

        Device frames' own buffers are reused by the source; the batch's copy is not.
        """
        image = self.images[position]
        if isinstance(image, np.ndarray) or not on_host:
            return image
        if self.ready is not None:
            # The copy to the host is queued on this thread's current stream, which
            # is not ordered after the copy stream's stack: wait for the stack
            # (a batch dropped before the engine never waited for it at all).
            self.ready.synchronize()
        return image.cpu().numpy()


def batches_channel(policy: str, on_dropped: Callable[[Batch], object]) -> Channel[Batch]:
    """The batches channel (batcher -> engine): the newest batch live, two recorded."""
    if policy == "live":
        return Channel(1, "drop_oldest", on_drop=on_dropped)
    return Channel(2, "block")


def frames_in_flight(policy: str, batch_size: int) -> int:
    """Most frames a pipeline holds at once: the frames' slots (`open_batcher`) and
    `batches_channel` full, one batch being filled and one in the engine."""
    frames, batches = (batch_size, 1) if policy == "live" else (2 * batch_size, 2)
    return frames + (batches + 2) * batch_size


def open_batcher(group: SourceGroup, policy: str, batch_size: int, clock: Clock) -> Batcher:
    """The batcher of a run on `group`, with the frames' slots it batches from, the
    newest frames kept live, every frame recorded: a batch of one frame of each source
    (`GroupBatcher`, a frame per slot) where the group has `per_source`; else a batch
    of up to `batch_size` frames in order (`SequenceBatcher`), the one slot holding a
    batch live, decoding two batches ahead recorded."""
    slot_policy: SlotPolicy = "latest" if policy == "live" else "block"
    if group.per_source:
        return GroupBatcher(SourceSlots(group.source_ids, slot_policy), policy, group.fps, clock)
    depth = batch_size if policy == "live" else 2 * batch_size
    frames = SourceSlots(group.source_ids, slot_policy, depth)
    return SequenceBatcher(frames, batch_size, policy, group.fps, clock)


class Batcher(abc.ABC):
    """The batcher stage's step, a whole batch from its first frame, and the frames it
    batches; two strategies (see `open_batcher`).

    The first device frame makes the CUDA streams; host frames need none.

    Attributes:
        frames: the frames' slots (a slot per source) the source readers put frames
            in and the batcher stage takes each batch's first from.
    """

    def __init__(self, frames: SourceSlots, clock: Clock) -> None:
        self.frames = frames
        self._clock = clock
        self._streams: DeviceStreams | None = None

    def batch(self, first: Frame) -> Batch:
        """`first` and the frames that go with it, stacked.

        Raises:
            StreamError: a frame's size differs from the first's.
        """
        if self._streams is None:
            self._streams = DeviceStreams.for_image(first.image)
        return self._collect(first, self._streams)

    @abc.abstractmethod
    def _collect(self, first: Frame, streams: DeviceStreams | None) -> Batch: ...

    def end(self, source_id: str) -> None:
        """`source_id`'s reader ends: its frames are no longer waited for."""
        self.frames.end(source_id)

    def dropped_by_source(self) -> dict[str, int]:
        """Frames a newer frame pushed out of `frames` before they were batched, by source."""
        return self.frames.dropped_by_source()


class SequenceBatcher(Batcher):
    """A batch of the frames of one source in order.

    Live batches wait for a full batch at most `batch_size` frame intervals after
    their first frame was captured; recorded ones are filled unless the source ends,
    the slots close, or no frame comes for `RECORDED_BATCH_WAIT` seconds.

    Args:
        frames: the one source's slot the frames come from.
        batch_size: most frames per batch.
        policy: ``"live"`` or ``"recorded"``.
        fps: the source's frame rate, None if unknown (live batches then fill).
    """

    def __init__(
        self, frames: SourceSlots, batch_size: int, policy: str, fps: float | None, clock: Clock
    ) -> None:
        super().__init__(frames, clock)
        self._batch_size = batch_size
        self._wait = batch_size / fps if policy == "live" and fps else None
        self._idle = None if policy == "live" else RECORDED_BATCH_WAIT

    def _collect(self, first: Frame, streams: DeviceStreams | None) -> Batch:
        deadline = None if self._wait is None else first.timestamp + self._wait
        return collect_batch(
            self.frames, first, self._batch_size, deadline, self._clock, streams, self._idle
        )


def collect_batch(
    frames: SourceSlots,
    first: Frame,
    batch_size: int,
    deadline: float | None,
    clock: Clock,
    streams: DeviceStreams | None = None,
    idle: float | None = None,
) -> Batch:
    """`first` and up to `batch_size - 1` more frames, taken until `deadline` on `clock`.

    With no deadline the batch is filled unless the source ends, the slots close or, with `idle`,
    no frame comes for `idle` seconds on `clock`. With `streams` (device frames)
    the images are stacked on the copy stream.

    Raises:
        StreamError: a frame's size differs from the first's.
    """
    group = [first]
    while len(group) < batch_size:
        wait = None if deadline is None else deadline - clock()
        if wait is not None and wait <= 0:
            break
        try:
            if wait is None and idle is not None:
                group.append(frames.get_by(clock() + idle, clock))
            else:
                group.append(frames.get(wait))
        except (ChannelEmpty, ChannelClosed):
            break
    return _stacked(group, clock, streams)


class GroupBatcher(Batcher):
    """A batch of the first frame and the frame of each other source that comes next,
    in the sources' order.

    Live, the other sources' frames are waited for at most one frame interval after
    the first frame was captured (cameras running at one rate each deliver a frame
    within it; without a rate, until each has one); recorded, until every source
    has given one, ended, or none came for `RECORDED_BATCH_WAIT` seconds.

    Args:
        slots: the frames' slots the first frames come from.
        policy: ``"live"`` or ``"recorded"``.
        fps: the sources' (highest) frame rate, None if unknown.
    """

    def __init__(self, slots: SourceSlots, policy: str, fps: float | None, clock: Clock) -> None:
        super().__init__(slots, clock)
        self._order = {source: place for place, source in enumerate(slots.source_ids)}
        self._wait = (1.0 / fps if fps else math.inf) if policy == "live" else None

    def _collect(self, first: Frame, streams: DeviceStreams | None) -> Batch:
        group = [first]
        taken = {first.source_id}
        while len(taken) < len(self._order):
            if self._wait is None:
                deadline = self._clock() + RECORDED_BATCH_WAIT
            else:
                deadline = first.timestamp + self._wait
            try:
                frame = self.frames.get_by(deadline, self._clock, skip=taken)
            except (ChannelEmpty, ChannelClosed):
                break
            group.append(frame)
            taken.add(frame.source_id)
        group.sort(key=lambda frame: self._order[frame.source_id])
        return _stacked(group, self._clock, streams)


def _stacked(group: list[Frame], clock: Clock, streams: DeviceStreams | None) -> Batch:
    """The batch of `group`'s frames, their images stacked (on the copy stream for
    device frames).

    Raises:
        StreamError: a frame's size differs from the first's.
    """
    started = clock()
    stamps = [frame.timestamp for frame in group]
    times = StageTimes(decode=(min(stamps), max(stamps)))
    _check_sizes(group)
    if streams is not None:
        images, ready = _stack_on_device(group, streams)
    else:
        images, ready = _stack_on_host(group), None
    times.stack = (started, clock())
    return Batch(tuple(group), images, times, streams, ready)


def _check_sizes(frames: list[Frame]) -> None:
    """Raise `StreamError` naming the first frame whose size differs from the first's."""
    shape = tuple(frames[0].image.shape)
    for frame in frames[1:]:
        if tuple(frame.image.shape) != shape:
            raise StreamError(
                f"{frame.source_id}: frame {frame.index} is {tuple(frame.image.shape)}, "
                f"earlier frames were {shape}; a source must keep one frame size"
            )


def _stack_on_host(frames: list[Frame]) -> Any:
    if len(frames) == 1:
        return frames[0].image[np.newaxis]
    if isinstance(frames[0].image, np.ndarray):
        return np.stack([frame.image for frame in frames])
    # CPU tensors (an iterator of tensors): stacked by torch, already imported.
    import torch

    return torch.stack([frame.image for frame in frames])


def _stack_on_device(frames: list[Frame], streams: DeviceStreams) -> tuple[Any, Any]:
    """One (B, H, W, C) device tensor stacked on the copy stream, and its ready event."""
    import torch

    with torch.cuda.stream(streams.copy):
        images = torch.stack([frame.image for frame in frames])
        ready = torch.cuda.Event()
        ready.record(streams.copy)
    # The sources' buffers are free once the stack has read them.
    for frame in frames:
        if frame.release is not None:
            frame.release(streams.copy)
    # Allocated on the copy stream, read on the inference stream: the caching
    # allocator must not reuse its memory before the inference stream is done.
    images.record_stream(streams.inference)
    return images, ready
