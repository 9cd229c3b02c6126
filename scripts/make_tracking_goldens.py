"""Track ids from sleap-nn 0.3.5's tracker on fixed poses: tests/data/goldens/tracking.npz.

Run with the sleap-nn venv from the repository root::

    /work/venvs/snn/bin/python scripts/make_tracking_goldens.py

Pose sets (each stored in the golden, so the tests feed our tracker the same poses):

- ``topdown``, ``bottomup``: the committed predictions of the two-animal test clip
  (tests/data/goldens/topdown.npz, bottomup.npz), 200 frames.
- ``crossing``: two synthetic animals whose paths cross at right angles, then pass
  head-on on one line; node noise, missed nodes and one missed detection.
- ``crowd``: ten synthetic animals on random walks in a 1024 x 1024 arena, with node
  noise, missed nodes and missed detections (tracks end and new ones start).
- ``edges``: three animals with empty frames (first and later), detections with no
  node or one node found, and spurious detections.

Every set is tracked by `sleap_nn.tracking.tracker.Tracker.from_config(**options)`
for each case of `CASES` (sleap-nn's defaults, then one option changed at a time),
one `Tracker.track` call per frame as `run_tracker` makes them. The golden keeps
each instance's track id (the number in sleap-nn's ``track_N`` name), -1 for an
instance sleap-nn returned without a track or left out of its output, -2 for
padding rows.

It also runs ``sleap-nn predict --tracking`` (defaults) with the top-down and
bottom-up test models on the test clip and keeps its track ids
(``predict_tracks__NAME``, instances in the order of tests/data/goldens/NAME.slp,
the same predictions without tracks); ``--only-predict`` redoes just that part.

The MOT golden, tests/data/goldens/tracking_mot.npz (``--only-mot`` makes just it,
from the poses of tracking.npz): sleap-nn's SORT, ByteTrack and OC-SORT
(`sleap_nn.tracking.mot.build_mot_tracker` with `MOTParams.for_tracker(NAME)`, the
"animal" preset, and each case of `MOT_CASES`), one `track(instances, frame_idx)`
call per frame without `prepare()`/`finalize()`, as they run online, on the same
pose sets (the crowd's first 150 frames) plus ``crowd_gaps`` (the crowd with every
13th frame skipped: frame indices with holes) and ``centroids`` (the crowd's
middle node only: a one-node skeleton). Instances carry point scores (``scores__SET``: the committed
predictions' own; drawn for the synthetic sets, so that every score threshold is
crossed). ``mot__SET__CASE`` is each instance's track id once the video is done
(a confirmed track's earlier detections labelled), -1 untracked, -2 padding.

The appearance golden, tests/data/goldens/tracking_embeddings.npz (``--only-embeddings``
makes just it): the ``reid`` set (`reid_poses`: a head-on crossing on one line, where
geometry alone swaps the two animals, and an occlusion longer than the window) with a
synthetic appearance vector per instance (`reid_vectors`: its animal's prototype plus
noise, unit length; a few instances without one), put on each sleap-io instance as
``identity_embedding`` (``sio.Embedding``), as sleap-nn's embedding route does. Each
case of `EMBEDDING_CASES` runs `Tracker.from_config` with the candidates and scoring
method `apply_tracking` resolves for it; ``tracks__reid__CASE`` as above, and
``animals__reid`` each instance's true animal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "goldens" / "tracking.npz"
OUT_MOT = ROOT / "tests" / "data" / "goldens" / "tracking_mot.npz"
OUT_EMBEDDINGS = ROOT / "tests" / "data" / "goldens" / "tracking_embeddings.npz"

# Frames of the crowd the MOT golden tracks.
MOT_CROWD_FRAMES = 150

# name -> (tracker, `MOTParams` overrides on its "animal" preset).
MOT_CASES: dict[str, tuple[str, dict[str, object]]] = {
    "sort": ("sort", {}),
    "bytetrack": ("bytetrack", {}),
    "ocsort": ("ocsort", {}),
    "sort_min_hits_1_buffer_5": ("sort", {"min_hits": 1, "track_buffer": 5}),
    "bytetrack_thresholds": (
        "bytetrack",
        {"track_high_threshold": 0.6, "new_track_threshold": 0.7, "min_match_similarity": 0.3},
    ),
    "ocsort_min_hits_2": ("ocsort", {"min_hits": 2, "track_low_threshold": 0.2}),
}

# name -> options of `Tracker.from_config` (sleap-nn's names), applied to every set.
CASES: dict[str, dict[str, object]] = {
    "defaults": {},
    "local_queues": {"candidates_method": "local_queues"},
    "max_tracks": {"max_tracks": 2},
    "cosine_sim": {"scoring_method": "cosine_sim"},
    "iou_bboxes": {"scoring_method": "iou", "features": "bboxes"},
    "euclidean_centroids": {"scoring_method": "euclidean_dist", "features": "centroids"},
    "reduction_max": {"scoring_reduction": "max"},
    "robust_quantile": {"scoring_reduction": "robust_quantile", "robust_best_instance": 0.95},
    "greedy": {"track_matching_method": "greedy"},
    "window_10_min_points": {"window_size": 10, "min_new_track_points": 2, "min_match_points": 1},
}

# name -> `Tracker.from_config` options on the ``reid`` set, as `apply_tracking`
# resolves them (features="embeddings": cosine_sim, local_queues unless given).
EMBEDDING_CASES: dict[str, dict[str, object]] = {
    "geometry": {},
    "embeddings": {
        "features": "embeddings",
        "scoring_method": "cosine_sim",
        "candidates_method": "local_queues",
    },
    "embeddings_fixed_window_max": {
        "features": "embeddings",
        "scoring_method": "cosine_sim",
        "candidates_method": "fixed_window",
        "scoring_reduction": "max",
    },
    "embeddings_robust_quantile_max_tracks": {
        "features": "embeddings",
        "scoring_method": "cosine_sim",
        "candidates_method": "local_queues",
        "scoring_reduction": "robust_quantile",
        "robust_best_instance": 0.8,
        "max_tracks": 3,
    },
    "embeddings_euclidean": {
        "features": "embeddings",
        "scoring_method": "euclidean_dist",
        "candidates_method": "local_queues",
        "min_match_points": 3,
    },
    "appearance_oks": {"appearance_weight": 0.3},
    "appearance_oks_local_queues": {
        "appearance_weight": 0.7,
        "candidates_method": "local_queues",
        "window_size": 8,
    },
    "appearance_iou": {"features": "bboxes", "scoring_method": "iou", "appearance_weight": 1.0},
    "appearance_euclidean": {
        "features": "centroids",
        "scoring_method": "euclidean_dist",
        "appearance_weight": 0.5,
        "euclidean_scale": 10.0,
    },
}
EMBEDDING_DIM = 8

NODES = 5


def _chain(center: np.ndarray, heading: float, length: float = 40.0) -> np.ndarray:
    """A five-node chain (nose first) centred on `center`, pointing along `heading`."""
    direction = np.array([np.cos(heading), np.sin(heading)])
    offsets = np.linspace(0.5, -0.5, NODES)[:, None] * length * direction
    return center + offsets


def _degrade(
    poses: np.ndarray, rng: np.random.Generator, noise: float, p_node: float, p_miss: float
) -> tuple[np.ndarray, np.ndarray]:
    """Node noise, missed nodes and missed detections; returns padded points and counts."""
    frames, animals = poses.shape[:2]
    poses = poses + rng.normal(0, noise, poses.shape)
    poses[rng.random(poses.shape[:3]) < p_node] = np.nan
    out = np.full_like(poses, np.nan)
    counts = np.zeros(frames, np.int32)
    for frame in range(frames):
        kept = [a for a in range(animals) if rng.random() >= p_miss]
        # Detections come in no particular order, as a model reports them.
        kept = list(rng.permutation(kept))
        out[frame, : len(kept)] = poses[frame, kept]
        counts[frame] = len(kept)
    return out.astype(np.float32), counts


def crossing_poses() -> tuple[np.ndarray, np.ndarray]:
    """Two animals: an X crossing (frames 0-59), then a head-on pass on one line."""
    frames = []
    for t in range(60):  # A rightwards along y=200, B downwards along x=200; meet at t=30
        a = _chain(np.array([80.0 + 4 * t, 200.0]), 0.0)
        b = _chain(np.array([200.0, 80.0 + 4 * t]), np.pi / 2)
        frames.append([a, b])
    for t in range(60):  # A rightwards, B leftwards, 6 px apart in y; meet at t=30
        a = _chain(np.array([80.0 + 4 * t, 300.0]), 0.0)
        b = _chain(np.array([320.0 - 4 * t, 306.0]), np.pi)
        frames.append([a, b])
    rng = np.random.default_rng(7)
    return _degrade(np.array(frames), rng, noise=0.7, p_node=0.03, p_miss=0.01)


def crowd_poses(animals: int = 10, n_frames: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """`animals` animals on smooth random walks in a 1024 x 1024 arena."""
    rng = np.random.default_rng(11)
    position = rng.uniform(100, 924, (animals, 2))
    heading = rng.uniform(-np.pi, np.pi, animals)
    frames = []
    for _ in range(n_frames):
        heading += rng.normal(0, 0.15, animals)
        step = 6.0 * np.stack([np.cos(heading), np.sin(heading)], axis=1)
        position = position + step
        # Turn back from the walls.
        outside = (position < 60) | (position > 964)
        heading[outside.any(axis=1)] += np.pi
        position = np.clip(position, 60, 964)
        frames.append([_chain(position[i], heading[i]) for i in range(animals)])
    return _degrade(np.array(frames), rng, noise=1.0, p_node=0.05, p_miss=0.02)


def edge_poses() -> tuple[np.ndarray, np.ndarray]:
    """Three animals and the awkward cases: empty frames first and later, a detection
    with no node found, single-node detections, a spurious fourth detection."""
    rng = np.random.default_rng(5)
    n_frames, width = 60, 4
    points = np.full((n_frames, width, NODES, 2), np.nan, np.float32)
    counts = np.zeros(n_frames, np.int32)
    for frame in range(n_frames):
        if frame < 3 or frame in (20, 21):
            continue  # nothing found
        rows = [
            _chain(np.array([100.0 + 3 * frame + 80 * a, 150.0 + 10 * a]), 0.3 * a)
            + rng.normal(0, 0.5, (NODES, 2))
            for a in range(3)
        ]
        if frame % 7 == 0:
            rows[1][:] = np.nan  # a detection with no node
        if frame % 5 == 0:
            rows[2][1:] = np.nan  # one node only
        if frame % 11 == 0:
            rows.append(rng.uniform(0, 400, (NODES, 2)))  # spurious
        order = rng.permutation(len(rows))
        counts[frame] = len(rows)
        points[frame, : len(rows)] = np.array(rows)[order]
    return points, counts


def reid_poses() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three animals; (points, counts, each row's animal (-1 padding)).

    A (0) and B (1) walk towards each other on one line and pass through each
    other (frames 20-59): a tracker without appearance swaps them as they part.
    Then A hides for 20 frames (more than the window) while B walks to where A
    was; A comes back where B was. C (2) grazes apart throughout, with no node
    found every 17th frame (a detection that cannot start a track). Frames 0-2 and
    110-111 are empty.
    """
    rng = np.random.default_rng(13)
    frames = []
    for t in range(120):
        if t < 20:
            a, b = 100.0, 300.0
        elif t < 60:
            a, b = 100.0 + 5 * (t - 20), 300.0 - 5 * (t - 20)
        else:
            a, b = 300.0, 100.0 + min(t - 60, 40) * 5
        row = {0: _chain(np.array([a, 200.0]), 0.0), 1: _chain(np.array([b, 200.0]), np.pi)}
        row[2] = _chain(np.array([200.0 + 20 * np.sin(t / 9), 420.0]), np.pi / 2)
        if 70 <= t < 90:
            del row[0]  # occluded
            row[1] = _chain(np.array([300.0 - min(t - 70, 10) * 20, 200.0]), np.pi)
        if t >= 90:
            row[0] = _chain(np.array([100.0, 200.0]), 0.0)  # back where B was
            row[1] = _chain(np.array([300.0, 200.0]), np.pi)
        frames.append({} if t in (0, 1, 2, 110, 111) else row)
    points = np.full((len(frames), 3, NODES, 2), np.nan, np.float32)
    animals = np.full((len(frames), 3), -1, np.int32)
    counts = np.zeros(len(frames), np.int32)
    for frame, row in enumerate(frames):
        order = list(rng.permutation(sorted(row)))
        for column, animal in enumerate(order):
            pose = row[animal] + rng.normal(0, 0.7, (NODES, 2))
            pose[rng.random(NODES) < 0.03] = np.nan
            if animal == 2 and frame % 17 == 8:
                pose[:] = np.nan
            points[frame, column] = pose
            animals[frame, column] = animal
        counts[frame] = len(order)
    return points, counts, animals


