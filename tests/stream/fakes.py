"""Stand-ins for engines, sources and the clock, so pipeline tests run fast on any CPU.

Frames carry their own index in their first two pixels, and the fake runner turns
that back into poses, so a test can check that every record belongs to its frame.

Timing tests run on a `FakeClock` that only the test moves: a `SteppedSource`
releases frames when the test says, a `FakeRunner` given the clock "runs" until the
clock reaches its end time, and `drive` steps the clock from event to event,
waiting (`settle`) until the pipeline has nothing left to do at each step. What a
record's latency is then follows from the schedule, not from the machine's load.
Loaded by `conftest.py` (fixture `fakes`) and by CLI subprocess scripts by path.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import sleap_io as sio

from sleap_live.engines.errors import InputMismatchError
from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources import default_read_timeout
from sleap_live.stream.stats import PipelineStats
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


def pipeline_stats(**changes) -> PipelineStats:
    """A snapshot of a recorded run a fifth of the way through; `changes` set any field."""
    fields: dict = dict(
        policy="recorded",
        batch_size=8,
        running=True,
        elapsed=1.0,
        frames_total=100,
        frames_captured=50,
        frames_processed=40,
        frames_dropped=0,
        fps=20.0,
        capture_fps=25.0,
        latency_p50=None,
        latency_p99=None,
        engine_latency_p50=None,
        engine_latency_p99=None,
        queue_depths={},
        instances_last_frame=0,
    )
    fields.update(changes)
    return PipelineStats(**fields)


# Real seconds a fake-clock wait may last before the test fails instead of hanging.
HANG_TIMEOUT = 10.0


class FakeClock:
    """A `Clock` that moves only when told to, or when something sleeps on it.

    `sleep_until` jumps the clock to the deadline at once (with ``jump=True``) or
    waits for someone else to move it there. `wait_until` always waits for that.

    Args:
        now: the starting time.
        jump: whether `sleep_until` moves the clock itself.
    """

    def __init__(self, now: float = 0.0, *, jump: bool = True) -> None:
        self._now = now
        self._jump = jump
        self._moved = threading.Condition()
        self.sleepers = 0

    def __call__(self) -> float:
        return self._now

    def set(self, now: float) -> None:
        """Move the clock to `now` (never backwards) and wake what waits for it."""
        with self._moved:
            self._now = max(self._now, now)
            self._moved.notify_all()

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)

    def sleep_until(self, deadline: float, wake: threading.Event) -> bool:
        if wake.is_set():
            return True
        if self._jump:
            self.set(deadline)
            return False
        return self._wait(deadline, wake)

    def wait_until(self, deadline: float) -> None:
        """Block until another thread moves the clock to `deadline`."""
        self._wait(deadline, None)

    def _wait(self, deadline: float, wake: threading.Event | None) -> bool:
        give_up = time.monotonic() + HANG_TIMEOUT
        with self._moved:
            self.sleepers += 1
            try:
                while self._now < deadline:
                    if wake is not None and wake.is_set():
                        return True
                    if time.monotonic() > give_up:
                        raise TimeoutError(f"nobody moved the fake clock to {deadline}")
                    # Short real waits only so that `wake`, an Event, is noticed.
                    self._moved.wait(0.005)
                return False
            finally:
                self.sleepers -= 1


def wait_for(condition, what: str, timeout: float = HANG_TIMEOUT) -> None:
    """Poll `condition()` until true; fail naming `what` after `timeout` real seconds."""
    give_up = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


class FakeRunner:
    """A `Runner` whose poses come from the frame index written in each image.

    Args:
        delay: seconds each `run` call takes, whatever the batch size: real seconds
            slept, or with `clock` the call waits until the clock is `delay` later.
        first_delay: seconds the first call takes instead (one-time initialisation).
        fail_on_call: raise `error` on this call (0-based).
        error: the exception raised on `fail_on_call`.
        clock: a `FakeClock` that times the calls instead of sleeping.
        gate: calls wait for this event before returning (set it to let them go).
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
        clock: FakeClock | None = None,
        gate: threading.Event | None = None,
    ) -> None:
        self.info = info
        self.metadata = None
        self.clock = clock
        self.gate = gate
        # While a call waits on the fake clock: the time it will return at.
        self.busy_until: float | None = None
        self.calls_started = 0
        self.calls_finished = 0
        self.delay = delay
        self.first_delay = first_delay
        self.fail_on_call = fail_on_call
        self.error = error or RuntimeError("engine exploded")
        self.batch_sizes: list[int] = []
        self.closed = False

    def run(self, frames: np.ndarray, *, stream: object = None) -> list[FramePoses]:
        if frames.ndim != 4 or frames.dtype != np.uint8:
            raise InputMismatchError(
                f"expected uint8 (B, H, W, C), got {frames.dtype} {frames.shape}"
            )
        if len(self.batch_sizes) == self.fail_on_call:
            raise self.error
        delay = self.first_delay if not self.batch_sizes and self.first_delay else self.delay
        self.batch_sizes.append(len(frames))
        if self.clock is not None:
            until = self.clock() + delay
            self.busy_until = until
            self.calls_started += 1
            if delay:
                self.clock.wait_until(until)
            self.busy_until = None
            self.calls_finished += 1
        elif delay:
            time.sleep(delay)
        if self.gate is not None and not self.gate.wait(HANG_TIMEOUT):
            raise TimeoutError("the test never opened the runner's gate")
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
        self.read_timeout = default_read_timeout(fps)
        self.skipped = 0
        self.bit_depth = 8
        self.decoder = "pyav"
        self.decoder_notice: str | None = None
        self.video_file = None
        self.paced = paced
        self.decode_delay = decode_delay
        self.fail_at = fail_at
        self.hang_at = hang_at
        self.release = threading.Event()
        self._stop = threading.Event()
        self.closed = False
        self.yielded = 0

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
            self.yielded = index + 1  # frames decoded so far, this one included
            yield Frame(
                index, time.monotonic(), self.source_id, frame_image(index, self.frame_shape)
            )
            index += 1

    def close(self) -> None:
        self._stop.set()
        self.closed = True


