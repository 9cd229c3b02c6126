"""Compare sleap-live's bottom-up engines with sleap-nn's predict, piece by piece and end to end.

Run with the sleap-nn environment, where sleap-live is installed without deps:

    /work/venvs/snn/bin/python scripts/check_bottomup_vs_sleap_nn.py [--trials N] [--models]

Synthetic part: confidence maps, PAFs and class maps rendered from random skeleton
instances (crossing animals, missing nodes, distractor blobs, flat tops from
quantised maps), at random frame sizes, strides and input scales, go through

- sleap-nn's `find_local_peaks` vs our `top_peaks_per_channel` (peaks and values),
- sleap-nn's `score_paf_lines_batch` vs our `PafLineScorer` (line scores),
- sleap-nn's `BottomUpLayer.postprocess` / `BottomUpMultiClassLayer.postprocess`
  (what `sleap-nn predict` runs after the network) vs our `BottomUpModel` /
  `MultiClassBottomUpModel` with the same maps as network output, decoded by
  `PafGrouper` / `ClassMapGrouper` (grouped instances).

With `--models`, the trained models under tests/data/models/{bottomup,
multi_class_bottomup} run end to end on their test videos (in torch, or with
`--onnx` as ONNX exports in onnxruntime) and are compared with the `sleap-nn
predict` goldens in tests/data/goldens/ (or `--goldens`). A bottom-up golden
predicted with `--min_line_scores X` needs `--min-line-scores X` here.

Prints the differences and exits non-zero if any exceeds its tolerance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sleap_nn.inference.layers.backends.torch_backend import TorchBackend
from sleap_nn.inference.layers.bottomup import BottomUpLayer
from sleap_nn.inference.layers.bottomup_multiclass import BottomUpMultiClassLayer
from sleap_nn.inference.layers.configs import PostprocessConfig
from sleap_nn.inference.ops.paf import PAFScorer, score_paf_lines_batch
from sleap_nn.inference.ops.peaks import find_local_peaks
from sleap_nn.inference.preprocess_info import PreprocInfo

from sleap_live.engines.graph.bottomup import (
    BottomUpModel,
    MultiClassBottomUpModel,
    top_peaks_per_channel,
)
from sleap_live.engines.graph.paf import PafLineScorer
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.host.grouping import ClassMapGrouper, PafGrouper
from sleap_live.engines.types import FramePoses, Skeleton

REPO = Path(__file__).resolve().parents[1]
MAX_STRIDE = 16
# Generous K, so that synthetic frames never exceed it (sleap-nn keeps every peak).
K = 48

# Tolerances of the brief: coordinates in pixels, scores absolute.
POINT_MEDIAN_TOL = 0.1
POINT_P99_TOL = 0.5
SCORE_TOL = 1e-3
COUNT_AGREEMENT = 0.99


class Report:
    """Collects named differences and whether each is within tolerance."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, name: str, value: float, tolerance: float, *, at_least: bool = False) -> None:
        ok = value >= tolerance if at_least else value <= tolerance
        relation = ">=" if at_least else "<="
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {value:.4g} (want {relation} {tolerance:g})")
        if not ok:
            self.failures.append(name)


class FixedMaps(torch.nn.Module):
    """A stand-in network that returns the same head outputs for any input."""

    def __init__(self, heads: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(self.heads)


# ------------------------------------------------------------------ synthetic data


def random_skeleton(rng: np.random.Generator) -> tuple[int, list[tuple[int, int]]]:
    n_nodes = int(rng.integers(3, 9))
    edges = [(int(rng.integers(0, i)), i) for i in range(1, n_nodes)]
    if rng.uniform() < 0.3:  # extra edges the breadth-first walk must skip
        a, b = sorted(rng.choice(n_nodes, 2, replace=False))
        edges.append((int(a), int(b)))
    order = rng.permutation(len(edges))
    return n_nodes, [edges[i] for i in order]


def random_instances(
    rng: np.random.Generator, n_nodes: int, edges: list[tuple[int, int]], height: int, width: int
) -> np.ndarray:
    """(instances, nodes, 2) poses in scaled-input pixels, NaN for missing nodes."""
    n_instances = int(rng.integers(0, 6))
    poses = np.full((n_instances, n_nodes, 2), np.nan, np.float32)
    parents = {dst: src for src, dst in reversed(edges) if dst != 0}
    for i in range(n_instances):
        poses[i, 0] = rng.uniform([8, 8], [width - 8, height - 8])
        for node in range(1, n_nodes):
            src = parents.get(node, 0)
            angle = rng.uniform(0, 2 * np.pi)
            length = rng.uniform(6, 20)
            base = poses[i, src] if not np.isnan(poses[i, src, 0]) else poses[i, 0]
            poses[i, node] = base + length * np.array([np.cos(angle), np.sin(angle)])
    poses[rng.uniform(size=poses.shape[:2]) < 0.1] = np.nan
    return poses


def render_confmaps(poses, n_nodes, height, width, stride, sigma, rng):
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) * stride
    maps = np.zeros((n_nodes, height, width), np.float32)
    for pose in poses:
        for node, (x, y) in enumerate(pose):
            if not np.isnan(x):
                blob = np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * sigma**2))
                maps[node] = np.maximum(maps[node], blob * rng.uniform(0.5, 1.0))
    for _ in range(int(rng.integers(0, 4))):  # distractors
        node = int(rng.integers(0, n_nodes))
        x, y = rng.uniform(0, width * stride), rng.uniform(0, height * stride)
        blob = np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * sigma**2))
        maps[node] = np.maximum(maps[node], blob * rng.uniform(0.25, 0.6))
    maps += rng.normal(0, 0.01, maps.shape).astype(np.float32)
    if rng.uniform() < 0.3:  # fp16-like quantisation creates flat tops
        maps = np.round(maps * 64) / 64
    return maps


