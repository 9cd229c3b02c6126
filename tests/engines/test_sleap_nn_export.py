"""Tests for SleapNNExportRunner on small graphs shaped like `sleap-nn export` output.

Each fake export directory holds an `export_metadata.json` with sleap-nn's fields, a
training config copied from a fixture model, and a `model.onnx` exported from a tiny
torch module with sleap-nn's input ("image", uint8 NCHW) and output names.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import av
import numpy as np
import pytest
import torch
import yaml

from sleap_live.engines.errors import ModelConfigError, RuntimeUnavailableError
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.sleap_nn_export import SleapNNExportRunner

DATA = Path(__file__).parents[1] / "data"
CONFIG = DATA / "models" / "single_instance" / "training_config.yaml"
NODES = ["nose", "head", "body", "tail_base", "tail_tip"]

# Building the fake exports uses torch's deprecated TorchScript-based ONNX exporter.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class BrightestPixel(torch.nn.Module):
    """sleap-nn's single-instance wrapper with the frame as every confidence map."""

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = image.float() / 255
        batch, _, height, width = x.shape
        flat = x[:, :1].reshape(batch, 1, height * width).expand(batch, len(NODES), -1)
        values, index = flat.max(dim=-1)
        peaks = torch.stack([index % width, torch.div(index, width, rounding_mode="floor")], -1)
        peaks = peaks.float().masked_fill((values < 0.2)[..., None], float("nan"))
        return peaks, values.masked_fill(values < 0.2, 0.0)


class Constant(torch.nn.Module):
    """Returns fixed per-frame outputs for every frame of the batch."""

    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.names = list(outputs)
        for name, value in outputs.items():
            self.register_buffer(name, torch.from_numpy(np.asarray(value)))

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch = image.shape[0]
        return tuple(
            getattr(self, name).unsqueeze(0).expand(batch, *getattr(self, name).shape)
            for name in self.names
        )


