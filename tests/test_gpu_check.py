"""scripts/gpu_check.py: its pure parts (budgets, targets, rows, the skip line), and
whole runs on the CPU: every GPU part skipped with its reason, and a rehearsal that
runs the GPU parts' code with ONNX Runtime on the CPU."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests import script_modules as scripts

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
# Generous bound on one run of the script, only so that a hang fails the test.
HANG_TIMEOUT_S = 600


gc = scripts.load("gpu_check.py")


# A GPU machine's environment with CUDA torch only, as plain values.
_ENVIRONMENT = {
    "cuda": True,
    "cuda_reason": None,
    "versions": {"onnxruntime": "1.30.0", "torch": "2.11.0", "onnx": None},
    "providers": ("CPUExecutionProvider",),
    "gpu": {"name": "NVIDIA H200"},
    "import_errors": {},
    "libx264": True,
    "nvdec_module": False,
    "tensorrt_module": False,
}


def _environment(**changes):
    return gc.Environment(**{**_ENVIRONMENT, **changes})


# ----------------------------------------------------------------------------- targets


def test_targets_at_least_at_most_and_binding():
    fps = gc.Target(3000, "fps")
    assert gc.judge(3100.0, fps) == gc.PASS
    assert gc.judge(2900.0, fps) == gc.BELOW
    latency = gc.Target(2.0, "ms", at_most=True)
    assert gc.judge(1.5, latency) == gc.PASS
    assert gc.judge(2.5, latency) == gc.BELOW
    parity = gc.Target(0.1, "px", at_most=True, binding=True)
    assert gc.judge(0.05, parity) == gc.PASS
    assert gc.judge(0.2, parity) == gc.FAIL
    assert gc.judge(float("nan"), parity) == gc.FAIL
    assert gc.judge(5.0, None) == gc.MEASURED
    assert fps.label() == ">= 3000 fps" and latency.label() == "<= 2 ms"


def test_exit_code_fails_only_on_failures_and_timeouts():
    rows = [
        gc.Row("speed", status=gc.BELOW),
        gc.Row("parity", status=gc.PASS),
        gc.Row("decode", status=gc.SKIP),
        gc.Row("overlap", status=gc.MEASURED),
    ]
    assert gc.exit_code(rows) == 0
    assert gc.exit_code([*rows, gc.Row("parity", status=gc.FAIL)]) == 1
    assert gc.exit_code([*rows, gc.Row("speed", status=gc.TIMEOUT)]) == 1


def test_a_skip_fails_a_gpu_machine_unless_the_machine_does_not_offer_it():
    nvdec = gc.Skip("decode", "nvdec", "PyNvVideoCodec is not installed")
    no_provider = gc.Skip("parity", "ort-cuda", "no CUDA provider", excused=True)
    no_gpu = gc.Skip("speed", "torch-cuda", "no CUDA GPU")
    no_import = gc.Skip("pipeline", "-", "cannot import sleap_live.stream.bench")
    skips = [nvdec, no_provider, no_gpu, no_import]

    def missing(gpu, rehearsal=False):
        return gc.must_have_run(skips, gpu=gpu, rehearsal=rehearsal, cuda_reason="no CUDA GPU")

    # On the CPU a skip is what it says; on a GPU machine a GPU part that did not run
    # failed; in a rehearsal, a part that did not run for want of anything but a GPU.
    assert missing(gpu=False) == []
    assert missing(gpu=True) == [nvdec, no_gpu, no_import]
    assert missing(gpu=False, rehearsal=True) == [nvdec, no_import]
    passed = [gc.Row("parity", status=gc.PASS)]
    assert gc.exit_code(passed, missing(gpu=False)) == 0
    assert gc.exit_code(passed, missing(gpu=True)) == 1
    assert gc.exit_code(passed, [no_provider][:0]) == 0


# ----------------------------------------------------------------------------- budgets


def test_part_budget_is_a_share_of_what_is_left():
    parts = list(gc.PARTS)
    total = sum(gc.PART_SHARES.values())
    assert gc.part_budget(450.0, "speed", parts) == pytest.approx(
        450.0 * gc.PART_SHARES["speed"] / total
    )
    # Time earlier parts left unused goes to the later ones.
    later = ["pipeline", "overlap"]
    shares = gc.PART_SHARES["pipeline"] + gc.PART_SHARES["overlap"]
    assert gc.part_budget(100.0, "pipeline", later) == pytest.approx(
        100.0 * gc.PART_SHARES["pipeline"] / shares
    )
    assert gc.part_budget(0.0, "speed", parts) == 0.0
    assert gc.part_budget(-5.0, "speed", parts) == 0.0


def test_item_budget_shares_and_leaves_later_items_their_floor():
    fair, limit = gc.item_budget(60.0, 4, floor_s=3.0)
    assert fair == 15.0
    assert limit == 51.0  # may overrun its share, leaving 3 s to each of the other three
    assert gc.item_budget(10.0, 1, floor_s=3.0) == (10.0, 10.0)
    fair, limit = gc.item_budget(4.0, 4, floor_s=3.0)  # less than the floors: the fair share
    assert (fair, limit) == (1.0, 1.0)
    assert gc.item_budget(0.0, 3) == (0.0, 0.0)
    assert gc.item_budget(5.0, 0) == (0.0, 0.0)


def test_window_is_a_capped_share_of_the_item():
    assert gc.window(10.0) == pytest.approx(10.0 * gc.WINDOW_SHARE)
    assert gc.window(1000.0) == gc.MAX_WINDOW_S
    assert gc.window(1000.0, most_s=0.5) == 0.5
    assert gc.window(-1.0) == 0.0


# Bodies run with the script loaded as `gc`, `ENVIRONMENT` (a GPU machine's, as plain
# values) and `work_dir` (a folder of the body's own), by name: see `fresh_process`.
TIME_LIMIT_BODY = """
def raises(seconds, busy):
    try:
        with gc.time_limit(seconds):
            while busy:
                pass
    except gc.BudgetExceeded:
        return True
    return False

