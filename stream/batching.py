"""Frames into engine batches: the channels each policy puts between capture, batcher
and engine, the batcher's step, and the CUDA streams of batches that live on a GPU.

``"live"`` channels drop the oldest item when full, so capture never waits and the
engine always gets the newest frames; ``"recorded"`` channels block, and hold two
batches of frames so decoding runs ahead of the engine.

Frames whose images are CUDA tensors (a GPU decoder) are stacked on the device,
on a copy stream of their own, and the engine's stream waits for the stack through
a CUDA event (`DeviceStreams`): batch k+1 is decoded and stacked while batch k
runs, and no frame visits the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, StreamError
from sleap_live.stream.types import Frame


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


def policy_channels(
    policy: str, batch_size: int, on_batch_dropped: Callable[[Batch], object]
) -> tuple[Channel[Frame], Channel[Batch]]:
    """The frames channel (capture -> batcher) and batches channel (batcher -> engine)."""
    if policy == "live":
        return (
            Channel(batch_size, "drop_oldest"),
            Channel(1, "drop_oldest", on_drop=on_batch_dropped),
        )
    return Channel(2 * batch_size, "block"), Channel(2, "block")


def collect_batch(
    frames: Channel[Frame],
    first: Frame,
    batch_size: int,
    deadline: float | None,
    clock: Clock,
    streams: DeviceStreams | None = None,
) -> Batch:
    """`first` and up to `batch_size - 1` more frames, taken until `deadline` on `clock`.

    With no deadline the batch is filled unless the channel closes. With `streams`
    (device frames) the images are stacked on the copy stream.

    Raises:
        StreamError: a frame's size differs from the first's.
    """
    group = [first]
    while len(group) < batch_size:
        wait = None if deadline is None else deadline - clock()
        if wait is not None and wait <= 0:
            break
        try:
            group.append(frames.get(wait))
        except (ChannelEmpty, ChannelClosed):
            break
    started = clock()
    times = StageTimes(decode=(first.timestamp, group[-1].timestamp))
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
    # Allocated on the copy stream, read on the inference stream: the caching
    # allocator must not reuse its memory before the inference stream is done.
    images.record_stream(streams.inference)
    return images, ready
