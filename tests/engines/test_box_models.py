"""Box detectors (sleap-nn 0.3.5's `bbox_centernet`, `bbox_ssd`) against sleap-nn's `predict`.

The detector seeds the centered-instance model's crops in place of a centroid model
(`sleap_live.engines.graph.box_topdown`). Its ONNX graph, from the warm export cache,
run by ONNX Runtime and OpenVINO through the Python API and by `sleap-live run`, and
its TensorRT-profile graph give sleap-nn's poses on the whole test video (goldens
`BOX_CASES`, made by scripts/make_fixtures.py): the same
instances on at least 99.9 % of frames, points within 1e-3 px at the median and
0.05 px at the 99th percentile, and the comparison rule of the other model types
(`sleap_live.engines.host.agreement`); and the boxes that seeded the crops, which
sleap-nn writes beside the instances: the same boxes on at least 99.9 % of
frames, corners within 1e-3 px.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import attrs
import numpy as np
import onnx
import pytest
import sleap_io as sio
import torch

from sleap_live import cli
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.check_tensorrt import MATRIX, check_tensorrt
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.graph.box_topdown import BoxTopDownModel
from sleap_live.engines.graph.boxes import first_slots
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.graph.specialised import BatchShape, SpecialisedModel
from sleap_live.engines.graph.ssd import nms_keep
from sleap_live.engines.host.agreement import compare_poses
from sleap_live.engines.host.outputs import box_category
from sleap_live.engines.load.dirs import poseless_kind
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream.runner import first_frames
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

pytestmark = pytest.mark.usefixtures("warm_export_cache")

BATCH = 8
VERIFY_FRAMES = 5
TORCH_FRAMES = 24
# The acceptance figures of issue 40: frames with the same instances, point errors.
SAME_INSTANCES = 0.999
MEDIAN_PX, P99_PX = 1e-3, 0.05


@cache
def _frames(video: Path) -> np.ndarray:
    with FileSource(video) as source:
        return np.stack([frame.image for frame in source])


def _poses(models: Sequence[Path], engine: str, frames: np.ndarray) -> list[dict[str, np.ndarray]]:
    exported = engine in ("onnx", "openvino")
    options = {"verify_frames": frames[:VERIFY_FRAMES]} if exported else {}
    runner = load_runner([str(m) for m in models], engine=engine, device="cpu", **options)
    return _run(runner, frames)


def _run(runner, frames: np.ndarray) -> list[dict[str, np.ndarray]]:
    """The runner's poses of `frames`, in batches, with their boxes; the runner
    closed after."""
    categories = runner.info.detector_categories
    try:
        return [
            {
                "points": pose.points,
                "point_scores": pose.point_scores,
                "instance_scores": pose.instance_scores,
                "identities": pose.identities,
                "boxes": pose.boxes.boxes,
                "box_scores": pose.boxes.scores,
                "box_categories": np.array(
                    [box_category(categories, int(c)) or "" for c in pose.boxes.categories], str
                ),
            }
            for start in range(0, len(frames), BATCH)
            for pose in runner.run(frames[start : start + BATCH])
        ]
    finally:
        runner.close()


@cache
def _exported_poses(name: str, engine: str = "onnx") -> tuple[dict[str, np.ndarray], ...]:
    models, video, golden, _ = goldens.case_paths(name)
    require(*models, video, golden)
    return tuple(_poses(models, engine, _frames(video)))


@cache
def _class_names(name: str) -> tuple[str, ...]:
    return load_inference_model(goldens.case_paths(name)[0]).info.class_names


def _assert_matches_golden(name: str, poses: Sequence[dict[str, np.ndarray]], label: str) -> None:
    models, _, golden_path, _ = goldens.case_paths(name)
    golden = dict(np.load(golden_path))
    assert len(poses) == len(golden["frame_indices"])
    classes = _class_names(name)
    comparison = goldens.compare(poses, golden, classes)
    agreement = goldens.agreement(poses, golden, goldens.bound_of(tuple(models)), classes)
    print(f"{label}: {comparison.summary()}; {agreement.summary()}")
    same = 1 - len(comparison.count_mismatches) / comparison.frames
    assert same >= SAME_INSTANCES, comparison.summary()
    assert np.median(comparison.point_errors) <= MEDIAN_PX, comparison.summary()
    assert np.percentile(comparison.point_errors, 99) <= P99_PX, comparison.summary()
    assert agreement.points > 0 and agreement.agrees, agreement.summary()
    assert comparison.identity_agreement == 1.0, comparison.summary()
    rows = [(p["boxes"], p["box_scores"], list(p["box_categories"])) for p in poses]
    _assert_sleap_nns_boxes(rows, f"{label} boxes", name)


# The SSD pair runs on ONNX Runtime only (the suite's time budget): its detector's
# graph is the one `bbox_ssd` alone runs, and OpenVINO and torch run its kind of
# pair with the CenterNet detectors.
CENTERNET_CASES = [name for name in goldens.BOX_CASES if name != "bbox_ssd_topdown"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "name"),
    [("onnx", name) for name in goldens.BOX_CASES]
    + [("openvino", name) for name in CENTERNET_CASES],
)
def test_onnx_graph_matches_sleap_nn_predict(engine, name):
    model = load_inference_model(goldens.case_paths(name)[0])
    assert isinstance(model, BoxTopDownModel)
    assert model.info.model_type == name.removeprefix("bbox_").removeprefix("ssd_")
    _assert_matches_golden(name, _exported_poses(name, engine), f"{name} ({engine})")


@pytest.mark.slow
@pytest.mark.parametrize("name", CENTERNET_CASES)
def test_torch_module_agrees_with_the_onnx_graph(name):
    models, video, _, _ = goldens.case_paths(name)
    torch_poses = _poses(models, "torch", _frames(video)[:TORCH_FRAMES])
    agreement = compare_poses(
        goldens.frame_poses(torch_poses),
        goldens.frame_poses(_exported_poses(name)[:TORCH_FRAMES]),
        goldens.bound_of(tuple(models)),
    )
    print(f"{name}: {agreement.summary()}")
    assert agreement.points > 0 and agreement.agrees, agreement.summary()


# One pair through the whole command: the multi-class one, whose tracks the .slp
# carries besides; the graph both pairs run is held to its golden above.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["bbox_multi_class_topdown"])
def test_sleap_live_run_writes_sleap_nns_poses(name, tmp_path):
    models, video, golden_path, _ = goldens.case_paths(name)
    require(*models, video, golden_path)
    out = tmp_path / "out.slp"
    argv = ["run", str(video), *(a for m in models for a in ("-m", str(m)))]
    assert cli.main([*argv, "-o", str(out), "--device", "cpu", "-q"]) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    nodes = len(labels.skeletons[0].nodes)
    none = {
        "points": np.zeros((0, nodes, 2), np.float32),
        "point_scores": np.zeros((0, nodes), np.float32),
        "instance_scores": np.zeros(0, np.float32),
        "identities": np.zeros(0, np.int32),
        "boxes": np.zeros((0, 4), np.float32),
        "box_scores": np.zeros(0, np.float32),
        "box_categories": np.zeros(0, str),
    }
    poses = [none] * len(_frames(video))
    for frame in labels:
        instances = list(frame.instances)
        values = [instance.numpy(scores=True) for instance in instances]
        # Each box linked to the instance its crop gave, as sleap-nn links them.
        assert [box.instance for box in frame.bboxes] == instances
        poses[frame.frame_idx] = {
            **_slp_boxes(frame),
            "points": np.stack([v[:, :2] for v in values]).astype(np.float32),
            "point_scores": np.stack([v[:, 2] for v in values]).astype(np.float32),
            "instance_scores": np.array([i.score for i in instances], np.float32),
            "identities": np.array(
                [_class_names(name).index(i.track.name) if i.track else -1 for i in instances],
                np.int32,
            ),
        }
    _assert_matches_golden(name, poses, f"{name} (sleap-live run)")


# The tensorrt profile's slots per frame: far more than the fixtures' two animals, so
# it never binds and the poses are sleap-nn's (whose detector keeps 100 boxes).
SLOTS = InferenceSettings(max_instances=20)


# One pair: its export alone takes 10 s here. The multi-class one runs every part of
# the plain one's slots graph, and its class vectors besides.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["bbox_multi_class_topdown"])
def test_tensorrt_profile_matches_sleap_nn_predict(name):
    models, video, _, _ = goldens.case_paths(name)
    require(*models, video)
    frames = _frames(video)
    model = load_inference_model(models, SLOTS)
    graph = export_graph(
        model, verify_frames=frames[:VERIFY_FRAMES], sources=models, profile="tensorrt"
    )
    findings = check_tensorrt(onnx.load_from_string(graph))
    assert not [f for f in findings if f.source == MATRIX or "importer" in f.reason]
    poses = _run(OnnxRunner(graph), frames)
    _assert_matches_golden(name, poses, f"{name} (tensorrt profile, onnxruntime)")


def test_the_fixed_shape_graph_keeps_the_first_boxes_and_refuses_channel_coercion():
    models = goldens.case_paths("bbox_topdown")[0]
    require(*models)
    model = load_inference_model(models)
    frames = torch.from_numpy(_frames(goldens.case_paths("bbox_topdown")[1])[:2])
    graph = SpecialisedModel(model, BatchShape.of(frames))
    with torch.inference_mode():
        valid, points, _, scores, box_valid, boxes, _, _ = (t.numpy() for t in graph(frames))
    # max_instances unset: the default slots, the two boxes in the first two.
    assert valid.shape == (2, 8) and valid[:, :2].all() and not valid[:, 2:].any()
    with torch.inference_mode():
        eager = [t.numpy() for t in model(frames)]
    _, eager_points, _, eager_scores, eager_valid, eager_boxes, _, _ = eager
    np.testing.assert_allclose(points[valid], eager_points, atol=1e-4)
    np.testing.assert_allclose(scores[valid], eager_scores, atol=1e-6)
    # The boxes that seeded the crops, in the slots' order.
    assert np.array_equal(box_valid, valid)
    np.testing.assert_allclose(boxes[box_valid], eager_boxes[eager_valid], atol=1e-4)
    model.frame_preprocess = attrs.evolve(model.frame_preprocess, ensure_grayscale=True)
    with pytest.raises(ModelConfigError, match="box detector has ensure_rgb or ensure_grayscale"):
        SpecialisedModel(model, BatchShape.of(frames))


# sleap-nn predict's boxes from the detector alone (golden `bbox_centernet`), against
# sleap-live's detector stage, the torch module the top-down graph is exported from.
BOX_PX = 1e-3


# A frame's boxes as the golden holds them: (n, 4) xyxy, (n,) scores, the
# categories' names ("" where sleap-nn leaves the category unset).
FrameBoxRows = tuple[np.ndarray, np.ndarray, list[str]]


def _slp_boxes(frame: sio.LabeledFrame) -> dict[str, np.ndarray]:
    """A written frame's boxes in `_run`'s columns."""
    return {
        "boxes": np.array([box.xyxy for box in frame.bboxes], np.float32).reshape(-1, 4),
        "box_scores": np.array([box.score for box in frame.bboxes], np.float32),
        "box_categories": np.array(
            [box.category.name if box.category else "" for box in frame.bboxes], str
        ),
    }


def _assert_sleap_nns_boxes(
    found: Sequence[FrameBoxRows], label: str, name: str = "bbox_centernet"
) -> None:
    """`found` against sleap-nn predict's boxes in golden `name` (default: from the
    detector alone): the same count on at least 99.9 % of frames, corners within
    `BOX_PX`, scores and categories equal, highest score first in both."""
    golden = dict(np.load(goldens.DATA / "goldens" / f"{name}.npz"))
    assert len(found) == len(golden["n_boxes"])
    names = list(golden["category_names"])
    errors, same = [], 0
    for f, (boxes, scores, categories) in enumerate(found):
        n = int(golden["n_boxes"][f])
        if len(boxes) != n:
            continue
        same += 1
        errors.append(np.abs(boxes - golden["boxes"][f, :n]).ravel())
        np.testing.assert_allclose(scores, golden["box_scores"][f, :n], rtol=0, atol=1e-5)
        assert categories == [names[c] for c in golden["box_categories"][f, :n]]
    error = np.concatenate(errors)
    print(f"{label}: same box count on {same}/{len(found)} frames, max {error.max():.3g} px")
    assert same / len(found) >= SAME_INSTANCES
    assert error.max() <= BOX_PX


@pytest.mark.slow
@pytest.mark.parametrize("detector", ["bbox_centernet", "bbox_ssd"])
def test_the_detector_alone_gives_sleap_nns_boxes_through_onnx_runtime(detector, shared_cache_dir):
    # The detector directory alone, exported and verified as `sleap-live run` loads
    # it, run by ONNX Runtime and decoded on the host (SSD: its anchors and NMS in
    # the graph).
    pair, video, _, _ = goldens.case_paths("bbox_topdown")
    model = goldens.DATA / "models" / detector
    require(model, video, goldens.DATA / "goldens" / f"{detector}.npz")
    runner = load_runner([model], engine="onnx", device="cpu", verify_frames=first_frames(video))
    frames = _frames(video)
    try:
        poses = [p for s in range(0, len(frames), BATCH) for p in runner.run(frames[s : s + BATCH])]
    finally:
        runner.close()
    assert runner.info.model_type == "bbox"
    found = []
    for pose in poses:
        assert pose.boxes is not None and pose.n_instances == 0
        names = [box_category(runner.info.class_names, int(c)) or "" for c in pose.boxes.categories]
        found.append((pose.boxes.boxes, pose.boxes.scores, names))
    _assert_sleap_nns_boxes(found, f"{detector} alone (onnx)", detector)
    # Told apart before loading (a detector's refusals come first): its directory and
    # its cached export are a detector alone; a pose model and a pair are not.
    assert poseless_kind([model]) == "bbox"
    assert any(poseless_kind([graph]) == "bbox" for graph in shared_cache_dir.rglob("*.onnx"))
    assert poseless_kind(pair[1:]) is None and poseless_kind(pair) is None


@pytest.mark.slow
def test_sleap_live_run_writes_sleap_nns_boxes(tmp_path, capsys):
    # The detector alone through the whole command: sleap-io PredictedBoundingBoxes
    # in LabeledFrame.bboxes, as sleap-nn writes them (category unset for "object").
    models, video, _, _ = goldens.case_paths("bbox_topdown")
    require(models[0], video, goldens.DATA / "goldens" / "bbox_centernet.npz")
    out = tmp_path / "boxes.slp"
    argv = ["run", str(video), "-m", str(models[0]), "-o", str(out), "--device", "cpu", "-q"]
    assert cli.main(argv) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    found: list[FrameBoxRows] = [(np.zeros((0, 4)), np.zeros(0), [])] * len(_frames(video))
    for frame in labels:
        assert not frame.instances
        boxes = _slp_boxes(frame)
        found[frame.frame_idx] = (
            boxes["boxes"],
            boxes["box_scores"],
            list(boxes["box_categories"]),
        )
    _assert_sleap_nns_boxes(found, "detector alone (sleap-live run)")
    # Refused from the detector's config before any work: no export is made.
    cache = ["--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "-q"]
    wrong = tmp_path / "boxes.csv"
    assert cli.main([*argv[:4], "-o", str(wrong), *cache]) != 0
    assert "written to .slp only" in capsys.readouterr().err and not wrong.exists()
    tracked = tmp_path / "tracked.slp"
    assert cli.main([*argv[:4], "-o", str(tracked), "--tracking", *cache]) != 0
    assert "boxes are not tracked" in capsys.readouterr().err and not tracked.exists()
    many = [*argv[:2], str(video), *argv[2:4], "--name-pattern", "{stem}.h5", *cache]
    assert cli.main(many) != 0
    assert "written to .slp only" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_first_slots_skip_a_box_with_no_area_between_valid_ones():
    boxes = torch.arange(2 * 4 * 4, dtype=torch.float32).reshape(2, 4, 4)
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.6], [0.5, 0.4, 0.3, 0.2]])
    # Frame 0: the second detection was clipped to nothing; frame 1 has one box.
    valid = torch.tensor([[True, False, True, True], [True, False, False, False]])
    picked, picked_scores, filled = first_slots(boxes, scores, valid, 3)
    assert filled.tolist() == [[True, True, True], [True, False, False]]
    expected = torch.tensor([[0.9, 0.7, 0.6], [0.5, 0.0, 0.0]])
    assert torch.equal(picked_scores, expected)
    assert torch.equal(picked[0], boxes[0, [0, 2, 3]])
    assert torch.equal(picked[1, 0], boxes[1, 0]) and not picked[1, 1:].any()
    # Fewer slots than valid boxes: the first ones, in order.
    assert torch.equal(first_slots(boxes, scores, valid, 1)[1], scores[:, :1])


def _torchvision_nms(
    boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, threshold: float
) -> list[int]:
    """The indices torchvision's `batched_nms` keeps on the CPU (categories apart by
    shifted coordinates), best first: its kernel's loop, checked against torchvision
    0.29.1 on 300 random sets of up to 120 boxes in 3 categories."""
    shifted = boxes + (classes.astype(np.float32) * (boxes.max() + np.float32(1)))[:, None]
    x1, y1, x2, y2 = shifted.T
    areas = (x2 - x1) * (y2 - y1)
    order = np.argsort(-scores, kind="stable")
    suppressed = np.zeros(len(boxes), bool)
    keep = []
    for a, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(int(i))
        for j in order[a + 1 :]:
            w = max(np.float32(0), min(x2[i], x2[j]) - max(x1[i], x1[j]))
            h = max(np.float32(0), min(y2[i], y2[j]) - max(y1[i], y1[j]))
            inter = w * h
            suppressed[j] |= inter / (areas[i] + areas[j] - inter) > threshold
    return keep


def test_ssd_nms_keeps_what_torchvisions_batched_nms_keeps():
    # Crowded frames of 3 categories, the candidates best first and some slots empty.
    rng = np.random.default_rng(0)
    frames, slots = 16, 96
    xy = rng.uniform(0, 60, (frames, slots, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 40, (frames, slots, 2))], -1)
    boxes = boxes.astype(np.float32)
    scores = -np.sort(-rng.uniform(0.2, 1, (frames, slots)).astype(np.float32), axis=1)
    classes = rng.integers(0, 3, (frames, slots))
    valid = np.arange(slots) < rng.integers(1, slots + 1, (frames, 1))
    kept = nms_keep(
        torch.from_numpy(boxes), torch.from_numpy(classes), torch.from_numpy(valid), 0.45
    ).numpy()
    for f in range(frames):
        n = int(valid[f].sum())
        expected = _torchvision_nms(boxes[f, :n], scores[f, :n], classes[f, :n], 0.45)
        assert np.flatnonzero(kept[f] & valid[f]).tolist() == expected


def test_a_detector_pairs_only_with_a_crop_model(tmp_path):
    detector = goldens.DATA / "models" / "bbox_centernet"
    other = goldens.DATA / "models" / "bottomup"
    require(detector / "best.ckpt", other / "best.ckpt")
    with pytest.raises(ModelConfigError) as error:
        load_inference_model([other, detector])
    assert str(error.value) == (
        f"{other}: a bottomup model; a box detector ({detector}) runs as the first stage "
        "of a centered-instance or multi-class top-down model"
    )
