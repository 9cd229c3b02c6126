"""Side by side: sleap-live's CPU engine against `sleap-nn predict`, one run, one machine.

Both tools run the same top-down model (centroid + centered-instance, 2 animals) on
the same frames. sleap-nn runs in its own virtual environment (it is not a
dependency of sleap-live), in-process through its `Predictor` API, so neither
side pays for interpreter start-up or model loading in the timed part:

- sleap-nn torch:  `Predictor.from_model_paths(...).predict(video)` (its `predict`)
- sleap-nn onnx:   `Predictor.from_export_dir(..., runtime="onnx")` on a directory
                   written by `sleap-nn export` (what `predict --runtime onnx` runs)
- sleap-live:      `Pipeline(FileSource(video), runner).run()`: decode, batching,
                   inference and pose records end to end; plus the engine alone
                   on frames already in memory.

Each first makes one untimed pass over the clip (torch's CPU kernels are slow the
first time they meet each input shape, and top-down crop counts vary), then is
timed over the whole clip. Usage:

    python scripts/bench_vs_sleap_nn.py --sleap-nn-python /path/to/sleap-nn-venv/bin/python

Prints a table and writes it as JSON with `--json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import av
from rich.console import Console
from rich.table import Table

from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.bench import bench_throughput, decode_all
from sleap_live.stream.sources import FileSource

REPO = Path(__file__).resolve().parents[1]
MODELS = [REPO / "tests/data/models/centroid", REPO / "tests/data/models/centered_instance"]
VIDEO = REPO / "tests/data/videos/multi_gray.mkv"

SLEAP_NN_BENCH = textwrap.dedent(
    """
    import json, sys, time
    from sleap_nn.inference.predictor import Predictor
    video, export_dir, batch_size, models = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    results = {}
    for runtime in ("torch", "onnx"):
        if runtime == "torch":
            predictor = Predictor.from_model_paths(models, device="cpu", batch_size=batch_size)
        else:
            predictor = Predictor.from_export_dir(
                export_dir, runtime="onnx", device="cpu", batch_size=batch_size
            )
        predictor.predict(video)  # warm-up: one untimed pass over the clip
        start = time.perf_counter()
        labels = predictor.predict(video)
        seconds = time.perf_counter() - start
        results[runtime] = {"frames": len(labels.labeled_frames), "seconds": seconds}
    print("RESULT " + json.dumps(results))
    """
)


def make_clip(source: Path, n_frames: int, out: Path) -> Path:
    """Loop `source` to `n_frames` frames, losslessly, so both tools read equal pixels."""
    with FileSource(source) as src:
        frames = [f.image for f in src]
    gray = frames[0].shape[-1] == 1
    with av.open(str(out), "w") as container:
        stream = container.add_stream("ffv1", rate=30)
        stream.width, stream.height = frames[0].shape[1], frames[0].shape[0]
        stream.pix_fmt = "gray" if gray else "bgr0"
        for i in range(n_frames):
            image = frames[i % len(frames)]
            frame = av.VideoFrame.from_ndarray(
                image[..., 0] if gray else image, format="gray" if gray else "rgb24"
            )
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return out


def sleap_nn_export(python: Path, out: Path) -> Path:
    sleap_nn = python.with_name("sleap-nn")
    subprocess.run(
        [str(sleap_nn), "export", *map(str, MODELS), "-o", str(out), "--format", "onnx"],
        check=True,
        capture_output=True,
    )
    return out


def bench_sleap_nn(python: Path, clip: Path, export_dir: Path, batch_size: int) -> dict:
    result = subprocess.run(
        [str(python), "-c", SLEAP_NN_BENCH, str(clip), str(export_dir), str(batch_size)]
        + [str(m) for m in MODELS],
        check=True,
        capture_output=True,
        text=True,
    )
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def bench_sleap_live(clip: Path, engine: str, batch_size: int) -> dict:
    runner = load_runner([str(m) for m in MODELS], engine=engine, device="cpu")
    try:
        engine_only, recorded = bench_throughput(runner, clip, decode_all(clip), batch_size)
        return {
            "frames": int(recorded["frames"]),
            "seconds": recorded["seconds"],
            "engine_seconds": engine_only["seconds"],
        }
    finally:
        runner.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleap-nn-python", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=4, help="sleap-nn's default is 4")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        clip = make_clip(VIDEO, args.frames, tmp / "clip.mkv")
        export_dir = sleap_nn_export(args.sleap_nn_python, tmp / "sleap_nn_export")
        results = {}
        for name, value in bench_sleap_nn(
            args.sleap_nn_python, clip, export_dir, args.batch_size
        ).items():
            results[f"sleap-nn predict ({name})"] = value
        for engine in ("onnx", "torch"):
            results[f"sleap-live ({engine})"] = bench_sleap_live(clip, engine, args.batch_size)

    base_torch = results["sleap-nn predict (torch)"]
    base_onnx = results["sleap-nn predict (onnx)"]
    table = Table(title=f"top-down, 2 animals, {args.frames} frames, batch {args.batch_size}, CPU")
    for column in ("run", "fps", "x sleap-nn torch", "x sleap-nn onnx", "engine-only fps"):
        table.add_column(column, justify="right")
    for name, r in results.items():
        r["fps"] = r["frames"] / r["seconds"]
        engine_fps = r["frames"] / r["engine_seconds"] if "engine_seconds" in r else None
        r["engine_fps"] = engine_fps
        table.add_row(
            name,
            f"{r['fps']:.1f}",
            f"{r['fps'] / (base_torch['frames'] / base_torch['seconds']):.2f}",
            f"{r['fps'] / (base_onnx['frames'] / base_onnx['seconds']):.2f}",
            f"{engine_fps:.1f}" if engine_fps else "",
        )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
