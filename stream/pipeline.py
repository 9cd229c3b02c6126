"""The realtime pipeline: capture -> batch -> infer -> emit -> consumers, one thread each.

Data flow, with the channel (or ring) on every edge::

    source ──frames──▶ batcher ──batches──▶ infer ──results──▶ emit ──▶ ring ──▶ consumers
    (capture thread)   (stacks B frames)    (runner.run)       │        (on_poses callbacks,
                                                                │         iteration, polling)
                                                                ├──slp──▶ SlpWriter thread
                                                                └──record▶ VideoRecorder thread

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
  the lowest CPU priority (Linux), so on a CPU engine decoding fills the cycles
  the engine leaves idle rather than taking cores from it.

Finished frames are never lost: whatever stops the pipeline (end of source,
`stop()`, Ctrl-C, a failing source, engine or consumer), poses already computed
are still emitted to the ring, the writers and the consumers, and the writers
save. `stop()` and failures discard only frames not yet handed to the engine; a
failing source is an early end of stream, so every frame it delivered is
processed.

Consumers read the ring, each through its own cursor. Under ``"live"`` a slow
consumer lags on its own and is told how many records it skipped; under
``"recorded"`` the emit stage waits for it, so it sees every record.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np

from sleap_live.engines.errors import EngineError
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.types import FramePoses
from sleap_live.stream.channel import Channel
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty, PipelineError, StreamError
from sleap_live.stream.ring import RingBuffer, RingReader
from sleap_live.stream.sources import Source
from sleap_live.stream.stats import Clock, ConsumerStats, LatencyWindow, PipelineStats, RateMeter
from sleap_live.stream.types import Frame, PoseRecord
from sleap_live.stream.writers import SlpWriter, VideoRecorder

Policy = Literal["live", "recorded"]
POLICIES: tuple[str, ...] = ("live", "recorded")

# Live: one frame per batch is the lowest latency. Recorded: 8 is the batch size
# sleap-nn exports engines for by default (its `--max-batch-size`), so exported
# TensorRT engines accept it; it amortises per-call overhead (sleap-nn PR #418
# measured 3.4x the single-instance TensorRT throughput at batch 8 over batch 1);
# and two batches in flight keep decode-ahead memory small (16 MB of 1024² gray).
DEFAULT_BATCH_SIZE = {"live": 1, "recorded": 8}

# Records kept in the ring: about 8 s at 30 fps of slack for a lagging consumer.
# A record is small (max_instances x nodes x 3 floats), so this costs little.
DEFAULT_RING_CAPACITY = 256

# Pose records are small, so the .slp writer's queue is deep: a periodic save
# that takes a few seconds does not hold up the emit stage.
SLP_QUEUE_CAPACITY = 4096

# Frames waiting for the video recorder; images are large, so keep ~1 s at 30 fps.
RECORD_QUEUE_CAPACITY = 32

# Under "recorded" every stage but infer runs at the lowest CPU priority (Linux),
# so that decoding and bookkeeping fill the CPU the engine leaves idle instead of
# preempting its thread pool, whose parallel operators wait for their slowest
# thread. Decode only has to stay two batches ahead; when it falls behind the
# engine idles and decode gets the cores. On 2 cores with FFV1 video, 7 side-by-side
# comparisons gave a mean recorded/engine ratio of 0.93 with it and 0.90 without
# (higher in 5 of 7; the machine was noisy).
RECORDED_BACKGROUND_NICE = 19


@attrs.frozen(eq=False)
class _Batch:
    frames: tuple[Frame, ...]
    images: np.ndarray


@attrs.frozen(eq=False)
class _Result:
    frames: tuple[Frame, ...]
    poses: list[FramePoses]


class _Consumer:
    """A ring reader plus the bookkeeping the emit stage and `stats` need."""

    def __init__(
        self, name: str, reader: RingReader, lossless: bool, thread: int | None = None
    ) -> None:
        self.name = name
        self.reader = reader
        self.lossless = lossless
        self.thread = thread  # ident of the caller's thread for iterators, else None
        # A lossless consumer attached late starts at the oldest record in the ring;
        # the ones before it are skipped too.
        self.skipped_before = reader.position if lossless else 0
        self.delivered = 0
        self.attached = True

    @property
    def skipped(self) -> int:
        return self.skipped_before + self.reader.missed

    def stats(self) -> ConsumerStats:
        return ConsumerStats(name=self.name, delivered=self.delivered, skipped=self.skipped)


class Pipeline:
    """Runs a pose model on a stream of frames, in threads, with bounded queues.

    Lifecycle: `start()` launches the stages and returns at once; `join()` waits
    for the source to end; `stop()` ends capture early, finishes the frames
    already in the engine and saves the outputs. `run()` is start plus join. As a
    context manager the pipeline starts on enter and stops on exit, so call
    `join()` (or iterate) inside the block to process a file to its end. Errors
    from any stage are raised by `join`/`stop`/`run`/`__exit__` in the caller's
    thread. A pipeline runs once.

    Args:
        source: an open frame source (see `sleap_live.stream.open_source`): an
            iterable of `Frame` with `source_id`, `fps`, `frame_shape`, `n_frames`
            and `is_live`. The pipeline closes it when capture ends.
        model_or_runner: a `Runner`, or one or more model paths to load with
            `sleap_live.engines.runners.load.load_runner`. A runner passed in stays the
            caller's to close; one loaded here is closed when the pipeline stops.
        batch_size: frames per engine call; default 1 for ``"live"``, 8 for
            ``"recorded"``.
        policy: ``"live"`` or ``"recorded"``; default from `source.is_live`.
        ring_capacity: pose records kept in `ring` for consumers and polling.
        output: .slp file to write every pose record to (saved periodically and
            on stop, see `SlpWriter`).
        record: video file to record the processed frames to (see
            `VideoRecorder`); the .slp output then links to this recording.
        engine: runtime used when loading models from paths ("auto", "torch", "onnx").
        device: device used when loading models from paths ("auto", "cpu", "cuda", ...).
        warmup: run the engine once on a blank batch before capture starts, so
            one-time initialisation neither delays nor drops the first frames nor
            shows up in the latency statistics.
        save_interval: seconds between periodic saves of `output`.
        clock: time source for `stats` rates and elapsed time; injectable for
            tests. Capture and ready times always use `time.monotonic`.

    Raises:
        ValueError: an unknown policy or a batch size below 1.

    Example:
        A closed loop on a camera, plus a complete .slp of the session::

            from sleap_live.engines.runners.load import load_runner
            from sleap_live.stream import Pipeline, open_source

            runner = load_runner(["models/centroid", "models/centered_instance"])

            def on_poses(record):
                # Runs in its own thread for every record; a slow callback only
                # delays itself.
                if record.poses.n_instances and record.poses.points[0, 0, 0] > 320:
                    trigger_laser()

            def on_skip(n):
                print(f"callback fell behind and skipped {n} records")

            with Pipeline(open_source(0), runner, output="session.slp") as pipeline:
                pipeline.on_poses(on_poses, on_skip=on_skip)
                time.sleep(60)
                print(pipeline.stats)
            runner.close()

        Offline, every frame in order::

            for record in Pipeline(open_source("clip.mp4"), "models/single"):
                print(record.frame_index, record.poses.points)
    """

    def __init__(
        self,
        source: Source,
        model_or_runner: Runner | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        batch_size: int | None = None,
        policy: Policy | None = None,
        ring_capacity: int = DEFAULT_RING_CAPACITY,
        output: str | os.PathLike[str] | None = None,
        record: str | os.PathLike[str] | None = None,
        engine: str = "auto",
        device: str = "auto",
        warmup: bool = True,
        save_interval: float | None = 10.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if policy is None:
            policy = "live" if source.is_live else "recorded"
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if batch_size is None:
            batch_size = DEFAULT_BATCH_SIZE[policy]
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int of at least 1, got {batch_size!r}")
        self._source = source
        self.policy: Policy = policy
        self.batch_size = batch_size
        self._owns_runner = not isinstance(model_or_runner, Runner)
        self.runner: Runner = _as_runner(model_or_runner, engine=engine, device=device)
        info = self.runner.info
        self.ring = RingBuffer(ring_capacity, info.max_instances, info.skeleton.n_nodes)
        self._output = Path(output) if output is not None else None
        self._record = Path(record) if record is not None else None
        self._save_interval = save_interval
        self._warmup = warmup
        self._clock = clock

        live = policy == "live"
        self._frames: Channel[Frame] = Channel(
            batch_size if live else 2 * batch_size, "drop_oldest" if live else "block"
        )
        self._batches: Channel[_Batch] = (
            Channel(1, "drop_oldest", on_drop=self._count_dropped_batch)
            if live
            else Channel(2, "block")
        )
        self._results: Channel[_Result] = Channel(2, "block")
        self._sinks: dict[str, Channel[Any]] = {}

        self._halt = threading.Event()
        # Set once the engine is warmed up (or the pipeline halts); capture waits for it.
        self._engine_ready = threading.Event()
        self._lock = threading.Lock()
        self._room = threading.Condition()
        self._consumers: list[_Consumer] = []
        self._pending_callbacks: list[tuple[_Consumer, Callable[..., Any], Any]] = []
        # Names of the stages whose threads are running. Waiting on this condition,
        # not on Thread.join, keeps a Ctrl-C during join() harmless: an interrupted
        # Thread.join can leave a live thread marked as finished (CPython < 3.13).
        self._running: list[str] = []
        self._stages_done = threading.Condition()
        self._error: BaseException | None = None
        self._error_raised = False
        self._started = False
        self._finished = False
        self._started_at: float | None = None
        self._stopped_at: float | None = None  # when the emit stage finished

        self._captured = 0
        self._processed = 0
        self._batch_frames_dropped = 0
        self._instances_last_frame = 0
        self._capture_rate = RateMeter(clock=clock)
        self._process_rate = RateMeter(clock=clock)
        self._latency = LatencyWindow()
        self._engine_latency = LatencyWindow()

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> Pipeline:
        """Open the outputs and start every stage; idempotent.

        Returns:
            The pipeline, so `Pipeline(...).start()` chains.

        Raises:
            ValueError, FileNotFoundError: an output path is unusable (nothing started).
            PipelineError: `stop()` was called before `start()`.
        """
        with self._lock:
            if self._started:
                return self
            if self._halt.is_set():
                raise PipelineError("the pipeline was stopped before it started; make a new one")
            writers = self._open_writers()
            self._sinks = {name: channel for name, (channel, _) in writers.items()}
            self._started = True
            self._started_at = self._clock()
            self._capture_rate.start()
            self._process_rate.start()
            for name, (channel, writer) in writers.items():
                self._spawn(f"{name} writer", self._sink, channel, writer)
            self._spawn("emit", self._emit)
            self._spawn("infer", self._infer)
            self._spawn("batcher", self._batch)
            self._spawn("capture", self._capture)
            for consumer, callback, on_skip in self._pending_callbacks:
                self._spawn(f"consumer {consumer.name}", self._consume, consumer, callback, on_skip)
            self._pending_callbacks.clear()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop capturing, finish the frames already in the engine, flush outputs.

        Frames captured but not yet handed to the engine are discarded; every
        pose already computed is emitted and saved. Idempotent.

        Args:
            timeout: most seconds to wait for the stages; None waits as long as needed.

        Raises:
            PipelineError: a stage failed (chained to the cause), or the stages did
                not finish within `timeout`.
            StreamError, EngineError: a source or engine failed; re-raised as is.
        """
        self._request_halt()
        if not self.join(timeout):
            with self._stages_done:
                stuck = ", ".join(self._running)
            raise PipelineError(
                f"pipeline did not stop within {timeout} s (still running: {stuck})"
            )

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the pipeline to finish (source exhausted, or stopped).

        Args:
            timeout: most seconds to wait; None waits as long as needed.

        Returns:
            True when every stage has finished, False if `timeout` passed first.

        Raises:
            PipelineError: a stage failed; the original exception is its `__cause__`.
            StreamError, EngineError: a source or engine failed; re-raised as is.
                A stored error is raised once, by the first call that sees it.
        """
        self._release_iterators_of_this_thread()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._stages_done:
            while self._running:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._stages_done.wait(remaining)
        self._finish()
        self._raise_stored_error()
        return True

    def run(self) -> PipelineStats:
        """Process the source to its end (or until Ctrl-C), then return final stats.

        Raises:
            KeyboardInterrupt: after stopping cleanly and saving the outputs.
            PipelineError, StreamError, EngineError: as `join`.
        """
        self.start()
        try:
            self.join()
        except KeyboardInterrupt:
            self.stop()
            raise
        return self.stats

    def __enter__(self) -> Pipeline:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- consumers

    def on_poses(
        self,
        callback: Callable[[PoseRecord], object],
        *,
        on_skip: Callable[[int], object] | None = None,
        lossless: bool | None = None,
    ) -> None:
        """Call `callback(record)` for every pose record, in a thread of its own.

        The callback gets records in order. Under the ``"live"`` policy a slow
        callback never delays inference: it reads the ring at its own pace, and
        when it falls more than `ring_capacity` records behind it resumes at the
        oldest record still there, after `on_skip(n)` tells it how many it missed.
        Under ``"recorded"`` it sees every record (registered after `start`, every
        record still in the ring onwards), and a slow callback slows the pipeline
        instead. An exception from either callback stops the pipeline and is
        re-raised from `stop`/`join` as a `PipelineError`.

        Args:
            callback: called with each `PoseRecord` (a copy it may keep).
            on_skip: called with the number of records skipped, before the first
                record after the gap.
            lossless: override the policy's choice (True: never skip, apply
                backpressure; False: skip when behind).
        """
        name = getattr(callback, "__qualname__", type(callback).__name__)
        consumer = self._attach(name, lossless)
        with self._lock:
            if self._started:
                self._spawn(f"consumer {name}", self._consume, consumer, callback, on_skip)
            else:
                self._pending_callbacks.append((consumer, callback, on_skip))

    def records(self) -> Iterator[PoseRecord]:
        """Yield every pose record in order, in the caller's thread.

        If the pipeline has not been started, iterating starts it and stops it
        when the loop ends (or is broken out of). Under ``"recorded"`` the
        pipeline waits for a slow loop, and a loop that begins after `start` (for
        example right inside `with`) begins at the oldest record still in the
        ring, so it misses nothing unless more than `ring_capacity` records came
        before it. Under ``"live"`` it begins with the next record and skips
        records when it falls behind. Skips are counted in `stats.consumers`.
        """
        owns_run = not self._started
        consumer = self._attach("iterator", None, thread=threading.get_ident())
        if owns_run:
            self.start()
        try:
            while (record := self._take(consumer)) is not None:
                yield record
        finally:
            self._detach(consumer)
            if owns_run:
                self.stop()

    def __iter__(self) -> Iterator[PoseRecord]:
        return self.records()

    # ---------------------------------------------------------------------- stats

    @property
    def stats(self) -> PipelineStats:
        """A consistent-enough snapshot of counters, rates and queue depths."""
        depths = {"frames": self._frames.stats().depth, "batches": self._batches.stats().depth}
        depths["results"] = self._results.stats().depth
        depths.update({name: channel.stats().depth for name, channel in self._sinks.items()})
        latency = self._latency.percentiles(50, 99)
        engine = self._engine_latency.percentiles(50, 99)
        if self._started_at is None:
            elapsed = 0.0
        else:
            end = self._stopped_at if self._stopped_at is not None else self._clock()
            elapsed = end - self._started_at
        return PipelineStats(
            policy=self.policy,
            batch_size=self.batch_size,
            running=self._is_running(),
            elapsed=elapsed,
            frames_total=None if self.policy == "live" else self._source.n_frames,
            frames_captured=self._captured,
            frames_processed=self._processed,
            frames_dropped=self._frames.stats().dropped + self._batch_frames_dropped,
            fps=self._process_rate.rate(),
            capture_fps=self._capture_rate.rate(),
            latency_p50=latency[0],
            latency_p99=latency[1],
            engine_latency_p50=engine[0],
            engine_latency_p99=engine[1],
            queue_depths=depths,
            instances_last_frame=self._instances_last_frame,
            consumers=tuple(c.stats() for c in list(self._consumers)),
        )

    # --------------------------------------------------------------------- stages

    def _capture(self) -> None:
        frames: Iterator[Frame] = iter(())
        self._engine_ready.wait()
        try:
            if self._halt.is_set():
                return
            frames = iter(self._source)
            for frame in frames:
                if self._halt.is_set():
                    break
                self._captured += 1
                self._capture_rate.add()
                self._frames.put(frame)
        except ChannelClosed:
            pass  # halted while waiting for room
        except Exception as exc:
            # A failing source is an early end of stream: the frames it did deliver
            # are still processed and saved before the error is raised.
            self._store_error("capture", exc)
        finally:
            self._frames.close()
            _close_iterator(frames)
            self._source.close()

    def _batch(self) -> None:
        live = self.policy == "live"
        interval = 1.0 / self._source.fps if live and self._source.fps else 0.0
        try:
            for first in self._frames:
                if self._halt.is_set():
                    break
                group = [first]
                # Live: wait for a full batch at most batch_size frame intervals after
                # the first frame was captured. Recorded: always fill the batch.
                deadline = first.timestamp + self.batch_size * interval if live else None
                while len(group) < self.batch_size:
                    if deadline is None:
                        wait = None
                    else:
                        wait = deadline - time.monotonic()
                        if wait <= 0:
                            break
                    try:
                        group.append(self._frames.get(wait))
                    except (ChannelEmpty, ChannelClosed):
                        break
                images = group[0].image[np.newaxis] if len(group) == 1 else _stack(group)
                self._batches.put(_Batch(tuple(group), images))
        except ChannelClosed:
            pass  # halted while waiting for room
        finally:
            self._batches.close()

    def _infer(self) -> None:
        try:
            if self._warmup:
                blank = np.zeros((self.batch_size, *self._source.frame_shape), np.uint8)
                self.runner.run(blank)
            self._engine_ready.set()
            for batch in self._batches:
                if self._halt.is_set():
                    break
                started = time.monotonic()
                poses = self.runner.run(batch.images)
                self._engine_latency.add(time.monotonic() - started)
                if len(poses) != len(batch.frames):
                    raise PipelineError(
                        f"runner returned poses for {len(poses)} frames, "
                        f"given a batch of {len(batch.frames)}"
                    )
                self._results.put(_Result(batch.frames, poses))
        except ChannelClosed:
            pass  # the emit stage failed; its error is already stored
        finally:
            self._results.close()

    def _emit(self) -> None:
        try:
            for result in self._results:
                for frame, poses in zip(result.frames, result.poses, strict=True):
                    record = PoseRecord(
                        frame_index=frame.index,
                        capture_time=frame.timestamp,
                        ready_time=time.monotonic(),
                        source_id=frame.source_id,
                        poses=poses,
                    )
                    self._publish(record)
                    self._processed += 1
                    self._process_rate.add()
                    self._latency.add(record.latency)
                    self._instances_last_frame = poses.n_instances
                    self._feed_sink("slp", record)
                    self._feed_sink("record", frame.image)
        except BaseException:
            self._results.close()
            raise
        finally:
            self._stopped_at = self._clock()
            self.ring.close()
            for channel in self._sinks.values():
                channel.close()

    def _publish(self, record: PoseRecord) -> None:
        """Write to the ring once no lossless consumer would lose the oldest slot."""
        with self._room:
            sequence = self.ring.written
            # After a failure nothing may hold up the emit stage, or stop() could hang.
            while self._error is None and any(
                sequence - c.reader.position >= self.ring.capacity
                for c in self._consumers
                if c.lossless and c.attached
            ):
                self._room.wait()
            self.ring.write(record)

    def _feed_sink(self, name: str, item: Any) -> None:
        channel = self._sinks.get(name)
        if channel is None:
            return
        try:
            channel.put(item)
        except ChannelClosed:
            pass  # that writer failed; its error is already stored

    def _sink(self, channel: Channel[Any], writer: SlpWriter | VideoRecorder) -> None:
        try:
            for item in channel:
                writer.write(item)
        except BaseException:
            channel.close()
            raise
        finally:
            writer.close()

    def _consume(
        self,
        consumer: _Consumer,
        callback: Callable[[PoseRecord], object],
        on_skip: Callable[[int], object] | None,
    ) -> None:
        reported = 0
        try:
            while (record := self._take(consumer)) is not None:
                if consumer.skipped != reported and on_skip is not None:
                    on_skip(consumer.skipped - reported)
                reported = consumer.skipped
                callback(record)
        finally:
            self._detach(consumer)

    def _take(self, consumer: _Consumer) -> PoseRecord | None:
        """A consumer's next record (None once the ring is closed and drained).

        Taking it frees the record's slot, which a lossless consumer's backpressure
        may be holding the emit stage for.
        """
        record = consumer.reader.wait_next()
        if record is not None:
            consumer.delivered += 1
            self._notify_room()
        return record

    # -------------------------------------------------------------------- helpers

    def _attach(self, name: str, lossless: bool | None, thread: int | None = None) -> _Consumer:
        if lossless is None:
            lossless = self.policy == "recorded"
        with self._room:
            reader = self.ring.reader(from_oldest=lossless)
            consumer = _Consumer(name, reader, lossless, thread)
            self._consumers.append(consumer)
        return consumer

    def _release_iterators_of_this_thread(self) -> None:
        """A thread waiting in join() is not iterating: its iterators must not block emit."""
        me = threading.get_ident()
        with self._room:
            for consumer in self._consumers:
                if consumer.thread == me:
                    consumer.lossless = False
            self._room.notify_all()

    def _detach(self, consumer: _Consumer) -> None:
        with self._room:
            consumer.attached = False
            self._room.notify_all()

    def _notify_room(self) -> None:
        with self._room:
            self._room.notify_all()

    def _count_dropped_batch(self, batch: _Batch) -> None:
        self._batch_frames_dropped += len(batch.frames)

    def _open_writers(self) -> dict[str, tuple[Channel[Any], SlpWriter | VideoRecorder]]:
        source = self._source
        fps = source.fps or 30.0
        writers: dict[str, tuple[Channel[Any], SlpWriter | VideoRecorder]] = {}
        if self._record is not None:
            recorder = VideoRecorder(self._record, fps, source.frame_shape)
            writers["record"] = (Channel(RECORD_QUEUE_CAPACITY), recorder)
        if self._output is not None:
            info = self.runner.info
            recording = self._record is not None
            try:
                slp = SlpWriter(
                    self._output,
                    info.skeleton,
                    video=self._record if recording else source.source_id,
                    frame_shape=source.frame_shape,
                    fps=source.fps,
                    n_frames=None if recording else source.n_frames,
                    class_names=info.class_names,
                    renumber=recording,
                    save_interval=self._save_interval,
                    provenance={
                        "sleap_live_source": source.source_id,
                        "sleap_live_model_type": info.model_type,
                    },
                )
            except BaseException:
                if recording:
                    writers["record"][1].close()
                raise
            writers["slp"] = (Channel(SLP_QUEUE_CAPACITY), slp)
        return writers

    def _spawn(self, stage: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(
            target=self._guard, args=(stage, target, *args), name=f"sleap-live {stage}", daemon=True
        )
        with self._stages_done:
            self._running.append(stage)
        thread.start()

    def _guard(self, stage: str, target: Callable[..., None], *args: Any) -> None:
        """Run a stage; store the first failure and halt every other stage."""
        if self.policy == "recorded" and stage != "infer":
            _lower_thread_priority(RECORDED_BACKGROUND_NICE)
        try:
            target(*args)
        except BaseException as exc:
            self._store_error(stage, exc)
            self._request_halt()
            self._notify_room()
        finally:
            with self._stages_done:
                self._running.remove(stage)
                self._stages_done.notify_all()

    def _store_error(self, stage: str, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = _as_reported(stage, exc)

    def _is_running(self) -> bool:
        with self._stages_done:
            return bool(self._running)

    def _request_halt(self) -> None:
        self._halt.set()
        self._engine_ready.set()
        # Closing the source ends a capture waiting for its next frame; closing the
        # channels wakes a capture waiting for room and lets the batcher and infer
        # stages drain what is left without taking new work.
        self._source.close()
        self._frames.close()
        self._batches.close()

    def _finish(self) -> None:
        with self._lock:
            # join() before start() has nothing to finish; stop() before start() does.
            if self._finished or not (self._started or self._halt.is_set()):
                return
            self._finished = True
        if self._owns_runner:
            self.runner.close()

    def _raise_stored_error(self) -> None:
        with self._lock:
            error, already = self._error, self._error_raised
            self._error_raised = True
        if error is not None and not already:
            raise error


def _as_reported(stage: str, exc: BaseException) -> BaseException:
    """Source and engine errors travel as they are (the CLI prints them); others are wrapped."""
    if isinstance(exc, (StreamError, EngineError)):
        return exc
    wrapped = PipelineError(f"{stage} stage failed: {type(exc).__name__}: {exc}")
    wrapped.__cause__ = exc
    return wrapped


def _as_runner(
    model_or_runner: Runner | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    engine: str,
    device: str,
) -> Runner:
    if isinstance(model_or_runner, Runner):
        return model_or_runner
    # Imported here: loading models may need torch, and a pipeline given a runner
    # (say ONNX Runtime only) should not pay for importing it.
    from sleap_live.engines.runners.load import load_runner

    paths = (
        [model_or_runner] if isinstance(model_or_runner, (str, os.PathLike)) else model_or_runner
    )
    return load_runner(list(paths), engine=engine, device=device)


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


def _lower_thread_priority(increment: int) -> None:
    """Make the calling thread nicer by `increment`, on Linux (elsewhere nice is per process).

    Threads this thread starts later, such as FFmpeg's decoder threads, inherit it.
    """
    if sys.platform != "linux":
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + increment)
    except OSError:
        pass  # a sandbox that forbids it only costs throughput


def _close_iterator(iterator: Iterator[Any]) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
