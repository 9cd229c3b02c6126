"""Tests for sleap_live.engines.runners.load.load_runner."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export.onnx import (
    export_inference_model,
    main,
    read_torchscript_metadata,
    sample_frames,
)
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.load.metadata import read_onnx_metadata
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.engines.runners.torch import TorchRunner

DATA = Path(__file__).parents[1] / "data"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def exports(toy_models, tmp_path_factory):
    model = toy_models.ToyInstanceModel()
    folder = tmp_path_factory.mktemp("exports")
    onnx_path = export_inference_model(model, folder / "toy.onnx", verify=False)
    pt_path = export_inference_model(model, folder / "toy.pt", format="torchscript", verify=False)
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


def test_bad_arguments_are_refused(exports, tmp_path):
    _, onnx_path, _ = exports
    with pytest.raises(ValueError, match="unknown engine 'tensorrt'"):
        load_runner(onnx_path, engine="tensorrt")
    with pytest.raises(TypeError, match=r"unknown options \['num_threads'\]"):
        load_runner(onnx_path, num_threads=1)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        load_runner(onnx_path, device="tpu")
    with pytest.raises(ValueError, match="got 3 paths"):
        load_runner([tmp_path, tmp_path, tmp_path])
    with pytest.raises(ValueError, match="got 0 paths"):
        load_runner([])
    with pytest.raises(ModelNotFoundError, match="missing: no such model file or directory"):
        load_runner(tmp_path / "missing")
    (tmp_path / "model.h5").write_bytes(b"")
    with pytest.raises(ValueError, match=r"model\.h5: unknown model file type"):
        load_runner(tmp_path / "model.h5")
    with pytest.raises(ValueError, match="expected a model directory alongside"):
        load_runner([tmp_path, onnx_path])


@pytest.fixture(scope="module")
def video_frames():
    with av.open(str(DATA / "videos" / "single.mkv")) as container:
        frames = [
            frame.to_ndarray(format="gray")[..., None]
            for _, frame in zip(range(4), container.decode(video=0), strict=False)
        ]
    return np.stack(frames)


def test_model_directories_run_on_either_engine(video_frames):
    model_dir = DATA / "models" / "single_instance"
    torch_runner = load_runner(model_dir, engine="torch", device="cpu")
    onnx_runner = load_runner([model_dir], engine="onnx", device="cpu", verify=False)
    auto_runner = load_runner(str(model_dir), device="cpu", threads=1)
    assert isinstance(torch_runner, TorchRunner)
    assert isinstance(onnx_runner, OnnxRunner) and isinstance(auto_runner, OnnxRunner)
    assert auto_runner.metadata.verification is not None
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


def test_export_cli_writes_a_verified_model(tmp_path, capsys):
    model_dir = DATA / "models" / "single_instance"
    assert main([str(model_dir), "-o", str(tmp_path), "--opset", "18"]) == 0
    metadata = read_onnx_metadata(tmp_path / "model.onnx")
    assert metadata.exporter["opset"] == 18
    assert metadata.info.model_type == "single_instance"
    assert len(metadata.verification) == 2
    report = capsys.readouterr().err
    assert "exported single_instance model to" in report and "points" in report
    assert (
        main([str(model_dir), "-o", str(tmp_path / "m.pt"), "-f", "torchscript", "--no-verify"])
        == 0
    )
    assert read_torchscript_metadata(tmp_path / "m.pt").verification is None


def test_export_cli_reports_errors_on_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), "-o", str(tmp_path / "out")]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error:") and "missing" in line
    model_dir = str(DATA / "models" / "single_instance")
    assert main([model_dir, "-o", str(tmp_path / "m.pt")]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "onnx exports are written to '.onnx' files" in line
    with pytest.raises(SystemExit):
        main(["a", "b", "c"])


def test_auto_falls_back_to_torch_when_the_model_does_not_export(toy_models, tmp_path, monkeypatch):
    monkeypatch.setattr(
        "sleap_live.engines.graph.build.load_inference_model",
        lambda paths: toy_models.AntialiasedModel(),
    )
    with pytest.warns(RuntimeWarning, match="with torch: ONNX export of the topdown model failed"):
        runner = load_runner(tmp_path, device="cpu")
    assert isinstance(runner, TorchRunner)
    with pytest.raises(ExportError, match="_upsample_bilinear2d_aa"):
        load_runner(tmp_path, engine="onnx", device="cpu")