class SteppedSource:
    """A live camera the test drives: `push` releases frames, `end` ends the stream.

    Each frame is stamped on `clock` when the pipeline reads it, as a camera stamps
    a frame when it is read.
    """

    def __init__(
        self,
        clock: FakeClock,
        *,
        fps: float = 30.0,
        shape: tuple[int, int, int] = (8, 8, 1),
        source_id: str = "camera:fake",
    ) -> None:
        self.clock = clock
        self.source_id = source_id
        self.fps = fps
        self.frame_shape = shape
        self.n_frames = None
        self.is_live = True
        self.read_timeout = default_read_timeout(fps)
        self.skipped = 0
        self.bit_depth = 8
        self.decoder = "pyav"
        self.decoder_notice: str | None = None
        self.video_file = None
        self.pushed = 0
        self.pulled = 0
        self.closed = False
        # Set once the pipeline's reader has begun its first read (and started that
        # read's timeout on the clock).
        self.reading = threading.Event()
        self._ended = False
        self._changed = threading.Condition()

    def push(self, n: int = 1) -> None:
        with self._changed:
            self.pushed += n
            self._changed.notify_all()

    def end(self) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def close(self) -> None:
        self.closed = True
        self.end()

    def __iter__(self) -> Iterator[Frame]:
        self.reading.set()
        while True:
            with self._changed:
                while self.pulled >= self.pushed and not self._ended:
                    self._changed.wait()
                if self.closed or self.pulled >= self.pushed:
                    return
                index = self.pulled
            yield Frame(index, self.clock(), self.source_id, frame_image(index, self.frame_shape))
            self.pulled = index + 1


def settle(pipeline, source: SteppedSource, runner: FakeRunner) -> None:
    """Wait until every released frame is processed, dropped, or waits for the fake clock.

    For a live batch of one (no batcher stage): a frame is then processed, dropped,
    waiting in the frames' slot for an engine that is busy until a later time, or in
    that engine.
    """
    assert pipeline.policy == "live" and pipeline.batch_size == 1

    def settled() -> bool:
        stats = pipeline.stats
        depths = stats.queue_depths
        until = runner.busy_until
        busy = until is not None
        in_engine = 1 if busy else 0
        return (
            # An engine call whose end time has come is about to return.
            not (busy and until <= source.clock())
            and source.pulled == source.pushed == stats.frames_captured
            and depths["batches"] == depths["results"] == 0
            and (depths["frames"] == 0 or busy)
            and stats.frames_processed + stats.frames_dropped + depths["frames"] + in_engine
            == stats.frames_captured
        )

    wait_for(settled, "the pipeline to settle")


def finish_warmup(runner: FakeRunner, clock: FakeClock) -> None:
    """Let the warm-up call take its time on the fake clock, and wait for its end."""
    wait_for(lambda: runner.calls_started >= 1, "the warm-up call")
    if (until := runner.busy_until) is not None:
        clock.set(until)
    wait_for(lambda: runner.calls_finished >= 1, "the end of the warm-up call")


def drive(
    pipeline, source: SteppedSource, runner: FakeRunner, times: Iterable[float], end: bool = True
) -> None:
    """Release one frame at each time in `times` (on the source's clock), settling
    after every step; the engine's calls end at their own times in between and
    after the last frame. With `end`, the stream then ends."""
    clock = source.clock
    # Frames released before the drive (e.g. during the warm-up) reach the engine, or
    # wait for it, before the clock moves on.
    settle(pipeline, source, runner)
    for at in times:
        # Settled, the engine is either idle or waiting for its end time.
        while (until := runner.busy_until) is not None and until <= at:
            clock.set(until)
            settle(pipeline, source, runner)
        clock.set(at)
        settle(pipeline, source, runner)
        source.push()
        settle(pipeline, source, runner)
    while (until := runner.busy_until) is not None:
        clock.set(until)
        settle(pipeline, source, runner)
    if end:
        source.end()


def assert_idle_connections_cost_the_run_nothing(script: str, output: Path) -> None:
    """`run_under_idle_connections` with 1,100 connections to a run of 300 frames whose
    soft limit is 1,024 descriptors: every frame processed and saved, none dropped, and
    a few log lines at most, no traceback."""
    done, connected = run_under_idle_connections(script, output)
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err[-2000:]
    assert connected == 1100
    assert out.split() == ["300", "0"]
    assert len(sio.load_slp(str(output)).labeled_frames) == 300
    assert "Traceback" not in err and len(err.splitlines()) <= 5, err[-2000:]


def run_under_idle_connections(
    script: str, output: Path, count: int = 1100
) -> tuple[subprocess.CompletedProcess[str], int]:
    """Runs `script` (given the output path and the repository root; it prints the
    port it serves, then its figures) in a child process while `count` idle TCP
    connections are opened to that port; the finished child and the connections made."""
    root = str(Path(__file__).parents[2])
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(output), root],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    idle: list[socket.socket] = []
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        for _ in range(count):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), 5))
            except OSError:
                break  # the run ended already
        out, err = child.communicate(timeout=120)
    finally:
        for connection in idle:
            connection.close()
        if child.poll() is None:
            child.kill()
            child.communicate()
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), len(idle)


def saved_frames(path: Path) -> list[int]:
    """The frame indices a pose file holds, in its order."""
    return [lf.frame_idx for lf in sio.load_slp(str(path), open_videos=False)]
