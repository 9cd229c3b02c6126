"""The pipeline's policies, ordering, backpressure, shutdown and error propagation."""

from __future__ import annotations

import os
import sys
import threading
import time

import attrs
import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live.engines.errors import InputMismatchError
from sleap_live.engines.load_options import LoadOptions
from sleap_live.engines.runners import load as engines_api
from sleap_live.stream import OutputOptions
from sleap_live.stream.errors import PipelineError, SourceError
from sleap_live.stream.outputs.recovery import JournalClaim
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.priority import RECORDED_BACKGROUND_NICE

JOIN_TIMEOUT = 10.0


def assert_record_matches_frame(record, fakes) -> None:
    expected = fakes.poses_for(record.frame_index)
    np.testing.assert_array_equal(record.poses.points, expected.points)
    np.testing.assert_array_equal(record.poses.identities, expected.identities)


def no_pipeline_threads() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("sleap-live")]


@pytest.fixture(autouse=True)
def threads_are_gone():
    yield
    deadline = time.monotonic() + JOIN_TIMEOUT
    while not no_pipeline_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert no_pipeline_threads(), [t.name for t in threading.enumerate()]


def test_recorded_iteration_yields_every_frame_in_order(fakes):
    runner = fakes.FakeRunner()
    source = fakes.FakeSource(43)
    pipeline = Pipeline(source, runner)
    records = list(pipeline)

    assert [r.frame_index for r in records] == list(range(43))
    for record in records:
        assert_record_matches_frame(record, fakes)
        assert record.ready_time >= record.capture_time
    assert pipeline.policy == "recorded" and pipeline.batch_size == 8
    # A warm-up batch of blank frames, then the frames.
    assert runner.batch_sizes == [8, 8, 8, 8, 8, 8, 3]
    stats = pipeline.stats
    assert (stats.frames_captured, stats.frames_processed, stats.frames_dropped) == (43, 43, 0)
    assert not stats.running
    assert source.closed
    # A runner passed in stays the caller's.
    assert not runner.closed


def test_recorded_loop_inside_with_misses_nothing(fakes):
    with Pipeline(fakes.FakeSource(30), fakes.FakeRunner()) as pipeline:
        indices = [record.frame_index for record in pipeline]
    assert indices == list(range(30))
    (iterator,) = pipeline.stats.consumers
    assert (iterator.name, iterator.delivered, iterator.skipped) == ("iterator", 30, 0)


def test_late_recorded_loop_starts_at_the_oldest_record_kept_and_counts_the_rest(fakes):
    with Pipeline(fakes.FakeSource(30), fakes.FakeRunner(), ring_capacity=4) as pipeline:
        assert pipeline.join(timeout=JOIN_TIMEOUT)
        indices = [record.frame_index for record in pipeline]
    assert indices == [26, 27, 28, 29]
    (iterator,) = pipeline.stats.consumers
    assert (iterator.delivered, iterator.skipped) == (4, 26)


def test_recorded_callbacks_see_every_record_even_when_slow(fakes):
    seen = []

    def slow(record):
        time.sleep(0.005)
        seen.append(record.frame_index)

    pipeline = Pipeline(fakes.FakeSource(40), fakes.FakeRunner(), ring_capacity=4)
    pipeline.on_poses(slow, on_skip=lambda n: pytest.fail(f"skipped {n}"))
    pipeline.run()
    assert seen == list(range(40))
    (consumer,) = pipeline.stats.consumers
    assert consumer.name.endswith("slow") and (consumer.delivered, consumer.skipped) == (40, 0)


class FrameCounter:
    """A consumer of the user's own, attached as the preview and publisher are."""

    name = "frame counter"
    takes_frames = True

    def __init__(self) -> None:
        self.indices: list[int] = []
        self.frames_seen = 0

    def start(self, run):
        reader = run.ring.reader(lossless=True, from_oldest=True)
        self.node_names = run.info.skeleton.node_names

        def body() -> None:
            while (record := reader.wait_next()) is not None:
                self.indices.append(record.frame_index)
                self.frames_seen += run.frames.get() is not None
            reader.detach()

        return body

    def report(self, stats):
        return stats


