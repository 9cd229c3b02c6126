"""Tests for the torch and ONNX runners and their frame checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from sleap_live.engines.errors import (
    EngineError,
    InputMismatchError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.export.frames import sample_frames
from sleap_live.engines.export.torchscript import load_torchscript
from sleap_live.engines.graph.preprocess import ensure_channels
from sleap_live.engines.host.frames import check_frames, convert_channels
from sleap_live.engines.host.outputs import output_axes
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.onnx import (
    BoundIO,
    OnnxRunner,
    create_session,
    providers_for,
)
from sleap_live.engines.runners.torch import TorchRunner
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

DATA = Path(__file__).resolve().parents[1] / "data"

HAS_CUDA_EP = "CUDAExecutionProvider" in ort.get_available_providers()


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def toy(toy_models):
    return toy_models.ToyInstanceModel()


@pytest.fixture(scope="module")
def toy_onnx(toy, tmp_path_factory):
    return export_graph(toy, tmp_path_factory.mktemp("onnx"), verify=False)


def assert_same_poses(got, want, atol=1e-3):
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert mine.n_instances == theirs.n_instances
        np.testing.assert_allclose(mine.points, theirs.points, atol=atol)
        np.testing.assert_allclose(mine.point_scores, theirs.point_scores, atol=atol)
        np.testing.assert_allclose(mine.instance_scores, theirs.instance_scores, atol=atol)
        np.testing.assert_array_equal(mine.identities, theirs.identities)


def test_torch_runner_splits_instance_lists_into_frames(toy, toy_models):
    frames = sample_frames(3, 120, 150, 3, seed=2)
    runner = TorchRunner(toy)
    assert isinstance(runner, Runner)
    assert runner.device == "cpu" and runner.info == toy.info
    poses = runner.run(frames)
    frame_of, points, point_scores, instance_scores = toy_models.eager_outputs(toy, frames)
    assert len(poses) == 3
    assert sum(pose.n_instances for pose in poses) == len(frame_of) > 0
    for index, pose in enumerate(poses):
        mine = frame_of == index
        np.testing.assert_array_equal(pose.points, points[mine])
        np.testing.assert_array_equal(pose.point_scores, point_scores[mine])
        np.testing.assert_array_equal(pose.instance_scores, instance_scores[mine])
        assert pose.points.dtype == np.float32
        assert (pose.identities == -1).all()


@pytest.mark.parametrize("shape", [(2, 96, 128, 3), (1, 131, 177, 1)])
def test_onnx_runner_matches_torch_runner(toy, toy_onnx, shape):
    frames = sample_frames(*shape, seed=4)
    onnx_runner = OnnxRunner(toy_onnx)
    assert isinstance(onnx_runner, Runner)
    assert onnx_runner.device == "cpu" and onnx_runner.info == toy.info
    poses = onnx_runner.run(frames)
    assert sum(pose.n_instances for pose in poses) > 0
    assert_same_poses(poses, TorchRunner(toy).run(frames))


def test_runners_take_torch_tensors(toy, toy_onnx):
    frames = sample_frames(2, 90, 100, 3, seed=6)
    expected = TorchRunner(toy).run(frames)
    assert_same_poses(TorchRunner(toy).run(torch.from_numpy(frames)), expected, atol=0)
    assert_same_poses(OnnxRunner(toy_onnx).run(torch.from_numpy(frames)), expected)


def test_onnx_runner_runs_in_memory_exports(toy):
    frames = sample_frames(1, 80, 96, 3, seed=8)
    runner = OnnxRunner(export_graph(toy))
    assert runner.metadata.input_channels == (1, 3)
    assert_same_poses(runner.run(frames), TorchRunner(toy).run(frames))


def test_onnx_session_is_tuned_for_one_caller(toy_onnx):
    session = create_session(toy_onnx, intra_op_threads=1)
    options = session.get_session_options()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.intra_op_num_threads == 1
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_frames_the_graph_cannot_convert_are_converted_on_the_host(toy_models, tmp_path):
    model = toy_models.BranchingChannelsModel(input_channels=1)
    path = export_graph(model, tmp_path, verify_frames=sample_frames(3, 64, 80, 1))
    frames = sample_frames(2, 100, 120, 3, seed=3)
    gray = convert_channels(frames, 1)
    expected = TorchRunner(model).run(gray)
    assert_same_poses(OnnxRunner(path).run(frames), expected)
    traced = load_torchscript(
        export_graph(model, tmp_path / "m.pt", format="torchscript", verify=False)
    )
    runner = TorchRunner(traced, input_channels=traced.metadata.input_channels)
    assert_same_poses(runner.run(frames), expected, atol=0)
    assert_same_poses(runner.run(torch.from_numpy(frames)), expected, atol=0)


def test_convert_channels_matches_sleap_nns_uint8_conversion():
    rgb = np.random.default_rng(0).integers(0, 256, (2, 33, 47, 3), dtype=np.uint8)
    nchw = torch.from_numpy(rgb).permute(0, 3, 1, 2)
    want_gray = ensure_channels(nchw, ensure_rgb=False, ensure_grayscale=True)
    np.testing.assert_array_equal(convert_channels(rgb, 1), want_gray.permute(0, 2, 3, 1).numpy())
    assert convert_channels(np.full((1, 2, 2, 3), 255, np.uint8), 1).max() == 254
    gray = rgb[..., :1]
    np.testing.assert_array_equal(convert_channels(gray, 3), np.repeat(gray, 3, axis=3))
    assert convert_channels(rgb, 3) is rgb


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        (np.zeros((1, 8, 8, 3), np.float32), "frames must be uint8, got float32"),
        (np.zeros((8, 8, 3), np.uint8), r"got shape \(8, 8, 3\); add a batch axis"),
        (np.zeros((1, 8, 8, 2), np.uint8), "1 or 3 channels"),
        (np.zeros((0, 8, 8, 3), np.uint8), "batch is empty"),
        ([[1, 2]], "numpy array or torch tensor, got list"),
        (torch.zeros((1, 8, 8, 3)), "frames must be uint8, got torch.float32"),
    ],
)
def test_bad_frames_are_rejected_by_every_runner(toy, toy_onnx, frames, message):
    with pytest.raises(InputMismatchError, match=message):
        check_frames(frames)
    for runner in (TorchRunner(toy), OnnxRunner(toy_onnx)):
        with pytest.raises(InputMismatchError, match=message):
            runner.run(frames)


def test_closed_runners_refuse_to_run(toy, toy_onnx):
    frames = sample_frames(1, 32, 32, 3)
    for runner in (TorchRunner(toy), OnnxRunner(toy_onnx)):
        runner.close()
        runner.close()
        with pytest.raises(EngineError, match="is closed"):
            runner.run(frames)


@pytest.mark.skipif(HAS_CUDA_EP, reason="onnxruntime-gpu is installed")
def test_cuda_without_onnxruntime_gpu_names_what_to_install(toy_onnx):
    with pytest.raises(RuntimeUnavailableError, match=r'pip install "sleap-live\[gpu\]"'):
        OnnxRunner(toy_onnx, providers_for("cuda"))


def test_unknown_providers_and_devices_are_refused(toy_onnx):
    with pytest.raises(RuntimeUnavailableError, match=r"available: .*CPUExecutionProvider"):
        OnnxRunner(toy_onnx, ["NoSuchExecutionProvider"])
    with pytest.raises(RuntimeUnavailableError, match="unsupported device 'tpu'"):
        providers_for("tpu")
    assert providers_for("cuda:1") == [("CUDAExecutionProvider", {"device_id": 1, "use_tf32": "0"})]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_torch_runner_on_cuda_without_a_gpu_fails_clearly(toy):
    with pytest.raises(RuntimeUnavailableError, match="sees no CUDA GPU"):
        TorchRunner(toy, "cuda")


def test_onnx_runner_refuses_foreign_models(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no such ONNX file"):
        OnnxRunner(tmp_path / "missing.onnx")
    plain = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["x"], ["y"])],
            "plain",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [1])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [1])],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    with pytest.raises(ModelConfigError, match="not exported by sleap-live"):
        OnnxRunner(plain.SerializeToString())
    (tmp_path / "junk.onnx").write_bytes(b"junk")
    with pytest.raises(ModelConfigError, match="onnxruntime cannot load it"):
        OnnxRunner(tmp_path / "junk.onnx")


def test_io_binding_matches_session_run_and_never_reuses_results(toy_onnx):
    # The binding the CUDA path uses, exercised on the CPU.
    session = create_session(toy_onnx, intra_op_threads=1)
    bound = BoundIO(session, "cpu")
    frames = sample_frames(2, 96, 128, 3, seed=4)
    first = bound.run(frames)
    names = [output.name for output in session.get_outputs()]
    expected = dict(zip(names, session.run(None, {"frames": frames}), strict=True))
    for name, value in expected.items():
        np.testing.assert_array_equal(first[name], value)
    again = bound.run(torch.from_numpy(sample_frames(2, 96, 128, 3, seed=5)))
    assert first["points"].shape != again["points"].shape or not np.array_equal(
        first["points"], again["points"], equal_nan=True
    )
    for name, value in expected.items():
        np.testing.assert_array_equal(first[name], value)


@pytest.fixture(scope="module")
def bottomup_onnx(warm_export_cache):
    # This project's own export of the fixture bottom-up model, as `load_runner` makes it
    # (the suite's warm export cache holds it).
    require(DATA / "models" / "bottomup" / "best.ckpt")
    return goldens.warm_export("bottomup", warm_export_cache)


def test_io_binding_preallocates_the_outputs_of_a_bottom_up_export(bottomup_onnx):
    session = create_session(bottomup_onnx, intra_op_threads=1)
    dims = {output.name: output.shape for output in session.get_outputs()}
    # The graph sizes the peak slots in `peaks` and `line_scores` only.
    assert dims["peaks"][1:] == [5, 20, 2] and not isinstance(dims["peak_scores"][1], int)
    bound = BoundIO(session, "cpu", output_axes=output_axes("bottomup"))
    with FileSource(str(DATA / "videos" / "multi_gray.mkv")) as source:
        frames = np.stack([frame.image for _, frame in zip(range(5), source, strict=False)])
    results, buffers = [], []
    for batch in (frames[:2], frames[2:4], frames[:3]):
        results.append(bound.run(batch))
        buffers.append(dict(bound._buffers[len(batch)]))
        expected = dict(zip(dims, session.run(None, {"frames": batch}), strict=True))
        for name, value in expected.items():
            np.testing.assert_array_equal(results[-1][name], value)
            # The graph wrote into the preallocated buffer.
            np.testing.assert_array_equal(buffers[-1][name].numpy(), value)
    assert sorted(buffers[0]) == sorted(dims)
    assert buffers[0]["peak_scores"].shape() == [2, 5, 20]
    # The same buffers serve every batch of a size; each size gets its own.
    assert all(buffers[1][name] is buffers[0][name] for name in dims)
    assert sorted(bound._buffers) == [2, 3] and buffers[2]["peaks"].shape() == [3, 5, 20, 2]
    # Results handed out earlier are copies, not the reused buffers.
    assert not np.array_equal(results[0]["peak_scores"], results[1]["peak_scores"], equal_nan=True)
    np.testing.assert_array_equal(
        results[0]["peak_scores"], session.run(["peak_scores"], {"frames": frames[:2]})[0]
    )


def test_io_binding_leaves_instance_lists_to_onnx_runtime(toy, toy_onnx):
    session = create_session(toy_onnx, intra_op_threads=1)
    bound = BoundIO(session, "cpu", output_axes=output_axes(toy.info.model_type))
    bound.run(sample_frames(2, 96, 128, 3, seed=4))
    assert bound._buffers[2] == {}


@pytest.mark.gpu
@pytest.mark.skipif(
    not (HAS_CUDA_EP and torch.cuda.is_available()), reason="needs onnxruntime-gpu and a GPU"
)
def test_cuda_runner_binds_device_frames_and_matches_cpu(toy, toy_onnx):
    frames = sample_frames(2, 96, 128, 3, seed=4)
    runner = OnnxRunner(toy_onnx, providers_for("cuda"))
    assert runner.device == "cuda:0"
    expected = OnnxRunner(toy_onnx).run(frames)
    assert_same_poses(runner.run(torch.from_numpy(frames).cuda()), expected)
    assert_same_poses(runner.run(frames), expected)
    assert_same_poses(TorchRunner(toy, "cuda").run(torch.from_numpy(frames).cuda()), expected)
