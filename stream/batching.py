"""Frames into engine batches: the channels each policy puts between capture, batcher
and engine, and the batcher's step.

``"live"`` channels drop the oldest item when full, so capture never waits and the
engine always gets the newest frames; ``"recorded"`` channels block, and hold two
batches of frames so decoding runs ahead of the engine.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, StreamError
from sleap_live.stream.types import Frame


@attrs.frozen(eq=False)
class Batch:
    """Frames for one engine call, and their images stacked (B, H, W, C)."""

    frames: tuple[Frame, ...]
    images: np.ndarray


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
    frames: Channel[Frame], first: Frame, batch_size: int, deadline: float | None, clock: Clock
) -> Batch:
    """`first` and up to `batch_size - 1` more frames, taken until `deadline` on `clock`.

    With no deadline the batch is filled unless the channel closes.

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
    images = first.image[np.newaxis] if len(group) == 1 else _stack(group)
    return Batch(tuple(group), images)


def _stack(frames: list[Frame]) -> np.ndarray:
    """Stack frame images into one (B, H, W, C) array, naming the frame that differs."""
    shape = frames[0].image.shape
    for frame in frames[1:]:
        if frame.image.shape != shape:
            raise StreamError(
                f"{frame.source_id}: frame {frame.index} is {frame.image.shape}, "
                f"earlier frames were {shape}; a source must keep one frame size"
            )
    return np.stack([frame.image for frame in frames])
