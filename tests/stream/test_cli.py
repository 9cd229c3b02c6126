"""The `sleap-live` command line: runs, errors, exit codes, signals.

Most tests swap `load_runner` for the fake runner, so they exercise the CLI, the
sources, the pipeline and the writers without a trained model. Tests at the end
run real models from tests/data/models when the engines can load them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio
from scipy.optimize import linear_sum_assignment

from sleap_live.engines.runners import load as engines_api
from sleap_live.stream import cli

FAKES = Path(__file__).with_name("fakes.py")
MODELS = Path(__file__).parents[1] / "data" / "models"


def write_indexed_video(path: Path, n_frames: int, fakes, fps: int = 30) -> Path:
    """Lossless gray video whose frames carry their index (see fakes.frame_image)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "gray"
        for index in range(n_frames):
            image = fakes.frame_image(index, (24, 32, 1))[..., 0]
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="gray")))
        container.mux(stream.encode())
    return path


@pytest.fixture
def fake_engine(monkeypatch, fakes):
    """Replace model loading with the fake runner; returns the runners made."""
    made = []

    def load(models, *, engine, device):
        runner = fakes.FakeRunner()
        made.append((models, engine, device, runner))
        return runner

    monkeypatch.setattr(engines_api, "load_runner", load)
    return made


@pytest.fixture
def video(tmp_path, fakes) -> Path:
    return write_indexed_video(tmp_path / "clip.mkv", 40, fakes)


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_run_a_file_writes_every_frame(video, tmp_path, fake_engine, capsys, fakes):
    out = tmp_path / "poses.slp"
    status = cli.main(["run", str(video), "-m", "model_dir", "-o", str(out), "--batch-size", "4"])

    assert status == 0
    [(models, engine, device, runner)] = fake_engine
    assert (models, engine, device) == (["model_dir"], "auto", "auto")
    assert runner.closed
    assert runner.batch_sizes[1:] == [4] * 10
    labels = sio.load_slp(str(out), open_videos=False)
    assert [lf.frame_idx for lf in labels] == list(range(40))
    assert labels.videos[0].filename == str(video.resolve())
    np.testing.assert_array_equal(
        labels[5].instances[0].numpy(), fakes.poses_for(5).points[0].astype(np.float64)
    )
    err = capsys.readouterr().err
    assert "40/40 frames" in err and "40 frames in" in err and f"poses: {out}" in err


def test_run_without_output_writes_next_to_the_video(video, fake_engine):
    assert cli.main([str(video), "-m", "m", "-m", "m2", "--engine", "onnx", "-q"]) == 0
    assert fake_engine[0][:2] == (["m", "m2"], "onnx")
    assert len(sio.load_slp(str(video) + ".predictions.slp", open_videos=False)) == 40


