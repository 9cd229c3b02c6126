"""Compare sleap-live's poses with sleap-nn's goldens and with ground truth.

The goldens are `sleap-nn predict` outputs on the test videos, stored as .npz by
scripts/make_fixtures.py (see tests/data/README.md). Instances are matched per
frame by the Hungarian method on mean point distance, since the two tools need
not list a frame's instances in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import attrs
import numpy as np
from scipy.optimize import linear_sum_assignment

from sleap_live.engines.export.on_demand import general_graph_key
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.graph.fp32 import graph_bound
from sleap_live.engines.host.agreement import Agreement, Fp32Bound, compare_poses
from sleap_live.engines.load.export_cache import ExportCache
from sleap_live.engines.notify import quiet
from sleap_live.engines.settings import InferenceSettings
from sleap_live.engines.types import FramePoses

DATA = Path(__file__).resolve().parents[1] / "data"

# golden name -> (model dirs, test video, ground-truth file)
CASES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "single_instance": (("single_instance",), "single.mkv", "single.npz"),
    "centroid": (("centroid",), "multi_gray.mkv", "multi_gray.npz"),
    "topdown": (("centroid", "centered_instance"), "multi_gray.mkv", "multi_gray.npz"),
    "bottomup": (("bottomup",), "multi_gray.mkv", "multi_gray.npz"),
    "multi_class_topdown": (
        ("centroid_rgb", "multi_class_topdown"),
        "multi_rgb.mp4",
        "multi_rgb.npz",
    ),
    "multi_class_bottomup": (("multi_class_bottomup",), "multi_rgb.mp4", "multi_rgb.npz"),
    # Tiled inference: 64 px tiles, the 168 x 200 frames more than twice that each way.
    "tiled_single_instance": (("tiled_single_instance",), "single.mkv", "single.npz"),
}

# The ConvNeXt and Swin fixtures' goldens (scripts/make_fixtures.py GOLDENS), compared
# on their videos' first frames by test_parity.py and on whole videos by
# scripts/check_backbone_parity.py. Each top-down pair is one backbone's two models.
BACKBONE_CASES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "convnext_single_instance": (("convnext_single_instance",), "single.mkv", "single.npz"),
    "convnext_topdown": (
        ("convnext_centroid", "convnext_centered_instance"),
        "multi_gray.mkv",
        "multi_gray.npz",
    ),
    "convnext_bottomup": (("convnext_bottomup",), "multi_gray.mkv", "multi_gray.npz"),
    "swint_single_instance": (("swint_single_instance",), "single.mkv", "single.npz"),
    "swint_topdown": (
        ("swint_centroid", "swint_centered_instance"),
        "multi_gray.mkv",
        "multi_gray.npz",
    ),
    "swint_bottomup": (("swint_bottomup",), "multi_gray.mkv", "multi_gray.npz"),
}

# Box detectors' goldens (scripts/make_fixtures.py GOLDENS): a `bbox_centernet` (or
# `bbox_ssd`) detector seeding a centered-instance or multi-class top-down model's
# crops, compared by
# test_box_models.py. Apart from
# `CASES`: their graphs have no TensorRT profile and sleap-nn exports no such pair.
BOX_CASES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "bbox_topdown": (("bbox_centernet", "centered_instance"), "multi_gray.mkv", "multi_gray.npz"),
    "bbox_ssd_topdown": (("bbox_ssd", "centered_instance"), "multi_gray.mkv", "multi_gray.npz"),
    "bbox_multi_class_topdown": (
        ("bbox_centernet_rgb", "multi_class_topdown"),
        "multi_rgb.mp4",
        "multi_rgb.npz",
    ),
}

# Of the goldens of non-default inference settings (scripts/fixtures/goldens.py
# SETTINGS_CASES), those whose first sleap-nn batch differs (see below).
FIRST_BATCH_DIFFERS_SETTINGS = {"settings_bottomup"}

# sleap-nn's "same" max pooling pads odd sizes only on each layer's first call, so
# the first batch of a `predict` run (4 frames at its default batch size) differs
# from every later one wherever a pool meets an odd size: in stem models, whose real
# stride is twice the `max_stride` sleap-nn pads to. sleap-live always computes the
# steady state (engines/graph/network.py), so those frames are left out of the comparison.
SLEAP_NN_FIRST_BATCH = 4
FIRST_BATCH_DIFFERS = {"bottomup"}


def compared_frames(name: str, n_frames: int) -> range:
    """Frames of a golden that reflect sleap-nn's steady-state behaviour."""
    differs = FIRST_BATCH_DIFFERS | FIRST_BATCH_DIFFERS_SETTINGS
    return range(SLEAP_NN_FIRST_BATCH if name in differs else 0, n_frames)


