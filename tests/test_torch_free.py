"""An exported `.onnx` runs end to end on a host without torch.

Each run happens in a subprocess started through `tests/torch_blocker.py`, where
importing torch fails as it does where torch is not installed. The exports are the
fixture models' graphs in the session's warm export cache (exported with torch,
here, once for the suite); the runs without torch must write the same poses as the
same run with torch importable.
Top-down groups instances inside the graph; bottom-up groups them on the host
(`sleap_live.engines.host.grouping`), so both paths are covered.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sleap_io as sio

from tests.committed import require
from tests.engines import goldens
from tests.stream.many_videos import cut_clips

TESTS = Path(__file__).resolve().parent
BLOCKER = TESTS / "torch_blocker.py"
BLOCKED = "torch_blocker: blocked import of"  # what the blocker writes per attempt
DATA = TESTS / "data"
VIDEO = DATA / "videos" / "multi_gray.mkv"
# The runs read the first frames of VIDEO, re-encoded losslessly (`clip`): every
# path is exercised on a few dozen frames as on the whole video, in a fraction of
# the time of its six runs.
VIDEO_FRAMES = 60
# The fixture cases (tests/engines/goldens.py) run here, both on VIDEO: a top-down pair
# and a bottom-up model.
CASES = ("topdown", "bottomup")
# Generous upper bound for one subprocess, only so that a hang fails the test.
HANG_TIMEOUT_S = 600

# The Python API without torch: a pipeline on an ONNX runner, read through its ring
# (iterating the pipeline) while it writes a .slp; the records go to an .npz.
API_RUN = """
import sys

import numpy as np

from sleap_live.engines.runners.load import load_runner
from sleap_live.stream import OutputOptions, Pipeline, open_source

video, model, slp, npz = sys.argv[1:]
runner = load_runner(model)
try:
    records = list(Pipeline(open_source(video), runner, outputs=OutputOptions(slp)))
finally:
    runner.close()
assert "torch" not in sys.modules
poses = [record.poses for record in records]
np.savez(
    npz,
    frame_index=np.array([record.frame_index for record in records]),
    n_instances=np.array([p.n_instances for p in poses]),
    points=np.concatenate([p.points for p in poses]),
    point_scores=np.concatenate([p.point_scores for p in poses]),
    instance_scores=np.concatenate([p.instance_scores for p in poses]),
)
"""

Poses = dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]


@pytest.fixture(scope="session")
def clip(tmp_path_factory) -> Path:
    """The first `VIDEO_FRAMES` frames of VIDEO, lossless and gray as VIDEO stores
    them: decoded, the same pixels."""
    require(VIDEO)
    (path,) = cut_clips(tmp_path_factory.mktemp("clip"), {VIDEO.stem: (0, VIDEO_FRAMES)}, VIDEO)
    return path


@pytest.fixture(scope="session")
def onnx_export(tmp_path_factory, warm_export_cache):
    """name -> a sleap-live ONNX export of that fixture case (`CASES`), as a file: the
    graph the session's warm export cache holds, exported with torch and verified on
    the case video's first frames once for the whole suite."""
    folder = tmp_path_factory.mktemp("onnx_exports")

    @functools.cache
    def export(name: str) -> Path:
        path = folder / f"{name}.onnx"
        path.write_bytes(goldens.warm_export(name, warm_export_cache))
        return path

    return export


@pytest.fixture(scope="session")
def poses_with_torch(onnx_export, clip, tmp_path_factory, once_per_run):
    """name -> the poses `python -m sleap_live run` writes with torch importable, run
    once for the whole test run (its xdist workers too)."""
    folder = tmp_path_factory.mktemp("with_torch")

    def run(name: str) -> Poses:
        output = folder / f"{name}.slp"
        _python(["-m", "sleap_live", *_run_args(clip, onnx_export(name), output)], cwd=folder)
        return _read_slp(output)

    return lambda name: once_per_run(f"torch_free-with_torch-{name}", lambda: run(name))


