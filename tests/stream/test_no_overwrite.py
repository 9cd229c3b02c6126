"""No output is replaced without being asked (issue #37, item 1): every command that
writes refuses an existing output before any work, in one line naming it and
``--overwrite``, and leaves it as it was; ``--overwrite`` replaces it.

Runs use the fake engine (see test_cli.py); nothing here exports a model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.output_rule import OutputError
from sleap_live.stream.outputs.journal import journal_path
from sleap_live.stream.outputs.options import OutputOptions
from sleap_live.stream.outputs.writers import open_outputs
from tests.committed import DATA, require
from tests.stream.test_faults_journals import chunk, header, journal

OLD = b"the last session's poses"


def refused_line(capsys, path: Path) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(path) in lines[0] and "exists; give --overwrite" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("command", "option", "name"),
    [
        ("run", "-o", "out.slp"),
        ("run", "--record", "out.mp4"),
        ("run", "--record-overlay", "overlay.mp4"),
        ("replay", "-o", "out.csv"),
        ("replay", "--record", "rec.mkv"),
        ("camera", "-o", "cam.slp"),
        ("camera", "--record", "cam.mp4"),
        ("camera", "--record-overlay", "cam.overlay.mp4"),
    ],
)
def test_a_rerun_into_an_existing_output_is_refused_before_any_work(
    command, option, name, clip, tmp_path, fake_loads, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a default output would land here, never in the repo
    existing = tmp_path / name
    existing.write_bytes(OLD)
    source = ["run", "--camera", "0"] if command == "camera" else [command, str(clip)]
    argv = [*source, "-m", "m", "--no-verify", "-q", option, str(existing)]
    if option != "-o":
        argv += ["-o", str(tmp_path / "new.slp")]
    assert cli.main(argv) == 1
    refused_line(capsys, existing)
    assert existing.read_bytes() == OLD and fake_loads == []  # untouched, no work done
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["clip.mkv", name])


def test_overwrite_replaces_a_one_video_runs_outputs(clip, tmp_path, fake_loads, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out, record = tmp_path / "out.slp", tmp_path / "out.mkv"
    out.write_bytes(OLD)
    record.write_bytes(OLD)
    argv = ["run", str(clip), "-m", "m", "--no-verify", "-q", "-o", str(out)]
    # --overwrite keeps a one-video run one video's (not a run over many videos).
    argv += ["--record", str(record), "--record-codec", "ffv1", "--overwrite"]
    assert cli.main(argv) == 0
    assert len(sio.load_slp(str(out), open_videos=False)) == 40
    assert record.read_bytes()[:4] != OLD[:4]


def test_the_python_api_refuses_an_existing_output_unless_asked(clip, tmp_path, fakes):
    out = tmp_path / "out.slp"
    out.write_bytes(OLD)
    source, runner = fakes.FakeSource(3), fakes.FakeRunner()
    with pytest.raises(OutputError, match="exists; give --overwrite"):
        open_outputs(OutputOptions(out), source, runner)
    assert out.read_bytes() == OLD and not journal_path(out).exists()
    open_outputs(OutputOptions(out, overwrite=True), source, runner).abandon()
    assert out.read_bytes() == OLD  # abandoned: the old file stays


def test_recover_refuses_an_existing_pose_file_unless_asked(clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    out.write_bytes(OLD)
    journal(out, header(str(clip)), chunk((0, 1)))
    assert cli.main(["recover", str(out)]) == 1
    refused_line(capsys, out)
    assert out.read_bytes() == OLD and journal_path(out).exists()
    assert cli.main(["recover", str(out), "--overwrite"]) == 0
    assert [lf.frame_idx for lf in sio.load_slp(str(out), open_videos=False)] == [0, 1]


def test_track_refuses_an_existing_output(tmp_path, capsys):
    poses = DATA / "goldens" / "bottomup.slp"
    require(poses)
    out = tmp_path / "tracked.slp"
    out.write_bytes(OLD)
    assert cli.main(["track", str(poses), "-o", str(out)]) == 1
    refused_line(capsys, out)
    assert out.read_bytes() == OLD


@pytest.mark.parametrize(("format", "name"), [("onnx", "m.onnx"), ("web", "web")])
def test_export_refuses_an_existing_export_before_loading_the_model(format, name, tmp_path, capsys):
    existing = tmp_path / name
    if format == "web":  # an earlier web export: its files
        from sleap_live.engines.export.web import WEB_EXPORT_FILES

        existing.mkdir()
        for file in WEB_EXPORT_FILES:
            (existing / file).write_bytes(OLD)
        existing = existing / "model.onnx"
    existing.write_bytes(OLD)
    output = tmp_path / name
    argv = ["export", str(DATA / "models" / "centroid"), "-o", str(output), "--format", format]
    assert cli.main([*argv, "--no-verify"]) == 1
    refused_line(capsys, output)
    assert existing.read_bytes() == OLD


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_bench_refuses_an_existing_figures_file_before_timing(
    option, clip, tmp_path, fake_loads, capsys
):
    """bench wrote --json and --plot over any file, after minutes of timing (and lost
    the figures to a missing folder then)."""
    existing = tmp_path / ("b.json" if option == "--json" else "b.png")
    existing.write_bytes(OLD)
    argv = ["bench", str(clip), "-m", "m", "--no-verify", option, str(existing)]
    assert cli.main(argv) == 1
    refused_line(capsys, existing)
    assert existing.read_bytes() == OLD and fake_loads == []
    missing = tmp_path / "no-folder" / existing.name
    assert cli.main(["bench", str(clip), "-m", "m", "--no-verify", option, str(missing)]) == 1
    assert "folder" in capsys.readouterr().err and fake_loads == []
