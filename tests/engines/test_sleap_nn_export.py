"""SleapNNExportRunner on real `sleap-nn export` directories of every model type.

tests/data/exports/<type> are `sleap-nn export` outputs of the fixture models, and
tests/data/goldens/export_<type>.npz are `sleap-nn predict --runtime onnx` on them
over the test videos (zero-padded to the export size, since the exported graphs
only run at stride multiples); see tests/data/README.md. The poses are compared by
the comparison rule (`sleap_live.engines.host.agreement`) under the float32 bound of
the fixture model the export was made from: ONNX Runtime on another CPU sums in
another order, and may decide a near-tie the other way.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from sleap_live.engines.errors import (
    EngineError,
    InputMismatchError,
    ModelConfigError,
    RuntimeUnavailableError,
)
from sleap_live.engines.host.frames import convert_channels
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import BoundIO, create_session
from sleap_live.engines.runners.sleap_nn_export import OUTPUT_AXES, SleapNNExportRunner
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

DATA = Path(__file__).resolve().parents[1] / "data"
EXPORTS = DATA / "exports"
# export -> (test video, sleap-live model type, class names)
CASES = {
    "single_instance": ("single.mkv", "single_instance", ()),
    "centroid": ("multi_gray.mkv", "centroid", ()),
    "topdown": ("multi_gray.mkv", "topdown", ()),
    "bottomup": ("multi_gray.mkv", "bottomup", ()),
    "multi_class_topdown": ("multi_rgb.mp4", "multi_class_topdown", ("red", "blue")),
    "multi_class_bottomup": ("multi_rgb.mp4", "multi_class_bottomup", ("red", "blue")),
}
# sleap-nn predict's default batch size, which the goldens were made with.
BATCH = 4
# The goldens hold 200 frames; the runner is held to their first 26 batches: every
# model type, bottom-up's frames of two to six animals and the multi-class top-down
# video's frames with one (96 and 97) among them. The other frames run the same code
# on more of the same video (most of a minute of CPU over the six exports).
COMPARED_FRAMES = 26 * BATCH


@cache
def video_frames(name: str) -> np.ndarray:
    with FileSource(str(DATA / "videos" / name)) as source:
        return np.stack([frame.image for frame in source])


def export_dir(name: str) -> Path:
    folder = EXPORTS / name
    require(folder / "export_metadata.json", folder / "model.onnx")
    return folder


def as_dicts(poses) -> list[dict[str, np.ndarray]]:
    return [
        {
            "points": pose.points,
            "point_scores": pose.point_scores,
            "instance_scores": pose.instance_scores,
            "identities": pose.identities,
        }
        for pose in poses
    ]


def run_all(runner: SleapNNExportRunner, frames: np.ndarray, batch: int = BATCH) -> list:
    return [
        pose
        for start in range(0, len(frames), batch)
        for pose in runner.run(frames[start : start + batch])
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_real_exports_give_sleap_nn_predict_poses(name):
    video, model_type, class_names = CASES[name]
    golden_path = DATA / "goldens" / f"export_{name}.npz"
    require(golden_path)
    runner = SleapNNExportRunner(export_dir(name), intra_op_threads=1)
    assert runner.info.model_type == model_type
    assert runner.info.class_names == class_names
    ours = as_dicts(run_all(runner, video_frames(video)[:COMPARED_FRAMES]))
    golden = dict(np.load(golden_path))
    assert runner.info.skeleton.node_names == tuple(golden["node_names"])
    models = tuple(goldens.case_paths(name)[0])
    bound = goldens.bound_of(models)
    agreement = goldens.agreement(ours, golden, bound, class_names, range(len(ours)))
    print(name, agreement.summary())
    assert len(golden["frame_indices"]) == 200
    assert agreement.points > 0
    assert agreement.agrees, agreement.summary()


def test_frames_are_padded_to_the_stride_and_moved_to_nchw():
    runner = SleapNNExportRunner(export_dir("single_instance"), intra_op_threads=1)
    frames = video_frames("single.mkv")[:2]
    image = runner.prepare(frames)
    assert image.shape == (2, 1, 176, 208) and image.dtype == np.uint8
    np.testing.assert_array_equal(image[:, 0, :168, :200], frames[..., 0])
    assert not image[:, :, 168:].any() and not image[:, :, :, 200:].any()
    # Frames of a stride multiple go in as they are, and padding moves no point.
    padded = np.ascontiguousarray(image.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(runner.prepare(padded), image)
    for mine, theirs in zip(runner.run(frames), runner.run(padded), strict=True):
        np.testing.assert_array_equal(mine.points, theirs.points)
        np.testing.assert_array_equal(mine.instance_scores, theirs.instance_scores)


def assert_same_points(got, want) -> None:
    assert len(got) == len(want) and sum(pose.n_instances for pose in want) > 0
    for mine, theirs in zip(got, want, strict=True):
        np.testing.assert_array_equal(mine.points, theirs.points)


def test_channels_and_torch_tensors_are_brought_to_the_graph():
    runner = SleapNNExportRunner(export_dir("topdown"), intra_op_threads=1)
    gray = video_frames("multi_gray.mkv")[:2]
    rgb = np.repeat(gray, 3, axis=3)
    assert_same_points(runner.run(rgb), runner.run(convert_channels(rgb, 1)))
    assert_same_points(runner.run(torch.from_numpy(gray)), runner.run(gray))
    rgb_runner = SleapNNExportRunner(export_dir("multi_class_topdown"), intra_op_threads=1)
    np.testing.assert_array_equal(
        rgb_runner.prepare(gray)[:, :, :168, :200], rgb.transpose(0, 3, 1, 2)
    )


def test_a_fixed_size_graph_takes_frames_up_to_its_size(tmp_path):
    folder = shutil.copytree(export_dir("single_instance"), tmp_path / "static")
    model = onnx.load(str(folder / "model.onnx"))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value, dims[3].dim_value = 176, 208
    onnx.save(model, str(folder / "model.onnx"))
    runner = SleapNNExportRunner(folder, intra_op_threads=1)
    frames = video_frames("single.mkv")[:2]
    assert runner.prepare(frames[:, :160, :192]).shape == (2, 1, 176, 208)
    dynamic = SleapNNExportRunner(export_dir("single_instance"), intra_op_threads=1)
    for mine, theirs in zip(runner.run(frames), dynamic.run(frames), strict=True):
        np.testing.assert_array_equal(mine.points, theirs.points)
    with pytest.raises(InputMismatchError, match=r"frames of 180x200 do not fit .* 176x208"):
        runner.run(np.zeros((1, 180, 200, 1), np.uint8))


@pytest.mark.parametrize("name", ["bottomup", "multi_class_bottomup"])
def test_bottom_up_peaks_are_divided_by_the_input_scale_as_sleap_nn_does(name, tmp_path):
    # The bottom-up graph leaves its peaks in scaled-input pixels; the multi-class
    # graph unscales them itself and sleap-nn's adapter divides them once more.
    folder = shutil.copytree(export_dir(name), tmp_path / name)
    metadata_path = folder / "export_metadata.json"
    metadata = json.loads(metadata_path.read_text())
    assert metadata["input_scale"] == 1.0
    frames = video_frames(CASES[name][0])[:2]
    unscaled = SleapNNExportRunner(folder, intra_op_threads=1).run(frames)
    metadata_path.write_text(json.dumps({**metadata, "input_scale": 0.5}))
    scaled = SleapNNExportRunner(folder, intra_op_threads=1).run(frames)
    assert sum(pose.n_instances for pose in unscaled) > 0
    for mine, theirs in zip(scaled, unscaled, strict=True):
        np.testing.assert_allclose(mine.points, theirs.points * 2, rtol=1e-6)


def test_bound_io_preallocates_every_output_of_a_sleap_nn_export():
    # sleap-nn's outputs are all fixed-size given the batch; the topdown graph
    # leaves the centroid slots symbolic, and its `peaks` (batch, 20, 5, 2) sizes them.
    folder = export_dir("topdown")
    session = create_session(folder / "model.onnx", intra_op_threads=1)
    bound = BoundIO(session, "cpu", output_axes=OUTPUT_AXES["topdown"])
    image = SleapNNExportRunner(folder).prepare(video_frames("multi_gray.mkv")[:2])
    outputs = bound.run(image)
    buffers = bound._buffers[2]
    assert sorted(buffers) == sorted(OUTPUT_AXES["topdown"])
    assert buffers["centroids"].shape() == [2, 20, 2]
    names = [output.name for output in session.get_outputs()]
    for name, value in zip(names, session.run(None, {"image": image}), strict=True):
        np.testing.assert_array_equal(outputs[name], value)
        np.testing.assert_array_equal(buffers[name].numpy(), value)


def test_unusable_exports_are_refused(tmp_path):
    source = export_dir("single_instance")
    crops = shutil.copytree(source, tmp_path / "crops")
    document = json.loads((crops / "export_metadata.json").read_text())
    (crops / "export_metadata.json").write_text(
        json.dumps({**document, "model_type": "centered_instance"})
    )
    with pytest.raises(ModelConfigError, match="'centered_instance' cannot run on whole frames"):
        SleapNNExportRunner(crops)

    no_config = shutil.copytree(source, tmp_path / "no_config")
    (no_config / "training_config.yaml").unlink()
    with pytest.raises(ModelConfigError, match=r"training_config\.yaml: not found"):
        SleapNNExportRunner(no_config)

    bad_config = shutil.copytree(source, tmp_path / "bad_config")
    (bad_config / "training_config.yaml").write_text("model_config: [unclosed\n")
    with pytest.raises(ModelConfigError, match=r"training_config\.yaml: not valid YAML"):
        SleapNNExportRunner(bad_config)

    trt_only = shutil.copytree(source, tmp_path / "trt")
    (trt_only / "model.onnx").rename(trt_only / "model.trt")
    with pytest.raises(RuntimeUnavailableError, match=r"no model\.onnx"):
        SleapNNExportRunner(trt_only)

    wrong = shutil.copytree(source, tmp_path / "wrong")
    (wrong / "export_metadata.json").write_text(
        json.dumps({**document, "model_type": "topdown", "max_instances": 20})
    )
    shutil.copy(wrong / "training_config.yaml", wrong / "training_config_centroid.yaml")
    with pytest.raises(ModelConfigError, match=r"a topdown export should output \["):
        SleapNNExportRunner(wrong)


def test_load_runner_routes_export_directories():
    folder = export_dir("single_instance")
    runner = load_runner(folder, device="cpu", threads=1)
    assert isinstance(runner, SleapNNExportRunner)
    assert runner.device == "cpu"
    with pytest.raises(
        ValueError, match="is a sleap-nn export directory; it runs with engine 'onnx'"
    ):
        load_runner(folder, engine="torch")
    runner.close()
    runner.close()
    with pytest.raises(EngineError, match="this SleapNNExportRunner is closed"):
        runner.run(video_frames("single.mkv")[:1])
