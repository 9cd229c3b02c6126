"""Experiment files and rules on tiny synthetic poses: every condition, NaN points and
missing animals, the three-valued combinators, hold time, refractory period, trigger
limits and trials, and every mistake a file can hold (one line each)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.experiment import (
    FALSE,
    TRUE,
    UNKNOWN,
    CompiledRules,
    ExperimentError,
    Timeline,
    check_experiment,
    experiment_from_dict,
    load_experiment,
)
from sleap_live.stream.experiment import rules as rules_module
from sleap_live.stream.experiment.timing import trial_at
from tests import script_modules

NODES = ("nose", "head", "body", "tail_base", "tail_tip")
INFO = ModelInfo("bottomup", Skeleton(NODES), 1, None)
CLASSES = ModelInfo("multi_class_bottomup", Skeleton(NODES), 3, 2, class_names=("red", "blue"))
NAN = math.nan


def animal(x: float, y: float, *, heading: float = 0.0, step: float = 5.0) -> list[list[float]]:
    """Five nodes in a line from the nose at (x, y), pointing along `heading` degrees."""
    dx, dy = math.cos(math.radians(heading)), -math.sin(math.radians(heading))
    return [[x - i * step * dx, y - i * step * dy] for i in range(5)]


def poses(*animals: list[list[float]], ids: list[int] | None = None) -> FramePoses:
    points = np.asarray(animals, np.float32).reshape(len(animals), 5, 2)
    n = len(animals)
    return FramePoses(
        points,
        np.ones((n, 5), np.float32),
        np.ones(n, np.float32),
        np.asarray(ids if ids is not None else [-1] * n, np.int32),
    )


def values(when: dict, frames: list[FramePoses], *, info: ModelInfo = INFO, regions=None) -> list:
    experiment = experiment_from_dict({"regions": regions or {}, "rules": {"r": {"when": when}}})
    check_experiment(experiment, info)
    rules = CompiledRules(experiment, info)
    return [rules.evaluate(frame, i / 10)[0] for i, frame in enumerate(frames)]


REGIONS = {
    "box": {"rectangle": [0, 0, 10, 10]},
    # Long axis from lower left to upper right on screen (counter-clockwise from x).
    "slant": {"ellipse": {"center": [50, 50], "radii": [10, 1], "angle": 45}},
    "oval": {"ellipse": {"center": [50, 50], "radii": [10, 2], "angle": 90}},
    "tri": {"polygon": [[0, 0], [20, 0], [0, 20]]},
}


@pytest.mark.parametrize(
    ("region", "inside", "outside"),
    [
        ("box", (5, 5), (11, 5)),
        ("oval", (50, 58), (58, 50)),
        ("slant", (55, 45), (55, 55)),
        ("tri", (4, 4), (15, 15)),
    ],
)
def test_a_region_is_true_while_the_node_is_in_it(region, inside, outside):
    when = {"in_region": {"region": region, "node": "nose"}}
    frames = [poses(animal(*inside)), poses(animal(*outside)), poses(animal(NAN, NAN)), poses()]
    # A lost nose and an empty frame cannot be judged: UNKNOWN, not "outside".
    assert values(when, frames, regions=REGIONS) == [TRUE, FALSE, UNKNOWN, UNKNOWN]


def test_a_region_is_true_when_any_animal_is_in_it_and_a_named_one_only_for_it():
    when = {"in_region": {"region": "box", "node": "nose"}}
    two = poses(animal(50, 50), animal(5, 5), ids=[0, 1])
    assert values(when, [two], regions=REGIONS, info=CLASSES) == [TRUE]
    for name, expected in (("red", FALSE), ("blue", TRUE)):
        named = {"in_region": {**when["in_region"], "animal": name}}
        assert values(named, [two], regions=REGIONS, info=CLASSES) == [expected]
    # The named animal absent from the frame: UNKNOWN.
    red_only = poses(animal(5, 5), ids=[0])
    named = {"in_region": {**when["in_region"], "animal": "blue"}}
    assert values(named, [red_only], regions=REGIONS, info=CLASSES) == [UNKNOWN]


def test_distance_within_one_animal_and_between_two():
    within = {"distance": {"from": {"node": "nose"}, "to": {"node": "tail_tip"}, "below": 21}}
    assert values(within, [poses(animal(0, 0)), poses(animal(0, 0, step=6))]) == [TRUE, FALSE]
    between = {
        "distance": {
            "from": {"node": "nose", "animal": "blue"},
            "to": {"node": "tail_tip", "animal": "red"},
            "below": 3,
        }
    }
    near = poses(animal(100, 100), animal(80 + 1, 100), ids=[0, 1])  # red's tip at (80, 100)
    far = poses(animal(100, 100), animal(60, 100), ids=[0, 1])
    gone = poses(animal(100, 100), ids=[0])
    assert values(between, [near, far, gone], info=CLASSES) == [TRUE, FALSE, UNKNOWN]
    # Untracked animals, "other": any animal's nose near another's tail tip, never its own.
    other = {
        "distance": {
            "from": {"node": "nose"},
            "to": {"node": "tail_tip", "animal": "other"},
            "below": 3,
        }
    }
    lone = poses(animal(0, 0, step=0.1))  # its own tip is 0.4 px from its nose
    assert values(other, [near, lone]) == [TRUE, UNKNOWN]


def test_head_direction_to_a_point_and_egocentric():
    towards = {"angle": {"from": "head", "to": "nose", "point": [100, 0], "below": 20}}
    facing = poses(animal(0, 0, heading=0))
    away = poses(animal(0, 0, heading=180))
    blind = poses([[NAN, NAN], *animal(0, 0)[1:]])
    assert values(towards, [facing, away, blind]) == [TRUE, FALSE, UNKNOWN]
    # Egocentric: the head turned against the body's axis (tail_base -> body).
    turned = {
        "angle": {"from": "head", "to": "nose", "reference": ["tail_base", "body"], "above": 45}
    }
    bent = animal(0, 0)
    bent[0] = [bent[1][0], bent[1][1] - 5]  # the nose 90 degrees off the axis
    assert values(turned, [poses(animal(0, 0)), poses(bent)]) == [FALSE, TRUE]


def test_speed_needs_the_same_animal_in_the_frame_before():
    fast = {"speed": {"node": "body", "above": 40}}
    frames = [poses(animal(0, 0)), poses(animal(5, 0)), poses(animal(5.5, 0)), poses()]
    # 5 px in 0.1 s is 50 px/s; the first frame has no frame before.
    assert values(fast, frames) == [UNKNOWN, TRUE, FALSE, UNKNOWN]
    # Tracks: matched by track id, whatever their rows.
    tracked = [
        poses(animal(0, 0), animal(100, 0), ids=[3, 4]),
        poses(animal(100, 0), animal(10, 0), ids=[4, 3]),
    ]
    # Then the same rows as the frame before: track 3 moves 10 px in 0.1 s.
    tracked.append(poses(animal(100, 0), animal(20, 0), ids=[4, 3]))
    named = {"speed": {"node": "body", "above": 40, "animal": "track_3"}}
    assert values(named, tracked) == [UNKNOWN, TRUE, TRUE]
    slow = {"speed": {"node": "body", "below": 5, "animal": "track_4"}}
    assert values(slow, tracked) == [UNKNOWN, TRUE, TRUE]
    # Untracked animals of a multi-animal model have no speed.
    two = [poses(animal(0, 0), animal(50, 50)), poses(animal(5, 0), animal(50, 50))]
    assert values(fast, two) == [UNKNOWN, UNKNOWN]


def test_speed_frame_after_frame_in_the_same_rows():
    """The same rows frame after frame (each read against the one before, however many
    in a row), with an untracked animal among tracked ones: only tracks have speeds."""
    fast = {"speed": {"node": "body", "above": 40}}
    xs = [0, 10, 10, 30, 30, 30]  # 100, 0, 200, 0, 0 px/s
    tracked = [poses(animal(x, 0), animal(50, 50), ids=[3, 4]) for x in xs]
    assert values(fast, tracked) == [UNKNOWN, TRUE, FALSE, TRUE, FALSE, FALSE]
    # The untracked animal runs (100 px a frame) and has no speed; track 3's decides.
    mixed = [poses(animal(x, 0), animal(100 * i, 50), ids=[3, -1]) for i, x in enumerate(xs)]
    assert values(fast, mixed) == [UNKNOWN, TRUE, FALSE, TRUE, FALSE, FALSE]
    untracked = [poses(animal(x, 0), animal(50, 50)) for x in xs]
    assert values(fast, untracked) == [UNKNOWN] * len(xs)


def test_posture_matches_after_any_translation_and_rotation():
    straight = {
        "posture": {
            "template": {"nose": [0, 0], "head": [0, 5], "body": [0, 10]},
            "tolerance": 0.5,
        }
    }
    bent = animal(0, 0)
    bent[2] = [bent[2][0], bent[2][1] + 4]
    assert values(straight, [poses(animal(30, 40, heading=33)), poses(bent)]) == [TRUE, FALSE]


def test_all_any_not_are_three_valued():
    box = {"in_region": {"region": "box", "node": "nose"}}
    lost = {"in_region": {"region": "box", "node": "tail_tip"}}
    frame = poses([[5, 5], [0, 0], [0, 0], [0, 0], [NAN, NAN]])
    cases = {
        "all": ({"all": [box, lost]}, UNKNOWN),
        "any": ({"any": [box, lost]}, TRUE),
        "not": ({"not": lost}, UNKNOWN),
        "not true": ({"not": box}, FALSE),
        "all false": ({"all": [{"not": box}, lost]}, FALSE),
        "any unknown": ({"any": [{"not": box}, lost]}, UNKNOWN),
    }
    for name, (when, expected) in cases.items():
        assert values(when, [frame], regions=REGIONS) == [expected], name


def timeline(rule: dict, trials: dict | None = None) -> Timeline:
    data = {"rules": {"r": {"when": {"speed": {"node": "body", "above": 0}}, **rule}}}
    if trials is not None:
        data["trials"] = trials
    return Timeline(experiment_from_dict(data))


def run(line: Timeline, truth: str, dt: float = 0.1) -> str:
    """The transitions over frames given as characters: T true, F false, U unknown."""
    value = {"T": TRUE, "F": FALSE, "U": UNKNOWN}
    out = []
    for i, c in enumerate(truth):
        marks = [t.kind[1] for t in line.step([value[c]], i, i * dt)]  # "n" onset, "f" offset
        out.append("".join(marks) or ".")
    return "".join(out)


def test_onsets_and_offsets_follow_the_condition_through_hold_and_refractory():
    assert run(timeline({}), "FTTFT") == ".n.fn"
    # Held 0.2 s: the onset on the third true frame in a row.
    assert run(timeline({"hold": 0.2}), "TTFTTTTF") == ".....n.f"
    # 0.25 s refractory after each offset.
    assert run(timeline({"refractory": 0.25}), "TFTTTFT") == "nf..nf."


def test_unknown_frames_are_off_or_keep_the_frame_before():
    assert run(timeline({}), "TUT") == "nfn"
    assert run(timeline({"missing": "keep"}), "TUUTF") == "n...f"
    assert run(timeline({"missing": "keep"}), "FUT") == "..n"


def test_trials_and_their_trigger_limits():
    trials = {"start": 0.2, "duration": 0.3, "interval": 0.2, "count": 2}
    # Trial 0: 0.2-0.5 s (frames 2-4), trial 1: 0.7-1.0 s (frames 7-9).
    line = timeline({"max_triggers": 1}, trials)
    assert run(line, "TTTFTTTTTTTT") == "..nf...n..f."
    # The end of a trial turns a rule off; the next trial may turn it on again.
    assert run(timeline({}, trials), "TTTTTTTTTTT") == "..n..f.n..f"


def test_trial_at():
    experiment = experiment_from_dict(
        {
            "rules": {"r": {"when": {"speed": {"node": "body", "above": 0}}}},
            "trials": {"start": 1, "duration": 2, "interval": 1, "count": 2},
        }
    )
    found = [trial_at(experiment.trials, t) for t in (0.5, 1, 2.9, 3.5, 4, 5.9, 7, 100)]
    assert found == [-1, 0, 0, -1, 1, 1, -1, -1]
    assert trial_at(None, 3.0) is None


def test_finish_turns_off_every_rule_still_on():
    line = timeline({})
    line.step([TRUE], 0, 0.0)
    (offset,) = line.finish()
    assert (offset.kind, offset.frame_index) == ("offset", 0)
    assert line.finish() == []


def test_every_mistake_of_a_file_is_one_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        """
regions:
  box: {rectangle: [10, 0, 5, 5]}
  blob: {circle: 3}
