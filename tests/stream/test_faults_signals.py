"""Fault suite, signals: Ctrl-C at any moment saves or says what is saved (issue #11).

A second Ctrl-C during the final save lets the save finish; a third exits at once,
saying how many frames the journal holds and how to recover them; a Ctrl-C before
the pipeline started claims no output; the summary never claims more frames than
the file holds; the exit status is 130 (128 + the signal's number for SIGTERM,
SIGHUP and SIGQUIT, which stop a run as Ctrl-C does), never death by the signal. Runs go through
`scripts/fault_soak.py child` (the fake engine; a slowed final save or start).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sleap_io as sio

from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.outputs.journal import journal_path
from sleap_live.stream.stages import StageThreads
from tests.stream.fakes import saved_frames

SOAK = Path(__file__).parents[2] / "scripts" / "fault_soak.py"
sys.path.insert(0, str(SOAK.parent))
import fault_soak  # noqa: E402


def started_run(tmp_path: Path, **slow: float) -> tuple[Path, Path, subprocess.Popen[str]]:
    clip = fault_soak.write_clip(tmp_path / "long.mkv", 3000)
    out, log_dir = tmp_path / "out.slp", tmp_path / "log"
    argv = ["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]
    return out, log_dir, fault_soak.start_child(log_dir, argv, delay=0.02, **slow)


def claimed_frames(err: str, out: Path) -> int:
    match = re.search(rf"poses: {re.escape(str(out))} \((\d+) frames\)", err)
    assert match, err
    return int(match.group(1))


def test_second_ctrl_c_during_the_final_save_lets_it_finish(tmp_path):
    out, log_dir, process = started_run(tmp_path, slow_save=2.0)
    try:
        fault_soak.wait_for(log_dir / "ready", process)
        process.send_signal(signal.SIGINT)
        fault_soak.wait_for(log_dir / "saving", process)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "still finishing the frames in flight and saving the outputs" in err
    labels = sio.load_slp(str(out), open_videos=False)
    assert claimed_frames(err, out) == len(labels) > 0
    assert [lf.frame_idx for lf in labels] == list(range(len(labels)))
    assert not journal_path(out).exists() and list(tmp_path.glob(".*partial*")) == []
    assert "Traceback" not in err


def test_second_ctrl_c_soon_after_the_first_changes_nothing_saved(tmp_path):
    # The second Ctrl-C 0.2 s after the first lands while the frames in flight are
    # finished or the outputs saved, or after: the run still saves what it finished,
    # says what the file holds, leaves no temporary file and exits 130.
    out, log_dir, process = started_run(tmp_path)
    try:
        fault_soak.wait_for(log_dir / "ready", process)
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    labels = sio.load_slp(str(out), open_videos=False)
    assert claimed_frames(err, out) == len(labels) > 0
    assert [lf.frame_idx for lf in labels] == sorted(fault_soak.finished_frames(log_dir))
    assert not journal_path(out).exists() and list(tmp_path.glob(".*partial*")) == []
    assert "Traceback" not in err


def test_third_ctrl_c_exits_at_once_and_says_how_to_recover(tmp_path):
    out, log_dir, process = started_run(tmp_path, slow_save=600.0)
    try:
        fault_soak.wait_for(log_dir / "ready", process)
        process.send_signal(signal.SIGINT)
        fault_soak.wait_for(log_dir / "saving", process)
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)  # not the 600 s the save would take
    finally:
        process.kill()
    assert process.returncode == 130, err
    match = re.search(r"poses: (\d+) frames saved in (\S+), not yet in", err)
    assert match, err
    assert match.group(2) == str(journal_path(out))
    assert f"sleap-live recover {out}" in err
    assert not out.exists()
    done = subprocess.run(
        [sys.executable, "-m", "sleap_live", "recover", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    labels = sio.load_slp(str(out), open_videos=False)
    assert len(labels) == int(match.group(1)) > 0  # the summary claimed what the file holds
    assert "Traceback" not in err


def test_ctrl_c_before_the_pipeline_started_claims_no_output(tmp_path):
    out, log_dir, process = started_run(tmp_path, slow_start=600.0)
    try:
        fault_soak.wait_for(log_dir / "starting", process)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert f"poses: none written to {out}" in err
    assert f"poses: {out}" not in err
    assert not out.exists() and not journal_path(out).exists()


@pytest.mark.parametrize(
    "signum",
    [
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
    ],
)
def test_the_summary_counts_what_the_file_holds(signum, tmp_path):
    # SIGHUP (a closed terminal) and SIGQUIT (Ctrl-\) save like SIGTERM (issue #20),
    # and SIGUSR1, SIGUSR2 and SIGALRM too (issue #36: they killed the run unsaved).
    out, log_dir, process = started_run(tmp_path)
    try:
        fault_soak.wait_for(log_dir / "ready", process)
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signum, err
    labels = sio.load_slp(str(out), open_videos=False)
    assert claimed_frames(err, out) == len(labels)
    finished = fault_soak.finished_frames(log_dir)
    assert [lf.frame_idx for lf in labels] == sorted(finished)  # every finished frame


@pytest.mark.parametrize("entry", ["run", "with"])
def test_ctrl_c_while_the_stages_start_stops_a_whole_pipeline_and_saves(
    entry, fakes, tmp_path, monkeypatch, request
):
    # The CLI saw this under load: the signal landed in start(), between two stages.
    out = tmp_path / "out.slp"
    source, runner = fakes.FakeSource(600), fakes.FakeRunner()
    pipeline = Pipeline(source, runner, outputs=OutputOptions(output=out))
    spawn = StageThreads.spawn

    def spawn_then_interrupt(threads, stage, target, *args):
        spawn(threads, stage, target, *args)
        if stage == "emit":
            signal.raise_signal(signal.SIGINT)  # infer, batcher and capture not yet started

    monkeypatch.setattr(StageThreads, "spawn", spawn_then_interrupt)
    # Ctrl-C raises KeyboardInterrupt, as in a program (pytest-xdist's workers ignore it).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    with pytest.raises(KeyboardInterrupt):
        if entry == "run":
            pipeline.run()
        else:
            with pipeline:
                pytest.fail("the block ran after a Ctrl-C in start()")
    assert not pipeline.stats.running
    assert saved_frames(out) == list(range(pipeline.stats.frames_processed))
