"""Fault suite, stalls: nothing a source or a stage does hangs the pipeline (issue #11).

A source that stops delivering without an error (a camera on external trigger, an
SDK `grab()` that blocks, a stalled stream) is reported as stalled after its read
timeout, with every frame it delivered processed and saved; `stop()`, `--duration`
and Ctrl-C work while it blocks; a recorded batch is not held back by it; and
leaving `with Pipeline` waits at most its stop timeout, whatever a stage does.

The blocked source is an iterator whose next frame waits on an event that only the
test sets, as a native call would: closing the source does not end it. Timing runs
on the fake clock in-process; the command line runs in subprocesses.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import av
import pytest

from sleap_live import cli
from sleap_live.stream import OutputOptions
from sleap_live.stream.batching import RECORDED_BATCH_WAIT
from sleap_live.stream.errors import PipelineError, SourceStalledError
from sleap_live.stream.outputs.journal import journal_path, scan_journal
from sleap_live.stream.pipeline import DEFAULT_STOP_TIMEOUT, Pipeline
from sleap_live.stream.sources import (
    READ_TIMEOUT_MARGIN,
    FileSource,
    IteratorSource,
    ReplaySource,
    open_source,
)
from tests.stream.fakes import saved_frames

FAKES = Path(__file__).with_name("fakes.py")
# Real seconds a test waits for what should take milliseconds before it fails.
BOUND = 10.0
READER = "sleap-live capture reader"


class Stall:
    """`n` frames, then a read that blocks until `release` is set."""

    def __init__(self, fakes, n: int) -> None:
        self.images = [fakes.frame_image(index) for index in range(n)]
        self.release = threading.Event()

    def __iter__(self):
        yield from self.images
        self.release.wait()


@pytest.fixture(autouse=True)
def no_thread_is_left(fakes):
    """Each test releases what it blocked; then every pipeline thread must end."""
    yield
    fakes.wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("sleap-live")],
        "the pipeline threads to end",
    )


@pytest.fixture
def stall(fakes):
    """Makes `Stall`s, and releases them when the test ends."""
    made: list[Stall] = []

    def make(n: int = 5) -> Stall:
        made.append(Stall(fakes, n))
        return made[-1]

    yield make
    for each in made:
        each.release.set()


def within(seconds: float, body) -> None:
    """Run `body()` in a thread; fail if it has not returned after `seconds` (a hang)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if raised:
        raise raised[0]


def advance_until(clock, condition, what: str, step: float = 0.25) -> None:
    """Move the fake clock on in steps until `condition()`; fail after `BOUND` real seconds."""
    give_up = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        clock.advance(step)
        time.sleep(0.005)


def done_with(pipeline, n: int) -> bool:
    """Whether `n` frames were processed or (live policy) dropped for newer ones."""
    stats = pipeline.stats
    return stats.frames_processed + stats.frames_dropped == n


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER]


# --- read timeouts ----------------------------------------------------------------------


def test_sources_have_a_read_timeout_beyond_their_frame_interval(gray_video, fakes):
    frames = [fakes.frame_image(0)]
    assert IteratorSource(frames, fps=30.0).read_timeout == pytest.approx(1 / 30 + 5)
    assert IteratorSource(frames).read_timeout == READ_TIMEOUT_MARGIN == 5.0
    assert open_source(frames, read_timeout=0.5).read_timeout == 0.5
    assert open_source(frames, read_timeout=math.inf).read_timeout == math.inf
    with FileSource(gray_video) as source:
        assert source.read_timeout == pytest.approx(1 / 30 + 5)
    with open_source(gray_video, read_timeout=12) as source:
        assert source.read_timeout == 12.0
    with ReplaySource(gray_video, fps=0.5) as source:
        assert source.read_timeout == pytest.approx(2 + 5)
    with open_source(gray_video, replay=True, read_timeout=3) as source:
        assert source.read_timeout == 3.0
    with open_source("testsrc=size=64x48:rate=10", camera=True, backend="lavfi") as source:
        assert source.read_timeout == pytest.approx(0.1 + 5)
    for bad in (0, -1, math.nan, "5", True):
        with pytest.raises(ValueError, match="read_timeout must be a"):
            IteratorSource(frames, read_timeout=bad)
        with pytest.raises(ValueError, match="read_timeout must be a"):
            ReplaySource(gray_video, read_timeout=bad)


