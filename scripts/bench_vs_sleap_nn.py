"""sleap-live against `sleap-nn predict` on the CPU: speed and poses, every model, one run.

    python scripts/bench_vs_sleap_nn.py --sleap-nn /path/to/sleap-nn-venv/bin
        [--models topdown_fixture topdown_384 ...] [--frames 1100] [--batch-size N]
        [--json results.json] [--markdown docs/benchmarks.md] [--plot chart.png]
        [--no-warm] [--unverified bottomup_384 ...]

Every model (`--models`, default all: the tiny test fixtures, and the lab-size models of
`scripts/fixtures/lab.py` that have been trained) runs on one clip of `--frames` frames:
a test video looped and zero-padded to a multiple of 32 (lossless, so every tool reads
the same pixels), or a lab scene rendered from its seed (H.264, as a camera records).
Three tools run it, on the same clip and machine:

- sleap-nn torch: `sleap-nn predict -m MODEL_DIR...` (sleap-nn's own venv);
- sleap-nn onnx:  `sleap-nn predict --runtime onnx -m EXPORT_DIR` on a directory
  written by `sleap-nn export` at the clip's frame size (not timed);
- sleap-live:     `sleap-live run` with its default engine.

A model that sleap-nn cannot run from its own export (`Case.no_export` says why: a
tiled model, a box detector seeding a top-down pair) has no sleap-nn onnx run; its
table row says why, and its bar is sleap-nn's torch predict.

Measured for each:

- **whole process**: the command timed end to end, once (interpreter start-up, model
  loading, decoding, inference, writing the .slp). sleap-live's export cache (a
  folder of this run) is warm: the engine-only step below loads the model first,
  as any run after a model's first does;
- **warm, in-process**: sleap-nn's `Predictor.predict` on the clip after one untimed
  pass (decoding included); sleap-live's recorded pipeline (decode, batches,
  inference, pose records) after the same;
- **engine only** (sleap-live): `runner.run` on the first `ENGINE_FRAMES` frames,
  already decoded in memory;
- **pose agreement** with `sleap-nn predict` torch's .slp, frame by frame: instances
  matched (Hungarian on mean point distance; matched / the larger count), frames
  with the same instance count, the median, 99th percentile and largest distance of
  matched points, how many are over 1 px, and the frames that differ most. A box
  detector alone writes boxes (`LabeledFrame.bboxes`), no poses: its boxes are compared
  the same way, each as the two points of its corners (instances: boxes; distances:
  a corner's);
- **same pixels**: the first `PIXEL_FRAMES` frames as sleap-live decodes them and as
  sleap-io (sleap-nn's reader) does, in sleap-nn's venv: frames identical and the
  largest difference in levels. Agreement is only a test of inference when they are.

`--no-warm` leaves out sleap-nn's in-process runs (four more passes over each clip: an
hour at 1024 x 1024). `--unverified NAME...` runs sleap-live on those models without its
export check (`--no-verify`), for models that fail it on near-ties (tests/data/README.md);
the table says so and their poses are still compared with sleap-nn's.

Each tool keeps its own default batch size unless `--batch-size` sets both. The table
is printed; `--json` writes every figure, `--markdown FILE` writes the table with the
machine, versions and date between this script's markers in FILE (added at its end
when they are not there; nothing else in the file changes; `--section NAME` uses
markers of that name instead, so a run of some models leaves the main table alone),
`--plot PNG` a chart.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import sleap_io as sio
from bench_prepost import networks_alone, timed
from fixtures import media
from fixtures.goldens import boxes_to_arrays
from rich.console import Console
from rich.table import Table
from scipy.optimize import linear_sum_assignment

from sleap_live.engines.load.spec import BOX_MODEL_TYPES
from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.bench import bench_throughput, decode_all

try:  # the lab-size models, where this checkout has them
    from fixtures.lab import LAB_MODELS, write_clip
except ImportError:
    LAB_MODELS, write_clip = (), None

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
# Fixture clips are padded to this multiple: sleap-nn's exported graphs take only
# frames their UNet can run as they are.
PAD_TO = 32
# Frames of the engine-only run (decoded into memory; a 1024 x 1024 clip's 1,100
# frames would take 1.1 GB).
ENGINE_FRAMES = 256
# Frames whose pixels are compared between the two tools' readers.
PIXEL_FRAMES = 64
# Frames listed in the JSON as those that differ most.
WORST_FRAMES = 8
# sleap-live's default batch size for files (`sleap-live run`).
LIVE_BATCH = 8
# Timed batches of the engine and of its networks alone, in alternation (median).
NETWORK_ROUNDS = 7
TOOLS = ("sleap-nn torch", "sleap-nn onnx", "sleap-live")
MARK_START = "<!-- bench_vs_sleap_nn: start -->"
MARK_END = "<!-- bench_vs_sleap_nn: end -->"
# Why sleap-nn 0.3.5 runs these kinds from no export of its own (docs/models.md).
TILED_NO_EXPORT = (
    'sleap-nn 0.3.5 runs no tiled model from an export (its tiled layer: "tiled export deferred")'
)
BOX_NO_EXPORT = "sleap-nn 0.3.5 exports no box-detector-seeded top-down pair"

# Run in sleap-nn's venv: its predictor on the clip, one untimed pass, then one timed.
SLEAP_NN_WARM = textwrap.dedent(
    """
    import json, sys, time
    from sleap_nn.inference.predictor import Predictor
    clip, export_dir, batch, runtimes = sys.argv[1:5]
    models = sys.argv[5:]
    options = {"device": "cpu", **({"batch_size": int(batch)} if batch else {})}
    results = {}
    for runtime in runtimes.split(","):
        if runtime == "torch":
            predictor = Predictor.from_model_paths(models, **options)
        else:
            predictor = Predictor.from_export_dir(export_dir, runtime="onnx", **options)
        predictor.predict(clip)
        start = time.perf_counter()
        labels = predictor.predict(clip)
        results[runtime] = {"frames": len(labels.labeled_frames),
                            "seconds": time.perf_counter() - start}
    print("RESULT " + json.dumps(results))
    """
)
# Run in sleap-nn's venv: the first frames as sleap-io reads them, for `same_pixels`.
SLEAP_IO_FRAMES = textwrap.dedent(
    """
    import sys, numpy as np, sleap_io as sio
    video = sio.load_video(sys.argv[1])
    count = min(int(sys.argv[3]), len(video))
    np.save(sys.argv[2], np.stack([video[i] for i in range(count)]))
    """
)
SLEAP_NN_VERSIONS = (
    "import json, sleap_nn, torch, onnxruntime; print(json.dumps({'sleap-nn': "
    "sleap_nn.__version__, 'torch': torch.__version__, 'onnxruntime': onnxruntime.__version__}))"
)


@dataclass(frozen=True)
class Case:
    """One model on one clip.

    Attributes:
        name: what `--models` calls it.
        model_type: sleap-nn's model type (top-down: the pair).
        models: the model directories, as `-m` takes them.
        video: a test video to loop (fixtures), or None.
        scene: a lab scene to render (`fixtures.lab`), or None.
        no_export: why sleap-nn cannot run the model from its own export (then no
            sleap-nn onnx run), or "" where it can.
        networks_alone: whether `scripts/bench_prepost.py` times the model's networks
            as the engine runs them (not a tiled model's: it runs the whole frame).
    """

    name: str
    model_type: str
    models: tuple[Path, ...]
    video: Path | None = None
    scene: str | None = None
    no_export: str = ""
    networks_alone: bool = True

    def trained(self) -> bool:
        return all((path / "best.ckpt").is_file() for path in self.models)

    def tools(self) -> tuple[str, ...]:
        """The tools run on this case: all but sleap-nn onnx where it has no export."""
        return tuple(tool for tool in TOOLS if not (self.no_export and tool == "sleap-nn onnx"))


def _fixture(name: str, model_type: str, models: tuple[str, ...], video: str, **extra: Any) -> Case:
    paths = tuple(DATA / "models" / m for m in models)
    return Case(f"{name}_fixture", model_type, paths, video=DATA / "videos" / video, **extra)


FIXTURES = (
    _fixture("topdown", "topdown", ("centroid", "centered_instance"), "multi_gray.mkv"),
    _fixture("bottomup", "bottomup", ("bottomup",), "multi_gray.mkv"),
    _fixture("single_instance", "single_instance", ("single_instance",), "single.mkv"),
    _fixture(
        "multi_class_topdown",
        "multi_class_topdown",
        ("centroid_rgb", "multi_class_topdown"),
        "multi_rgb.mp4",
    ),
    _fixture(
        "multi_class_bottomup", "multi_class_bottomup", ("multi_class_bottomup",), "multi_rgb.mp4"
    ),
    # sleap-nn 0.3.5's box detectors alone: boxes, no poses (goldens `bbox_centernet`,
    # `bbox_ssd`).
    _fixture("bbox_centernet", "bbox_centernet", ("bbox_centernet",), "multi_gray.mkv"),
    _fixture("bbox_ssd", "bbox_ssd", ("bbox_ssd",), "multi_gray.mkv"),
    # sleap-nn 0.3.5's new kinds that its own export cannot run (the goldens'
    # fixtures, scripts/make_fixtures.py GOLDENS).
    _fixture(
        "tiled_single_instance",
        "single_instance",
        ("tiled_single_instance",),
        "single.mkv",
        no_export=TILED_NO_EXPORT,
        networks_alone=False,
    ),
    _fixture(
        "bbox_topdown",
        "topdown",
        ("bbox_centernet", "centered_instance"),
        "multi_gray.mkv",
        no_export=BOX_NO_EXPORT,
    ),
    _fixture(
        "bbox_multi_class_topdown",
        "multi_class_topdown",
        ("bbox_centernet_rgb", "multi_class_topdown"),
        "multi_rgb.mp4",
        no_export=BOX_NO_EXPORT,
    ),
)
CASES = FIXTURES + tuple(
    Case(m.name, m.model_type, tuple(m.paths), scene=m.scene) for m in LAB_MODELS
)


def pick_cases(names: list[str] | None) -> list[Case]:
    """The cases `--models` names (default: every fixture and every trained lab model)."""
    if not names:
        return [case for case in CASES if case.trained()]
    known = {case.name: case for case in CASES}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"--models: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    untrained = [name for name in names if not known[name].trained()]
    if untrained:
        raise SystemExit(
            f"--models: {', '.join(untrained)} not trained yet "
            "(scripts/make_fixtures.py --stages lab_data lab_train)"
        )
    return [known[name] for name in names]


def make_clip(case: Case, n_frames: int, folder: Path) -> Path:
    """The case's clip: its test video looped and padded (lossless), or its lab scene."""
    if case.scene is not None:
        assert write_clip is not None
        path = folder / f"{case.scene}.mp4"
        return path if path.exists() else write_clip(path, case.scene, n_frames)
    assert case.video is not None
    gray = decode_all(case.video, 1).shape[-1] == 1
    path = folder / f"{case.video.stem}_{n_frames}{'.mkv' if gray else '.mp4'}"
    if path.exists():
        return path
    frames = decode_all(case.video)
    frames = frames[np.arange(n_frames) % len(frames)]
    height, width = frames.shape[1:3]
    padding = ((0, 0), (0, -height % PAD_TO), (0, -width % PAD_TO), (0, 0))
    padded = np.pad(np.broadcast_to(frames, (*frames.shape[:3], 3)), padding)
    media.write_lossless(path, padded, grayscale=gray)
    return path


def run_logged(command: list[str], log: Path) -> float:
    """Runs `command` with its output in `log`; its wall time in seconds."""
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({done.returncode}): {tail[0]}")
    return seconds


def frame_shape(clip: Path) -> tuple[int, int, int]:
    """(height, width, channels) of the clip's first frame."""
    height, width, channels = decode_all(clip, 1).shape[1:]
    return height, width, channels


def sleap_nn_export(sleap_nn: Path, case: Case, clip: Path, folder: Path) -> Path:
    height, width, _ = frame_shape(clip)
    out = folder / f"{case.name}_export"
    command = [str(sleap_nn / "sleap-nn"), "export", *map(str, case.models), "--output", str(out)]
    command += ["--format", "onnx", "--input-height", str(height), "--input-width", str(width)]
    run_logged(command, folder / f"{case.name}_export.log")
    return out


def whole_process(
    sleap_nn: Path,
    case: Case,
    clip: Path,
    export: Path | None,
    folder: Path,
    batch: int | None,
    verify: bool = True,
) -> dict[str, dict[str, Any]]:
    """Each tool's command on the clip, timed end to end; the .slp each wrote."""
    models = [arg for path in case.models for arg in ("-m", str(path))]
    predict = [str(sleap_nn / "sleap-nn"), "predict", "-i", str(clip), "--device", "cpu"]
    batch_args = ["--batch_size", str(batch)] if batch else []
    live = [sys.executable, "-m", "sleap_live", "run", str(clip), *models, "-q"]
    live += ["--cache-dir", str(folder / "cache")]
    live += ["--batch-size", str(batch)] if batch else []
    live += [] if verify else ["--no-verify"]
    commands = {
        "sleap-nn torch": [*predict, *models, *batch_args],
        "sleap-nn onnx": [*predict, "-m", str(export), "--runtime", "onnx", *batch_args],
        "sleap-live": live,
    }
    results = {}
    for tool in case.tools():
        command = commands[tool]
        slp = folder / f"{case.name}_{tool.replace(' ', '_')}.slp"
        seconds = run_logged([*command, "-o", str(slp)], slp.with_suffix(".log"))
        results[tool] = {"whole_s": seconds, "slp": slp}
    return results


def sleap_nn_warm(
    sleap_nn: Path, case: Case, clip: Path, export: Path | None, batch: int | None
) -> dict[str, dict[str, float]]:
    runtimes = [tool.removeprefix("sleap-nn ") for tool in case.tools() if tool != "sleap-live"]
    command = [str(sleap_nn / "python"), "-c", SLEAP_NN_WARM, str(clip), str(export or "")]
    command += [str(batch or ""), ",".join(runtimes), *map(str, case.models)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"sleap-nn in-process run failed on {case.name}: {tail}")
    return json.loads(lines[0][len("RESULT ") :])


def same_pixels(sleap_nn: Path, clip: Path, frames: np.ndarray, folder: Path) -> dict[str, Any]:
    """sleap-live's decoded `frames` against sleap-io's reading of the same clip."""
    count = min(PIXEL_FRAMES, len(frames))
    out = folder / f"{clip.stem}_sleap_io.npy"
    command = [str(sleap_nn / "python"), "-c", SLEAP_IO_FRAMES, str(clip), str(out), str(count)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"sleap-io could not read {clip} in sleap-nn's venv: {tail}")
    theirs = np.load(out)
    out.unlink()
    return pixel_check(frames[:count], theirs)


def pixel_check(ours: np.ndarray, theirs: np.ndarray) -> dict[str, Any]:
    """`same_pixels`' comparison of two stacks of frames, `ours` sleap-live's."""
    count = len(ours)
    if theirs.shape != ours.shape:
        return {"frames": count, "identical": 0, "shapes": [list(ours.shape), list(theirs.shape)]}
    levels = np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).reshape(count, -1).max(1)
    return {"frames": count, "identical": int((levels == 0).sum()), "max_levels": int(levels.max())}


