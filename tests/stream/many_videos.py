"""Helpers of the many-videos tests: a folder of short clips cut from the fixture
videos, the model they run, a corrupt video, and the pose arrays of an output.

The clips are lossless (FFV1) cuts of `tests/data/videos/single.mkv`, the video the
single-instance fixture model was trained for, at different starts, so each clip
has poses of its own; the model is its sleap-nn export (loaded in well under a
second, nothing exported). The tracking tests cut `multi_gray.mkv` for the
bottom-up export instead (`MULTI_VIDEO`, `MULTI_MODEL`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import sleap_io as sio

from sleap_live.stream.many.finish import unfinished_path
from sleap_live.stream.many.local import NoReport
from sleap_live.stream.many.videos import VideoJob
from sleap_live.stream.outputs.journal import journal_path, scan_journal
from tests import script_modules

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = DATA / "exports" / "single_instance"
SOURCE_VIDEO = DATA / "videos" / "single.mkv"
MULTI_MODEL = DATA / "exports" / "bottomup"
MULTI_VIDEO = DATA / "videos" / "multi_gray.mkv"


def cut_clips(
    folder: Path, spans: dict[str, tuple[int, int]], video: Path = SOURCE_VIDEO
) -> list[Path]:
    """Write clips ``NAME.mkv`` of `video`'s frames [start, start + count) into
    `folder` (`scripts/fixtures/media.py`'s, as the benchmark cuts them); their
    paths, sorted by name."""
    return script_modules.load("fixtures/media.py").cut_clips(video, folder, spans)


def corrupt_video(path: Path) -> Path:
    """A file named like a video that holds no video."""
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    return path


def pose_arrays(output: Path) -> dict[str, bytes]:
    """The bytes of an output's frame indices, points, point scores and instance
    scores, every instance of every frame in order."""
    labels = sio.load_slp(str(output))
    frames = sorted(labels.labeled_frames, key=lambda frame: frame.frame_idx)
    points, point_scores, scores, indices = [], [], [], []
    for frame in frames:
        for instance in frame.instances:
            indices.append(frame.frame_idx)
            points.append(instance.numpy(scores=False))
            point_scores.append(instance.numpy(scores=True)[:, 2])
            scores.append(instance.score)
    return {
        "frame_indices": np.asarray(indices, np.int64).tobytes(),
        "points": np.asarray(points, np.float64).tobytes(),
        "point_scores": np.asarray(point_scores, np.float64).tobytes(),
        "instance_scores": np.asarray(scores, np.float64).tobytes(),
    }


def track_names(output: Path) -> list[list[str | None]]:
    """Each frame's instances' track names, frames in order."""
    labels = sio.load_slp(str(output))
    frames = sorted(labels.labeled_frames, key=lambda frame: frame.frame_idx)
    return [
        [None if instance.track is None else instance.track.name for instance in frame.instances]
        for frame in frames
    ]


def frame_count(output: Path) -> int:
    """Labeled frames in an output."""
    return len(sio.load_slp(str(output)).labeled_frames)


def in_background(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """`function(*args, **kwargs)` running on a daemon thread, as a future: a test that
    fails while it runs (or a call that never returns) leaves it behind rather than
    waiting for it, as leaving a `ThreadPoolExecutor` block would."""
    future: Future = Future()

    def body() -> None:
        try:
            future.set_result(function(*args, **kwargs))
        except BaseException as error:  # handed to the test through the future
            future.set_exception(error)

    threading.Thread(target=body, name=f"in_background({function.__name__})", daemon=True).start()
    return future


def writer_pid_once_saving(output: Path, timeout: float = 300.0) -> int:
    """The process writing `output`'s unfinished journal, once it has saved frames
    (so a kill lands mid-video). The wait ends as soon as it has; its bound is for a
    busy machine: at load average 10 to 18 both Ray tests saw no frame within 60 s
    (Ray's start, each actor's imports and model load), and failed."""
    journal = journal_path(unfinished_path(output))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            contents = scan_journal(journal)
        except OSError:
            contents = None
        if contents is not None and contents.n_frames > 0:
            return contents.header.pid
        time.sleep(0.02)
    raise AssertionError(f"no frames were saved to {journal} within {timeout} s")


class SlowToNote(NoReport):
    """A display that takes `seconds` to note each video's start, so a run's shorter
    duration is up once its first video has started, whatever the machine's load."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started_videos: list[str] = []

    def started(self, job: VideoJob) -> None:
        self.started_videos.append(job.video.name)
        time.sleep(self.seconds)
