"""Tests for sleap_live.engines.graph.tiling and the tiled single-instance model.

The expected tile origins and importance windows were computed with sleap-nn 0.3.5
itself (`sleap_nn/data/tiling.py` `_axis_tile_origins`, `sleap_nn/inference/
tile_merger.py` `build_importance_window`) in the goldens venv; sleap-nn is not
installed in the test venv. The whole tiled predict is checked against `sleap-nn
predict`'s golden in test_parity.py (`tiled_single_instance`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sleap_io as sio
import torch

from sleap_live import cli
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.graph.single_instance import SingleInstanceModel
from sleap_live.engines.graph.tiling import TileGeometry, importance_window, tile_origins
from sleap_live.engines.load.metadata import TENSORRT_PROFILE
from sleap_live.engines.types import Skeleton
from tests.committed import require
from tests.engines import goldens

SKELETON = Skeleton(("head", "thorax", "tail"))

# (axis size, tile_size, overlap, output_stride, max_stride, min_overlap_fraction) ->
# sleap-nn 0.3.5's `_axis_tile_origins`.
SLEAP_NN_ORIGINS = {
    (168, 64, 16, 2, 16, 0.25): [0, 48, 96, 104],
    (200, 64, 16, 2, 16, 0.25): [0, 48, 96, 136],
    (64, 64, 16, 2, 16, 0.25): [0],
    (40, 64, 16, 2, 16, 0.25): [0],
    (130, 64, 16, 2, 16, 0.25): [0, 48, 66],
    (500, 96, 8, 4, 32, 0.25): [0, 64, 128, 192, 256, 320, 384, 404],
    (300, 64, 40, 2, 16, 0.5): [*range(0, 225, 16), 236],
    (1000, 128, 0, 8, 16, 0.0): [0, 128, 256, 384, 512, 640, 768, 872],
    (250, 64, 16, 2, 64, 0.25): [0, 48, 96, 144, 186],
}

# sleap-nn 0.3.5's `build_importance_window((7, 7), mode, sigma_scale=0.125)`: rows 0 and 3.
SLEAP_NN_WINDOWS = {
    "gaussian": (
        [0.0010000000474974513, 0.0010000000474974513, 0.0014581127325072885,
         0.002801637863740325, 0.0014581127325072885, 0.0010000000474974513,
         0.0010000000474974513],
        [0.002801637863740325, 0.07336965203285217, 0.5204501152038574, 1.0,
         0.5204501152038574, 0.07336965203285217, 0.002801637863740325],
    ),
    "pyramid": (
        [0.0625, 0.125, 0.1875, 0.25, 0.1875, 0.125, 0.0625],
        [0.25, 0.5, 0.75, 1.0, 0.75, 0.5, 0.25],
    ),
    "constant": ([1.0] * 7, [1.0] * 7),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SLEAP_NN_ORIGINS), ids=str)
def test_tile_origins_are_sleap_nns(case):
    size, tile, overlap, stride, max_stride, fraction = case
    geometry = TileGeometry(tile, overlap, fraction, stride, max_stride)
    assert tile_origins(torch.tensor([size]), geometry).tolist() == SLEAP_NN_ORIGINS[case]


@pytest.mark.parametrize("blend", list(SLEAP_NN_WINDOWS))
def test_importance_windows_are_sleap_nns(blend):
    geometry = TileGeometry(14, 0, 0.25, 2, 2, blend=blend)
    window = importance_window(geometry)
    assert window.shape == (7, 7) and window.dtype == torch.float32
    first, middle = SLEAP_NN_WINDOWS[blend]
    assert window[0].tolist() == first
    assert window[3].tolist() == middle


def _model(fakes, tile: int = 32, overlap: int = 8, **settings) -> SingleInstanceModel:
    network = fakes.SampledNetwork({"SingleInstanceConfmapsHead": 3}, stride=2)
    preprocess = PreprocessConfig(in_channels=1, max_stride=2, **settings)
    geometry = TileGeometry(tile, overlap, 0.25, output_stride=2, max_stride=16)
    return SingleInstanceModel(network, preprocess, SKELETON, 2, tiling=geometry)


def _untiled(fakes, **settings) -> SingleInstanceModel:
    network = fakes.SampledNetwork({"SingleInstanceConfmapsHead": 3}, stride=2)
    preprocess = PreprocessConfig(in_channels=1, max_stride=2, **settings)
    return SingleInstanceModel(network, preprocess, SKELETON, 2)


def _on_cell(position: float) -> int:
    """The even pixel (a stride-2 map cell's centre) nearest `position`."""
    return 2 * round(position / 2)


@pytest.mark.parametrize("size", [(120, 160), (77, 203), (20, 30), (32, 32)])
def test_stitched_maps_of_a_translation_invariant_network_are_its_whole_frame_maps(
    fake_networks, size
):
    # A network whose maps are the sampled input gives every tile the same values
    # where tiles overlap, so the normalised canvas is the whole frame's maps (up to
    # rounding of the weighted average), frames smaller than a tile included.
    # Blobs centred on map cells (even pixels): no two cells tie for a node's peak.
    height, width = size
    blobs = [(0.7, 0.4, 0.9), (0.2, 0.8, 0.5)]
    frames = fake_networks.blob_frames(
        [[(_on_cell(x * width), _on_cell(y * height), value)] for x, y, value in blobs],
        height=height,
        width=width,
    )
    tiled = [t.numpy() for t in _model(fake_networks)(frames)]
    whole = [t.numpy() for t in _untiled(fake_networks)(frames)]
    for ours, reference in zip(tiled, whole, strict=True):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-4)
    assert not np.isnan(tiled[1]).any()


