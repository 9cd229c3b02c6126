"""The engine's time per frame against its networks alone, at lab frame sizes.

    python scripts/bench_prepost.py [--sizes 384x384 1024x1024 1280x1024]
        [--types topdown bottomup single_instance] [--model SIZE:TYPE=DIR[,DIR2]]...
        [--lab NAME]...
        [--video PATH]... [--no-verify] [--batch-size 8] [--repeats 15] [--threads N] [--json PATH]

For each model type and frame size: the engine (`load_runner(..., engine="onnx")`
on the CPU, whole `runner.run`: the exported graph with preprocessing, peaks,
refinement, crops and PAF scoring, and the host decoding of its outputs) against
its networks alone (the bare UNets exported to ONNX at the very input shapes the
engine feeds them: for top-down, the centroid network on the preprocessed frames
and the instance network on as many crops as the engine found in that batch),
in ONNX Runtime sessions with the runner's options, in one process. The two
alternate run by run; the table gives the median time per frame of each, their
ratio and whether it is within `BOUND` (issue 10: pre- and post-processing
within 15% of the networks). "graph" is `session.run` alone (no host decoding).

Models: `--model 384x384:topdown=CENTROID_DIR,INSTANCE_DIR` (repeatable) for
trained ones; any (size, type) without one gets a random-weight model made from a
lab-like training config (`lab_like_config`: UNet filters 16, max stride 8, the
size matcher at the frame size, input scale 0.5 from 1024 pixels up, 96-pixel
crops), its head bias set so that about two animals are found per frame.
Frames are the first frames of a `--video` of that size (gray; e.g. a lab clip),
else the fixture clips' frames tiled to the size. `--lab NAME` (repeatable; the names
of `scripts/fixtures/lab.py`'s `LAB_MODELS`) benchmarks those trained lab models
instead of the sizes and types, each on the first frames of its own scene's clip
(rendered from its seed, H.264). Times are
wall-clock on this machine as it is: on a shared machine the ratios, measured
side by side, are what counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.table import Table

from sleap_live.engines.graph.network import Network, build_network
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.preprocess import PreprocessConfig, frame_input, network_input
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.spec import CROP_MODEL_TYPES, ModelSpec
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx_session import create_session

try:  # the lab-size models, where this checkout has them
    from fixtures.lab import LAB_MODELS, write_clip
except ImportError:
    LAB_MODELS, write_clip = (), None

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
BOUND = 1.15
SIZES = ("384x384", "1024x1024", "1280x1024")
TYPES = ("topdown", "bottomup", "single_instance")
# The model directories of each type, as fixture names (their configs are the templates).
DIRS = {
    "topdown": ("centroid", "centered_instance"),
    "bottomup": ("bottomup",),
    "single_instance": ("single_instance",),
}
CLIPS = {"topdown": "multi_gray.mkv", "bottomup": "multi_gray.mkv", "single_instance": "single.mkv"}
# The head whose bias sets how many animals a random-weight model finds.
COUNTED_HEADS = {
    "centroid": "CentroidConfmapsHead",
    "bottomup": "MultiInstanceConfmapsHead",
    "centered_instance": "CenteredInstanceConfmapsHead",
    "single_instance": "SingleInstanceConfmapsHead",
}
ANIMALS = 2
PEAK_THRESHOLD = 0.2


def parse_size(text: str) -> tuple[int, int]:
    """'WIDTHxHEIGHT' -> (height, width)."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WIDTHxHEIGHT (1280x1024)") from None
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive")
    return height, width