def test_replay_is_live_and_stops_after_duration(tmp_path, fake_engine, capsys, fakes):
    video = write_indexed_video(tmp_path / "long.mkv", 300, fakes)
    out, recording = tmp_path / "out.slp", tmp_path / "rec.mp4"
    started = time.monotonic()
    argv = ["replay", str(video), "--fps", "100", "--duration", "0.5", "-m", "m", "-o", str(out)]
    status = cli.main([*argv, "--record", str(recording)])
    assert status == 0 and time.monotonic() - started < 2.5
    labels = sio.load_slp(str(out), open_videos=False)
    assert 10 < len(labels) < 300
    assert labels.videos[0].filename == str(recording.resolve())
    with av.open(str(recording)) as container:
        assert container.streams.video[0].frames == len(labels)
    err = capsys.readouterr().err
    assert "live · batch 1" in err and "latency p50" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "clip.mp4"], "the following arguments are required: -m/--model"),
        (["run", "-m", "m"], "give a VIDEO file or --camera DEVICE (one of them)"),
        (["run", "v.mp4", "--camera", "0", "-m", "m"], "give a VIDEO file or --camera DEVICE"),
        (["run", "v.mp4", "-m", "m", "--width", "640"], "--width only apply with --camera"),
        (["--camera", "0", "-m", "m", "--width", "64"], "give --width and --height together"),
        (["v.mp4", "-m", "m", "-o", "out.h5"], "out.h5: the pose output (-o) must be a .slp"),
        (["v.mp4", "-m", "a", "-m", "b", "-m", "c"], "give -m once, or twice for a top-down"),
        (["v.mp4", "-m", "m", "--batch-size", "0"], "argument --batch-size: must be at least 1"),
        (["v.mp4", "-m", "m", "--duration", "x"], "argument --duration: expected a number"),
        (["replay", "v.mp4", "-m", "m", "--engine", "tf"], "argument --engine: invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    line = error_line(capsys)
    assert line.startswith("sleap-live: error: ") and message in line


def test_missing_video_and_camera_are_one_line_and_exit_1(tmp_path, fake_engine, capsys):
    assert cli.main([str(tmp_path / "nope.mp4"), "-m", "m"]) == 1
    assert error_line(capsys) == f"sleap-live: error: {tmp_path / 'nope.mp4'}: no such file"
    assert cli.main(["--camera", "7", "-m", "m"]) == 1
    assert error_line(capsys) == "sleap-live: error: /dev/video7: no such camera device"
    assert fake_engine == []


def test_corrupt_video_is_one_line_and_exit_1(tmp_path, fake_engine, capsys):
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(b"\x00garbage" * 500)
    assert cli.main([str(corrupt), "-m", "m"]) == 1
    assert error_line(capsys).startswith(f"sleap-live: error: {corrupt}: ")


def test_engine_failure_mid_run_is_one_line_and_keeps_finished_frames(
    video, tmp_path, monkeypatch, capsys, fakes
):
    monkeypatch.setattr(
        engines_api, "load_runner", lambda models, **options: fakes.FakeRunner(fail_on_call=3)
    )
    out = tmp_path / "out.slp"
    assert cli.main([str(video), "-m", "m", "-o", str(out), "-q"]) == 1
    assert capsys.readouterr().err.strip() == (
        "sleap-live: error: infer stage failed: RuntimeError: engine exploded"
    )
    assert [lf.frame_idx for lf in sio.load_slp(str(out), open_videos=False)] == list(range(16))


def test_missing_model_is_one_line_and_exit_1(video, tmp_path, capsys):
    assert cli.main([str(video), "-m", str(tmp_path / "no_model")]) == 1
    assert error_line(capsys) == (
        f"sleap-live: error: {tmp_path / 'no_model'}: no such model file or directory"
    )


def test_delegated_commands(monkeypatch, capsys):
    calls = []

    class Export:
        @staticmethod
        def main(argv):
            calls.append(argv)
            return 3

    monkeypatch.setitem(sys.modules, "sleap_live_test_export", Export)
    monkeypatch.setitem(cli.DELEGATED, "export", "sleap_live_test_export")
    assert cli.main(["export", "model_dir", "-o", "x.onnx"]) == 3
    assert calls == [["model_dir", "-o", "x.onnx"]]

    monkeypatch.setitem(cli.DELEGATED, "bench", "sleap_live_no_such_module")
    assert cli.main(["bench"]) == 2
    assert (
        error_line(capsys)
        == "sleap-live: error: `sleap-live bench` is not available in this installation"
    )


def test_export_reaches_the_engines_exporter(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", "--help"])
    assert exit_info.value.code == 0
    assert "usage: sleap-live export" in capsys.readouterr().out


SIGNAL_SCRIPT = textwrap.dedent(
    """
    import importlib.util, pathlib, sys
    spec = importlib.util.spec_from_file_location("fakes", {fakes!r})
    fakes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakes)
    from sleap_live.engines.runners import load as api
    from sleap_live.stream import cli

    ready = pathlib.Path(sys.argv[1])

    class Runner(fakes.FakeRunner):
        def run(self, frames):
            poses = super().run(frames)
            if len(self.batch_sizes) == 4:
                ready.touch()
            return poses

    api.load_runner = lambda models, **options: Runner(delay=0.05)
    sys.exit(cli.main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_every_finished_frame(signum, status, tmp_path, fakes):
    video = write_indexed_video(tmp_path / "long.mkv", 2000, fakes)
    out, ready = tmp_path / "out.slp", tmp_path / "ready"
    script = tmp_path / "run.py"
    script.write_text(SIGNAL_SCRIPT.format(fakes=str(FAKES)))
    process = subprocess.Popen(
        [sys.executable, str(script), str(ready), "run", str(video), "-m", "m", "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the run never got going"
            time.sleep(0.02)
        process.send_signal(signum)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == status, err
    labels = sio.load_slp(str(out), open_videos=False)
    n = len(labels)
    assert 24 <= n < 2000
    assert [lf.frame_idx for lf in labels] == list(range(n))
    assert f"{n} frames in" in err
    assert "Traceback" not in err


REAL_RUNS = {
    # name: (model directories under tests/data/models, clip under tests/data/videos)
    "single_instance": (["single_instance"], "single"),
    "topdown": (["centroid", "centered_instance"], "multi_gray"),
}


def real_run_available(name: str) -> bool:
    dirs, _ = REAL_RUNS[name]
    return all((MODELS / d / "best.ckpt").exists() for d in dirs)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL_RUNS))
def test_real_model_end_to_end_matches_ground_truth(name, tmp_path):
    """`sleap-live run` with a trained model: every frame, poses within a few pixels."""
    if not real_run_available(name):
        pytest.skip(f"tests/data/models has no trained {name} model")
    dirs, clip = REAL_RUNS[name]
    data = Path(__file__).parents[1] / "data"
    out = tmp_path / "out.slp"
    video = data / "videos" / f"{clip}.mkv"
    models = [arg for d in dirs for arg in ("-m", str(MODELS / d))]
    options = ["-o", str(out), "--device", "cpu", "-q"]
    result = subprocess.run(
        [sys.executable, "-m", "sleap_live.stream.cli", "run", str(video), *models, *options],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    truth = np.load(data / "ground_truth" / f"{clip}.npz")
    labels = sio.load_slp(str(out), open_videos=False)
    assert [lf.frame_idx for lf in labels] == truth["frame_indices"].tolist()
    errors = []
    for frame, expected in zip(labels, truth["points"], strict=True):
        predicted = np.stack([instance.numpy() for instance in frame.instances])
        assert len(predicted) == len(expected)
        cost = np.nanmean(np.linalg.norm(predicted[:, None] - expected[None], axis=-1), axis=-1)
        rows, cols = linear_sum_assignment(cost)
        errors.append(np.linalg.norm(predicted[rows] - expected[cols], axis=-1).ravel())
    # sleap-nn's own predictions on these clips have a median error of about 1 px.
    assert np.nanmedian(np.concatenate(errors)) < 3.0