@pytest.mark.parametrize("live", [True, False])
def test_a_source_that_stops_delivering_is_reported_stalled_after_its_read_timeout(
    live, stall, fakes, tmp_path
):
    clock = fakes.FakeClock()
    frames = stall(5)
    source = IteratorSource(frames, live=live, source_id="sdk", clock=clock, read_timeout=3)
    pipeline = Pipeline(
        source, fakes.FakeRunner(), outputs=OutputOptions(output=tmp_path / "out.slp"), clock=clock
    )
    pipeline.start()
    fakes.wait_for(lambda: pipeline.stats.frames_captured == 5, "the frames before the stall")
    advance_until(clock, lambda: not pipeline.stats.running, "the stall to be reported")
    with pytest.raises(SourceStalledError) as info:
        pipeline.join(timeout=BOUND)
    message = str(info.value)
    assert message.startswith("sdk: the source stalled: no frame for ")
    assert message.endswith(" s, more than its read timeout of 3 s (5 frames before)")
    assert float(message.split("no frame for ")[1].split(" s,")[0]) >= 3.0
    assert isinstance(info.value, TimeoutError)
    # Every frame delivered before the stall was processed and saved (live: or
    # dropped for a newer one, as the live policy does).
    stats = pipeline.stats
    assert stats.frames_processed + stats.frames_dropped == 5
    assert stats.frames_processed == (stats.frames_processed if live else 5)
    saved = saved_frames(tmp_path / "out.slp")
    assert len(saved) == stats.frames_processed and saved[-1] == 4


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_video_stream_whose_writer_stops_is_reported_stalled(fakes, tmp_path):
    # A real native block: PyAV waits in read() on a named pipe that a writer keeps
    # open after its last frame, as with a stalled network stream.
    stream, release = tmp_path / "stream.mkv", threading.Event()
    os.mkfifo(stream)

    def write() -> None:
        # The pipe is opened here, where waiting for the reader releases the GIL;
        # PyAV's own open would wait holding it, and the reader could never come.
        with (
            open(stream, "wb", buffering=0) as pipe,
            av.open(pipe, "w", format="matroska") as container,
        ):
            video = container.add_stream("ffv1", rate=30)
            video.width, video.height, video.pix_fmt = 32, 24, "gray"
            for index in range(40):
                image = fakes.frame_image(index, (24, 32, 1))[..., 0]
                container.mux(video.encode(av.VideoFrame.from_ndarray(image, format="gray")))
            container.mux(video.encode())
            release.wait(BOUND)

    threading.Thread(target=write, daemon=True).start()
    clock = fakes.FakeClock()
    source = open_source(stream, camera=False, clock=clock, read_timeout=3)
    pipeline = Pipeline(
        source, fakes.FakeRunner(), outputs=OutputOptions(output=tmp_path / "out.slp"), clock=clock
    )
    try:
        pipeline.start()
        fakes.wait_for(lambda: pipeline.stats.frames_captured > 0, "the first frames")
        advance_until(clock, lambda: not pipeline.stats.running, "the stall to be reported")
        with pytest.raises(SourceStalledError, match=rf"^{stream}: the source stalled: "):
            pipeline.join(timeout=BOUND)
        captured = pipeline.stats.frames_captured
        assert saved_frames(tmp_path / "out.slp") == list(range(captured))
    finally:
        release.set()