def tiled_frames(clip: Path, height: int, width: int, count: int) -> np.ndarray:
    """The clip's first `count` gray frames, each tiled to (height, width): (count, H, W, 1)."""
    import av

    frames = []
    with av.open(str(clip)) as container:
        for frame in container.decode(video=0):
            image = frame.to_ndarray(format="gray")
            reps = (-(-height // image.shape[0]), -(-width // image.shape[1]))
            frames.append(np.tile(image, reps)[:height, :width, None])
            if len(frames) == count:
                break
    return np.ascontiguousarray(np.stack(frames))


def video_frames(path: Path, count: int) -> np.ndarray:
    """The video's first `count` frames, gray: (count, H, W, 1)."""
    import av

    frames = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="gray")[..., None])
            if len(frames) == count:
                break
    if not frames:
        raise SystemExit(f"{path}: no frames decoded")
    return np.ascontiguousarray(np.stack(frames))


def lab_like_config(template: dict[str, Any], name: str, height: int, width: int) -> dict:
    """A fixture training config made lab-like for (height, width) frames (see the docstring)."""
    config = json.loads(json.dumps(template))
    preprocessing = config["data_config"]["preprocessing"]
    preprocessing["max_height"], preprocessing["max_width"] = height, width
    large = max(height, width) >= 1024
    preprocessing["scale"] = 0.5 if large and name != "centered_instance" else 1.0
    if name == "centered_instance":
        preprocessing["crop_size"] = 96
    unet = config["model_config"]["backbone_config"]["unet"]
    unet.update(filters=16, filters_rate=2.0, max_stride=8, stem_stride=None)
    return config


def network_input_of(spec: ModelSpec, frames: np.ndarray) -> torch.Tensor:
    """The network input sleap-nn's preprocessing makes of uint8 (B, H, W, C) frames."""
    image, _ = frame_input(
        torch.from_numpy(frames).permute(0, 3, 1, 2), PreprocessConfig.from_spec(spec)
    )
    return image


def crop_network_input(spec: ModelSpec, crops: np.ndarray) -> torch.Tensor:
    """The network input of a centered-instance model for uint8 (N, S, S, C) crops (no
    size matching to the frame, which `network_input_of` would do)."""
    return network_input(
        torch.from_numpy(crops).permute(0, 3, 1, 2), PreprocessConfig.from_spec(spec)
    )


def calibrated(network: Network, head: str, image: torch.Tensor, single: bool) -> None:
    """Shifts `head`'s bias so that about `ANIMALS` local peaks per map top the threshold.

    A single-instance head (one global peak per map) is lifted so that its peaks are found.
    """
    with torch.no_grad():
        maps = network(image)[head]
        if single:
            shift = PEAK_THRESHOLD + 0.2 - maps.amax((2, 3)).median()
        else:
            pooled = torch.nn.functional.max_pool2d(maps, 3, 1, 1)
            peaks = torch.where(maps == pooled, maps, float("-inf")).flatten(2)
            top = peaks.topk(ANIMALS + 1, dim=2).values  # (B, C, ANIMALS + 1)
            between = (top[..., ANIMALS - 1] + top[..., ANIMALS]) / 2
            shift = PEAK_THRESHOLD - between.median()
        network.heads[head].conv.bias += shift


def random_model_dirs(
    root: Path, model_type: str, height: int, width: int, frames: np.ndarray
) -> list[Path]:
    """Random-weight, lab-like model directories of `model_type` for (height, width) frames."""
    dirs = []
    for name in DIRS[model_type]:
        template = yaml.safe_load((DATA / "models" / name / "training_config.yaml").read_text())
        directory = root / f"{width}x{height}" / name
        directory.mkdir(parents=True, exist_ok=True)
        config = lab_like_config(template, name, height, width)
        (directory / "training_config.yaml").write_text(yaml.safe_dump(config))
        torch.save({"state_dict": {}}, directory / "best.ckpt")  # read_model_dir wants one
        spec = read_model_dir(directory)
        torch.manual_seed(len(dirs))
        network = build_network(spec)
        if name == "centered_instance":
            crop = spec.preprocess.crop_size or 96
            image = torch.rand(4, spec.in_channels, crop, crop)
        else:
            image = network_input_of(spec, frames)
        single = name not in ("centroid", "bottomup")
        calibrated(network, COUNTED_HEADS[name], image, single=single)
        state = {network.sleap_nn_keys[key]: value for key, value in network.state_dict().items()}
        torch.save({"epoch": 0, "state_dict": state}, directory / "best.ckpt")
        dirs.append(directory)
    return dirs


