"""The install's design: ONNX Runtime's CPU and GPU builds come from separate extras.

`onnxruntime` and `onnxruntime-gpu` install the same `onnxruntime` package folder;
with both installed the CPU build's files can hide the CUDA provider, so the GPU
extras must not be installable beside a base dependency on the CPU build.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
GPU_EXTRAS = ("gpu", "gpu-cu12")


@pytest.fixture(scope="module")
def project():
    return tomllib.loads(PYPROJECT.read_text())["project"]


def names(requirements):
    return {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0] for requirement in requirements}


def requirement(requirements, name):
    (found,) = [r for r in requirements if names([r]) == {name}]
    return found


def test_no_onnxruntime_build_is_a_base_dependency(project):
    assert not names(project["dependencies"]) & {"onnxruntime", "onnxruntime-gpu"}


def test_the_cpu_install_and_ci_get_the_cpu_build(project):
    extras = project["optional-dependencies"]
    for extra in ("cpu", "test"):
        assert "onnxruntime" in names(extras[extra])
        assert "onnxruntime-gpu" not in names(extras[extra])


@pytest.mark.parametrize("extra", GPU_EXTRAS)
def test_the_gpu_extras_get_the_gpu_build_alone(project, extra):
    requirements = project["optional-dependencies"][extra]
    assert "onnxruntime-gpu" in names(requirements) and "onnxruntime" not in names(requirements)
    # ThreadedDecoder(start_frame=) appears in PyNvVideoCodec 2.1.
    assert ">=2.1" in requirement(requirements, "PyNvVideoCodec")
    tensorrt = {"gpu": "tensorrt-cu13", "gpu-cu12": "tensorrt-cu12"}[extra]
    assert ">=10.13" in requirement(requirements, tensorrt)
    # TensorRT 10: onnxruntime-gpu's TensorRT provider needs libnvinfer.so.10.
    assert "<11" in requirement(requirements, tensorrt)


def test_each_gpu_extras_tensorrt_is_one_its_onnx_runtime_loads(project):
    # What pip's resolver and the wheels said (scripts/gpu_extras_report.py; it downloads
    # about 1 GB, so CI reads its report): the report must be of today's extras, and in
    # each, every onnxruntime-gpu's TensorRT provider needs the TensorRT major installed.
    import json

    report = json.loads((PYPROJECT.parent / "tests/data/gpu_extras_report.json").read_text())
    assert set(report) == set(GPU_EXTRAS)
    for extra in GPU_EXTRAS:
        entry = report[extra]
        assert entry["requirements"] == project["optional-dependencies"][extra], (
            f"the {extra} extra changed: run scripts/gpu_extras_report.py again"
        )
        major = entry["tensorrt"]["version"].split(".")[0]
        assert entry["tensorrt"]["sonames"] == f"libnvinfer.so.{major}"
        for version, onnxruntime in entry["onnxruntime-gpu"].items():
            needed = [n for n in onnxruntime["tensorrt_provider_needs"] if "libnvinfer.so" in n]
            assert needed == [f"libnvinfer.so.{major}"], (extra, version, needed)
        assert entry["loads"]


def test_the_gpu_extras_onnx_runtime_matches_their_cuda(project):
    # onnxruntime-gpu on PyPI: CUDA 12 up to 1.26, CUDA 13 from 1.27.
    extras = project["optional-dependencies"]
    assert ">=1.27" in requirement(extras["gpu"], "onnxruntime-gpu")
    assert "<1.27" in requirement(extras["gpu-cu12"], "onnxruntime-gpu")


def test_without_either_build_auto_runs_model_directories_with_torch(monkeypatch):
    import importlib.util

    from sleap_live.engines.runners import devices

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "onnxruntime" else find_spec(name, *args),
    )
    assert not devices.ort_installed() and not devices.ort_has_cuda()
    assert not devices.onnx_can_use("auto") and not devices.onnx_can_use("cpu")
    assert devices.onnx_device("auto") == "cpu"


def test_without_either_build_onnx_runtime_errors_say_which_extra(monkeypatch):
    import sys

    from sleap_live.engines.errors import RuntimeUnavailableError
    from sleap_live.engines.export.onnx import onnx_exported
    from sleap_live.engines.runners.onnx_session import create_session

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # its import raises ImportError
    for attempt in (lambda: create_session(b"model"), lambda: onnx_exported(b"model")):
        with pytest.raises(RuntimeUnavailableError) as error:
            attempt()
        message = str(error.value)
        assert 'pip install "sleap-live[cpu]"' in message and "\n" not in message
        assert 'for a GPU pip install "sleap-live[gpu]"' in message


def test_the_torch_range_keeps_the_torch_sleap_nn_installs(project):
    # sleap-nn 0.3.5's wheel asks for any torch (METADATA: "Requires-Dist: torch"); its
    # README installs torch 2.14.1, PyPI's CUDA build on Linux. sleap-live goes into the
    # same environment, so its range must hold that torch, or pip replaces the lab's GPU
    # torch (scripts/check_torch_kept.py asks pip itself, in CI).
    from packaging.requirements import Requirement

    torch = Requirement(requirement(project["dependencies"], "torch")).specifier
    for version in ("2.14.0", "2.14.1", "2.14.1+cu130", "2.13.0"):  # 2.13.0: what CI installs
        assert torch.contains(version), version


def test_every_install_hint_names_the_extra_as_the_metadata_spells_it(project):
    """Issue 37: the hint said "sleap-live[saved_model]", which the pip a Python 3.11 venv
    brings (23.2) does not match to the metadata's normalized "saved-model" (PEP 685):
    it installed no TensorFlow."""
    from sleap_live.engines import optional
    from sleap_live.engines.export import coreml, saved_model, tfjs, tflite
    from sleap_live.stream import preview, publish
    from sleap_live.stream.many import cluster

    extras = {re.sub(r"[-_.]+", "-", name).lower() for name in project["optional-dependencies"]}
    hints = [
        saved_model.TENSORFLOW_INSTALL_HINT,
        tfjs.TFJS_INSTALL_HINT,
        coreml.COREML_INSTALL_HINT,
        tflite.TFLITE_INSTALL_HINT,
        optional.ORT_INSTALL_HINT,
        optional.OPENVINO_INSTALL_HINT,
        preview.INSTALL_HINT,
        publish.INSTALL_HINT,
        cluster.RAY_INSTALL_HINT,
    ]
    named = [name for hint in hints for name in re.findall(r"sleap-live\[([^\]]+)\]", hint)]
    assert "saved-model" in named
    for name in named:
        assert name in extras, f"{name}: the metadata spells its extras {sorted(extras)}"
