"""What publishing poses over ZeroMQ (`--publish`) adds to a run's latency.

    python scripts/bench_publish.py [--records 5000] [--repeats 3] [--fps 30] [--json out.json]
    python scripts/bench_publish.py --flood 30 [--flood-rate 50000] [--flood-topics 300]
        [--fps 30] [--json out.json]

Three figures, each with a subscriber in another process (plain pyzmq + msgpack)
connected to the publisher and its subscription arrived before timing starts:

1. **send**: `Publisher.send` per record (building the message, msgpack, handing it
   to ZeroMQ), timed one call at a time over `--records` records, for the
   top-down fixture's poses (2 instances x 5 nodes) and for 20 instances x 50 nodes,
   paced at 1 kHz (as frames come: each call finds the caches and the core cold),
   and back to back (the CPU cost alone);
2. **ready -> received**: for each message, the subscriber's `time.monotonic()` when
   it arrived minus the record's `ready_time` (same machine, same clock on Linux):
   everything publishing adds after the poses are ready. Through the pipeline,
   its first part, **ready -> publish thread** (the publish thread's wake-up), is
   timed on its own;
3. **capture -> pose**: the pipeline's own latency (`stats.latency_p50/p99`),
   replaying tests/data/videos/demo.mp4 at `--fps` through the top-down fixture
   (the sleap-nn export in tests/data/exports/topdown, ONNX Runtime on the CPU),
   with and without publishing, runs alternating, `--repeats` each.

With ``--flood SECONDS`` it measures instead a publishing run under a subscription
flood: demo.mp4 looped to SECONDS, replayed at `--fps` with publishing and a normal
subscriber, once with no flood and once while a peer on 127.0.0.1 (another
process, plain pyzmq) sends subscribe messages as fast as it can for SECONDS; per
run its fps, frames dropped, the messages the subscriber received, and this
process's RSS growth (sampled every 0.2 s, the most over the run's start).

Wall-clock figures on this machine, as loaded as it is.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream import Pipeline, PoseRecord, Publisher, open_source

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

# A subscriber that records, per message, its arrival minus the record's ready time;
# once its stdin closes it drains, then prints the list as JSON.
SUBSCRIBER = """
import json, sys, time
import msgpack, zmq
context = zmq.Context()
socket = context.socket(zmq.SUB)
socket.connect(sys.argv[1])
socket.subscribe(b"poses")
print("subscribed", flush=True)
poller = zmq.Poller()
poller.register(sys.stdin, zmq.POLLIN)
poller.register(socket, zmq.POLLIN)
delays = []
def take():
    topic, payload = socket.recv_multipart()
    arrived = time.monotonic()
    delays.append(arrived - msgpack.unpackb(payload)["ready_time"])
while True:
    ready = dict(poller.poll())
    if socket in ready:
        take()
    if sys.stdin.fileno() in ready and not sys.stdin.read(1):
        break
while socket.poll(300):
    take()
print(json.dumps(delays), flush=True)
"""


# A peer that sends subscribe messages to argv[1] for argv[2] seconds, argv[3] a
# second (0: as fast as it can), from a raw XSUB socket (every one goes out, none
# merged), then prints how many it sent: "poses" each time, or with argv[4] > 0 a
# distinct topic of that many bytes each time.
FLOODER = """
import sys, time
import zmq
context = zmq.Context()
socket = context.socket(zmq.XSUB)
socket.connect(sys.argv[1])
start = time.monotonic()
end = start + float(sys.argv[2])
rate = float(sys.argv[3])
size = int(sys.argv[4])
sent = 0
while time.monotonic() < end:
    if rate and sent > rate * (time.monotonic() - start):
        time.sleep(0.005)
        continue
    for _ in range(1000):
        try:
            topic = (b"%012d" % sent).ljust(size, b"x") if size else b"poses"
            socket.send(b"\\x01" + topic, zmq.NOBLOCK)
            sent += 1
        except zmq.Again:
            time.sleep(0.001)
print(sent, flush=True)
socket.close(linger=0)
context.term()
"""


class TimedPublisher(Publisher):
    """A `Publisher` that notes, per record, how long after its ready time it came to send."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint)
        self.waits: list[float] = []

    def send(self, record: PoseRecord, sequence: int, info: ModelInfo) -> None:
        self.waits.append(time.monotonic() - record.ready_time)
        super().send(record, sequence, info)


class Subscriber:
    """`SUBSCRIBER` in a subprocess, its subscription arrived at `publisher`."""

    def __init__(self, publisher: Publisher) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", SUBSCRIBER, publisher.endpoint],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self._process.stdout.readline()
        if not publisher.wait_for_subscribers(1, timeout=60):
            raise RuntimeError("the subscriber's subscription never arrived")

    def delays(self) -> list[float]:
        out, _ = self._process.communicate(timeout=60)
        return list(json.loads(out.splitlines()[-1]))


