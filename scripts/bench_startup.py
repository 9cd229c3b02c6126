"""How long `sleap-live run` takes to start, cold (empty export cache) and warm.

    python scripts/bench_startup.py [--repeats 3] [--json startup.json]

For the top-down fixture pair (demo.mp4) and the single-instance fixture model
(single.mkv), as whole processes:

- `sleap-live run CLIP -m MODEL -o x.slp -q` on the whole fixture clip and on its
  first 10 frames, cold (a fresh, empty `--cache-dir`: the model is exported and
  verified) and warm (the same cache directory again; median of `--repeats`);
- time to first pose, warm: a child process that does what `sleap-live run` does
  up to its first pose (imports the command line, reads the verification frames,
  `load_runner`, the recorded pipeline) and reports the time from its launch to
  the first pose record (median of `--repeats`).

Figures are wall-clock seconds on this machine, as loaded as it is: run it on a
quiet machine for numbers to quote.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CASES = {
    "top-down": (DATA / "videos" / "demo.mp4", ["centroid", "centered_instance"]),
    "single_instance": (DATA / "videos" / "single.mkv", ["single_instance"]),
}
SHORT_FRAMES = 10

# The child that times launch -> first pose; argv: launch time, engine, cache dir, clip, models.
FIRST_POSE = """
import sys, time
from pathlib import Path
import sleap_live.cli.run
from sleap_live.stream.runner import first_frames
from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.sources import open_source
launched, engine, cache_dir, clip, *models = sys.argv[1:]
with open_source(Path(clip), camera=False) as source:
    frames = first_frames(Path(clip))
    runner = load_runner(models, engine=engine, cache_dir=cache_dir, verify_frames=frames)
    for record in Pipeline(source, runner):
        print(time.time() - float(launched))
        break
    runner.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm runs per figure")
    parser.add_argument("--engine", default="auto", help="sleap-live's --engine (default: auto)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="sleap-live-startup-") as scratch:
        work = Path(scratch)
        for name, (video, model_names) in CASES.items():
            models = [DATA / "models" / model for model in model_names]
            short = first_frames_clip(video, work / f"{name}-{SHORT_FRAMES}.mkv")
            figures = {}
            for label, clip in (("clip", video), (f"{SHORT_FRAMES} frames", short)):
                cache = work / f"cache-{name}-{label.replace(' ', '')}"
                figures[f"{label} cold"] = run_seconds(clip, models, cache, work, args.engine)
                figures[f"{label} warm"] = statistics.median(
                    run_seconds(clip, models, cache, work, args.engine) for _ in range(args.repeats)
                )
            figures["first pose warm"] = statistics.median(
                first_pose_seconds(video, models, work / f"cache-{name}-clip", args.engine)
                for _ in range(args.repeats)
            )
            results[name] = figures
            print(name, " ".join(f"{key}: {value:.2f} s" for key, value in figures.items()))
    table(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def sleap_live_command() -> list[str]:
    script = Path(sys.executable).with_name("sleap-live")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sleap_live"]


def run_seconds(clip: Path, models: list[Path], cache: Path, work: Path, engine: str) -> float:
    """Wall time of one whole `sleap-live run` process."""
    output = work / "x.slp"
    output.unlink(missing_ok=True)
    command = [*sleap_live_command(), "run", str(clip), "-o", str(output), "-q"]
    command += [*itertools.chain.from_iterable(("-m", str(m)) for m in models)]
    command += ["--cache-dir", str(cache), "--engine", engine]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return seconds


def first_pose_seconds(clip: Path, models: list[Path], cache: Path, engine: str) -> float:
    """Seconds from a child's launch to its first pose record (see FIRST_POSE)."""
    launched = time.time()
    done = subprocess.run(
        [sys.executable, "-c", FIRST_POSE, repr(launched), engine, str(cache), str(clip)]
        + [str(m) for m in models],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"first-pose child failed:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def first_frames_clip(video: Path, path: Path) -> Path:
    """The first `SHORT_FRAMES` frames of `video`, losslessly re-encoded (FFV1)."""
    with av.open(str(video)) as source, av.open(str(path), "w") as target:
        decoded = source.streams.video[0]
        gray = decoded.format.name == "gray"
        stream = target.add_stream("ffv1", rate=30)
        stream.width, stream.height = decoded.width, decoded.height
        stream.pix_fmt = "gray" if gray else "bgr0"
        for frame in itertools.islice(source.decode(decoded), SHORT_FRAMES):
            image = frame.to_ndarray(format="gray" if gray else "rgb24")
            new = av.VideoFrame.from_ndarray(image, format="gray" if gray else "rgb24")
            target.mux(stream.encode(new))
        target.mux(stream.encode())
    return path


def table(results: dict[str, dict[str, float]]) -> None:
    columns = list(next(iter(results.values())))
    width = max(len(name) for name in results)
    print(f"\n{'seconds':<{width}}  " + "  ".join(f"{c:>15}" for c in columns))
    for name, figures in results.items():
        print(f"{name:<{width}}  " + "  ".join(f"{figures[c]:>15.2f}" for c in columns))


if __name__ == "__main__":
    main()