def test_a_consumer_of_your_own_attaches_as_the_preview_and_publisher_do(fakes):
    counter = FrameCounter()
    pipeline = Pipeline(fakes.FakeSource(25), fakes.FakeRunner())
    pipeline.attach(counter)
    stats = pipeline.run()
    assert counter.indices == list(range(25)) == list(range(stats.frames_processed))
    assert counter.frames_seen == 25  # the newest frame is there for it from the first
    assert counter.node_names == fakes.INFO.skeleton.node_names


def test_decode_of_the_next_batch_overlaps_inference(fakes):
    # The engine's call on batch k returns only once the source has decoded all of
    # batch k + 1: were decoding to wait for inference, the call would never return.
    source = fakes.FakeSource(48)

    class WaitsForDecodeAhead(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            batch = len(self.batch_sizes)  # 0 is the warm-up
            if 1 <= batch < 6:
                fakes.wait_for(lambda: source.yielded >= 8 * (batch + 1), "decode ahead")
            return super().run(frames)

    pipeline = Pipeline(source, WaitsForDecodeAhead())
    pipeline.run()
    assert pipeline.stats.frames_processed == 48


def live_run(fakes, *, delay, fps=30.0, n_frames, start=1.0, warmup=True, **options):
    """A live pipeline on a fake clock, fed one frame per interval from `start`;
    returns the pipeline, the records a fast consumer got, the runner."""
    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock, fps=fps, source_id=options.pop("source_id", "camera:fake"))
    runner = fakes.FakeRunner(
        delay=delay, clock=clock, first_delay=options.pop("first_delay", None)
    )
    pipeline = Pipeline(source, runner, clock=clock, warmup=warmup, **options)
    records = []
    pipeline.on_poses(records.append)
    pipeline.start()
    if warmup:
        fakes.finish_warmup(runner, clock)
    fakes.drive(pipeline, source, runner, [start + i / fps for i in range(n_frames)])
    assert pipeline.join(timeout=JOIN_TIMEOUT)
    return pipeline, records, runner


def test_live_policy_keeps_up_with_a_fast_runner(fakes):
    pipeline, records, _ = live_run(fakes, delay=0.002, n_frames=45)

    stats = pipeline.stats
    assert pipeline.policy == "live" and pipeline.batch_size == 1
    assert stats.frames_dropped == 0
    assert [r.frame_index for r in records] == list(range(45))
    assert stats.latency_p99 < 0.05
    assert stats.frames_total is None


def test_warmup_keeps_slow_engine_initialisation_out_of_the_stream(fakes):
    # On the fake clock the first engine call takes 0.5 s, later ones 2 ms. A frame
    # waiting in the camera before the warm-up ends is read (and stamped) after it.
    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock)
    runner = fakes.FakeRunner(delay=0.002, first_delay=0.5, clock=clock)
    pipeline = Pipeline(source, runner, clock=clock)
    records = []
    pipeline.on_poses(records.append)
    pipeline.start()
    source.push()
    fakes.finish_warmup(runner, clock)
    fakes.drive(pipeline, source, runner, [1 + i / 30 for i in range(29)])
    assert pipeline.join(timeout=JOIN_TIMEOUT)
    assert [r.frame_index for r in records] == list(range(30))
    assert max(r.latency for r in records) < 0.25

    # Without warm-up the camera goes on filming during the slow first call.
    pipeline, _, _ = live_run(fakes, delay=0.002, first_delay=0.5, n_frames=30, warmup=False)
    assert pipeline.stats.frames_dropped > 3


