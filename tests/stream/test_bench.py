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
        "--loops",
        "2",
        "--repeats",
        "3",
        "--json",
        str(out),
    ]
    assert bench.main(argv) == 0
    r = json.loads(out.read_text())
    # Both throughput figures cover the same 24 frames, played twice.
    assert r["engine"]["frames"] == 48
    assert r["recorded"]["frames"] == 48
    assert len(r["engine"]["fps_runs"]) == len(r["recorded"]["fps_runs"]) == 3
    assert r["recorded"]["fps"] == sorted(r["recorded"]["fps_runs"])[1]
    pairs = [
        rec / eng
        for eng, rec in zip(r["engine"]["fps_runs"], r["recorded"]["fps_runs"], strict=True)
    ]
    assert r["recorded"]["ratio_to_engine"] == pytest.approx(sorted(pairs)[1])
    assert r["recorded"]["ratio_of_medians"] == r["recorded"]["fps"] / r["engine"]["fps"]
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


def test_recorded_run_decodes_every_loop():
    if not MODEL.exists() or not VIDEO.exists():
        pytest.skip("test model or video missing")
    from sleap_live.engines.runners.load import load_runner

    runner = load_runner([str(MODEL)])
    try:
        once = bench.bench_recorded(runner, VIDEO, 4, limit=6, loops=1)
        thrice = bench.bench_recorded(runner, VIDEO, 4, limit=6, loops=3)
    finally:
        runner.close()
    assert once["frames"] == 6
    assert thrice["frames"] == 18


def test_bench_refuses_zero_loops(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([str(VIDEO), "-m", str(MODEL), "--loops", "0"])
    assert exit_info.value.code == 2
    assert "--loops must be at least 1" in capsys.readouterr().err
