"""What tracking adds per frame: sleap-live's tracker against sleap-nn's, on the same poses.

Poses: synthetic animals on random walks in a 1024 x 1024 arena (the ``crowd`` set
of scripts/make_tracking_goldens.py, with node noise, missed nodes and missed
detections), 2, 5 and 10 animals, 300 frames each. Each frame is tracked on its
own, as at batch 1 in a live run: sleap-live's `PoseTracking.track` (what the emit
stage calls on each frame's poses) and sleap-nn 0.3.5's `Tracker.track` (run in the
sleap-nn venv, on `sleap_io.PredictedInstance`s built before timing starts), both
with sleap-nn's default options (window 5, OKS, mean, Hungarian) unless
``--options`` says otherwise. ``--tracker sort|bytetrack|ocsort`` times the MOT
trackers instead: sleap-nn's `build_mot_tracker(MOTParams.for_tracker(NAME))` (the
"animal" preset, one `track(instances, frame_idx)` call per frame, no `prepare()`)
against ours; their ids are compared once every frame is tracked (a confirmed
track's earlier detections labelled). Prints the p50 and p99 milliseconds per
frame, and whether the two gave the same track ids::

    .venv/bin/python scripts/bench_tracking.py [--snn /work/venvs/snn/bin/python]
        [--animals 2 5 10] [--frames 300] [--tracker classic|sort|bytetrack|ocsort]
        [--options '{"scoring_method": "iou", ...}']
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

# scripts/ is on the path of a script run as `python scripts/NAME.py`.
from make_tracking_goldens import crowd_poses


def _sleap_nn_times(animals: int, frames: int, options: dict) -> tuple[list[float], list]:
    """Runs in the sleap-nn venv: seconds of each `track` call and the ids."""
    import sleap_io as sio
    from sleap_nn.tracking.tracker import Tracker

    points, counts = crowd_poses(animals, frames)
    skeleton = sio.Skeleton([f"n{i}" for i in range(points.shape[2])])
    options = dict(options)
    name = options.pop("tracker", "classic")
    if name != "classic":
        return _sleap_nn_mot_times(name, points, counts, skeleton, options)
    tracker = Tracker.from_config(**options)
    times, ids = [], []
    for frame in range(frames):
        instances = _instances(points[frame, : counts[frame]], skeleton)
        start = time.perf_counter()
        tracked = tracker.track(instances, frame_idx=frame)
        times.append(time.perf_counter() - start)
        names = {id(instance): instance.track for instance in tracked}
        ids.append(
            [
                -1 if names.get(id(i)) is None else int(names[id(i)].name.split("_")[-1])
                for i in instances
            ]
        )
    return times, ids


def _instances(points: np.ndarray, skeleton: object) -> list:
    """One frame's (animals, nodes, 2) points as sleap-io predicted instances, every
    point and instance scored 1, as both sides' trackers are fed."""
    import sleap_io as sio

    return [
        sio.PredictedInstance.from_numpy(
            animal.astype(np.float64),
            skeleton=skeleton,
            point_scores=np.ones(len(animal)),
            score=1.0,
        )
        for animal in points
    ]


def _sleap_nn_mot_times(
    name: str, points: np.ndarray, counts: np.ndarray, skeleton: object, options: dict
) -> tuple[list[float], list]:
    from sleap_nn.tracking.mot import MOTParams, build_mot_tracker

    tracker = build_mot_tracker(MOTParams.for_tracker(name, **options))
    times, every = [], []
    for frame in range(points.shape[0]):
        instances = _instances(points[frame, : counts[frame]], skeleton)
        start = time.perf_counter()
        tracker.track(instances, frame_idx=frame)
        times.append(time.perf_counter() - start)
        every.append(instances)
    ids = [
        [-1 if i.track is None else int(i.track.name.split("_")[-1]) for i in instances]
        for instances in every
    ]
    return times, ids


def _ours_times(animals: int, frames: int, options: dict) -> tuple[list[float], list]:
    from sleap_live.engines.types import FramePoses
    from sleap_live.stream.tracking.live import PoseTracking
    from sleap_live.stream.tracking.settings import TrackingSettings

    points, counts = crowd_poses(animals, frames)
    tracking = PoseTracking(TrackingSettings(**options))
    poses = [
        FramePoses(
            points=points[frame, : counts[frame]],
            point_scores=np.ones((counts[frame], points.shape[2]), np.float32),
            instance_scores=np.ones(counts[frame], np.float32),
            identities=np.full(counts[frame], -1, np.int32),
        )
        for frame in range(frames)
    ]
    times, ids = [], []
    for frame, frame_poses in enumerate(poses):
        start = time.perf_counter()
        tracked = tracking.track(frame_poses, "camera", frame)
        times.append(time.perf_counter() - start)
        ids.append(tracked.poses.identities.tolist())
        for label in tracked.late_labels:  # a MOT track's first frames, labelled late
            ids[label.frame_index][label.row] = label.track_id
    return times, ids


def _ms(times: list[float], q: float) -> float:
    return float(np.percentile(times, q) * 1e3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snn", default="/work/venvs/snn/bin/python", help="sleap-nn's python")
    parser.add_argument("--animals", type=int, nargs="+", default=[2, 5, 10])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument(
        "--tracker", default="classic", choices=["classic", "sort", "bytetrack", "ocsort"]
    )
    parser.add_argument("--options", type=json.loads, default={}, help="tracker options (JSON)")
    parser.add_argument("--sleap-nn-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tracker != "classic":
        args.options = {"tracker": args.tracker, **args.options}
    if args.sleap_nn_worker:
        results = {n: _sleap_nn_times(n, args.frames, args.options) for n in args.animals}
        json.dump(results, sys.stdout)
        return 0
    worker = [args.snn, __file__, "--sleap-nn-worker", "--frames", str(args.frames)]
    worker += ["--animals", *map(str, args.animals), "--options", json.dumps(args.options)]
    theirs = json.loads(subprocess.run(worker, check=True, capture_output=True).stdout)
    print(f"options: {args.options or 'sleap-nn defaults'}; {args.frames} frames, batch 1")
    print("| animals | sleap-live p50 | p99 | sleap-nn p50 | p99 | speed-up (p50) | same ids |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for animals in args.animals:
        ours, our_ids = _ours_times(animals, args.frames, args.options)
        their_times, their_ids = theirs[str(animals)]
        same = our_ids == their_ids
        print(
            f"| {animals} | {_ms(ours, 50):.3f} ms | {_ms(ours, 99):.3f} ms | "
            f"{_ms(their_times, 50):.2f} ms | {_ms(their_times, 99):.2f} ms | "
            f"{_ms(their_times, 50) / _ms(ours, 50):.0f}x | {'yes' if same else 'no'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
