"""Writes tests/data/experiment/rules_decisions.npz: random frames and the decisions
`CompiledRules` of a given commit makes on them, which tests/stream/
test_experiment_rules.py holds every later `CompiledRules` to.

The frames exercise every meaning the rules state: nodes not found (NaN), animals
absent, rows reordered, untracked frames (identity -1), empty and single-animal
frames, and a repeated time (no speed). The experiment has every kind of leaf, each
with any animal and with a named one, under all/any/not.

Usage (from the repository root)::

    .venv/bin/python scripts/make_rules_fixture.py [--commit 8a3b0fa]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.experiment import check_experiment, experiment_from_dict

NODES = ("nose", "head", "body", "tail_base", "tail_tip")
INFO = ModelInfo("bottomup", Skeleton(NODES), 6, None)
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "experiment" / "rules_decisions.npz"


def _region(name: str, node: str, animal: str | None = None) -> dict:
    leaf: dict = {"region": name, "node": node}
    if animal is not None:
        leaf["animal"] = animal
    return {"in_region": leaf}


EXPERIMENT = {
    "regions": {
        "box": {"rectangle": [10, 10, 50, 60]},
        "oval": {"ellipse": {"center": [60, 40], "radii": [25, 10], "angle": 30}},
        "disc": {"ellipse": {"center": [30, 70], "radii": [15, 15], "angle": 0}},
        "tri": {"polygon": [[0, 0], [60, 0], [0, 60]]},
        # Concave: an L.
        "ell": {"polygon": [[40, 40], [100, 40], [100, 60], [60, 60], [60, 100], [40, 100]]},
    },
    "rules": {
        "box": {"when": _region("box", "nose")},
        "box_2": {"when": _region("box", "body", "track_2")},
        "oval": {"when": _region("oval", "head")},
        "disc_0": {"when": _region("disc", "tail_tip", "track_0")},
        "tri": {"when": _region("tri", "nose")},
        "ell_1": {"when": _region("ell", "body", "track_1")},
        "long": {
            "when": {
                "distance": {"from": {"node": "nose"}, "to": {"node": "tail_tip"}, "above": 39.6}
            }
        },
        "band_3": {
            "when": {
                "distance": {
                    "from": {"node": "head", "animal": "track_3"},
                    "to": {"node": "tail_base"},
                    "above": 19.8,
                    "below": 25,
                }
            }
        },
        "near_other": {
            "when": {
                "distance": {
                    "from": {"node": "nose"},
                    "to": {"node": "tail_base", "animal": "other"},
                    "below": 15,
                }
            }
        },
        "far_0_to_1": {
            "when": {
                "distance": {
                    "from": {"node": "nose", "animal": "track_0"},
                    "to": {"node": "tail_tip", "animal": "track_1"},
                    "above": 40,
                }
            }
        },
        "facing": {
            "when": {"angle": {"from": "head", "to": "nose", "point": [50, 50], "below": 30}}
        },
        "turned_4": {
            "when": {
                "angle": {
                    "from": "head",
                    "to": "nose",
                    "reference": ["tail_base", "body"],
                    "above": 20,
                    "below": 120,
                    "animal": "track_4",
                }
            }
        },
        "fast": {"when": {"speed": {"node": "body", "above": 330}}},
        "slow_5": {"when": {"speed": {"node": "nose", "below": 60, "animal": "track_5"}}},
        "straight": {
            "when": {
                "posture": {
                    "template": {"nose": [0, 0], "head": [0, 10], "body": [0, 20]},
                    "tolerance": 0.3,
                }
            }
        },
        "straight_2": {
            "when": {
                "posture": {
                    "template": {"head": [0, 0], "body": [0, 10], "tail_tip": [0, 30]},
                    "tolerance": 0.6,
                    "animal": "track_2",
                }
            }
        },
        "combined": {
            "when": {
                "any": [
                    {"all": [_region("box", "nose"), {"not": _region("tri", "body")}]},
                    {"not": {"speed": {"node": "head", "above": 100, "animal": "track_1"}}},
                ]
            }
        },
        "nested": {
            "when": {
                "all": [
                    {"any": [_region("oval", "nose", "track_4"), _region("ell", "head")]},
                    {"not": {"not": _region("disc", "body")}},
                ]
            }
        },
    },
}


def frames(count: int, rng: np.random.Generator) -> list[tuple[FramePoses, float]]:
    """Six tracked animals (chains of nodes about 10 px apart, bending) wandering a
    100 x 100 arena, and what each frame loses."""
    centre = rng.uniform(10, 90, (6, 2))
    heading = rng.uniform(0, 2 * np.pi, 6)
    out = []
    time = 0.0
    for _ in range(count):
        heading += rng.normal(0, 0.4, 6)
        step = np.stack([np.cos(heading), np.sin(heading)], axis=1)
        centre = np.clip(centre + rng.uniform(0, 8, (6, 1)) * step, 0, 100)
        bends = np.cumsum(rng.normal(0, 0.3, (6, 5)), axis=1)
        offsets = -10 * np.cumsum(
            np.stack([np.cos(heading[:, None] + bends), np.sin(heading[:, None] + bends)], axis=2),
            axis=1,
        )
        points = (centre[:, None, :] + offsets - offsets[:, :1]).astype(np.float32)
        points[rng.random(points.shape[:2]) < 0.08] = np.nan
        ids = np.arange(6, dtype=np.int32)
        kind = rng.random()
        if kind < 0.15:
            keep = np.sort(rng.choice(6, rng.integers(1, 6), replace=False))
            points, ids = points[keep], ids[keep]  # some animals absent
        elif kind < 0.25:
            order = rng.permutation(6)
            points, ids = points[order], ids[order]  # rows reordered
        elif kind < 0.3:
            ids[:] = -1  # untracked
        elif kind < 0.33:
            points, ids = points[:1], ids[:1] * 0 - rng.integers(0, 2)  # one animal, -1 or 0
        elif kind < 0.35:
            points, ids = points[:0], ids[:0]  # nothing found
        if rng.random() > 0.03:
            time += 1 / 30  # else the same time again: no speed
        n = len(ids)
        poses = FramePoses(
            points, np.ones((n, 5), np.float32), np.ones(n, np.float32), ids.astype(np.int32)
        )
        out.append((poses, time))
    return out


def compiled_rules_of(commit: str) -> type:
    """`CompiledRules` as stream/experiment/rules.py was at `commit`."""
    source = subprocess.run(
        ["git", "show", f"{commit}:stream/experiment/rules.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rules_at_commit.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("rules_at_commit", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.CompiledRules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="8a3b0fa", help="the CompiledRules to record")
    parser.add_argument("--frames", type=int, default=400)
    args = parser.parse_args(argv)
    experiment = experiment_from_dict(EXPERIMENT)
    check_experiment(experiment, INFO)
    rules = compiled_rules_of(args.commit)(experiment, INFO)
    data = frames(args.frames, np.random.default_rng(39))
    decisions = np.asarray([rules.evaluate(poses, time) for poses, time in data], np.int8)
    counts = np.asarray([len(poses.identities) for poses, _ in data])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT,
        experiment=json.dumps(EXPERIMENT),
        commit=args.commit,
        counts=counts,
        points=np.concatenate([poses.points for poses, _ in data]),
        identities=np.concatenate([poses.identities for poses, _ in data]),
        times=np.asarray([time for _, time in data]),
        decisions=decisions,
    )
    shares = {v: float((decisions == v).mean()) for v in (1, 0, -1)}
    print(f"{OUT}: {len(data)} frames, decisions TRUE/FALSE/UNKNOWN {shares}")
    for name, column in zip(EXPERIMENT["rules"], decisions.T, strict=True):
        print(f"  {name}: " + " ".join(f"{(column == v).sum()}" for v in (1, 0, -1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