def test_live_policy_drops_and_bounds_latency_with_a_slow_runner(fakes):
    # 30 fps for 2 s into an 80 ms engine, on the fake clock. A processed frame
    # waits at most one frame interval (33 ms) for the engine and then runs for
    # 80 ms: ~115 ms; the bound allows another engine run (195 ms). An unbounded
    # queue would instead reach ~1 s by the end of the run.
    pipeline, records, _ = live_run(fakes, delay=0.08, n_frames=60)

    stats = pipeline.stats
    assert stats.frames_dropped > 20
    assert stats.frames_captured == 60
    assert stats.frames_processed + stats.frames_dropped == 60
    assert len(records) == stats.frames_processed
    indices = [r.frame_index for r in records]
    assert indices == sorted(indices)
    for record in records:
        assert_record_matches_frame(record, fakes)
    assert stats.latency_p99 < 0.08 + 1 / 30 + 0.08
    assert max(r.latency for r in records) < 0.08 + 1 / 30 + 0.08
    assert stats.engine_latency_p50 == pytest.approx(0.08, abs=0.03)


def test_live_batches_wait_at_most_a_few_frame_intervals(fakes):
    # Four frames at once make a full batch; two alone go to the engine once the
    # batch's deadline (4 frame intervals) passes without more frames.
    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock, fps=10.0)
    runner = fakes.FakeRunner(clock=clock)
    pipeline = Pipeline(source, runner, batch_size=4, clock=clock)
    records = []
    pipeline.on_poses(records.append)
    pipeline.start()
    for group in (4, 4, 4, 4, 4, 2, 2):
        source.push(group)
        fakes.wait_for(lambda: pipeline.stats.frames_processed == source.pushed, "the batch")
    source.end()
    assert pipeline.join(timeout=JOIN_TIMEOUT)
    assert [r.frame_index for r in records] == list(range(24))
    assert max(runner.batch_sizes) == 4
    assert sum(runner.batch_sizes[1:]) == 24


def test_slow_callback_lags_and_is_told_what_it_skipped_without_slowing_inference(fakes):
    # The slow callback is stuck on its first record until the stream has ended;
    # the stream (100 frames at 100 fps on the fake clock) settles frame by frame
    # all the same, which it could not if the callback held up the emit stage.
    seen, skips = [], []
    stuck = threading.Event()

    def slow(record):
        stuck.wait(JOIN_TIMEOUT)
        seen.append(record.frame_index)

    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock, fps=100.0)
    runner = fakes.FakeRunner(delay=0.001, clock=clock)
    pipeline = Pipeline(source, runner, ring_capacity=8, clock=clock)
    pipeline.on_poses(slow, on_skip=skips.append)
    last = []
    pipeline.on_poses(last.append)
    pipeline.start()
    fakes.finish_warmup(runner, clock)
    fakes.drive(pipeline, source, runner, [1 + i / 100 for i in range(100)])
    stuck.set()
    assert pipeline.join(timeout=JOIN_TIMEOUT)

    stats = pipeline.stats
    # Inference kept pace with the 1 s source although the callback fell far behind.
    assert last[-1].ready_time - last[0].capture_time < 1.4
    assert stats.frames_dropped <= 2
    slow_stats = next(c for c in stats.consumers if c.name.endswith("slow"))
    assert sum(skips) == slow_stats.skipped > 0
    assert slow_stats.delivered == len(seen)
    assert len(seen) + sum(skips) == stats.frames_processed
    assert seen == sorted(seen)


def test_stop_flushes_outputs_and_recording_matches_poses(fakes, tmp_path):
    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock, fps=60.0, source_id="camera:0")
    runner = fakes.FakeRunner(delay=0.005, clock=clock)
    pipeline = Pipeline(
        source,
        runner,
        outputs=OutputOptions(output=tmp_path / "out.slp", record=tmp_path / "out.mp4"),
        clock=clock,
    )
    pipeline.start()
    fakes.finish_warmup(runner, clock)
    fakes.drive(pipeline, source, runner, [1 + i / 60 for i in range(30)], end=False)
    pipeline.stop(timeout=JOIN_TIMEOUT)
    pipeline.stop()  # idempotent

    processed = pipeline.stats.frames_processed
    assert processed > 10 and source.closed
    labels = sio.load_slp(str(tmp_path / "out.slp"))
    assert len(labels) == processed
    assert labels.videos[0].filename == str((tmp_path / "out.mp4").resolve())
    assert labels.video.shape[0] == processed
    assert [t.name for t in labels.tracks] == ["left", "right"]
    # Frame k of the recording is the frame the k-th labeled frame's poses came from.
    with av.open(str(tmp_path / "out.mp4")) as container:
        recorded = [f.to_ndarray(format="gray") for f in container.decode(video=0)]
    assert len(recorded) == processed
    checked = 0
    for k, frame in enumerate(labels):
        assert frame.frame_idx == k
        if frame.instances:
            source_index = int(frame.instances[0].numpy()[0, 0])
            assert np.median(recorded[k]) == pytest.approx(fakes.fill_of(source_index), abs=4)
            checked += 1
    assert checked > processed // 2