def test_stop_returns_at_once_while_the_source_blocks_and_saves_what_it_delivered(
    stall, fakes, tmp_path, caplog
):
    clock = fakes.FakeClock()
    source = IteratorSource(stall(5), live=True, source_id="sdk", clock=clock)
    pipeline = Pipeline(
        source, fakes.FakeRunner(), outputs=OutputOptions(output=tmp_path / "out.slp"), clock=clock
    )
    pipeline.start()
    fakes.wait_for(lambda: done_with(pipeline, 5), "the frames before the stall")
    clock.advance(2.0)  # blocked for 2 s: less than the read timeout, more than a frame
    with caplog.at_level(logging.WARNING):
        within(BOUND, lambda: pipeline.stop(timeout=BOUND))
    saved = saved_frames(tmp_path / "out.slp")
    assert len(saved) == pipeline.stats.frames_processed > 0 and saved[-1] == 4
    assert not pipeline.stats.running
    # The one thread left is the reader, inside the source's call: a daemon, named.
    [reader] = reader_threads()
    assert reader.daemon
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("sdk: the source is still blocked in a read (no frame for 2.0 s)")
    assert repr(READER) in warning


def test_a_stalled_recorded_source_does_not_hold_frames_in_a_partial_batch(stall, fakes, tmp_path):
    # Recorded batches hold 8 frames; the source delivers 5, then blocks (with no
    # read timeout, so only the batcher's wait can let them go).
    clock = fakes.FakeClock()
    frames = stall(5)
    source = IteratorSource(frames, source_id="sdk", clock=clock, read_timeout=math.inf)
    runner = fakes.FakeRunner()
    records = []
    pipeline = Pipeline(
        source, runner, outputs=OutputOptions(output=tmp_path / "out.slp"), clock=clock
    )
    pipeline.on_poses(records.append)
    pipeline.start()
    assert pipeline.policy == "recorded" and pipeline.batch_size == 8
    fakes.wait_for(lambda: pipeline.stats.frames_captured == 5, "the frames before the stall")
    advance_until(
        clock, lambda: len(records) == 5, "the partial batch", step=RECORDED_BATCH_WAIT / 4
    )
    assert runner.batch_sizes[1:] == [5]
    frames.release.set()  # the source ends
    assert pipeline.join(timeout=BOUND)
    assert saved_frames(tmp_path / "out.slp") == list(range(5))


# --- leaving `with Pipeline` ------------------------------------------------------------


def test_leaving_with_pipeline_while_the_source_blocks_saves_and_returns(stall, fakes, tmp_path):
    clock = fakes.FakeClock()
    source = IteratorSource(stall(5), live=True, source_id="sdk", clock=clock)

    def session() -> None:
        with Pipeline(
            source,
            fakes.FakeRunner(),
            outputs=OutputOptions(output=tmp_path / "out.slp"),
            clock=clock,
        ) as p:
            fakes.wait_for(lambda: done_with(p, 5), "the frames before the stall")

    within(BOUND, session)
    saved = saved_frames(tmp_path / "out.slp")
    assert len(saved) > 0 and saved[-1] == 4


def test_breaking_out_of_the_records_while_the_source_blocks_returns(stall, fakes):
    clock = fakes.FakeClock()
    source = IteratorSource(stall(5), live=False, source_id="sdk", clock=clock)
    seen = []

    def loop() -> None:
        for record in Pipeline(source, fakes.FakeRunner(), batch_size=1, clock=clock):
            seen.append(record.frame_index)
            if record.frame_index == 4:
                break

    within(BOUND, loop)
    assert seen == list(range(5))