def sleap_live_warm(
    case: Case, clip: Path, folder: Path, batch: int | None, verify: bool = True
) -> dict[str, Any]:
    """Engine only and the recorded pipeline, warm; fills the export cache for `run`."""
    frames = decode_all(clip, ENGINE_FRAMES)
    checks: dict[str, Any] = {"verify_frames": frames[:5]} if verify else {"verify": False}
    runner = load_runner(
        [str(m) for m in case.models], device="cpu", cache_dir=folder / "cache", **checks
    )
    try:
        engine, recorded = bench_throughput(runner, clip, frames, batch or LIVE_BATCH)
        return {
            "engine": type(runner).__name__,
            "verified": verify,
            "engine_fps": engine["fps"],
            "warm_fps": recorded["fps"],
            "networks_ms": networks_ms(case, runner, frames[: batch or LIVE_BATCH])
            if case.networks_alone
            else None,
            "frames": frames,
        }
    finally:
        runner.close()


def networks_ms(case: Case, runner: Any, batch: np.ndarray) -> float:
    """Milliseconds per frame of the model's networks alone (ONNX Runtime fp32, no pre-
    or postprocessing) at the engine's shapes on `batch`: a top-down model's instance
    network on as many crops as the engine finds animals (sleap-nn keeps every
    centroid); the floor no tool running these networks goes under
    (`scripts/bench_prepost.py`). Timed in alternation with the engine, median."""
    crops = sum(len(poses.points) for poses in runner.run(batch))
    networks = networks_alone(case.model_type, case.models, batch, crops, None)
    networks()
    times = []
    for _ in range(NETWORK_ROUNDS):
        runner.run(batch)
        times.append(timed(networks))
    return 1000 * float(np.median(times)) / len(batch)


