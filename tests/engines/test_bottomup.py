"""Bottom-up inference models: peaks, frame coordinates, grouping, export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.bottomup import (
    BottomUpModel,
    MultiClassBottomUpModel,
    top_peaks_per_channel,
)
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.host.grouping import ClassMapGrouper, PafGrouper
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import info_from_dict, info_to_dict
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, PreprocessSpec, UNetSpec
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.types import Skeleton

SKELETON = Skeleton(("head", "neck", "body", "tail"), ((0, 1), (1, 2), (2, 3)))
STRIDE = 2


class FixedMaps(torch.nn.Module):
    """A stand-in network returning the same head outputs whatever the input."""

    def __init__(self, **heads: torch.Tensor) -> None:
        super().__init__()
        self.heads = {
            {"cms": "MultiInstanceConfmapsHead", "pafs": "PartAffinityFieldsHead"}.get(
                key, "ClassMapsHead"
            ): value
            for key, value in heads.items()
        }

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(self.heads)


class ToyNetwork(torch.nn.Module):
    """Random convolutions over a pooled input: maps that follow the frame size."""

    def __init__(self, in_channels: int, n_nodes: int, n_edges: int, n_classes: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.cms = torch.nn.Conv2d(in_channels, n_nodes, 3, padding=1)
        self.pafs = torch.nn.Conv2d(in_channels, 2 * n_edges, 3, padding=1)
        self.classes = torch.nn.Conv2d(in_channels, max(n_classes, 1), 3, padding=1)
        self.n_classes = n_classes
        for parameter in self.parameters():
            parameter.data = 0.5 * torch.randn(parameter.shape, generator=generator)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        pooled = F.avg_pool2d(image, STRIDE)
        heads = {
            "MultiInstanceConfmapsHead": torch.sigmoid(self.cms(pooled) - 1.0),
            "PartAffinityFieldsHead": torch.tanh(self.pafs(pooled)),
        }
        if self.n_classes:
            heads["ClassMapsHead"] = torch.sigmoid(self.classes(pooled))
        return heads


def _render(animals: np.ndarray, edges, height: int, width: int, sigma: float = 2.0):
    """Confidence maps and PAFs (summed over animals) on a stride-`STRIDE` grid."""
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) * STRIDE
    cms = np.zeros((animals.shape[1], height, width), np.float32)
    pafs = np.zeros((len(edges), 2, height, width), np.float32)
    for animal in animals:
        for node, (x, y) in enumerate(animal):
            cms[node] = np.maximum(cms[node], np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / 8.0))
        for e, (src, dst) in enumerate(edges):
            a, b = animal[src], animal[dst]
            unit = (b - a) / np.linalg.norm(b - a)
            along = (xs - a[0]) * unit[0] + (ys - a[1]) * unit[1]
            across = np.abs((xs - a[0]) * unit[1] - (ys - a[1]) * unit[0])
            near = (along >= 0) & (along <= np.linalg.norm(b - a)) & (across <= sigma)
            pafs[e, 0] += near * unit[0]
            pafs[e, 1] += near * unit[1]
    return torch.from_numpy(cms)[None], torch.from_numpy(pafs.reshape(-1, height, width))[None]


def _outputs(model, frames: torch.Tensor) -> dict[str, np.ndarray]:
    with torch.inference_mode():
        raw = model(frames)
    return {name: tensor.numpy() for name, tensor in zip(model.output_names, raw, strict=True)}


def _frames(batch: int, height: int, width: int, channels: int = 1) -> torch.Tensor:
    return torch.zeros((batch, height, width, channels), dtype=torch.uint8)


# ---------------------------------------------------------------- peaks


def test_peaks_fill_slots_in_raster_order_and_keep_the_highest_k():
    cms = torch.zeros(1, 1, 10, 10)
    positions = [(1, 8, 0.5), (2, 2, 0.9), (5, 5, 0.3), (8, 1, 0.7), (8, 8, 0.6)]  # (row, col, v)
    for row, col, value in positions:
        cms[0, 0, row, col] = value

    points, values, valid = top_peaks_per_channel(cms, 3, refine=False)

    assert valid[0, 0].tolist() == [True, True, True]
    # The three highest (0.9, 0.7, 0.6), back in raster order.
    np.testing.assert_allclose(values[0, 0].numpy(), [0.9, 0.7, 0.6])
    np.testing.assert_array_equal(points[0, 0].numpy(), [[2, 2], [1, 8], [8, 8]])


def test_missing_peaks_leave_empty_slots_at_the_end():
    cms = torch.zeros(2, 2, 3, 3)  # a map smaller than K pixels
    cms[1, 1, 1, 2] = 0.8

    points, values, valid = top_peaks_per_channel(cms, 12)

    assert points.shape == (2, 2, 12, 2) and valid.dtype == torch.bool
    assert valid.sum().item() == 1 and valid[1, 1, 0]
    assert values[~valid].eq(0).all() and points[~valid].eq(0).all()


def test_integral_refinement_and_flat_tops():
    cms = torch.zeros(1, 2, 12, 12)
    cms[0, 0, 5, 5], cms[0, 0, 5, 6] = 0.9, 0.45  # centre of mass 1/3 px to the right
    cms[0, 1, 3, 3] = cms[0, 1, 3, 4] = 0.7  # a two-pixel flat top

    refined, _, _ = top_peaks_per_channel(cms, 2)
    rough, _, valid = top_peaks_per_channel(cms, 2, refine=False)

    np.testing.assert_allclose(refined[0, 0, 0].numpy(), [5 + 1 / 3, 5], atol=1e-6)
    assert valid[0, 1].tolist() == [True, False]
    np.testing.assert_allclose(rough[0, 1, 0].numpy(), [3.5, 3])
    np.testing.assert_allclose(refined[0, 1, 0].numpy(), [3.5, 3])


# ---------------------------------------------------------------- whole model


def _crossing_animals() -> np.ndarray:
    """Three animals crossing near the middle of an 80x80 frame (grid-aligned)."""
    return np.array(
        [
            [[10, 40], [28, 42], [48, 38], [66, 40]],  # left to right
            [[38, 8], [42, 26], [40, 50], [36, 70]],  # top to bottom
            [[12, 12], [26, 24], [54, 58], [70, 70]],  # diagonal
        ],
        np.float32,
    )


def test_crossing_animals_are_grouped_correctly():
    animals = _crossing_animals()
    cms, pafs = _render(animals, SKELETON.edges, 40, 40)
    model = BottomUpModel(
        FixedMaps(cms=cms, pafs=pafs),
        PreprocessConfig(in_channels=1),
        SKELETON,
        SKELETON.edges,
        STRIDE,
        STRIDE,
    )

    (poses,) = PafGrouper.from_info(model.info).group_batch(_outputs(model, _frames(1, 80, 80)))

    assert poses.n_instances == 3
    found = sorted(poses.points.tolist(), key=lambda points: points[0])
    expected = sorted(animals.tolist(), key=lambda points: points[0])
    np.testing.assert_allclose(found, expected, atol=0.05)
    np.testing.assert_array_equal(poses.identities, [-1, -1, -1])
    assert (poses.instance_scores > 2.0).all()  # three edges scoring close to 1


def test_postprocess_decode_groups_bottomup_outputs():
    animals = _crossing_animals()
    cms, pafs = _render(animals, SKELETON.edges, 40, 40)
    class_maps = torch.full((1, 2, 40, 40), 0.5)
    bottomup = BottomUpModel(
        FixedMaps(cms=cms, pafs=pafs),
        PreprocessConfig(in_channels=1),
        SKELETON,
        SKELETON.edges,
        STRIDE,
        STRIDE,
    )
    multi = MultiClassBottomUpModel(
        FixedMaps(cms=cms, classes=class_maps),
        PreprocessConfig(in_channels=1),
        SKELETON,
        ("a", "b"),
        STRIDE,
        STRIDE,
    )

    (paf_poses,) = decode(bottomup.info, _outputs(bottomup, _frames(1, 80, 80)), 1)
    (class_poses,) = decode(multi.info, _outputs(multi, _frames(1, 80, 80)), 1)

    assert paf_poses.n_instances == 3
    assert class_poses.identities.tolist() == [0, 1]  # equal probabilities: all matches kept
    with pytest.raises(ModelConfigError, match="line_scores"):
        decode(bottomup.info, {"peaks": np.zeros((1, 4, 20, 2))}, 1)


def test_frame_coordinates_undo_input_scale_and_size_matching():
    cms = torch.zeros(1, 1, 8, 8)
    cms[0, 0, 3, 5] = 0.9
    skeleton = Skeleton(("only",))
    model = MultiClassBottomUpModel(
        FixedMaps(cms=cms, classes=torch.ones(1, 1, 8, 8)),
        # 50x50 frames are letterboxed up to 100x100 (eff. scale 2), then halved.
        PreprocessConfig(in_channels=1, scale=0.5, max_height=100, max_width=100),
        skeleton,
        ("solo",),
        4,
        4,
        refine=False,
    )

    outputs = _outputs(model, _frames(1, 50, 50))

    # grid (5, 3) x stride 4 / scale 0.5 / eff. scale 2.
    np.testing.assert_allclose(outputs["peaks"][0, 0, 0], [20.0, 12.0])
    assert np.isnan(outputs["peaks"][0, 0, 1:]).all()
    assert np.isnan(outputs["class_probs"][0, 0, 1:]).all()


def test_multi_class_groups_by_class_maps():
    animals = _crossing_animals()[:2]
    cms, _ = _render(animals, SKELETON.edges, 40, 40)
    ys, xs = np.mgrid[0:40, 0:40] * STRIDE
    class_maps = np.full((2, 40, 40), 0.1, np.float32)
    for c, animal in enumerate(animals):
        for x, y in animal:
            class_maps[c][np.hypot(xs - x, ys - y) < 6] = 0.9
    model = MultiClassBottomUpModel(
        FixedMaps(cms=cms, classes=torch.from_numpy(class_maps)[None]),
        PreprocessConfig(in_channels=1),
        SKELETON,
        ("left-right", "top-bottom"),
        STRIDE,
        STRIDE,
    )

    (poses,) = ClassMapGrouper.from_info(model.info).group_batch(
        _outputs(model, _frames(1, 80, 80))
    )

    np.testing.assert_array_equal(poses.identities, [0, 1])
    np.testing.assert_allclose(poses.points, animals, atol=0.05)
    np.testing.assert_allclose(poses.instance_scores, 1.0, atol=0.01)


def test_no_peaks_gives_empty_slots_and_nan_line_scores():
    model = BottomUpModel(
        FixedMaps(cms=torch.zeros(2, 4, 10, 10), pafs=torch.zeros(2, 6, 10, 10)),
        PreprocessConfig(in_channels=1),
        SKELETON,
        SKELETON.edges,
        STRIDE,
        STRIDE,
        max_peaks_per_node=5,
    )

    outputs = _outputs(model, _frames(2, 20, 20))

    assert outputs["peak_valid"].shape == (2, 4, 5) and not outputs["peak_valid"].any()
    assert outputs["line_scores"].shape == (2, 3, 5, 5) and np.isnan(outputs["line_scores"]).all()
    assert [p.n_instances for p in PafGrouper.from_info(model.info).group_batch(outputs)] == [0, 0]


def test_info_carries_the_grouping_settings_through_metadata():
    model = BottomUpModel(
        ToyNetwork(1, 4, 2),
        PreprocessConfig(in_channels=1, max_stride=4),
        SKELETON,
        ((0, 1), (1, 3)),  # PAF edges that differ from the skeleton's
        STRIDE,
        STRIDE,
        min_line_scores=0.3,
        min_instance_peaks=2,
        max_instances=5,
        max_peaks_per_node=7,
    )

    info = info_from_dict(json.loads(json.dumps(info_to_dict(model.info))))
    grouper = PafGrouper.from_info(info)

    assert grouper == PafGrouper(
        4, ((0, 1), (1, 3)), min_line_scores=0.3, min_instance_peaks=2, max_instances=5
    )
    assert info.postprocess["max_peaks_per_node"] == 7
    unlimited = BottomUpModel(
        ToyNetwork(1, 4, 2), PreprocessConfig(in_channels=1), SKELETON, SKELETON.edges, 2, 2
    )
    # No cap, as in sleap-nn: the grouping keeps every instance.
    assert unlimited.info.max_instances is None
    assert PafGrouper.from_info(unlimited.info).max_instances is None


def _spec(model_type: str, heads: tuple[HeadSpec, ...], classes=()) -> ModelSpec:
    return ModelSpec(
        path=Path("/models/m"),
        model_type=model_type,
        skeleton=SKELETON,
        backbone=UNetSpec(
            in_channels=1,
            kernel_size=3,
            filters=4,
            filters_rate=1.5,
            max_stride=4,
            stem_stride=None,
            middle_block=True,
            up_interpolate=True,
            stacks=1,
            convs_per_block=2,
            output_stride=STRIDE,
        ),
        heads=heads,
        preprocess=PreprocessSpec(scale=0.5),
        class_names=classes,
    )


def test_from_spec_reads_strides_edges_and_classes():
    names = SKELETON.node_names
    confmaps = HeadSpec("MultiInstanceConfmapsHead", "confmaps", 2, part_names=names)
    pafs = HeadSpec(
        "PartAffinityFieldsHead",
        "pafs",
        4,
        edges=(("neck", "head"),),
        edge_indices=((1, 0),),
    )
    class_maps = HeadSpec("ClassMapsHead", "class_maps", 4, classes=("a", "b"))

    bottomup = BottomUpModel.from_spec(
        _spec("bottomup", (confmaps, pafs)), network=ToyNetwork(1, 4, 1), min_line_scores=0.4
    )
    multi = MultiClassBottomUpModel.from_spec(
        _spec("multi_class_bottomup", (confmaps, class_maps), ("a", "b")),
        network=ToyNetwork(1, 4, 1, 2),
    )

    assert bottomup.info.postprocess["edges"] == [[1, 0]]
    assert bottomup.info.postprocess["min_line_scores"] == 0.4
    assert bottomup.scorer.paf_stride == 4 and bottomup.confmap_stride == 2
    assert bottomup.input_scale == 0.5
    assert multi.info.class_names == ("a", "b") and multi.class_map_stride == 4
    assert multi.info.max_instances == 2
    with pytest.raises(ModelConfigError, match="not a bottomup model"):
        BottomUpModel.from_spec(_spec("multi_class_bottomup", (confmaps, class_maps)), network=None)


# ---------------------------------------------------------------- export


def test_onnx_export_matches_torch_at_two_frame_sizes(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    from sleap_live.engines.export.exporter import export_graph

    model = BottomUpModel(
        ToyNetwork(1, 4, 3),
        PreprocessConfig(in_channels=1, max_stride=4, scale=0.5),
        SKELETON,
        SKELETON.edges,
        STRIDE,
        STRIDE,
        max_peaks_per_node=6,
    )
    path = export_graph(model, tmp_path / "bottomup.onnx")
    session = onnxruntime.InferenceSession(
        str(path), session_options(), providers=["CPUExecutionProvider"]
    )
    grouper = PafGrouper.from_info(model.info)

    for shape in ((2, 96, 128, 1), (1, 75, 141, 1)):
        frames = np.random.default_rng(shape[1]).integers(0, 256, shape, dtype=np.uint8)
        expected = _outputs(model, torch.from_numpy(frames))
        got = dict(zip(model.output_names, session.run(None, {"frames": frames}), strict=True))
        np.testing.assert_array_equal(got["peak_valid"], expected["peak_valid"])
        assert expected["peak_valid"].any()
        for name in model.output_names:
            # Frame pixels are 4 grid pixels here, which scales float noise up.
            np.testing.assert_allclose(got[name], expected[name], atol=1e-3, err_msg=name)
        for ours, reference in zip(
            grouper.group_batch(got), grouper.group_batch(expected), strict=True
        ):
            assert ours.n_instances == reference.n_instances
            np.testing.assert_allclose(ours.points, reference.points, atol=1e-3)


def test_multi_class_onnx_export_verifies(tmp_path):
    pytest.importorskip("onnxruntime")
    from sleap_live.engines.export.exporter import export_graph
    from sleap_live.engines.load.metadata import read_onnx_metadata

    model = MultiClassBottomUpModel(
        ToyNetwork(3, 4, 3, n_classes=2),
        PreprocessConfig(in_channels=3, max_stride=4),
        SKELETON,
        ("x", "y"),
        STRIDE,
        STRIDE,
        max_peaks_per_node=4,
    )
    metadata = read_onnx_metadata(export_graph(model, tmp_path / "mc.onnx"))

    assert metadata.output_names == model.output_names
    assert len(metadata.verification) == 2
    assert ClassMapGrouper.from_info(metadata.info) == ClassMapGrouper(4, 2, max_instances=2)