assert raises(0.05, True)
assert raises(0.0, False)
assert not raises(30.0, False)  # finishes inside its limit; the alarm is cancelled
"""

ITEMS_BODY = """
args = gc.parse_args(["--work-dir", work_dir, "--cases", "single_instance"])
environment = gc.Environment(**ENVIRONMENT)
check = gc.Check(args, environment, {})


def forever(fair):
    while True:
        pass


def broken(fair):
    raise RuntimeError("no engine\\nfor this")


def quick(fair):
    return [gc.Row("speed", "torch-cuda", figure="fps", value=1.0)]


template = gc.Row("speed", "torch-cuda", "single_instance", figure="fps")
check.items(0.6, [(template, forever), (template, broken), (template, quick)])
assert [row.status for row in check.rows] == [gc.TIMEOUT, gc.FAIL, gc.MEASURED]
assert check.rows[1].note == "RuntimeError: no engine for this"
check.items(0.0, [(template, quick)])
assert check.rows[-1].status == gc.TIMEOUT and check.rows[-1].note == "part budget spent"
"""

GRAPHS_BODY = """
import types
import numpy as np

args = gc.parse_args(
    ["--work-dir", work_dir, "--cases", "single_instance", "--sizes", "384", "--frames", "16"]
)
check = gc.Check(args, gc.Environment(**ENVIRONMENT), {})


class FakeRunner:
    device = "cpu"

    def __init__(self, shift):
        self.shift = shift

    def run(self, batch):
        return [
            types.SimpleNamespace(
                points=np.full((1, 2, 2), 5.0 + self.shift),
                point_scores=np.ones((1, 2)),
                instance_scores=np.ones(1),
                identities=np.zeros(1, int),
            )
            for _ in batch
        ]


runners = {gc.EAGER: FakeRunner(0.0), gc.GRAPHS: FakeRunner(0.0)}
check.runner = lambda name, case, shape: runners[name]
for runner, ms in ((gc.EAGER, 2.0), (gc.GRAPHS, 0.5)):
    row = gc.Row("speed", runner, "single_instance", "384x384", gc.LATENCY_FIGURE, ms, "ms")
    check.rows.append(row)