def reid_vectors(animals: np.ndarray) -> np.ndarray:
    """(frames, rows, EMBEDDING_DIM) float32 unit vectors: each animal's prototype
    plus noise; NaN for padding and for the ~1% of instances without a vector."""
    rng = np.random.default_rng(17)
    prototypes = rng.normal(0, 1, (3, EMBEDDING_DIM))
    vectors = prototypes[np.maximum(animals, 0)] + rng.normal(
        0, 0.5, (*animals.shape, EMBEDDING_DIM)
    )
    vectors /= np.linalg.norm(vectors, axis=-1, keepdims=True)
    vectors[(animals < 0) | (rng.random(animals.shape) < 0.01)] = np.nan
    return vectors.astype(np.float32)


def fixture_poses(name: str) -> tuple[np.ndarray, np.ndarray]:
    golden = np.load(ROOT / "tests" / "data" / "goldens" / f"{name}.npz")
    return golden["points"].astype(np.float32), golden["n_instances"].astype(np.int32)


def pose_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {
        "topdown": fixture_poses("topdown"),
        "bottomup": fixture_poses("bottomup"),
        "crossing": crossing_poses(),
        "crowd": crowd_poses(),
        "edges": edge_poses(),
    }


def sleap_nn_tracks(
    points: np.ndarray,
    counts: np.ndarray,
    options: dict[str, object],
    vectors: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """sleap-nn's track id per (frame, instance), and its seconds of `track` calls;
    `vectors` (frames, rows, D), NaN for none, become the instances' embeddings."""
    import sleap_io as sio
    from sleap_nn.tracking.tracker import Tracker

    skeleton = sio.Skeleton([f"n{i}" for i in range(points.shape[2])])
    tracker = Tracker.from_config(**options)
    ids = np.full(points.shape[:2], -2, np.int32)
    seconds = 0.0
    for frame in range(points.shape[0]):
        instances = [
            sio.PredictedInstance.from_numpy(
                points[frame, i].astype(np.float64),
                skeleton=skeleton,
                point_scores=np.ones(points.shape[2]),
                score=1.0,
                identity_embedding=(
                    None
                    if vectors is None or np.isnan(vectors[frame, i]).any()
                    else sio.Embedding(vectors[frame, i])
                ),
            )
            for i in range(counts[frame])
        ]
        ids[frame, : counts[frame]] = -1
        start = time.perf_counter()
        tracked = tracker.track(instances, frame_idx=frame)
        seconds += time.perf_counter() - start
        row_of = {id(instance): row for row, instance in enumerate(instances)}
        for instance in tracked:
            if instance.track is not None:
                ids[frame, row_of[id(instance)]] = int(instance.track.name.split("_")[-1])
    return ids, seconds


# `sleap-nn predict` models of the committed predictions (tests/data/goldens/NAME.slp).
PREDICT_MODELS = {
    "topdown": ["tests/data/models/centroid", "tests/data/models/centered_instance"],
    "bottomup": ["tests/data/models/bottomup"],
}


def predict_tracks(name: str, folder: Path) -> np.ndarray:
    """Track ids of `sleap-nn predict --tracking` on the test clip, in the .slp's order."""
    import sleap_io as sio

    output = folder / f"{name}.slp"
    command = [str(Path(sys.executable).with_name("sleap-nn")), "predict"]
    command += ["--data_path", "tests/data/videos/multi_gray.mkv"]
    command += [arg for model in PREDICT_MODELS[name] for arg in ("--model_paths", model)]
    command += ["--output_path", str(output), "--device", "cpu", "--tracking"]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    frames = sorted(sio.load_slp(str(output)).labeled_frames, key=lambda f: f.frame_idx)
    ids = np.full((len(frames), max(len(f.instances) for f in frames)), -2, np.int32)
    for row, frame in enumerate(frames):
        for column, instance in enumerate(frame.instances):
            track = instance.track
            ids[row, column] = -1 if track is None else int(track.name.split("_")[-1])
    return ids


def _track_set(
    arrays: dict[str, np.ndarray], set_name: str, points: np.ndarray, counts: np.ndarray
) -> None:
    arrays[f"points__{set_name}"] = points
    arrays[f"counts__{set_name}"] = counts
    for case, options in CASES.items():
        ids, seconds = sleap_nn_tracks(points, counts, options)
        arrays[f"tracks__{set_name}__{case}"] = ids
        print(
            f"{set_name:9s} {case:22s} tracks={ids.max() + 1:3d} "
            f"untracked={(ids == -1).sum():4d} {seconds / len(points) * 1e3:.2f} ms/frame"
        )


def mot_pose_sets(golden: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, ...]]:
    """(points, point scores, instance scores, counts, frame indices) of each MOT set.

    Scores are float16 (the golden stores them so); both trackers read them as floats.
    """
    sets: dict[str, tuple[np.ndarray, ...]] = {}
    rng = np.random.default_rng(23)
    for name in ("topdown", "bottomup", "crossing", "crowd", "edges"):
        points, counts = golden[f"points__{name}"], golden[f"counts__{name}"]
        if name == "crowd":  # its first frames: the tests stay cheap
            points, counts = points[:MOT_CROWD_FRAMES], counts[:MOT_CROWD_FRAMES]
        if name in ("topdown", "bottomup"):
            fixture = np.load(ROOT / "tests" / "data" / "goldens" / f"{name}.npz")
            scores = fixture["point_scores"]
            instance = fixture["instance_scores"]
        else:
            # Mostly confident instances, some middling, a few weak: every
            # tracker's score thresholds are crossed.
            level = rng.choice([0.85, 0.45, 0.1], size=points.shape[:2], p=[0.8, 0.15, 0.05])
            noise = rng.normal(0, 0.08, points.shape[:3])
            scores = np.clip(level[..., None] + noise, 0.0, 1.0)
            instance = scores.mean(axis=-1)
        scores, instance = scores.astype(np.float16), instance.astype(np.float16)
        sets[name] = (points, scores, instance, counts, np.arange(len(points)))
    sets.update(derived_sets(sets["crowd"]))
    return sets