def read_poses(slp: Path) -> dict[int, np.ndarray]:
    """Frame index -> (instances, nodes, 2) points of the .slp's first video."""
    labels = sio.load_slp(str(slp))
    poses = {}
    for frame in labels.labeled_frames:
        if frame.instances:
            poses[frame.frame_idx] = np.stack([inst.numpy() for inst in frame.instances])
    return poses


def read_boxes(slp: Path, n_frames: int) -> dict[int, np.ndarray]:
    """Frame index -> (boxes, 2, 2): each box of the .slp's first video as the points of
    its top-left and bottom-right corners, for `agreement`."""
    arrays = boxes_to_arrays(slp, n_frames)
    return {
        index: arrays["boxes"][index, :count].reshape(count, 2, 2)
        for index, count in enumerate(arrays["n_boxes"].tolist())
        if count
    }


def agreement(reference: dict[int, np.ndarray], other: dict[int, np.ndarray]) -> dict[str, Any]:
    """How `other`'s poses match `reference`'s, frame by frame (see the module docstring)."""
    matched = largest = same_count = 0
    distances: list[np.ndarray] = []
    counts_differ: list[int] = []
    worst: list[tuple[float, int]] = []
    frames = sorted(set(reference) | set(other))
    for index in frames:
        a, b = reference.get(index), other.get(index)
        count_a, count_b = (0 if a is None else len(a)), (0 if b is None else len(b))
        same_count += count_a == count_b
        if count_a != count_b:
            counts_differ.append(index)
        largest += max(count_a, count_b)
        if not (count_a and count_b):
            continue
        gaps = np.linalg.norm(a[:, None] - b[None], axis=-1)  # (a, b, nodes), NaN: missing
        found = ~np.isnan(gaps)
        mean = np.where(found, gaps, 0).sum(-1) / np.maximum(found.sum(-1), 1)
        rows, cols = linear_sum_assignment(np.where(found.any(-1), mean, 1e9))
        matched += len(rows)
        pair = gaps[rows, cols]
        distances.append(pair[~np.isnan(pair)])
        if distances[-1].size:
            worst.append((float(distances[-1].max()), index))
    points = np.concatenate(distances) if distances else np.zeros(0)
    worst.sort(reverse=True)
    return {
        "frames": len(frames),
        "frames_same_count": same_count,
        "instances_matched": matched / largest if largest else 1.0,
        "points": int(points.size),
        "median_px": float(np.median(points)) if points.size else None,
        "p99_px": float(np.percentile(points, 99)) if points.size else None,
        "max_px": float(points.max()) if points.size else None,
        "points_over_1px": int((points > 1).sum()),
        "frames_counts_differ": counts_differ,
        "frames_worst": [
            {"frame": index, "max_px": px} for px, index in worst[:WORST_FRAMES] if px > 1
        ],
    }


