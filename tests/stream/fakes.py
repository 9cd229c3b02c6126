"""Stand-ins for engines and sources, so pipeline tests run fast on any CPU.

Frames carry their own index in their first two pixels, and the fake runner turns
that back into poses, so a test can check that every record belongs to its frame.
Loaded by `conftest.py` (fixture `fakes`) and by CLI subprocess scripts by path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np

from sleap_live.engines.errors import InputMismatchError
from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.errors import SourceError
from sleap_live.stream.types import Frame

SKELETON = Skeleton(node_names=("head", "tail"), edges=((0, 1),), name="toy")
INFO = ModelInfo(
    model_type="multi_class_topdown",
    skeleton=SKELETON,
    input_channels=1,
    max_instances=2,
    class_names=("left", "right"),
)


def frame_image(index: int, shape: tuple[int, int, int] = (8, 8, 1)) -> np.ndarray:
    """An image whose first two pixels encode `index` (little-endian base 256).

    The rest is filled with `fill_of(index)`, which survives lossy encoding.
    """
    image = np.full(shape, fill_of(index), np.uint8)
    image[0, 0, 0] = index % 256
    image[0, 1, 0] = index // 256 % 256
    return image


def fill_of(index: int) -> int:
    return 28 + index * 37 % 200


def index_of(image: np.ndarray) -> int:
    return int(image[0, 0, 0]) + 256 * int(image[0, 1, 0])


def poses_for(index: int) -> FramePoses:
    """Deterministic poses of frame `index`: index % 3 instances, node x = index."""
    n = index % 3
    points = np.zeros((n, 2, 2), np.float32)
    points[:, :, 0] = index
    points[:, :, 1] = np.arange(n, dtype=np.float32)[:, None] * 10 + [0, 1]
    return FramePoses(
        points=points,
        point_scores=np.full((n, 2), 0.9, np.float32),
        instance_scores=np.full((n,), 0.8, np.float32),
        identities=np.arange(n, dtype=np.int32) % 2,
    )


class FakeRunner:
    """A `Runner` whose poses come from the frame index written in each image.

    Args:
        delay: seconds each `run` call takes, whatever the batch size.
        first_delay: seconds the first call takes instead (one-time initialisation).
        fail_on_call: raise `error` on this call (0-based).
        error: the exception raised on `fail_on_call`.
    """

    device = "cpu"

    def __init__(
        self,
        delay: float = 0.0,
        *,
        first_delay: float | None = None,
        fail_on_call: int | None = None,
        error: BaseException | None = None,
        info: ModelInfo = INFO,
    ) -> None:
        self.info = info
        self.delay = delay
        self.first_delay = first_delay
        self.fail_on_call = fail_on_call
        self.error = error or RuntimeError("engine exploded")
        self.batch_sizes: list[int] = []
        self.closed = False

    def run(self, frames: np.ndarray) -> list[FramePoses]:
        if frames.ndim != 4 or frames.dtype != np.uint8:
            raise InputMismatchError(
                f"expected uint8 (B, H, W, C), got {frames.dtype} {frames.shape}"
            )
        if len(self.batch_sizes) == self.fail_on_call:
            raise self.error
        delay = self.first_delay if not self.batch_sizes and self.first_delay else self.delay
        self.batch_sizes.append(len(frames))
        if delay:
            time.sleep(delay)
        return [poses_for(index_of(image)) for image in frames]

    def close(self) -> None:
        self.closed = True


class FakeSource:
    """An iterable frame source with the attributes `open_source` sources have.

    Args:
        n_frames: frames to yield; None for an endless (camera-like) source.
        fps: nominal rate; frames are paced to it when `paced`.
        is_live: what the pipeline uses to choose its policy.
        paced: yield frame i at start + i / fps, like a camera.
        decode_delay: seconds spent "decoding" each frame.
        fail_at: raise SourceError instead of yielding this frame.
        hang_at: block (ignoring close) before yielding this frame, until `release`.
    """

    def __init__(
        self,
        n_frames: int | None = 20,
        *,
        fps: float | None = 30.0,
        is_live: bool = False,
        paced: bool = False,
        decode_delay: float = 0.0,
        shape: tuple[int, int, int] = (8, 8, 1),
        fail_at: int | None = None,
        hang_at: int | None = None,
        source_id: str = "fake.mp4",
    ) -> None:
        self.source_id = source_id
        self.fps = fps
        self.frame_shape = shape
        self.n_frames = n_frames
        self.is_live = is_live
        self.paced = paced
        self.decode_delay = decode_delay
        self.fail_at = fail_at
        self.hang_at = hang_at
        self.release = threading.Event()
        self._stop = threading.Event()
        self.closed = False

    def __iter__(self) -> Iterator[Frame]:
        start = time.monotonic()
        index = 0
        while self.n_frames is None or index < self.n_frames:
            if self._stop.is_set():
                return
            if index == self.hang_at:
                self.release.wait()
            if index == self.fail_at:
                raise SourceError(f"{self.source_id}: corrupt packet at frame {index}")
            if self.paced:
                self._stop.wait(max(0.0, start + index / self.fps - time.monotonic()))
            elif self.decode_delay:
                time.sleep(self.decode_delay)
            yield Frame(
                index, time.monotonic(), self.source_id, frame_image(index, self.frame_shape)
            )
            index += 1

    def close(self) -> None:
        self._stop.set()
        self.closed = True
