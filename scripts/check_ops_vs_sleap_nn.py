"""Compare sleap-live's in-graph ops (and, when available, whole models) with sleap-nn's.

Run with the sleap-nn environment, where sleap-live is installed without deps:

    /work/venvs/snn/bin/python scripts/check_ops_vs_sleap_nn.py [--no-ops] \\
        [--models [--runtime torch onnx]]

Ops on random and synthetic inputs: preprocessing (`_apply_full_preprocess` plus
the model's normalisation and channel conversion), global and local peak finding
with integral refinement (including flat tops), crops around centroids. With
`--models`, every trained model pair under tests/data/models/ is also run end to
end (eagerly, and with `--runtime onnx` exported by sleap-live's exporter and run
by ONNX Runtime) on the test videos and compared with the `sleap-nn predict`
goldens under tests/data/goldens/ (the runs in tests/data/manifest.json): instance
counts and order per frame, point distances (median and 99th percentile) and
point and instance score differences.

Prints the largest differences and exits non-zero if any exceeds its tolerance.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from sleap_live.engines.graph import crops, peaks, preprocess, resize

REPO = Path(__file__).resolve().parents[1]


class Report:
    """Collects named maximum differences and whether each is within tolerance."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, name: str, difference: float, tolerance: float) -> None:
        ok = difference <= tolerance
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {difference:.3g} (tolerance {tolerance:g})")
        if not ok:
            self.failures.append(name)