check.part_graphs(30.0)
poses, timing = check.rows[-2:]
assert (poses.figure, poses.status) == ("poses vs eager, max px", gc.PASS), poses
assert (timing.status, timing.value) == (gc.PASS, 0.25), timing
runners[gc.GRAPHS] = FakeRunner(0.5)
check.part_graphs(30.0)
assert check.rows[-2].status == gc.FAIL and abs(check.rows[-2].value - 0.5 * 2**0.5) < 1e-12
"""

FRESH_BODIES = {"time_limit": TIME_LIMIT_BODY, "items": ITEMS_BODY, "graphs": GRAPHS_BODY}


@pytest.fixture(scope="session")
def fresh_process(once_per_run, tmp_path_factory) -> dict[str, str | None]:
    """`FRESH_BODIES` run one after another in one new interpreter, once for the whole
    test run: body name -> the traceback it ended with, or None. One interpreter,
    not one per test: the items' and graphs' bodies import the engines (torch) to
    make a `Check`, about 4 s of CPU each time.

    The time limit is SIGALRM: in the test process, after ONNX Runtime's, OpenVINO's
    and torch's native thread pools have started, an alarm can land in one of their
    threads and crash the whole suite (seen once); the script itself always runs as
    a process of its own.
    """

    def run() -> dict[str, str | None]:
        folder = tmp_path_factory.mktemp("gpu_check_bodies")
        code = (
            "import importlib.util, json, sys, traceback\n"
            f"spec = importlib.util.spec_from_file_location('gpu_check', {str(SCRIPT)!r})\n"
            "gc = importlib.util.module_from_spec(spec)\n"
            "sys.modules['gpu_check'] = gc\n"
            "spec.loader.exec_module(gc)\n"
            f"ENVIRONMENT = {_ENVIRONMENT!r}\n"
            "ended = {}\n"
            "for name, (body, work_dir) in json.load(sys.stdin).items():\n"
            "    scope = {'gc': gc, 'ENVIRONMENT': ENVIRONMENT, 'work_dir': work_dir}\n"
            "    try:\n"
            "        exec(compile(body, name, 'exec'), scope)\n"
            "        ended[name] = None\n"
            "    except BaseException:  # BudgetExceeded is a KeyboardInterrupt\n"
            "        ended[name] = traceback.format_exc()\n"
            "print(json.dumps(ended))\n"
        )
        bodies = {name: (body, str(folder / name)) for name, body in FRESH_BODIES.items()}
        result = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(bodies),
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT_S,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.splitlines()[-1])

    return once_per_run("gpu-check-fresh-process", run)


def _ran_in_a_fresh_process(fresh_process: dict[str, str | None], name: str) -> None:
    assert name in fresh_process, fresh_process
    assert fresh_process[name] is None, fresh_process[name]


def test_time_limit_interrupts_a_busy_item(fresh_process):
    assert issubclass(gc.BudgetExceeded, KeyboardInterrupt)
    assert not issubclass(gc.BudgetExceeded, Exception)  # no `except Exception` swallows it
    _ran_in_a_fresh_process(fresh_process, "time_limit")


class FakeClock:
    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        return self.now

    def run(self, batch) -> None:
        self.now += self.step


def test_time_calls_counts_frames_over_the_window():
    clock = FakeClock(step=0.125)  # exact in binary: the window ends on a call's end
    batches = [np.zeros((8, 2, 2, 1), np.uint8), np.zeros((8, 2, 2, 1), np.uint8)]
    timing = gc.time_calls(clock.run, batches, 1.0, clock=clock)
    assert len(timing.per_call) == 8
    assert timing.frames == 64
    assert timing.fps == pytest.approx(64.0)
    assert timing.percentile_ms(50) == pytest.approx(125.0)
    few = gc.time_calls(clock.run, batches, 0.0, min_calls=3, clock=clock)
    assert len(few.per_call) == 3
    capped = gc.time_calls(clock.run, batches, 1e9, max_calls=7, clock=clock)
    assert len(capped.per_call) == 7


def test_batches_of():
    frames = np.arange(20)
    assert [len(b) for b in gc.batches_of(frames, 8)] == [8, 8]
    assert [len(b) for b in gc.batches_of(frames, 8, keep_tail=True)] == [8, 8, 4]
    assert [len(b) for b in gc.batches_of(np.arange(5), 8)] == [5]


def test_pipeline_loops():
    assert gc.pipeline_loops(None, 600, 8.0) == 1
    assert gc.pipeline_loops(3000.0, 600, 8.0) == 20  # capped at MAX_LOOPS
    assert gc.pipeline_loops(150.0, 600, 8.0) == 2
    assert gc.pipeline_loops(float("nan"), 600, 8.0) == 1


# ----------------------------------------------------------------------------- rows, output


def _comparison(errors, counts=(), identity=1.0):
    return types.SimpleNamespace(
        frames=10,
        point_errors=np.asarray(errors, float),
        score_errors=np.asarray([1e-7], float),
        instance_score_errors=np.asarray([2e-7], float),
        count_mismatches=tuple(counts),
        presence_mismatches=0,
        identity_agreement=identity,
    )


def test_parity_rows():
    row = gc.parity_row("torch-cuda", "topdown", "168x200", _comparison([0.0, 0.01, 0.02]))
    assert row.status == gc.PASS and row.value == pytest.approx(0.01)
    assert row.target.binding and row.extra["max_px"] == pytest.approx(0.02)
    assert gc.parity_row("x", "m", "s", _comparison([0.3, 0.4])).status == gc.FAIL
    counts = gc.parity_row("x", "m", "s", _comparison([0.0], counts=(3, 7)))
    assert counts.status == gc.FAIL and "counts differ on 2 frames" in counts.note
    identity = gc.parity_row("x", "m", "s", _comparison([0.0], identity=0.9))
    assert identity.status == gc.FAIL and "identity" in identity.note
    empty = gc.parity_row("x", "m", "s", _comparison([]))
    assert empty.status == gc.FAIL and "no points" in empty.note
    json.dumps(row.to_json())


def _poses(points, identities=(0,)):
    points = np.asarray(points, float)
    return {
        "points": points,
        "point_scores": np.ones(points.shape[:2]),
        "instance_scores": np.ones(len(points)),
        "identities": np.asarray(identities[: len(points)]),
    }


def test_graphs_rows_want_equal_poses_and_a_lower_time():
    one = [_poses([[[1.0, 2.0], [np.nan, np.nan]]])]
    same = gc.pose_difference(one, [_poses([[[1.0, 2.0], [np.nan, np.nan]]])])
    assert same.identical and same.max_px == 0.0 and same.presence_mismatches == 0
    poses, timing = gc.graphs_rows("topdown", "1024x1024", same, 2.0, 0.5)
    assert (poses.status, timing.status) == (gc.PASS, gc.PASS)
    assert poses.note.startswith("bit for bit") and timing.value == pytest.approx(0.25)
    # Graphs that silently ran eagerly take the eager time: a failure.
    assert gc.graphs_rows("topdown", "1024x1024", same, 2.0, 1.98)[1].status == gc.FAIL
    assert gc.graphs_rows("topdown", "1024x1024", same, None, 1.0)[1].status == gc.FAIL
    moved = gc.pose_difference(one, [_poses([[[1.0, 2.5], [np.nan, np.nan]]])])
    assert not moved.identical and moved.max_px == pytest.approx(0.5)
    assert gc.graphs_rows("topdown", "1024x1024", moved, 2.0, 0.5)[0].status == gc.FAIL
    lost = gc.pose_difference(one, [_poses([[[1.0, 2.0], [3.0, 4.0]]])])
    assert lost.presence_mismatches == 1
    row = gc.graphs_rows("topdown", "1024x1024", lost, 2.0, 0.5)[0]
    assert row.status == gc.FAIL and "one side only" in row.note
    counts = gc.pose_difference(one, [_poses(np.zeros((0, 2, 2)))])
    assert counts.count_mismatches == 1
    json.dumps(row.to_json())


def test_nvdec_frames_must_equal_pyavs_bit_for_bit():
    frames = [np.full((4, 6, 3), value, np.uint8) for value in (10, 20, 30)]
    equal = gc.frame_comparison(iter(frames), iter([f.copy() for f in frames]))
    template = gc.Row("decode", "nvdec", size="4x6", figure=gc.SAME_FRAMES_FIGURE)
    row = gc.same_frames_row(template, equal)
    assert row.status == gc.PASS and row.value == 3.0 and "all 3 equal" in row.note
    changed = [f.copy() for f in frames]
    changed[1][0, 0, 0] += 1
    row = gc.same_frames_row(template, gc.frame_comparison(iter(frames), iter(changed)))
    assert row.status == gc.FAIL and "1 frames differ (first 1; max difference 1)" in row.note
    short = gc.frame_comparison(iter(frames), iter(frames[:2]))
    assert short.lengths == (3, 2) and short.frames == 2
    assert "NVDEC gave 3 frames, PyAV 2" in gc.same_frames_row(template, short).note
    gray = [f[..., :1] for f in frames]
    shapes = gc.frame_comparison(iter(frames), iter(gray))
    assert shapes.shapes_differ and gc.same_frames_row(template, shapes).status == gc.FAIL
    assert gc.same_frames_row(template, gc.frame_comparison([], [])).status == gc.FAIL


def test_values_cells_and_plain_table():
    latency = gc.Row(
        "speed",
        "torch-cuda",
        "single_instance",
        "1024x1024",
        "p50",
        0.81,
        "ms",
        gc.Target(2.0, "ms", at_most=True),
        gc.PASS,
        extra={"p99_ms": 1.234},
    )
    assert gc.format_value(latency) == "0.81 ms (p99 1.23)"
    assert gc.format_value(gc.Row("speed", value=3123.4, unit="fps")) == "3123 fps"
    assert gc.format_value(gc.Row("parity", value=1.5e-5, unit="px")) == "1.50e-05 px"
    assert gc.format_value(gc.Row("parity", value=float("nan"), unit="px")) == "nan px"
    assert gc.format_value(gc.Row("environment", value="NVIDIA H200")) == "NVIDIA H200"
    assert gc.format_value(gc.Row("decode", status=gc.SKIP)) == "-"
    cells = gc.table_cells(latency)
    assert cells[:5] == ("speed", "torch-cuda", "single_instance", "1024x1024", "p50")
    assert cells[6:8] == ("<= 2 ms", gc.PASS)
    text = gc.plain_table([latency, gc.Row("decode", "nvdec", status=gc.SKIP, note="why")])
    lines = text.splitlines()
    assert lines[0].split() == list(gc.COLUMNS)
    assert "0.81 ms (p99 1.23)" in lines[1] and lines[2].endswith("why")


def test_skip_line_groups_reasons_and_names_whole_parts():
    runners = {
        "parity": ["onnx-cpu", "torch-cuda", "ort-cuda"],
        "speed": ["torch-cuda", "ort-cuda"],
    }
    skips = [
        gc.Skip("parity", "torch-cuda", "no CUDA GPU"),
        gc.Skip("parity", "ort-cuda", "no CUDA GPU"),
        gc.Skip("speed", "torch-cuda", "no CUDA GPU"),
        gc.Skip("speed", "ort-cuda", "no CUDA GPU"),
        gc.Skip("decode", "nvdec", "PyNvVideoCodec is not installed"),
        gc.Skip("overlap", "-", "no pipeline run"),
    ]
    line = gc.skip_line(skips, runners)
    assert line == (
        "skipped: parity/torch-cuda, parity/ort-cuda, speed (no CUDA GPU); "
        "decode/nvdec (PyNvVideoCodec is not installed); overlap (no pipeline run)"
    )
    assert "\n" not in line
    assert gc.skip_line([], runners) == "skipped: nothing"


def test_fastest_runner_prefers_the_measured_best():
    def fps(runner, value, model="topdown", size="1024x1024"):
        return gc.Row("speed", runner, model, size, gc.FPS_FIGURE, value, "fps")

    rows = [fps("torch-cuda", 900.0), fps("torch-cuda-graphs", 1200.0), fps("ort-cuda", 5e3, "x")]
    candidates = ["torch-cuda", "torch-cuda-graphs", "ort-cuda"]
    assert gc.fastest_runner(rows, "topdown", "1024x1024", candidates) == "torch-cuda-graphs"
    # Nothing measured: the most specialised runner available.
    assert gc.fastest_runner([], "topdown", "1024x1024", candidates) == "ort-cuda"
    assert gc.fastest_runner([], "topdown", "1024x1024", ["onnx-cpu"]) == "onnx-cpu"


def test_notices_are_captured_and_the_logger_restored():
    logger = logging.getLogger("sleap_live")
    propagate = logger.propagate
    with gc.captured_notices() as notices:
        logging.getLogger("sleap_live.engines.runners").warning("CUDA graphs off:  eager")
        logging.getLogger("sleap_live.engines.runners").warning("CUDA graphs off:  eager")
    assert notices == ["CUDA graphs off: eager"]
    assert logger.propagate == propagate and not logger.handlers
    row = gc.with_notices(gc.Row("speed", note="engine alone"), notices)
    assert row.note == "engine alone; CUDA graphs off: eager"
    assert row.extra["notices"] == notices


# ----------------------------------------------------------------------------- environment


def test_runners_come_from_load_runners_engines():
    table = gc.runner_table(("auto", "torch", "onnx", "openvino", "tensorrt", "torch-compile"))
    assert list(table) == [
        "onnx-cpu",
        "torch-cpu",
        "torch-cuda",
        "torch-cuda-graphs",
        "ort-cuda",
        "ort-tensorrt",
        "tensorrt",
        "torch-compile",
    ]
    # An engine the check does not know runs on CUDA under its own name.
    assert table["torch-compile"] == {"engine": "torch-compile", "device": "cuda"}
    assert table["torch-cuda-graphs"]["cuda_graphs"] is True
    from sleap_live.engines.runners.load import ENGINES

    assert set(gc.runner_table(ENGINES)) >= {"torch-cpu", "torch-cuda", "torch-cuda-graphs"}
    assert set(gc.known_engines()) == set(ENGINES)


def test_runner_availability():
    no_gpu = _environment(cuda=False, cuda_reason="no CUDA GPU: torch 2.13.0+cpu sees none")
    assert gc.runner_unavailable("torch-cpu", no_gpu) is None
    assert "onnx is not installed" in gc.runner_unavailable("onnx-cpu", no_gpu)
    with_onnx = _environment(cuda=False, versions={**_ENVIRONMENT["versions"], "onnx": "1.19"})
    assert gc.runner_unavailable("onnx-cpu", with_onnx) is None
    for runner in ("torch-cuda", "torch-cuda-graphs", "torch-compile"):
        assert gc.runner_unavailable(runner, no_gpu) == no_gpu.cuda_reason
        assert gc.runner_not_offered(runner, no_gpu) is None
    gpu = _environment()
    for runner in ("torch-cuda", "torch-cuda-graphs", "torch-compile"):
        assert gc.runner_unavailable(runner, gpu) is None
    # What the lent machine's packages cannot run at all: excused there.
    assert "onnxruntime-gpu" in gc.runner_not_offered("ort-cuda", gpu)
    assert "TensorRT provider" in gc.runner_not_offered("ort-tensorrt", gpu)
    assert "pip install tensorrt" in gc.runner_not_offered("tensorrt", gpu)
    full = _environment(
        providers=("TensorrtExecutionProvider", "CUDAExecutionProvider"), tensorrt_module=True
    )
    gpu_runners = gc.gpu_runners(("torch", "onnx", "tensorrt"))
    assert all(gc.runner_unavailable(runner, full) is None for runner in gpu_runners)


def test_part_requirements():
    env = _environment(
        import_errors={"sleap_live.stream.bench": "ModuleNotFoundError: No module named 'x'"},
        libx264=False,
    )
    assert "sleap_live.stream.bench" in gc.part_unavailable("pipeline", env)
    assert "sleap_live.stream.bench" in gc.part_unavailable("decode", env)
    assert gc.part_unavailable("parity", env) is None
    assert "libx264" in gc.part_unavailable("clip", env)
    no_av = _environment(import_errors={"av": "ModuleNotFoundError: No module named 'av'"})
    assert all("av" in gc.part_unavailable(part, no_av) for part in ("clip", "parity", "speed"))
    assert gc.part_unavailable("environment", no_av) is None


# ----------------------------------------------------------------------------- frames, models


def test_pad_frames_centres_and_repeats_edges():
    frames = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4, 1)
    padded = gc.pad_frames(frames, 7, 8)
    assert padded.shape == (2, 7, 8, 1)
    np.testing.assert_array_equal(padded[:, 2:5, 2:6], frames)
    np.testing.assert_array_equal(padded[:, 0, 2:6], frames[:, 0])
    np.testing.assert_array_equal(padded[:, 3, 0], frames[:, 1, 0])
    with pytest.raises(ValueError, match="cannot pad"):
        gc.pad_frames(frames, 2, 8)


def test_sized_model_dir_sets_the_size_matcher(tmp_path):
    model = ROOT / "tests" / "data" / "models" / "single_instance"
    sized = gc.sized_model_dir(model, 1024, 1024, tmp_path)
    config = (sized / "training_config.yaml").read_text()
    assert "    max_height: 1024\n" in config and "    max_width: 1024\n" in config
    original = (model / "training_config.yaml").read_text()
    assert config.replace("1024", "X") == original.replace("168", "X").replace("200", "X")
    assert (sized / "best.ckpt").read_bytes()[:64] == (model / "best.ckpt").read_bytes()[:64]
    with pytest.raises(ValueError, match="max_height"):
        gc.sized_config("data:\n  other: 1\n", 10, 10)


def test_write_clip_round_trips_through_pyav(tmp_path):
    frames = np.zeros((4, 32, 48, 1), np.uint8) + 90
    path = tmp_path / "clip.mp4"
    assert gc.write_clip(path, iter(frames)) == 4
    info = gc.clip_info(path)
    assert info == {"codec": "h264", "pix_fmt": "yuv420p", "height": 32, "width": 48, "frames": 4}
    decoded = gc.decode_video(path)
    assert decoded.shape == (4, 32, 48, 3)
    assert np.abs(decoded.astype(int) - 90).max() <= 2


def test_package_tree_imports_the_checkout(tmp_path):
    tree = gc.package_tree(tmp_path)
    assert (tree / "sleap_live" / "engines").resolve() == ROOT / "engines"
    assert (tree / "sleap_live" / "stream").resolve() == ROOT / "stream"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import sleap_live.engines.runners.load as m; print(m.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tree)], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().startswith(str(tree))


def test_install_wheels_unpacks_them_onto_sys_path(tmp_path, monkeypatch):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    assert gc.install_wheels(wheels, target)["result"] == "no .whl files there"
    with zipfile.ZipFile(wheels / "tinypkg-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tinypkg_gpu_check/__init__.py", "VALUE = 7\n")
        wheel.writestr("tinypkg-1.0.dist-info/METADATA", "Name: tinypkg\nVersion: 1.0\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    report = gc.install_wheels(wheels, target)
    assert report["wheels"] == ["tinypkg-1.0-py3-none-any.whl"]
    assert sys.path[0] == str(target) and os.environ["PYTHONPATH"].startswith(str(target))
    import tinypkg_gpu_check

    assert tinypkg_gpu_check.VALUE == 7
    sys.modules.pop("tinypkg_gpu_check")


def test_items_time_out_or_fail_one_by_one(fresh_process):
    _ran_in_a_fresh_process(fresh_process, "items")


def test_graphs_part_compares_eager_and_graphs_runners(fresh_process):
    """The graphs part on a (faked) GPU machine: the runners' poses and the speed part's
    batch-1 times give one pose row and one time row per model type and size."""
    _ran_in_a_fresh_process(fresh_process, "graphs")


# ----------------------------------------------------------------------------- whole runs


def _run(tmp_path, *options):
    report = tmp_path / "out" / "gpu_check.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--json",
        str(report),
        "--work-dir",
        str(tmp_path / "work"),
        "--cases",
        "single_instance",
        "--frames",
        "16",
        *options,
    ]
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=HANG_TIMEOUT_S, env=env, cwd=tmp_path
    )
    return result, json.loads(report.read_text()) if report.exists() else None


def _rows(report, part, status=None):
    rows = [row for row in report["rows"] if row["part"] == part]
    return [row for row in rows if status is None or row["status"] == status]


def test_the_lent_machines_plan_fits_one_command(monkeypatch):
    # The lent machine's command: every model type, 384 and 1024, the runners offered
    # there (torch eager, with CUDA graphs, torch-compile), within the check's budget.
    from tests.engines import goldens

    offered = [r for r in gc.gpu_runners(gc.known_engines()) if r not in gc.NOT_ON_LENT_MACHINE]
    assert {"torch-cuda", "torch-cuda-graphs", "torch-compile"} <= set(offered)
    cases = list(goldens.CASES)
    items = gc.plan(offered, cases, gc.SPEED_SIZES, gc.TARGET_SIZE)
    fits, line = gc.plan_line(items, gc.DEFAULT_BUDGET_S)
    assert fits, line
    assert line.startswith(f"plan for the lent GPU machine: {len(items)} items, about ")
    # torch-compile compiles once per model type and size: where the targets are, and
    # one parity check.
    compiled = {(i.part, i.model, i.size) for i in items if i.runner == "torch-compile"}
    assert compiled == {("parity", "single_instance", "video")} | {
        ("speed", case, "1024x1024") for case in gc.FPS_TARGETS
    }
    # Over every model type and size, as before, it would not fit.
    monkeypatch.setattr(gc, "RUNNER_SCOPES", {})
    over = gc.plan(offered, cases, gc.SPEED_SIZES, gc.TARGET_SIZE)
    assert not gc.plan_line(over, gc.DEFAULT_BUDGET_S)[0]


def test_the_design_cards_path_runs_first():
    # NVDEC, the engines (TensorRT and CUDA graphs first), the pipeline; then parity and
    # the rest, so a run cut short has measured the design's own path.
    parts = list(gc.PARTS)
    assert parts.index("decode") < parts.index("speed") < parts.index("pipeline")
    assert parts.index("pipeline") < parts.index("parity") < parts.index("graphs")
    runners = ["torch-cuda", "torch-cuda-graphs", "ort-cuda", "tensorrt", "torch-compile"]
    assert gc.design_first(runners) == [
        "tensorrt",
        "ort-cuda",
        "torch-cuda-graphs",
        "torch-cuda",
        "torch-compile",
    ]


def test_expect_gpu_fails_at_once_without_a_cuda_device(tmp_path, monkeypatch, capfd):
    # On the lent machine a torch that sees no GPU must fail the run, not skip each part.
    assert gc.gpu_missing(_environment(), expected=True) is None
    names = ("python", "torch", "onnxruntime", "tensorrt", "PyNvVideoCodec", "av", "sleap-io")
    no_gpu = _environment(
        cuda=False,
        cuda_reason="no CUDA GPU: torch 2.11.0 sees none",
        versions=dict.fromkeys(names, None),
    )
    assert gc.gpu_missing(no_gpu, expected=False) is None
    assert "no CUDA GPU" in gc.gpu_missing(no_gpu, expected=True)
    # main() stops before any part (the environment probed as on a CPU machine).
    monkeypatch.setattr(gc, "probe_environment", lambda: no_gpu)
    monkeypatch.setattr(gc, "bootstrap", lambda: "installed")
    report = tmp_path / "gpu_check.json"
    assert gc.main(["--expect-gpu", "--json", str(report), "--work-dir", str(tmp_path)]) == 1
    assert "FAILED: --expect-gpu: no CUDA GPU" in capfd.readouterr().out
    written = json.loads(report.read_text())
    assert written["exit_code"] == 1 and written["environment"]["cuda"] is False


@pytest.mark.slow
def test_cpu_run_skips_every_gpu_part_in_one_line(tmp_path):
    result, report = _run(tmp_path, "--clip-frames", "8", "--budget", "150")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    skip_lines = [line for line in result.stdout.splitlines() if line.startswith("skipped: ")]
    assert len(skip_lines) == 1, output
    line = skip_lines[0]
    for name in (
        "parity/torch-cuda",
        "parity/ort-cuda",
        "parity/tensorrt",
        "speed",
        "graphs",
        "pipeline",
        "decode/nvdec",
        "overlap",
        "no CUDA GPU",
    ):
        assert name in line, line
    assert report is not None
    for key in ("environment", "targets", "parts", "rows", "skipped", "skip_line", "exit_code"):
        assert key in report
    assert report["skip_line"] == line and report["exit_code"] == 0
    assert list(report["parts"]) == list(gc.PARTS)
    assert report["environment"]["cuda"] is False
    parity = _rows(report, "parity", gc.PASS)
    assert {row["runner"] for row in parity} == {"onnx-cpu", "torch-cpu"}
    assert all(row["model"] == "single_instance" and row["binding"] for row in parity)
    assert all(row["value"] <= 1e-3 for row in parity)
    assert _rows(report, "clip", gc.PASS)[0]["value"] == 8
    assert _rows(report, "decode", gc.MEASURED)[0]["runner"] == "pyav"
    assert not _rows(report, "speed", gc.MEASURED)


# The rehearsal's parts but parity, which a rehearsal runs as a CPU run does (the CPU
# runners, not the stand-in): its rows are test_cpu_run_skips_every_gpu_part_in_one_line's.
# CI's `gpu_payload.py --rehearse` runs every part in the GPU image's venv and looks at
# the exit status; this test looks at the rows, with this venv's torch.
REHEARSED_PARTS = ",".join(part for part in gc.PARTS if part != "parity")


@pytest.mark.slow
def test_rehearsal_runs_the_gpu_parts_code_on_the_cpu(tmp_path):
    result, report = _run(
        tmp_path,
        "--rehearse",
        "--parts",
        REHEARSED_PARTS,
        "--clip-frames",
        "16",
        "--sizes",
        "256",
        "--large-size",
        "256",
        "--max-window",
        "0.5",
        "--budget",
        "300",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    speed = _rows(report, "speed", gc.MEASURED)
    assert {(row["size"], row["figure"]) for row in speed} == {
        (size, figure) for size in ("256x256",) for figure in (gc.FPS_FIGURE, gc.LATENCY_FIGURE)
    }
    assert all(row["runner"] == gc.REHEARSAL_RUNNER and row["value"] > 0 for row in speed)
    assert all(row["target"] is None for row in speed)  # no targets away from 1024x1024
    figures = {row["figure"] for row in _rows(report, "pipeline", gc.MEASURED)}
    assert figures == {"pipeline fps b8 (pyav)", "capture-to-pose b1 p50 (pyav replay)"}
    overlap = {row["figure"]: row["value"] for row in _rows(report, "overlap", gc.MEASURED)}
    assert 0.0 <= overlap["decode during engine"] <= 1.0
    assert set(report["details"]["timelines"]) == {"single_instance"}
    # The compile runner's thread rule, with this venv's torch (CI's rehearsal: the GPU
    # image's 2.11, whose bare lookup fails there).
    (trees,) = [row for row in report["rows"] if row["figure"] == "graph trees, new thread"]
    assert trees["status"] == gc.PASS and "after ready_cuda_graph_trees it works" in trees["note"]