@pytest.fixture(scope="session")
def run_without_torch(onnx_export, clip, tmp_path_factory, once_per_run):
    """name -> (stderr, poses) of `python -m sleap_live run` on the default device with
    torch unimportable, run once for the whole test run (its xdist workers too) for
    every test that looks at it."""
    folder = tmp_path_factory.mktemp("without_torch")

    def run(name: str) -> tuple[str, Poses]:
        output = folder / f"{name}.slp"
        stderr = _python(
            ["-m", "sleap_live", *_run_args(clip, onnx_export(name), output)],
            cwd=folder,
            block_torch=True,
        )
        return stderr, _read_slp(output)

    return lambda name: once_per_run(f"torch_free-without_torch-{name}", lambda: run(name))


def _run_args(video: Path, model: Path, output: Path, *options: str) -> list[str]:
    return ["run", str(video), "-m", str(model), "-o", str(output), "--quiet", *options]


def _python(args: list[str], *, cwd: Path, block_torch: bool = False) -> str:
    """Runs `python ARGS` (through the blocker if `block_torch`); returns its stderr."""
    prefix = [sys.executable, str(BLOCKER)] if block_torch else [sys.executable]
    result = subprocess.run(
        [*prefix, *args], cwd=cwd, capture_output=True, text=True, timeout=HANG_TIMEOUT_S
    )
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stderr


def _read_slp(path: Path) -> Poses:
    """frame index -> (points (I, N, 2), point scores (I, N), instance scores (I,))."""
    poses = {}
    for frame in sio.load_slp(str(path)).labeled_frames:
        rows = [instance.numpy(scores=True) for instance in frame.instances]
        n_nodes = len(frame.instances[0].skeleton.nodes) if rows else 0
        table = np.asarray(rows, np.float32).reshape(len(rows), n_nodes, 3)
        scores = np.asarray([instance.score for instance in frame.instances], np.float32)
        poses[frame.frame_idx] = (table[..., :2], table[..., 2], scores)
    return poses


def _read_records(path: Path) -> Poses:
    """The .npz of `API_RUN` in the form of `_read_slp`."""
    saved = np.load(path)
    bounds = np.cumsum([0, *saved["n_instances"]])
    return {
        int(index): tuple(
            saved[key][start:stop] for key in ("points", "point_scores", "instance_scores")
        )
        for index, start, stop in zip(saved["frame_index"], bounds[:-1], bounds[1:], strict=True)
    }


def _assert_same_poses(ours: Poses, reference: Poses) -> None:
    assert sorted(ours) == list(range(VIDEO_FRAMES))
    assert sorted(reference) == sorted(ours)
    for index, expected in reference.items():
        for got, want in zip(ours[index], expected, strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"frame {index}")
    # The poses are not vacuous: animals are found on (almost) every frame.
    found = sum(len(scores) > 0 for _, _, scores in reference.values())
    assert found >= 0.95 * VIDEO_FRAMES


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_cli_runs_an_onnx_export_without_torch(name, run_without_torch, poses_with_torch):
    _, poses = run_without_torch(name)
    _assert_same_poses(poses, poses_with_torch(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_pipeline_api_runs_an_onnx_export_without_torch(
    name, onnx_export, clip, poses_with_torch, tmp_path
):
    slp, npz = tmp_path / "poses.slp", tmp_path / "records.npz"
    _python(
        ["-c", API_RUN, str(clip), str(onnx_export(name)), str(slp), str(npz)],
        cwd=tmp_path,
        block_torch=True,
    )
    reference = poses_with_torch(name)
    _assert_same_poses(_read_records(npz), reference)
    _assert_same_poses(_read_slp(slp), reference)


@pytest.mark.slow
def test_an_onnx_run_on_the_cpu_never_asks_for_torch(onnx_export, clip, tmp_path):
    stderr = _python(
        [
            "-m",
            "sleap_live",
            *_run_args(clip, onnx_export("topdown"), tmp_path / "p.slp", "--device", "cpu"),
        ],
        cwd=tmp_path,
        block_torch=True,
    )
    assert BLOCKED not in stderr, stderr


@pytest.mark.slow
def test_an_onnx_run_on_the_default_device_never_asks_for_torch(run_without_torch):
    stderr, _ = run_without_torch("topdown")
    assert BLOCKED not in stderr, stderr