def derived_sets(crowd: tuple[np.ndarray, ...]) -> dict[str, tuple[np.ndarray, ...]]:
    """``crowd_gaps`` (every 13th frame skipped) and ``centroids`` (node 2 only)."""
    points, scores, instance, counts, frames = crowd
    kept = np.flatnonzero(frames % 13 != 5)
    return {
        "crowd_gaps": (points[kept], scores[kept], instance[kept], counts[kept], frames[kept]),
        "centroids": (points[:, :, 2:3], scores[:, :, 2:3], instance, counts, frames),
    }


def sleap_nn_mot_tracks(
    arrays: tuple[np.ndarray, ...], tracker: str, overrides: dict[str, object]
) -> tuple[np.ndarray, float]:
    """sleap-nn's MOT track id per (frame, instance) after the whole video, and its
    seconds of `track` calls."""
    import sleap_io as sio
    from sleap_nn.tracking.mot import MOTParams, build_mot_tracker

    points, scores, instance_scores, counts, frame_indices = arrays
    skeleton = sio.Skeleton([f"n{i}" for i in range(points.shape[2])])
    mot = build_mot_tracker(MOTParams.for_tracker(tracker, **overrides))
    frames = []
    seconds = 0.0
    for frame in range(points.shape[0]):
        instances = [
            sio.PredictedInstance.from_numpy(
                points[frame, i].astype(np.float64),
                skeleton=skeleton,
                point_scores=scores[frame, i].astype(np.float64),
                score=float(instance_scores[frame, i]),
            )
            for i in range(counts[frame])
        ]
        start = time.perf_counter()
        mot.track(instances, frame_idx=int(frame_indices[frame]))
        seconds += time.perf_counter() - start
        frames.append(instances)
    ids = np.full(points.shape[:2], -2, np.int32)
    for frame, instances in enumerate(frames):
        for row, instance in enumerate(instances):
            track = instance.track
            ids[frame, row] = -1 if track is None else int(track.name.split("_")[-1])
    return ids, seconds


