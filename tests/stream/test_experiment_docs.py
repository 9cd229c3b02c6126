"""The three experiments of docs/closed-loop.md, run on bundled clips with the bundled
models' sleap-nn exports, give the events the page shows: in the event log, the CSV
beside the pose output and the .slp's events.

One pipeline run per clip, shared by the module: the first 151 frames of the
single-animal clip carry the laser and the head-direction experiments at once (two
`ClosedLoop`s), the first 40 frames of the two-animal clip the social one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import sleap_io as sio

from sleap_live import LoadOptions
from sleap_live.stream import OutputOptions, Pipeline, open_source
from sleap_live.stream.experiment.closed_loop import ClosedLoop

DATA = Path(__file__).parents[1] / "data"
DOCS = Path(__file__).parents[2] / "docs"
EXPERIMENTS = DOCS / "experiments"

# (rule, kind, frame, trial) as docs/closed-loop.md shows them.
LASER = [
    ("laser", "onset", 6, None),
    ("laser", "offset", 37, None),
    ("laser", "onset", 66, None),
    ("laser", "offset", 68, None),
]
HEAD_DIRECTION = [("faces_left_wall", "onset", 147, 1), ("faces_left_wall", "offset", 150, 1)]
SOCIAL = [
    ("blue_follows_red", "onset", 19, None),
    ("blue_follows_red", "offset", 24, None),
    ("blue_follows_red", "onset", 32, None),
    ("blue_follows_red", "offset", 37, None),
]


def transitions(loop: ClosedLoop) -> list[tuple]:
    return [(e.rule, e.kind, e.frame_index, e.trial) for e in loop.log.entries]


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> tuple[Pipeline, ClosedLoop, Path]:
    out = tmp_path_factory.mktemp("single") / "single.slp"
    pipeline = Pipeline(
        open_source(DATA / "videos" / "single.mkv", stop=151),
        DATA / "exports" / "single_instance",
        load=LoadOptions(engine="onnx", device="cpu"),
        outputs=OutputOptions(output=out),
        experiment=EXPERIMENTS / "laser.yaml",
    )
    head = ClosedLoop(EXPERIMENTS / "head_direction.yaml", name="head direction")
    head.bind(pipeline.runner.info, fps=30.0, recorded_video=True, lossless=True, tracked=False)
    pipeline.attach(head)
    pipeline.run()
    return pipeline, head, out


@pytest.fixture(scope="module")
def social_run(tmp_path_factory) -> tuple[Pipeline, Path]:
    out = tmp_path_factory.mktemp("social") / "social.slp"
    pipeline = Pipeline(
        open_source(DATA / "videos" / "multi_rgb.mp4", stop=40),
        DATA / "exports" / "multi_class_bottomup",
        load=LoadOptions(engine="onnx", device="cpu"),
        outputs=OutputOptions(output=out),
        experiment=EXPERIMENTS / "social.yaml",
    )
    pipeline.run()
    return pipeline, out


def test_the_laser_experiment(single_run):
    pipeline, _, out = single_run
    assert pipeline.experiment is not None
    assert transitions(pipeline.experiment) == LASER
    # A rehearsal on a file: the serial port is simulated, every message noted as sent.
    stats = pipeline.experiment.stats()
    assert stats.simulated and stats.frames == 151
    assert [(d.name, d.sent, d.error) for d in stats.devices] == [("laser", 4, None)]
    with open(out.with_name("single.events.csv")) as file:
        rows = list(csv.DictReader(file))
    assert [(r["kind"], int(r["frame_index"])) for r in rows] == [(k, f) for _, k, f, _ in LASER]
    events = sio.load_slp(str(out), open_videos=False).events
    assert [(e.type.name, e.start_frame, e.end_frame) for e in events] == [
        ("laser", 6, 36),
        ("laser", 66, 67),
    ]


def test_the_head_direction_experiment(single_run):
    _, head, _ = single_run
    # One pulse, in the second trial; no offset message is sent (an empty text).
    assert transitions(head) == HEAD_DIRECTION
    assert [sorted(e.sent) for e in head.log.entries] == [["reward"], []]


def test_the_social_experiment(social_run):
    pipeline, out = social_run
    assert transitions(pipeline.experiment) == SOCIAL
    # The rule names one animal: the events' subject is its track.
    events = sio.load_slp(str(out), open_videos=False).events
    assert [(e.start_frame, e.end_frame, e.subject.name) for e in events] == [
        (19, 23, "blue"),
        (32, 36, "blue"),
    ]
