"""The comparison rule (`sleap_live.engines.host.agreement`) and the float32 bound it
takes from the graph (`sleap_live.engines.graph.fp32`): float noise within the bound
passes, a near-tie passes and is counted, a one-pixel shift fails, in pose comparisons
(goldens), in export verification and under ONNX Runtime's other kernels."""

from __future__ import annotations

import attrs
import numpy as np
import onnxruntime as ort
import pytest
import torch

from sleap_live.engines.errors import ExportError
from sleap_live.engines.export.verify import Exported, compare, torch_outputs, verify_batch
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.graph.fp32 import accumulation_depth, graph_bound, measured_bound
from sleap_live.engines.host.agreement import (
    DISAGREEMENT,
    NEAR_TIES,
    NOISE,
    UNIT_ROUNDOFF,
    Fp32Bound,
    compare_poses,
)
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.types import FramePoses
from sleap_live.stream.sources import FileSource
from tests.engines import goldens

BOUND = Fp32Bound(points_px=2e-3, scores=3e-4, peak_threshold=0.2)


def golden_frames(name: str = "topdown", frames: int = 20) -> list[FramePoses]:
    """The first frames of a fixture golden (sleap-nn's poses) with their animals."""
    golden = dict(np.load(goldens.case_paths(name)[2]))
    poses = goldens.golden_poses(golden)[:frames]
    assert sum(pose.n_instances for pose in poses) >= frames
    return poses


def moved(poses: list[FramePoses], frame: int, shift: np.ndarray, **changes) -> list[FramePoses]:
    """`poses` with frame `frame`'s points moved by `shift` (broadcast to (I, N, 2))."""
    copy = list(poses)
    copy[frame] = attrs.evolve(copy[frame], points=copy[frame].points + shift, **changes)
    return copy


def test_float_noise_within_the_bound_passes():
    reference = golden_frames()
    generator = np.random.default_rng(0)
    noisy = []
    for pose in reference:
        # Every point moved by up to half the bound, every score by half its bound.
        direction = generator.normal(size=pose.points.shape)
        direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
        noisy.append(
            attrs.evolve(
                pose,
                points=(pose.points + 0.5 * BOUND.points_px * direction).astype(np.float32),
                point_scores=pose.point_scores * (1 + 0.5 * BOUND.scores),
                instance_scores=pose.instance_scores * (1 + 0.5 * BOUND.scores),
            )
        )
    agreement = compare_poses(reference, noisy, BOUND)
    assert agreement.outcome == NOISE and agreement.agrees, agreement.summary()
    assert agreement.points > 100 and 0 < agreement.max_point_px <= BOUND.points_px
    assert "float noise" in agreement.summary()


def test_a_near_tie_passes_and_is_counted():
    # One node of one instance lands on another peak 16.5 px away with that peak's
    # score (sleap-nn's multi-class bottom-up test case on an AVX2 CPU).
    reference = golden_frames()
    frame = reference[3]
    shift = np.zeros_like(frame.points)
    shift[1, 2] = (16.0, -4.0)
    scores = frame.point_scores.copy()
    scores[1, 2] -= 0.0018
    tied = moved(reference, 3, shift, point_scores=scores)
    agreement = compare_poses(reference, tied, BOUND)
    assert agreement.outcome == NEAR_TIES and agreement.agrees, agreement.summary()
    assert agreement.ties == ("frame 3 instance 1 node 2 on another peak, 16.5 px away",)
    assert "1 near-tie(s) passed" in agreement.summary()


def test_a_point_found_by_one_side_at_the_threshold_is_a_near_tie():
    reference = golden_frames()
    frame = reference[5]
    points, scores = frame.points.copy(), frame.point_scores.copy()
    points[0, 1] = np.nan
    scores[0, 1] = np.nan
    at_threshold = attrs.evolve(frame, point_scores=frame.point_scores.copy())
    at_threshold.point_scores[0, 1] = BOUND.peak_threshold + 1e-5
    missing = attrs.evolve(frame, points=points, point_scores=scores)
    with_tie = compare_poses([at_threshold], [missing], BOUND)
    assert with_tie.outcome == NEAR_TIES, with_tie.summary()
    assert "at the threshold" in with_tie.ties[0]
    # The same point found well above the threshold is a real disagreement.
    confident = attrs.evolve(frame, point_scores=frame.point_scores.copy())
    confident.point_scores[0, 1] = 0.9
    assert compare_poses([confident], [missing], BOUND).outcome == DISAGREEMENT


def test_a_one_pixel_shift_fails():
    reference = golden_frames()
    shifted = moved(reference, 7, np.array([1.0, 0.0]))
    agreement = compare_poses(reference, shifted, BOUND)
    assert agreement.outcome == DISAGREEMENT and not agreement.agrees
    assert agreement.summary().startswith(f"{reference[7].n_instances} real disagreement(s)")
    assert "points moved, up to 1 px" in agreement.summary()