def _nan_max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference, requiring NaNs in the same places (inf otherwise)."""
    a, b = a.double(), b.double()
    if a.shape != b.shape or not torch.equal(torch.isnan(a), torch.isnan(b)):
        return float("inf")
    both = ~torch.isnan(a)
    return float((a[both] - b[both]).abs().max()) if both.any() else 0.0


def _confmaps(rng: np.random.Generator, samples: int, channels: int, size: int) -> torch.Tensor:
    """Gaussian blobs at random sub-pixel positions, with a little noise."""
    yy, xx = np.mgrid[:size, :size].astype(np.float32)
    maps = np.zeros((samples, channels, size, size), np.float32)
    for s in range(samples):
        for c in range(channels):
            for _ in range(rng.integers(0, 5)):
                x, y = rng.uniform(-2, size + 1, 2)
                sigma = rng.uniform(0.8, 3.0)
                amplitude = rng.uniform(0.1, 1.0)
                maps[s, c] += amplitude * np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * sigma**2))
    maps += rng.normal(0, 0.01, maps.shape).astype(np.float32)
    return torch.from_numpy(maps)


def check_preprocess(report: Report, rng: np.random.Generator) -> None:
    from sleap_nn.data.normalization import normalize_on_gpu
    from sleap_nn.inference.layers.base import InferenceLayer
    from sleap_nn.inference.layers.configs import PreprocessConfig as SleapNNPreprocess

    class _Layer(InferenceLayer):
        def postprocess(self, raw_out, info):
            raise NotImplementedError

    settings = [
        dict(scale=0.5, max_stride=16),
        dict(scale=0.37, max_stride=32),
        dict(scale=1.0, max_stride=16, max_height=256, max_width=320),
        dict(scale=0.5, max_stride=16, max_height=300),
        dict(scale=0.75, max_stride=16, max_height=500, max_width=700, ensure_grayscale=True),
        dict(scale=1.5, max_stride=8, ensure_rgb=True),
    ]
    worst_input, worst_scale = 0.0, 0.0
    for setting in settings:
        for channels in (1, 3):
            for height, width in ((203, 301), (256, 320), (480, 640)):
                frames = torch.from_numpy(
                    rng.integers(0, 256, (2, height, width, channels), dtype=np.uint8)
                )
                layer = _Layer.__new__(_Layer)
                layer.preprocess_config = SleapNNPreprocess(
                    scale=setting["scale"],
                    max_height=setting.get("max_height"),
                    max_width=setting.get("max_width"),
                    ensure_rgb=setting.get("ensure_rgb"),
                    ensure_grayscale=setting.get("ensure_grayscale"),
                )
                expected, eff_scale, _ = layer._apply_full_preprocess(
                    frames.permute(0, 3, 1, 2),
                    max_stride=setting["max_stride"],
                    unsqueeze_n_samples=False,
                )
                expected = normalize_on_gpu(expected)
                for in_channels in (1, 3):
                    reference = _sleap_nn_match_channels(expected, in_channels)
                    config = preprocess.PreprocessConfig(in_channels=in_channels, **setting)
                    ours, our_scale = preprocess.frame_input(
                        preprocess.frames_to_nchw(frames), config
                    )
                    if ours.shape != reference.shape:
                        worst_input = float("inf")
                        continue
                    worst_input = max(worst_input, float((ours - reference).abs().max()))
                    worst_scale = max(worst_scale, abs(float(our_scale) - float(eff_scale[0])))
    report.check("preprocess: network input", worst_input, 0.0)
    report.check("preprocess: size matcher scale", worst_scale, 0.0)


def _sleap_nn_match_channels(image: torch.Tensor, in_channels: int) -> torch.Tensor:
    import torchvision.transforms.v2.functional as tvf

    if image.shape[1] == in_channels:
        return image
    if image.shape[1] == 1:
        return image.repeat(1, 3, 1, 1)
    return tvf.rgb_to_grayscale(image, num_output_channels=1)


def check_resize(report: Report, rng: np.random.Generator) -> None:
    import torch.nn.functional as F

    worst = 0.0
    for height, width, out_height, out_width in (
        (100, 120, 50, 60),
        (97, 131, 40, 77),
        (64, 64, 128, 128),
        (1000, 1000, 300, 300),
        (300, 500, 37, 23),
        (200, 300, 199, 301),
        (1080, 1920, 120, 213),
    ):
        image = torch.from_numpy(rng.integers(0, 256, (2, 3, height, width), dtype=np.uint8))
        expected = F.interpolate(
            image, (out_height, out_width), mode="bilinear", antialias=True, align_corners=False
        )
        ours = resize.resize_uint8_exportable(image, out_height, out_width)
        worst = max(worst, float((ours.int() - expected.int()).abs().max()))
    report.check("exportable uint8 antialiased resize vs torch (grey levels)", worst, 0.0)


def check_global_peaks(report: Report, rng: np.random.Generator) -> None:
    from sleap_nn.inference.ops.peaks import find_global_peaks

    worst_points, worst_values = 0.0, 0.0
    for quantize in (None, 0.05):
        cms = _confmaps(rng, 4, 6, 40)
        if quantize:
            cms = torch.round(cms / quantize) * quantize  # plenty of ties
        for refinement in ("integral", None):
            expected_points, expected_values = find_global_peaks(
                cms, threshold=0.2, refinement=refinement
            )
            ours, values = peaks.global_peaks(cms, 0.2, refine=refinement is not None)
            # sleap-nn reports 0 for a map without a peak; we report NaN.
            missing = cms.amax(dim=(2, 3)) < 0.2
            expected_values = torch.where(missing, float("nan"), expected_values)
            worst_points = max(worst_points, _nan_max_diff(ours, expected_points))
            worst_values = max(worst_values, _nan_max_diff(values, expected_values))
    report.check("global peaks: points (grid px)", worst_points, 1e-5)
    report.check("global peaks: values", worst_values, 0.0)


def check_local_peaks(report: Report, rng: np.random.Generator) -> None:
    from sleap_nn.inference.ops.peaks import find_local_peaks

    worst_points, worst_values, count_mismatch = 0.0, 0.0, 0
    for quantize in (None, 0.1, 0.25):
        cms = _confmaps(rng, 6, 1, 48)
        if quantize:
            cms = torch.round(cms / quantize) * quantize  # flat tops of every shape
        expected_points, expected_values, expected_samples, _ = find_local_peaks(
            cms, threshold=0.2, refinement="integral"
        )
        for max_peaks in (1, 3, 1000):
            samples, points, values = peaks.top_local_peaks(cms, max_peaks, 0.2)
            reference = _sleap_nn_top_k(
                expected_points, expected_values, expected_samples, cms.shape[0], max_peaks
            )
            if not torch.equal(samples, reference[0]):
                count_mismatch += 1
                continue
            worst_points = max(worst_points, _nan_max_diff(points, reference[1]))
            worst_values = max(worst_values, _nan_max_diff(values, reference[2]))
    report.check("local peaks: peak lists differing", count_mismatch, 0)
    report.check("local peaks: points (grid px)", worst_points, 1e-5)
    report.check("local peaks: values", worst_values, 0.0)


def _sleap_nn_top_k(points, values, samples, n_samples, max_peaks):
    """sleap-nn's CentroidLayer selection: all peaks in raster order, or the top k."""
    out_samples, out_points, out_values = [], [], []
    for sample in range(n_samples):
        mask = samples == sample
        sample_points, sample_values = points[mask], values[mask]
        if sample_points.shape[0] > max_peaks:
            sample_values, order = torch.topk(sample_values, max_peaks)
            sample_points = sample_points[order]
        out_samples.append(torch.full((sample_points.shape[0],), sample, dtype=torch.int64))
        out_points.append(sample_points)
        out_values.append(sample_values)
    return torch.cat(out_samples), torch.cat(out_points), torch.cat(out_values)


