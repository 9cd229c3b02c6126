"""The closed-loop examples run: scripts/closed_loop_example.py end to end (with the
fake runner), and the Python blocks of README.md and the documentation verbatim,
taken from the pages themselves so the two cannot drift (tests/test_docs.py checks
that these are all the Python blocks there are, bar those marked parse-only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import sleap_io as sio

from sleap_live.stream.runner import SPREAD_FRAMES
from tests import script_modules as scripts
from tests.docs_blocks import REPO, python_after

example = scripts.load("closed_loop_example.py")


def test_example_triggers_polls_and_reports(clip, fakes, monkeypatch, capsys):
    runners, options_given = [], []

    def load(models, **options):
        runners.append(fakes.FakeRunner())
        options_given.append(options)
        return runners[-1]

    from sleap_live.engines.runners import load as runners_load

    monkeypatch.setattr(runners_load, "load_runner", load)

    assert example.main([str(clip), "-m", "model", "--seconds", "5"]) == 0

    out = capsys.readouterr().out
    # A replay drops the frames it falls behind on (a busy machine's), as a camera
    # would: every frame is processed or counted as dropped.
    summary = re.search(r"^(\d+) frames at [\d.]+ fps, (\d+) dropped;", out, re.MULTILINE)
    assert summary, out
    processed, dropped = int(summary[1]), int(summary[2])
    assert processed + dropped == 40
    # Node 0 sits at x = frame index; the trigger region starts at 0.6 * 32 px: the
    # first trigger is frame 20, or the first frame after it that was not dropped.
    first = int(re.search(r"^trigger: frame (\d+),", out, re.MULTILINE)[1])
    assert first == 20 if dropped == 0 else 20 <= first <= 20 + dropped
    assert "the callback skipped 0 records" in out
    assert runners[0].closed
    # A model directory's in-memory export would be verified on frames spread over the
    # video, read if the load needs them (the exporter keeps those with animals).
    assert options_given[0]["verify_frames"].read().shape == (SPREAD_FRAMES, 24, 32, 1)


DEMO_FRAMES = 150  # tests/data/videos/demo.mp4


# The Python blocks run here: (page, the line they follow).
RUN_HERE = (
    ("README.md", "## Python: a closed loop"),
    ("docs/outputs.md", "Running it with nothing of ours installed"),
)


def run_from_a_clone(code: str, work: Path) -> subprocess.CompletedProcess[str]:
    """`code` run as a script in `work`, which sees the clone's tests/ as its own."""
    (work / "tests").symlink_to(REPO / "tests")
    script = work / "example.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], cwd=work, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_readme_closed_loop_runs_verbatim_from_a_clone(tmp_path, demo_export_cache):
    done = run_from_a_clone(python_after(*RUN_HERE[0]).code, tmp_path)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "trigger" in lines  # the stub fired: a nose entered the region
    summary = re.fullmatch(r"(\d+) frames at ([\d.]+) fps, (\d+) dropped", lines[-1])
    assert summary, lines[-1]
    processed, fps, dropped = int(summary[1]), float(summary[2]), int(summary[3])
    assert fps > 0  # the run's rate, kept after stop
    saved = sio.load_slp(str(tmp_path / "out" / "session.slp"), open_videos=False)
    assert len(saved) == processed and processed + dropped == DEMO_FRAMES


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bottomup", "single_instance"])  # peaks; an instance list
def test_docs_onnxruntime_snippet_reads_every_layout_by_name(model, tmp_path):
    from sleap_live.engines import export_model

    model_dir = REPO / "tests" / "data" / "models" / model
    export_model([model_dir], tmp_path / "out" / "model.onnx", verify=False)
    done = run_from_a_clone(python_after(*RUN_HERE[1]).code, tmp_path)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(re.match(r"[0-3] \{'nose': \[", line) for line in lines), lines
    assert "nan" not in done.stdout