def make_mot_golden(tracking_golden: Path, out: Path) -> None:
    with np.load(tracking_golden) as golden:
        poses = {key: golden[key] for key in golden.files}
    arrays: dict[str, np.ndarray] = {}
    for set_name, sets in mot_pose_sets(poses).items():
        points, scores, instance = sets[:3]
        if set_name not in ("crowd_gaps", "centroids"):
            arrays[f"scores__{set_name}"] = scores
            arrays[f"instance_scores__{set_name}"] = instance
        for case, (tracker, overrides) in MOT_CASES.items():
            ids, seconds = sleap_nn_mot_tracks(sets, tracker, overrides)
            arrays[f"mot__{set_name}__{case}"] = ids.astype(np.int8)
            print(
                f"{set_name:10s} {case:26s} tracks={ids.max() + 1:3d} "
                f"untracked={(ids == -1).sum():4d} {seconds / len(points) * 1e3:.2f} ms/frame"
            )
    save(out, arrays, MOT_CASES)


def save(out: Path, arrays: dict[str, np.ndarray], cases: object) -> None:
    """Writes a golden: `arrays`, its `cases` (JSON) and sleap-nn's version."""
    import sleap_nn

    arrays["cases"] = np.array(json.dumps(cases))
    arrays["sleap_nn_version"] = np.array(sleap_nn.__version__)
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")