def bench_case(case: Case, args: argparse.Namespace, folder: Path, say: Any) -> dict[str, Any]:
    say(f"{case.name}: clip of {args.frames} frames ...")
    clip = make_clip(case, args.frames, folder)
    height, width, channels = frame_shape(clip)
    export = None
    if not case.no_export:
        say(f"{case.name}: sleap-nn export at {height}x{width} ...")
        export = sleap_nn_export(args.sleap_nn, case, clip, folder)
    verify = case.name not in (args.unverified or ())
    say(f"{case.name}: sleap-live warm (engine only, recorded pipeline) ...")
    live = sleap_live_warm(case, clip, folder, args.batch_size, verify)
    say(f"{case.name}: pixels as sleap-io reads them ...")
    pixels = same_pixels(args.sleap_nn, clip, live.pop("frames"), folder)
    say(f"{case.name}: whole processes ...")
    runs = whole_process(args.sleap_nn, case, clip, export, folder, args.batch_size, verify)
    warm = {}
    if not args.no_warm:
        say(f"{case.name}: sleap-nn in-process, warm ...")
        warm = sleap_nn_warm(args.sleap_nn, case, clip, export, args.batch_size)
    runs["sleap-live"].update(live)
    for runtime, figures in warm.items():
        runs[f"sleap-nn {runtime}"]["warm_fps"] = figures["frames"] / figures["seconds"]
    read = read_poses
    if case.model_type in BOX_MODEL_TYPES:  # a detector alone: boxes, no poses
        read = partial(read_boxes, n_frames=args.frames)
    poses = {tool: read(run.pop("slp")) for tool, run in runs.items()}
    for tool, run in runs.items():
        run["whole_fps"] = args.frames / run["whole_s"]
        if tool != "sleap-nn torch":
            run["agreement"] = agreement(poses["sleap-nn torch"], poses[tool])
    return {
        "model": case.name,
        "model_type": case.model_type,
        "frame": f"{height}x{width}x{channels}",
        "frames": args.frames,
        "clip": "H.264 (lab scene)" if case.scene else "lossless (looped test video)",
        "same_pixels": pixels,
        "runs": runs,
        **({"no_export": case.no_export} if case.no_export else {}),
    }