class Heads(torch.nn.Module):
    """A `Network` whose outputs are its heads as a tuple (for a bare ONNX export)."""

    def __init__(self, network: Network) -> None:
        super().__init__()
        self.network = network

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        heads = self.network(image)
        return tuple(heads[name] for name in sorted(heads))


def bare_session(network: Network, image: torch.Tensor, threads: int | None) -> Any:
    """An ONNX Runtime session (the runner's options) of the network alone at `image`'s shape."""
    import io

    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            Heads(network), (image,), buffer, dynamo=False, opset_version=17, input_names=["x"]
        )
    return create_session(buffer.getvalue(), intra_op_threads=threads)


def networks_alone(
    model_type: str, dirs: Sequence[Path], frames: np.ndarray, crops: int, threads: int | None
) -> Callable[[], None]:
    """Runs the model's networks once at the engine's shapes (`crops` instance crops)."""
    specs = [read_model_dir(path) for path in dirs]
    runs = []
    for spec in specs:
        if spec.model_type in CROP_MODEL_TYPES:  # the instance stage of a top-down pair
            if crops == 0:
                continue
            size = spec.preprocess.crop_size
            image = crop_network_input(
                spec, np.zeros((crops, size, size, spec.in_channels), np.uint8)
            )
        else:
            image = network_input_of(spec, frames)
        session = bare_session(load_model_network(spec), image, threads)
        feed = {"x": image.numpy()}
        runs.append(lambda session=session, feed=feed: session.run(None, feed))

    def run() -> None:
        for each in runs:
            each()

    return run


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def bench_case(
    model_type: str,
    size: tuple[int, int],
    dirs: Sequence[Path],
    args: argparse.Namespace,
    cache_dir: Path,
    verify: bool,
    video: Path | None,
) -> dict[str, Any]:
    """One row: engine, graph and networks-alone medians per frame, and their ratio.

    Frames: the first of `video`, else the fixture clip of `model_type` tiled to `size`.
    """
    height, width = size
    if video is not None:
        frames = video_frames(video, args.batch_size)
    else:
        frames = tiled_frames(DATA / "videos" / CLIPS[model_type], height, width, args.batch_size)
    runner = load_runner(
        [str(path) for path in dirs],
        engine="onnx",
        device="cpu",
        threads=args.threads,
        cache_dir=cache_dir,
        verify_frames=frames,
        verify=verify,
    )
    try:
        runner.run(frames)
        # The graph that runs these frames alone, for the "graph" column.
        session = runner.session_for(frames.shape[1:])
        input_name = session.get_inputs()[0].name
        # Every centroid is cropped and run, whether or not its instance is kept after.
        names = [output.name for output in session.get_outputs()]
        graph_outputs = dict(zip(names, session.run(None, {input_name: frames}), strict=True))
        found = graph_outputs.get("instance_frame")
        crops = 0 if found is None else len(found)
        networks = networks_alone(model_type, dirs, frames, crops, args.threads)
        engine_times, graph_times, network_times = [], [], []
        for _ in range(args.warmup):
            runner.run(frames), networks()
        for _ in range(args.repeats):
            engine_times.append(timed(lambda: runner.run(frames)))
            network_times.append(timed(networks))
            graph_times.append(timed(lambda: session.run(None, {input_name: frames})))
    finally:
        runner.close()
    per_frame = 1000 / len(frames)
    engine = statistics.median(engine_times) * per_frame
    graph = statistics.median(graph_times) * per_frame
    network = statistics.median(network_times) * per_frame
    ratios = [e / n for e, n in zip(engine_times, network_times, strict=True)]
    ratio = statistics.median(ratios)
    return {
        "type": model_type,
        "size": f"{width}x{height}",
        "batch": len(frames),
        "instances_per_frame": crops / len(frames),  # as the graph lists them
        "engine_ms": engine,
        "graph_ms": graph,
        "networks_ms": network,
        "ratio": ratio,
        "pass": ratio <= BOUND,
        "models": [str(path) for path in dirs],
    }


