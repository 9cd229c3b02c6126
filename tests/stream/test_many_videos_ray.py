"""Many videos on Ray (`run_many(cluster=...)`, `--cluster`): one Ray session on this
machine for the module (2 CPUs, 2 actors), the poses of a run in this process, a
killed actor's video retried by Ray to a complete output, and outputs returned to
the driver and written there under the same resume rules.

Ray is in the `test` extra: without it this module fails to import, as it should.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from sleap_live import LoadOptions, run_many
from sleap_live.stream.many import cluster
from sleap_live.stream.many.finish import unfinished_files, unfinished_path
from sleap_live.stream.outputs.journal import journal_path
from tests.stream.many_videos import (
    MODEL,
    SlowToNote,
    corrupt_video,
    cut_clips,
    in_background,
    pose_arrays,
    writer_pid_once_saving,
)

# Imported as `--cluster local` imports it: its servers on loopback only.
ray = cluster.import_ray(local=True)

CLIPS = {"a": (0, 6), "b": (50, 4), "c": (100, 30)}
ENGINE = {"load": LoadOptions(engine="onnx", device="cpu", threads=1)}


@pytest.fixture(scope="module")
def ray_session():
    """Ray on this machine with 2 CPUs, started once for the module as `--cluster
    local` starts it (`cluster.local_ray`); `run_many` uses the session it finds
    rather than starting one. Gives the warning it made (None on loopback)."""
    with cluster.local_ray(ray, num_cpus=2) as warning:
        yield warning


def living_descendants() -> dict[int, tuple[str, str]]:
    """This process and its living descendants: pid -> (name, command line). A child
    another test in this worker left, exited or a zombie, is not Ray's and is left out."""
    me = psutil.Process()
    found = {}
    for process in [me, *me.children(recursive=True)]:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found[process.pid] = (process.name(), " ".join(process.cmdline()))
        except psutil.Error:  # it exited while this looked
            pass
    return found


def test_a_local_ray_cluster_listens_on_loopback_only(ray_session):
    # Issue #36: gcs_server, raylets, workers and the driver listened on every
    # interface, the runtime-env agent on the host's address, the dashboard was on.
    assert ray_session is None
    ray_processes = living_descendants()
    listening = [
        (ray_processes[c.pid][0], c.laddr.ip)
        for c in psutil.net_connections(kind="inet")
        if c.pid in ray_processes and c.status == psutil.CONN_LISTEN
    ]
    names = {name for name, _ in listening}
    assert {"gcs_server", "raylet"} <= names, listening
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for _, ip in listening), listening
    commands = [command for _, command in ray_processes.values()]
    # Ray's head keeps a minimal dashboard process (usage stats), its web UI off.
    dashboards = [command for command in commands if "dashboard/dashboard.py" in command]
    assert all("--disable-frontend" in command for command in dashboards), dashboards
    # ray.init's own SIGTERM handler (sys.exit) is not left in the driver: SIGTERM
    # stops a folder run as Ctrl-C does (issue 37).
    assert not getattr(signal.getsignal(signal.SIGTERM), "__module__", "").startswith("ray")


@pytest.fixture(scope="module")
def here(tmp_path_factory) -> tuple[Path, Path]:
    """The clips and a corrupt video, and a run over them in this process: (the
    videos' folder, the outputs' folder)."""
    folder = tmp_path_factory.mktemp("videos")
    cut_clips(folder, CLIPS)
    corrupt_video(folder / "broken.mp4")
    out = tmp_path_factory.mktemp("here")
    run = run_many(folder, MODEL, output_dir=out, workers=1, streams=1, **ENGINE)
    assert [r.status for r in run.results] == ["done", "done", "failed", "done"]
    return folder, out


def test_ray_gives_the_poses_of_a_run_in_this_process_with_an_actor_killed(
    ray_session, here, tmp_path
):
    """Two actors on Ray; the actor process writing c is killed once it saved frames:
    Ray restarts it and runs its tasks again, and c comes out whole, with the poses
    of a run in this process."""
    folder, here_out = here
    (tmp_path / "ray").mkdir()
    running = in_background(
        run_many,
        folder,
        MODEL,
        output_dir=tmp_path / "ray",
        cluster="local",
        workers=2,
        batch_size=2,
        save_interval=0.01,
        **ENGINE,
    )
    pid = writer_pid_once_saving(tmp_path / "ray" / "c.predictions.slp")
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    on_ray = running.result(timeout=180)
    assert on_ray.mode == "Ray (local)"
    assert ray.is_initialized()  # the session it found is left running
    assert [(Path(r.video).name, r.status) for r in on_ray.results] == [
        ("a.mkv", "done"),
        ("b.mkv", "done"),
        ("broken.mp4", "failed"),
        ("c.mkv", "done"),
    ]
    c = on_ray.results[-1]
    assert c.redone and c.worker != pid
    assert os.getpid() not in {r.worker for r in on_ray.results}
    for name in CLIPS:
        output = f"{name}.predictions.slp"
        assert pose_arrays(tmp_path / "ray" / output) == pose_arrays(here_out / output)
    assert unfinished_files(tmp_path / "ray" / "c.predictions.slp") == []


