"""Time the torch, ONNX Runtime and OpenVINO engines on the same model and frames.

    python scripts/bench_engines.py MODEL_DIR [MODEL_DIR2] [--batch 1 4] [--size 512x512]
        [--channels 1] [--iterations 50] [--warmup 5] [--threads 2] [--video PATH]

MODEL is anything `load_runner` takes. Each engine runs the same frames (synthetic
blobs, or the first frames of --video) for --warmup untimed and --iterations timed
batches; the table gives load time, median and 90th-percentile batch latency, and
frames per second. OpenVINO runs at fp32 (`--engines ... openvino`, the default
when it is installed); its load includes compiling the graph. Run it under `nice`
on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from sleap_live.engines.export.frames import sample_frames
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


def time_engine(
    paths: list[str], engine: str, batch: np.ndarray, args: argparse.Namespace
) -> dict[str, float]:
    started = time.perf_counter()
    runner = load_runner(
        paths,
        engine=engine,
        device="cpu",
        threads=args.threads,
        verify_frames=batch[:5],
        cache_dir=args.cache_dir,
    )
    loaded = time.perf_counter() - started
    try:
        for _ in range(args.warmup):
            runner.run(batch)
        latencies = []
        for _ in range(args.iterations):
            started = time.perf_counter()
            runner.run(batch)
            latencies.append(time.perf_counter() - started)
    finally:
        runner.close()
    latencies.sort()
    return {
        "load_s": loaded,
        "median_ms": 1000 * statistics.median(latencies),
        "p90_ms": 1000 * latencies[int(0.9 * (len(latencies) - 1))],
        "fps": len(batch) * len(latencies) / sum(latencies),
    }


def default_engines() -> list[str]:
    """torch and onnx, and openvino where it is installed."""
    from sleap_live.engines.runners.openvino import openvino_installed

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
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per engine")
    parser.add_argument(
        "--cache-dir", type=Path, help="sleap-live cache directory (default: the user's)"
    )
    args = parser.parse_args(argv)

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
    for column in ("engine", "batch", "load s", "median ms", "p90 ms", "frames/s"):
        table.add_column(column, justify="left" if column == "engine" else "right")
    for engine in args.engines:
        for size in args.batch:
            batch = pool[np.arange(size) % len(pool)]
            with console.status(f"{engine}, batch {size}"):
                result = time_engine(args.models, engine, batch, args)
            table.add_row(
                engine,
                str(size),
                f"{result['load_s']:.2f}",
                f"{result['median_ms']:.2f}",
                f"{result['p90_ms']:.2f}",
                f"{result['fps']:.1f}",
            )
    console.print(table)
    console.print(
        f"threads per engine: {args.threads}; {args.warmup} warmup, {args.iterations} timed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