def render_pafs(poses, edges, height, width, stride, sigma, rng):
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) * stride
    pafs = np.zeros((len(edges), 2, height, width), np.float32)
    for pose in poses:
        for e, (src, dst) in enumerate(edges):
            a, b = pose[src], pose[dst]
            if np.isnan(a[0]) or np.isnan(b[0]):
                continue
            vec = b - a
            length = float(np.hypot(*vec))
            unit = vec / max(length, 1e-6)
            along = (xs - a[0]) * unit[0] + (ys - a[1]) * unit[1]
            across = np.abs((xs - a[0]) * unit[1] - (ys - a[1]) * unit[0])
            mask = (along >= -sigma) & (along <= length + sigma) & (across <= sigma)
            pafs[e, 0] += mask * unit[0]
            pafs[e, 1] += mask * unit[1]
    pafs += rng.normal(0, 0.05, pafs.shape).astype(np.float32)
    return pafs.reshape(2 * len(edges), height, width)


def render_class_maps(poses, n_classes, height, width, stride, sigma, rng):
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) * stride
    maps = np.full((n_classes, height, width), 0.05, np.float32)
    for c, pose in enumerate(poses[:n_classes]):
        for x, y in pose:
            if not np.isnan(x):
                blob = np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * sigma**2))
                maps[c] = np.maximum(maps[c], blob * rng.uniform(0.6, 1.0))
    return np.clip(maps + rng.normal(0, 0.02, maps.shape), 0, 1).astype(np.float32)


# ------------------------------------------------------------------ comparisons


def sleap_nn_frames(outputs, batch: int, multi_class: bool = False) -> list[tuple]:
    """sleap-nn `Outputs` as per-frame (points, point_scores, instance_scores,
    identities) with all-NaN instances dropped, as `Outputs.to_instances` does.
    Multi-class slots are classes; other models have no identities (None)."""
    frames = []
    for b in range(batch):
        points = outputs.pred_keypoints[b].numpy()
        keep = ~np.all(np.isnan(points), axis=(1, 2))
        frames.append(
            (
                points[keep],
                outputs.pred_peak_values[b].numpy()[keep],
                outputs.instance_scores[b].numpy()[keep],
                np.flatnonzero(keep) if multi_class else None,
            )
        )
    return frames


