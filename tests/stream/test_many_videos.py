"""Many videos, an output each (`run_many`, `sleap-live run DIR`): in this process and
in local worker processes, the same poses; resume; a corrupt video; a killed worker.

The Ray runs are in test_many_videos_ray.py (one Ray session for them all).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from sleap_live import LoadOptions, run_many
from sleap_live.cli import main
from sleap_live.stream.many.finish import unfinished_files, unfinished_path
from sleap_live.stream.many.videos import VideoListError, find_videos, plan_jobs
from sleap_live.stream.outputs.journal import MAGIC, journal_path
from tests.stream.many_videos import (
    MODEL,
    MULTI_MODEL,
    MULTI_VIDEO,
    SlowToNote,
    corrupt_video,
    cut_clips,
    frame_count,
    in_background,
    pose_arrays,
    track_names,
    writer_pid_once_saving,
)

CLIPS = {"a": (0, 6), "b": (40, 4), "c": (90, 30)}
ENGINE = {"load": LoadOptions(engine="onnx", device="cpu", threads=1)}
# Two clips of the multi-animal video, and a tracker setting other than the default,
# so the settings are seen to reach the workers.
TRACKED_CLIPS = {"early": (0, 10), "late": (60, 10)}
TRACKING = ["--tracking", "--tracking-window-size", "3"]
ONNX_CPU = ["--engine", "onnx", "--device", "cpu", "-q"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Three short clips and a corrupt video, in one folder."""
    path = tmp_path_factory.mktemp("videos")
    cut_clips(path, CLIPS)
    corrupt_video(path / "broken.mp4")
    return path


@pytest.fixture(scope="module")
def sequential(folder, tmp_path_factory):
    """The folder run in this process, one video after another: (result, output folder)."""
    out = tmp_path_factory.mktemp("sequential")
    return run_many(folder, MODEL, output_dir=out, workers=1, streams=1, **ENGINE), out


def test_a_folder_in_this_process_reports_the_corrupt_video_and_finishes_the_rest(
    sequential, folder
):
    run, out = sequential
    assert [Path(result.video).name for result in run.results] == [
        "a.mkv",
        "b.mkv",
        "broken.mp4",
        "c.mkv",
    ]
    statuses = {Path(result.video).stem: result.status for result in run.results}
    assert statuses == {"a": "done", "b": "done", "broken": "failed", "c": "done"}
    (broken,) = run.failed
    assert broken.error.startswith(str(folder / "broken.mp4"))
    assert not run.ok
    for name, (_, count) in CLIPS.items():
        assert frame_count(out / f"{name}.predictions.slp") == count
    assert sorted(path.name for path in out.iterdir()) == [
        "a.predictions.slp",
        "b.predictions.slp",
        "c.predictions.slp",
    ]


def test_local_workers_give_the_same_poses_with_a_worker_killed_mid_video(
    sequential, folder, tmp_path
):
    """Two worker processes, two videos in flight in each, batches of 2 (8 in this
    process); the process writing c is killed once it saved frames: c (and whatever
    else that worker had in flight) is started again and comes out whole."""
    reference, reference_out = sequential
    running = in_background(
        run_many,
        folder,
        MODEL,
        output_dir=tmp_path,
        workers=2,
        streams=2,
        batch_size=2,
        save_interval=0.01,
        **ENGINE,
    )
    pid = writer_pid_once_saving(tmp_path / "c.predictions.slp")
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    run = running.result(timeout=180)
    assert run.mode == "2 local workers"
    assert [result.status for result in run.results] == [
        result.status for result in reference.results
    ]
    c = run.results[-1]
    assert c.attempts == 2 and c.redone and c.worker != pid
    assert os.getpid() not in {result.worker for result in run.results}
    for name in CLIPS:
        output = f"{name}.predictions.slp"
        assert pose_arrays(tmp_path / output) == pose_arrays(reference_out / output)
    assert unfinished_files(tmp_path / "c.predictions.slp") == []


