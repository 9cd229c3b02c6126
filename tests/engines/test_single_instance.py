"""Tests for sleap_live.engines.graph.single_instance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.graph.single_instance import SingleInstanceModel
from sleap_live.engines.host.outputs import INSTANCE_OUTPUTS
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.types import Skeleton

SKELETON = Skeleton(("head", "thorax", "tail"))


def _model(fakes, **settings) -> SingleInstanceModel:
    network = fakes.SampledNetwork({"SingleInstanceConfmapsHead": 3}, stride=2)
    return SingleInstanceModel(
        network, PreprocessConfig(in_channels=1, max_stride=16, **settings), SKELETON, 2
    )


def _named(model, frames):
    return dict(zip(model.output_names, (t.numpy() for t in model(frames)), strict=True))


def test_one_instance_per_frame_with_missing_nodes(fake_networks):
    model = _model(fake_networks)
    # Node k's map is the image times 1 - 0.1 k: at brightness 0.24 the tail
    # (0.8 x 0.24 < 0.2) is below the threshold.
    frames = fake_networks.blob_frames([[(40, 50, 0.9)], [(100, 70, 0.24)], []])
    out = _named(model, frames)
    assert model.output_names == INSTANCE_OUTPUTS
    assert out["instance_frame"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(out["points"][0], [[40, 50]] * 3, atol=1e-4)
    assert np.isnan(out["points"][1, 2]).all() and np.isnan(out["point_scores"][1, 2])
    assert np.isnan(out["points"][2]).all()
    found = np.nan_to_num(out["point_scores"])
    np.testing.assert_allclose(out["instance_scores"], found.sum(1), rtol=1e-6)
    poses = decode(model.info, out, 3)
    assert [p.n_instances for p in poses] == [1, 1, 0]
    assert model.info.max_instances == 1 and model.info.model_type == "single_instance"


def test_coordinates_undo_scale_and_size_matching(fake_networks):
    model = _model(fake_networks, scale=0.5, max_height=240, max_width=320)
    out = _named(model, fake_networks.blob_frames([[(40, 50, 0.9)]]))
    # Upscaled by 2 then halved: the blob is near pixel (40, 50) of the network input.
    np.testing.assert_allclose(out["points"][0, 0], [40, 50], atol=0.3)


def test_from_spec(fake_networks):
    spec = fake_networks.model_spec(
        "single_instance",
        {"confmaps": {"sigma": 2.5, "output_stride": 4}},
        preprocessing={"scale": 0.5, "ensure_grayscale": True},
    )
    model = SingleInstanceModel.from_spec(spec, torch.nn.Identity())
    assert model.output_stride == 4
    assert model.preprocess == PreprocessConfig(
        in_channels=1, max_stride=16, scale=0.5, ensure_grayscale=True
    )
    centroid = fake_networks.model_spec("centroid", {"confmaps": {"output_stride": 2}})
    with pytest.raises(ModelConfigError, match="not a single_instance model"):
        SingleInstanceModel.from_spec(centroid, torch.nn.Identity())


def test_onnx_export_matches_torch_at_other_sizes(fake_networks, tmp_path):
    pytest.importorskip("onnxruntime")
    model = _model(fake_networks, scale=0.75)
    blob_frames = fake_networks.blob_frames
    inputs = [
        blob_frames([[(40, 50, 0.9)], [(80, 20, 0.3)]], height=120, width=160),
        blob_frames([[(33.3, 21.7, 0.8)]], height=77, width=203, channels=3),
    ]
    example = blob_frames([[(20, 20, 0.9)]], height=64, width=96)
    results = fake_networks.export_and_run(model, example, inputs, str(tmp_path / "model.onnx"))
    for frames, got in zip(inputs, results, strict=True):
        for name, ours, theirs in zip(model.output_names, got, model(frames), strict=True):
            np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