def make_embeddings_golden(out: Path) -> None:
    points, counts, animals = reid_poses()
    vectors = reid_vectors(animals)
    arrays = {
        "points__reid": points,
        "counts__reid": counts,
        "animals__reid": animals.astype(np.int8),
        "embeddings__reid": vectors,
    }
    for case, options in EMBEDDING_CASES.items():
        ids, seconds = sleap_nn_tracks(points, counts, options, vectors)
        arrays[f"tracks__reid__{case}"] = ids.astype(np.int8)
        # How often the track follows its animal (one track per animal at best).
        present = animals >= 0
        pairs = {(a, t) for a, t in zip(animals[present], ids[present], strict=True)}
        print(
            f"reid {case:28s} tracks={ids.max() + 1:3d} untracked={(ids == -1).sum():3d} "
            f"(animal, track) pairs={len(pairs)} {seconds / len(points) * 1e3:.2f} ms/frame"
        )
    save(out, arrays, EMBEDDING_CASES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--sets",
        nargs="+",
        help="only (re)make these pose sets, keeping the rest of the golden",
    )
    parser.add_argument(
        "--only-mot",
        action="store_true",
        help="only (re)make the MOT golden (tracking_mot.npz) from tracking.npz's poses",
    )
    parser.add_argument(
        "--only-embeddings",
        action="store_true",
        help="only (re)make the appearance golden (tracking_embeddings.npz)",
    )
    parser.add_argument(
        "--only-predict",
        action="store_true",
        help="only (re)run `sleap-nn predict --tracking`, keeping the rest of the golden",
    )
    args = parser.parse_args()
    if args.only_mot:
        make_mot_golden(args.out, OUT_MOT)
        return
    if args.only_embeddings:
        make_embeddings_golden(OUT_EMBEDDINGS)
        return

    arrays: dict[str, np.ndarray] = {}
    if args.sets:
        with np.load(args.out) as golden:
            arrays = {key: golden[key] for key in golden.files}
        for set_name, (points, counts) in pose_sets().items():
            if set_name in args.sets:
                _track_set(arrays, set_name, points, counts)
        np.savez_compressed(args.out, **arrays)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
        return
    with tempfile.TemporaryDirectory() as folder:
        for name in PREDICT_MODELS:
            arrays[f"predict_tracks__{name}"] = predict_tracks(name, Path(folder))
    if args.only_predict:
        with np.load(args.out) as golden:
            arrays = {**{key: golden[key] for key in golden.files}, **arrays}
        np.savez_compressed(args.out, **arrays)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
        return
    for set_name, (points, counts) in pose_sets().items():
        _track_set(arrays, set_name, points, counts)
    save(args.out, arrays, CASES)
    make_mot_golden(args.out, OUT_MOT)
    make_embeddings_golden(OUT_EMBEDDINGS)


if __name__ == "__main__":
    main()
