"""Many short videos through one model: sequentially, in local workers, on Ray.

Cuts `--clips` clips of `--frames` frames each from a fixture video (lossless, so
every way decodes the same frames), then runs `sleap_live.run_many` over the folder
once per layout, each into an empty output folder, and prints a table: wall time,
frames per second, and whether the poses equal the first layout's byte for byte.
Ray is started once, timed apart (its start-up is a fixed cost a long run pays
once), and each Ray layout runs in that session.

Rerun it as it is (the figures in docs/benchmarks.md were made by the default):

    python scripts/bench_many_videos.py [--clips 20] [--frames 60] [--json out.json]

Layouts are WORKERSxSTREAMSxTHREADS (worker processes, videos in flight per worker,
engine threads per worker); ``1x1xN`` runs in this process, one video at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import sleap_io as sio

from sleap_live import run_many

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "tests" / "data" / "exports" / "single_instance"
DEFAULT_VIDEO = ROOT / "tests" / "data" / "videos" / "single.mkv"
LOCAL_LAYOUTS = ("1x1x2", "1x2x2", "2x1x1", "2x2x1", "1x1x1", "4x1x1")
RAY_LAYOUTS = ("ray:2x1x1", "ray:2x2x1")


def cut_clips(video: Path, folder: Path, clips: int, frames: int) -> list[Path]:
    """`clips` lossless clips of `frames` frames, starting at spread-out frames of `video`."""
    with av.open(str(video)) as container:
        images = [frame.to_ndarray(format="gray") for frame in container.decode(video=0)]
    paths = []
    for index in range(clips):
        start = (index * 37) % max(1, len(images) - frames)
        path = folder / f"clip{index:03d}.mkv"
        with av.open(str(path), "w") as container:
            stream = container.add_stream("ffv1", rate=30)
            stream.width, stream.height, stream.pix_fmt = (
                images[0].shape[1],
                images[0].shape[0],
                "gray",
            )
            for image in images[start : start + frames]:
                container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="gray")))
            container.mux(stream.encode())
        paths.append(path)
    return paths


def poses(folder: Path) -> dict[str, bytes]:
    """Each output's points and scores, as bytes."""
    found = {}
    for output in sorted(folder.glob("*.slp")):
        labels = sio.load_slp(str(output))
        found[output.name] = np.asarray(labels.numpy(return_confidence=True)).tobytes()
    return found


def run_layout(layout: str, clips: Path, model: Path, out: Path, engine: str) -> dict:
    """One run over the clips in `layout`; its figures."""
    on_ray = layout.startswith("ray:")
    workers, streams, threads = (int(n) for n in layout.removeprefix("ray:").split("x"))
    started = time.perf_counter()
    run = run_many(
        clips,
        model,
        output_dir=out,
        workers=workers,
        streams=streams,
        threads=threads,
        cluster="local" if on_ray else None,
        engine=engine,
        device="cpu",
    )
    wall = time.perf_counter() - started
    frames = sum(result.frames for result in run.results)
    failed = [result for result in run.results if result.status != "done"]
    if failed:
        raise SystemExit(f"{layout}: {failed[0].video}: {failed[0].error}")
    return {
        "layout": layout,
        "wall_s": round(wall, 2),
        "fps": round(frames / wall, 1),
        "frames": frames,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--video", type=Path, default=DEFAULT_VIDEO)
    parser.add_argument("--clips", type=int, default=20)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--engine", default="onnx")
    parser.add_argument("--layouts", nargs="*", default=[*LOCAL_LAYOUTS, *RAY_LAYOUTS])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_many_") as scratch:
        folder = Path(scratch) / "clips"
        folder.mkdir()
        cut_clips(args.video, folder, args.clips, args.frames)
        reference: dict[str, bytes] | None = None
        ray_started = False
        for number, layout in enumerate(args.layouts):
            if layout.startswith("ray:") and not ray_started:
                import ray

                began = time.perf_counter()
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
                rows.append({"layout": "ray.init", "wall_s": round(time.perf_counter() - began, 2)})
                ray_started = True
            out = Path(scratch) / f"out{number}-{layout.replace(':', '-')}"
            out.mkdir()
            row = run_layout(layout, folder, args.model, out, args.engine)
            found = poses(out)
            reference = reference or found
            row["same_poses"] = found == reference
            rows.append(row)
            print(json.dumps(row), flush=True)
    load = os.getloadavg()
    print(
        f"\n{args.clips} clips x {args.frames} frames, {os.cpu_count()} cores, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end"
    )
    print(f"{'layout':<12} {'wall s':>8} {'fps':>7} {'same poses':>11}")
    for row in rows:
        print(
            f"{row['layout']:<12} {row['wall_s']:>8} {row.get('fps', ''):>7} "
            f"{row.get('same_poses', '')!s:>11}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