def test_more_close_calls_than_ties_can_be_fail():
    # One node of every instance moved: each instance looks like a near-tie, but ties
    # are rare, and this many is a bug (a node's points placed wrong).
    reference = golden_frames()
    shifted = []
    for pose in reference:
        shift = np.zeros_like(pose.points)
        shift[:, 0] = (6.0, 0.0)
        shifted.append(attrs.evolve(pose, points=pose.points + shift))
    agreement = compare_poses(reference, shifted, BOUND)
    assert agreement.outcome == DISAGREEMENT
    assert "more than near-ties can be" in agreement.disagreements[-1]


def test_another_instance_count_or_identity_fails():
    reference = golden_frames("multi_class_topdown")
    one_less = list(reference)
    frame = one_less[2]
    one_less[2] = FramePoses(
        frame.points[1:], frame.point_scores[1:], frame.instance_scores[1:], frame.identities[1:]
    )
    assert compare_poses(reference, one_less, BOUND).outcome == DISAGREEMENT
    swapped = moved(reference, 4, np.zeros(2), identities=reference[4].identities + 1)
    assert compare_poses(reference, swapped, BOUND).outcome == DISAGREEMENT


# ------------------------------------------------------------ the bound from the graph
@pytest.fixture(scope="module")
def topdown():
    return load_inference_model([str(m) for m in goldens.case_paths("topdown")[0]])


def test_the_graph_bound_is_float32_rounding_over_its_sums_and_refinement_window(topdown):
    bound = graph_bound(topdown)
    depth = accumulation_depth(topdown)
    # A centroid and a centered-instance UNet: thousands of sums deep.
    assert 1000 < depth < 100_000
    assert bound.scores == pytest.approx(UNIT_ROUNDOFF * depth)
    window = topdown.info.settings.integral_patch_size
    cells = sum(topdown.peak_cells_px())
    assert bound.points_px == pytest.approx(UNIT_ROUNDOFF * depth * (window - 1) * cells)
    # Far below the pixel: a one-pixel error is never within it.
    assert 1e-5 < bound.points_px < 0.05
    assert f"{depth} sums deep" in bound.how


def test_the_measured_bound_grows_the_graph_bound_only(topdown):
    frames = video_frames("multi_gray.mkv", 2)
    measured = measured_bound(topdown, frames)
    assert measured.points_px >= graph_bound(topdown).points_px
    assert measured.scores >= graph_bound(topdown).scores
    assert "own float32 error" in measured.how


# ------------------------------------------------------------- export verification
def video_frames(video: str, stop: int) -> np.ndarray:
    with FileSource(str(goldens.DATA / "videos" / video), stop=stop) as source:
        return np.stack([frame.image for frame in source])


def _verify(model, frames, change):
    """`verify_batch` of an "export" that is torch with `change` applied to its outputs."""
    exported = Exported(lambda batch: change(torch_outputs(model, batch)), (RuntimeError,))
    return verify_batch(model, exported, frames, label="the topdown model", source="test")


def test_verification_passes_noise_and_counts_a_near_tie_but_refuses_a_shift(topdown):
    frames = video_frames("multi_gray.mkv", 3)
    bound = graph_bound(topdown)

    def noisy(outputs):
        return {**outputs, "points": outputs["points"] + 0.4 * bound.points_px}

    record = _verify(topdown, frames, noisy)
    assert record["agreement"] == NOISE and record["ties"] == 0
    assert record["bound"] == bound.describe()

    def tied(outputs):
        points = outputs["points"].copy()
        points[1, 3] += (10.0, 5.0)
        return {**outputs, "points": points}

    record = _verify(topdown, frames, tied)
    assert record["agreement"] == NEAR_TIES and record["ties"] == 1

    def shifted(outputs):
        return {**outputs, "points": outputs["points"] + 1.0}

    with pytest.raises(
        ExportError,
        match=r"differs from the torch model on 3×168×200×1 frames: "
        r"\d+ real disagreement\(s\): frame 0 instance \d: \d+ of \d+ points moved",
    ):
        _verify(topdown, frames, shifted)


def test_onnx_runtime_with_its_other_kernels_still_agrees(warm_export_cache):
    # Graph optimisations off (no fused kernels, other summation orders) and two
    # operator threads (other splits of the sums) against the default session and
    # against torch: float noise or counted near-ties, never a disagreement.
    name = "multi_class_bottomup"
    onnx_bytes = goldens.warm_export(name, warm_export_cache)
    models, video, _, _ = goldens.case_paths(name)
    model = load_inference_model([str(m) for m in models])
    frames = video_frames(video.name, 8)
    options = session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 2
    plain = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    one_thread = session_options()
    one_thread.intra_op_num_threads = 1
    default = ort.InferenceSession(onnx_bytes, one_thread, providers=["CPUExecutionProvider"])

    def run(session):
        names = [output.name for output in session.get_outputs()]
        values = session.run(names, {session.get_inputs()[0].name: frames})
        return dict(zip(names, values, strict=True))

    with torch.inference_mode():
        reference = torch_outputs(model, frames)
    for other in (run(default), reference):
        agreement = compare(model, frames, other, run(plain))
        assert agreement.outcome in (NOISE, NEAR_TIES), agreement.summary()
        assert agreement.points > 0
