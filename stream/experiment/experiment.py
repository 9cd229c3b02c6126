"""An experiment a lab declares: regions, conditions on poses, rules with their timing,
trials and the devices each rule drives, as attrs records, read from a YAML file or
built in Python, and checked against a model's skeleton.

The file's layout (docs/closed-loop.md shows it whole)::

    regions:                      # named shapes in frame pixels (x right, y down)
      zone: {rectangle: [x0, y0, x1, y1]}
      nest: {ellipse: {center: [x, y], radii: [rx, ry], angle: 0}}
      corner: {polygon: [[x, y], [x, y], [x, y]]}
    devices:                      # where onsets and offsets are sent
      laser: {serial: {port: /dev/ttyACM0, baudrate: 115200}}
      bonsai: {osc: {host: 127.0.0.1, port: 9000}}
    trials: {start: 0, duration: 10, interval: 5, count: 6}
    rules:
      laser_in_zone:
        when: {in_region: {region: zone, node: nose}}
        hold: 0.1                 # seconds the condition must hold before the onset
        refractory: 1.0           # seconds after an offset before the next onset
        max_triggers: 3           # onsets per trial (per run without trials)
        outputs: [{device: laser, onset: "1\\n", offset: "0\\n"}]

Every mistake found is one line naming where it is (`ExperimentError.problems`);
`load_experiment` reports the file's shape, `check_experiment` its names against a
model (nodes, animals).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import yaml

from sleap_live.engines.types import ModelInfo, Skeleton

# An animal named like this is a tracker's track (`--tracking`); the pose files name
# tracks the same way.
TRACK_NAME = re.compile(r"^track_(\d+)$")
Missing = Literal["off", "keep"]
TimeBase = Literal["auto", "video", "capture"]
T = TypeVar("T")


class ExperimentError(ValueError):
    """An experiment file or record with mistakes, one line each.

    Attributes:
        source: the file (or "experiment" for one built in Python).
        problems: one line per mistake, each naming where it is.
    """

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(f"{source}: {problem}" for problem in self.problems))


# ------------------------------------------------------------------------- regions


@attrs.frozen
class Rectangle:
    """The axis-aligned rectangle x0 <= x <= x1, y0 <= y <= y1 (frame pixels)."""

    x0: float
    y0: float
    x1: float
    y1: float


@attrs.frozen
class Ellipse:
    """An ellipse: centre, semi-axes along its own axes, rotated by `angle` degrees
    (counter-clockwise on screen, from x towards -y)."""

    cx: float
    cy: float
    rx: float
    ry: float
    angle: float = 0.0


@attrs.frozen
class Polygon:
    """A simple polygon: its vertices in order (closed back to the first)."""

    vertices: tuple[tuple[float, float], ...]


Region = Rectangle | Ellipse | Polygon


# ---------------------------------------------------------------------- conditions


@attrs.frozen
class NodeOf:
    """A body part of an animal.

    Attributes:
        node: the skeleton's node name.
        animal: None: any animal; a name: the animal of that identity (a multi-class
            model's class) or track (``track_N``, with tracking). In the ``to`` end of
            a `Distance`, also ``"same"`` (the ``from`` animal) or ``"other"`` (any
            other animal).
    """

    node: str
    animal: str | None = None


@attrs.frozen
class InRegion:
    """True while `node` of the animal is inside `region` (entering is the onset,
    leaving the offset)."""

    region: str
    node: str
    animal: str | None = None


@attrs.frozen
class Distance:
    """True while the distance (px) from `start` to `end` is within [above, below].

    Between nodes of one animal (``end.animal`` ``"same"``, the default) or of two
    (``"other"`` or a name): animal 2's nose near animal 1's tail.
    """

    start: NodeOf
    end: NodeOf
    below: float = math.inf
    above: float = -math.inf


@attrs.frozen
class Angle:
    """True while the angle (degrees, 0 to 180) between the direction `start` -> `end`
    (the head direction, e.g. head -> nose) and a second direction is within
    [above, below].

    The second direction is from `start` to `point` (head direction to a point), or,
    egocentric, along `reference` (two nodes, e.g. tail_base -> body: the head
    relative to the body's axis). Exactly one of them is given.
    """

    start: str
    end: str
    point: tuple[float, float] | None = None
    reference: tuple[str, str] | None = None
    below: float = 180.0
    above: float = 0.0
    animal: str | None = None


@attrs.frozen
class Speed:
    """True while `node` moves at a speed (px/s, from the previous frame of the same
    animal) within [above, below]."""

    node: str
    below: float = math.inf
    above: float = -math.inf
    animal: str | None = None


@attrs.frozen
class Posture:
    """True while the animal's pose matches `template` (node -> xy, in any frame of
    reference) within `tolerance`: the root-mean-square distance (px) of those nodes
    after the best translation and rotation."""

    template: tuple[tuple[str, tuple[float, float]], ...]
    tolerance: float
    animal: str | None = None


@attrs.frozen
class All:
    """True while every condition is."""

    conditions: tuple[Condition, ...]


@attrs.frozen
class AnyOf:
    """True while any condition is."""

    conditions: tuple[Condition, ...]


@attrs.frozen
class Not:
    """True while the condition is false."""

    condition: Condition


Condition = InRegion | Distance | Angle | Speed | Posture | All | AnyOf | Not
Leaf = InRegion | Distance | Angle | Speed | Posture


# -------------------------------------------------------------------------- devices


@attrs.frozen
class SerialDevice:
    """A serial port (pyserial): an Arduino or Teensy switching a TTL line.

    `write_timeout` bounds one write: a device that stops reading is reported
    (once) instead of holding its thread for ever.
    """

    port: str
    baudrate: int = 115200
    write_timeout: float = 0.5


@attrs.frozen
class OscDevice:
    """OSC messages over UDP (python-osc), as Bonsai's Osc package reads them."""

    host: str
    port: int


@attrs.frozen
class GpioDevice:
    """A Raspberry Pi GPIO pin (gpiozero's `DigitalOutputDevice`): driven high (active)
    at each onset and low at each offset. `pin` is as gpiozero names pins: 17,
    ``"GPIO17"``, ``"BOARD11"``."""

    pin: str | int
    active_high: bool = True


@attrs.frozen
class NidaqDevice:
    """National Instruments digital output lines (nidaqmx, with NI-DAQmx's driver): high
    at each onset, low at each offset. `lines` as NI-DAQmx names them:
    ``"Dev1/port0/line0"`` or ``"Dev1/port0/line0:3"`` (all driven alike)."""

    lines: str


@attrs.frozen
class ZmqDevice:
    """The ZeroMQ pose publisher's socket (`Publisher`): each onset and offset as a
    message on the topic ``experiment/<rule>``."""

    endpoint: str


@attrs.frozen
class CallbackDevice:
    """A Python function called with each `OutputMessage` (built in Python only)."""

    function: Callable[[Any], object] = attrs.field(eq=False)


Device = SerialDevice | OscDevice | GpioDevice | NidaqDevice | ZmqDevice | CallbackDevice


@attrs.frozen
class Output:
    """What a rule sends to one device at its onset and its offset.

    For a serial device: text written as UTF-8 (default ``"<rule> 1\\n"`` and
    ``"<rule> 0\\n"``); for OSC: the address, with the argument 1 or 0 (default
    ``/<rule>``); ZeroMQ and callbacks get the event itself. None: the default; an
    empty text: nothing is sent then.
    """

    device: str
    onset: str | None = None
    offset: str | None = None


# -------------------------------------------------------------------- rules, trials


@attrs.frozen
class Trials:
    """Trial k (from 0) runs from ``start + k * (duration + interval)`` for `duration`
    seconds; rules fire only inside a trial, and a rule still on at a trial's end
    goes off then."""

    start: float = 0.0
    duration: float = math.inf
    interval: float = 0.0
    count: int | None = None


@attrs.frozen
class Rule:
    """A condition with its timing and outputs.

    Attributes:
        name: its name (the event type in the pose file).
        when: the condition.
        hold: seconds the condition must hold, unbroken, before the onset.
        refractory: seconds after an offset during which no onset comes.
        max_triggers: most onsets per trial (per run without trials); None: any.
        missing: what a frame in which the condition cannot be judged (its nodes
            not found, its animal absent) does: ``"off"`` counts it as false (an
            output turns off when the animal is lost), ``"keep"`` as the frame before.
        outputs: the devices it drives.
    """

    name: str
    when: Condition
    hold: float = 0.0
    refractory: float = 0.0
    max_triggers: int | None = None
    missing: Missing = "off"
    outputs: tuple[Output, ...] = ()


@attrs.frozen
class Experiment:
    """A closed-loop experiment: rules on poses, their regions, trials and devices.

    Attributes:
        rules: in the order given.
        regions: by name.
        devices: by name.
        trials: the trial structure; None: one trial, the whole run.
        time: what a rule's seconds are measured on: ``"video"`` (frame index over
            the video's frame rate, so a rehearsal on a file and a replay of it
            decide alike), ``"capture"`` (capture times, a camera's), ``"auto"``
            (video for files and replays, capture for cameras and streams).
        predict: forward-predict each pose to the moment its output fires (a
            constant-velocity Kalman filter per tracked node).
    """

    rules: tuple[Rule, ...]
    regions: Mapping[str, Region] = attrs.field(factory=dict)
    devices: Mapping[str, Device] = attrs.field(factory=dict)
    trials: Trials | None = None
    time: TimeBase = "auto"
    predict: bool = False


# -------------------------------------------------------------------------- loading


def load_experiment(path: str | Path) -> Experiment:
    """The experiment in a YAML file, its shape checked (its names, against itself and
    a model, are checked by `check_experiment`).

    Raises:
        ExperimentError: the file is unreadable or has mistakes, one line each.
    """
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ExperimentError(str(path), [error.strerror or str(error)]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = "" if mark is None else f"line {mark.line + 1}: "
        problem = getattr(error, "problem", None) or str(error)
        raise ExperimentError(str(path), [f"{where}not YAML: {problem}"]) from None
    return experiment_from_dict(data, source=str(path))


def experiment_from_dict(data: object, *, source: str = "experiment") -> Experiment:
    """The experiment in a parsed YAML document (see the module docstring).

    Raises:
        ExperimentError: every mistake of its shape, one line each.
    """
    reader = _Reader()
    experiment = reader.experiment(data)
    if reader.problems or experiment is None:
        raise ExperimentError(source, reader.problems or ["empty experiment"])
    return experiment


def check_experiment(
    experiment: Experiment,
    info: ModelInfo | Skeleton,
    class_names: Sequence[str] = (),
    *,
    tracked: bool | None = None,
    source: str = "experiment",
) -> None:
    """Check the experiment's names against a model: every node in its skeleton,
    every animal one of its identities (a multi-class model) or a track (with
    tracking).

    Args:
        info: the model, or its skeleton (with `class_names`).
        class_names: a multi-class model's identities, with a skeleton.
        tracked: whether the run tracks; None: not known (a ``track_N`` is accepted).
        source: what the error lines begin with (the file).

    Raises:
        ExperimentError: every mistake, one line each.
    """
    skeleton = info.skeleton if isinstance(info, ModelInfo) else info
    if isinstance(info, ModelInfo):
        class_names = info.class_names
    problems = [
        *_check_references(experiment),
        *_check_names(experiment, skeleton.node_names, tuple(class_names), tracked),
    ]
    if problems:
        raise ExperimentError(source, problems)


def leaves(condition: Condition) -> list[Leaf]:
    """The leaf conditions of `condition`, depth first."""
    if isinstance(condition, All | AnyOf):
        return [leaf for child in condition.conditions for leaf in leaves(child)]
    if isinstance(condition, Not):
        return leaves(condition.condition)
    return [condition]


def animals_named(condition: Condition) -> list[str]:
    """The animal names a condition refers to (not None, "same" or "other")."""
    names: list[str | None] = []
    for leaf in leaves(condition):
        if isinstance(leaf, Distance):
            names += [leaf.start.animal, leaf.end.animal]
        else:
            names.append(leaf.animal)
    return [name for name in names if name not in (None, "same", "other")]


def _check_references(experiment: Experiment) -> list[str]:
    """Regions and devices each rule names exist; rule names are distinct."""
    problems: list[str] = []
    seen: set[str] = set()
    for rule in experiment.rules:
        where = f"rules.{rule.name}"
        if rule.name in seen:
            problems.append(f"{where}: a second rule of this name")
        seen.add(rule.name)
        for leaf in leaves(rule.when):
            if isinstance(leaf, InRegion) and leaf.region not in experiment.regions:
                problems.append(
                    f"{where}: unknown region {leaf.region!r} ({_known(experiment.regions)})"
                )
        for output in rule.outputs:
            if output.device not in experiment.devices:
                problems.append(
                    f"{where}.outputs: unknown device {output.device!r} "
                    f"({_known(experiment.devices)})"
                )
    return problems


def _check_names(
    experiment: Experiment, nodes: Sequence[str], class_names: tuple[str, ...], tracked: bool | None
) -> list[str]:
    problems: list[str] = []
    for rule in experiment.rules:
        where = f"rules.{rule.name}"
        for leaf in leaves(rule.when):
            for node in _nodes_of(leaf):
                if node not in nodes:
                    problems.append(
                        f"{where}: unknown node {node!r} (the model's nodes: {', '.join(nodes)})"
                    )
        for animal in animals_named(rule.when):
            problem = _animal_problem(animal, class_names, tracked)
            if problem is not None:
                problems.append(f"{where}: {problem}")
    return problems


def _animal_problem(animal: str, class_names: tuple[str, ...], tracked: bool | None) -> str | None:
    if animal in class_names:
        return None
    if TRACK_NAME.match(animal):
        if class_names:
            return (
                f"unknown animal {animal!r}: this multi-class model names its animals "
                f"{', '.join(class_names)}"
            )
        if tracked is False:
            return f"animal {animal!r} is a track: run with tracking (--tracking)"
        return None
    if class_names:
        return f"unknown animal {animal!r} (the model's animals: {', '.join(class_names)})"
    return (
        f"unknown animal {animal!r}: this model has no identities; name tracks "
        "track_0, track_1, ... (with --tracking)"
    )


def _nodes_of(leaf: Leaf) -> list[str]:
    if isinstance(leaf, InRegion):
        return [leaf.node]
    if isinstance(leaf, Distance):
        return [leaf.start.node, leaf.end.node]
    if isinstance(leaf, Angle):
        return [leaf.start, leaf.end, *(leaf.reference or ())]
    if isinstance(leaf, Speed):
        return [leaf.node]
    return [node for node, _ in leaf.template]


def _known(names: Mapping[str, object]) -> str:
    return "defined: " + ", ".join(names) if names else "none defined"


class _Reader:
    """Builds the records from a parsed YAML document, collecting every mistake."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, where: str, problem: str) -> None:
        self.problems.append(f"{where}: {problem}" if where else problem)

    def mapping(self, value: object, where: str, keys: Sequence[str]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.fail(where, f"expected a mapping, got {_shown(value)}")
            return None
        for key in value:
            if key not in keys:
                self.fail(where, f"unknown key {key!r} (expected: {', '.join(keys)})")
        return value

    def number(self, value: object, where: str, *, minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            self.fail(where, f"expected a number, got {_shown(value)}")
            return 0.0
        if minimum is not None and value < minimum:
            self.fail(where, f"must be at least {minimum:g}, got {value:g}")
        return float(value)

    def integer(self, value: object, where: str, *, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected a whole number, got {_shown(value)}")
            return minimum
        if value < minimum:
            self.fail(where, f"must be at least {minimum}, got {value}")
        return value

    def text(self, value: object, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"expected a name, got {_shown(value)}")
            return ""
        return value

    def choice(self, value: object, where: str, options: Sequence[object], default: object) -> Any:
        """The option `value` is (a bool only as a bool), else `default` (the mistake noted)."""
        for option in options:
            if value == option and isinstance(value, bool) == isinstance(option, bool):
                return option
        *most, last = (str(option).lower() for option in options)
        self.fail(where, f"expected {', '.join(most)} or {last}, got {_shown(value)}")
        return default

    def point(self, value: object, where: str) -> tuple[float, float]:
        if not isinstance(value, list | tuple) or len(value) != 2:
            self.fail(where, f"expected a point [x, y], got {_shown(value)}")
            return (0.0, 0.0)
        return (self.number(value[0], where), self.number(value[1], where))

    def experiment(self, data: object) -> Experiment | None:
        top = self.mapping(
            data, "", ("rules", "regions", "devices", "trials", "time", "predict", "version")
        )
        if top is None:
            return None
        if top.get("version", 1) != 1:
            self.fail("version", f"only version 1 is known, got {_shown(top['version'])}")
        regions: dict[str, Region] = self.named(top.get("regions", {}), "regions", self.region)
        devices: dict[str, Device] = self.named(top.get("devices", {}), "devices", self.device)
        trials = None if top.get("trials") is None else self.trials(top["trials"])
        time = self.choice(top.get("time", "auto"), "time", ("auto", "video", "capture"), "auto")
        predict = self.choice(top.get("predict", False), "predict", (True, False), False)
        rules_data = top.get("rules")
        if not isinstance(rules_data, dict) or not rules_data:
            self.fail("rules", f"expected a mapping of named rules, got {_shown(rules_data)}")
            rules_data = {}
        rules = [self.rule(str(name), value) for name, value in rules_data.items()]
        return Experiment(
            rules=tuple(rule for rule in rules if rule is not None),
            regions=regions,
            devices=devices,
            trials=trials,
            time=time,
            predict=predict,
        )

    def named(
        self, value: object, where: str, read: Callable[[object, str], T | None]
    ) -> dict[str, T]:
        """A mapping of names to things `read` reads, leaving out those with mistakes."""
        if not isinstance(value, dict):
            self.fail(where, f"expected a mapping of names, got {_shown(value)}")
            return {}
        found = {str(name): read(item, f"{where}.{name}") for name, item in value.items()}
        return {name: item for name, item in found.items() if item is not None}

    def one_of(
        self, value: object, where: str, kinds: Mapping[str, Sequence[str] | None]
    ) -> tuple[str, Any, str] | None:
        """A mapping of exactly one of `kinds` to its spec (itself a mapping of the keys
        `kinds` gives, where it gives some): the kind, the spec and where the spec is;
        None (with the mistake noted) otherwise."""
        data = self.mapping(value, where, tuple(kinds))
        if data is None:
            return None
        if len(data) != 1:
            self.fail(where, f"give one of {', '.join(kinds)}")
            return None
        ((kind, spec),) = data.items()
        if kind not in kinds:  # noted by `mapping`
            return None
        where = f"{where}.{kind}"
        keys = kinds[kind]
        if keys is not None and (spec := self.mapping(spec, where, keys)) is None:
            return None
        return kind, spec, where

    def region(self, value: object, where: str) -> Region | None:
        chosen = self.one_of(
            value,
            where,
            {"rectangle": None, "ellipse": ("center", "radii", "angle"), "polygon": None},
        )
        if chosen is None:
            return None
        kind, spec, where = chosen
        if kind == "rectangle":
            if not isinstance(spec, list) or len(spec) != 4:
                self.fail(where, f"expected [x0, y0, x1, y1], got {_shown(spec)}")
                return None
            x0, y0, x1, y1 = (self.number(v, where) for v in spec)
            if x1 <= x0 or y1 <= y0:
                self.fail(where, "needs x0 < x1 and y0 < y1")
            return Rectangle(x0, y0, x1, y1)
        if kind == "ellipse":
            cx, cy = self.point(spec.get("center"), f"{where}.center")
            rx, ry = self.point(spec.get("radii"), f"{where}.radii")
            if rx <= 0 or ry <= 0:
                self.fail(f"{where}.radii", "must be positive")
            angle = self.number(spec.get("angle", 0.0), f"{where}.angle")
            return Ellipse(cx, cy, rx, ry, angle)
        if not isinstance(spec, list) or len(spec) < 3:
            self.fail(where, f"expected at least 3 points [x, y], got {_shown(spec)}")
            return None
        return Polygon(tuple(self.point(v, f"{where}[{i}]") for i, v in enumerate(spec)))

    def device(self, value: object, where: str) -> Device | None:
        chosen = self.one_of(value, where, _DEVICE_KEYS)
        if chosen is None:
            return None
        kind, fields, where = chosen
        if kind == "serial":
            return SerialDevice(
                self.text(fields.get("port"), f"{where}.port"),
                self.integer(fields.get("baudrate", 115200), f"{where}.baudrate", minimum=1),
                self.number(
                    fields.get("write_timeout", 0.5), f"{where}.write_timeout", minimum=0.001
                ),
            )
        if kind == "osc":
            port = self.integer(fields.get("port"), f"{where}.port", minimum=1)
            if port > 65535:
                self.fail(f"{where}.port", f"must be at most 65535, got {port}")
            return OscDevice(self.text(fields.get("host", "127.0.0.1"), f"{where}.host"), port)
        if kind == "gpio":
            pin = fields.get("pin")
            if isinstance(pin, bool) or not isinstance(pin, int | str) or pin == "":
                self.fail(
                    f"{where}.pin", f"expected a pin (17, GPIO17, BOARD11), got {_shown(pin)}"
                )
                pin = 0
            active_high = fields.get("active_high", True)
            return GpioDevice(
                pin, self.choice(active_high, f"{where}.active_high", (True, False), True)
            )
        if kind == "nidaq":
            return NidaqDevice(self.text(fields.get("lines"), f"{where}.lines"))
        return ZmqDevice(self.text(fields.get("endpoint"), f"{where}.endpoint"))

    def trials(self, value: object) -> Trials | None:
        data = self.mapping(value, "trials", ("start", "duration", "interval", "count"))
        if data is None:
            return None
        count = data.get("count")
        return Trials(
            start=self.number(data.get("start", 0.0), "trials.start", minimum=0),
            duration=self.number(data.get("duration"), "trials.duration", minimum=1e-9),
            interval=self.number(data.get("interval", 0.0), "trials.interval", minimum=0),
            count=None if count is None else self.integer(count, "trials.count", minimum=1),
        )

    def rule(self, name: str, value: object) -> Rule | None:
        where = f"rules.{name}"
        keys = ("when", "hold", "refractory", "max_triggers", "missing", "outputs")
        data = self.mapping(value, where, keys)
        if data is None:
            return None
        if "when" not in data:
            self.fail(where, "needs a condition (when:)")
            return None
        when = self.condition(data["when"], f"{where}.when")
        missing = self.choice(
            data.get("missing", "off"), f"{where}.missing", ("off", "keep"), "off"
        )
        max_triggers = data.get("max_triggers")
        outputs_data = data.get("outputs", [])
        if not isinstance(outputs_data, list):
            self.fail(f"{where}.outputs", f"expected a list, got {_shown(outputs_data)}")
            outputs_data = []
        outputs = [
            self.output(item, f"{where}.outputs[{i}]") for i, item in enumerate(outputs_data)
        ]
        if when is None:
            return None
        return Rule(
            name=name,
            when=when,
            hold=self.number(data.get("hold", 0.0), f"{where}.hold", minimum=0),
            refractory=self.number(data.get("refractory", 0.0), f"{where}.refractory", minimum=0),
            max_triggers=None
            if max_triggers is None
            else self.integer(max_triggers, f"{where}.max_triggers", minimum=1),
            missing=missing,
            outputs=tuple(output for output in outputs if output is not None),
        )

    def output(self, value: object, where: str) -> Output | None:
        data = self.mapping(value, where, ("device", "onset", "offset"))
        if data is None:
            return None
        messages = []
        for key in ("onset", "offset"):
            message = data.get(key)
            if message is not None and not isinstance(message, str):
                self.fail(f"{where}.{key}", f"expected text, got {_shown(message)}")
                message = None
            messages.append(message)
        return Output(self.text(data.get("device"), f"{where}.device"), *messages)

    def condition(self, value: object, where: str) -> Condition | None:
        chosen = self.one_of(value, where, {**_LEAF_KEYS, "all": None, "any": None, "not": None})
        if chosen is None:
            return None
        kind, spec, where = chosen
        if kind in ("all", "any"):
            if not isinstance(spec, list) or not spec:
                self.fail(where, f"expected a list of conditions, got {_shown(spec)}")
                return None
            children = [self.condition(item, f"{where}[{i}]") for i, item in enumerate(spec)]
            if any(child is None for child in children):
                return None
            kept = tuple(child for child in children if child is not None)
            return All(kept) if kind == "all" else AnyOf(kept)
        if kind == "not":
            child = self.condition(spec, where)
            return None if child is None else Not(child)
        return self.leaf(kind, spec, where)

    def leaf(self, kind: str, data: dict[str, Any], where: str) -> Leaf | None:
        if kind == "in_region":
            return InRegion(
                self.text(data.get("region"), f"{where}.region"),
                self.text(data.get("node"), f"{where}.node"),
                self.animal(data.get("animal"), f"{where}.animal"),
            )
        if kind == "distance":
            start = self.node_of(data.get("from"), f"{where}.from", end=False)
            end = self.node_of(data.get("to"), f"{where}.to", end=True)
            below, above = self.bounds(data, where)
            if start.animal is not None and start.animal == end.animal:
                self.fail(where, "from and to name the same animal: leave to.animal out")
            return Distance(start, end, below, above)
        if kind == "angle":
            point = (
                None if data.get("point") is None else self.point(data["point"], f"{where}.point")
            )
            reference = None
            if data.get("reference") is not None:
                ref = data["reference"]
                if not isinstance(ref, list) or len(ref) != 2:
                    self.fail(f"{where}.reference", f"expected [node, node], got {_shown(ref)}")
                else:
                    reference = (
                        self.text(ref[0], f"{where}.reference"),
                        self.text(ref[1], f"{where}.reference"),
                    )
            if (point is None) == (data.get("reference") is None):
                self.fail(where, "give one of point (a target) or reference (two nodes)")
            below = self.number(data.get("below", 180.0), f"{where}.below", minimum=0)
            above = self.number(data.get("above", 0.0), f"{where}.above", minimum=0)
            return Angle(
                self.text(data.get("from"), f"{where}.from"),
                self.text(data.get("to"), f"{where}.to"),
                point,
                reference,
                below,
                above,
                self.animal(data.get("animal"), f"{where}.animal"),
            )
        if kind == "speed":
            below, above = self.bounds(data, where)
            return Speed(
                self.text(data.get("node"), f"{where}.node"),
                below,
                above,
                self.animal(data.get("animal"), f"{where}.animal"),
            )
        template = data.get("template")
        if not isinstance(template, dict) or len(template) < 2:
            self.fail(
                f"{where}.template", f"expected node: [x, y] for 2+ nodes, got {_shown(template)}"
            )
            return None
        return Posture(
            tuple(
                (str(node), self.point(xy, f"{where}.template.{node}"))
                for node, xy in template.items()
            ),
            self.number(data.get("tolerance"), f"{where}.tolerance", minimum=0),
            self.animal(data.get("animal"), f"{where}.animal"),
        )

    def bounds(self, data: Mapping[str, object], where: str) -> tuple[float, float]:
        if "below" not in data and "above" not in data:
            self.fail(where, "give below, above or both")
        below = self.number(data.get("below", math.inf), f"{where}.below")
        above = self.number(data.get("above", -math.inf), f"{where}.above")
        if above > below:
            self.fail(where, f"above ({above:g}) is over below ({below:g}): never true")
        return below, above

    def node_of(self, value: object, where: str, *, end: bool) -> NodeOf:
        data = self.mapping(value, where, ("node", "animal"))
        if data is None:
            return NodeOf("", None)
        animal = data.get("animal", "same" if end else None)
        if not end and animal in ("same", "other"):
            self.fail(f"{where}.animal", f"{animal!r} is for the to end")
        return NodeOf(
            self.text(data.get("node"), f"{where}.node"), self.animal(animal, f"{where}.animal")
        )

    def animal(self, value: object, where: str) -> str | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return f"track_{value}"
        return self.text(value, where)


# Each kind of device's keys, and each kind of leaf condition's.
_DEVICE_KEYS = {
    "serial": ("port", "baudrate", "write_timeout"),
    "osc": ("host", "port"),
    "gpio": ("pin", "active_high"),
    "nidaq": ("lines",),
    "zmq": ("endpoint",),
}
_BOUNDS = ("below", "above")
_LEAF_KEYS = {
    "in_region": ("region", "node", "animal"),
    "distance": ("from", "to", *_BOUNDS),
    "angle": ("from", "to", "point", "reference", "animal", *_BOUNDS),
    "speed": ("node", "animal", *_BOUNDS),
    "posture": ("template", "tolerance", "animal"),
}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
