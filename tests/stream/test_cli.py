"""The `sleap-live` command line: runs, exports, errors, exit codes, signals.

Most tests swap `load_runner` for the fake runner, so they exercise the CLI, the
sources, the pipeline and the writers without a trained model. Tests at the end
run and export real models from tests/data/models when the engines can load them.
(What the help says, and the options the subcommands share: tests/test_cli_help.py.)
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import av
import numpy as np
import pytest
import sleap_io as sio
from rich.console import Console
from scipy.optimize import linear_sum_assignment

from sleap_live import cli, engines
from sleap_live.cli import export as cli_export
from sleap_live.engines.host.frames import DeferredFrames
from sleap_live.engines.runners import load as engines_api
from sleap_live.stream import OutputOptions, Pipeline, open_source
from sleap_live.stream.runner import SPREAD_FRAMES, spread_indices
from tests.committed import require

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


class Made(list):
    """The runners `fake_engine` made, (models, engine, device, runner) each, and the
    export options (`verify`, `verify_frames`) each load was given."""

    def __init__(self) -> None:
        super().__init__()
        self.options: list[dict] = []


@pytest.fixture
def fake_engine(monkeypatch, fakes):
    """Replace model loading with the fake runner; returns the runners made."""
    made = Made()

    def load(models, *, engine, device, **options):
        runner = fakes.FakeRunner()
        made.append((models, engine, device, runner))
        made.options.append(options)
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


def test_runs_verify_an_in_memory_export_on_frames_spread_over_their_video(
    video, tmp_path, fake_engine, fakes, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where the run without -o writes its poses
    other = write_indexed_video(tmp_path / "other.mkv", 12, fakes)
    for argv in (
        ["run", str(video)],
        ["replay", str(video), "--fps", "1000"],
        ["run", str(video), "--verify-video", str(other)],
    ):
        assert (
            cli.main([*argv, "-m", "m", "-q", "-o", str(tmp_path / "out.slp"), "--overwrite"]) == 0
        )
    assert cli.main(["run", str(video), "-m", "m", "-q", "--no-verify"]) == 0
    first, replayed, given, skipped = fake_engine.options
    for options, clip, n_frames in ((first, video, 40), (replayed, video, 40), (given, other, 12)):
        assert options["verify"] is True
        deferred = options["verify_frames"]
        # Read only when the load needs them (not on a warm start), in the video's shape.
        assert isinstance(deferred, DeferredFrames) and deferred.frame_shape == (24, 32, 1)
        frames = deferred.read()
        assert frames.dtype == np.uint8
        # A clip of at most SPREAD_FRAMES frames gives them all; a longer one, frames
        # spread over it, first frame first.
        long = n_frames > SPREAD_FRAMES
        indices = spread_indices(n_frames, SPREAD_FRAMES) if long else list(range(n_frames))
        expected = [fakes.frame_image(i, (24, 32, 1)) for i in indices]
        np.testing.assert_array_equal(frames, np.stack(expected), err_msg=str(clip))
    assert skipped["verify"] is False and "verify_frames" not in skipped


@pytest.mark.parametrize("replay", [False, True])
def test_pipeline_loads_model_paths_as_run_does(replay, video, tmp_path, fake_engine):
    # `Pipeline(source, "model_dir")` and `sleap-live run` on the same arguments load
    # through one function: the same models, engine, device and verify frames.
    command = ["replay", str(video), "--fps", "1000"] if replay else ["run", str(video)]
    assert cli.main([*command, "-m", "m", "-q", "-o", str(tmp_path / "cli.slp")]) == 0
    options = {"fps": 1000.0} if replay else {}
    with open_source(video, replay=replay, **options) as source:
        Pipeline(source, "m", outputs=OutputOptions(output=tmp_path / "api.slp")).run()
    (cli_models, *cli_runtime, _), (api_models, *api_runtime, _) = fake_engine
    assert (cli_models, cli_runtime) == (api_models, api_runtime) == (["m"], ["auto", "auto"])
    from_cli, from_pipeline = fake_engine.options
    assert from_cli["verify"] is from_pipeline.get("verify", True) is True
    assert from_cli["verify_frames"].read().shape == (SPREAD_FRAMES, 24, 32, 1)
    np.testing.assert_array_equal(
        from_pipeline["verify_frames"].read(), from_cli["verify_frames"].read()
    )


def test_a_pipeline_on_a_camera_or_iterator_verifies_on_the_training_labels(fake_engine, fakes):
    frames = [fakes.frame_image(i, (24, 32, 1)) for i in range(3)]
    Pipeline(open_source(frames), "m").run()
    [options] = fake_engine.options
    assert options.get("verify_frames") is None  # load_runner's default: the labels' frames


@pytest.mark.parametrize("command", [["run"], [], ["replay", "--fps", "1000"]])
def test_without_output_poses_go_to_the_working_directory(
    command, video, tmp_path, fake_engine, monkeypatch, capsys
):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [*command[:1], str(video), *command[1:], "-m", "m", "-m", "m2", "--engine", "onnx"]
    assert cli.main(argv) == 0
    assert fake_engine[0][:2] == (["m", "m2"], "onnx")
    default = work / "clip.predictions.slp"  # the video's stem, not beside the video
    frames = len(sio.load_slp(str(default), open_videos=False))
    assert frames == 40 if command != ["replay", "--fps", "1000"] else 0 < frames <= 40
    assert sorted(path.name for path in tmp_path.iterdir()) == ["clip.mkv", "work"]
    assert f"poses: {default}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "replay"])
def test_help_says_where_poses_go_by_default(command, capsys):
    assert cli.main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default: STEM.predictions.slp in the working directory" in text.replace(
        "default: for a file, ", "default: "
    )


def test_export_without_output_writes_to_the_working_directory(tmp_path, monkeypatch, capsys):
    made = []

    def export_model(model_dirs, output, **options):
        made.append(output)
        raise KeyboardInterrupt  # stop before the report, which reads the export

    monkeypatch.setattr(engines, "export_model", export_model, raising=False)
    monkeypatch.chdir(tmp_path)
    argv = ["export", str(MODELS / "centroid"), str(MODELS / "centered_instance"), "--no-verify"]
    assert cli.main(argv) == 130
    assert made == [tmp_path / "centroid+centered_instance.onnx"]
    assert cli.main(["export", "--help"]) == 0
    assert "NAME.onnx in the working directory" in " ".join(capsys.readouterr().out.split())


def test_csv_output_and_a_lossless_recording(tmp_path, video, fake_engine, capsys):
    out, recording = tmp_path / "poses.csv", tmp_path / "rec.mkv"
    argv = ["run", str(video), "-m", "m", "-o", str(out), "-q"]
    argv += ["--record", str(recording), "--record-codec", "ffv1"]
    assert cli.main(argv) == 0
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted({int(row["frame_index"]) for row in rows}) == list(range(40))
    provenance = json.loads((tmp_path / "poses.csv.provenance.json").read_text())
    assert provenance["command"] == "run" and provenance["options"]["record_codec"] == "ffv1"
    assert provenance["options"]["output"] == str(out)
    assert provenance["models"][0]["path"] == str(Path("m").resolve())
    assert provenance["recording"]["lossless"] is True
    assert not (tmp_path / "poses.csv.journal").exists()
    assert f"poses: {out} (40 frames)" in capsys.readouterr().err


def test_replay_is_live_and_stops_after_duration(tmp_path, fake_engine, capsys, fakes):
    video = write_indexed_video(tmp_path / "long.mkv", 300, fakes)
    out, recording = tmp_path / "out.slp", tmp_path / "rec.mp4"
    argv = ["replay", str(video), "--fps", "100", "--duration", "0.5", "-m", "m", "-o", str(out)]
    status = cli.main([*argv, "--record", str(recording)])
    assert status == 0
    labels = sio.load_slp(str(out), open_videos=False)
    assert 10 < len(labels) < 300
    # A lossy recording: the poses link to the source, the provenance names the recording.
    assert labels.videos[0].filename == str(video.resolve())
    assert labels.provenance["recording"]["path"] == str(recording.resolve())
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
        (["v.mp4", "-m", "m", "-o", "out.txt"], "out.txt: cannot write poses to a .txt file"),
        (["v.mp4", "-m", "m", "--record", "r.mp4", "--record-codec", "ffv1"], "r.mp4: a ffv1"),
        (["v.mp4", "-m", "m", "--record-quality", "52"], "--record-quality: must be at most 51"),
        (["v.mp4", *["-m", "a"] * 4], "give -m once, twice for a top-down model"),
        (["v.mp4", "-m", "m", "--batch-size", "0"], "argument --batch-size: must be at least 1"),
        (["v.mp4", "-m", "m", "--duration", "x"], "argument --duration: expected a number"),
        (["replay", "v.mp4", "-m", "m", "--engine", "tf"], "argument --engine: invalid choice"),
        (["v.mp4", "-m", "m", "--decoder", "cuda"], "argument --decoder: invalid choice"),
        (["--camera", "0", "-m", "m", "--decoder", "nvdec"], "--decoder applies to video files"),
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


def test_corrupt_video_is_one_line_and_exit_1(tmp_path, fake_engine, capsys, monkeypatch):
    # No -o: the default output's journal is claimed in the working directory before
    # the video is read, so the run goes in a folder of its own.
    monkeypatch.chdir(tmp_path)
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


def test_export_help_is_the_export_subcommand(capsys):
    assert cli.main(["export", "--help"]) == 0
    assert "usage: sleap-live export" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["a", "b", "c", "d"], "give one model directory, two for a top-down model"),
        (["m", "-f", "caffe"], "argument -f/--format: invalid choice: 'caffe'"),
        (["m", "--opset", "0"], "argument --opset: must be at least 1, got 0"),
        ([], "the following arguments are required: MODEL_DIR"),
        (
            ["m", "--verify-video", "v.mp4", "--no-verify"],
            "argument --no-verify: not allowed with argument --verify-video",
        ),
    ],
)
def test_export_bad_arguments_are_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(["export", *argv]) == 2
    line = error_line(capsys)
    assert line.startswith("sleap-live: error: ") and message in line


def test_export_of_a_missing_model_is_one_line_and_exit_1(tmp_path, capsys):
    missing = tmp_path / "no_model"
    assert cli.main(["export", str(missing), "-o", str(tmp_path / "out.onnx")]) == 1
    line = error_line(capsys)
    assert line.startswith(f"sleap-live: error: {missing}")
    assert not (tmp_path / "out.onnx").exists()


def test_export_verified_on_a_missing_video_is_one_line_and_exit_1(tmp_path, capsys):
    video = tmp_path / "nope.mp4"
    assert cli.main(["export", "model_dir", "--verify-video", str(video)]) == 1
    assert error_line(capsys) == f"sleap-live: error: {video}: no such file"


def test_export_interrupted_exits_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engines, "export_model", interrupted, raising=False)
    assert cli.main(["export", "model_dir"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_export_defaults_are_the_exporters():
    """The parser spells the exporter's defaults out (it must not import torch to build)."""
    from sleap_live.engines import export_model
    from sleap_live.engines.export import EXPORT_FORMATS

    assert tuple(cli_export.ENDINGS) == EXPORT_FORMATS
    parameters = inspect.signature(export_model).parameters
    args = cli.parser().parse_args(["export", "model_dir"])
    assert args.opset == cli_export.DEFAULT_OPSET == parameters["opset"].default
    assert args.format == parameters["format"].default == "onnx"
    assert args.verify is parameters["verify"].default is True