def test_leaving_with_pipeline_waits_at_most_its_stop_timeout_and_names_what_runs(stall, fakes):
    # An engine call that never returns (a hung GPU driver): the only thing that can
    # end the block is the stop timeout.
    assert Pipeline(fakes.FakeSource(1), fakes.FakeRunner()).stop_timeout == DEFAULT_STOP_TIMEOUT
    gate = threading.Event()
    source = fakes.FakeSource(None, is_live=True)
    pipeline = Pipeline(source, fakes.FakeRunner(gate=gate), stop_timeout=0.2)

    def session() -> None:
        with pipeline:
            fakes.wait_for(lambda: pipeline.stats.running, "the stages")

    try:
        with pytest.raises(
            PipelineError, match=r"did not stop within 0.2 s \(still running: .*infer"
        ):
            within(BOUND, session)
        stuck = [t for t in threading.enumerate() if t.name == "sleap-live infer"]
        assert stuck and all(t.daemon for t in stuck)
    finally:
        gate.set()
    pipeline.join(timeout=BOUND)


def test_a_source_whose_close_blocks_cannot_hang_leaving_with_pipeline(fakes):
    # The caller's thread never runs the source's clean-up: the capture stage does,
    # and the stop timeout bounds the wait for it.
    unblock = threading.Event()

    class BlockingClose(fakes.FakeSource):
        def close(self) -> None:
            super().close()
            unblock.wait()

    source = BlockingClose(None, is_live=True, hang_at=3)
    pipeline = Pipeline(source, fakes.FakeRunner(), stop_timeout=0.2)

    def session() -> None:
        with pipeline:
            fakes.wait_for(lambda: pipeline.stats.frames_captured == 3, "the first frames")

    try:
        with pytest.raises(PipelineError, match=r"within 0.2 s \(still running: capture\)$"):
            within(BOUND, session)
        [capture] = [t for t in threading.enumerate() if t.name == "sleap-live capture"]
        assert capture.daemon
    finally:
        unblock.set()
        source.release.set()
    assert pipeline.join(timeout=BOUND)


def test_a_stop_timeout_must_be_positive(fakes):
    for bad in (0, -1.0, math.nan):
        with pytest.raises(ValueError, match="stop_timeout must be a positive number"):
            Pipeline(fakes.FakeSource(1), fakes.FakeRunner(), stop_timeout=bad)


# --- the command line -------------------------------------------------------------------


# A camera run whose camera delivers 5 frames and then blocks in its read for good;
# `ready` appears once the engine has run the last of them (the live policy may
# drop earlier ones for it).
STALLED_CAMERA = textwrap.dedent(
    """
    import importlib.util, pathlib, sys, threading
    spec = importlib.util.spec_from_file_location("fakes", {fakes!r})
    fakes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakes)
    from sleap_live import cli
    from sleap_live.cli import camera_options, run
    from sleap_live.engines.runners import load as api
    from sleap_live.stream.sources import IteratorSource

    ready = pathlib.Path(sys.argv[1])

    def grab():
        for index in range(5):
            yield fakes.frame_image(index, (24, 32, 1))
        threading.Event().wait()

    class Runner(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            poses = super().run(frames)
            if len(self.batch_sizes) > 1 and fakes.index_of(frames[-1]) == 4:
                ready.touch()
            return poses

    def open_camera(spec, *, read_timeout=None, **options):
        return IteratorSource(grab(), live=True, fps=30.0, source_id="camera:0",
                              read_timeout=read_timeout)

    run.open_source = camera_options.open_source = open_camera
    api.load_runner = lambda models, **options: Runner()
    sys.exit(cli.main(sys.argv[2:]))
    """
)


def stalled_camera_run(tmp_path: Path, *options: str) -> tuple[Path, Path, subprocess.Popen]:
    script, ready, out = tmp_path / "camera.py", tmp_path / "ready", tmp_path / "out.slp"
    script.write_text(STALLED_CAMERA.format(fakes=str(FAKES)))
    argv = ["run", "--camera", "0", "-m", "m", "-o", str(out), "-q", "--no-verify", *options]
    process = subprocess.Popen(
        [sys.executable, str(script), str(ready), *argv], stderr=subprocess.PIPE, text=True
    )
    return out, ready, process


