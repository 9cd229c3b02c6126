"""What `--precision int8` costs and gains, for every lab model: its error and its speed-up.

    .venv/bin/python scripts/bench_int8.py [--lab NAME]... [--frames 300] [--held-out 64]
        [--batch-size 8] [--rounds 5] [--no-verify] [--workdir DIR] [--json PATH]

For each lab model (`fixtures.lab.LAB_MODELS`; all of them by default), on a clip of
its own scene (H.264, `--frames` long, rendered into a temporary folder):

1. the int8 runner is loaded as `sleap-live run --precision int8 --keep-int8` loads
   it (`load_runner(..., precision="int8", keep_int8=True)`: int8 even where it
   measures slower than fp32 or further off than documented), calibrated on frames spread over the
   clip (`spread_frames`, the verification frames of a run), in a cache of its
   own; the line it prints at load is kept (its error and speed-up on those
   frames, one batch);
2. it runs, with the float32 runner (`engine="onnx"`, the export it was made from),
   on `--held-out` consecutive frames from the middle of the clip, which the
   calibration did not see: the poses are matched (`pose_difference`: median and
   p99 px of the points both found, frames whose instance count changed, points
   found by one only), and both runners are timed in alternation over those frames
   in batches of `--batch-size` (`cpu_choice.measure`, `--rounds` rounds, median
   ms per frame, whole `runner.run`).

`--workdir DIR` keeps the clips and each model's cache (float32 export, int8
graphs) there instead of a temporary folder, so a second run (another
quantisation setting: the settings are part of the int8 cache key) exports
nothing again.

Times are wall-clock on this machine as it is; the load average at the start and
end of each model is printed with it, since on a shared machine the speed-up,
measured side by side, is what counts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from fixtures.lab import LAB_MODELS, lab_model, write_clip

from sleap_live.engines.host.compare import pose_difference
from sleap_live.engines.runners.cpu_choice import measure
from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.runner import spread_frames
from sleap_live.stream.sources import FileSource


def held_out_frames(video: Path, count: int) -> np.ndarray:
    """`count` consecutive frames from the middle of `video`."""
    with FileSource(video) as probe:
        total = probe.n_frames or count
    start = max(0, (total - count) // 2)
    with FileSource(video, start=start, stop=start + count) as source:
        return np.stack([frame.image for frame in source])


def bench_model(
    name: str,
    workdir: Path,
    frames: int,
    held_out: int,
    batch_size: int,
    rounds: int,
    verify: bool = True,
) -> dict[str, Any]:
    """One lab model's int8 figures (module docstring)."""
    entry = lab_model(name)
    video = workdir / f"{entry.scene}-{frames}.mp4"
    if not video.is_file():  # written aside first: an interrupted write is not reused
        write_clip(video.with_suffix(".partial.mp4"), entry.scene, frames).replace(video)
    calibration = spread_frames(video)
    load_before = os.getloadavg()[0]
    cache = workdir / f"cache-{name}"
    models = [str(path) for path in entry.paths]
    options: dict[str, Any] = {"engine": "onnx", "device": "cpu", "cache_dir": cache}
    if not verify:
        options["verify"] = False
    fp32 = load_runner(models, verify_frames=calibration, **options)
    said = io.StringIO()  # the line int8 prints at load (on stderr)
    with contextlib.redirect_stderr(said):
        int8 = load_runner(
            models, precision="int8", keep_int8=True, verify_frames=calibration, **options
        )
    lines = [line.removeprefix("sleap-live: ") for line in said.getvalue().splitlines()]
    test = held_out_frames(video, held_out)
    batches = [test[i : i + batch_size] for i in range(0, len(test), batch_size)]
    reduced = [pose for batch in batches for pose in int8.run(batch)]
    full = [pose for batch in batches for pose in fp32.run(batch)]
    difference = pose_difference(reduced, full)
    times: dict[str, list[float]] = {"fp32": [], "int8": []}
    for batch in batches:
        for precision, ms in measure({"fp32": fp32, "int8": int8}, batch, rounds).items():
            times[precision].append(ms * len(batch))
    fp32_ms = sum(times["fp32"]) / len(test)
    int8_ms = sum(times["int8"]) / len(test)
    instances = statistics.mean(pose.n_instances for pose in full)
    fp32.close()
    int8.close()
    return {
        "model": name,
        "frame": "x".join(map(str, test.shape[1:3])),
        "held_out_frames": len(test),
        "instances_per_frame": instances,
        "points_median_px": difference.quantile_px(0.5),
        "points_p99_px": difference.quantile_px(0.99),
        "points_max_px": difference.max_px(),
        "count_changes": difference.count_changes,
        "presence_mismatches": difference.presence_mismatches,
        "fp32_ms_per_frame": fp32_ms,
        "int8_ms_per_frame": int8_ms,
        "speedup": fp32_ms / int8_ms,
        "load_line": next((line for line in lines if line.startswith("int8")), None),
        "load_average": [load_before, os.getloadavg()[0]],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table for docs/benchmarks.md."""
    lines = [
        "| model | frame | held-out frames | points median / p99 / max px | count changes "
        "| points found by one only | fp32 ms/frame | int8 ms/frame | speed-up | load avg |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['frame']} | {r['held_out_frames']} | "
            f"{r['points_median_px']:.3g} / {r['points_p99_px']:.3g} / {r['points_max_px']:.3g} | "
            f"{r['count_changes']} | {r['presence_mismatches']} | {r['fp32_ms_per_frame']:.1f} | "
            f"{r['int8_ms_per_frame']:.1f} | {r['speedup']:.2f}x | "
            f"{r['load_average'][0]:.1f}-{r['load_average'][1]:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lab", action="append", choices=[m.name for m in LAB_MODELS])
    parser.add_argument("--frames", type=int, default=300, help="clip length (default 300)")
    parser.add_argument("--held-out", type=int, default=64, help="frames compared and timed")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workdir", type=Path, help="keep clips and caches here (reused)")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the float32 export's check against torch"
    )
    args = parser.parse_args(argv)
    names = args.lab or [m.name for m in LAB_MODELS]
    rows = []
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        for name in names:
            row = bench_model(
                name,
                workdir,
                args.frames,
                args.held_out,
                args.batch_size,
                args.rounds,
                verify=not args.no_verify,
            )
            print(f"{name}: {row['load_line']}", flush=True)
            rows.append(row)
            if args.json is not None:  # kept as it goes: a long run keeps what it measured
                args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(markdown(rows))


if __name__ == "__main__":
    sys.exit(main())
