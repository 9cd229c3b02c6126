"""Tests for sleap_live.engines.graph.centroid and .topdown (centroid, top-down and
multi-class top-down)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.centroid import CentroidModel
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.graph.topdown import MultiClassTopDownModel, TopDownModel
from sleap_live.engines.host.outputs import INSTANCE_OUTPUTS, MULTI_CLASS_TOPDOWN_OUTPUTS
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.types import CENTROID_SKELETON, Skeleton

SKELETON = Skeleton(("head", "thorax", "tail"))
CLASSES = ("dim", "mid", "bright")
CROP = 32


def _frame_config(**settings) -> PreprocessConfig:
    return PreprocessConfig(in_channels=1, max_stride=16, **settings)


def _topdown(fakes, cls=TopDownModel, frame_settings=None, crop_scale=1.0, **options):
    classes = len(CLASSES) if cls is MultiClassTopDownModel else 0
    if cls is MultiClassTopDownModel:
        options["class_names"] = CLASSES
    return cls(
        fakes.SampledNetwork({"CentroidConfmapsHead": 1}, stride=2),
        fakes.SampledNetwork({"CenteredInstanceConfmapsHead": 3}, stride=1, classes=classes),
        _frame_config(**(frame_settings or {})),
        _frame_config(scale=crop_scale),
        SKELETON,
        2,
        1,
        CROP,
        **options,
    )


def _named(model, frames):
    return dict(zip(model.output_names, (t.numpy() for t in model(frames)), strict=True))


class TestTopDown:
    def test_points_follow_sleap_nns_crop_corner_convention(self, fake_networks):
        model = _topdown(fake_networks)
        frames = fake_networks.blob_frames([[(40, 50, 0.9), (100, 70, 0.6)]])
        out = _named(model, frames)
        assert model.output_names == INSTANCE_OUTPUTS
        assert out["instance_frame"].tolist() == [0, 0]
        # A blob centred on a pixel is found there by the centroid stage; sleap-nn
        # then adds the box corner (centroid - 16 + 0.5) to the crop-local peak (16),
        # so every node lands half a pixel down and right of the blob.
        expected = np.array([[40.5, 50.5], [100.5, 70.5]])[:, None, :].repeat(3, axis=1)
        np.testing.assert_allclose(out["points"], expected, atol=1e-4)
        np.testing.assert_allclose(out["instance_scores"], [230 / 255, 153 / 255], atol=1e-6)
        factors = np.array([1.0, 0.9, 0.8])
        np.testing.assert_allclose(
            out["point_scores"], out["instance_scores"][:, None] * factors, rtol=1e-6
        )

    def test_instance_count_follows_the_frames(self, fake_networks):
        model = _topdown(fake_networks)
        frames = fake_networks.blob_frames(
            [[(120, 30, 0.9), (30, 90, 0.8), (60, 30, 0.7)], [], [(80, 60, 0.5)]]
        )
        out = _named(model, frames)
        assert out["instance_frame"].tolist() == [0, 0, 0, 2]
        # Raster order of the centroids within a frame: by row, then column.
        np.testing.assert_allclose(
            out["points"][:, 0],
            [[60.5, 30.5], [120.5, 30.5], [30.5, 90.5], [80.5, 60.5]],
            atol=1e-4,
        )
        poses = decode(model.info, out, 3)
        assert [p.n_instances for p in poses] == [3, 0, 1]

    def test_over_the_limit_keeps_the_best_centroids_best_first(self, fake_networks):
        model = _topdown(fake_networks, max_instances=2)
        frames = fake_networks.blob_frames([[(120, 30, 0.6), (30, 90, 0.9), (60, 30, 0.7)]])
        out = _named(model, frames)
        np.testing.assert_allclose(out["points"][:, 0], [[30.5, 90.5], [60.5, 30.5]], atol=1e-4)
        assert model.info.max_instances == 2

    def test_size_matched_frames_map_back_to_frame_pixels(self, fake_networks):
        model = _topdown(
            fake_networks, frame_settings={"max_height": 240, "max_width": 320, "scale": 0.5}
        )
        frames = fake_networks.blob_frames([[(40, 50, 0.9), (101, 71, 0.6)]])
        out = _named(model, frames)
        # Frames are upscaled twice; crops are cut at twice the centroids and the
        # half-pixel corner offset becomes a quarter pixel in frame pixels.
        expected = np.array([[40.25, 50.25], [101.25, 71.25]])
        np.testing.assert_allclose(out["points"][:, 0], expected, atol=0.1)

    def test_crop_scale_is_undone(self, fake_networks):
        model = _topdown(fake_networks, crop_scale=0.5)
        out = _named(model, fake_networks.blob_frames([[(40, 50, 0.9)]]))
        # Halved crops put the blob at 7.75 (pixel centres move), which maps back to
        # 15.5 + 24.5 = 40; refinement on the halved blob pulls toward pixel 8 (40.5).
        assert ((out["points"][0] >= [40.0, 50.0]) & (out["points"][0] <= [40.5, 50.5])).all()

    def test_grey_and_rgb_frames_give_the_same_poses(self, fake_networks):
        model = _topdown(fake_networks)
        blobs = [[(40, 50, 0.9), (100, 70, 0.6)]]
        grey = _named(model, fake_networks.blob_frames(blobs))
        rgb = _named(model, fake_networks.blob_frames(blobs, channels=3))
        np.testing.assert_allclose(rgb["points"], grey["points"], atol=0.01)

    def test_multi_class_reports_class_probabilities_and_decodes_identities(self, fake_networks):
        model = _topdown(fake_networks, cls=MultiClassTopDownModel)
        frames = fake_networks.blob_frames(
            [[(30, 30, 1.0), (120, 30, 0.3), (60, 90, 0.65)], [(40, 40, 0.95), (120, 90, 1.0)]]
        )
        out = _named(model, frames)
        assert model.output_names == MULTI_CLASS_TOPDOWN_OUTPUTS
        assert model.info.model_type == "multi_class_topdown"
        assert model.info.class_names == CLASSES
        assert out["class_scores"].shape == (5, 3)
        np.testing.assert_allclose(out["class_scores"].sum(1), 1.0, atol=1e-6)
        poses = decode(model.info, out, 2)
        assert poses[0].identities.tolist() == [2, 0, 1]
        # Both animals of frame 1 look "bright"; the brighter one gets it.
        assert sorted(poses[1].identities.tolist()) == [1, 2]
        assert poses[1].identities[1] == 2

    def test_rejects_bad_settings(self, fake_networks):
        with pytest.raises(ValueError, match="crop_size"):
            TopDownModel(
                torch.nn.Identity(),
                torch.nn.Identity(),
                _frame_config(),
                _frame_config(),
                SKELETON,
                2,
                1,
                0,
            )
        with pytest.raises(ValueError, match="max_instances"):
            _topdown(fake_networks, max_instances=0)
        with pytest.raises(ValueError, match="class name"):
            _topdown(fake_networks, cls=MultiClassTopDownModel).__class__(
                torch.nn.Identity(),
                torch.nn.Identity(),
                _frame_config(),
                _frame_config(),
                SKELETON,
                2,
                1,
                CROP,
                class_names=(),
            )


class TestCentroidModel:
    def _model(self, fakes, skeleton=SKELETON, **options):
        network = fakes.SampledNetwork({"CentroidConfmapsHead": 1}, stride=2)
        return CentroidModel(network, _frame_config(), skeleton, 2, **options)

    def test_centroids_are_one_node_instances(self, fake_networks):
        model = self._model(fake_networks)
        out = _named(model, fake_networks.blob_frames([[(40, 50, 0.9)], [(100, 70, 0.6)]]))
        assert out["instance_frame"].tolist() == [0, 1]
        np.testing.assert_allclose(out["points"], [[[40, 50]], [[100, 70]]], atol=1e-4)
        np.testing.assert_allclose(out["point_scores"][:, 0], out["instance_scores"])
        np.testing.assert_allclose(out["instance_scores"], [230 / 255, 153 / 255], atol=1e-6)

    def test_multi_node_skeleton_collapses_to_a_centroid_node(self, fake_networks):
        assert self._model(fake_networks).info.skeleton == CENTROID_SKELETON
        single = Skeleton(("thorax",))
        assert self._model(fake_networks, skeleton=single).info.skeleton == single


class TestFromSpecs:
    def _specs(self, fakes, instance_type="centered_instance", **instance_preprocessing):
        confmaps = {"sigma": 2.5, "output_stride": 1, "anchor_part": "thorax"}
        centroid = fakes.model_spec(
            "centroid",
            {"confmaps": {"sigma": 5.0, "output_stride": 2, "anchor_part": "thorax"}},
            preprocessing={"scale": 0.5, "max_height": None},
        )
        heads = {"confmaps": confmaps}
        if instance_type == "multi_class_topdown":
            heads["class_vectors"] = {"classes": list(CLASSES), "output_stride": 16}
        instance = fakes.model_spec(
            instance_type,
            heads,
            in_channels=3,
            max_stride=8,
            preprocessing={"crop_size": 48, **instance_preprocessing},
        )
        return centroid, instance

    def test_combines_the_two_configs_like_sleap_nn(self, fake_networks):
        centroid, instance = self._specs(fake_networks, scale=0.75, max_height=240, max_width=320)
        model = TopDownModel.from_specs(
            centroid, instance, torch.nn.Identity(), torch.nn.Identity()
        )
        frame = model.stage.preprocess
        assert (frame.scale, frame.max_height, frame.max_width) == (0.5, 240, 320)
        assert (frame.in_channels, frame.max_stride) == (1, 16)
        crop = model.instance_preprocess
        assert (crop.scale, crop.in_channels, crop.max_stride) == (0.75, 3, 8)
        assert model.crop_size == 48
        assert (model.stage.output_stride, model.instance_stride) == (2, 1)
        assert model.info.skeleton.node_names == ("head", "thorax", "tail")
        assert model.info.model_type == "topdown"

    def test_multi_class_takes_class_names_from_the_instance_model(self, fake_networks):
        centroid, instance = self._specs(fake_networks, "multi_class_topdown")
        model = MultiClassTopDownModel.from_specs(
            centroid, instance, torch.nn.Identity(), torch.nn.Identity()
        )
        assert model.info.class_names == CLASSES

    def test_rejects_the_wrong_model_types(self, fake_networks):
        centroid, instance = self._specs(fake_networks)
        with pytest.raises(ModelConfigError, match="not a centroid model"):
            TopDownModel.from_specs(instance, instance, torch.nn.Identity(), torch.nn.Identity())
        with pytest.raises(ModelConfigError, match="not a multi_class_topdown model"):
            MultiClassTopDownModel.from_specs(
                centroid, instance, torch.nn.Identity(), torch.nn.Identity()
            )
        with pytest.raises(ModelConfigError, match="not a centroid model"):
            CentroidModel.from_spec(instance, torch.nn.Identity())


@pytest.mark.parametrize("cls", [TopDownModel, MultiClassTopDownModel, CentroidModel])
def test_onnx_export_matches_torch_at_other_sizes_and_counts(fake_networks, tmp_path, cls):
    pytest.importorskip("onnxruntime")
    if cls is CentroidModel:
        network = fake_networks.SampledNetwork({"CentroidConfmapsHead": 1}, stride=2)
        model = CentroidModel(network, _frame_config(scale=0.5), SKELETON, 2, max_instances=4)
    else:
        model = _topdown(
            fake_networks, cls=cls, frame_settings={"max_height": 160, "max_width": 160}
        )
    blob_frames = fake_networks.blob_frames
    example = blob_frames([[(40, 50, 0.9)]], height=96, width=128)
    inputs = [
        blob_frames([[(40, 50, 0.9), (100, 70, 0.6), (20, 90, 0.7)], []], height=120, width=160),
        blob_frames([[(33.3, 21.7, 0.8)]], height=77, width=203, channels=3),
        blob_frames([[]], height=64, width=64),
    ]
    results = fake_networks.export_and_run(model, example, inputs, str(tmp_path / "model.onnx"))
    counts = []
    for frames, got in zip(inputs, results, strict=True):
        expected = [t.numpy() for t in model(frames)]
        counts.append(len(got[0]))
        for name, ours, theirs in zip(model.output_names, got, expected, strict=True):
            assert ours.shape == theirs.shape, name
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5, err_msg=name)
    assert counts == [3, 1, 0]