devices:
  laser: {serial: {baudrate: fast}}
  lamp: {gpio: {pin: true}}
  both: {osc: {port: 9000}, zmq: {endpoint: "tcp://127.0.0.1:1"}}
rules:
  a:
    when: {in_region: {region: nowhere, node: nose}}
    hold: -1
    outputs: [{device: lamp}]
  b:
    when: {distance: {from: {node: nose}, to: {node: tail}, above: 9, below: 3}}
  c:
    when: {wobble: 1}
    missing: maybe
"""
    )
    with pytest.raises(ExperimentError) as raised:
        load_experiment(path)
    lines = str(raised.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    text = "\n".join(lines)
    for expected in (
        "regions.box.rectangle: needs x0 < x1",
        "regions.blob: unknown key 'circle'",
        "devices.laser.serial.port: expected a name",
        "devices.laser.serial.baudrate: expected a whole number",
        "devices.lamp.gpio.pin: expected a pin (17, GPIO17, BOARD11), got True",
        "devices.both: give one of serial, osc, gpio, nidaq, zmq",
        "rules.a.hold: must be at least 0",
        "rules.b.when.distance: above (9) is over below (3)",
        "rules.c.when: unknown key 'wobble'",
        "rules.c.missing: expected off or keep",
    ):
        assert expected in text, expected
    assert len(lines) == len(set(lines))


def test_names_are_checked_against_the_model_one_line_each():
    experiment = experiment_from_dict(
        {
            "rules": {
                "a": {"when": {"speed": {"node": "nse", "above": 1, "animal": "green"}}},
                "b": {"when": {"speed": {"node": "body", "above": 1, "animal": "track_0"}}},
            }
        }
    )
    with pytest.raises(ExperimentError) as raised:
        check_experiment(experiment, CLASSES, source="exp.yaml")
    nodes = ", ".join(NODES)
    assert str(raised.value).splitlines() == [
        f"exp.yaml: rules.a: unknown node 'nse' (the model's nodes: {nodes})",
        "exp.yaml: rules.a: unknown animal 'green' (the model's animals: red, blue)",
        "exp.yaml: rules.b: unknown animal 'track_0': this multi-class model names its "
        "animals red, blue",
    ]
    with pytest.raises(ExperimentError, match="run with tracking"):
        check_experiment(
            experiment_from_dict(
                {
                    "rules": {
                        "b": {"when": {"speed": {"node": "body", "above": 1, "animal": "track_0"}}}
                    }
                }
            ),
            INFO,
            tracked=False,
        )


def test_unreadable_files_are_one_line(tmp_path):
    with pytest.raises(ExperimentError, match="No such file"):
        load_experiment(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(ExperimentError) as raised:
        load_experiment(bad)
    assert len(str(raised.value).splitlines()) == 1
    bad.write_text("- a list\n")
    with pytest.raises(ExperimentError, match="expected a mapping"):
        load_experiment(bad)


@pytest.mark.parametrize("region", ["box", "oval", "slant", "tri"])
def test_a_drawn_outline_is_the_edge_the_rules_judge(region):
    from sleap_live.stream.experiment.overlay import outline

    experiment = experiment_from_dict(
        {
            "regions": REGIONS,
            "rules": {"r": {"when": {"in_region": {"region": region, "node": "nose"}}}},
        }
    )
    edge = outline(experiment.regions[region])
    centre = edge.mean(axis=0)
    rules = CompiledRules(experiment, INFO)
    for scale, expected in ((0.97, TRUE), (1.03, FALSE)):
        for x, y in centre + (edge - centre) * scale:
            assert rules.evaluate(poses(animal(x, y)), 0.0) == [expected], (scale, x, y)


def test_the_overlay_draws_regions_and_rule_states():
    from sleap_live.stream.experiment.overlay import OFF_RULE, ON, ExperimentOverlay

    experiment = experiment_from_dict(
        {
            "regions": REGIONS,
            "rules": {"r": {"when": {"in_region": {"region": "box", "node": "nose"}}}},
        }
    )
    overlay = ExperimentOverlay(experiment, {"r": [(3, 5)]})
    frame = np.zeros((80, 80, 1), np.uint8)
    off, on = overlay(frame, 2), overlay(frame, 4)
    assert tuple(off[6, 6]) == OFF_RULE and tuple(on[6, 6]) == ON
    assert tuple(on[5, 10]) == ON  # the box's right edge, on while its rule is
    assert tuple(off[40, 50]) != (0, 0, 0)  # the oval (rx 10 turned upright): its top
    assert frame.max() == 0  # drawn on a copy


def test_rules_of_every_kind_together_decide_as_each_alone():
    """The vectorised kinds share one feature array: each rule's value in a file of
    many is its value alone."""
    bench = script_modules.load("bench_experiment.py")
    rules_data = bench.TEN_RULES
    walk = bench.random_walk(40, 6, np.random.default_rng(1))
    ids = np.arange(6, dtype=np.int32)
    frames = [FramePoses(p, np.ones((6, 5), np.float32), np.ones(6, np.float32), ids) for p in walk]
    together = CompiledRules(experiment_from_dict(rules_data), INFO)
    alone = {
        name: CompiledRules(
            experiment_from_dict({"regions": rules_data["regions"], "rules": {name: rule}}), INFO
        )
        for name, rule in rules_data["rules"].items()
    }
    for i, frame in enumerate(frames):
        expected = [rules.evaluate(frame, i / 30)[0] for rules in alone.values()]
        assert together.evaluate(frame, i / 30) == expected, i


@pytest.mark.parametrize("scalar_numbers", [0, 10**6], ids=["numpy", "python"])
def test_decisions_are_those_of_the_recorded_implementation(scalar_numbers, monkeypatch):
    """400 random frames (NaN nodes, absent animals, reordered rows, untracked, empty
    and single-animal frames, a repeated time) and the decisions the first numpy
    `CompiledRules` (commit 8a3b0fa) made on them: scripts/make_rules_fixture.py.
    Both ways of deciding a frame (numpy calls, Python numbers) give them."""
    import json
    from pathlib import Path

    monkeypatch.setattr(rules_module, "SCALAR_NUMBERS", scalar_numbers)

    data = np.load(Path(__file__).parents[1] / "data" / "experiment" / "rules_decisions.npz")
    fixture = script_modules.load("make_rules_fixture.py")
    rules = CompiledRules(experiment_from_dict(json.loads(str(data["experiment"]))), fixture.INFO)
    ends = np.cumsum(data["counts"])
    for i, (start, end) in enumerate(zip(ends - data["counts"], ends, strict=True)):
        n = end - start
        poses = FramePoses(
            data["points"][start:end],
            np.ones((n, 5), np.float32),
            np.ones(n, np.float32),
            data["identities"][start:end],
        )
        assert rules.evaluate(poses, float(data["times"][i])) == data["decisions"][i].tolist(), i


def test_the_benchmark_times_each_kind_of_condition():
    bench = script_modules.load("bench_experiment.py")
    costs = bench.bench_kinds(20)
    assert list(costs) == [
        "all 10 rules",
        *(f"without the {kind}" for kind in bench.KINDS),
        "one rectangle rule",
    ]
    assert all(seconds > 0 for seconds in costs.values())
    # Every rule a kind names is one of the 10.
    assert {n for names in bench.KINDS.values() for n in names} <= set(bench.TEN_RULES["rules"])


def test_the_capture_benchmarks_rule_switches_often_on_its_clip():
    """`--only capture` times events: its stripes rule, checked against the fixture's
    skeleton, switches on most frames of the clip's animal (its ground truth)."""
    from pathlib import Path

    bench = script_modules.load("bench_experiment.py")
    truth = np.load(Path(__file__).parents[1] / "data" / "ground_truth" / "single.npz")
    info = ModelInfo("single_instance", Skeleton(tuple(truth["node_names"])), 1, None)
    experiment = bench.stripes(bench.OscDevice("127.0.0.1", 9))
    check_experiment(experiment, info)
    rules, steps = CompiledRules(experiment, info), Timeline(experiment)
    ids = np.full(1, -1, np.int32)
    transitions = 0
    for i, points in enumerate(truth["points"].astype(np.float32)):
        poses = FramePoses(points, np.ones((1, 5), np.float32), np.ones(1, np.float32), ids)
        transitions += len(steps.step(rules.evaluate(poses, i / 30), i, i / 30))
    assert transitions >= 40