def percentiles_us(seconds: list[float]) -> dict[str, float]:
    values = np.array(seconds) * 1e6
    return {
        "n": len(values),
        "p50_us": float(np.percentile(values, 50)),
        "p99_us": float(np.percentile(values, 99)),
    }


def time_send(instances: int, nodes: int, records: int, pace: float) -> dict[str, Any]:
    """Figures 1 and 2 for records of `instances` x `nodes`, one every `pace` seconds."""
    info = ModelInfo(
        model_type="bottomup",
        skeleton=Skeleton(node_names=tuple(f"node{i}" for i in range(nodes))),
        input_channels=1,
        max_instances=instances,
    )
    rng = np.random.default_rng(0)
    poses = FramePoses(
        points=rng.uniform(0, 500, (instances, nodes, 2)).astype(np.float32),
        point_scores=rng.uniform(0, 1, (instances, nodes)).astype(np.float32),
        instance_scores=rng.uniform(0, 1, instances).astype(np.float32),
        identities=np.full(instances, -1, np.int32),
    )
    took = []
    with Publisher("tcp://127.0.0.1:*") as publisher:
        subscriber = Subscriber(publisher)
        for sequence in range(records):
            now = time.monotonic()
            record = PoseRecord(sequence, now, now, "bench", poses)
            started = time.perf_counter()
            publisher.send(record, sequence, info)
            took.append(time.perf_counter() - started)
            if pace:
                time.sleep(pace)
        publisher.close()
        delays = subscriber.delays()
    return {
        "poses": f"{instances} instances x {nodes} nodes",
        "pace_s": pace,
        "send": percentiles_us(took),
        "ready_to_received": percentiles_us(delays),
    }


def replay_latency(fps: float, publish: bool) -> dict[str, Any]:
    """Figure 3 (and 2, through the pipeline) for one replay of the demo clip."""
    runner = load_runner([str(DATA / "exports" / "topdown")], engine="onnx", device="cpu")
    source = open_source(DATA / "videos" / "demo.mp4", replay=True, fps=fps)
    result: dict[str, Any] = {"publish": publish}
    try:
        if not publish:
            stats = Pipeline(source, runner).run()
        else:
            with TimedPublisher("tcp://127.0.0.1:*") as publisher:
                subscriber = Subscriber(publisher)
                pipeline = Pipeline(source, runner)
                pipeline.attach(publisher)
                stats = pipeline.run()
                publisher.close()
                result["ready_to_publish_thread"] = percentiles_us(publisher.waits)
                result["ready_to_received"] = percentiles_us(subscriber.delays())
    finally:
        runner.close()
    assert stats.latency_p50 is not None and stats.latency_p99 is not None
    result.update(
        frames=stats.frames_processed,
        dropped=stats.frames_dropped,
        capture_to_pose_p50_ms=stats.latency_p50 * 1e3,
        capture_to_pose_p99_ms=stats.latency_p99 * 1e3,
    )
    return result


def rss_bytes() -> int:
    """This process's resident set size (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def looped_clip(seconds: float, folder: Path) -> Path:
    """demo.mp4 repeated to at least `seconds` (at its 30 fps), re-encoded in `folder`."""
    import av

    path = folder / "looped.mp4"
    with av.open(str(DATA / "videos" / "demo.mp4")) as clip:
        frames = [frame.to_ndarray(format="rgb24") for frame in clip.decode(video=0)]
    repeats = max(1, int(np.ceil(seconds * 30 / len(frames))))
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        for _ in range(repeats):
            for pixels in frames:
                out.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        out.mux(stream.encode(None))
    return path


def cpu_seconds() -> float:
    """CPU time this process has used, all its threads (ZeroMQ's among them)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def flood_run(
    clip: Path, fps: float, flood_seconds: float | None, rate: float, topic_bytes: int = 0
) -> dict[str, Any]:
    """One publishing replay of `clip`, flooded for `flood_seconds` (None: no flood)."""
    runner = load_runner([str(DATA / "exports" / "topdown")], engine="onnx", device="cpu")
    source = open_source(clip, replay=True, fps=fps)
    result: dict[str, Any] = {"flood": flood_seconds is not None}
    peak = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.2):
            peak[0] = max(peak[0], rss_bytes())

    try:
        with Publisher("tcp://127.0.0.1:*") as publisher:
            subscriber = Subscriber(publisher)
            flooder = None
            if flood_seconds is not None:
                flooder = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        FLOODER,
                        publisher.endpoint,
                        str(flood_seconds),
                        str(rate),
                        str(topic_bytes),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            start_rss = peak[0] = rss_bytes()
            start_cpu = cpu_seconds()
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            pipeline = Pipeline(source, runner)
            pipeline.attach(publisher)
            stats = pipeline.run()
            result["cpu_s"] = cpu_seconds() - start_cpu
            sampling.set()
            sampler.join()
            if flooder is not None:
                out, _ = flooder.communicate(timeout=flood_seconds + 60)
                result["flood_messages"] = int(out.split()[-1])
            publisher.close()
            result["received"] = len(subscriber.delays())
    finally:
        runner.close()
    result.update(
        frames=stats.frames_processed,
        dropped=stats.frames_dropped,
        sent=stats.publish.sent if stats.publish is not None else 0,
        fps=stats.frames_processed / stats.elapsed,
        rss_start_mib=start_rss / 2**20,
        rss_growth_mib=(peak[0] - start_rss) / 2**20,
    )
    return result


