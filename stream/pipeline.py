"""The realtime pipeline: capture -> batch -> infer -> emit -> consumers, one thread each.

Data flow, with a channel (or the ring) on every edge::

    source ──frames──▶ batcher ──batches──▶ infer ──results──▶ emit ──▶ ring ──▶ consumers
    (capture thread)   (stacks B frames)    (runner.run)       │        (attached: preview,
                                                                │         publish, yours;
                                                                │         on_poses callbacks,
                                                                │         iteration, polling)
                                                                └──────▶ outputs (outputs/:
                                                                         .slp, recording)

A live batch of one frame of one source has no batcher thread: the infer stage takes
each frame from the frames' slots itself. A run with an experiment makes its records
(tracked, decided) in the infer stage: the closed loop's bytes leave with no thread
hand-off after the engine.

Two policies (see `batching`) decide what happens when a later stage is slower
than capture: ``"live"`` (default for live sources) never makes capture wait and
drops the oldest waiting frames instead, so latency stays near one frame interval
plus one engine run; ``"recorded"`` (default for files) drops nothing, a slow
stage slowing capture instead, and decodes ahead of the engine.

Finished frames are never lost: whatever stops the pipeline (end of source,
`stop()`, Ctrl-C, a failing source or engine, a callback with ``on_error="stop"``),
poses already computed are still emitted to the ring, the writers and the
consumers, and the writers save. `stop()` and failures discard only frames not
yet handed to the engine; a failing source is an early end of stream, so every
frame it delivered is processed.

Nothing a source does can hang the pipeline: a reader thread of its own calls the
source (see `source_reader`), so `stop()` ends capture at once even while the
source is blocked, and a source that delivers no frame for its read timeout is
reported as stalled (`SourceStalledError`) after the frames it did deliver are
processed and saved. Leaving ``with Pipeline(...)`` waits at most `stop_timeout`.

Several sources (a `SourceGroup`: cameras filming one arena from several sides) run
through one engine: each is read by a reader of its own into a slot of its own (see
`slots`), every batch holds the newest frame of each source, every record keeps its
source's id, drops are counted per source, and each source's poses and recordings go
to files of its own (``session.slp`` -> ``session.camera-0.slp``). The first source to
fail or stall ends the run, after every frame delivered is processed and saved.

Every timing decision is made on one injectable `Clock` (see `clock`).
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from sleap_live.engines.load.dirs import poseless_kind
from sleap_live.engines.load_options import LoadOptions
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.types import MASK_MODEL_TYPES
from sleap_live.stream.batching import (
    DEFAULT_BATCH_SIZE,
    POLICIES,
    Batch,
    Policy,
    StageTimes,
    batches_channel,
    choose_policy,
    open_batcher,
)
from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.consumers import (
    Consumers,
    LatestFrame,
    OnError,
    PipelineRun,
    RingConsumer,
)
from sleap_live.stream.engine_step import EngineResult, EngineStep
from sleap_live.stream.errors import ChannelClosed, PipelineError
from sleap_live.stream.memory import check_batch_memory
from sleap_live.stream.outputs.options import OutputOptions
from sleap_live.stream.outputs.provenance import with_models
from sleap_live.stream.outputs.recovery import JournalClaim
from sleap_live.stream.outputs.writers import OpenWriters, check_poseless_output, open_outputs
from sleap_live.stream.priority import RECORDED_BACKGROUND_NICE, apply_stage_priority
from sleap_live.stream.ring import DEFAULT_STALL_TIMEOUT, RingBuffer
from sleap_live.stream.runner import ModelOrRunner, ModelPaths, as_runner
from sleap_live.stream.source_reader import SourceReader, watch_all
from sleap_live.stream.sources import Source
from sleap_live.stream.sources.group import SourceGroup, as_group
from sleap_live.stream.stages import StageThreads, signals_held
from sleap_live.stream.stats import PipelineStats, StageMeters
from sleap_live.stream.tracking.live import PoseTracking, check_model_for_tracking, untracked
from sleap_live.stream.tracking.settings import TrackingSettings
from sleap_live.stream.types import Frame, PoseRecord, TrackLabel

if TYPE_CHECKING:
    from sleap_live.stream.experiment.closed_loop import ClosedLoop
    from sleap_live.stream.experiment.experiment import Experiment

__all__ = ["DEFAULT_BATCH_SIZE", "POLICIES", "RECORDED_BACKGROUND_NICE", "Pipeline", "Policy"]

# Seconds `stop(timeout)` waits, past its timeout, for the stages to finish once no
# consumer holds them back: the outputs' final saves, which write the pose file
# from the journal (a long run's takes longer; on a busy machine a short one has
# taken over a second). A stop that gives up on a save leaves the poses in the
# journal, for `sleap-live recover`.
STOP_GRACE = 5.0

# Records kept in the ring: about 8 s at 30 fps of slack for a lagging consumer.
# A record is small (max_instances x nodes x 3 floats), so this costs little.
DEFAULT_RING_CAPACITY = 256
# Instances a ring record holds for a model without `max_instances` (every instance
# found is kept): far more animals than a frame of an experiment shows. A record
# with more keeps its first ones, counted in `ring.stats`; the pose files keep all.
UNCAPPED_RING_INSTANCES = 64

# Most seconds leaving `with Pipeline(...)` waits for the stages to finish and the
# outputs to be saved. The final .slp write grows with the session (an hour at 30
# fps, 2 animals of 10 nodes: 40 s on a busy 2-core machine), so this leaves it
# room; yet a stage blocked for good (a hung engine or callback) cannot hold the
# experiment's script for ever.
DEFAULT_STOP_TIMEOUT = 120.0


class Pipeline:
    """Runs a pose model on a stream of frames, in threads, with bounded queues.

    Lifecycle: `start()` launches the stages and returns at once; `join()` waits
    for the source to end; `stop()` ends capture early, finishes the frames
    already in the engine and saves the outputs. `run()` is start plus join. As a
    context manager the pipeline starts on enter and stops on exit (waiting at
    most `stop_timeout`), so call `join()` (or iterate) inside the block to
    process a file to its end. A source that delivers no frame for its
    ``read_timeout`` (see `open_source`) ends the stream early with a
    `SourceStalledError`, after every frame it delivered is processed. Errors
    from any stage are raised by `join`/`stop`/`run`/`__exit__` in the caller's
    thread. A pipeline runs once. Consumers of the poses attach before `start`
    (`attach`: the browser preview, the pose publisher, your own), or read the ring
    (`on_poses` callbacks, iteration, `ring.reader()`).

    Args:
        source: an open frame source (see `sleap_live.stream.open_source`): an
            iterable of `Frame` with `source_id`, `fps`, `frame_shape`, `n_frames`
            and `is_live`; or a `SourceGroup` of several, run side by side. The
            pipeline closes it when capture ends.
        model_or_runner: a `Runner`, or one or more model paths, loaded as
            `sleap-live run` loads them (`runner.load_for_source`: an export made on
            demand is verified on the first frames of the source's video). A runner
            passed in stays the caller's to close; one loaded here is closed when
            the pipeline stops.
        batch_size: frames per engine call; default 1 for ``"live"``, 8 for
            ``"recorded"``; with a `SourceGroup`, one frame per source (the only
            size it takes).
        policy: ``"live"`` or ``"recorded"``; default from `source.is_live`.
        ring_capacity: pose records kept in `ring` for consumers and polling.
        outputs: what the run writes besides the ring (`OutputOptions`): the pose
            file every pose record goes to (.slp, .h5, .nwb or .csv, journaled
            every ``save_interval`` seconds and written on stop, see `SlpWriter`),
            the recording of the processed frames and its codec, the overlay
            recording, and provenance entries (the model paths are there already
            when `model_or_runner` is paths; add ``{"models":
            provenance.model_records(paths)}`` with a runner). None: nothing.
        claim: the pose output's journal, claimed before the run (`JournalClaim`,
            as `sleap-live run` claims it before any server binds), which its
            writer takes; None: the writer opens it. The caller releases it
            (nothing once the writer took it).
        load: how model paths are loaded (`LoadOptions`: the engine, device,
            inference settings, ... of `load_runner`; None: its defaults). A runner
            passed in is loaded already: give them to `load_runner` instead.
        warmup: run the engine once on a blank batch before capture starts, so
            one-time initialisation neither delays nor drops the first frames nor
            shows up in the latency statistics.
        clock: the time every timing decision is made on: ready times, engine
            times, the live batcher's deadline, `stats` and the save schedule.
            Give the source the same clock, since latency is ready time minus the
            source's capture timestamp. Injectable for tests.
        stop_timeout: most (real) seconds leaving a ``with`` block, ending an
            interrupted `run` or a `records` loop waits for the stages to finish
            and the outputs to be saved; after it `PipelineError` names the stages
            still running, daemon threads left to finish on their own. A save cut
            short this way goes on while the process lives; if it exits first,
            the .slp's journal holds every frame saved so far (`sleap-live
            recover`). None waits as long as needed.
        tracking: track the animals from frame to frame (`TrackingSettings`,
            sleap-nn's classic tracker and options), host-side in the emit stage:
            each record's `poses.identities` are then track ids (-1: untracked), in
            the ring, callbacks, published messages, preview and every output
            (as ``track_N``). Its time per frame is in `stats`. None: untracked,
            as is a multi-class model, whose identities are its tracks already.
        experiment: a closed-loop experiment run on the tracked poses (an
            `Experiment`, its YAML file, or a `ClosedLoop` with its own options),
            decided in the emit stage as each frame's poses are ready, its devices
            written off the inference thread (see `sleap_live.stream.experiment`):
            its events go to a CSV beside the pose output and into a .slp or .nwb
            output; `pipeline.experiment` is the `ClosedLoop`. On a recorded video
            its devices are simulated unless the `ClosedLoop` says otherwise.

    Raises:
        ValueError: an unknown policy, a batch size below 1 (or, with a
            `SourceGroup`, other than its number of sources), or one whose frames in
            flight would not fit in memory (`check_batch_memory`); a stop
            timeout that is not a positive number of seconds; `load` with a
            runner; `tracking` with a multi-class model.
        ExperimentError: an experiment naming nodes or animals the model lacks
            (a ValueError, one line per mistake).

    Example:
        A closed loop on a camera is in ``scripts/closed_loop_example.py``.
        Offline, every frame in order::

            for record in Pipeline(open_source("clip.mp4"), "models/single"):
                print(record.frame_index, record.poses.points)
    """

    def __init__(
        self,
        source: Source | SourceGroup,
        model_or_runner: ModelOrRunner,
        *,
        batch_size: int | None = None,
        policy: Policy | None = None,
        ring_capacity: int = DEFAULT_RING_CAPACITY,
        outputs: OutputOptions | None = None,
        claim: JournalClaim | None = None,
        load: LoadOptions | None = None,
        warmup: bool = True,
        clock: Clock = MONOTONIC,
        stop_timeout: float | None = DEFAULT_STOP_TIMEOUT,
        tracking: TrackingSettings | None = None,
        experiment: Experiment | ClosedLoop | str | os.PathLike[str] | None = None,
    ) -> None:
        source = as_group(source)
        if source.per_source:
            n_sources = len(source.sources)
            if batch_size is not None and batch_size != n_sources:
                raise ValueError(
                    f"batch_size must be {n_sources} with {n_sources} sources (a batch holds "
                    f"one frame of each), got {batch_size}"
                )
            batch_size = n_sources
        policy, batch_size = choose_policy(policy, source.is_live, batch_size)
        if load is not None and isinstance(model_or_runner, Runner):
            raise ValueError(
                "load options apply to a model the pipeline loads; a runner is loaded "
                "already (give them to load_runner)"
            )
        outputs = outputs if outputs is not None else OutputOptions()
        self._output_options = attrs.evolve(
            outputs,
            provenance=with_models(model_or_runner, outputs.provenance)
            if outputs.output is not None
            else {},
        )
        self._claim = claim
        check_batch_memory(policy, batch_size, source.frame_shape)
        if stop_timeout is not None and (math.isnan(stop_timeout) or stop_timeout <= 0):
            raise ValueError(
                f"stop_timeout must be a positive number of seconds, got {stop_timeout}"
            )
        self.stop_timeout = stop_timeout
        if not isinstance(model_or_runner, Runner):
            check_poseless_run(model_or_runner, tracked=tracking is not None, output=outputs.output)
        self._source = source
        self.policy: Policy = policy
        self.batch_size = batch_size
        self.runner, self._owns_runner = as_runner(
            model_or_runner,
            source,
            **(load or LoadOptions()).arguments(),
        )
        info = self.runner.info
        self._tracking: PoseTracking | None = None
        if tracking is not None:
            try:
                check_model_for_tracking(info)
            except ValueError:
                if self._owns_runner:
                    self.runner.close()
                raise
            self._tracking = PoseTracking(tracking)
        instances = UNCAPPED_RING_INSTANCES if info.max_instances is None else info.max_instances
        # A box detector's boxes per frame: its slots (`ModelInfo.max_instances`); a box
        # top-down model's, one per crop: as many as the instances kept.
        boxes = instances if info.detector_categories else 0
        self.ring = RingBuffer(
            ring_capacity,
            instances,
            info.skeleton.n_nodes,
            max_boxes=boxes,
            masks=info.model_type in MASK_MODEL_TYPES,
            clock=clock,
        )
        self._consumers = Consumers(
            self.ring,
            lossless_by_default=policy == "recorded",
            report=lambda stage, error: self._stages.store_error(stage, error),
            halt=self._request_halt,
            clock=clock,
        )
        self._attached: list[RingConsumer] = []
        self.experiment: ClosedLoop | None = None
        if experiment is not None:
            self.experiment = self._closed_loop(experiment, source, policy, clock)
        # The newest frame, filled by the emit stage for attached consumers that take it.
        self._latest_frame = LatestFrame()
        self._outputs: OpenWriters = OpenWriters({})
        self._warmup = warmup
        self._clock = clock
        self._meters = StageMeters(clock)
        self._engine = EngineStep(self.runner, clock, self._meters)

        self._batches = batches_channel(
            policy, lambda batch: self._meters.batch_dropped(batch.frames)
        )
        # The frames' slots, one per source (see `slots`).
        self._batcher = open_batcher(source, policy, batch_size, clock)
        self._frames = self._batcher.frames
        # A live batch of one frame of one source is the frame itself: the infer
        # stage takes it from the frames' slots, one thread hand-off sooner (about
        # 0.1 ms on a 2-core machine) than through a batcher stage.
        self._batcher_stage = not (policy == "live" and batch_size == 1 and not source.per_source)
        # Each batch's result, with its records and when making them began if the
        # infer stage made them.
        self._results: Channel[tuple[EngineResult, list[PoseRecord] | None, float]] = Channel(
            2, "block"
        )
        self._readers = [self._reader_of(member) for member in source.sources]

        self._halt = threading.Event()
        # Set once the engine is warmed up (or the pipeline halts); capture waits for it.
        self._engine_ready = threading.Event()
        self._lock = threading.Lock()
        self._pending_callbacks: list[tuple[str, Callable[[], None]]] = []
        self._stages = StageThreads(
            before=lambda stage: apply_stage_priority(policy, stage),
            on_failure=self._on_stage_failure,
        )
        self._started = False
        self._finished = False

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
            # Attached consumers set up first (their ring readers begin at the first
            # record); one that fails to leaves nothing open.
            run = PipelineRun(
                self.ring,
                self.runner.info,
                self._latest_frame,
                lambda: self.stats,
                None if self.experiment is None else self.experiment.experiment,
            )
            consumers = [(consumer.name, consumer.start(run)) for consumer in self._attached]
            settings: dict[str, Any] = {"policy": self.policy, "batch_size": self.batch_size}
            if self._tracking is not None:
                settings["tracking"] = attrs.asdict(self._tracking.settings)
            if self.experiment is not None:
                self.experiment.open()
            try:
                self._outputs = open_outputs(
                    self._output_options,
                    self._source,
                    self.runner,
                    settings=settings,
                    clock=self._clock,
                    tracked=self._tracking is not None,
                    claim=self._claim,
                    experiment=None if self.experiment is None else self.experiment.experiment,
                )
            except BaseException:
                if self.experiment is not None:
                    self.experiment.close()  # its devices' threads and its log
                raise
            self._started = True
            self._meters.start()
            # A Ctrl-C while the stages start lands once all of them run (as
            # KeyboardInterrupt from here), so `stop` has a whole pipeline to save.
            with signals_held():
                for name, body in consumers:
                    self._stages.spawn(name, body)
                for name, loop in self._outputs.loops.items():
                    self._stages.spawn(f"{name} writer", loop)
                self._stages.spawn("emit", self._emit)
                self._stages.spawn("infer", self._infer)
                if self._batcher_stage:
                    self._stages.spawn("batcher", self._batch)
                self._stages.spawn("capture", self._capture)
                for stage, body in self._pending_callbacks:
                    self._stages.spawn(stage, body)
                self._pending_callbacks.clear()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop capturing, finish the frames already in the engine, flush outputs.

        Frames captured but not yet handed to the engine are discarded; every
        pose already computed is emitted and saved. Idempotent.

        Callbacks are not waited for once they have spent their stall timeout on
        one record (see `on_poses`). Past `timeout`, lossless consumers no longer
        hold the pipeline back, the stages get `STOP_GRACE` more seconds to save,
        and callbacks still running are abandoned (daemon threads), with a warning.

        Args:
            timeout: most (real) seconds to wait for the stages; None waits as long
                as needed.

        Raises:
            PipelineError: a stage failed (chained to the cause), or the stages did
                not finish within `timeout` plus `STOP_GRACE`.
            StreamError, EngineError: a source or engine failed; re-raised as is.
        """
        self._request_halt()
        if not self._wait(timeout, stopping=True):
            stuck = ", ".join(self._stages.running)
            raise PipelineError(
                f"pipeline did not stop within {timeout} s (still running: {stuck})"
            )

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the pipeline to finish (source exhausted, or stopped).

        Args:
            timeout: most (real) seconds to wait; None waits as long as needed.

        Returns:
            True when every stage has finished, False if `timeout` passed first.

        Raises:
            PipelineError: a stage failed; the original exception is its `__cause__`.
            StreamError, EngineError: a source or engine failed; re-raised as is.
                A stored error is raised once, by the first call that sees it.
        """
        return self._wait(timeout, stopping=False)

    def run(self) -> PipelineStats:
        """Process the source to its end (or until Ctrl-C), then return final stats.

        Raises:
            KeyboardInterrupt: after stopping cleanly and saving the outputs.
            PipelineError, StreamError, EngineError: as `join`.
        """
        try:
            self.start()
            self.join()
        except KeyboardInterrupt:
            self.stop(self.stop_timeout)
            raise
        return self.stats

    def __enter__(self) -> Pipeline:
        try:
            return self.start()
        except KeyboardInterrupt:
            # Started, but the block never runs, so `__exit__` would not stop it.
            self.stop(self.stop_timeout)
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop(self.stop_timeout)

    # ----------------------------------------------------------------- consumers

    def on_poses(
        self,
        callback: Callable[[PoseRecord], object],
        *,
        on_skip: Callable[[int], object] | None = None,
        lossless: bool | None = None,
        on_error: OnError = "detach",
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        """Call `callback(record)` for every pose record, in a thread of its own.

        The callback gets records in order. Under the ``"live"`` policy a slow
        callback never delays inference: it reads the ring at its own pace, and
        when it falls more than `ring_capacity` records behind it resumes at the
        oldest record still there, after `on_skip(n)` tells it how many it missed.
        Under ``"recorded"`` it sees every record (registered after `start`, every
        record still in the ring onwards), and a slow callback slows the pipeline
        instead, for at most `stall_timeout` seconds per record.

        A fault in the callback costs no poses. An exception from `callback` or
        `on_skip` is logged at once with its traceback (logger
        ``sleap_live.stream.consumers``) and, by default, only that callback is
        detached: inference, the other consumers and the outputs go on to the
        end. `stats.consumers` shows its error. Leaving the pipeline
        (`join`/`stop`/`run`/`__exit__`) then raises the first callback error
        as a `PipelineError` whose `__cause__` is the callback's exception. A
        callback that never returns is not waited for: once it has spent
        `stall_timeout` on one record, a lossless one stops holding the pipeline
        back (a warning says so), and `stop`/`join` leave its daemon thread
        running without it, as `stop(timeout)` does with any callback still
        running at its timeout.

        Args:
            callback: called with each `PoseRecord` (a copy it may keep).
            on_skip: called with the number of records skipped, before the first
                record after the gap.
            lossless: override the policy's choice (True: never skip, apply
                backpressure; False: skip when behind).
            on_error: ``"detach"``: a callback that raises gets no more records;
                ``"stop"``: it also stops the pipeline, as `stop()` does (every
                frame already in the engine is saved).
            stall_timeout: seconds (on the pipeline's clock) the callback may
                spend on one record before it counts as stalled; None: never.

        Raises:
            ValueError: an unknown `on_error`, or a `stall_timeout` that is not
                None or a positive, finite number.
        """
        stage, body = self._consumers.callback(callback, on_skip, lossless, on_error, stall_timeout)
        with self._lock:
            if self._started:
                self._stages.spawn(stage, body)
            else:
                self._pending_callbacks.append((stage, body))

    def attach(self, consumer: RingConsumer) -> None:
        """Run `consumer` in a stage thread of its own from `start` to the end of the run.

        How the preview (`PreviewServer`) and the pose publisher (`Publisher`) join a
        run, and how a consumer of your own does: it gets the ring, the model, the
        newest frame and the stats (`PipelineRun`) when the pipeline starts, makes
        its own ring reader (lagging ones never hold up the pipeline) and reads
        until the ring is closed; its `report` adds its figures to `stats`. An
        exception from its thread stops the pipeline and is raised when it is left.

        Raises:
            PipelineError: the pipeline has started (the consumer would miss records).
            ValueError: another attached consumer has its name.
        """
        with self._lock:
            if self._started:
                raise PipelineError(f"attach {consumer.name!r} before the pipeline starts")
            if any(attached.name == consumer.name for attached in self._attached):
                raise ValueError(f"a consumer named {consumer.name!r} is attached already")
            self._attached.append(consumer)

    def records(self) -> Iterator[PoseRecord]:
        """Yield every pose record in order, in the caller's thread.

        If the pipeline has not been started, iterating starts it and stops it
        when the loop ends (or is broken out of). Under ``"recorded"`` the
        pipeline waits for a slow loop (up to `DEFAULT_STALL_TIMEOUT` seconds per
        record; after that, a warning, and the loop skips records when behind
        instead of holding the pipeline), and a loop that begins after `start` (for
        example right inside `with`) begins at the oldest record still in the
        ring, so it misses nothing unless more than `ring_capacity` records came
        before it. Under ``"live"`` it begins with the next record and skips
        records when it falls behind. Skips are counted in `stats.consumers`.
        """
        owns_run = not self._started
        consumer = self._consumers.attach("iterator", None, thread=threading.get_ident())
        if owns_run:
            self.start()
        try:
            while (record := consumer.take()) is not None:
                yield record
        finally:
            consumer.reader.detach()
            if owns_run:
                self.stop(self.stop_timeout)

    def __iter__(self) -> Iterator[PoseRecord]:
        return self.records()

    @property
    def outputs(self) -> OpenWriters:
        """The open writers (none before `start`); `outputs.describe()` says what each holds."""
        return self._outputs

    @property
    def stats(self) -> PipelineStats:
        """A consistent-enough snapshot of counters, rates and queue depths."""
        depths = {"frames": self._frames.stats().depth, "batches": self._batches.stats().depth}
        depths["results"] = self._results.stats().depth
        depths.update(self._outputs.depths())
        stats = self._meters.snapshot(
            policy=self.policy,
            batch_size=self.batch_size,
            running=bool(self._stages.running),
            frames_total=None if self.policy == "live" else self._source.n_frames,
            frames_dropped=self._dropped_before_batching(),
            queue_depths=depths,
            consumers=self._consumers.stats(),
        )
        for consumer in self._attached if self._started else ():
            stats = consumer.report(stats)
        return stats

    @property
    def timeline(self) -> list[StageTimes]:
        """Stage times of the first `stats.TIMELINE_BATCHES` batches emitted, in order."""
        return self._meters.timeline()

    def _dropped_before_batching(self) -> dict[str, int]:
        """Frames dropped before the batcher took them, by source: replaced in the
        frames' slots, or skipped by the source (a replay falling behind)."""
        dropped = self._batcher.dropped_by_source()
        for member in self._source.sources:
            dropped[member.source_id] += member.skipped
        return dropped

    # --------------------------------------------------------------------- stages

    def _closed_loop(
        self,
        experiment: Experiment | ClosedLoop | str | os.PathLike[str],
        source: SourceGroup,
        policy: Policy,
        clock: Clock,
    ) -> ClosedLoop:
        """The experiment, checked against the model and bound to the run."""
        from sleap_live.stream.experiment.closed_loop import ClosedLoop
        from sleap_live.stream.experiment.experiment import Experiment

        if source.per_source:
            raise ValueError("an experiment runs on one source, not a group of several")
        loop = (
            experiment
            if isinstance(experiment, ClosedLoop)
            else ClosedLoop(experiment if isinstance(experiment, Experiment) else Path(experiment))
        )
        try:
            loop.bind(
                self.runner.info,
                fps=source.fps,
                recorded_video=source.n_frames is not None and bool(source.fps),
                lossless=policy == "recorded",
                tracked=self._tracking is not None,
                clock=clock,
                output=self._output_options.output,
            )
        except ValueError:
            if self._owns_runner:
                self.runner.close()
            raise
        return loop

    def _reader_of(self, source: Source) -> SourceReader:
        name = "sleap-live capture reader"
        return SourceReader(
            source,
            self._frames,
            self._clock,
            name=name + f" {source.source_id}" if self._source.per_source else name,
            on_frame=self._meters.frame_captured,
            on_end=functools.partial(self._batcher.end, source.source_id),
        )

    def _capture(self) -> None:
        self._engine_ready.wait()
        try:
            if self._halt.is_set():
                return
            for reader in self._readers:
                reader.start()
            watch_all(self._readers)
        except Exception as exc:
            # A failing or stalled source is an early end of stream: the frames it
            # did deliver are still processed and saved before the error is raised.
            self._stages.store_error("capture", exc)
        finally:
            for reader in self._readers:
                reader.close()
            self._frames.close()
            self._source.close()
            for reader in self._readers:
                reader.report_blocked()

    def _batch(self) -> None:
        try:
            for first in self._frames:
                if self._halt.is_set():
                    self._meters.discarded([first])
                    break
                batch = self._batcher.batch(first)
                try:
                    self._batches.put(batch)
                except ChannelClosed:  # halted while waiting for room
                    self._meters.discarded(batch.frames)
                    break
        finally:
            self._batches.close()
            if self._halt.is_set():  # the frames channel is closed: this ends
                self._meters.discarded(list(self._frames))

    def _batched_here(self) -> Iterator[Batch]:
        """Each frame as a batch of one, for the infer stage that batches its own."""
        for first in self._frames:
            yield self._batcher.batch(first)

    def _infer(self) -> None:
        # A run with an experiment makes its records here, as each batch leaves the
        # engine: the device's bytes then wait for no thread hand-off after the
        # engine (about 0.1 ms each on a 2-core machine). Other runs make them in
        # the emit stage, where tracking overlaps the engine's next batch.
        experiment = self.experiment
        try:
            if self._warmup:
                self._engine.warm_up(self.batch_size, self._source.frame_shape)
            self._engine_ready.set()
            batches = self._batches if self._batcher_stage else self._batched_here()
            for batch in batches:
                if self._halt.is_set():
                    self._meters.discarded(batch.frames)
                    break
                result = self._engine.run(batch)
                if experiment is None:
                    self._results.put((result, None, 0.0))
                else:
                    started = self._clock()
                    self._results.put((result, self._records(result), started))
        except ChannelClosed:
            pass  # the emit stage failed; its error is already stored
        finally:
            self._results.close()
            if self._halt.is_set():  # the channels are closed: these end
                self._meters.discarded(_frames_of(self._batches))
                if not self._batcher_stage:
                    self._meters.discarded(list(self._frames))
            # The engine's last use. A runner loaded here is closed by this stage, not
            # by the caller's thread, so the stop timeout bounds a clean-up that blocks.
            try:
                self._close_runner()
            finally:
                if experiment is not None:
                    experiment.close()  # after its last decision, made above

    def _emit(self) -> None:
        # Frames are copied to the host only for outputs that take them, and handed
        # to attached consumers only when one takes them.
        frames_on_host = self._outputs.takes_frames
        latest_frame = self._latest_frame if any(c.takes_frames for c in self._attached) else None
        try:
            for result, made, started in self._results:
                if made is None:
                    started, made = self._clock(), self._records(result)
                for position, record in enumerate(made):
                    sequence = self.ring.write(record)  # waits for lossless consumers
                    self._meters.record_emitted(record)
                    image = result.batch.image(position, on_host=frames_on_host)
                    self._outputs.write(record, image)
                    if latest_frame is not None:
                        latest_frame.put(sequence, image)
                result.batch.times.postprocess = (started, self._clock())
                self._meters.batch_emitted(result.batch.times)
        except BaseException:
            self._results.close()
            raise
        finally:
            self._meters.stop()
            self.ring.close()
            self._outputs.close()

    def _records(self, result: EngineResult) -> list[PoseRecord]:
        """Each frame's record: its poses tracked, stamped ready, and decided by the
        experiment (whose rules see tracked poses)."""
        records = []
        for frame, poses in zip(result.batch.frames, result.poses, strict=True):
            late_labels: tuple[TrackLabel, ...] = ()
            if self._tracking is not None:
                tracking_started = self._clock()
                tracked = self._tracking.track(poses, frame.source_id, frame.index)
                poses, late_labels = tracked.poses, tracked.late_labels
                self._meters.frame_tracked(
                    self._clock() - tracking_started, self._tracking.n_tracks
                )
            record = PoseRecord(
                frame_index=frame.index,
                capture_time=frame.timestamp,
                ready_time=self._clock(),
                source_id=frame.source_id,
                poses=poses,
                late_labels=late_labels,
            )
            if self.experiment is not None:
                self.experiment.decide(record)
                # The rules' states go with the poses: the overlay recording and the
                # preview draw them.
                record = attrs.evolve(record, rules_on=self.experiment.on)
            records.append(record)
        return records

    # -------------------------------------------------------------------- helpers

    def _wait(self, timeout: float | None, *, stopping: bool) -> bool:
        """`join`; when `stopping`, consumers still holding the pipeline at `timeout`
        are let go (lossless readers detached, callbacks abandoned)."""
        # A thread waiting here is not iterating: its iterators must not block emit.
        self._consumers.release_thread(threading.get_ident())
        deadline = None if timeout is None else time.monotonic() + timeout
        callbacks = self._consumers.stages()
        if not self._stages.wait(timeout, but=callbacks):
            if not stopping:
                return False
            # Past the timeout, emit stops waiting for slow lossless consumers and
            # gets a moment to hand the last records to the writers.
            self.ring.stop_waiting()
            if not self._stages.wait(STOP_GRACE, but=callbacks):
                return False
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        running = self._stages.running
        self._stages.abandon(
            self._consumers.drain(left, give_up_at_timeout=stopping, running=running)
        )
        # A callback that has returned leaves its stage a moment later.
        if not self._stages.wait(None if left is None else max(left, 0.1)):
            return False
        self._finish()
        self._stages.raise_error()
        return True

    def _on_stage_failure(self) -> None:
        self._request_halt()
        # After a failure nothing may hold up the emit stage, or stop() could hang.
        self.ring.stop_waiting()

    def _request_halt(self) -> None:
        self._halt.set()
        self._engine_ready.set()
        # Closing the reader ends the capture stage at once, which closes the source
        # (ending a read in progress where the source allows) in its own thread:
        # the caller's thread never runs a source's clean-up, which may block.
        # Closing the channels wakes a reader waiting for room and lets the batcher
        # and infer stages drain what is left without taking new work.
        for reader in self._readers:
            reader.close()
        if not self._started:
            self._source.close()  # no capture stage will
        self._frames.close()
        self._batches.close()

    def _finish(self) -> None:
        with self._lock:
            # join() before start() has nothing to finish; stop() before start() does.
            if self._finished or not (self._started or self._halt.is_set()):
                return
            self._finished = True
        if not self._started:
            self._close_runner()  # no infer stage ran to close it
        if self.experiment is not None:
            self.experiment.finish()  # its events into the .slp, now saved

    def _close_runner(self) -> None:
        if self._owns_runner:
            self._owns_runner = False
            self.runner.close()


def _frames_of(batches: Channel[Batch]) -> list[Frame]:
    """Every frame of the batches left in a closed channel (draining it)."""
    return [frame for batch in batches for frame in batch.frames]


def check_poseless_run(models: ModelPaths, *, tracked: bool, output: Path | None) -> None:
    """Raises `ValueError` for what a model that finds no poses (a box detector alone, a
    segmentation model) does not do (tracking, an output other than .slp), told from its
    config or metadata before it loads (`poseless_kind`); other models pass. The model
    is read only when the run asks for one of these, so a run that asks for neither
    pays nothing."""
    if not tracked and (output is None or output.suffix.lower() == ".slp"):
        return
    paths = [models] if isinstance(models, str | os.PathLike) else list(models)
    kind = poseless_kind(paths)
    if kind is None:
        return
    if tracked:
        raise ValueError(untracked(kind))
    check_poseless_output(output, kind)