def environment(sleap_nn: Path) -> dict[str, Any]:
    """The machine, the versions and the date of this run."""
    cpu = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    done = subprocess.run(
        [str(sleap_nn / "python"), "-c", SLEAP_NN_VERSIONS], capture_output=True, text=True
    )
    import onnxruntime
    import torch

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "sleap-live": {
            "sleap-live": metadata.version("sleap-live"),
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
        "sleap-nn": json.loads(done.stdout)
        if done.returncode == 0
        else {"error": done.stderr[-200:]},
        "load_average_start": os.getloadavg(),
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per model and tool, as the table and the markdown show them."""
    out = []
    for result in results:
        runs = result["runs"]
        torch_fps = runs["sleap-nn torch"]["whole_fps"]
        onnx_fps = runs.get("sleap-nn onnx", {}).get("whole_fps")
        for tool in TOOLS:
            if tool not in runs:  # sleap-nn onnx, on a model it has no export of
                reason = f"{tool}: not run, {result.get('no_export', 'no export')}"
                out.append([result["model"], result["frame"], reason, *[""] * 13])
                continue
            run = runs[tool]
            agree = run.get("agreement")
            unverified = "" if run.get("verified", True) else ", unverified"
            name = f"{tool} ({run['engine']}{unverified})" if "engine" in run else tool
            out.append(
                [
                    result["model"],
                    result["frame"],
                    name,
                    _fmt(run["whole_s"]),
                    _fmt(run["whole_fps"]),
                    _fmt(run["whole_fps"] / torch_fps, 2),
                    _fmt(run["whole_fps"] / onnx_fps if onnx_fps else None, 2),
                    _fmt(run.get("warm_fps")),
                    _fmt(run.get("engine_fps")),
                    _fmt(over_networks(run, result.get("frames")), 2),
                    "reference" if agree is None else f"{agree['instances_matched']:.3f}",
                    "" if agree is None else _fmt(agree["median_px"], 4),
                    "" if agree is None else _fmt(agree["p99_px"], 4),
                    "" if agree is None else _fmt(agree["max_px"], 3),
                    "" if agree is None else str(agree["points_over_1px"]),
                    _pixels(result["same_pixels"]) if tool == "sleap-live" else "",
                ]
            )
    return out


def over_networks(run: dict[str, Any], frames: int | None) -> float | None:
    """A whole process's time over its networks' alone on the clip (sleap-live's row),
    or None where they were not timed."""
    networks = run.get("networks_ms")
    if networks is None or not frames:
        return None
    return float(run["whole_s"]) / (frames * networks / 1000)


def _pixels(check: dict[str, Any]) -> str:
    """The `same_pixels` check as the table shows it."""
    if "shapes" in check:
        return "shapes differ"
    shown = f"{check['identical']}/{check['frames']}"
    return shown if check["max_levels"] == 0 else f"{shown} (differ by up to {check['max_levels']})"


COLUMNS = (
    "model",
    "frame",
    "tool",
    "whole s",
    "whole fps",
    "x torch predict",
    "x onnx predict",
    "warm fps",
    "engine-only fps",
    "whole / networks",
    "instances matched",
    "median px",
    "p99 px",
    "max px",
    "points > 1 px",
    "same pixels",
)


def markers(section: str | None) -> tuple[str, str]:
    """The start and end markers of the main table, or of the section named `section`."""
    if section is None:
        return MARK_START, MARK_END
    return (
        f"<!-- bench_vs_sleap_nn {section}: start -->",
        f"<!-- bench_vs_sleap_nn {section}: end -->",
    )


def markdown(results: list[dict[str, Any]], env: dict[str, Any], section: str | None = None) -> str:
    """The section `--markdown` writes: the run's setting, then the table."""
    live, snn = env["sleap-live"], env["sleap-nn"]
    start, end = markers(section)
    lines = [
        start,
        f"Measured {env['date']} on {env['cpu']}, {env['cores']} cores ({env['system']}, "
        f"Python {env['python']}); load average {env['load_average_start'][0]:.1f} at the "
        f"start and {env['load_average_end'][0]:.1f} at the end"
        f"{' (a busy machine: other work shared the cores)' if env['busy'] else ''}.",
        f"sleap-live {live['sleap-live']} (torch {live['torch']}, onnxruntime "
        f"{live['onnxruntime']}); sleap-nn {snn.get('sleap-nn')} (torch {snn.get('torch')}, "
        f"onnxruntime {snn.get('onnxruntime')}). {results[0]['frames'] if results else 0} "
        f"frames per clip; command: `{env['command']}`.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if i < 3 else "---:" for i in range(len(COLUMNS))) + "|",
        *("| " + " | ".join(row) + " |" for row in rows(results)),
        end,
    ]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, section: str, name: str | None = None) -> None:
    """Puts `section` between the markers (`markers(name)`) in `path` (appended when
    they are not there)."""
    mark_start, mark_end = markers(name)
    text = path.read_text() if path.exists() else ""
    start, end = text.find(mark_start), text.find(mark_end)
    if (start < 0) != (end < 0) or end < start:
        raise SystemExit(f"--markdown: {path} has one of the markers without the other")
    if start < 0:
        text = text + ("\n" if text and not text.endswith("\n") else "") + section
    else:
        text = text[:start] + section + text[end + len(mark_end) + 1 :]
    path.write_text(text)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Whole-process and warm frames per second per model and tool, as grouped bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['model']}\n{r['frame']}" for r in results]
    figure, axes = plt.subplots(2, 1, figsize=(max(6, 1.6 * len(results) + 2), 7))
    width = 0.8 / len(TOOLS)
    for ax, key, title in zip(
        axes, ("whole_fps", "warm_fps"), ("whole process", "warm, in-process"), strict=True
    ):
        for i, tool in enumerate(TOOLS):
            values = [r["runs"].get(tool, {}).get(key) or 0 for r in results]
            ax.bar(np.arange(len(results)) + (i - 1) * width, values, width, label=tool)
        ax.set_xticks(np.arange(len(results)), names, fontsize=8)
        ax.set_ylabel("frames / s")
        left_out = key == "warm_fps" and not any(
            r["runs"]["sleap-nn torch"].get(key) for r in results
        )
        ax.set_title(f"{title}, CPU" + (" (sleap-nn's not run: --no-warm)" if left_out else ""))
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sleap-nn", type=Path, required=True, help="bin folder of sleap-nn's venv"
    )
    parser.add_argument(
        "--models", nargs="+", help=f"subset of: {', '.join(c.name for c in CASES)}"
    )
    parser.add_argument("--frames", type=int, default=1100, help="frames per clip")
    parser.add_argument("--batch-size", type=int, help="for every tool (default: each its own)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--markdown", type=Path, help="write the table's section into this file")
    parser.add_argument(
        "--section",
        metavar="NAME",
        help="with --markdown: between markers of this name, not the main table's",
    )
    parser.add_argument("--plot", type=Path, help="write a chart here (PNG, needs matplotlib)")
    parser.add_argument(
        "--no-warm", action="store_true", help="leave out sleap-nn's in-process (warm) runs"
    )
    parser.add_argument(
        "--unverified",
        nargs="+",
        metavar="NAME",
        help="models sleap-live runs without its export check (--no-verify)",
    )
    args = parser.parse_args(argv)
    if not (args.sleap_nn / "sleap-nn").is_file():
        parser.error(f"--sleap-nn: {args.sleap_nn} has no sleap-nn command")
    if args.frames < 1 or (args.batch_size is not None and args.batch_size < 1):
        parser.error("--frames and --batch-size take a positive number")
    if args.section and not args.markdown:
        parser.error("--section names markers in the --markdown file: give --markdown too")
    cases = pick_cases(args.models)
    unknown = sorted(set(args.unverified or ()) - {case.name for case in cases})
    if unknown:
        parser.error(f"--unverified: {', '.join(unknown)} is not among the models run")
    console = Console(stderr=True)
    env = environment(args.sleap_nn)
    env["command"] = " ".join(["python", "scripts/bench_vs_sleap_nn.py", *sys.argv[1:]])
    results, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            # One model's failure (a tool that refuses it) must not lose the others'
            # minutes of measurements: it is reported, and the run goes on.
            try:
                results.append(
                    bench_case(
                        case, args, Path(tmp), lambda line: console.print(line, highlight=False)
                    )
                )
            except SystemExit as failure:
                failures.append(f"{case.name} left out: {failure}")
                console.print(failures[-1], highlight=False)
    if not results:
        return 1
    env["load_average_end"] = os.getloadavg()
    # Other work running before this run started: the figures met competition.
    env["busy"] = env["load_average_start"][0] > 0.5 * (env["cores"] or 1)
    table = Table(title=f"CPU, {args.frames} frames per clip, {env['date']}")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in COLUMNS[:3] else "right")
    for row in rows(results):
        table.add_row(*row)
    Console(width=max(Console().width, 200)).print(table)
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "results": results}, indent=2))
    if args.markdown:
        write_markdown(args.markdown, markdown(results, env, args.section), args.section)
    if args.plot:
        plot(results, args.plot)
    for failure in failures:
        console.print(failure, highlight=False)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
