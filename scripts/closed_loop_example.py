"""A closed loop with sleap-live: act on every pose the moment it is ready.

Runs a model on a camera, or on a video replayed at its frame rate so the loop
can be tried without a camera, and fires a trigger whenever a chosen body part
of any animal is in the right-hand part of the frame. A real setup would
switch a laser or a reward valve where this prints.

It shows the three ways to consume poses:

- `Pipeline.on_poses`: a callback run in its own thread for every record. It is
  where closed-loop logic goes: a slow callback falls behind on its own (and is
  told how many records it skipped) without ever delaying inference.
- `Pipeline.ring.reader()`: polling from any thread, here the main thread
  printing the newest pose twice a second.
- `Pipeline.stats`: rates, capture-to-pose latency, drops and queue depths.

Usage::

    python scripts/closed_loop_example.py --camera 0 -m models/single_instance
    python scripts/closed_loop_example.py tests/data/videos/single.mkv \\
        -m tests/data/models/single_instance --seconds 5
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from sleap_live import LoadOptions, Pipeline, PoseRecord, open_source


class RegionTrigger:
    """Fires when `node` of any instance is right of `min_x` (pixels).

    `__call__` is the `on_poses` callback; `skipped` is its `on_skip`. Both run in
    the pipeline's consumer thread for this callback, so they only need a lock
    for what the main thread reads.
    """

    def __init__(self, node: int, min_x: float) -> None:
        self.node = node
        self.min_x = min_x
        self.triggers = 0
        self.trigger_latencies: list[float] = []
        self.skipped_records = 0
        self._inside = False
        self._lock = threading.Lock()

    def __call__(self, record: PoseRecord) -> None:
        x = record.poses.points[:, self.node, 0]
        inside = bool(np.any(x > self.min_x))  # NaN (node not found) compares False
        if inside and not self._inside:
            # Time from the camera capturing the frame to the decision being made.
            latency = time.monotonic() - record.capture_time
            with self._lock:
                self.triggers += 1
                self.trigger_latencies.append(latency)
            print(f"trigger: frame {record.frame_index}, {latency * 1000:.1f} ms after capture")
        self._inside = inside

    def skipped(self, n: int) -> None:
        with self._lock:
            self.skipped_records += n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("video", nargs="?", help="video to replay at its frame rate")
    parser.add_argument("--camera", help="camera index or device instead of a video")
    parser.add_argument("-m", "--model", action="append", required=True, dest="models")
    parser.add_argument("--node", type=int, default=0, help="body part index to watch")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to run")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    if (args.video is None) == (args.camera is None):
        parser.error("give a VIDEO or --camera")

    if args.camera is not None:
        camera = int(args.camera) if args.camera.isdigit() else args.camera
        source = open_source(camera, camera=True)
    else:
        source = open_source(args.video, replay=True)
    trigger = RegionTrigger(args.node, min_x=0.6 * source.frame_shape[1])
    # The models load as `sleap-live run` loads them (an export checked against torch
    # on the video's frames with animals), and close with the pipeline.
    with Pipeline(source, args.models, load=LoadOptions(device=args.device)) as pipeline:
        pipeline.on_poses(trigger, on_skip=trigger.skipped)
        newest = pipeline.ring.reader()
        deadline = time.monotonic() + args.seconds
        # join() returns early if a replayed video ends first.
        while not pipeline.join(timeout=min(0.5, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                break
            record = newest.latest()
            if record is not None:
                print(
                    f"frame {record.frame_index}: {record.poses.n_instances} instances, "
                    f"latency {record.latency * 1000:.1f} ms"
                )
    stats = pipeline.stats

    print(
        f"{stats.frames_processed} frames at {stats.frames_processed / stats.elapsed:.1f} fps, "
        f"{stats.frames_dropped} dropped; capture-to-pose latency p50 "
        f"{(stats.latency_p50 or 0) * 1000:.1f} ms, p99 {(stats.latency_p99 or 0) * 1000:.1f} ms"
    )
    print(f"{trigger.triggers} triggers; the callback skipped {trigger.skipped_records} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