def test_file_output_links_to_the_source_with_source_frame_indices(fakes, tmp_path):
    video = tmp_path / "clip.mp4"
    video.touch()
    source = fakes.FakeSource(10, source_id=str(video))
    Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(output=tmp_path / "out.slp")).run()
    labels = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)
    assert [lf.frame_idx for lf in labels] == list(range(10))
    assert labels.videos[0].filename == str(video.resolve())
    assert tuple(labels.videos[0].shape) == (10, 8, 8, 1)
    assert labels.provenance["source"] == str(video)
    assert labels.provenance["model_type"] == "multi_class_topdown"
    second = labels[5].instances
    assert len(second) == 2 and second[1].track.name == "right"


def test_a_claimed_journal_is_the_one_the_pose_writer_takes(fakes, tmp_path):
    # The claim travels beside the options (a plain value, compared and copied freely).
    out = tmp_path / "out.slp"
    claim = JournalClaim(out)
    options = OutputOptions(output=out)
    assert options == OutputOptions(output=out) and "claim" not in attrs.fields_dict(OutputOptions)
    Pipeline(fakes.FakeSource(10), fakes.FakeRunner(), outputs=options, claim=claim).run()
    with pytest.raises(ValueError, match="taken or released already"):
        claim.take(out)
    claim.release()  # nothing: the writer took it
    assert len(sio.load_slp(str(out), open_videos=False)) == 10
    assert not claim.journal.exists()


def test_engine_failure_is_reraised_as_pipeline_error_after_saving_finished_frames(fakes, tmp_path):
    runner = fakes.FakeRunner(fail_on_call=4)
    pipeline = Pipeline(
        fakes.FakeSource(80), runner, outputs=OutputOptions(output=tmp_path / "out.slp")
    )
    with pytest.raises(
        PipelineError, match="infer stage failed: RuntimeError: engine exploded"
    ) as info:
        pipeline.run()
    assert isinstance(info.value.__cause__, RuntimeError)
    labels = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)
    assert [lf.frame_idx for lf in labels] == list(range(24))
    # Raised once; later calls are quiet.
    pipeline.stop()


def test_engine_and_source_errors_keep_their_type(fakes):
    error = InputMismatchError("model.onnx: expects 1 channel, got 3")
    with pytest.raises(InputMismatchError, match="expects 1 channel"):
        Pipeline(fakes.FakeSource(20), fakes.FakeRunner(fail_on_call=0, error=error)).run()

    records = []
    pipeline = Pipeline(fakes.FakeSource(20, fail_at=13), fakes.FakeRunner(), batch_size=4)
    pipeline.on_poses(records.append)
    with pytest.raises(SourceError, match="corrupt packet at frame 13"):
        pipeline.run()
    # A failing source is an early end of stream: every frame it delivered is processed.
    assert [r.frame_index for r in records] == list(range(13))


def test_callback_error_detaches_the_callback_and_is_raised_on_leaving(fakes):
    def broken(record):
        raise KeyError("no such arena")

    source = fakes.FakeSource(None, is_live=True, paced=True)
    pipeline = Pipeline(source, fakes.FakeRunner())
    pipeline.on_poses(broken)
    pipeline.__enter__()
    try:
        fakes.wait_for(lambda: pipeline.stats.consumers[0].error, "the callback's failure")
        # The pipeline goes on without it.
        processed = pipeline.stats.frames_processed
        fakes.wait_for(lambda: pipeline.stats.frames_processed > processed, "more frames")
        assert not pipeline.join(timeout=0.01)
    finally:
        # Leaving the `with` block raises the callback's error.
        with pytest.raises(
            PipelineError, match=r"callback .*broken failed on frame \d+: KeyError"
        ) as info:
            pipeline.__exit__(None, None, None)
    assert isinstance(info.value.__cause__, KeyError)
    assert pipeline.stats.consumers[0].error == "KeyError: 'no such arena'"


