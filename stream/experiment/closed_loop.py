"""An experiment run on a pipeline's poses: `ClosedLoop`.

`Pipeline(..., experiment=...)` runs one in its emit stage: each record is decided
(`decide`: the rules evaluated by `CompiledRules`, their timing stepped by
`Timeline`) as soon as its poses are ready, before they go to the ring, with no
hand-off to another thread on the way from the poses to the bytes. Each onset and
offset goes to the devices (`DeviceWorker`): written at once where that cannot wait
(an idle serial port, a datagram socket), else through a queue to the device's
thread, so a slow device never delays the poses. The bytes go first; the event
log's rows follow. More experiments can join a run as attached consumers
(`pipeline.attach(ClosedLoop(...))` after `bind`), each deciding in a thread of its
own from its ring reader: every record under the ``"recorded"`` policy, at its own
pace (counting what it skipped) under ``"live"``.

On a recorded video the devices are simulated unless asked for (`simulate`), so
an experiment file can be tuned on a recording first; Python callbacks always run.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

import attrs

from sleap_live.engines.types import ModelInfo
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.consumers import PipelineRun
from sleap_live.stream.experiment.devices import (
    DeviceStats,
    DeviceWorker,
    OutputMessage,
    SimulatedLink,
    link_for,
)
from sleap_live.stream.experiment.events import (
    EventEntry,
    EventLog,
    write_nwb_events,
    write_slp_events,
)
from sleap_live.stream.experiment.experiment import (
    CallbackDevice,
    Condition,
    Distance,
    Experiment,
    check_experiment,
    leaves,
    load_experiment,
)
from sleap_live.stream.experiment.predict import ForwardPredictor, PredictionError
from sleap_live.stream.experiment.rules import CompiledRules
from sleap_live.stream.experiment.timing import Timeline, Transition
from sleap_live.stream.ring import RingReader
from sleap_live.stream.stats import PipelineStats
from sleap_live.stream.types import PoseRecord

logger = logging.getLogger(__name__)

# Real seconds between two looks at whether the ring was closed.
_POLL = 0.5


@attrs.frozen
class ClosedLoopStats:
    """What an experiment did in a run.

    Attributes:
        frames: frames decided on.
        skipped: frames never decided on (a live run's decisions falling behind).
        events: onsets and offsets.
        simulated: whether the devices were simulated.
        devices: each device's counts.
        prediction: the forward prediction's error (`Experiment.predict`), else None.
    """

    frames: int
    skipped: int
    events: int
    simulated: bool
    devices: tuple[DeviceStats, ...]
    prediction: PredictionError | None = None


def events_csv_path(output: Path) -> Path:
    """The event log's CSV beside a pose output: ``poses.slp`` -> ``poses.events.csv``."""
    return output.with_name(output.stem + ".events.csv")


class ClosedLoop:
    """An experiment attached to a pipeline (a `RingConsumer`).

    Args:
        experiment: the experiment, or its YAML file.
        simulate: simulate the devices (no port opened, nothing sent: each message
            is noted as sent when decided); None: simulated on a recorded video,
            real on a camera, a stream or a replay.
        events_csv: the event log's CSV; None: beside the pose output
            (`events_csv_path`), or none without one.
        overwrite: replace an existing CSV.
        name: its stage's name (unique among a pipeline's attached consumers).

    Attributes:
        log: the event log (complete once the run has ended).
    """

    takes_frames = False

    def __init__(
        self,
        experiment: Experiment | str | Path,
        *,
        simulate: bool | None = None,
        events_csv: Path | None = None,
        overwrite: bool = False,
        name: str = "experiment",
    ) -> None:
        self.name = name
        self._source = "experiment" if isinstance(experiment, Experiment) else str(experiment)
        self.experiment = (
            experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
        )
        self._simulate = simulate
        self._events_csv = events_csv
        self._overwrite = overwrite
        self._output: Path | None = None
        self._fps: float | None = None
        self._source_fps: float | None = None
        self._clock: Clock = MONOTONIC
        self._lossless = False
        self._bound = False
        self.log = EventLog()
        self._workers: dict[str, DeviceWorker] = {}
        self._reader: RingReader | None = None
        self._frames = 0
        self._simulated = False
        self._first_capture: float | None = None
        self._last: PoseRecord | None = None
        self._finished = False

    def bind(
        self,
        info: ModelInfo,
        *,
        fps: float | None,
        recorded_video: bool,
        lossless: bool,
        tracked: bool,
        clock: Clock = MONOTONIC,
        output: Path | None = None,
    ) -> None:
        """Check the experiment against the run's model and take the run's settings
        (`Pipeline` calls this when given ``experiment=``).

        Args:
            fps: the source's frame rate (video time is frame index over it).
            recorded_video: the source is a file or a replay of one (fps and frame
                count known): ``time: auto`` is video time, and (unless `simulate`
                was given) a file run straight through simulates the devices.
            lossless: decide on every frame (the ``"recorded"`` policy).
            tracked: the run tracks its animals.
            clock: the pipeline's clock.
            output: the pose output (the CSV goes beside it, events into a .slp).

        Raises:
            ExperimentError: a node or animal the model does not have, one line each.
        """
        check_experiment(self.experiment, info, tracked=tracked, source=self._source)
        self._info = info
        self._source_fps = fps
        time = self.experiment.time
        self._fps = fps if time == "video" or (time == "auto" and recorded_video) else None
        if time == "video" and not fps:
            raise ValueError(f"{self._source}: time: video needs a source with a frame rate")
        self._lossless = lossless
        self._simulated = lossless if self._simulate is None else self._simulate
        self._clock = clock
        self._output = output
        if self._events_csv is None and output is not None:
            self._events_csv = events_csv_path(output)
        self._bound = True

    def open(self) -> None:
        """Open the log and start the devices' threads (the pipeline's start)."""
        self.log = EventLog(self._events_csv, overwrite=self._overwrite)
        self._rules = CompiledRules(self.experiment, self._info)
        # Per rule, the animal it names.
        self._subjects = [_subject(rule.when) for rule in self.experiment.rules]
        self._timeline = Timeline(self.experiment)
        self._predictor = ForwardPredictor() if self.experiment.predict else None
        for name, device in self.experiment.devices.items():
            real = not self._simulated or isinstance(device, CallbackDevice)
            link = link_for(device) if real else SimulatedLink()
            # Each message sent (or not) by `name`'s thread: its log row.
            on_sent = functools.partial(self.log.sent, name)
            self._workers[name] = DeviceWorker(name, link, on_sent, self._clock)
        for worker in self._workers.values():
            worker.start()
        # Per rule, its (device's worker, text) sends at an onset and at an offset (an
        # empty text sends nothing: an onset-only pulse, say).
        self._sends = [
            {
                kind: [
                    (self._workers[o.device], text)
                    for o in rule.outputs
                    if (text := o.onset if kind == "onset" else o.offset) != ""
                ]
                for kind in ("onset", "offset")
            }
            for rule in self.experiment.rules
        ]

    def close(self) -> None:
        """Send the offsets of the rules still on, send what the devices have queued,
        close them and the log (the end of the run's records)."""
        try:
            for transition in self._timeline.finish():
                self._dispatch(transition, None, self._clock())
        finally:
            for worker in self._workers.values():
                worker.close()
            self.log.close()

    def start(self, run: PipelineRun) -> Callable[[], None]:
        """As an attached consumer: `open`, and the deciding thread's body, which
        decides each record its ring reader gives."""
        if not self._bound:
            self.bind(run.info, fps=None, recorded_video=False, lossless=False, tracked=True)
        self.open()
        # The default stall timeout: deciding never waits on a device, so it keeps
        # up; should it stall, the pipeline stops waiting for it as for any lossless
        # consumer.
        self._reader = run.ring.reader(
            from_oldest=self._lossless, lossless=self._lossless, name=self.name
        )
        return self._run

    @property
    def on(self) -> tuple[bool, ...]:
        """Whether each rule is on now (after the last `decide`), in the file's order."""
        return tuple(self._timeline.on)

    def report(self, stats: PipelineStats) -> PipelineStats:
        """The pipeline's stats as they are (the experiment's are `stats()`)."""
        return stats

    def stats(self) -> ClosedLoopStats:
        return ClosedLoopStats(
            frames=self._frames,
            skipped=0 if self._reader is None else self._reader.missed,
            events=len(self.log.entries),
            simulated=self._simulated,
            devices=tuple(worker.stats() for worker in self._workers.values()),
            prediction=None if self._predictor is None else self._predictor.error(),
        )

    def finish(self) -> None:
        """Write the events into a .slp or .nwb pose output (after the pipeline saved
        it); idempotent. A failure is a warning: the CSV holds the log."""
        if self._finished or self._output is None or self._output.suffix not in (".slp", ".nwb"):
            return
        self._finished = True
        if not self._output.exists() or not self.log.entries:
            return
        try:
            if self._output.suffix == ".slp":
                write_slp_events(self._output, self.log.entries)
            else:
                write_nwb_events(self._output, self.log.entries, self._source_fps)
        except Exception as error:
            logger.warning(
                "%s: the experiment's events could not be added (%s); they are in %s",
                self._output,
                error,
                self._events_csv,
            )

    def _run(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                record = reader.wait_next(_POLL)
                if record is None:
                    if reader.done:
                        break
                    continue
                self.decide(record)
        finally:
            self.close()

    def decide(self, record: PoseRecord) -> list[Transition]:
        """Evaluate one record and send its transitions (in the emit stage, or an
        attached consumer's thread)."""
        time = self._time_of(record)
        poses = record.poses
        if self._predictor is not None:
            # To the moment of the decision: the capture-to-now latency measured on
            # this record (the device's own sub-millisecond delay is not added).
            self._predictor.update(poses, time)
            poses = self._predictor.predict(poses, time + self._clock() - record.capture_time)
        values = self._rules.evaluate(poses, time)
        transitions = self._timeline.step(values, record.frame_index, time)
        self._frames += 1
        if transitions:
            decided = self._clock()
            for transition in transitions:
                self._dispatch(transition, record, decided)
        self._last = record
        return transitions

    def _time_of(self, record: PoseRecord) -> float:
        if self._fps:
            return record.frame_index / self._fps
        if self._first_capture is None:
            self._first_capture = record.capture_time
        return record.capture_time - self._first_capture

    def _dispatch(self, transition: Transition, record: PoseRecord | None, decided: float) -> None:
        source = record if record is not None else self._last
        assert source is not None  # a transition comes after a record
        number = len(self.log.entries)  # only this thread adds entries
        # The `Decision`'s fields, which each message and the log's entry start with.
        decision = (
            self.experiment.rules[transition.rule].name,
            transition.kind,
            transition.frame_index,
            transition.trial,
            source.capture_time,
            source.ready_time,
            decided,
        )
        # The bytes first, where they can go now; the log's rows after.
        sends = [
            (worker, message, worker.send_now(message))
            for worker, payload in self._sends[transition.rule][transition.kind]
            for message in (OutputMessage(*decision, payload, number),)
        ]
        subject = self._subjects[transition.rule]
        self.log.add(EventEntry(*decision, number, subject, transition.at_end), len(sends))
        for worker, message, time in sends:
            if time is None:
                worker.submit(message)
            else:
                self.log.sent(worker.name, message, time, None)


def _subject(condition: Condition) -> str | None:
    """The one animal a condition names throughout, if it names exactly one."""
    names: set[str | None] = set()
    for leaf in leaves(condition):
        names.add(leaf.start.animal if isinstance(leaf, Distance) else leaf.animal)
    names.discard(None)
    return names.pop() if len(names) == 1 else None