def test_verification_table_is_never_cut_at_80_columns():
    outputs = [
        "instance_frame",
        "points",
        "point_scores",
        "instance_scores",
        "class_scores",
        "centroid_points",
        "centroid_scores",
    ]
    checks = [
        {
            "frames": [batch, 240 + batch, 320 + batch, 3],
            "instances": 10 + batch,
            "max_abs_diff": {name: batch * 1.25e-5 * (i + 1) for i, name in enumerate(outputs)},
            "agreement": "near-ties" if batch == 2 else "noise",
            "ties": 1 if batch == 2 else 0,
            "bound": "0.0018 px, scores 0.00023 relative (from the graph: 3813 sums deep)",
        }
        for batch in range(1, 6)
    ]
    file = io.StringIO()
    console = Console(file=file, width=80)
    cli_export.print_wide(console, cli_export.verification_table(checks))
    text = file.getvalue()
    assert console.width == 80
    assert "…" not in text
    for check in checks:
        assert "×".join(map(str, check["frames"])) in text
        assert f"{check['instances']} instances" in text
        assert all(f"{diff:.2g}" in text for diff in check["max_abs_diff"].values())
    assert all(f"│ {name} " in text for name in outputs)
    # The last row says each batch's outcome; the caption, the float32 bound.
    assert "│ outcome " in text and "1 near-tie " in text and text.count(" noise ") == 4
    assert "bound: 0.0018 px" in text


