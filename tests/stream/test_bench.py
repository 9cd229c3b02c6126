"""`sleap-live bench` runs every section and reports consistent figures."""

import json
from pathlib import Path

import pytest

from sleap_live.stream import bench
from sleap_live.stream.cli import main as cli_main

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = DATA / "models" / "single_instance"
VIDEO = DATA / "videos" / "single.mkv"


@pytest.mark.slow
def test_bench_reports_every_section(tmp_path):
    if not MODEL.exists() or not VIDEO.exists():
        pytest.skip("test model or video missing")
    out = tmp_path / "bench.json"
    argv = [
        str(VIDEO),
        "-m",
        str(MODEL),
        "--frames",
        "24",
        "--soak-frames",
        "120",
        "--batch-size",
        "4",
        "--json",
        str(out),
    ]
    assert bench.main(argv) == 0
    r = json.loads(out.read_text())
    assert r["engine"]["frames"] == 24
    assert r["recorded"]["frames"] == 24
    assert r["recorded"]["ratio_to_engine"] > 0
    assert r["live"]["frames"] + r["live"]["dropped"] <= 24
    assert r["live"]["latency_ms_p50"] >= r["live"]["engine_ms_p50"] * 0.5
    assert r["soak"]["frames"] == 120


def test_bench_missing_video_is_one_line_error(tmp_path, capsys):
    code = cli_main(["bench", str(tmp_path / "nope.mp4"), "-m", str(MODEL), "--soak-frames", "0"])
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "nope.mp4" in err


def test_resident_memory_is_positive():
    assert bench.resident_mb() > 0