class Tally:
    """Accumulates per-point and per-instance differences over many frames."""

    def __init__(self) -> None:
        self.point_errors: list[np.ndarray] = []
        self.score_errors: list[np.ndarray] = []
        self.frames = 0
        self.crowded = 0
        self.with_identities = 0
        self.same_identities = 0
        self.same_count = 0
        self.same_order = 0
        self.missing_mismatch = 0

    def add(self, ours: FramePoses, reference: tuple) -> None:
        """Compare one frame; `reference` is (points, point_scores, instance_scores,
        identities or None). With identities, instances pair up by identity."""
        points, point_scores, instance_scores, identities = reference
        self.frames += 1
        self.crowded += int(points.shape[0] > 1)
        if identities is not None:
            self.with_identities += 1
            if not np.array_equal(ours.identities, identities):
                return
            self.same_identities += 1
        if ours.n_instances != points.shape[0]:
            return
        self.same_count += 1
        if points.shape[0] == 0:
            self.same_order += 1
            return
        if identities is not None:
            rows = cols = np.arange(points.shape[0])
        else:
            # Match instances by mean distance, then check whether order agreed too.
            gaps = np.linalg.norm(ours.points[:, None] - points[None], axis=-1)
            shared = ~np.isnan(gaps)
            distance = np.where(shared, gaps, 0).sum(-1) / np.maximum(shared.sum(-1), 1)
            distance = np.where(shared.any(-1), distance, 1e6)
            rows, cols = linear_sum_assignment(distance)
        self.same_order += int(np.array_equal(cols, np.arange(len(cols))))
        ours_points, ref_points = ours.points[rows], points[cols]
        if not np.array_equal(np.isnan(ours_points), np.isnan(ref_points)):
            self.missing_mismatch += 1
        both = ~np.isnan(ours_points[..., 0]) & ~np.isnan(ref_points[..., 0])
        self.point_errors.append(np.linalg.norm(ours_points - ref_points, axis=-1)[both])
        self.score_errors.append(np.abs(ours.point_scores[rows] - point_scores[cols])[both])
        self.score_errors.append(np.abs(ours.instance_scores[rows] - instance_scores[cols]))

    def report(self, report: Report, name: str) -> None:
        errors = np.concatenate(self.point_errors) if self.point_errors else np.zeros(1)
        scores = np.concatenate(self.score_errors) if self.score_errors else np.zeros(1)
        print(
            f"     {name}: {self.frames} frames ({self.crowded} with 2+ instances), "
            f"{errors.size} matched points, "
            f"same instance order on {self.same_order}/{self.same_count} frames"
        )
        report.check(
            f"{name} same instance count",
            self.same_count / self.frames,
            COUNT_AGREEMENT,
            at_least=True,
        )
        if self.with_identities:
            report.check(
                f"{name} same identities",
                self.same_identities / self.with_identities,
                COUNT_AGREEMENT,
                at_least=True,
            )
        report.check(f"{name} frames with different missing nodes", self.missing_mismatch, 0)
        report.check(f"{name} point error median (px)", float(np.median(errors)), POINT_MEDIAN_TOL)
        report.check(
            f"{name} point error p99 (px)", float(np.percentile(errors, 99)), POINT_P99_TOL
        )
        report.check(f"{name} score error max", float(scores.max()), SCORE_TOL)