@pytest.mark.slow
@pytest.mark.parametrize(("format", "suffix"), [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_export_writes_a_verified_model_and_shows_its_check(
    format, suffix, tmp_path, monkeypatch, capsys
):
    require_real_run("single_instance")
    from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path

    model = shutil.copytree(MODELS / "single_instance", tmp_path / "single_instance")
    monkeypatch.setenv("COLUMNS", "40")  # narrower than the table: still nothing is cut
    monkeypatch.chdir(tmp_path)
    assert cli.main(["export", str(model), "--format", format]) == 0

    path = tmp_path / f"single_instance{suffix}"  # the default output, not in the model
    metadata = ExportMetadata.from_json(sidecar_path(path).read_text(), str(path))
    assert metadata.format == format and metadata.verification
    err = capsys.readouterr().err
    assert f"exported single_instance model to {path}" in err
    assert "…" not in err
    for check in metadata.verification:
        assert "×".join(map(str, check["frames"])) in err
        assert all(f"{diff:.2g}" in err for diff in check["max_abs_diff"].values())
    assert all(name in err for name in metadata.output_names)


@pytest.mark.slow
def test_export_verified_on_a_video(tmp_path, capsys):
    require_real_run("single_instance")
    from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path

    video = Path(__file__).parents[1] / "data" / "videos" / "single.mkv"
    out = tmp_path / "single.onnx"
    argv = ["export", str(MODELS / "single_instance"), "-o", str(out), "--verify-video"]
    assert cli.main([*argv, str(video)]) == 0
    checks = ExportMetadata.from_json(sidecar_path(out).read_text(), str(out)).verification
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        size = [stream.height, stream.width]
    # The first check batch is frames of the video at their own size.
    assert checks[0]["frames"][1:3] == size
    assert f"exported single_instance model to {out}" in capsys.readouterr().err


@pytest.mark.slow
def test_export_with_the_tensorrt_profile_lints_clean(tmp_path, capsys):
    require_real_run("single_instance")
    from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path

    video = Path(__file__).parents[1] / "data" / "videos" / "single.mkv"
    out = tmp_path / "single.onnx"
    argv = ["export", str(MODELS / "single_instance"), "-o", str(out), "--profile", "tensorrt"]
    assert cli.main([*argv, "--verify-video", str(video)]) == 0
    assert ExportMetadata.from_json(sidecar_path(out).read_text(), str(out)).profile == "tensorrt"
    capsys.readouterr()
    assert cli.main(["check-tensorrt", str(out)]) == 0
    assert capsys.readouterr().out.startswith("clean")


@pytest.mark.slow
def test_export_without_verification_into_a_directory(tmp_path, capsys):
    require_real_run("single_instance")
    out = tmp_path / "exported"
    argv = ["export", str(MODELS / "single_instance"), "-o", str(out), "--no-verify"]
    assert cli.main(argv) == 0
    assert (out / "model.onnx").exists() and (out / "model.onnx.json").exists()
    err = capsys.readouterr().err
    assert f"exported single_instance model to {out / 'model.onnx'}" in err
    assert "largest difference" not in err
    # A file whose suffix is not the format's is a usage error, before any work.
    assert cli.main([*argv[:2], "-o", str(tmp_path / "m.pt")]) == 2
    assert error_line(capsys).startswith("sleap-live: error: ")
    assert not (tmp_path / "m.pt").exists()


SIGNAL_SCRIPT = textwrap.dedent(
    """
    import importlib.util, pathlib, sys
    spec = importlib.util.spec_from_file_location("fakes", {fakes!r})
    fakes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakes)
    from sleap_live.engines.runners import load as api
    from sleap_live import cli

    ready = pathlib.Path(sys.argv[1])

    class Runner(fakes.FakeRunner):
        def run(self, frames, *, stream=None):
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


def require_real_run(name: str) -> None:
    dirs, _ = REAL_RUNS[name]
    require(*(MODELS / d / "best.ckpt" for d in dirs))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL_RUNS))
@pytest.mark.usefixtures("warm_export_cache")  # the run loads the suite's export, not its own
def test_real_model_end_to_end_matches_ground_truth(name, tmp_path):
    """`sleap-live run` with a trained model: every frame, poses within a few pixels."""
    require_real_run(name)
    dirs, clip = REAL_RUNS[name]
    data = Path(__file__).parents[1] / "data"
    out = tmp_path / "out.slp"
    video = data / "videos" / f"{clip}.mkv"
    models = [arg for d in dirs for arg in ("-m", str(MODELS / d))]
    options = ["-o", str(out), "--device", "cpu", "-q"]
    result = subprocess.run(
        [sys.executable, "-m", "sleap_live", "run", str(video), *models, *options],
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


def test_run_prints_its_path_and_why_nvdec_was_not_used(
    video, tmp_path, fake_engine, capsys, monkeypatch, caplog
):
    from sleap_live.stream.sources import nvdec

    monkeypatch.chdir(tmp_path)  # where the runs without -o write their poses

    monkeypatch.setattr(nvdec, "nvdec_unavailable", lambda info: "no GPU in this test")
    notice = "NVDEC not used: no GPU in this test; decoding with PyAV on the CPU"
    assert cli.main(["run", str(video), "-m", "m", "--decoder", "auto"]) == 0
    err = capsys.readouterr().err
    assert err.count(notice) == 1 and "path: pyav decode -> FakeRunner on cpu\n" in err
    # Asked for explicitly, the notice is a logged warning (stderr without handlers).
    caplog.clear()
    assert cli.main(["run", str(video), "-m", "m", "--decoder", "nvdec", "--overwrite"]) == 0
    assert notice not in capsys.readouterr().err
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", notice)]
    assert cli.main(["run", str(video), "-m", "m", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "NVDEC" not in err and "path: pyav decode -> FakeRunner on cpu" in err
    assert cli.main(["run", str(video), "-m", "m", "-q", "--overwrite"]) == 0
    assert "path:" not in capsys.readouterr().err


def test_nvdec_decodes_on_the_gpu_the_engine_runs_on(
    video, tmp_path, fake_engine, monkeypatch, caplog
):
    from sleap_live.stream.sources import nvdec

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nvdec, "nvdec_unavailable", lambda info: None)
    devices = []

    def no_nvdec_here(path, *, device, **options):
        devices.append(device)
        raise nvdec.NvdecStartError(f"{path}: NVDEC cannot start on {device}: a test")

    monkeypatch.setattr(nvdec, "NvdecSource", no_nvdec_here)
    rerun = ["-m", "m", "-q", "--decoder", "nvdec", "--overwrite"]
    assert cli.main(["run", str(video), *rerun]) == 0
    assert cli.main(["run", str(video), *rerun, "--device", "cuda:1"]) == 0
    assert devices == ["cuda", "cuda:1"]
    assert [r.getMessage() for r in caplog.records][-1] == (
        f"NVDEC not used: {video}: NVDEC cannot start on cuda:1: a test; decoding with PyAV "
        "on the CPU"
    )


# --- inference settings ---------------------------------------------------------------


def test_inference_settings_reach_the_model_loader(video, tmp_path, fake_engine):
    from sleap_live.engines.settings import InferenceSettings

    out = ["-m", "m", "-q", "--no-verify", "-o", str(tmp_path / "out.slp")]
    assert cli.main(["run", str(video), *out]) == 0
    flags = [
        "--peak-threshold",
        "0.5",
        "--max-instances",
        "2",
        "--integral-refinement",
        "none",
        "--min-instance-peaks",
        "3",
        "--min-line-scores",
        "0.4",
    ]
    out.append("--overwrite")  # each run replaces the last one's poses
    assert cli.main(["run", str(video), *out, *flags]) == 0
    assert (
        cli.main(["replay", str(video), "--fps", "1000", *out, "--min-instance-peaks", "0.5"]) == 0
    )
    plain, given, replayed = (options["settings"] for options in fake_engine.options)
    # None: a model directory gets sleap-nn's defaults, an export its own.
    assert plain is None
    assert given == InferenceSettings(
        peak_threshold=0.5,
        max_instances=2,
        integral_refinement=False,
        min_instance_peaks=3,
        min_line_scores=0.4,
    )
    assert replayed == InferenceSettings(min_instance_peaks=0.5)
    # The run's options, recorded in the outputs' provenance, hold them.
    provenance = sio.load_slp(str(tmp_path / "out.slp"), open_videos=False).provenance
    assert provenance["options"]["min_instance_peaks"] == 0.5


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--peak-threshold", "2"], "argument --peak-threshold: peak_threshold must be a number"),
        (["--peak-threshold", "x"], "argument --peak-threshold: expected a number, got 'x'"),
        (["--max-instances", "0"], "argument --max-instances: max_instances must be a whole"),
        (["--max-instances", "1.5"], "argument --max-instances: expected a number, got '1.5'"),
        (["--integral-patch-size", "4"], "integral_patch_size must be an odd whole number"),
        (["--integral-refinement", "off"], "argument --integral-refinement: invalid choice"),
        (["--n-points", "0"], "argument --n-points: n_points must be a whole number from 1"),
        (["--min-instance-peaks", "1.5"], "min_instance_peaks as a fraction of the nodes must"),
        (["--max-edge-length-ratio", "0"], "max_edge_length_ratio must be a number above 0"),
        (["--dist-penalty-weight", "-1"], "dist_penalty_weight must be a number of at least 0"),
        (["--min-line-scores", "nan"], "min_line_scores must be a finite number"),
        (["--centroid-peak-threshold", "-0.5"], "centroid_peak_threshold must be a number"),
    ],
)
def test_inference_settings_out_of_range_are_one_line_and_exit_2(flags, message, capsys):
    for command in (["run", "v.mp4", "-m", "m"], ["export", "model_dir"]):
        assert cli.main([*command, *flags]) == 2
        line = error_line(capsys)
        assert line.startswith("sleap-live: error: ") and message in line, line


def test_export_builds_the_inference_settings_into_the_model(monkeypatch):
    from sleap_live.engines.settings import InferenceSettings

    given = []

    def export_model(model_dirs, output, **options):
        given.append(options["settings"])
        raise KeyboardInterrupt  # stop before the report, which reads the export

    monkeypatch.setattr(engines, "export_model", export_model, raising=False)
    assert cli.main(["export", "m", "--no-verify"]) == 130
    argv = ["export", "m", "--no-verify", "--max-instances", "3", "--n-points", "5"]
    assert cli.main(argv) == 130
    assert given == [None, InferenceSettings(max_instances=3, n_points=5)]


@pytest.mark.parametrize("model_type", ["centroid", "single_instance"])
def test_a_centroid_model_alone_says_so_in_one_line(
    model_type, video, tmp_path, monkeypatch, fakes, capsys
):
    """Issue 24: a top-down pair given with only its centroid model ran silently."""
    info = attrs.evolve(fakes.INFO, model_type=model_type)
    monkeypatch.setattr(
        engines_api, "load_runner", lambda models, **options: fakes.FakeRunner(info=info)
    )
    out = tmp_path / "poses.slp"
    assert cli.main(["run", str(video), "-m", "centroid", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "centroid model alone" in line]
    if model_type == "single_instance":
        assert not lines
        return
    assert lines == [
        "a centroid model alone: one point per animal (head, tail), no body parts; for "
        "whole poses give its centered-instance model too (a second -m)"
    ]
