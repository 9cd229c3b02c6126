"""Fault suite, callbacks: a consumer that raises or blocks costs no poses (issue #11).

A callback that raises is logged at once with its traceback and detached (or, with
``on_error="stop"``, stops the pipeline); the run goes on and saves every frame,
`stats` and the dashboard show the failed consumer, and leaving the pipeline raises
the first callback error. A lossless callback that stops consuming is detached after
its stall timeout, with a warning; a callback that never returns is abandoned by
`stop`, so a `with Pipeline` block always ends.
"""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import sleap_io as sio
from rich.console import Console

from sleap_live.stream import OutputOptions
from sleap_live.stream.dashboard import render_dashboard
from sleap_live.stream.errors import PipelineError
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.ring import DEFAULT_STALL_TIMEOUT, RingBuffer
from sleap_live.stream.sources import open_source
from sleap_live.stream.types import PoseRecord
from tests.stream.fakes import saved_frames

FAKES = Path(__file__).with_name("fakes.py")
sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
import fault_soak  # noqa: E402

# sleap-io loads its modules on first use: load what the .slp writer uses now, not in
# the writer's lowest-priority thread in the first test, which a busy machine starves.
_SLP_WRITER_NEEDS = (sio.LabeledFrame, sio.Labels, sio.PredictedInstance, sio.Video, sio.save_slp)
# Real seconds after which a wait that should end fails the test: generous, as the
# recorded policy runs its stages at the lowest priority and the machine may be busy.
HANG = 30.0


def raising_at(frame: int):
    """A callback that raises on the first record from `frame` on (live runs may drop frames)."""

    def broken(record: PoseRecord) -> None:
        if record.frame_index >= frame:
            raise KeyError("no such arena")

    return broken


def blocking(release: threading.Event, entered: threading.Event | None = None):
    def stuck(record: PoseRecord) -> None:
        if entered is not None:
            entered.set()
        release.wait()

    return stuck


def in_thread(target) -> tuple[threading.Thread, list[BaseException]]:
    """Run `target` in a daemon thread; what it raises is appended to the list."""
    raised: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, raised


def consumer_named(pipeline: Pipeline, suffix: str):
    (consumer,) = [c for c in pipeline.stats.consumers if c.name.endswith(suffix)]
    return consumer


def render(stats) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render_dashboard(stats))
    return console.file.getvalue()


# --- a callback that raises ------------------------------------------------------------


@pytest.mark.parametrize("policy", ["recorded", "live"])
def test_a_raising_callback_is_logged_at_once_detached_and_the_run_goes_on(
    policy, fakes, tmp_path, caplog
):
    caplog.set_level(logging.WARNING)
    # The source stops at frame 40 until released: meanwhile the error must show.
    live = policy == "live"
    source = fakes.FakeSource(80, is_live=live, paced=live, fps=500, hang_at=40)
    out = tmp_path / "out.slp"
    seen: list[int] = []
    pipeline = Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(output=out))
    pipeline.on_poses(raising_at(3))
    pipeline.on_poses(lambda record: seen.append(record.frame_index))
    pipeline.start()
    try:
        fakes.wait_for(
            lambda: consumer_named(pipeline, "broken").error is not None, "the failure", HANG
        )
        (logged,) = [r for r in caplog.records if r.name == "sleap_live.stream.consumers"]
        assert logged.levelno == logging.ERROR and "broken" in logged.getMessage()
        assert isinstance(logged.exc_info[1], KeyError)  # the traceback is printed
        stats = pipeline.stats
        assert stats.running
        failed = consumer_named(pipeline, "broken")
        assert failed.error == "KeyError: 'no such arena'"
        assert f"broken: {failed.delivered} delivered, 0 skipped, failed: KeyError: " in (
            render(stats)
        )
    finally:
        source.release.set()
    frame = r"\d+" if live else r"3"
    with pytest.raises(PipelineError, match=rf"broken failed on frame {frame}: KeyError") as info:
        pipeline.join(timeout=HANG)
    assert isinstance(info.value.__cause__, KeyError)
    # Inference and the outputs went on to the end of the source.
    stats = pipeline.stats
    assert stats.frames_captured == 80
    assert saved_frames(out) == seen
    assert len(seen) == stats.frames_processed
    if policy == "recorded":
        assert seen == list(range(80)) and failed.delivered == 4
    # Raised once: a later stop is quiet.
    pipeline.stop()