def write_export(
    folder: Path,
    model_type: str,
    module: torch.nn.Module,
    output_names: list[str],
    *,
    metadata: dict | None = None,
    size: tuple[int, int] = (176, 208),
    static: bool = False,
    sizematch: bool = True,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    axes = {0: "batch"} if static else {0: "batch", 2: "height", 3: "width"}
    torch.onnx.export(
        module,
        (torch.zeros((1, 1, *size), dtype=torch.uint8),),
        str(folder / "model.onnx"),
        dynamo=False,
        opset_version=17,
        input_names=["image"],
        output_names=output_names,
        dynamic_axes={"image": axes},
    )
    config = yaml.safe_load(CONFIG.read_text())
    if not sizematch:
        config["data_config"]["preprocessing"].update(max_height=None, max_width=None)
    config_name = (
        "training_config_centroid.yaml" if "topdown" in model_type else "training_config.yaml"
    )
    (folder / config_name).write_text(yaml.safe_dump(config))
    document = {
        "model_type": model_type,
        "node_names": NODES,
        "edge_inds": [],
        "input_channels": 1,
        "input_scale": 1.0,
        "output_stride": 2,
        "peak_threshold": 0.2,
        "max_instances": 20,
        "export_format": "onnx",
        **(metadata or {}),
    }
    (folder / "export_metadata.json").write_text(json.dumps(document))
    return folder


def dot_frames(shape: tuple[int, int, int, int], dots: list[tuple[int, int]]) -> np.ndarray:
    frames = np.full(shape, 10, np.uint8)
    for index, (x, y) in enumerate(dots):
        frames[index, y, x] = 255
    return frames


@pytest.fixture(scope="module")
def single_export(tmp_path_factory):
    folder = tmp_path_factory.mktemp("snn") / "single"
    return write_export(folder, "single_instance", BrightestPixel(), ["peaks", "peak_vals"])


def test_single_instance_export_finds_the_dot_in_frame_pixels(single_export):
    runner = SleapNNExportRunner(single_export, intra_op_threads=1)
    assert runner.info.model_type == "single_instance"
    assert runner.info.skeleton.node_names == tuple(NODES)
    assert runner.info.skeleton.edges == ((0, 1), (1, 2), (2, 3), (3, 4))
    assert runner.device == "cpu"
    frames = dot_frames((2, 168, 200, 1), [(17, 40), (199, 167)])
    image, scale = runner.prepare(frames)
    assert image.shape == (2, 1, 176, 208) and scale == 1.0
    poses = runner.run(frames)
    np.testing.assert_array_equal(poses[0].points, np.tile([17.0, 40.0], (1, 5, 1)))
    np.testing.assert_array_equal(poses[1].points, np.tile([199.0, 167.0], (1, 5, 1)))
    np.testing.assert_allclose(poses[0].instance_scores, [5.0])
    rgb = runner.run(np.repeat(frames, 3, axis=3))
    np.testing.assert_array_equal(rgb[0].points, poses[0].points)


def test_frames_are_size_matched_as_the_training_config_says(single_export):
    runner = SleapNNExportRunner(single_export)
    frames = dot_frames((1, 84, 100, 1), [(30, 20)])
    image, scale = runner.prepare(frames)
    assert image.shape == (1, 1, 176, 208) and scale == 2.0
    (pose,) = runner.run(frames)
    np.testing.assert_allclose(pose.points[0], np.tile([30.0, 20.0], (5, 1)), atol=0.5)


def test_a_fixed_size_graph_gets_larger_frames_letterboxed(tmp_path):
    folder = write_export(
        tmp_path / "static",
        "single_instance",
        BrightestPixel(),
        ["peaks", "peak_vals"],
        static=True,
        sizematch=False,
    )
    runner = SleapNNExportRunner(folder)
    frames = np.zeros((1, 352, 416, 1), np.uint8)
    frames[0, 100:104, 200:204] = 255
    image, scale = runner.prepare(frames)
    assert image.shape == (1, 1, 176, 208) and scale == 0.5
    (pose,) = runner.run(frames)
    # The 4x4 block becomes a 2x2 block at (100, 50); coordinates are index / scale.
    np.testing.assert_array_equal(pose.points[0, 0], [200.0, 100.0])
    small = runner.prepare(np.zeros((1, 100, 120, 1), np.uint8))
    assert small[0].shape == (1, 1, 176, 208) and small[1] == 1.0


def test_centroid_and_topdown_outputs_become_instances(tmp_path):
    centroids = np.array([[10, 20], [0, 0], [30, 40]], np.float32)
    values = np.array([0.9, 0.0, 0.8], np.float32)
    valid = np.array([True, False, True])
    folder = write_export(
        tmp_path / "centroid",
        "centroid",
        Constant({"centroids": centroids, "centroid_vals": values, "instance_valid": valid}),
        ["centroids", "centroid_vals", "instance_valid"],
    )
    runner = SleapNNExportRunner(folder)
    assert runner.info.skeleton.node_names == ("centroid",)
    pose, other = runner.run(np.zeros((2, 168, 200, 1), np.uint8))
    np.testing.assert_array_equal(pose.points[:, 0], centroids[[0, 2]])
    np.testing.assert_array_equal(pose.instance_scores, values[[0, 2]])
    assert other.n_instances == 2

    peaks = np.full((3, 5, 2), np.nan, np.float32)
    peaks[0] = np.arange(10, dtype=np.float32).reshape(5, 2)
    peaks[0, 4] = np.nan
    peak_vals = np.where(np.isnan(peaks[..., 0]), 0, 0.7).astype(np.float32)
    outputs = {
        "centroids": centroids,
        "centroid_vals": values,
        "peaks": peaks,
        "peak_vals": peak_vals,
        "instance_valid": valid,
    }
    folder = write_export(tmp_path / "topdown", "topdown", Constant(outputs), list(outputs))
    (pose,) = SleapNNExportRunner(folder).run(np.zeros((1, 168, 200, 1), np.uint8))
    # Slot 2 is valid but found no node: dropped, as sleap-live's own top-down drops it.
    assert pose.n_instances == 1
    np.testing.assert_array_equal(pose.points[0], peaks[0])
    np.testing.assert_array_equal(np.isnan(pose.point_scores[0]), [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(pose.instance_scores, values[:1])


def test_multi_class_topdown_assigns_identities(tmp_path):
    peaks = np.tile(np.arange(2, dtype=np.float32)[:, None, None], (1, 5, 2))
    outputs = {
        "centroids": np.zeros((2, 2), np.float32),
        "centroid_vals": np.array([0.9, 0.8], np.float32),
        "peaks": peaks,
        "peak_vals": np.full((2, 5), 0.5, np.float32),
        "class_logits": np.array([[0.0, 3.0], [2.0, 0.0]], np.float32),
        "instance_valid": np.array([True, True]),
    }
    folder = write_export(
        tmp_path / "mc",
        "multi_class_topdown_combined",
        Constant(outputs),
        list(outputs),
        metadata={"class_names": ["alice", "bob"], "n_classes": 2},
    )
    runner = SleapNNExportRunner(folder)
    assert runner.info.model_type == "multi_class_topdown"
    assert runner.info.class_names == ("alice", "bob")
    (pose,) = runner.run(np.zeros((1, 168, 200, 1), np.uint8))
    np.testing.assert_array_equal(pose.identities, [1, 0])
    np.testing.assert_array_equal(pose.points[:, 0, 0], [0, 1])


def bottomup_peaks(k: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    peaks = np.zeros((5, k, 2), np.float32)
    for node in range(5):
        for slot in range(k):
            peaks[node, slot] = (10 * node, 50 * slot)
    return peaks, np.full((5, k), 0.8, np.float32), np.ones((5, k), bool)


def test_bottomup_outputs_are_grouped_with_pafs(tmp_path):
    peaks, peak_vals, mask = bottomup_peaks()
    same_animal = np.array([[0.9, 0.1], [0.1, 0.9]], np.float32).reshape(4)
    outputs = {
        "peaks": peaks,
        "peak_vals": peak_vals,
        "peak_mask": mask,
        "line_scores": np.tile(same_animal, (4, 1)),
        "candidate_mask": np.ones((4, 4), bool),
    }
    folder = write_export(
        tmp_path / "bu",
        "bottomup",
        Constant(outputs),
        list(outputs),
        metadata={"edge_inds": [[0, 1], [1, 2], [2, 3], [3, 4]], "input_scale": 0.5},
    )
    runner = SleapNNExportRunner(folder)
    assert runner.info.postprocess["grouping"] == "paf"
    (pose,) = runner.run(np.zeros((1, 168, 200, 1), np.uint8))
    assert pose.n_instances == 2
    np.testing.assert_allclose(pose.points, peaks.transpose(1, 0, 2) * 2)
    np.testing.assert_allclose(pose.instance_scores, [3.6, 3.6], rtol=1e-6)


def test_multi_class_bottomup_outputs_are_grouped_by_class(tmp_path):
    peaks, peak_vals, mask = bottomup_peaks()
    class_probs = np.tile(np.array([[0.1, 0.9], [0.8, 0.2]], np.float32), (5, 1, 1))
    outputs = {
        "peaks": peaks,
        "peak_vals": peak_vals,
        "peak_mask": mask,
        "class_probs": class_probs,
    }
    folder = write_export(
        tmp_path / "mcbu",
        "multi_class_bottomup",
        Constant(outputs),
        list(outputs),
        metadata={"class_names": ["alice", "bob"], "input_scale": 0.5},
    )
    (pose,) = SleapNNExportRunner(folder).run(np.zeros((1, 168, 200, 1), np.uint8))
    np.testing.assert_array_equal(pose.identities, [0, 1])
    # sleap-nn's graph already unscaled these peaks: they are not divided again.
    np.testing.assert_allclose(pose.points[0], peaks[:, 1])
    np.testing.assert_allclose(pose.points[1], peaks[:, 0])


def test_unusable_exports_are_refused(tmp_path, single_export):
    crops = shutil.copytree(single_export, tmp_path / "crops")
    document = json.loads((crops / "export_metadata.json").read_text())
    (crops / "export_metadata.json").write_text(
        json.dumps({**document, "model_type": "centered_instance"})
    )
    with pytest.raises(ModelConfigError, match="'centered_instance' cannot run on whole frames"):
        SleapNNExportRunner(crops)

    no_config = shutil.copytree(single_export, tmp_path / "no_config")
    (no_config / "training_config.yaml").unlink()
    with pytest.raises(ModelConfigError, match=r"training_config\.yaml: not found"):
        SleapNNExportRunner(no_config)

    trt_only = shutil.copytree(single_export, tmp_path / "trt")
    (trt_only / "model.onnx").rename(trt_only / "model.trt")
    with pytest.raises(RuntimeUnavailableError, match=r"no model\.onnx"):
        SleapNNExportRunner(trt_only)

    wrong = shutil.copytree(single_export, tmp_path / "wrong")
    document = json.loads((wrong / "export_metadata.json").read_text())
    (wrong / "export_metadata.json").write_text(json.dumps({**document, "model_type": "topdown"}))
    shutil.copy(wrong / "training_config.yaml", wrong / "training_config_centroid.yaml")
    with pytest.raises(ModelConfigError, match=r"a topdown export should output \["):
        SleapNNExportRunner(wrong)


def test_load_runner_routes_export_directories(single_export):
    runner = load_runner(single_export, device="cpu", threads=1)
    assert isinstance(runner, SleapNNExportRunner)
    with pytest.raises(
        ValueError, match="is a sleap-nn export directory; it runs with engine 'onnx'"
    ):
        load_runner(single_export, engine="torch")
    runner.close()
    runner.close()


def video_frames(name: str, count: int) -> np.ndarray:
    with av.open(str(DATA / "videos" / name)) as container:
        frames = [
            frame.to_ndarray(format="gray")[..., None]
            for _, frame in zip(range(count), container.decode(video=0), strict=False)
        ]
    return np.stack(frames)


def matched_errors(poses, truth: np.ndarray) -> np.ndarray:
    """Pixel error of every predicted point against its nearest true instance."""
    errors = []
    for pose, animals in zip(poses, truth, strict=False):
        for points in pose.points:
            distances = np.linalg.norm(animals - points[None], axis=-1)
            errors.append(distances[np.nanargmin(np.nanmean(distances, axis=1))])
    return np.concatenate(errors)


@pytest.mark.parametrize(
    ("export", "models", "video", "truth", "animals"),
    [
        ("single_instance", ["single_instance"], "single.mkv", "single.npz", 1),
        ("topdown", ["centroid", "centered_instance"], "multi_gray.mkv", "multi_gray.npz", 2),
    ],
)
def test_real_sleap_nn_exports_track_the_animals(export, models, video, truth, animals):
    folder = DATA / "exports" / export
    if not (folder / "export_metadata.json").is_file():
        pytest.skip(f"fixture {folder} has not been generated (scripts/make_fixtures.py)")
    frames = video_frames(video, 8)
    runner = load_runner(folder, device="cpu", threads=1)
    assert isinstance(runner, SleapNNExportRunner)
    poses = [pose for start in (0, 4) for pose in runner.run(frames[start : start + 4])]
    assert [pose.n_instances for pose in poses] == [animals] * 8
    with np.load(DATA / "ground_truth" / truth) as ground_truth:
        errors = matched_errors(poses, ground_truth["points"][:8])
    assert np.median(errors) < 4.0
    ours = load_runner([DATA / "models" / name for name in models], engine="torch", device="cpu")
    ours_errors = matched_errors(ours.run(frames), np.stack([p.points for p in poses]))
    assert np.median(ours_errors) < 4.0