def case_paths(name: str) -> tuple[list[Path], Path, Path, Path]:
    """Model dirs, video, golden .npz and ground truth .npz of one case."""
    models, video, truth = {**CASES, **BACKBONE_CASES, **BOX_CASES}[name]
    return (
        [DATA / "models" / m for m in models],
        DATA / "videos" / video,
        DATA / "goldens" / f"{name}.npz",
        DATA / "ground_truth" / truth,
    )


def warm_export(name: str, cache_root: Path) -> bytes:
    """Case `name`'s general ONNX graph from the session's warm export cache
    (`warm_export_cache` in tests/conftest.py, whose `cache_root` it is): exported and
    verified once for the whole suite, as `sleap-live run` exports it."""
    models, _, _, _ = case_paths(name)
    key = general_graph_key(models, {}, InferenceSettings())
    assert key is not None
    onnx_bytes = ExportCache(cache_root, quiet).read(key)
    assert onnx_bytes is not None, f"the warm export cache holds every fixture case ({name})"
    return onnx_bytes


@cache
def bound_of(models: tuple[Path, ...], settings: InferenceSettings | None = None) -> Fp32Bound:
    """The float32 bound (`graph.fp32.graph_bound`) of the model in `models`, with
    `settings`: what two correct runs of its graph may differ by."""
    return graph_bound(load_inference_model(list(models), settings or InferenceSettings()))


def frame_poses(ours: Sequence[dict[str, np.ndarray]]) -> list[FramePoses]:
    """Per-frame poses in `compare`'s layout as `FramePoses`."""
    return [
        FramePoses(o["points"], o["point_scores"], o["instance_scores"], o["identities"])
        for o in ours
    ]


def golden_poses(
    golden: dict[str, np.ndarray], class_names: Sequence[str] = ()
) -> list[FramePoses]:
    """A golden's frames as `FramePoses`, its track names as indices of `class_names`
    (-1 where it has none)."""
    names = [str(t) for t in golden["track_names"]]
    poses = []
    for i in range(len(golden["frame_indices"])):
        n = int(golden["n_instances"][i])
        tracks = [int(t) for t in golden["track_ids"][i, :n]]
        identities = [
            class_names.index(names[t]) if t >= 0 and names[t] in class_names else -1
            for t in tracks
        ]
        poses.append(
            FramePoses(
                golden["points"][i, :n],
                golden["point_scores"][i, :n],
                golden["instance_scores"][i, :n],
                np.asarray(identities, np.int32),
            )
        )
    return poses


def agreement(
    ours: Sequence[dict[str, np.ndarray]],
    golden: dict[str, np.ndarray],
    bound: Fp32Bound,
    class_names: Sequence[str] = (),
    frames: Sequence[int] | None = None,
) -> Agreement:
    """The comparison rule (`host.agreement`) between our poses and a golden's, on
    `frames` (default all): float noise within `bound` and counted near-ties pass.
    Identities are compared where the golden has tracks (sleap-nn's `predict` on an
    export writes none)."""
    reference = golden_poses(golden, class_names)
    frames = range(len(reference)) if frames is None else frames
    mine = frame_poses(ours)
    if not (golden["track_ids"] >= 0).any():
        mine = [attrs.evolve(pose, identities=np.full_like(pose.identities, -1)) for pose in mine]
    return compare_poses([reference[i] for i in frames], [mine[i] for i in frames], bound)