def flood(seconds: float, fps: float, rate: float, topic_bytes: int = 0) -> list[dict[str, Any]]:
    """`flood_run` without, then with, the flood; each printed as it ends."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        clip = looped_clip(seconds, Path(folder))
        for flooded in (None, seconds):
            run = flood_run(clip, fps, flooded, rate, topic_bytes)
            runs.append(run)
            print(
                f"{'flood' if flooded else 'no flood'}: {run['frames']} frames "
                f"({run['dropped']} dropped) at {run['fps']:.2f} fps, "
                f"{run['received']}/{run['sent']} received by the subscriber, RSS "
                f"{run['rss_start_mib']:.0f} MiB + {run['rss_growth_mib']:.1f} MiB, "
                f"{run['cpu_s']:.1f} s CPU in this process"
                + (f", {run['flood_messages']:,} subscribe messages" if flooded else ""),
                flush=True,
            )
    calm, flooded_run = runs
    print(
        f"under the flood: fps {100 * (flooded_run['fps'] / calm['fps'] - 1):+.1f}%, "
        f"RSS growth {flooded_run['rss_growth_mib']:.1f} MiB"
    )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000, help="records per send timing")
    parser.add_argument("--repeats", type=int, default=3, help="replays with and without")
    parser.add_argument("--fps", type=float, default=30.0, help="replay rate")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--flood", type=float, metavar="SECONDS", help="measure a subscription flood instead"
    )
    parser.add_argument(
        "--flood-rate",
        type=float,
        default=0.0,
        help="subscribe messages a second the flooding peer sends (default 0: all it can)",
    )
    parser.add_argument(
        "--flood-topics",
        type=int,
        default=0,
        metavar="BYTES",
        help="each subscribe message a distinct topic of this many bytes (default 0: "
        "'poses' every time)",
    )
    args = parser.parse_args()
    if args.flood is not None:
        runs = flood(args.flood, args.fps, args.flood_rate, args.flood_topics)
        if args.json is not None:
            args.json.write_text(json.dumps({"flood": runs}, indent=2))
        return

    figures: dict[str, Any] = {"send": [], "replay": []}
    for instances, nodes, pace in ((2, 5, 0.001), (2, 5, 0.0), (20, 50, 0.001)):
        row = time_send(instances, nodes, args.records, pace)
        figures["send"].append(row)
        print(
            f"{row['poses']}, {'paced at 1 kHz' if pace else 'back to back'}: "
            f"send p50 {row['send']['p50_us']:.1f} us "
            f"p99 {row['send']['p99_us']:.1f} us; ready -> received "
            f"p50 {row['ready_to_received']['p50_us']:.0f} us "
            f"p99 {row['ready_to_received']['p99_us']:.0f} us "
            f"({row['ready_to_received']['n']}/{args.records} received)",
            flush=True,
        )
    for _ in range(args.repeats):
        for publish in (False, True):
            run = replay_latency(args.fps, publish)
            figures["replay"].append(run)
            line = (
                f"replay at {args.fps:g} fps, publish {'on ' if publish else 'off'}: "
                f"{run['frames']} frames ({run['dropped']} dropped), capture -> pose "
                f"p50 {run['capture_to_pose_p50_ms']:.2f} ms "
                f"p99 {run['capture_to_pose_p99_ms']:.2f} ms"
            )
            if publish:
                woke, received = run["ready_to_publish_thread"], run["ready_to_received"]
                line += (
                    f"; ready -> publish thread p50 {woke['p50_us']:.0f} us "
                    f"p99 {woke['p99_us']:.0f} us"
                    f"; ready -> received p50 {received['p50_us']:.0f} us "
                    f"p99 {received['p99_us']:.0f} us ({received['n']} received)"
                )
            print(line, flush=True)
    for publish in (False, True):
        runs = [run for run in figures["replay"] if run["publish"] == publish]
        print(
            f"median over {len(runs)} replays, publish {'on ' if publish else 'off'}: "
            f"capture -> pose p50 "
            f"{statistics.median(r['capture_to_pose_p50_ms'] for r in runs):.2f} ms, "
            f"p99 {statistics.median(r['capture_to_pose_p99_ms'] for r in runs):.2f} ms"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
