"""Time the torch, torch-compile, ONNX Runtime and OpenVINO engines on the same frames.

    python scripts/bench_engines.py MODEL_DIR [MODEL_DIR2] [--batch 1 4] [--size 512x512]
        [--channels 1] [--iterations 50] [--warmup 5] [--threads 2] [--video PATH]
        [--passes 6] [--busy-core]

MODEL is anything `load_runner` takes. Each engine runs the same frames (synthetic
blobs, or the first frames of --video) for --warmup untimed and --iterations timed
batches; the table gives load time, the first batch's time (where torch-compile
compiles the batch shape's graph, unless inductor's cache under the sleap-live
cache has it), median and 90th-percentile batch latency, and frames per second.
OpenVINO runs at fp32 (`--engines ... openvino`, the default when it is installed);
its load includes compiling the graph. Run it under `nice` on a shared machine.

Side by side: `--alternate` loads every engine first, then times them batch by batch
in turn (engine A, engine B, A, B, ...), so that a machine whose load changes during
the run slows each engine alike; the table adds each engine's median as a multiple of
the first engine's.

Steadiness: `--passes N` times N back-to-back passes of --iterations batches and
gives each pass's frames per second (min, median, max, and max/min); `--busy-core`
times them twice, as the machine is and while a process of this script's own spins
on one core (started and killed here), the way another program on a shared machine
takes a core. torch's OpenMP threads sleep when idle under sleap-live
(`sleap_live.engines.openmp`); `GOMP_SPINCOUNT=300000` in the environment
brings back torch's own spin-waiting, for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from sleap_live.engines.export.frames import sample_frames
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.load import load_runner


def read_video_frames(path: Path, count: int, channels: int) -> np.ndarray:
    """The first `count` frames of a video as uint8 (count, H, W, channels)."""
    import av

    pixel_format = "gray" if channels == 1 else "rgb24"
    frames = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            image = frame.to_ndarray(format=pixel_format)
            frames.append(image[..., None] if image.ndim == 2 else image)
            if len(frames) == count:
                break
    if not frames:
        raise SystemExit(f"{path}: no frames decoded")
    return np.stack(frames)


@contextlib.contextmanager
def busy_core(busy: bool) -> Iterator[None]:
    """While inside, a child process spins on one core (if `busy`); killed on the way out."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let it start spinning before the timing does
        yield
    finally:
        spinner.kill()
        spinner.wait()


def time_passes(runner: object, batch: np.ndarray, args: argparse.Namespace) -> dict[str, float]:
    """--passes back-to-back passes of --iterations batches: latencies and fps per pass."""
    latencies, pass_fps = [], []
    for _ in range(args.passes):
        started_pass = time.perf_counter()
        for _ in range(args.iterations):
            started = time.perf_counter()
            runner.run(batch)  # type: ignore[attr-defined]
            latencies.append(time.perf_counter() - started)
        pass_fps.append(len(batch) * args.iterations / (time.perf_counter() - started_pass))
    latencies.sort()
    return {
        "median_ms": 1000 * statistics.median(latencies),
        "p90_ms": 1000 * latencies[int(0.9 * (len(latencies) - 1))],
        "fps": len(batch) * len(latencies) / sum(latencies),
        "fps_min": min(pass_fps),
        "fps_median": statistics.median(pass_fps),
        "fps_max": max(pass_fps),
        "spread": max(pass_fps) / min(pass_fps),
    }


def timing_cells(engine: str, size: int, result: dict[str, float]) -> list[str]:
    """One engine's table cells: engine, batch, load and first-batch s, ms, fps."""
    return [
        engine,
        str(size),
        f"{result['load_s']:.2f}",
        f"{result['first_s']:.2f}",
        f"{result['median_ms']:.2f}",
        f"{result['p90_ms']:.2f}",
        f"{result['fps']:.1f}",
    ]


def load_timed(
    paths: list[str], engine: str, batch: np.ndarray, args: argparse.Namespace
) -> tuple[Runner, float]:
    """`engine` loaded on the CPU (verified on the batch's first frames); its load time."""
    started = time.perf_counter()
    runner = load_runner(
        paths,
        engine=engine,
        device="cpu",
        threads=args.threads or None,
        verify_frames=batch[:5],
        cache_dir=args.cache_dir,
    )
    return runner, time.perf_counter() - started


def time_engine(
    paths: list[str], engine: str, batch: np.ndarray, args: argparse.Namespace
) -> list[dict[str, float]]:
    """Loads the engine, warms it up, and times it (idle core, then busy with --busy-core)."""
    runner, loaded = load_timed(paths, engine, batch, args)
    results = []
    try:
        started = time.perf_counter()
        runner.run(batch)
        first = time.perf_counter() - started
        for _ in range(args.warmup - 1):
            runner.run(batch)
        for busy in (False, True) if args.busy_core else (False,):
            with busy_core(busy):
                timed = time_passes(runner, batch, args)
                results.append({"load_s": loaded, "first_s": first, "busy": busy, **timed})
    finally:
        runner.close()
    return results


