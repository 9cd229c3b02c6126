"""Benchmarks of closed-loop experiments (docs/closed-loop.md, docs/benchmarks.md).

``rules``: the time to decide one frame (every condition evaluated, `CompiledRules`,
and every rule's timing stepped, `Timeline`) for 10 rules on 10 tracked animals of
a 5-node skeleton moving at random: p50 and p99 over many frames; then the same with
the animals' rows in a new order every frame (a tracker's output order changing).

``--kinds`` adds what each kind of condition costs: the same 10 rules without the
rules of that kind (their thread-CPU p50 against all 10's, frame by frame in turn),
and one rectangle rule alone.

``outputs``: from a pose leaving the engine (its record's ready time, when the emit
stage has its poses) to its onset's or offset's bytes being written, through the
whole path a run takes: the decision in the emit stage (`ClosedLoop.decide`, before
the record goes to the ring) and the device's link, or its queue and thread when a
write would wait. A rule switching on every other frame, at `--rate` frames
a second, drives each device in turn: serial through a pseudo-terminal pair and OSC
on loopback, each read by a peer process that timestamps each line or datagram, and
ZeroMQ on loopback. p50 and p99 of ready -> written (and -> read by the peer).

``capture``: from capture to an event's bytes on the device, against the engine's own
time, in a whole live run: `sleap-live replay`'s pipeline (the video paced at its
30 fps, one frame a batch) of the single-instance fixture on its 200-frame clip, with
a rule that switches as the nose crosses any of 15 narrow stripes (so it switches
often), sent over OSC on loopback to a peer process; p50 of each event's
`capture_to_sent_ms` and of the run's capture-to-pose and engine times (`--runs`
runs).

``predict``: the forward predictor's error one frame ahead (30 fps) against the
unpredicted pose (the frame before's points), on the bundled clips' ground truth and
on sleap-nn's poses of them (tests/data/goldens), over a grid of its noise settings.

Usage::

    .venv/bin/python scripts/bench_experiment.py [--frames 20000] [--transitions 1000]
    .venv/bin/python scripts/bench_experiment.py --only predict
    .venv/bin/python scripts/bench_experiment.py --only capture --runs 3
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.experiment import (
    AnyOf,
    CompiledRules,
    Experiment,
    InRegion,
    OscDevice,
    Output,
    Rectangle,
    Rule,
    SerialDevice,
    Timeline,
    ZmqDevice,
    check_experiment,
    experiment_from_dict,
)
from sleap_live.stream.experiment.closed_loop import ClosedLoop
from sleap_live.stream.ring import RingBuffer
from sleap_live.stream.types import PoseRecord

NODES = ("nose", "head", "body", "tail_base", "tail_tip")
INFO = ModelInfo("bottomup", Skeleton(NODES), 1, None)

# Ten rules, every kind of condition among them.
TEN_RULES = {
    "regions": {
        "left": {"rectangle": [0, 0, 200, 480]},
        "right": {"rectangle": [440, 0, 640, 480]},
        "nest": {"ellipse": {"center": [320, 240], "radii": [60, 40], "angle": 30}},
        "corner": {"polygon": [[0, 0], [120, 0], [0, 120]]},
    },
    "rules": {
        "in_left": {"when": {"in_region": {"region": "left", "node": "nose"}}, "hold": 0.1},
        "in_right": {"when": {"in_region": {"region": "right", "node": "nose", "animal": 3}}},
        "in_nest": {"when": {"in_region": {"region": "nest", "node": "body"}}},
        "in_corner": {"when": {"in_region": {"region": "corner", "node": "body"}}},
        "stretched": {
            "when": {
                "distance": {"from": {"node": "nose"}, "to": {"node": "tail_tip"}, "above": 45}
            }
        },
        "social": {
            "when": {
                "distance": {
                    "from": {"node": "nose", "animal": 1},
                    "to": {"node": "tail_base", "animal": "other"},
                    "below": 20,
                }
            },
            "refractory": 1.0,
        },
        "facing": {
            "when": {"angle": {"from": "head", "to": "nose", "point": [320, 240], "below": 20}}
        },
        "head_turn": {
            "when": {
                "angle": {
                    "from": "head",
                    "to": "nose",
                    "reference": ["tail_base", "body"],
                    "above": 60,
                }
            }
        },
        "running": {"when": {"speed": {"node": "body", "above": 200}}, "max_triggers": 5},
        "still_in_left": {
            "when": {
                "all": [
                    {"in_region": {"region": "left", "node": "body"}},
                    {"not": {"speed": {"node": "body", "above": 20}}},
                ]
            }
        },
    },
}


def random_walk(frames: int, animals: int, rng: np.random.Generator) -> np.ndarray:
    """(frames, animals, 5, 2) chains of nodes 10 px apart wandering a 640x480 arena."""
    centre = rng.uniform((50, 50), (590, 430), (animals, 2))
    heading = rng.uniform(0, 2 * np.pi, animals)
    out = np.empty((frames, animals, 5, 2), np.float32)
    for f in range(frames):
        heading += rng.normal(0, 0.2, animals)
        step = np.stack([np.cos(heading), np.sin(heading)], axis=1)
        centre = np.clip(centre + 3 * step, 20, (620, 460))
        offsets = np.arange(5)[None, :, None] * -10 * step[:, None, :]
        out[f] = centre[:, None, :] + offsets
    out[rng.random(out.shape[:3]) < 0.02] = np.nan  # a few nodes not found
    return out


def bench_rules(frames: int, reordered: bool = False) -> tuple[float, float, float, float]:
    """p50 and p99 seconds to decide one frame of 10 rules on 10 animals, wall time and
    this thread's CPU time (which a busy machine's other work does not inflate);
    `reordered`: the animals' rows in a new random order every frame."""
    experiment = experiment_from_dict(TEN_RULES)
    check_experiment(experiment, INFO)
    rules = CompiledRules(experiment, INFO)
    timeline = Timeline(experiment)
    rng = np.random.default_rng(0)
    walk = random_walk(frames, 10, rng)
    ids = np.arange(10, dtype=np.int32)
    orders = [rng.permutation(10) if reordered else ids for _ in walk]
    records = [
        FramePoses(p[o], np.ones(p.shape[:2], np.float32), np.ones(10, np.float32), ids[o])
        for p, o in zip(walk, orders, strict=True)
    ]
    times = np.empty(frames)
    cpu = np.empty(frames)
    for i, poses in enumerate(records):
        started, started_cpu = time.perf_counter(), time.thread_time()
        timeline.step(rules.evaluate(poses, i / 30), i, i / 30)
        cpu[i] = time.thread_time() - started_cpu
        times[i] = time.perf_counter() - started
    kept, kept_cpu = times[frames // 10 :], cpu[frames // 10 :]  # after warm-up
    return (
        float(np.percentile(kept, 50)),
        float(np.percentile(kept, 99)),
        float(np.percentile(kept_cpu, 50)),
        float(np.percentile(kept_cpu, 99)),
    )


# The rules of each kind of condition (--kinds).
KINDS = {
    "polygon": ("in_corner",),
    "speed": ("running", "still_in_left"),
    "angle": ("facing", "head_turn"),
    "distance between animals": ("social",),
}


def bench_kinds(frames: int) -> dict[str, float]:
    """Thread-CPU p50 seconds to decide a frame of the 10 rules, of the 10 without each
    kind's rules, and of one rectangle rule; the variants decide each frame in turn,
    so a change in the machine's load falls on all of them alike."""
    subsets = {"all 10 rules": tuple(TEN_RULES["rules"])}
    for kind, names in KINDS.items():
        subsets[f"without the {kind}"] = tuple(n for n in TEN_RULES["rules"] if n not in names)
    subsets["one rectangle rule"] = ("in_left",)
    walk = random_walk(frames, 10, np.random.default_rng(0))
    ids = np.arange(10, dtype=np.int32)
    records = [
        FramePoses(p, np.ones(p.shape[:2], np.float32), np.ones(10, np.float32), ids) for p in walk
    ]
    deciders = []
    for names in subsets.values():
        rules = {n: TEN_RULES["rules"][n] for n in names}
        experiment = experiment_from_dict({"regions": TEN_RULES["regions"], "rules": rules})
        deciders.append((CompiledRules(experiment, INFO), Timeline(experiment)))
    cpu = np.empty((len(deciders), frames))
    for i, poses in enumerate(records):
        for k, (rules, timeline) in enumerate(deciders):
            started = time.thread_time()
            timeline.step(rules.evaluate(poses, i / 30), i, i / 30)
            cpu[k, i] = time.thread_time() - started
    kept = cpu[:, frames // 10 :]
    return {name: float(np.percentile(row, 50)) for name, row in zip(subsets, kept, strict=True)}


def toggling(device: object) -> Experiment:
    """One rule, on while the nose is in x 0..10, driving `device`."""
    rule = Rule("toggle", InRegion("box", "nose"), outputs=(Output("dev", "1\n", "0\n"),))
    return Experiment((rule,), {"box": Rectangle(0, 0, 10, 10)}, {"dev": device})  # type: ignore[dict-item]


def bench_output(device: object, transitions: int, rate: float) -> tuple[list[float], list[float]]:
    """Seconds from each transition's ready time to its bytes being written, and each
    transition's ready time."""
    info = ModelInfo("single_instance", Skeleton(("nose", "tail")), 1, None)
    loop = ClosedLoop(toggling(device), simulate=False)
    loop.bind(info, fps=rate, recorded_video=False, lossless=False, tracked=False)
    ring = RingBuffer(256, 1, 2)
    loop.open()
    time.sleep(0.5)  # the device opens in its own thread
    ids = np.full(1, -1, np.int32)
    for index in range(transitions):
        x = 5.0 if index % 2 else 50.0
        points = np.asarray([[[x, 5.0], [x + 10, 5.0]]], np.float32)
        poses = FramePoses(points, np.ones((1, 2), np.float32), np.ones(1, np.float32), ids)
        now = time.monotonic()
        record = PoseRecord(index, now, now, "bench", poses)
        loop.decide(record)  # as the emit stage does, then the ring
        ring.write(record)
        time.sleep(1 / rate)
    ring.close()
    loop.close()
    written = [
        sent - entry.ready_time
        for entry in loop.log.entries
        for sent, _ in entry.sent.values()
        if sent is not None
    ]
    return written, [entry.ready_time for entry in loop.log.entries]


# The peer, a process of its own (as a device's reader is; a thread here would take
# the interpreter's lock from the experiment's thread as each write woke it): reads
# from a pseudo-terminal's master ("pty FD") or a UDP socket it binds ("udp", its
# port printed first, until a datagram "stop"), and prints the time it read each
# line or datagram.
PEER = """
import os, socket, sys, time
stamps = []
if sys.argv[1] == "pty":
    print(flush=True)
    while True:
        try:
            data = os.read(int(sys.argv[2]), 64)
        except OSError:
            break
        if not data:
            break
        stamps.extend([time.monotonic()] * data.count(b"\\n"))
else:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    print(udp.getsockname()[1], flush=True)
    while udp.recv(512) != b"stop":
        stamps.append(time.monotonic())
print(" ".join(map(repr, stamps)))
"""


def peer(*args: str, pass_fds: tuple[int, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    """The peer process, started, and the first line it printed."""
    child = subprocess.Popen(
        [sys.executable, "-c", PEER, *args], stdout=subprocess.PIPE, text=True, pass_fds=pass_fds
    )
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def peer_read(child: subprocess.Popen[str], ready: list[float]) -> list[float]:
    """Seconds from each transition's ready time to the peer reading it."""
    out, _ = child.communicate(timeout=30)
    return [stamp - at for stamp, at in zip(map(float, out.split()), ready, strict=False)]


def percentiles(seconds: list[float]) -> str:
    ms = np.asarray(seconds) * 1000
    return f"p50 {np.percentile(ms, 50):.3f} ms, p99 {np.percentile(ms, 99):.3f} ms (n={ms.size})"


def bench_outputs(transitions: int, rate: float) -> None:
    master, port = os.openpty()
    child, _ = peer("pty", str(master), pass_fds=(master,))
    written, ready = bench_output(SerialDevice(os.ttyname(port)), transitions, rate)
    os.close(port)  # the peer's read ends
    print(f"serial (pty), ready -> written: {percentiles(written)}")
    print(f"serial (pty), ready -> read by the peer: {percentiles(peer_read(child, ready))}")
    os.close(master)

    child, udp_port = peer("udp")
    written, ready = bench_output(OscDevice("127.0.0.1", int(udp_port)), transitions, rate)
    print(f"OSC (loopback UDP), ready -> sent: {percentiles(written)}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(b"stop", ("127.0.0.1", int(udp_port)))
    print(f"OSC (loopback UDP), ready -> read by the peer: {percentiles(peer_read(child, ready))}")

    written, _ = bench_output(ZmqDevice("tcp://127.0.0.1:*"), transitions, rate)
    print(f"ZeroMQ (loopback TCP), ready -> queued: {percentiles(written)}")


def stripes(device: object) -> Experiment:
    """One rule, on while the nose is in any of 15 stripes 7 px wide, driving `device`."""
    regions = {f"stripe{i}": Rectangle(14 * i, 0, 14 * i + 7, 168) for i in range(15)}
    when = AnyOf(tuple(InRegion(name, "nose") for name in regions))
    rule = Rule("stripes", when, outputs=(Output("dev"),))
    return Experiment((rule,), regions, {"dev": device})  # type: ignore[dict-item]


def bench_capture(runs: int) -> None:
    from sleap_live.engines.load_options import LoadOptions
    from sleap_live.stream import Pipeline, open_source

    data = Path(__file__).resolve().parents[1] / "tests" / "data"
    for run in range(runs):
        child, udp_port = peer("udp")
        loop = ClosedLoop(stripes(OscDevice("127.0.0.1", int(udp_port))), simulate=False)
        source = open_source(data / "videos" / "single.mkv", camera=False, replay=True)
        pipeline = Pipeline(
            source,
            str(data / "models" / "single_instance"),
            load=LoadOptions(device="cpu"),
            experiment=loop,
        )
        stats = pipeline.run()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.sendto(b"stop", ("127.0.0.1", int(udp_port)))
        child.communicate(timeout=30)
        sent = [
            (at - entry.capture_time) * 1000
            for entry in loop.log.entries
            for at, _ in entry.sent.values()
            if at is not None
        ]
        assert stats.latency_p50 is not None and stats.engine_latency_p50 is not None
        capture_to_sent = float(np.percentile(sent, 50))
        engine = stats.engine_latency_p50 * 1000
        print(
            f"run {run + 1}: {len(sent)} events, {stats.frames_processed} frames "
            f"({stats.frames_dropped} dropped); p50 capture -> sent {capture_to_sent:.2f} ms, "
            f"capture -> pose {stats.latency_p50 * 1000:.2f} ms, engine {engine:.2f} ms: "
            f"capture -> sent = engine + {capture_to_sent - engine:.2f} ms"
        )


def bench_predict() -> None:
    from sleap_live.stream.experiment.predict import (
        DEFAULT_ACCELERATION,
        DEFAULT_NOISE,
        ForwardPredictor,
    )

    data = Path(__file__).resolve().parents[1] / "tests" / "data"
    clips: dict[str, list[FramePoses]] = {}
    for name in ("single", "multi_gray", "multi_rgb"):
        truth = np.load(data / "ground_truth" / f"{name}.npz")["points"]
        ids = np.arange(truth.shape[1], dtype=np.int32) if truth.shape[1] > 1 else [-1]
        clips[f"ground truth {name}"] = [_poses(p, np.asarray(ids, np.int32)) for p in truth]
    for name in ("single_instance", "multi_class_bottomup", "multi_class_topdown"):
        golden = np.load(data / "goldens" / f"{name}.npz")
        clips[f"sleap-nn {name}"] = [
            _poses(golden["points"][i, :n], golden["track_ids"][i, :n].astype(np.int32))
            for i, n in enumerate(golden["n_instances"])
        ]
    settings = [(DEFAULT_ACCELERATION, DEFAULT_NOISE)] + [
        (q, r) for q in (3e4, 1e5, 1e6) for r in (1.0, 3.0)
    ]
    for acceleration, noise in settings:
        print(f"acceleration {acceleration:g} px^2/s^3, noise {noise:g} px:")
        for name, frames in clips.items():
            predictor = ForwardPredictor(acceleration, noise)
            for i, poses in enumerate(frames):
                predictor.update(poses, i / 30)
            error = predictor.error()
            change = error.predicted / error.unpredicted - 1
            print(
                f"  {name}: {error.predicted:.2f} px predicted, {error.unpredicted:.2f} px "
                f"unpredicted ({change:+.0%}), {error.points} points"
            )


def _poses(points: np.ndarray, ids: np.ndarray) -> FramePoses:
    n, nodes = points.shape[:2]
    return FramePoses(
        points.astype(np.float32), np.ones((n, nodes), np.float32), np.ones(n, np.float32), ids
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20000, help="frames for the rules")
    parser.add_argument("--transitions", type=int, default=1000, help="per device")
    parser.add_argument("--rate", type=float, default=200.0, help="frames a second")
    parser.add_argument("--only", choices=("rules", "outputs", "capture", "predict"))
    parser.add_argument("--runs", type=int, default=3, help="whole runs (capture)")
    parser.add_argument("--kinds", action="store_true", help="also each kind's cost (rules)")
    args = parser.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    if args.only in (None, "rules"):
        for reordered, rows in ((False, ""), (True, ", rows in a new order every frame")):
            p50, p99, cpu50, cpu99 = bench_rules(args.frames, reordered)
            print(
                f"rules: 10 rules x 10 animals{rows}, {args.frames} frames: wall p50 "
                f"{p50 * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us; thread CPU p50 "
                f"{cpu50 * 1e6:.1f} us, p99 {cpu99 * 1e6:.1f} us a frame"
            )
        if args.kinds:
            for name, p50 in bench_kinds(min(args.frames, 5000)).items():
                print(f"  {name}: thread CPU p50 {p50 * 1e6:.1f} us")
    if args.only in (None, "outputs"):
        bench_outputs(args.transitions, args.rate)
    if args.only in (None, "capture"):
        bench_capture(args.runs)
    if args.only in (None, "predict"):
        bench_predict()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
