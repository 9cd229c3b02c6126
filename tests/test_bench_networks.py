"""scripts/bench_networks.py: every backend runs the same network and is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests import script_modules as scripts

bench = scripts.load("bench_networks.py")
MODELS = Path(__file__).resolve().parent / "data" / "models"


EAGER = {"ONNX Runtime", "torch eager", "torch eager, channels-last"}
COMPILED = "torch.compile, channels-last"


def _bench(tmp_path: Path, *argv: str) -> dict:
    out = tmp_path / "networks.json"
    assert bench.main([*argv, "--batch-size", "1", "--repeats", "1", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def _assert_timed_against_onnx_runtime(figures: dict, backends: set[str]) -> None:
    assert set(figures) == backends
    assert figures["ONNX Runtime"]["over_onnx_runtime"] == 1.0
    assert all(figure["ms_per_frame"] > 0 for figure in figures.values())


def test_each_backend_is_timed_against_onnx_runtime(tmp_path, capsys, monkeypatch):
    # inductor builds its kernels with a C++ compiler, tens of seconds of CPU per
    # network: what is tested here is the benchmark's part (the compiled backend run,
    # timed and reported), so the compilation is aot_eager's (the same graph capture,
    # no code generation). inductor itself is tested in tests/engines/test_parity.py.
    real_compile = torch.compile
    backends = []

    def compile_without_inductor(model, **options):
        backends.append(options.get("backend", "inductor"))
        return real_compile(model, **{**options, "backend": "aot_eager"})

    monkeypatch.setattr(torch, "compile", compile_without_inductor)
    argv = [str(MODELS / "centered_instance"), "--size", "64x48"]
    results = _bench(tmp_path, *argv)
    assert backends == ["inductor"]
    assert list(results) == [argv[0]]
    _assert_timed_against_onnx_runtime(results[argv[0]], {*EAGER, COMPILED})
    assert COMPILED in capsys.readouterr().out


def test_every_model_is_reported_in_order(tmp_path, capsys):
    argv = [str(MODELS / "centroid"), str(MODELS / "centered_instance"), "--size", "64x48"]
    results = _bench(tmp_path, *argv, "--no-compile")
    assert list(results) == [argv[0], argv[1]]
    for figures in results.values():
        _assert_timed_against_onnx_runtime(figures, EAGER)
    assert COMPILED not in capsys.readouterr().out


def test_the_backends_compute_the_same_maps():
    runs = bench.backends(MODELS / "single_instance", (48, 64), 2, compile_too=False)
    (onnx_maps,) = runs["ONNX Runtime"]()
    for name in ("torch eager", "torch eager, channels-last"):
        (maps,) = runs[name]()
        assert maps.numpy() == pytest.approx(onnx_maps, abs=1e-4)


def test_a_missing_model_directory_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path / "nonesuch")])
    assert "nonesuch: not a model directory" in capsys.readouterr().err


def test_a_centered_instance_network_runs_on_crops_of_its_crop_size():
    # The fixture's crops are 64 px and its maps have output stride 2: 32 x 32 maps,
    # not maps of the 480 x 640 frame the size matcher would pad a crop to.
    runs = bench.backends(MODELS / "centered_instance", (480, 640), 1, compile_too=False)
    (maps,) = runs["torch eager"]()
    assert bench.read_model_dir(MODELS / "centered_instance").preprocess.crop_size == 64
    assert tuple(maps.shape[-2:]) == (32, 32)


def test_a_folder_that_is_no_model_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        bench.main([str(MODELS / "centroid"), str(MODELS.parent / "videos")])
    err = capsys.readouterr().err
    assert "training_config.yaml: not found" in err and "Traceback" not in err