def assert_saved_up_to_the_stall(out: Path, err: str) -> None:
    saved = saved_frames(out)
    assert saved[-1] == 4 and f"{len(saved)} frames in" in err, err


def wait_for_file(path: Path, process: subprocess.Popen) -> None:
    give_up = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < give_up, f"the run never wrote {path.name}"
        time.sleep(0.02)


def test_cli_duration_ends_a_run_whose_camera_blocks(tmp_path):
    out, _, process = stalled_camera_run(tmp_path, "--duration", "1")
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert_saved_up_to_the_stall(out, err)
    assert "Traceback" not in err


def test_cli_ctrl_c_stops_a_run_whose_camera_blocks(tmp_path):
    out, ready, process = stalled_camera_run(tmp_path)
    try:
        wait_for_file(ready, process)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130, err
    assert_saved_up_to_the_stall(out, err)
    assert "Traceback" not in err


def test_cli_reports_a_stalled_camera_in_one_line_and_keeps_its_frames(tmp_path):
    out, _, process = stalled_camera_run(tmp_path, "--read-timeout", "2")
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1, err
    [line] = err.strip().splitlines()
    assert line.startswith("sleap-live: error: camera:0: the source stalled: no frame for ")
    assert line.endswith(" s, more than its read timeout of 2 s (5 frames before)")
    assert saved_frames(out)[-1] == 4


