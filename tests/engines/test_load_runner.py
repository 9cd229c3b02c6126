"""Tests for sleap_live.engines.runners.load.load_runner."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import av
import numpy as np
import pytest

from sleap_live.engines.errors import (
    ExportError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.export import export_model
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.export.frames import sample_frames
from sleap_live.engines.export.torchscript import read_torchscript_metadata
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.runners import devices
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.engines.runners.torch import TorchRunner

DATA = Path(__file__).parents[1] / "data"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def exports(toy_models, tmp_path_factory):
    model = toy_models.ToyInstanceModel()
    folder = tmp_path_factory.mktemp("exports")
    onnx_path = export_graph(model, folder / "toy.onnx", verify=False)
    pt_path = export_graph(model, folder / "toy.pt", format="torchscript", verify=False)
    return model, onnx_path, pt_path


def test_onnx_exports_load_into_an_onnx_runner(exports):
    model, onnx_path, _ = exports
    for paths in (onnx_path, str(onnx_path), [onnx_path]):
        runner = load_runner(paths, device="cpu")
        assert isinstance(runner, OnnxRunner) and runner.info == model.info
    runner = load_runner(onnx_path, engine="onnx", device="auto", threads=1)
    assert runner.device == "cpu"
    frames = sample_frames(2, 90, 120, 3, seed=1)
    expected = TorchRunner(model).run(frames)
    for got, want in zip(runner.run(frames), expected, strict=True):
        np.testing.assert_allclose(got.points, want.points, atol=1e-3)


def test_torchscript_exports_load_into_a_torch_runner(exports):
    model, _, pt_path = exports
    runner = load_runner(pt_path, engine="torch", device="cpu")
    assert isinstance(runner, TorchRunner) and runner.info == model.info
    frames = sample_frames(1, 70, 90, 1, seed=2)
    (got,) = runner.run(frames)
    (want,) = TorchRunner(model).run(frames)
    np.testing.assert_array_equal(got.points, want.points)


def test_an_export_cannot_run_on_the_other_engine(exports):
    _, onnx_path, pt_path = exports
    with pytest.raises(ValueError, match="is an ONNX export; it runs with engine 'onnx'"):
        load_runner(onnx_path, engine="torch")
    with pytest.raises(ValueError, match="is a TorchScript export; it runs with engine 'torch'"):
        load_runner(pt_path, engine="onnx")


def test_gpu_options_reach_the_runner_and_are_refused_where_they_cannot_apply(exports):
    _, onnx_path, pt_path = exports
    with pytest.raises(ValueError, match="stream and cuda_graphs need a CUDA execution provider"):
        load_runner(onnx_path, device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match="execution_provider is an ONNX Runtime option"):
        load_runner(pt_path, device="cpu", execution_provider="tensorrt")
    with pytest.raises(ValueError, match="ONNX Runtime runs fp32 or int8"):
        load_runner(onnx_path, precision="fp16")  # a TensorRT option
    with pytest.raises(RuntimeUnavailableError, match="TensorRT execution provider needs a CUDA"):
        load_runner(onnx_path, device="cpu", execution_provider="tensorrt")


def test_bad_arguments_are_refused(exports, tmp_path):
    _, onnx_path, _ = exports
    with pytest.raises(ValueError, match="unknown engine 'tflite'"):
        load_runner(onnx_path, engine="tflite")
    with pytest.raises(TypeError, match=r"unknown options \['num_threads'\]"):
        load_runner(onnx_path, num_threads=1)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        load_runner(onnx_path, device="tpu")
    with pytest.raises(ValueError, match="got 4 paths"):
        load_runner([tmp_path, tmp_path, tmp_path, tmp_path])
    with pytest.raises(ValueError, match="got 0 paths"):
        load_runner([])
    with pytest.raises(ModelNotFoundError, match="missing: no such model file or directory"):
        load_runner(tmp_path / "missing")
    (tmp_path / "model.h5").write_bytes(b"")
    with pytest.raises(ValueError, match=r"model\.h5: unknown model file type"):
        load_runner(tmp_path / "model.h5")
    with pytest.raises(
        ValueError,
        match=r"toy\.onnx: expected a model directory \(training_config\.yaml and best\.ckpt\) "
        "alongside",
    ):
        load_runner([tmp_path, onnx_path])


@pytest.fixture(scope="module")
def video_frames():
    with av.open(str(DATA / "videos" / "single.mkv")) as container:
        frames = [
            frame.to_ndarray(format="gray")[..., None]
            for _, frame in zip(range(4), container.decode(video=0), strict=False)
        ]
    return np.stack(frames)


def test_model_directories_run_on_either_engine(video_frames, private_cache_dir):
    # A cache of its own: a shared entry would carry the first loader's verification.
    model_dir = DATA / "models" / "single_instance"
    torch_runner = load_runner(model_dir, engine="torch", device="cpu")
    onnx_runner = load_runner([model_dir], engine="onnx", device="cpu", verify=False)
    auto_runner = load_runner(str(model_dir), device="cpu", threads=1, verify_frames=video_frames)
    assert isinstance(torch_runner, TorchRunner)
    assert isinstance(onnx_runner, OnnxRunner) and isinstance(auto_runner, OnnxRunner)
    checks = auto_runner.metadata.verification
    assert [check["frame_source"] for check in checks] == ["the given frames"] * 2
    assert all(check["detections"] == [1] * check["frames"][0] for check in checks)
    (source,) = auto_runner.metadata.sources
    assert source["path"] == str(model_dir.resolve())
    expected = torch_runner.run(video_frames)
    assert [pose.n_instances for pose in expected] == [1, 1, 1, 1]
    for runner in (onnx_runner, auto_runner):
        for got, want in zip(runner.run(video_frames), expected, strict=True):
            np.testing.assert_allclose(got.points, want.points, atol=1e-3)
            np.testing.assert_allclose(got.point_scores, want.point_scores, atol=1e-3)


def test_model_directories_that_do_not_form_a_model_are_refused():
    model_dir = DATA / "models" / "single_instance"
    with pytest.raises(ModelConfigError, match=r"\(single_instance\), .* \(single_instance\): two"):
        load_inference_model([model_dir, model_dir])


def test_a_verified_torchscript_export_loads_and_runs_like_the_torch_model(tmp_path, video_frames):
    model_dir = DATA / "models" / "single_instance"
    path = export_model(
        [model_dir], tmp_path / "m.pt", format="torchscript", verify_frames=video_frames
    )
    runner = load_runner(path, device="cpu")
    assert isinstance(runner, TorchRunner)
    checks = read_torchscript_metadata(path).verification
    assert [check["frames"] for check in checks] == [[2, 168, 200, 1], [3, 191, 237, 1]]
    assert all(count == 1 for check in checks for count in check["detections"])
    got = runner.run(video_frames[1:2])
    want = TorchRunner(load_inference_model(model_dir)).run(video_frames[1:2])
    assert got[0].n_instances == want[0].n_instances == 1
    assert not np.isnan(want[0].points).any()
    np.testing.assert_allclose(got[0].points, want[0].points, atol=1e-4)
    np.testing.assert_allclose(got[0].point_scores, want[0].point_scores, atol=1e-4)


def test_auto_does_not_fall_back_to_torch_when_the_model_does_not_export(
    toy_models, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        "sleap_live.engines.graph.build.load_inference_model",
        lambda paths, settings=None: toy_models.AntialiasedModel(),
    )
    for engine in ("auto", "onnx"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ExportError) as error:
                load_runner(tmp_path, engine=engine, device="cpu")
        message = str(error.value)
        assert message.startswith(f"cannot run {tmp_path} with ONNX Runtime: ONNX export")
        assert "_upsample_bilinear2d_aa" in message and message.endswith("(--engine torch)")
        assert isinstance(error.value.__cause__, ExportError)
    assert isinstance(load_runner(tmp_path, engine="torch", device="cpu"), TorchRunner)


def test_a_model_dir_that_finds_no_animals_to_verify_on_runs_with_a_note(private_cache_dir, capsys):
    # An empty cache: a cached export of this model would load without any verification.
    model_dir = DATA / "models" / "centroid"
    black = np.zeros((3, 168, 200, 1), np.uint8)
    runner = load_runner(model_dir, device="cpu", verify_frames=black)
    try:
        assert not runner.run(black)[0].points.size
    finally:
        runner.close()
    notes = [line for line in capsys.readouterr().err.splitlines() if "without animals" in line]
    assert len(notes) == 1
    assert (
        "on 3 frames without animals (none in the 3 looked at, from the given frames)" in (notes[0])
    )


def test_onnx_files_and_sleap_nn_export_dirs_load_and_run_without_torch(exports, tmp_path):
    _, onnx_path, _ = exports
    np.save(tmp_path / "frames.npy", sample_frames(2, 90, 120, 3, seed=1))
    script = (
        "import sys\n"
        "sys.modules['torch'] = None  # any import of torch now fails\n"
        "import numpy as np\n"
        "from sleap_live.engines.runners.load import load_runner\n"
        f"frames = np.load({str(tmp_path / 'frames.npy')!r})\n"
        f"for model in ({str(onnx_path)!r}, {str(DATA / 'exports' / 'single_instance')!r}):\n"
        "    for device in ('cpu', 'auto'):\n"
        "        runner = load_runner(model, device=device)\n"
        "        poses = runner.run(frames if 'toy' in model else frames[..., :1])\n"
        "        assert len(poses) == 2, poses\n"
        "        print(type(runner).__name__, runner.device)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "OnnxRunner",
        "cpu",
        "OnnxRunner",
        "cpu",
        "SleapNNExportRunner",
        "cpu",
        "SleapNNExportRunner",
        "cpu",
    ]


class _FakeDriver:
    def __init__(self, init_status: int, devices: int) -> None:
        self.init_status = init_status
        self.devices = devices

    def cuInit(self, flags: int) -> int:
        return self.init_status

    def cuDeviceGetCount(self, count) -> int:
        count._obj.value = self.devices
        return 0


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        (None, False),
        (_FakeDriver(100, 0), False),
        (_FakeDriver(0, 0), False),
        (_FakeDriver(0, 2), True),
    ],
)
def test_gpu_presence_is_asked_of_the_cuda_driver_not_torch(monkeypatch, driver, expected):
    import ctypes

    def load(name):
        if driver is None:
            raise OSError(f"{name}: cannot open shared object file")
        return driver

    monkeypatch.setattr(ctypes, "CDLL", load)
    assert devices.gpu_present() is expected
