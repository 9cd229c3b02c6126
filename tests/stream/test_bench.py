"""`sleap-live bench` runs every section and reports consistent figures."""

import json
from pathlib import Path

import pytest

from sleap_live import cli
from sleap_live.engines.runners import load as engines_api
from sleap_live.stream import bench
from sleap_live.stream.errors import SourceError

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = DATA / "models" / "single_instance"
VIDEO = DATA / "videos" / "single.mkv"


@pytest.mark.slow
def test_bench_reports_every_section(tmp_path):
    if not MODEL.exists() or not VIDEO.exists():
        pytest.skip("test model or video missing")
    out = tmp_path / "bench.json"
    argv = [
        "bench",
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
    assert cli.main(argv) == 0
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
    code = cli.main(["bench", str(tmp_path / "nope.mp4"), "-m", str(MODEL), "--soak-frames", "0"])
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
    assert cli.main(["bench", str(VIDEO), "-m", str(MODEL), "--loops", "0"]) == 2
    assert capsys.readouterr().err == (
        "sleap-live: error: argument --loops: must be at least 1, got 0\n"
    )


def test_bench_front_end_prints_the_table_and_writes_json(
    gray_video, tmp_path, monkeypatch, capsys, fakes
):
    """The whole `sleap-live bench` with the fake runner: every section, one table."""
    runners = []

    def load(models, *, engine, device, **options):
        runners.append(fakes.FakeRunner())
        return runners[-1]

    monkeypatch.setattr(engines_api, "load_runner", load)
    out = tmp_path / "figures.json"
    argv = ["bench", str(gray_video), "-m", "m", "--repeats", "3", "--loops", "2"]
    options = ["--live-fps", "300", "--soak-frames", "50", "--batch-size", "4", "--json", str(out)]
    assert cli.main([*argv, *options]) == 0

    assert runners[0].closed
    figures = json.loads(out.read_text())
    assert figures["models"] == ["m"] and figures["runner"] == "FakeRunner"
    assert figures["engine"]["frames"] == figures["recorded"]["frames"] == 2 * 30
    assert len(figures["recorded"]["fps_runs"]) == 3
    assert figures["soak"]["frames"] == 50
    captured = capsys.readouterr()
    assert "live replay at 300 fps ..." in captured.err  # progress on stderr
    assert "sleap-live bench: FakeRunner on cpu" in captured.out  # the table on stdout
    for row in ("engine only fps (median of 3)", "soak frames / fps", "added latency p50"):
        assert row in captured.out


def test_bench_interrupted_exits_130_and_closes_the_runner(gray_video, monkeypatch, fakes):
    runner = fakes.FakeRunner(fail_on_call=2, error=KeyboardInterrupt())
    monkeypatch.setattr(engines_api, "load_runner", lambda models, **options: runner)
    assert cli.main(["bench", str(gray_video), "-m", "m", "--soak-frames", "0"]) == 130
    assert runner.closed


def test_decoding_no_frames_is_a_source_error(gray_video):
    with pytest.raises(SourceError, match="no frames to measure"):
        bench.decode_all(gray_video, limit=0)