@attrs.frozen
class Comparison:
    """How two sets of per-frame poses differ."""

    frames: int
    count_mismatches: tuple[int, ...]  # frames whose instance counts differ
    point_errors: np.ndarray  # px, over matched points present in both
    score_errors: np.ndarray  # |point score difference| over the same points
    instance_score_errors: np.ndarray
    identity_agreement: float  # fraction of matched instances with the same identity
    presence_mismatches: int  # matched points found by one side only

    def summary(self) -> str:
        p = self.point_errors
        return (
            f"frames {self.frames}, counts differ on {list(self.count_mismatches)}, "
            f"points median {np.median(p):.4g} px p99 {np.percentile(p, 99):.4g} px "
            f"max {p.max():.4g} px, point score max {self.score_errors.max():.3g}, "
            f"instance score max {self.instance_score_errors.max():.3g}, "
            f"identity agreement {self.identity_agreement:.4f}, "
            f"presence mismatches {self.presence_mismatches}"
        )


def match(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hungarian pairing of instances (I, N, 2) by mean distance over shared nodes."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(0, int), np.zeros(0, int)
    d = np.linalg.norm(a[:, None] - b[None], axis=-1)  # (Ia, Ib, N)
    with np.errstate(invalid="ignore"):
        cost = np.nanmean(np.where(np.isnan(d), np.nan, d), axis=-1)
    cost = np.where(np.isnan(cost), 1e6, cost)
    return linear_sum_assignment(cost)


def compare(
    ours: Sequence[dict[str, np.ndarray]],
    golden: dict[str, np.ndarray],
    class_names: Sequence[str] = (),
    frames: Sequence[int] | None = None,
) -> Comparison:
    """Compare our per-frame poses with a golden .npz.

    `ours[i]` holds "points" (I, N, 2), "point_scores" (I, N), "instance_scores" (I,)
    and "identities" (I,) for golden frame i; only `frames` (default all) are
    compared. Identities are compared by name:
    ours index `class_names`, the golden's index its "track_names".
    """
    track_names = [str(t) for t in golden["track_names"]]
    frames = range(len(golden["frame_indices"])) if frames is None else frames
    n_frames = len(frames)
    count_mismatches = []
    point_errors, score_errors, inst_errors = [], [], []
    agree = total = mismatches = 0
    for i in frames:
        n = int(golden["n_instances"][i])
        g_pts = golden["points"][i, :n]
        o = ours[i]
        if len(o["points"]) != n:
            count_mismatches.append(i)
        ia, ib = match(o["points"], g_pts)
        for a, b in zip(ia, ib, strict=True):
            d = np.linalg.norm(o["points"][a] - g_pts[b], axis=-1)
            present = ~np.isnan(d)
            mismatches += int(np.sum(np.isnan(o["points"][a, :, 0]) != np.isnan(g_pts[b, :, 0])))
            point_errors.extend(d[present])
            score_errors.extend(
                np.abs(o["point_scores"][a] - golden["point_scores"][i, b])[present]
            )
            inst_errors.append(abs(o["instance_scores"][a] - golden["instance_scores"][i, b]))
            golden_track = int(golden["track_ids"][i, b])
            if track_names and golden_track >= 0:
                total += 1
                ours_id = int(o["identities"][a])
                ours_name = class_names[ours_id] if ours_id >= 0 else None
                agree += int(ours_name == track_names[golden_track])
    return Comparison(
        frames=n_frames,
        count_mismatches=tuple(count_mismatches),
        point_errors=np.asarray(point_errors, float),
        score_errors=np.asarray(score_errors, float),
        instance_score_errors=np.asarray(inst_errors, float),
        identity_agreement=agree / total if total else 1.0,
        presence_mismatches=mismatches,
    )


def ground_truth_errors(
    ours: Sequence[dict[str, np.ndarray]], truth: dict[str, np.ndarray]
) -> tuple[np.ndarray, int]:
    """Point errors (px) of our poses against ground truth, and missed animals."""
    errors, missed = [], 0
    for i, o in enumerate(ours):
        gt = truth["points"][i]
        ia, ib = match(o["points"], gt)
        missed += len(gt) - len(ia)
        for a, b in zip(ia, ib, strict=True):
            d = np.linalg.norm(o["points"][a] - gt[b], axis=-1)
            errors.extend(d[~np.isnan(d)])
    return np.asarray(errors, float), missed
