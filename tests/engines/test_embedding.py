"""Re-identification embeddings against sleap-nn's fused route.

`sleap-nn predict -m centroid_rgb -m centered_instance_rgb -m embedding_rgb --tracking
--save_embeddings slp` on the whole RGB test video (golden `topdown_embedding`, made by
scripts/make_fixtures.py) against sleap-live's top-down graph with its embedding stage
(`sleap_live.engines.graph.embedding`), run by torch: the same instances on every
frame, points within float32 noise, and each instance's vector within 1e-4 of
sleap-nn's (cosine at least 0.99999; crops over the frame's edge may differ from
Skia's by a grey level on a few pixels). `sleap-live run --tracking` with the three
models tracks on the vectors as sleap-nn does (features embeddings, cosine
similarity): the track ids equal sleap-nn's on at least 99 % of instances, and the
.slp holds the vectors (`identity_embedding`).
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
import sleap_io as sio
import torch
import yaml

from sleap_live import cli
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.training_config import parse_training_config
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.settings import InferenceSettings
from sleap_live.engines.types import FramePoses
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens
from tests.stream.test_tracking_cli import _track_ids
from tests.stream.test_tracking_parity import agreement

MODELS = goldens.DATA / "models"
PAIR = (MODELS / "centroid_rgb", MODELS / "centered_instance_rgb")
EMBEDDING = MODELS / "embedding_rgb"
VIDEO = goldens.DATA / "videos" / "multi_rgb.mp4"
GOLDEN = goldens.DATA / "goldens" / "topdown_embedding.npz"
BATCH = 8
VECTOR_TOLERANCE = 1e-4
MIN_COSINE = 0.99999
# The acceptance figure of issue 40: instances whose track id equals sleap-nn's.
SAME_TRACKS = 0.99


@cache
def embedded_poses() -> tuple[FramePoses, ...]:
    """sleap-live's poses and vectors of the whole test video (torch, CPU)."""
    require(*PAIR, EMBEDDING, VIDEO, GOLDEN)
    with FileSource(VIDEO) as source:
        frames = np.stack([frame.image for frame in source])
    runner = load_runner([*PAIR, EMBEDDING], engine="torch", device="cpu")
    try:
        return tuple(
            pose
            for start in range(0, len(frames), BATCH)
            for pose in runner.run(frames[start : start + BATCH])
        )
    finally:
        runner.close()


def test_vectors_match_sleap_nn_on_the_whole_video():
    poses = embedded_poses()
    golden = np.load(GOLDEN)
    assert len(poses) == len(golden["n_instances"])
    errors, cosines = [], []
    for frame, pose in enumerate(poses):
        n = int(golden["n_instances"][frame])
        assert pose.n_instances == n, f"frame {frame}"
        np.testing.assert_allclose(pose.points, golden["points"][frame, :n], atol=1e-3)
        assert pose.embeddings is not None and pose.embeddings.shape == (n, 16)
        expected = golden["embeddings"][frame, :n]
        errors.append(np.abs(pose.embeddings - expected).max(initial=0.0))
        cosines.extend((pose.embeddings * expected).sum(axis=1))
    assert max(errors) < VECTOR_TOLERANCE
    assert min(cosines) > MIN_COSINE


def test_the_embedding_model_is_read_from_its_config():
    require(EMBEDDING)
    spec = read_model_dir(EMBEDDING)
    (head,) = spec.heads
    assert (spec.model_type, head.name, head.embedding_dim, head.pool) == (
        "embedding",
        "EmbeddingHead",
        16,
        "gem",
    )
    assert (head.normalize, head.centroid_method, spec.preprocess.crop_size) == (
        True,
        "center_of_mass",
        64,
    )
    model = load_inference_model([EMBEDDING, *PAIR])
    assert model.info.embedding_dim == 16
    assert model.output_names[-1] == "embeddings"


@pytest.mark.parametrize(
    "others",
    [(), (PAIR[0],), (PAIR[1],)],
    ids=["alone", "with a centroid model", "with a centered-instance model"],
)
def test_it_runs_only_after_a_top_down_pair(others):
    require(*PAIR, EMBEDDING)
    with pytest.raises(ModelConfigError, match="runs after a centroid and a centered-instance"):
        load_inference_model([*others, EMBEDDING])


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("detection_mode", "mask", "detection_mode 'mask' is not supported"),
        ("centroid_method", "bbox_center", "centroid_method 'bbox_center' is not supported"),
        ("pool", None, "pool is None"),
    ],
)
def test_what_is_not_reproduced_is_refused_in_one_line(key, value, problem, tmp_path):
    require(EMBEDDING)
    config = yaml.safe_load((EMBEDDING / "training_config.yaml").read_text())
    config["model_config"]["head_configs"]["embedding"]["embedding"][key] = value
    with pytest.raises(ModelConfigError) as error:
        parse_training_config(config, tmp_path)
    assert problem in str(error.value)
    assert str(tmp_path) in str(error.value) and "\n" not in str(error.value)


def test_run_tracks_on_the_vectors_as_sleap_nn_does(tmp_path):
    require(*PAIR, EMBEDDING, VIDEO, GOLDEN)
    output = tmp_path / "tracked.slp"
    models = [arg for model in (*PAIR, EMBEDDING) for arg in ("-m", str(model))]
    arguments = ["run", str(VIDEO), *models, "--tracking", "--engine", "torch", "-q"]
    assert cli.main([*arguments, "-o", str(output)]) == 0
    golden = np.load(GOLDEN)
    present = np.arange(golden["track_ids"].shape[1]) < golden["n_instances"][:, None]
    theirs = np.where(present, golden["track_ids"], -2)
    labels = sio.load_slp(str(output))
    ours = _track_ids(labels)
    assert ours.shape == theirs.shape
    assert agreement(ours, theirs) >= SAME_TRACKS
    # The vectors are written as sleap-nn's `--save_embeddings slp` writes them.
    for frame in labels.labeled_frames:
        for i, instance in enumerate(frame.instances):
            vector = np.asarray(instance.identity_embedding.vector)
            expected = golden["embeddings"][frame.frame_idx, i]
            assert np.abs(vector - expected).max() < VECTOR_TOLERANCE


def test_the_slot_layout_gives_the_same_vectors():
    # The TensorRT profile's graph (fixed slots, float inside), run eagerly on the CPU.
    require(*PAIR, EMBEDDING, VIDEO)
    with FileSource(VIDEO) as source:
        images = [frame.image for frame in itertools.islice(source, BATCH)]
    frames = torch.from_numpy(np.stack(images))
    settings = InferenceSettings(max_instances=2)
    listed = load_inference_model([*PAIR, EMBEDDING], settings)
    slotted = load_inference_model([*PAIR, EMBEDDING], settings).set_profile("tensorrt")
    poses = []
    for model in (listed, slotted):
        with torch.no_grad():
            outputs = dict(zip(model.output_names, (t.numpy() for t in model(frames)), strict=True))
        poses.append(decode(model.info, outputs, BATCH))
    assert slotted.output_names[-1] == "embeddings"
    for ours, theirs in zip(*poses, strict=True):
        assert ours.embeddings is not None and theirs.embeddings is not None
        np.testing.assert_array_equal(ours.embeddings, theirs.embeddings)