def test_tiled_onnx_export_takes_any_frame_size(fake_networks, tmp_path):
    pytest.importorskip("onnxruntime")
    model = _model(fake_networks, scale=0.75)
    blob_frames = fake_networks.blob_frames
    inputs = [
        blob_frames([[(140, 50, 0.9)], [(80, 20, 0.3)]], height=120, width=200),
        blob_frames([[(33.3, 21.7, 0.8)]], height=77, width=203, channels=3),
        blob_frames([[(10, 12, 0.8)]], height=24, width=30),
    ]
    example = blob_frames([[(20, 20, 0.9)]], height=64, width=96)
    results = fake_networks.export_and_run(model, example, inputs, str(tmp_path / "model.onnx"))
    for frames, result in zip(inputs, results, strict=True):
        expected = [t.numpy() for t in model(frames)]
        for ours, reference in zip(result, expected, strict=True):
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-4)


def test_tiled_model_from_spec_runs_at_the_frames_own_size(fake_networks):
    spec = fake_networks.model_spec(
        "single_instance",
        {"confmaps": {"sigma": 2.5, "output_stride": 2}},
        preprocessing={
            "max_height": 64,
            "max_width": 64,
            "tiling": {"enabled": True, "tile_size": 64, "overlap": 16, "blend": "pyramid"},
        },
    )
    model = SingleInstanceModel.from_spec(spec, torch.nn.Identity())
    # No size matcher (sleap-nn skips it when tiling), padding to the output stride.
    assert model.preprocess == PreprocessConfig(in_channels=1, max_stride=2)
    assert model.tiling == TileGeometry(64, 16, 0.25, 2, 16, blend="pyramid")
    with pytest.raises(ModelConfigError, match="a tiled model has no tensorrt profile"):
        model.set_profile(TENSORRT_PROFILE)


def _slp_poses(path: Path) -> list[dict[str, np.ndarray]]:
    """Per video frame, the poses of a .slp sleap-live wrote."""
    labels = sio.load_slp(str(path), open_videos=False)
    poses = []
    for frame in labels:
        values = [instance.numpy(scores=True) for instance in frame.instances]
        poses.append(
            {
                "points": np.stack([v[:, :2] for v in values]).astype(np.float32),
                "point_scores": np.stack([v[:, 2] for v in values]).astype(np.float32),
                "instance_scores": np.array([i.score for i in frame.instances], np.float32),
                "identities": np.full(len(values), -1, np.int32),
            }
        )
    return poses


@pytest.mark.slow
@pytest.mark.usefixtures("warm_export_cache")
def test_run_matches_sleap_nn_predicts_tiled_golden(tmp_path):
    # The export is the warm cache's (verified on the video's spread frames, as `run`
    # verifies); `sleap-live run` (the Pipeline API underneath) runs it on the whole
    # 168 x 200 video, more than twice the 64 px tiles each way.
    models, video, golden_path, _ = goldens.case_paths("tiled_single_instance")
    require(*models, video, golden_path)
    golden = dict(np.load(golden_path))
    bound = goldens.bound_of(tuple(models))
    out = tmp_path / "cli.slp"
    assert cli.main(["run", str(video), "-m", str(models[0]), "-o", str(out), "-q"]) == 0
    poses = _slp_poses(out)
    assert len(poses) == len(golden["frame_indices"])
    agreement = goldens.agreement(poses, golden, bound)
    assert agreement.points == 5 * len(poses) and agreement.agrees, agreement.summary()