def test_runner_returning_the_wrong_number_of_poses_is_an_error(fakes):
    class Short(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            return super().run(frames)[:-1]

    with pytest.raises(PipelineError, match="poses for 7 frames, given a batch of 8"):
        Pipeline(fakes.FakeSource(8), Short()).run()


def test_stats_snapshot_while_running(fakes):
    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock, fps=50.0)
    runner = fakes.FakeRunner(delay=0.005, clock=clock)
    with Pipeline(source, runner, clock=clock) as pipeline:
        fakes.finish_warmup(runner, clock)
        fakes.drive(pipeline, source, runner, [i / 50 for i in range(1, 26)], end=False)
        stats = pipeline.stats
    assert stats.running and stats.policy == "live"
    assert 0.3 < stats.elapsed < 2.0
    assert 30 < stats.fps < 70 and 30 < stats.capture_fps < 70
    assert stats.latency_p50 is not None and stats.latency_p50 < stats.latency_p99 + 1e-9
    assert stats.engine_latency_p50 >= 0.004
    assert set(stats.queue_depths) == {"frames", "batches", "results"}
    assert stats.instances_last_frame in (0, 1, 2)
    assert not pipeline.stats.running


def test_elapsed_uses_the_injected_clock(fakes):
    now = [100.0]
    source = fakes.FakeSource(5, hang_at=3)
    pipeline = Pipeline(source, fakes.FakeRunner(), clock=lambda: now[0])
    assert pipeline.stats.elapsed == 0.0 and not pipeline.stats.running
    pipeline.start()
    now[0] = 103.5
    assert pipeline.stats.running and pipeline.stats.elapsed == 3.5
    source.release.set()
    assert pipeline.join(timeout=JOIN_TIMEOUT)
    now[0] = 200.0
    assert pipeline.stats.elapsed == 3.5 and not pipeline.stats.running


def test_stats_say_finished_without_join(fakes):
    pipeline = Pipeline(fakes.FakeSource(5), fakes.FakeRunner()).start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    while pipeline.stats.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pipeline.stats.running and pipeline.stats.frames_processed == 5
    pipeline.join(timeout=JOIN_TIMEOUT)


def test_invalid_arguments(fakes):
    with pytest.raises(ValueError, match="policy must be one of live, recorded; got 'fast'"):
        Pipeline(fakes.FakeSource(), fakes.FakeRunner(), policy="fast")
    with pytest.raises(ValueError, match="batch_size must be an int of at least 1, got 0"):
        Pipeline(fakes.FakeSource(), fakes.FakeRunner(), batch_size=0)
    with pytest.raises(ValueError, match=r"out\.txt: cannot write poses to a \.txt file"):
        Pipeline(fakes.FakeSource(), fakes.FakeRunner(), outputs=OutputOptions(output="out.txt"))


def test_model_paths_are_loaded_and_the_runner_closed_at_the_end(fakes, monkeypatch):
    loaded = []

    def load(paths, *, engine, device, **options):
        loaded.append((paths, engine, device, fakes.FakeRunner()))
        return loaded[-1][-1]

    monkeypatch.setattr(engines_api, "load_runner", load)
    pipeline = Pipeline(fakes.FakeSource(5), "models/single", load=LoadOptions("onnx", "cpu"))
    assert pipeline.run().frames_processed == 5
    [(paths, engine, device, runner)] = loaded
    assert (paths, engine, device) == (["models/single"], "onnx", "cpu")
    assert runner.closed

    Pipeline(fakes.FakeSource(5), ["models/centroid", "models/instance"]).run()
    assert loaded[-1][:3] == (["models/centroid", "models/instance"], "auto", "auto")


