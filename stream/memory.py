"""Whether the frames a pipeline holds at once fit in this machine's memory.

A batch size far too large for the frame size would otherwise run for minutes,
filling memory, before failing in an allocation with no word about the cause.
"""

from __future__ import annotations

import os

from sleap_live.stream.batching import frames_in_flight

# The frames in flight may take at most this share of the available memory: the
# engine's own buffers (activations, outputs) need the rest.
MAX_SHARE = 0.5


def available_memory() -> int | None:
    """Bytes a new allocation can get without swapping (Linux's MemAvailable, else the
    free pages), or None where the system does not say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_batch_memory(
    policy: str,
    batch_size: int,
    frame_shape: tuple[int, int, int],
    available: int | None = None,
) -> None:
    """Raises `ValueError` if `batch_size` frames of `frame_shape` per batch, as many
    as the policy keeps in flight, need more than `MAX_SHARE` of the memory available.

    Args:
        policy: the pipeline's policy ("live" or "recorded").
        batch_size: frames per engine call.
        frame_shape: (height, width, channels) of the source's uint8 images.
        available: bytes available; None asks the system (`available_memory`), and
            where it does not say nothing is checked.
    """
    available = available_memory() if available is None else available
    if available is None:
        return
    height, width, channels = frame_shape
    count = frames_in_flight(policy, batch_size)
    needed = count * height * width * channels
    if needed > MAX_SHARE * available:
        raise ValueError(
            f"batch size {batch_size} is too large for {width}x{height}x{channels} frames: "
            f"the {count} frames in flight would need {_gib(needed)} but only "
            f"{_gib(available)} of memory is available; give a smaller batch size"
        )


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"