def check_crops(report: Report, rng: np.random.Generator) -> None:
    from sleap_nn.inference.ops.crops import crop_bboxes, make_centered_bboxes

    images = torch.from_numpy(rng.integers(0, 256, (3, 2, 90, 130), dtype=np.uint8))
    centers = np.concatenate(
        [
            rng.uniform(-3, 133, (40, 2)),
            np.round(rng.uniform(0, 90, (20, 2))) + 0.5,  # exact half-pixel centers
            np.array([[0.0, 0.0], [129.9, 89.9], [-0.4, 45.0], [64.0, -0.6]]),
        ]
    ).astype(np.float32)
    centers = torch.from_numpy(centers)
    sample_inds = torch.from_numpy(rng.integers(0, 3, centers.shape[0]))
    worst_pixels, worst_offset = 0, 0.0
    for height, width in ((64, 64), (33, 33), (48, 40)):
        boxes = make_centered_bboxes(centers, height, width)
        expected = crop_bboxes(images, boxes, sample_inds, crop_size=(height, width))
        nhwc = images.permute(0, 2, 3, 1).contiguous()
        ours = crops.crop_centered(nhwc, sample_inds, centers, height, width)
        worst_pixels = max(
            worst_pixels, int((ours.permute(0, 3, 1, 2).int() - expected.int()).abs().max())
        )
        top_left = crops.box_top_left(centers, height, width)
        worst_offset = max(worst_offset, float((top_left - boxes[:, 0]).abs().max()))
    report.check("crops: pixels", worst_pixels, 0)
    report.check("crops: box top-left", worst_offset, 0.0)


def _predict_runs(manifest: dict) -> list[tuple[str, list[Path], Path]]:
    """(golden name, model directories, video) of each recorded `sleap-nn predict` run."""
    runs = []
    for name, record in manifest.get("predict", {}).items():
        words = shlex.split(record["command"])
        models, video, option = [], None, None
        for word in words:
            if word.startswith("-"):
                option = word
            elif option in ("--model_paths", "-m"):
                models.append(REPO / word)  # the option takes one or more values
            elif option == "--data_path":
                video = REPO / word
        runs.append((name, models, video))
    return runs


def _build(model_dirs: list[Path]):
    """Our inference model for the directories sleap-nn predict was given."""
    from sleap_live.engines.graph.centroid import CentroidModel
    from sleap_live.engines.graph.single_instance import SingleInstanceModel
    from sleap_live.engines.graph.topdown import MultiClassTopDownModel, TopDownModel
    from sleap_live.engines.load.training_config import read_training_config

    specs = {spec.model_type: spec for spec in map(read_training_config, model_dirs)}
    if set(specs) == {"single_instance"}:
        return SingleInstanceModel.from_spec(specs["single_instance"])
    if set(specs) == {"centroid"}:
        return CentroidModel.from_spec(specs["centroid"])
    if set(specs) == {"centroid", "centered_instance"}:
        return TopDownModel.from_specs(specs["centroid"], specs["centered_instance"])
    if set(specs) == {"centroid", "multi_class_topdown"}:
        return MultiClassTopDownModel.from_specs(specs["centroid"], specs["multi_class_topdown"])
    return None