def test_stop_before_start_releases_everything(fakes, monkeypatch):
    runner = fakes.FakeRunner()
    monkeypatch.setattr(engines_api, "load_runner", lambda paths, **options: runner)
    source = fakes.FakeSource(5)
    pipeline = Pipeline(source, "models/single")
    pipeline.stop()
    assert source.closed and runner.closed
    with pytest.raises(PipelineError, match="stopped before it started"):
        pipeline.start()


def _thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux-only")
@pytest.mark.parametrize("policy", ["recorded", "live"])
def test_recorded_policy_runs_every_stage_but_infer_at_low_priority(fakes, policy):
    base = _thread_nice()
    seen: dict[str, int] = {}

    class Runner(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            seen["infer"] = _thread_nice()
            return super().run(frames)

    source = fakes.FakeSource(10, is_live=policy == "live")
    frames = iter(source)

    def capture():
        # The first call comes from the constructor; the last from the capture stage.
        seen["capture"] = _thread_nice()
        frame = next(frames, None)
        return None if frame is None else frame.image

    from sleap_live.stream.sources import IteratorSource

    pipeline = Pipeline(IteratorSource(capture), Runner(), policy=policy)
    pipeline.on_poses(lambda record: seen.setdefault("consumer", _thread_nice()))
    pipeline.run()

    background = min(19, base + RECORDED_BACKGROUND_NICE) if policy == "recorded" else base
    assert seen == {"infer": base, "capture": background, "consumer": background}


# --- stage times, device batches -------------------------------------------------------


def test_every_batch_records_its_stage_times_in_order(fakes):
    pipeline = Pipeline(fakes.FakeSource(20), fakes.FakeRunner(), batch_size=4)
    pipeline.run()
    timeline = pipeline.timeline
    assert len(timeline) == 5
    for times in timeline:
        order = [*times.decode, *times.stack, *times.engine, *times.postprocess]
        assert order == sorted(order)
    starts = [times.engine[0] for times in timeline]
    assert starts == sorted(starts)


def test_tensor_frames_are_stacked_by_torch_without_streams(fakes):
    import torch

    from sleap_live.stream.batching import DeviceStreams, collect_batch
    from sleap_live.stream.channel import Channel
    from sleap_live.stream.types import Frame

    images = [torch.full((4, 5, 3), i, dtype=torch.uint8) for i in range(3)]
    frames = [Frame(i, float(i), "t", image) for i, image in enumerate(images)]
    channel: Channel[Frame] = Channel(4, "block")
    for frame in frames[1:]:
        channel.put(frame)
    channel.close()
    batch = collect_batch(channel, frames[0], 3, None, fakes.FakeClock(5.0))
    assert isinstance(batch.images, torch.Tensor) and batch.images.shape == (3, 4, 5, 3)
    assert [int(image[0, 0, 0]) for image in batch.images] == [0, 1, 2]
    assert batch.times.decode == (0.0, 2.0) and batch.ready is None and batch.streams is None
    # CPU tensors and arrays stay on the host path: no CUDA streams are made.
    assert DeviceStreams.for_image(frames[0].image) is None
    assert DeviceStreams.for_image(np.zeros((2, 2, 1), np.uint8)) is None


def test_the_fake_runner_keeps_the_runner_protocol(fakes):
    from sleap_live.engines.runners.base import Runner

    runner = fakes.FakeRunner()
    assert isinstance(runner, Runner) and runner.metadata is None
    assert len(runner.run(np.stack([fakes.frame_image(0)]), stream=None)) == 1


@pytest.mark.gpu
def test_device_frames_stay_on_the_gpu_and_run_on_the_inference_stream(fakes):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from sleap_live.stream.sources import IteratorSource

    seen = []

    class DeviceRunner(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
            seen.append((frames.device.type, stream, torch.cuda.current_stream()))
            return super().run(frames.cpu().numpy())

    images = [torch.from_numpy(fakes.frame_image(i)).cuda() for i in range(8)]
    pipeline = Pipeline(IteratorSource(images, copy=False), DeviceRunner(), batch_size=4)
    pipeline.run()
    assert [device for device, _, _ in seen[1:]] == ["cuda", "cuda"]
    assert all(stream is not None and stream == current for _, stream, current in seen[1:])
