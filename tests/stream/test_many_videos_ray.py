"""Many videos on Ray (`run_many(cluster=...)`, `--cluster`): one Ray session on this
machine for the module (2 CPUs, 2 actors), the poses of a run in this process, and
a killed actor's video retried by Ray to a complete output.

Ray is in the `test` extra: without it this module fails to import, as it should.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import ray

from sleap_live import run_many
from sleap_live.stream.many.finish import unfinished_files
from tests.stream.many_videos import (
    MODEL,
    corrupt_video,
    cut_clips,
    pose_arrays,
    writer_pid_once_saving,
)

CLIPS = {"a": (0, 6), "b": (50, 4), "c": (100, 30)}
ENGINE = {"engine": "onnx", "device": "cpu", "threads": 1}


@pytest.fixture(scope="module")
def ray_session():
    """Ray on this machine with 2 CPUs, started once for the module; `run_many` uses
    the session it finds rather than starting one."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_gives_the_poses_of_a_run_in_this_process_with_an_actor_killed(ray_session, tmp_path):
    """Two actors on Ray; the actor process writing c is killed once it saved frames:
    Ray restarts it and runs its tasks again, and c comes out whole, with the poses
    of a run in this process."""
    folder = tmp_path / "videos"
    cut_clips(folder, CLIPS)
    corrupt_video(folder / "broken.mp4")
    (tmp_path / "here").mkdir()
    (tmp_path / "ray").mkdir()
    here = run_many(folder, MODEL, output_dir=tmp_path / "here", workers=1, streams=1, **ENGINE)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
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
    statuses = [(Path(r.video).name, r.status) for r in on_ray.results]
    assert statuses == [(Path(r.video).name, r.status) for r in here.results]
    assert [r.status for r in on_ray.results] == ["done", "done", "failed", "done"]
    c = on_ray.results[-1]
    assert c.redone and c.worker != pid
    assert os.getpid() not in {r.worker for r in on_ray.results}
    for name in CLIPS:
        output = f"{name}.predictions.slp"
        assert pose_arrays(tmp_path / "ray" / output) == pose_arrays(tmp_path / "here" / output)
    assert unfinished_files(tmp_path / "ray" / "c.predictions.slp") == []