def test_a_raising_callback_on_a_replayed_video_costs_no_poses(fakes, tmp_path, caplog):
    # The case: a replay, a callback that raises, the experiment in `with`.
    caplog.set_level(logging.WARNING)
    clip = fault_soak.write_clip(tmp_path / "clip.mkv", 90)
    out = tmp_path / "out.slp"
    seen: list[int] = []
    pipeline = Pipeline(
        open_source(clip, replay=True, fps=150),
        fakes.FakeRunner(),
        outputs=OutputOptions(output=out),
    )
    pipeline.on_poses(raising_at(3))
    pipeline.on_poses(lambda record: seen.append(record.frame_index))
    with pytest.raises(PipelineError, match=r"broken failed on frame \d+: KeyError") as info:
        with pipeline:
            assert pipeline.join(timeout=HANG)
    failed_on = int(re.search(r"on frame (\d+)", str(info.value)).group(1))
    assert [r for r in caplog.records if r.name == "sleap_live.stream.consumers"]
    saved = saved_frames(out)
    assert saved == seen and len(saved) == pipeline.stats.frames_processed
    assert saved[-1] > failed_on  # inference went on after the failure


def test_only_the_first_callback_error_is_raised(fakes):
    pipeline = Pipeline(fakes.FakeSource(40), fakes.FakeRunner())
    pipeline.on_poses(raising_at(2))
    pipeline.start()
    fakes.wait_for(lambda: pipeline.stats.consumers[0].error is not None, "the first failure", HANG)
    pipeline.on_poses(raising_at(39))
    with pytest.raises(PipelineError, match="on frame 2:"):
        pipeline.join(timeout=HANG)
    assert [c.error is not None for c in pipeline.stats.consumers] == [True, True]


def test_a_raising_on_skip_is_a_callback_error_too(fakes):
    def on_skip(n: int) -> None:
        raise ValueError(f"skipped {n}")

    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock)
    runner = fakes.FakeRunner(clock=clock)
    release = threading.Event()
    pipeline = Pipeline(source, runner, clock=clock, ring_capacity=2, warmup=False)
    pipeline.on_poses(blocking(release), on_skip=on_skip, stall_timeout=None)
    pipeline.start()
    fakes.drive(pipeline, source, runner, [i / 30 for i in range(6)])
    release.set()
    with pytest.raises(PipelineError, match=r"stuck failed on frame \d+: ValueError: skipped"):
        pipeline.join(timeout=HANG)


def test_on_error_stop_stops_the_pipeline_after_saving_every_finished_frame(fakes, tmp_path):
    out = tmp_path / "out.slp"
    source = fakes.FakeSource(None, is_live=True, paced=True, fps=200)
    pipeline = Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(output=out))
    pipeline.on_poses(raising_at(5), on_error="stop")
    pipeline.start()
    # It stops by itself: nobody calls stop().
    with pytest.raises(PipelineError, match=r"broken failed on frame \d+: KeyError") as info:
        pipeline.join(timeout=HANG)
    assert source.closed
    failed_on = int(re.search(r"on frame (\d+)", str(info.value)).group(1))
    saved = saved_frames(out)
    assert len(saved) == pipeline.stats.frames_processed and saved[-1] >= failed_on >= 5


def test_on_poses_arguments_are_validated_in_one_line(fakes):
    pipeline = Pipeline(fakes.FakeSource(4), fakes.FakeRunner())
    with pytest.raises(ValueError, match=r"^on_error must be 'detach' or 'stop', got 'ignore'$"):
        pipeline.on_poses(print, on_error="ignore")
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^stall_timeout must be a positive number of"):
            pipeline.on_poses(print, stall_timeout=bad)
    assert pipeline.stats.consumers == ()


