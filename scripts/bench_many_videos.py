"""Many short videos through one model: sequentially, in local workers, on Ray.

Cuts `--clips` clips of `--frames` frames each from a fixture video (lossless, so
every way decodes the same frames), then runs `sleap_live.run_many` over the folder
once per layout, each into an empty output folder, and prints a table: wall time,
frames per second, and whether the poses equal the first layout's byte for byte.
Ray is started once, timed apart (its start-up is a fixed cost a long run pays
once), and each Ray layout runs in that session.

Rerun it as it is (the figures in docs/benchmarks.md were made by the default):

    python scripts/bench_many_videos.py [--clips 20] [--frames 60] [--repeat 2] [--json out.json]

It ends with a Markdown table for docs/benchmarks.md (the best of `--repeat` runs of
each layout, and every run), and exits 1 if any layout's poses differ from the first's.

Layouts are WORKERSxSTREAMSxTHREADS (worker processes, videos in flight per worker,
engine threads per worker); ``1x1xN`` runs in this process, one video at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sleap_io as sio
from fixtures import media

from sleap_live import LoadOptions, run_many

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "tests" / "data" / "exports" / "single_instance"
DEFAULT_VIDEO = ROOT / "tests" / "data" / "videos" / "single.mkv"
LOCAL_LAYOUTS = ("1x1x2", "1x2x2", "2x1x1", "2x2x1", "1x1x1", "4x1x1")
RAY_LAYOUTS = ("ray:2x1x1", "ray:2x2x1")


def clip_spans(video: Path, clips: int, frames: int) -> dict[str, tuple[int, int]]:
    """`clips` clips of `frames` frames, starting at spread-out frames of `video`."""
    length = len(sio.load_video(str(video)))
    return {
        f"clip{index:03d}": ((index * 37) % max(1, length - frames), frames)
        for index in range(clips)
    }


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
        cluster="local" if on_ray else None,
        load=LoadOptions(engine=engine, device="cpu", threads=threads),
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


def describe(layout: str) -> str:
    """What a layout means, in words, for the table."""
    on_ray = layout.startswith("ray:")
    workers, streams, threads = (int(n) for n in layout.removeprefix("ray:").split("x"))
    plural = {1: ""}
    if on_ray:
        where = f"{workers} Ray actor{plural.get(workers, 's')}, each with"
    elif workers == 1:
        where = "this process, with"
    else:
        where = f"{workers} worker processes, each with"
    return (
        f"{where} {streams} video{plural.get(streams, 's')} in flight and "
        f"{threads} engine thread{plural.get(threads, 's')}"
    )


def markdown(rows: list[dict], heading: str) -> str:
    """The rows as a table for docs/benchmarks.md, under `heading`."""
    lines = [
        heading,
        "",
        "| layout | what | wall s (best) | fps (best) | every run, s | same poses |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        if row["layout"] == "ray.init":
            lines.append(
                f"| ray.init | Ray started on this machine, once | {row['wall_s']} | | | |"
            )
            continue
        runs = ", ".join(str(wall) for wall in row["walls"])
        lines.append(
            f"| {row['layout']} | {describe(row['layout'])} | {row['wall_s']} | {row['fps']} "
            f"| {runs} | {'yes' if row['same_poses'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--video", type=Path, default=DEFAULT_VIDEO)
    parser.add_argument("--clips", type=int, default=20)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--engine", default="onnx")
    parser.add_argument("--layouts", nargs="*", default=[*LOCAL_LAYOUTS, *RAY_LAYOUTS])
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each layout, in rounds (every layout once, then again): the best "
        "is reported, every run listed (default: 1)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    load_before = os.getloadavg()
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench_many_") as scratch:
        folder = Path(scratch) / "clips"
        media.cut_clips(args.video, folder, clip_spans(args.video, args.clips, args.frames))
        reference: dict[str, bytes] | None = None
        ray_started = False
        for round_ in range(args.repeat):
            for number, layout in enumerate(args.layouts):
                if layout.startswith("ray:") and not ray_started:
                    import ray

                    began = time.perf_counter()
                    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
                    wall = round(time.perf_counter() - began, 2)
                    rows["ray.init"] = {"layout": "ray.init", "wall_s": wall}
                    ray_started = True
                out = Path(scratch) / f"out{round_}-{number}-{layout.replace(':', '-')}"
                out.mkdir()
                run = run_layout(layout, folder, args.model, out, args.engine)
                found = poses(out)
                shutil.rmtree(out)
                reference = reference or found
                print(json.dumps({**run, "same_poses": found == reference}), flush=True)
                row = rows.setdefault(layout, {"layout": layout, "walls": [], "same_poses": True})
                row["walls"].append(run["wall_s"])
                row["same_poses"] = row["same_poses"] and found == reference
                if run["wall_s"] == min(row["walls"]):
                    row.update(wall_s=run["wall_s"], fps=run["fps"], frames=run["frames"])
    load_after = os.getloadavg()
    heading = (
        f"`python scripts/bench_many_videos.py{' ' + ' '.join(argv or sys.argv[1:])}`: "
        f"{args.clips} clips x {args.frames} frames, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    print()
    print(markdown(list(rows.values()), heading))
    if max(load_before[0], load_after[0]) > 1.0:
        print("\nnote: the machine was not quiet (load average above 1): the ranking may be noise")
    if args.json is not None:
        record = {"rows": list(rows.values()), "load": [load_before, load_after]}
        args.json.write_text(json.dumps(record, indent=1))
    return 0 if all(row.get("same_poses", True) for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