def test_a_second_run_skips_finished_videos_and_redoes_a_half_written_one(
    sequential, folder, tmp_path
):
    _, reference_out = sequential
    for name in ("a", "c"):
        (tmp_path / f"{name}.predictions.slp").write_bytes(
            (reference_out / f"{name}.predictions.slp").read_bytes()
        )
    # b was killed halfway: its unfinished output and a journal with a torn chunk.
    half = unfinished_path(tmp_path / "b.predictions.slp")
    half.write_bytes(b"half")
    journal_path(half).write_bytes(MAGIC + b"H\x05\x00\x00\x00")
    run = run_many(
        [folder / "a.mkv", folder / "b.mkv", folder / "c.mkv"],
        MODEL,
        output_dir=tmp_path,
        workers=1,
        **ENGINE,
    )
    statuses = {Path(result.video).stem: result.status for result in run.results}
    assert statuses == {"a": "skipped", "b": "done", "c": "skipped"}
    (redone,) = [result for result in run.results if result.status == "done"]
    assert redone.redone
    assert pose_arrays(tmp_path / "b.predictions.slp") == pose_arrays(
        reference_out / "b.predictions.slp"
    )
    assert unfinished_files(tmp_path / "b.predictions.slp") == []


def test_the_command_line_prints_every_video_and_exits_1_when_one_failed(
    tmp_path, capsys, monkeypatch
):
    videos = tmp_path / "videos"
    cut_clips(videos, {"short": (0, 8)})
    corrupt_video(videos / "broken.mp4")
    monkeypatch.chdir(tmp_path)
    arguments = ["run", "videos", "-m", str(MODEL), "--engine", "onnx", "--device", "cpu"]
    assert main(arguments) == 1
    printed = capsys.readouterr()
    assert "short.mkv" in printed.out and "1 done, 0 skipped, 1 failed" in printed.out
    assert "broken.mp4: failed:" in printed.err
    assert (tmp_path / "short.predictions.slp").exists()
    # Again: the finished video is skipped, the broken one fails again.
    output = tmp_path / "short.predictions.slp"
    before = output.stat().st_mtime_ns
    assert main(arguments) == 1
    printed = capsys.readouterr()
    assert "0 done, 1 skipped, 1 failed" in printed.out and "broken.mp4: failed:" in printed.err
    assert output.stat().st_mtime_ns == before
    # With --overwrite the video is redone, its output replaced once complete.
    assert main([*arguments, "-q", "--overwrite"]) == 1
    assert output.stat().st_mtime_ns != before
    assert "broken.mp4: failed:" in capsys.readouterr().err
    output.unlink()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-o", "x.slp"], "-o names one file; give --output-dir and --name-pattern"),
        (["--record-overlay", "x.mp4"], "`sleap-live render OUTPUT -o VIDEO`"),
        (["--preview-port", "0"], "--preview-port, --preview-host and --preview-hold apply"),
        (["--width", "64"], "--width only apply with --camera"),
        (["--outputs-to", "driver"], "--outputs-to driver applies with --cluster"),
        (["--publish", "tcp://127.0.0.1:5599"], "--publish binds one endpoint"),
        (["--name-pattern", "{stem}.txt"], "{stem}.txt: cannot write poses to a .txt file"),
        (["--name-pattern", "poses.slp"], "needs a field"),
        # A missing one is made (see the Ctrl-C test); a file is refused.
        (["--output-dir", "pyproject.toml"], "pyproject.toml: the output folder is a file"),
    ],
)
def test_the_command_line_refuses_what_does_not_apply(tmp_path, capsys, extra, message):
    cut_clips(tmp_path, {"one": (0, 2), "two": (2, 2)})
    arguments = ["run", str(tmp_path), "-m", str(MODEL), "--output-dir", str(tmp_path)]
    assert main([*arguments, *extra]) in (1, 2)
    assert message in capsys.readouterr().err