def time_alternating(
    paths: list[str], engines: list[str], batch: np.ndarray, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """Every engine loaded and warmed up, then timed one batch each in turn."""
    runners, results = {}, {}
    try:
        for engine in engines:
            runners[engine], loaded = load_timed(paths, engine, batch, args)
            started = time.perf_counter()
            runners[engine].run(batch)
            results[engine] = {"load_s": loaded, "first_s": time.perf_counter() - started}
            for _ in range(args.warmup - 1):
                runners[engine].run(batch)
        latencies: dict[str, list[float]] = {engine: [] for engine in engines}
        for _ in range(args.iterations):
            for engine, runner in runners.items():
                started = time.perf_counter()
                runner.run(batch)
                latencies[engine].append(time.perf_counter() - started)
    finally:
        for runner in runners.values():
            runner.close()
    first = statistics.median(latencies[engines[0]])
    for engine, times in latencies.items():
        times.sort()
        results[engine].update(
            median_ms=1000 * statistics.median(times),
            p90_ms=1000 * times[int(0.9 * (len(times) - 1))],
            fps=len(batch) * len(times) / sum(times),
            ratio=statistics.median(times) / first,
        )
    return results


def default_engines() -> list[str]:
    """torch and onnx, and openvino where it is installed."""
    from sleap_live.engines.optional import openvino_installed

    return ["torch", "onnx", *(["openvino"] if openvino_installed() else [])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model path(s), as load_runner takes them")
    parser.add_argument("--engines", nargs="+", default=default_engines())
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 4], help="batch sizes")
    parser.add_argument("--size", default="384x384", help="frame HxW for synthetic frames")
    parser.add_argument("--channels", type=int, default=1, choices=(1, 3))
    parser.add_argument("--video", type=Path, help="take frames from this video instead")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches (at least 1)")
    parser.add_argument("--passes", type=int, default=1, help="timed passes of --iterations")
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="time the engines batch by batch in turn (not with --passes or --busy-core)",
    )
    parser.add_argument(
        "--busy-core",
        action="store_true",
        help="time the passes again while a process spins on one core",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads per engine; 0: the engine's default (one per core)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="sleap-live cache directory (default: the user's)"
    )
    args = parser.parse_args(argv)
    if args.alternate and (args.passes > 1 or args.busy_core):
        parser.error("--alternate times one pass on the machine as it is")

    height, width = (int(n) for n in args.size.lower().split("x"))
    largest = max(args.batch)
    if args.video:
        pool = read_video_frames(args.video, largest, args.channels)
    else:
        pool = sample_frames(largest, height, width, args.channels, seed=0)

    console = Console()
    table = Table(
        title=f"{' + '.join(args.models)} on {pool.shape[1]}×{pool.shape[2]}×{pool.shape[3]}"
    )
    columns = ["engine", "batch", "load s", "first batch s", "median ms", "p90 ms", "frames/s"]
    if args.busy_core:
        columns.insert(2, "busy core")
    if args.passes > 1:
        columns += ["pass fps min/med/max", "max/min"]
    if args.alternate:
        columns.append(f"x {args.engines[0]}")
    for column in columns:
        table.add_column(column, justify="left" if column == "engine" else "right", no_wrap=True)
    if args.alternate:
        for size in args.batch:
            batch = pool[np.arange(size) % len(pool)]
            with console.status(f"{', '.join(args.engines)} in turn, batch {size}"):
                timed = time_alternating(args.models, args.engines, batch, args)
            for engine, result in timed.items():
                table.add_row(*timing_cells(engine, size, result), f"{result['ratio']:.2f}")
    for engine in [] if args.alternate else args.engines:
        for size in args.batch:
            batch = pool[np.arange(size) % len(pool)]
            with console.status(f"{engine}, batch {size}"):
                results = time_engine(args.models, engine, batch, args)
            for result in results:
                row = timing_cells(engine, size, result)
                if args.busy_core:
                    row.insert(2, "yes" if result["busy"] else "no")
                if args.passes > 1:
                    row += [
                        f"{result['fps_min']:.0f}/{result['fps_median']:.0f}/"
                        f"{result['fps_max']:.0f}",
                        f"{result['spread']:.2f}",
                    ]
                table.add_row(*row)
    console.print(table)
    console.print(
        f"threads per engine: {args.threads}; {args.warmup} warmup, {args.passes} x "
        f"{args.iterations} timed; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
        f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