def parse_model(text: str) -> tuple[tuple[int, int], str, list[Path]]:
    """'SIZE:TYPE=DIR[,DIR2]' -> ((height, width), type, dirs)."""
    try:
        where, paths = text.split("=", 1)
        size, model_type = where.split(":", 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SIZE:TYPE=DIR[,DIR2]") from None
    if model_type not in TYPES:
        raise argparse.ArgumentTypeError(f"{text!r}: type must be one of {', '.join(TYPES)}")
    dirs = [Path(path) for path in paths.split(",")]
    for path in dirs:
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{path}: no such model directory")
    return parse_size(size), model_type, dirs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_sizes = [parse_size(size) for size in SIZES]
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=default_sizes)
    parser.add_argument("--types", nargs="+", choices=TYPES, default=list(TYPES))
    parser.add_argument("--model", action="append", type=parse_model, default=[])
    parser.add_argument("--video", action="append", type=Path, default=[])
    parser.add_argument(
        "--lab",
        action="append",
        choices=[model.name for model in LAB_MODELS],
        default=[],
        help="a trained lab model, on its own scene's clip (instead of --sizes and --types)",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the export's check of trained models"
    )
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1:
        parser.error("--batch-size and --repeats must be positive")
    given = {(size, model_type): dirs for size, model_type, dirs in args.model}
    args.videos = {}
    for video in args.video:
        if not video.is_file():
            parser.error(f"--video {video}: no such file")
        frames = video_frames(video, 1)
        args.videos[(frames.shape[1], frames.shape[2])] = video
    labs = [model for model in LAB_MODELS if model.name in args.lab]
    for model in labs:
        if not all((path / "best.ckpt").is_file() for path in model.paths):
            parser.error(f"--lab {model.name}: not trained (make_fixtures.py lab_train)")
    rows = []
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="bench_prepost_") as scratch:
        root = Path(scratch)
        # (type, size, model dirs or None for random weights, video or None)
        cases: list[tuple[str, tuple[int, int], list[Path] | None, Path | None]] = []
        for model in labs:
            assert write_clip is not None
            clip = write_clip(root / f"{model.scene}.mp4", model.scene, args.batch_size)
            cases.append((model.model_type, model.frame_shape, model.paths, clip))
        if not labs:
            for size in args.sizes:
                for model_type in args.types:
                    dirs = given.get((size, model_type))
                    cases.append((model_type, size, dirs, args.videos.get(size)))
        for model_type, size, dirs, video in cases:
            # A random-weight model's maps are noise, whose near-ties the export's
            # check against torch (within its tolerance) is not meant for.
            trained = dirs is not None and not args.no_verify
            if dirs is None:
                height, width = size
                frames = tiled_frames(DATA / "videos" / CLIPS[model_type], height, width, 4)
                dirs = random_model_dirs(root / "models", model_type, height, width, frames)
            console.print(f"{model_type} at {size[1]}x{size[0]} ...")
            rows.append(bench_case(model_type, size, dirs, args, root / "cache", trained, video))
    table = Table(title=f"engine vs networks alone, ms per frame (bound {BOUND}x)")
    columns = ("type", "size", "batch", "inst/frame", "engine", "graph", "networks", "ratio", "")
    for column in columns:
        table.add_column(column, justify="left" if column in ("type", "size") else "right")
    for row in rows:
        table.add_row(
            row["type"],
            row["size"],
            str(row["batch"]),
            f"{row['instances_per_frame']:.1f}",
            f"{row['engine_ms']:.1f}",
            f"{row['graph_ms']:.1f}",
            f"{row['networks_ms']:.1f}",
            f"{row['ratio']:.2f}",
            "pass" if row["pass"] else "FAIL",
        )
    Console(width=120).print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(row["pass"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
