"""scripts/profile_run.py: a whole run split by stage and by thread, on a fixture model."""

from __future__ import annotations

import json

import pytest

from tests import script_modules as scripts
from tests.committed import require
from tests.engines import goldens

profile_run = scripts.load("profile_run.py")


@pytest.mark.usefixtures("warm_export_cache")
def test_a_whole_run_is_split_by_stage_and_thread(tmp_path, capsys):
    models, video, _, _ = goldens.case_paths("single_instance")
    require(*models, video)
    output, figures = tmp_path / "poses.slp", tmp_path / "figures.json"
    argv = [str(video), "-m", str(models[0]), "-o", str(output), "--json", str(figures)]
    profile_run.main(argv)
    results = json.loads(figures.read_text())
    assert output.is_file() and results["runner"] == "OnnxRunner"
    assert results["frames"] == 200 and results["batches"] == 25
    # The wall-clock parts fit in the whole; every busy stage was seen working.
    parts = results["startup_s"] + results["run_s"] + results["writing_s"]
    assert 0 < parts <= results["wall_s"] + 0.05
    assert sum(results["startup_split_s"].values()) == pytest.approx(results["startup_s"])
    assert all(seconds > 0 for seconds in results["busy_s"].values())
    assert sum(results["busy_s"].values()) <= results["run_s"] * 1.05
    # The pipeline's threads are there by name, with the CPU they used.
    threads = results["cpu_s_per_thread"]
    assert {"MainThread", "sleap-live infer", "sleap-live capture reader"} <= set(threads)
    assert results["decode_cpu_s"]["capture reader thread"] > 0
    printed = capsys.readouterr().out
    assert "start-up (launch to the first engine call)" in printed
    assert "engine: host postprocessing (busy)" in printed and "CPU time per thread" in printed


def test_a_missing_video_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        profile_run.main([str(tmp_path / "absent.mp4"), "-m", str(tmp_path)])
    assert exit_.value.code == 2
    assert "absent.mp4: no such file" in capsys.readouterr().err