def check_synthetic(report: Report, trials: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    peak_diff = value_diff = line_diff = 0.0
    peak_count_mismatch = 0
    paf_tally, class_tally = Tally(), Tally()
    for trial in range(trials):
        n_nodes, edges = random_skeleton(rng)
        scale = float(rng.choice([1.0, 0.5]))
        cms_stride = int(rng.choice([2, 4]))
        paf_stride = cms_stride * int(rng.choice([1, 2]))
        frame_h, frame_w = (int(v) for v in rng.integers(96, 260, 2))
        scaled_h = -(-int(frame_h * scale) // MAX_STRIDE) * MAX_STRIDE
        scaled_w = -(-int(frame_w * scale) // MAX_STRIDE) * MAX_STRIDE
        batch = int(rng.integers(1, 4))
        skeleton = Skeleton(tuple(f"n{i}" for i in range(n_nodes)), tuple(edges))
        n_classes = int(rng.integers(1, 5))

        cms, pafs, class_maps, poses = [], [], [], []
        for _ in range(batch):
            pose = random_instances(rng, n_nodes, edges, scaled_h, scaled_w)
            poses.append(pose)
            cms.append(
                render_confmaps(
                    pose,
                    n_nodes,
                    scaled_h // cms_stride,
                    scaled_w // cms_stride,
                    cms_stride,
                    2.5,
                    rng,
                )
            )
            pafs.append(
                render_pafs(
                    pose,
                    edges,
                    scaled_h // paf_stride,
                    scaled_w // paf_stride,
                    paf_stride,
                    3.0,
                    rng,
                )
            )
            class_maps.append(
                render_class_maps(
                    pose,
                    n_classes,
                    scaled_h // paf_stride,
                    scaled_w // paf_stride,
                    paf_stride,
                    3.0,
                    rng,
                )
            )
        cms, pafs = torch.from_numpy(np.stack(cms)), torch.from_numpy(np.stack(pafs))
        class_maps = torch.from_numpy(np.stack(class_maps))

        # Peaks.
        ref_points, ref_values, ref_samples, ref_channels = find_local_peaks(
            cms, threshold=0.2, refinement="integral", integral_patch_size=5
        )
        points, values, valid = top_peaks_per_channel(cms, K)
        ours_points = points[valid]
        # Our slots are (sample, node, raster); sleap-nn lists (sample, raster, node).
        order = np.lexsort(
            (np.arange(len(ref_channels)), ref_channels.numpy(), ref_samples.numpy())
        )
        if ours_points.shape[0] != ref_points.shape[0]:
            peak_count_mismatch += 1
        else:
            peak_diff = max(peak_diff, _max_abs(ours_points - ref_points[order]))
            value_diff = max(value_diff, _max_abs(values[valid] - ref_values[order]))

        # Line scores on the same peaks (in scaled-input pixels).
        scaled = points * cms_stride
        scores = PafLineScorer(edges, paf_stride)(pafs, scaled)
        ref_lists = [(ref_points[ref_samples == b] * cms_stride) for b in range(batch)]
        ref_chans = [ref_channels[ref_samples == b] for b in range(batch)]
        edge_inds, edge_peaks, ref_scores = score_paf_lines_batch(
            pafs.permute(0, 2, 3, 1),
            ref_lists,
            ref_chans,
            torch.tensor(edges),
            10,
            paf_stride,
            0.25,
            1.0,
            n_nodes,
        )
        if ours_points.shape[0] == ref_points.shape[0]:
            for b in range(batch):
                rank = _rank_in_node(ref_chans[b].numpy())
                for e in range(len(edges)):
                    chosen = edge_inds[b].numpy() == e
                    pairs = edge_peaks[b].numpy()[chosen]
                    ours_e = scores[b, e, rank[pairs[:, 0]], rank[pairs[:, 1]]]
                    line_diff = max(line_diff, _max_abs(ours_e - ref_scores[b][chosen]))

        # Whole bottom-up post-network path.
        max_instances = None if rng.uniform() < 0.7 else int(rng.integers(1, 4))
        min_instance_peaks = [0, 2, 0.5][trial % 3]
        heads = {"MultiInstanceConfmapsHead": cms, "PartAffinityFieldsHead": pafs}
        frames = torch.zeros((batch, frame_h, frame_w, 1), dtype=torch.uint8)
        info = PreprocInfo(eff_scale=torch.ones(batch), input_scale=scale)
        node_names = list(skeleton.node_names)
        layer = BottomUpLayer(
            backend=TorchBackend(model=FixedMaps(heads), device="cpu"),
            paf_scorer=PAFScorer(
                part_names=node_names,
                edges=[(node_names[s], node_names[d]) for s, d in edges],
                pafs_stride=paf_stride,
                min_instance_peaks=min_instance_peaks,
            ),
            cms_output_stride=cms_stride,
            pafs_output_stride=paf_stride,
            max_instances=max_instances,
            postprocess_config=PostprocessConfig(peak_threshold=0.2, refinement="integral"),
        )
        try:
            reference = sleap_nn_frames(layer.postprocess(heads, info), batch)
        except ValueError as error:  # infeasible Hungarian: sleap-nn crashes
            print(f"     trial {trial}: sleap-nn failed ({error}); skipped")
            reference = None
        model = BottomUpModel(
            FixedMaps(heads),
            PreprocessConfig(in_channels=1, max_stride=MAX_STRIDE, scale=scale),
            skeleton,
            edges,
            cms_stride,
            paf_stride,
            max_peaks_per_node=K,
            max_instances=max_instances,
            min_instance_peaks=min_instance_peaks,
        )
        with torch.inference_mode():
            outputs = dict(zip(model.output_names, (o.numpy() for o in model(frames)), strict=True))
        if reference is not None:
            for ours, ref in zip(
                PafGrouper.from_info(model.info).group_batch(outputs), reference, strict=True
            ):
                paf_tally.add(ours, ref)

        # Multi-class post-network path (class maps at the PAF stride).
        heads = {"MultiInstanceConfmapsHead": cms, "ClassMapsHead": class_maps}
        layer = BottomUpMultiClassLayer(
            backend=TorchBackend(model=FixedMaps(heads), device="cpu"),
            cms_output_stride=cms_stride,
            class_maps_output_stride=paf_stride,
            max_instances=max_instances,
            postprocess_config=PostprocessConfig(peak_threshold=0.2, refinement="integral"),
        )
        reference = sleap_nn_frames(layer.postprocess(heads, info), batch, multi_class=True)
        model = MultiClassBottomUpModel(
            FixedMaps(heads),
            PreprocessConfig(in_channels=1, max_stride=MAX_STRIDE, scale=scale),
            skeleton,
            [f"c{i}" for i in range(n_classes)],
            cms_stride,
            paf_stride,
            max_peaks_per_node=K,
            max_instances=max_instances,
        )
        with torch.inference_mode():
            outputs = dict(zip(model.output_names, (o.numpy() for o in model(frames)), strict=True))
        for ours, ref in zip(
            ClassMapGrouper.from_info(model.info).group_batch(outputs), reference, strict=True
        ):
            class_tally.add(ours, ref)

    print(f"synthetic: {trials} trials")
    report.check("peak count mismatches", peak_count_mismatch, 0)
    report.check("peak position max diff (grid px)", peak_diff, 1e-4)
    report.check("peak value max diff", value_diff, 0.0)
    report.check("line score max diff", line_diff, 1e-5)
    paf_tally.report(report, "bottomup (synthetic)")
    class_tally.report(report, "multi_class_bottomup (synthetic)")


def _max_abs(delta: torch.Tensor) -> float:
    """Largest absolute value, ignoring NaNs (both sides NaN for coincident peaks)."""
    delta = delta[~torch.isnan(delta)].abs()
    return float(delta.max()) if delta.numel() else 0.0


def _rank_in_node(channels: np.ndarray) -> np.ndarray:
    """Each peak's index among the peaks of its node, in list order."""
    rank = np.zeros(len(channels), np.int64)
    for node in np.unique(channels):
        where = np.flatnonzero(channels == node)
        rank[where] = np.arange(len(where))
    return rank


# ------------------------------------------------------------------ trained models


def check_models(report: Report, goldens: Path, options: dict, onnx: bool) -> None:
    import sleap_io as sio

    from sleap_live.engines.export.exporter import export_graph
    from sleap_live.engines.load.training_config import read_training_config

    cases = {
        "bottomup": (BottomUpModel, PafGrouper, "multi_gray.mkv"),
        "multi_class_bottomup": (MultiClassBottomUpModel, ClassMapGrouper, "multi_rgb.mp4"),
    }
    for name, (model_class, grouper_class, video_name) in cases.items():
        model_dir = REPO / "tests/data/models" / name
        golden_path = goldens / f"{name}.npz"
        if not (model_dir / "best.ckpt").is_file() or not golden_path.is_file():
            print(f"skip {name}: no trained model or golden yet")
            continue
        spec = read_training_config(model_dir)
        model_options = options if model_class is BottomUpModel else {}
        model = model_class.from_spec(spec, **model_options).eval()
        run = _onnx_run(export_graph(model), model) if onnx else _torch_run(model)
        grouper = grouper_class.from_info(model.info)
        golden = np.load(golden_path)
        track_names = list(golden["track_names"])
        video = sio.load_video(str(REPO / "tests/data/videos" / video_name))
        tally = Tally()
        n_frames = len(golden["n_instances"])
        for start in range(0, n_frames, 4):
            indices = list(range(start, min(start + 4, n_frames)))
            outputs = run(np.stack([video[i] for i in indices]))
            for index, poses in zip(indices, grouper.group_batch(outputs), strict=True):
                n = int(golden["n_instances"][index])
                identities = None
                if model_class is MultiClassBottomUpModel:
                    identities = np.array(
                        [
                            model.info.class_names.index(track_names[t])
                            for t in golden["track_ids"][index, :n]
                        ]
                    )
                reference = (
                    golden["points"][index, :n],
                    golden["point_scores"][index, :n],
                    golden["instance_scores"][index, :n],
                    identities,
                )
                tally.add(poses, reference)
        engine = "ONNX Runtime" if onnx else "torch"
        tally.report(report, f"{name} ({engine}, trained model vs golden)")


def _torch_run(model):
    def run(frames: np.ndarray) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            raw = model(torch.from_numpy(frames))
        return {name: tensor.numpy() for name, tensor in zip(model.output_names, raw, strict=True)}

    return run


def _onnx_run(onnx_bytes: bytes, model):
    import onnxruntime

    session = onnxruntime.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])

    def run(frames: np.ndarray) -> dict[str, np.ndarray]:
        return dict(zip(model.output_names, session.run(None, {"frames": frames}), strict=True))

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", action="store_true", help="also compare trained models")
    parser.add_argument(
        "--onnx", action="store_true", help="run the trained models as ONNX exports"
    )
    parser.add_argument(
        "--goldens", type=Path, default=REPO / "tests/data/goldens", help="golden .npz folder"
    )
    parser.add_argument(
        "--min-line-scores",
        type=float,
        default=0.25,
        help="the value the bottom-up golden was predicted with (sleap-nn's default 0.25)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    report = Report()
    check_synthetic(report, args.trials, args.seed)
    if args.models:
        check_models(report, args.goldens, {"min_line_scores": args.min_line_scores}, args.onnx)
    if report.failures:
        print(f"FAILED: {', '.join(report.failures)}")
        return 1
    print("all within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
