"""The OpenVINO runner: IR export, top-down batches without animals, bf16 only when asked,
auto's choice.

Its fp32 poses against sleap-nn's goldens are in the parity suite (test_parity.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from types import SimpleNamespace

import numpy as np
import pytest

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.host import agreement
from sleap_live.engines.runners import cpu_choice
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.types import FramePoses
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

ov = pytest.importorskip("openvino")

from sleap_live.engines.export import export_model  # noqa: E402
from sleap_live.engines.runners.openvino import (  # noqa: E402
    OpenVINORunner,
    compare_poses,
)

BATCH = 8
VERIFY_FRAMES = 5


@cache
def _frames(video: str) -> np.ndarray:
    with FileSource(video) as source:
        return np.stack([frame.image for frame in source])


def _case(name: str) -> tuple[list[str], np.ndarray, dict]:
    models, video, golden, _ = goldens.case_paths(name)
    require(*models, video, golden)
    return [str(m) for m in models], _frames(str(video)), dict(np.load(golden))


@pytest.fixture(scope="module")
def topdown_ir(tmp_path_factory):
    models, frames, _ = _case("topdown")
    output = tmp_path_factory.mktemp("ir") / "topdown.xml"
    exported = export_model(models, output, format="openvino", verify_frames=frames[:VERIFY_FRAMES])
    return exported, frames


@pytest.mark.slow
def test_ir_export_round_trip(topdown_ir, tmp_path):
    path, frames = topdown_ir
    assert path.with_suffix(".bin").is_file()
    sidecar = json.loads(path.with_name(path.name + ".json").read_text())
    assert sidecar["format"] == "openvino" and sidecar["verification"]
    # float32 weights: save_model's default float16 compression is off.
    graph = ov.Core().read_model(str(path))
    assert not any(
        op.get_type_name() == "Convert" and "f16" in str(op.get_input_element_type(0))
        for op in graph.get_ops()
    )
    from_ir = load_runner(path, cache_dir=tmp_path)
    assert isinstance(from_ir, OpenVINORunner)
    assert from_ir.metadata.format == "openvino" and from_ir.info.model_type == "topdown"
    from_onnx = load_runner(
        goldens.case_paths("topdown")[0],
        engine="onnx",
        device="cpu",
        verify_frames=frames[:VERIFY_FRAMES],
    )
    batch = frames[:BATCH]
    bound = goldens.bound_of(tuple(goldens.case_paths("topdown")[0]))
    fp32 = agreement.compare_poses(from_onnx.run(batch), from_ir.run(batch), bound)
    assert fp32.points > 0 and fp32.agrees, fp32.summary()
    with pytest.raises(ValueError, match="runs with engine 'openvino'"):
        load_runner(path, engine="onnx")


@pytest.mark.slow
def test_a_top_down_ir_runs_batches_without_animals(topdown_ir, tmp_path):
    path, frames = topdown_ir
    runner = load_runner(path, cache_dir=tmp_path)
    poses = runner.run(np.zeros_like(frames[:2]))
    assert [p.n_instances for p in poses] == [0, 0]
    assert poses[0].points.shape == (0, runner.info.skeleton.n_nodes, 2)


# A top-down recording with frames without animals: batches that hold none (the
# crop batch is empty, which OpenVINO's CPU plugin refuses; the runner answers it on
# the host), batches that hold some, and one that begins empty.
def _with_empty_frames(frames: np.ndarray) -> np.ndarray:
    video = frames[: 2 * BATCH].copy()
    video[:BATCH] = 0  # a whole batch without animals
    video[BATCH + 2 : BATCH + 5] = 0  # empty frames among frames with animals
    return video


@pytest.mark.slow
@pytest.mark.parametrize("name", ["topdown", "multi_class_topdown"])
@pytest.mark.usefixtures("warm_export_cache")
def test_top_down_video_with_empty_frames_runs_as_on_onnx_runtime(name):
    models, frames, golden = _case(name)
    video = _with_empty_frames(frames)
    options = {"device": "cpu", "verify_frames": frames[:VERIFY_FRAMES]}
    openvino = load_runner(models, engine="openvino", **options)
    onnx = load_runner(models, engine="onnx", **options)
    assert isinstance(openvino, OpenVINORunner)
    batches = [video[i : i + BATCH] for i in range(0, len(video), BATCH)]
    mine = [pose for batch in batches for pose in openvino.run(batch)]
    theirs = [pose for batch in batches for pose in onnx.run(batch)]
    counts = [p.n_instances for p in theirs]
    assert counts[:BATCH] == [0] * BATCH and 0 in counts[BATCH:] and sum(counts) > 0
    bound = goldens.bound_of(tuple(goldens.case_paths(name)[0]))
    for a, b in zip(mine, theirs, strict=True):
        assert a.points.shape[1:] == b.points.shape[1:] and a.points.dtype == b.points.dtype
    fp32 = agreement.compare_poses(theirs, mine, bound)
    assert fp32.agrees, f"{name}: {fp32.summary()}"
    # The frames left with their animals are sleap-nn's golden poses, by the same rule.
    kept = [i for i in goldens.compared_frames(name, len(video)) if video[i].any()]
    poses = [
        {
            "points": p.points,
            "point_scores": p.point_scores,
            "instance_scores": p.instance_scores,
            "identities": p.identities,
        }
        for p in mine
    ]
    against_golden = goldens.agreement(poses, golden, bound, openvino.info.class_names, kept)
    assert kept and against_golden.points > 0, against_golden.summary()
    assert against_golden.agrees, against_golden.summary()
    openvino.close()
    onnx.close()


@pytest.mark.slow
def test_bf16_only_when_asked_and_its_error_is_printed(topdown_ir, tmp_path):
    path, frames = topdown_ir
    assert OpenVINORunner(path).precision == "fp32"
    core = ov.Core()
    if "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        with pytest.raises(RuntimeUnavailableError, match="no bf16"):
            OpenVINORunner(path, precision="bf16", check_frames=frames[:VERIFY_FRAMES])
        return
    lines: list[str] = []
    runner = OpenVINORunner(
        path, precision="bf16", check_frames=frames[:VERIFY_FRAMES], notify=lines.append
    )
    check = runner.precision_check
    assert check is not None and check.frames == VERIFY_FRAMES
    assert len(lines) == 1 and lines[0] == check.line()
    assert lines[0].startswith("OpenVINO bf16 against fp32 on 5 verification frames: points max")
    assert "instance counts equal on" in lines[0]
    with pytest.raises(ValueError, match="check_frames"):
        OpenVINORunner(path, precision="bf16")
    with pytest.raises(ValueError, match="ONNX Runtime runs fp32 or int8"):
        load_runner(path, engine="onnx", precision="bf16")


def test_compare_poses_matches_instances_and_counts():
    def poses(*points):
        array = np.asarray(points, np.float32).reshape(len(points), 2, 2)
        n = len(points)
        return FramePoses(
            array, np.ones((n, 2), np.float32), np.ones(n, np.float32), -np.ones(n, np.int32)
        )

    full = [poses([0, 0, 10, 10], [50, 50, 60, 60]), poses([0, 0, 1, 1])]
    reduced = [poses([50.5, 50, 60, 60], [0, 0, np.nan, np.nan]), poses()]
    check = compare_poses("bf16", reduced, full)
    assert check.frames == 2 and check.count_agreement == 1
    assert check.points_max_px == pytest.approx(0.5) and check.points_median_px == 0
    assert check.presence_mismatches == 1


def test_missing_openvino_is_one_line_naming_the_extra():
    code = (
        "import sys; sys.modules['openvino'] = None\n"
        "from sleap_live.engines.runners.openvino import OpenVINORunner\n"
        "try:\n    OpenVINORunner(b'')\n"
        "except ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == (
        'OpenVINO is not installed; pip install "sleap-live[openvino]"'
    ), result.stderr


class _Timed:
    """A runner whose runs take no time, counting them."""

    def __init__(self, name: str) -> None:
        self.name, self.runs, self.closed = name, 0, False
        self.info = SimpleNamespace(model_type="single_instance")
        self.device, self.metadata = "cpu", None

    def run(self, frames, *, stream=None):
        self.runs += 1
        return []

    def close(self):
        self.closed = True


def test_auto_choice_is_measured_once_cached_and_printed(monkeypatch, tmp_path, toy_onnx):
    from sleap_live.engines.export.frames import sample_frames

    monkeypatch.delenv(cpu_choice.ENGINE_ENV)
    frames = sample_frames(2, 32, 40, 1)
    onnx_bytes = toy_onnx
    made: list[_Timed] = []

    def maker(name):
        def make():
            made.append(_Timed(name))
            return made[-1]

        return make

    monkeypatch.setattr(
        cpu_choice, "measure", lambda runners, frames: {"onnx": 10.0, "openvino": 9.0}
    )
    lines: list[str] = []
    chosen = cpu_choice.choose_cpu_runner(
        onnx_bytes,
        maker("onnx"),
        maker("openvino"),
        frames=frames,
        threads=1,
        cache_dir=tmp_path,
        notify=lines.append,
    )
    assert chosen.name == "openvino" and [r.closed for r in made] == [True, False]
    assert "engine auto: OpenVINO on the CPU: 9.0 ms" in lines[-1] and "measured now" in lines[-1]
    # Cached: nothing is measured again; the ONNX Runtime runner that told the model
    # type is closed.
    monkeypatch.setattr(cpu_choice, "measure", lambda *_: pytest.fail("measured again"))
    # Fewer frames of the same size (a busy machine reads fewer verification frames
    # within their time budget) are the same entry.
    again = cpu_choice.choose_cpu_runner(
        onnx_bytes,
        maker("onnx"),
        maker("openvino"),
        frames=frames[:1],
        threads=1,
        cache_dir=tmp_path,
        notify=lines.append,
    )
    assert again.name == "openvino" and len(made) == 4 and made[2].closed
    assert "cached" in lines[-1]
    # A corrupt entry is measured again; within the margin ONNX Runtime stays.
    (entry,) = (tmp_path / cpu_choice.FOLDER).iterdir()
    entry.write_text("{not json")
    monkeypatch.setattr(
        cpu_choice, "measure", lambda runners, frames: {"onnx": 10.0, "openvino": 9.8}
    )
    kept = cpu_choice.choose_cpu_runner(
        onnx_bytes,
        maker("onnx"),
        maker("openvino"),
        frames=frames,
        threads=1,
        cache_dir=tmp_path,
        notify=lines.append,
    )
    assert kept.name == "onnx" and "engine auto: ONNX Runtime" in lines[-1]
    # No frames: ONNX Runtime, saying why.
    plain = cpu_choice.choose_cpu_runner(
        onnx_bytes,
        maker("onnx"),
        maker("openvino"),
        frames=None,
        threads=1,
        cache_dir=tmp_path,
        notify=lines.append,
    )
    assert plain.name == "onnx" and "no verification frames" in lines[-1]


@pytest.mark.parametrize("model_type", ["topdown", "multi_class_topdown"])
def test_auto_measures_top_down_graphs_like_any_other(monkeypatch, model_type):
    monkeypatch.delenv(cpu_choice.ENGINE_ENV)
    monkeypatch.setattr(
        cpu_choice, "measure", lambda runners, frames: {"onnx": 10.0, "openvino": 8.0}
    )
    onnx, openvino = _Timed("onnx"), _Timed("openvino")
    onnx.info = SimpleNamespace(model_type=model_type)
    lines: list[str] = []
    chosen = cpu_choice.choose_cpu_runner(
        b"graph",
        lambda: onnx,
        lambda: openvino,
        frames=np.zeros((2, 8, 8, 1), np.uint8),
        threads=1,
        cache_dir=None,
        notify=lines.append,
    )
    assert chosen is openvino and onnx.closed and "measured now" in lines[-1]


def test_auto_keeps_onnx_runtime_where_openvino_cannot_compile_the_graph(monkeypatch):
    from sleap_live.engines.errors import ModelConfigError

    monkeypatch.delenv(cpu_choice.ENGINE_ENV)
    monkeypatch.setattr(cpu_choice, "measure", lambda *_: pytest.fail("measured"))
    onnx = _Timed("onnx")

    def refused():
        raise ModelConfigError("OpenVINO cannot compile the model (unsupported op)")

    lines: list[str] = []
    chosen = cpu_choice.choose_cpu_runner(
        b"graph",
        lambda: onnx,
        refused,
        frames=np.zeros((2, 8, 8, 1), np.uint8),
        threads=1,
        cache_dir=None,
        notify=lines.append,
    )
    assert chosen is onnx and not onnx.closed
    assert "ONNX Runtime" in lines[-1] and "OpenVINO cannot run this graph" in lines[-1]


def test_the_environment_pins_auto_without_measuring(monkeypatch):
    monkeypatch.setattr(cpu_choice, "measure", lambda *_: pytest.fail("measured"))
    pick = {"onnx": _Timed("onnx"), "openvino": _Timed("openvino")}

    def choose():
        return cpu_choice.choose_cpu_runner(
            b"graph",
            lambda: pick["onnx"],
            lambda: pick["openvino"],
            frames=np.zeros((2, 8, 8, 1), np.uint8),
            threads=1,
            cache_dir=None,
            notify=lambda line: None,
        )

    monkeypatch.setenv(cpu_choice.ENGINE_ENV, "openvino")
    assert choose() is pick["openvino"]
    monkeypatch.setenv(cpu_choice.ENGINE_ENV, "onnx")
    assert choose() is pick["onnx"]
    monkeypatch.setenv(cpu_choice.ENGINE_ENV, "tflite")
    with pytest.raises(ValueError, match="SLEAP_LIVE_CPU_ENGINE='tflite'"):
        choose()


def test_measure_times_every_runner_alike():
    runners = {"onnx": _Timed("onnx"), "openvino": _Timed("openvino")}
    timings = cpu_choice.measure(runners, np.zeros((2, 8, 8, 1), np.uint8), rounds=3)
    assert set(timings) == {"onnx", "openvino"} and all(t >= 0 for t in timings.values())
    assert [r.runs for r in runners.values()] == [4, 4]


@pytest.fixture(scope="module")
def toy_onnx(toy_models) -> bytes:
    from sleap_live.engines.export.exporter import export_graph

    return export_graph(toy_models.ToyInstanceModel(), verify=False)


def test_toy_export_runs_alike_in_openvino_and_onnx_runtime(toy_onnx):
    from sleap_live.engines.export.frames import sample_frames
    from sleap_live.engines.runners.onnx import OnnxRunner

    onnx_bytes = toy_onnx
    # An unverified export takes only the model's channel count: gray frames are
    # converted on the host, as for ONNX Runtime.
    frames = sample_frames(2, 96, 128, 1, seed=4)
    runner = OpenVINORunner(onnx_bytes, threads=1)
    assert runner.device == "cpu" and runner.metadata.input_channels == (3,)
    mine, theirs = runner.run(frames), OnnxRunner(onnx_bytes, intra_op_threads=1).run(frames)
    assert sum(p.n_instances for p in theirs) > 0
    for a, b in zip(mine, theirs, strict=True):
        assert a.n_instances == b.n_instances
        np.testing.assert_allclose(a.points, b.points, rtol=0, atol=1e-4)
    runner.close()
    runner.close()
    with pytest.raises(Exception, match="closed"):
        runner.run(frames)


def test_both_cpu_runners_keep_the_runner_protocol(toy_onnx):
    from sleap_live.engines.export.frames import sample_frames
    from sleap_live.engines.runners.base import Runner
    from sleap_live.engines.runners.onnx import OnnxRunner

    frames = sample_frames(1, 96, 128, 3, seed=4)
    for runner in (OpenVINORunner(toy_onnx, threads=1), OnnxRunner(toy_onnx, intra_op_threads=1)):
        assert isinstance(runner, Runner) and runner.metadata is not None
        assert len(runner.run(frames, stream=None)) == 1
    # OpenVINO runs on the CPU: a CUDA stream is refused in one line.
    with pytest.raises(ValueError, match="OpenVINORunner runs on the CPU: it takes no CUDA stream"):
        OpenVINORunner(toy_onnx, threads=1).run(frames, stream=object())