def test_outputs_returned_to_the_driver_are_written_by_it_with_the_same_resume_rules(
    ray_session, here, tmp_path, monkeypatch
):
    """One actor, two videos in flight, each returning its output's bytes: the driver
    writes each (a complete output is skipped, a half-written one the driver left is
    discarded and the video redone) and the poses are those of a run in this process.
    The actor is killed once c is half-written in its own folder: Ray restarts it and
    c's retry discards that half and comes out whole."""
    folder, here_out = here
    (tmp_path / "a.predictions.slp").write_bytes((here_out / "a.predictions.slp").read_bytes())
    half = unfinished_path(tmp_path / "b.predictions.slp")
    half.write_bytes(b"half")
    journal_path(half).write_bytes(b"")
    placed: list[str] = []
    place = cluster.place

    def place_here(output: Path, files: cluster.OutputBytes) -> bool:
        assert not output.exists() and files.pose.startswith(b"\x89HDF")
        placed.append(output.name)
        return place(output, files)

    monkeypatch.setattr(cluster, "place", place_here)
    c_output = tmp_path / "c.predictions.slp"
    running = in_background(
        run_many,
        folder,
        MODEL,
        output_dir=tmp_path,
        cluster="local",
        workers=1,
        streams=2,
        outputs_to="driver",
        batch_size=2,
        save_interval=0.01,
        **ENGINE,
    )
    pid = writer_pid_once_saving(cluster.scratch_folder(c_output) / c_output.name)
    assert pid != os.getpid() and not c_output.exists()
    os.kill(pid, signal.SIGKILL)
    run = running.result(timeout=180)
    assert run.mode == "Ray (local), outputs written by the driver"
    assert [(Path(r.video).stem, r.status, r.redone) for r in run.results] == [
        ("a", "skipped", False),
        ("b", "done", True),
        ("broken", "failed", False),
        ("c", "done", True),
    ]
    assert run.results[-1].worker != pid
    assert sorted(placed) == ["b.predictions.slp", "c.predictions.slp"]
    for name in CLIPS:
        output = tmp_path / f"{name}.predictions.slp"
        assert pose_arrays(output) == pose_arrays(here_out / output.name)
        assert unfinished_files(output) == []
        assert not cluster.scratch_folder(output).exists()


def test_on_ray_no_video_starts_after_the_duration(ray_session, here, tmp_path):
    folder, here_out = here
    report = SlowToNote(1.5)
    run = run_many(
        folder,
        MODEL,
        output_dir=tmp_path,
        cluster="local",
        workers=1,
        duration=1.0,
        report=report,
        **ENGINE,
    )
    assert report.started_videos == ["a.mkv"]
    assert [r.status for r in run.results] == ["done", "left", "left", "left"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.predictions.slp"]
    output = "a.predictions.slp"
    assert pose_arrays(tmp_path / output) == pose_arrays(here_out / output)


def test_ctrl_c_on_ray_stops_the_actors_videos_and_prints_the_table(
    ray_session, tmp_path, monkeypatch, capsys
):
    """Issue 37: Ctrl-C in a folder run answered only once the video in flight was
    done; on Ray the actors' videos now stop at their next frame, the driver says so
    at once and the table prints, the video a 'stopped' row, the rest left."""
    from sleap_live.cli import main
    from sleap_live.stream.many.display import ManyProgress

    monkeypatch.chdir(tmp_path)
    videos = tmp_path / "videos"
    cut_clips(videos, {"a": (0, 30), "b": (50, 4)})
    original = ManyProgress.started

    def started(self, job):
        original(self, job)
        os.kill(os.getpid(), signal.SIGINT)  # a handed to the actor (loading the model)

    monkeypatch.setattr(ManyProgress, "started", started)
    arguments = ["run", str(videos), "-m", str(MODEL), "--output-dir", "out"]
    arguments += ["--cluster", "local", "--workers", "1", "--engine", "onnx", "--threads", "1"]
    assert main(arguments) == 130
    printed = capsys.readouterr()
    assert "sleap-live: interrupted: stopping videos/a.mkv" in printed.err, printed.err
    assert "0 done, 0 skipped, 0 failed, 1 stopped" in printed.out, printed.out
    assert "left" in printed.out
    assert list((tmp_path / "out").iterdir()) == []
