"""Benchmarks of closed-loop experiments (docs/closed-loop.md, docs/benchmarks.md).

``rules``: the time to decide one frame (every condition evaluated, `CompiledRules`,
and every rule's timing stepped, `Timeline`) for 10 rules on 10 tracked animals of
a 5-node skeleton moving at random: p50 and p99 over many frames.

Usage::

    .venv/bin/python scripts/bench_experiment.py [--frames 20000]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.experiment import (
    CompiledRules,
    Timeline,
    check_experiment,
    experiment_from_dict,
)

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


def bench_rules(frames: int) -> tuple[float, float]:
    """p50 and p99 seconds to decide one frame of 10 rules on 10 animals."""
    experiment = experiment_from_dict(TEN_RULES)
    check_experiment(experiment, INFO)
    rules = CompiledRules(experiment, INFO)
    timeline = Timeline(experiment)
    walk = random_walk(frames, 10, np.random.default_rng(0))
    ids = np.arange(10, dtype=np.int32)
    records = [
        FramePoses(p, np.ones(p.shape[:2], np.float32), np.ones(10, np.float32), ids) for p in walk
    ]
    times = np.empty(frames)
    for i, poses in enumerate(records):
        started = time.perf_counter()
        timeline.step(rules.evaluate(poses, i / 30), i, i / 30)
        times[i] = time.perf_counter() - started
    kept = times[frames // 10 :]  # after warm-up
    return float(np.percentile(kept, 50)), float(np.percentile(kept, 99))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20000)
    args = parser.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, numpy {np.__version__}")
    p50, p99 = bench_rules(args.frames)
    print(
        f"rules: 10 rules x 10 animals, {args.frames} frames: "
        f"p50 {p50 * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us a frame"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