def _match(golden_points: np.ndarray, our_points: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (golden, ours) of instances, by least total distance over shared nodes."""
    from scipy.optimize import linear_sum_assignment

    if not len(golden_points) or not len(our_points):
        return []
    distances = np.linalg.norm(golden_points[:, None] - our_points[None], axis=-1)
    cost = np.where(np.isnan(distances), 1e3, distances).mean(-1)
    return list(zip(*linear_sum_assignment(cost), strict=True))


def _torch_runner(model) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    def run(frames: np.ndarray) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            outputs = model(torch.from_numpy(frames))
        return {k: v.numpy() for k, v in zip(model.output_names, outputs, strict=True)}

    return run


def _onnx_runner(model, check_frames: list[np.ndarray]) -> Callable[[np.ndarray], dict]:
    """Exports `model` with sleap-live's exporter (verified on `check_frames`) and runs it."""
    import tempfile

    import onnxruntime as ort

    from sleap_live.engines.export.exporter import export_graph
    from sleap_live.engines.ort_options import session_options

    with tempfile.TemporaryDirectory() as directory:
        path = export_graph(model, directory, format="onnx", verify_frames=check_frames)
        options = session_options()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def run(frames: np.ndarray) -> dict[str, np.ndarray]:
        outputs = session.run(model.output_names, {input_name: frames})
        return dict(zip(model.output_names, outputs, strict=True))

    return run


def check_goldens(report: Report, batch_size: int, runtime: str) -> None:
    import json
    import time

    import sleap_io as sio

    from sleap_live.engines.host.postprocess import decode

    manifest_path = REPO / "tests" / "data" / "manifest.json"
    if not manifest_path.is_file():
        print("skip goldens: no tests/data/manifest.json")
        return
    for name, model_dirs, video_path in _predict_runs(json.loads(manifest_path.read_text())):
        golden_path = REPO / "tests" / "data" / "goldens" / f"{name}.npz"
        model = _build(model_dirs) if golden_path.is_file() else None
        if model is None:
            print(f"skip golden {name}: no golden file or not an instance-list model")
            continue
        model.eval()
        golden = np.load(golden_path)
        video = sio.load_video(str(video_path))
        frame_indices = golden["frame_indices"].tolist()
        batches = [
            np.stack([video[i] for i in frame_indices[start : start + batch_size]])
            for start in range(0, len(frame_indices), batch_size)
        ]
        if runtime == "onnx":
            run = _onnx_runner(model, [batches[0], batches[-1][:1]])
        else:
            run = _torch_runner(model)
        errors, score_errors, order_mismatches, count_mismatches = [], [], 0, 0
        seconds = 0.0
        for batch_index, frames in enumerate(batches):
            began = time.perf_counter()
            poses = decode(model.info, run(frames), len(frames))
            seconds += time.perf_counter() - began
            for offset, frame_poses in enumerate(poses):
                row = batch_index * batch_size + offset
                n = int(golden["n_instances"][row])
                golden_points = golden["points"][row, :n]
                if frame_poses.n_instances != n:
                    count_mismatches += 1
                pairs = _match(golden_points, frame_poses.points)
                order_mismatches += sum(g != o for g, o in pairs)
                for g, o in pairs:
                    distance = np.linalg.norm(golden_points[g] - frame_poses.points[o], axis=-1)
                    errors.extend(distance[~np.isnan(distance)].tolist())
                    both = ~np.isnan(frame_poses.point_scores[o]) & ~np.isnan(distance)
                    point_scores = golden["point_scores"][row, g][both]
                    score_errors.extend(
                        np.abs(point_scores - frame_poses.point_scores[o][both]).tolist()
                    )
                    instance_score = float(golden["instance_scores"][row, g])
                    score_errors.append(abs(instance_score - float(frame_poses.instance_scores[o])))
        errors_array = np.array(errors) if errors else np.zeros(1)
        label = f"{name} ({runtime})"
        print(
            f"     {label}: {len(frame_indices)} frames, {len(errors)} points, "
            f"{seconds:.2f} s to run and decode (batch {batch_size})"
        )
        report.check(f"{label}: frames with a different instance count", count_mismatches, 0)
        report.check(f"{label}: instances in a different order", order_mismatches, 0)
        report.check(f"{label}: median point distance (px)", float(np.median(errors_array)), 0.1)
        p99 = float(np.percentile(errors_array, 99))
        report.check(f"{label}: p99 point distance (px)", p99, 0.5)
        report.check(f"{label}: max score difference", max(score_errors, default=0.0), 1e-3)


OP_CHECKS: tuple[Callable[[Report, np.random.Generator], None], ...] = (
    check_preprocess,
    check_resize,
    check_global_peaks,
    check_local_peaks,
    check_crops,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models", action="store_true", help="also compare trained models with the goldens"
    )
    parser.add_argument("--ops", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument(
        "--runtime",
        nargs="+",
        choices=("torch", "onnx"),
        default=["torch"],
        help="run the models eagerly in torch and/or exported to ONNX Runtime",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    report = Report()
    rng = np.random.default_rng(args.seed)
    if args.ops:
        for check in OP_CHECKS:
            check(report, rng)
    if args.models:
        for runtime in args.runtime:
            check_goldens(report, args.batch_size, runtime)
    if report.failures:
        print(f"{len(report.failures)} check(s) failed: {', '.join(report.failures)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