ERROR_SCRIPT = textwrap.dedent(
    """
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("fakes", {fakes!r})
    fakes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakes)
    from sleap_live.stream import Pipeline

    def broken(record):
        raise KeyError("no such arena")

    source = fakes.FakeSource(60, hang_at=30)
    try:
        with Pipeline(source, fakes.FakeRunner()) as pipeline:
            pipeline.on_poses(broken)
            fakes.wait_for(lambda: pipeline.stats.consumers[0].error, "the failure")
            print("still running:", pipeline.stats.running, file=sys.stderr, flush=True)
            source.release.set()
            pipeline.join()
    except Exception as error:
        print("raised on exit:", type(error).__name__, error, file=sys.stderr)
        print("frames:", pipeline.stats.frames_processed, file=sys.stderr)
    """
)


def test_the_error_reaches_stderr_with_its_traceback_while_the_run_goes_on(tmp_path):
    # No logging configured, as in a user's script or the CLI: Python's last-resort
    # handler prints warnings and errors to stderr.
    script = tmp_path / "experiment.py"
    script.write_text(ERROR_SCRIPT.format(fakes=str(FAKES)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    err = done.stderr
    assert "Traceback" in err and "KeyError: 'no such arena'" in err
    assert "on_poses callback broken raised on frame 0" in err
    assert err.index("Traceback") < err.index("still running: True")
    assert "raised on exit: PipelineError on_poses callback broken failed on frame 0" in err
    assert "frames: 60" in err


# --- a lossless callback that blocks ---------------------------------------------------


def test_a_lossless_reader_that_stops_reading_is_detached_after_its_timeout(fakes, caplog):
    caplog.set_level(logging.WARNING)
    clock = fakes.FakeClock()
    ring = RingBuffer(2, 2, 2, clock=clock)
    reader = ring.reader(lossless=True, stall_timeout=3.0, name="slow reader")
    for index in range(2):
        ring.write(PoseRecord(index, 0.0, 0.0, "x", fakes.poses_for(0)))
    writer, raised = in_thread(lambda: ring.write(PoseRecord(2, 0.0, 0.0, "x", fakes.poses_for(0))))
    writer.join(0.05)
    clock.advance(2.9)
    writer.join(0.3)
    assert writer.is_alive() and reader.lossless  # not yet: 2.9 s < 3 s
    clock.advance(0.1)
    writer.join(HANG)
    assert not writer.is_alive() and not raised
    assert reader.stalled and not reader.lossless
    assert ring.written == 3 and reader.read_since().missed == 1
    (warning,) = [r for r in caplog.records if r.name == "sleap_live.stream.ring"]
    assert "slow reader" in warning.getMessage() and "3 s" in warning.getMessage()


def test_a_blocked_lossless_callback_is_detached_and_everything_is_saved(fakes, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    clock = fakes.FakeClock()
    out = tmp_path / "out.slp"
    release = threading.Event()
    pipeline = Pipeline(
        fakes.FakeSource(60),
        fakes.FakeRunner(),
        outputs=OutputOptions(output=out),
        ring_capacity=16,
        clock=clock,
    )
    assert pipeline.policy == "recorded"
    seen: list[int] = []
    pipeline.on_poses(lambda record: seen.append(record.frame_index))
    pipeline.on_poses(blocking(release))
    pipeline.start()
    try:
        give_up = time.monotonic() + HANG
        # The stall timeout runs on the pipeline's clock: move it until the run ends.
        while not pipeline.join(timeout=0.02):
            assert time.monotonic() < give_up, "the blocked callback hung the pipeline"
            clock.advance(1.0)
        assert saved_frames(out) == seen == list(range(60))
        stuck = consumer_named(pipeline, "stuck")
        assert stuck.stalled and stuck.error is None and stuck.delivered == 1
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("stuck" in m and f"{DEFAULT_STALL_TIMEOUT:g} s" in m for m in messages)
        assert "stuck: 1 delivered, 0 skipped, stalled: no longer waited for" in (
            render(pipeline.stats)
        )
    finally:
        release.set()


# --- a live callback that blocks -------------------------------------------------------


def test_stop_abandons_a_live_callback_that_never_returns(fakes, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    out = tmp_path / "out.slp"
    release, entered = threading.Event(), threading.Event()
    source = fakes.FakeSource(None, is_live=True, paced=True, fps=200)
    pipeline = Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(output=out))
    # Never stalled: stop gives up on it when its timeout has passed.
    pipeline.on_poses(blocking(release, entered), stall_timeout=None)
    pipeline.start()
    try:
        assert entered.wait(HANG)
        fakes.wait_for(lambda: pipeline.stats.frames_processed > 10, "some frames", HANG)
        stopper, raised = in_thread(lambda: pipeline.stop(timeout=3.0))
        stopper.join(HANG)
        assert not stopper.is_alive() and not raised, raised
        (abandoned,) = [t for t in threading.enumerate() if t.name.endswith(".stuck")]
        assert abandoned.daemon and abandoned.is_alive()
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("stuck" in m and "abandoned" in m for m in messages), messages
        assert len(saved_frames(out)) == pipeline.stats.frames_processed
        assert not pipeline.stats.running
    finally:
        release.set()


def test_a_with_block_ends_when_a_live_callback_never_returns(fakes, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    clock = fakes.FakeClock()
    out = tmp_path / "out.slp"
    release, entered, leaving = threading.Event(), threading.Event(), threading.Event()
    source = fakes.SteppedSource(clock)
    runner = fakes.FakeRunner(clock=clock)

    def session() -> None:
        with Pipeline(
            source, runner, outputs=OutputOptions(output=out), clock=clock, warmup=False
        ) as pipeline:
            pipeline.on_poses(blocking(release, entered))
            fakes.drive(pipeline, source, runner, [i / 30 for i in range(5)], end=False)
            assert entered.wait(HANG)
            leaving.set()

    try:
        thread, raised = in_thread(session)
        assert leaving.wait(HANG), raised
        give_up = time.monotonic() + HANG
        # __exit__ waits for the callback until it counts as stalled on the clock.
        while thread.is_alive():
            assert time.monotonic() < give_up, "the with block never ended"
            clock.advance(1.0)
            thread.join(0.02)
        assert not raised, raised
        assert saved_frames(out) == [0, 1, 2, 3, 4]
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("stuck" in m and "abandoned" in m for m in messages), messages
    finally:
        release.set()


def test_stop_from_inside_a_callback_returns(fakes, tmp_path):
    out = tmp_path / "out.slp"
    source = fakes.FakeSource(None, is_live=True, paced=True, fps=200)
    pipeline = Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(output=out))
    stopped = threading.Event()

    def stops(record: PoseRecord) -> None:
        if record.frame_index >= 5 and not stopped.is_set():
            pipeline.stop(timeout=HANG)
            stopped.set()

    pipeline.on_poses(stops)
    pipeline.start()
    assert stopped.wait(HANG)
    assert pipeline.join(timeout=HANG)
    assert len(saved_frames(out)) == pipeline.stats.frames_processed


def test_stop_before_start_does_not_wait_for_a_callback_never_started(fakes):
    pipeline = Pipeline(fakes.FakeSource(4), fakes.FakeRunner())
    pipeline.on_poses(print)
    stopper, raised = in_thread(pipeline.stop)
    stopper.join(HANG)
    assert not stopper.is_alive() and not raised


def test_stop_lets_go_of_a_blocked_lossless_callback_at_its_timeout(fakes, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    out = tmp_path / "out.slp"
    release, entered = threading.Event(), threading.Event()
    pipeline = Pipeline(
        fakes.FakeSource(60), fakes.FakeRunner(), outputs=OutputOptions(output=out), ring_capacity=4
    )
    pipeline.on_poses(blocking(release, entered))  # lossless, stalls only after 5 s
    pipeline.start()
    try:
        assert entered.wait(HANG)
        fakes.wait_for(lambda: pipeline.stats.frames_processed >= 4, "a full ring", HANG)
        stopper, raised = in_thread(lambda: pipeline.stop(timeout=0.5))
        stopper.join(HANG)
        assert not stopper.is_alive() and not raised, raised
        assert len(saved_frames(out)) == pipeline.stats.frames_processed
        assert consumer_named(pipeline, "stuck").stalled
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("stuck" in m and "abandoned" in m for m in messages), messages
    finally:
        release.set()