@pytest.mark.parametrize("command", ["run", "replay"])
def test_cli_help_documents_the_read_timeout(command, capsys):
    assert cli.main([command, "-h"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    assert "--read-timeout S a source that delivers no frame for S seconds" in words
    assert "has stalled: the run stops with an error, saving every frame before" in words
    assert "(default: the source's frame interval plus 5 s)" in words
    assert cli.main([command, "video.mp4", "-m", "m", "--read-timeout", "0"]) == 2
    assert "argument --read-timeout: must be positive" in capsys.readouterr().err


@pytest.fixture
def silent_stream(tmp_path):
    """A named pipe a writer holds open without ever writing: opening it never ends."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs named pipes")
    stream = tmp_path / "silent.mkv"
    os.mkfifo(stream)
    writer = os.open(stream, os.O_RDWR | os.O_NONBLOCK)  # a writer that never writes
    yield stream
    os.close(writer)


def opening(stream: Path, *options: str) -> subprocess.Popen:
    argv = ["run", str(stream), "-m", "m", "--no-verify", "-q", *options]
    return subprocess.Popen(
        [sys.executable, "-m", "sleap_live", *argv], stderr=subprocess.PIPE, text=True
    )


def has_open(pid: int, path: Path) -> bool:
    """Whether process `pid` holds `path` open (False once it has exited)."""
    target = os.path.realpath(path)
    try:
        return any(os.readlink(fd) == target for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it exited, or closed a descriptor while this looked
        return False


def test_cli_reports_a_source_that_sends_nothing_once_opened(silent_stream, tmp_path):
    process = opening(silent_stream, "--read-timeout", "1", "-o", str(tmp_path / "out.slp"))
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1, err
    assert err.strip() == (
        f"sleap-live: error: {silent_stream}: the source stalled: nothing read in the 1 s "
        "after opening it (its read timeout)"
    )
    assert not (tmp_path / "out.slp").exists()


def test_cli_ctrl_c_works_while_a_source_is_being_opened(silent_stream, tmp_path):
    # -o in a folder of its own: the run's journal would otherwise come and go in the
    # working directory (the repository), where another test's teardown may see it.
    # A read timeout no busy machine reaches: the default (5 s) once ended the run on
    # its own, as a stall, before this test's poll saw the pipe open.
    process = opening(silent_stream, "--read-timeout", "600", "-o", str(tmp_path / "out.slp"))
    try:
        # Wait until the run has the pipe open: it is then waiting for data.
        give_up = time.monotonic() + 60
        while not has_open(process.pid, silent_stream):
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < give_up, "the run never opened the stream"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()  # reaped: no zombie left for a later test in this worker
    assert process.returncode == 130, err
    assert "Traceback" not in err


# --- every other thing leaving `with Pipeline` may wait for -------------------------------
# Each test bounds the block by its stop timeout plus `BOUND` real seconds: a hang
# fails it, a busy machine does not.


def test_an_engine_that_hangs_mid_stream_cannot_hang_leaving_with_pipeline(fakes, tmp_path):
    # The hang comes on a batch of frames, not the warm-up: the frames before it were
    # emitted, and the journal keeps them however long the engine hangs.
    hung, release = threading.Event(), threading.Event()

    class HangsOnItsThirdBatch(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            if len(self.batch_sizes) == 3:  # call 0 is the warm-up
                hung.set()
                release.wait()
            return super().run(frames)

    out = tmp_path / "out.slp"
    pipeline = Pipeline(
        fakes.FakeSource(None, is_live=True, paced=True, fps=200),
        HangsOnItsThirdBatch(),
        outputs=OutputOptions(output=out, save_interval=0.05),
        stop_timeout=0.5,
    )

    def session() -> None:
        with pipeline:
            assert hung.wait(BOUND)

    try:
        with pytest.raises(PipelineError, match=r"within 0.5 s \(still running: .*infer"):
            within(0.5 + BOUND, session)
        assert pipeline.stats.frames_processed == 2  # batch size 1: calls 1 and 2
        fakes.wait_for(lambda: scan_journal(journal_path(out)).n_frames == 2, "the journal")
    finally:
        release.set()
    assert pipeline.join(timeout=BOUND)
    # Once the engine returns, its last frame is saved too.
    assert len(saved_frames(out)) == pipeline.stats.frames_processed == 3


def test_a_final_save_slower_than_the_stop_timeout_cannot_hang_leaving_with_pipeline(
    fakes, tmp_path, monkeypatch
):
    from sleap_live.stream.outputs import slp as slp_writer

    release, saving = threading.Event(), threading.Event()
    write_slp = slp_writer.write_slp_from_journal

    def slow_write(journal, slp):
        saving.set()
        release.wait()
        return write_slp(journal, slp)

    monkeypatch.setattr(slp_writer, "write_slp_from_journal", slow_write)
    out = tmp_path / "out.slp"
    pipeline = Pipeline(
        fakes.FakeSource(30),
        fakes.FakeRunner(),
        outputs=OutputOptions(output=out),
        stop_timeout=0.5,
    )

    def session() -> None:
        with pipeline:
            assert saving.wait(BOUND)  # the source ended; the final save has begun

    try:
        with pytest.raises(PipelineError, match=r"within 0.5 s \(still running: slp writer\)$"):
            within(0.5 + BOUND, session)
        assert not out.exists()
    finally:
        release.set()
    # The save goes on in its daemon thread and completes.
    assert pipeline.join(timeout=BOUND)
    assert saved_frames(out) == list(range(30))


def test_a_recorder_that_blocks_cannot_hang_leaving_with_pipeline(fakes, tmp_path, monkeypatch):
    # An encoder that never returns: its queue fills, then the emit stage waits on it.
    from sleap_live.stream.outputs import writers

    release, encoding = threading.Event(), threading.Event()
    encode = writers.VideoRecorder.encode

    def stuck(self, image, **timing):
        encoding.set()
        release.wait()
        return encode(self, image, **timing)

    monkeypatch.setattr(writers.VideoRecorder, "encode", stuck)
    out, video = tmp_path / "out.slp", tmp_path / "rec.mkv"
    source = fakes.FakeSource(writers.RECORD_QUEUE_CAPACITY + 40, shape=(8, 8, 1))
    pipeline = Pipeline(
        source,
        fakes.FakeRunner(),
        outputs=OutputOptions(output=out, record=video),
        stop_timeout=0.5,
    )

    def session() -> None:
        with pipeline:
            assert encoding.wait(BOUND)

    try:
        with pytest.raises(PipelineError, match=r"within 0.5 s \(still running: .*record writer"):
            within(0.5 + BOUND, session)
    finally:
        release.set()
    assert pipeline.join(timeout=BOUND)
    frames = saved_frames(out)
    assert frames == list(range(len(frames))) and len(frames) == pipeline.stats.frames_processed


def test_an_iterator_left_unfinished_in_the_with_block_does_not_hold_it(fakes, tmp_path):
    # Under "recorded" an iterator is lossless: the ring's writer waits for it. One
    # left behind in the thread that leaves the block is not consuming any more, so
    # leaving does not wait for it, neither for its stall timeout (here on a clock that
    # never moves) nor for the stop timeout.
    clock = fakes.FakeClock()
    out = tmp_path / "out.slp"
    pipeline = Pipeline(
        fakes.FakeSource(60),
        fakes.FakeRunner(),
        outputs=OutputOptions(output=out),
        ring_capacity=4,
        clock=clock,
    )
    held = []  # keeps the generator alive: closing it would detach its reader

    def session() -> None:
        with pipeline:
            records = iter(pipeline)
            held.append(records)
            assert next(records).frame_index == 0
            fakes.wait_for(lambda: pipeline.ring.written >= 4, "a full ring")

    within(BOUND, session)  # not even the stop timeout: nothing is waited for
    # Leaving stops capture: every frame the engine finished is saved.
    processed = pipeline.stats.frames_processed
    assert processed >= 4 and saved_frames(out) == list(range(processed))


def test_an_iterator_stuck_in_another_thread_is_let_go_at_the_stop_timeout(fakes, tmp_path):
    clock = fakes.FakeClock()
    out = tmp_path / "out.slp"
    pipeline = Pipeline(
        fakes.FakeSource(60),
        fakes.FakeRunner(),
        outputs=OutputOptions(output=out),
        ring_capacity=4,
        clock=clock,
        stop_timeout=0.5,
    )
    release, reading = threading.Event(), threading.Event()

    def reader() -> None:
        for _ in pipeline:
            reading.set()
            release.wait()  # a loop body that never finishes

    def session() -> None:
        with pipeline:
            threading.Thread(target=reader, daemon=True).start()
            assert reading.wait(BOUND)
            fakes.wait_for(lambda: pipeline.ring.written >= 4, "a full ring")

    try:
        within(0.5 + BOUND, session)
        processed = pipeline.stats.frames_processed
        assert processed >= 4 and saved_frames(out) == list(range(processed))
    finally:
        release.set()


def test_a_model_whose_clean_up_blocks_cannot_hang_leaving_with_pipeline(fakes, monkeypatch):
    # A runner the pipeline loaded is the pipeline's to close; its clean-up (freeing
    # a GPU context, say) may block, and the stop timeout bounds that wait too.
    from sleap_live.engines.runners import load as engines_api

    release, closing = threading.Event(), threading.Event()

    class BlockingClose(fakes.FakeRunner):
        def close(self) -> None:
            closing.set()
            release.wait()
            super().close()

    runner = BlockingClose()
    monkeypatch.setattr(engines_api, "load_runner", lambda models, **options: runner)
    pipeline = Pipeline(fakes.FakeSource(20), "model.onnx", stop_timeout=0.5)

    def session() -> None:
        with pipeline:
            assert closing.wait(BOUND)  # the source ended: the runner is being closed

    try:
        with pytest.raises(PipelineError, match=r"within 0.5 s \(still running: infer\)$"):
            within(0.5 + BOUND, session)
        assert pipeline.stats.frames_processed == 20
    finally:
        release.set()
    assert pipeline.join(timeout=BOUND) and runner.closed