def test_videos_are_found_in_folders_and_patterns_and_outputs_never_collide(tmp_path):
    for folder in ("day1", "day2"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cage.mp4").write_bytes(b"")
        (tmp_path / folder / "notes.txt").write_bytes(b"")
    found = find_videos([tmp_path / "day1", str(tmp_path / "day*" / "*.mp4")])
    assert found == [tmp_path / "day1" / "cage.mp4", tmp_path / "day2" / "cage.mp4"]
    with pytest.raises(VideoListError, match=r"would both write .*\{parent\}"):
        plan_jobs(found, output_dir=tmp_path)
    jobs = plan_jobs(found, pattern="{parent}_{stem}.h5", output_dir=tmp_path)
    assert [job.output.name for job in jobs] == ["day1_cage.h5", "day2_cage.h5"]
    with pytest.raises(VideoListError, match="matches no file"):
        find_videos([str(tmp_path / "*.avi")])
    with pytest.raises(VideoListError, match="no video in this folder"):
        find_videos([tmp_path])


def test_a_run_stopped_with_ctrl_c_leaves_no_output(tmp_path, monkeypatch):
    """Stopped videos fail as stopped and leave nothing behind (a rerun redoes them)."""
    from sleap_live.stream.many import worker as worker_module

    (video,) = cut_clips(tmp_path / "videos", {"clip": (0, 12)})
    stopper = threading.Event()
    original = worker_module.VideoWorker._run

    def run_then_stop(self, job):
        self.stop()
        stopper.set()
        return original(self, job)

    monkeypatch.setattr(worker_module.VideoWorker, "_run", run_then_stop)
    run = run_many(video, MODEL, output_dir=tmp_path, workers=1, **ENGINE)
    assert stopper.is_set()
    (result,) = run.results
    assert result.status == "stopped" and "stopped" in (result.error or "")
    assert not (tmp_path / "clip.predictions.slp").exists()
    assert unfinished_files(tmp_path / "clip.predictions.slp") == []


def test_ctrl_c_in_a_folder_run_answers_at_once_and_the_table_marks_the_video(
    tmp_path, monkeypatch, capsys
):
    """Issue 37: the first Ctrl-C said nothing until the video in flight had run to
    its end, then exited with no table."""
    from sleap_live.stream.many.display import ManyProgress

    monkeypatch.chdir(tmp_path)  # the table names videos/b.mkv, short enough for one line
    videos = tmp_path / "videos"
    cut_clips(videos, {"a": (0, 3), "b": (10, 40)})
    told = threading.Event()
    original_progress, original_stopping = ManyProgress.progress, ManyProgress.stopping

    def progress(self, index, frames, total):
        original_progress(self, index, frames, total)
        if index == 1 and frames == 3:  # b, three frames in: Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
            # b goes on only once the interrupt was told: at once, not at b's end.
            assert told.wait(60), "the interrupt was not told while b ran"

    def stopping(self, jobs):
        original_stopping(self, jobs)
        told.set()

    monkeypatch.setattr(ManyProgress, "progress", progress)
    monkeypatch.setattr(ManyProgress, "stopping", stopping)
    out = tmp_path / "out" / "poses"  # made, as `mkdir -p` would (the README's command)
    arguments = ["run", str(videos), "-m", str(MODEL), "--output-dir", str(out), "--streams", "1"]
    assert main([*arguments, "--engine", "onnx", "--device", "cpu"]) == 130
    printed = capsys.readouterr()
    assert "sleap-live: interrupted: stopping videos/b.mkv (frame 3)" in printed.err
    assert "Ctrl-C twice more to exit at once" in printed.err
    assert "1 done, 0 skipped, 0 failed, 1 stopped" in printed.out  # the table's caption
    (row,) = [line for line in printed.out.splitlines() if "videos/b.mkv" in line]
    assert "stopped at frame 3" in row
    assert sorted(path.name for path in out.iterdir()) == ["a.predictions.slp"]


def test_ctrl_c_in_a_run_of_local_workers_stops_them_and_prints_the_table(
    tmp_path, monkeypatch, capsys
):
    from sleap_live.stream.many.display import ManyProgress

    monkeypatch.chdir(tmp_path)
    videos = tmp_path / "videos"
    cut_clips(videos, {"a": (0, 3), "b": (10, 3)})
    original = ManyProgress.started

    def started(self, job):
        original(self, job)
        if job.index == 1:  # b handed to a worker: Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(ManyProgress, "started", started)
    arguments = ["run", str(videos), "-m", str(MODEL), "--output-dir", "out", "--workers", "2"]
    assert main([*arguments, "--engine", "onnx", "--device", "cpu", "--threads", "1"]) == 130
    printed = capsys.readouterr()
    assert "sleap-live: interrupted: stopping videos/b.mkv" in printed.err
    assert "1 done, 0 skipped, 0 failed, 1 stopped" in printed.out
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["a.predictions.slp"]


def test_the_progress_counts_the_frames_of_the_video_in_flight():
    import io

    from rich.console import Console

    from sleap_live.stream.many.display import ManyProgress
    from sleap_live.stream.many.videos import VideoJob

    text = io.StringIO()
    console = Console(file=text, width=120)
    progress = ManyProgress(3, console, clock=iter([0.0, 10.0, 20.0]).__next__)
    progress.started(VideoJob(0, Path("long.mp4"), Path("long.slp"), False))
    progress.progress(0, 120, 900)
    console.print(progress)
    shown = text.getvalue()
    assert "0/3 videos  120 frames  12.0 fps" in shown and "long.mp4 120/900 frames" in shown
    idle = ManyProgress(3, console, clock=iter([0.0, 1.0]).__next__)
    text.truncate(0)
    console.print(idle)
    assert "now:" not in text.getvalue()  # no stray "now: -" with nothing in flight


@pytest.fixture(scope="module")
def tracked_alone(tmp_path_factory) -> tuple[Path, Path]:
    """Two clips of the multi-animal video, each tracked alone by `sleap-live run
    VIDEO --tracking`: (the clips' folder, the folder of their outputs)."""
    clips = tmp_path_factory.mktemp("tracked_clips")
    cut_clips(clips, TRACKED_CLIPS, MULTI_VIDEO)
    alone = tmp_path_factory.mktemp("tracked_alone")
    for name in TRACKED_CLIPS:
        output = alone / f"{name}.predictions.slp"
        command = ["run", str(clips / f"{name}.mkv"), "-m", str(MULTI_MODEL), "-o", str(output)]
        assert main([*command, *ONNX_CPU, *TRACKING]) == 0
    return clips, alone


@pytest.mark.parametrize("workers", ["1", "2"])
def test_tracking_over_many_videos_gives_each_video_the_ids_of_a_run_alone(
    tracked_alone, tmp_path, workers
):
    """In this process and in two local workers, two videos in flight per worker (so a
    tracker shared between videos would mix their ids): each video's track ids are
    those `run VIDEO --tracking` gives it alone."""
    clips, alone = tracked_alone
    command = ["run", str(clips), "-m", str(MULTI_MODEL), "--output-dir", str(tmp_path)]
    assert main([*command, "--workers", workers, "--streams", "2", *ONNX_CPU, *TRACKING]) == 0
    for name in TRACKED_CLIPS:
        output = f"{name}.predictions.slp"
        tracks = track_names(tmp_path / output)
        assert tracks == track_names(alone / output)
        assert len({track for frame in tracks for track in frame}) > 1
        assert pose_arrays(tmp_path / output) == pose_arrays(alone / output)


@pytest.mark.parametrize("workers", [1, 2])
def test_no_video_starts_after_the_duration_and_the_rest_are_left_for_the_next_run(
    sequential, folder, tmp_path, workers
):
    _, reference_out = sequential
    report = SlowToNote(1.5)
    run = run_many(
        folder,
        MODEL,
        output_dir=tmp_path,
        workers=workers,
        streams=1,
        duration=1.0,
        report=report,
        **ENGINE,
    )
    assert report.started_videos == ["a.mkv"]
    assert [(Path(r.video).stem, r.status) for r in run.results] == [
        ("a", "done"),
        ("b", "left"),
        ("broken", "left"),
        ("c", "left"),
    ]
    assert run.ok and len(run.left) == 3
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.predictions.slp"]
    assert pose_arrays(tmp_path / "a.predictions.slp") == pose_arrays(
        reference_out / "a.predictions.slp"
    )


def test_the_command_line_says_what_the_duration_left(folder, tmp_path, capsys):
    arguments = ["run", str(folder), "-m", str(MODEL), "--output-dir", str(tmp_path)]
    assert main([*arguments, "--duration", "1e-9"]) == 0
    printed = capsys.readouterr()
    assert "0 done, 0 skipped, 0 failed, 4 left for the next run" in printed.out
    assert "4 videos left for the next run (--duration 1e-09 s was up)" in printed.err
    assert list(tmp_path.iterdir()) == []
