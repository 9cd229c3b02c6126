"""`sleap-live bench` runs every section and reports consistent figures."""

import json
import sys
from pathlib import Path

import pytest

from sleap_live import cli
from sleap_live.cli import loading as engines_api
from sleap_live.stream import bench
from sleap_live.stream.errors import SourceError
from tests.committed import require

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = DATA / "models" / "single_instance"
VIDEO = DATA / "videos" / "single.mkv"


@pytest.mark.slow
def test_bench_reports_every_section(tmp_path):
    require(MODEL, VIDEO)
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
    require(MODEL, VIDEO)
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
    # Issue 37: the plan and its estimate come first, before any timed run.
    first = captured.err.index("plan: engine only and the recorded pipeline, 3 runs each of 60")
    assert first < captured.err.index("engine only and recorded pipeline: 30 frames")
    assert "a soak of 50 frames: about " in captured.err
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


def test_timeline_summary_gives_offsets_busy_shares_and_overlap():
    from sleap_live.stream.batching import StageTimes

    # Two batches: batch 1 decodes (10-20) while batch 0 runs in the engine (12-22).
    times = [
        StageTimes(decode=(0.0, 10.0), stack=(10.0, 11.0), engine=(12.0, 22.0)),
        StageTimes(decode=(10.0, 20.0), stack=(20.0, 21.0), engine=(22.0, 32.0)),
    ]
    times[0].postprocess = (22.0, 23.0)
    times[1].postprocess = (32.0, 40.0)
    summary = bench.timeline_summary(times, first=1)
    assert summary["span_ms"] == 40_000
    assert summary["batches"] == [
        {
            "decode": [0.0, 10_000.0],
            "stack": [10_000.0, 11_000.0],
            "engine": [12_000.0, 22_000.0],
            "postprocess": [22_000.0, 23_000.0],
        }
    ]
    assert summary["busy"] == {"decode": 0.5, "stack": 0.05, "engine": 0.5, "postprocess": 0.225}
    assert summary["batch_ms"] == {
        "decode": 10_000.0,
        "stack": 1_000.0,
        "engine": 10_000.0,
        "postprocess": 4_500.0,
    }
    # Decode (0-20) overlaps the engine (12-32) for 8 of its 20 busy seconds.
    assert summary["decode_during_engine"] == pytest.approx(0.4)
    assert bench.timeline_summary([]) == {}


def test_recorded_run_reports_its_timeline(fakes, gray_video):
    result = bench.bench_recorded(fakes.FakeRunner(), gray_video, batch_size=4, limit=12)
    timeline = result["timeline"]
    assert len(timeline["batches"]) == 3
    for batch in timeline["batches"]:
        order = [t for stage in ("decode", "stack", "engine", "postprocess") for t in batch[stage]]
        assert order == sorted(order)
    assert set(timeline["busy"]) == {"decode", "stack", "engine", "postprocess"}
    assert 0.0 <= timeline["decode_during_engine"] <= 1.0


def test_bench_prints_the_timeline_table():
    from rich.console import Console

    from sleap_live.cli.bench import timeline_table
    from sleap_live.stream.batching import StageTimes

    times = [StageTimes(decode=(0.0, 1.0), stack=(1.0, 1.5), engine=(2.0, 3.0))]
    times[0].postprocess = (3.0, 4.0)
    console = Console(width=120, record=True)
    console.print(timeline_table(bench.timeline_summary(times)))
    text = console.export_text()
    assert "0.0-1000.0" in text and "2000.0-3000.0" in text
    assert "decode ran during 0% of the engine's busy time" in text
    assert "busy" in text and "25%" in text


def _bench_with_fake_runner(monkeypatch, fakes, video, *options):
    """`sleap-live bench` on the fake runner; its exit status and the runners it loaded."""
    runners = []

    def load(models, *, engine, device, **load_options):
        runners.append(fakes.FakeRunner())
        return runners[-1]

    monkeypatch.setattr(engines_api, "load_runner", load)
    argv = ["bench", str(video), "-m", "m", "--repeats", "1", "--loops", "1"]
    argv += ["--live-fps", "300", "--soak-frames", "0", "--batch-size", "4", *options]
    return cli.main(argv), runners


def test_bench_plot_writes_a_png_chart(gray_video, tmp_path, monkeypatch, fakes):
    from PIL import Image

    chart, figures = tmp_path / "bench.png", tmp_path / "bench.json"
    code, _ = _bench_with_fake_runner(
        monkeypatch, fakes, gray_video, "--plot", str(chart), "--json", str(figures)
    )
    assert code == 0
    with Image.open(chart) as image:
        image.verify()
        assert image.format == "PNG"
        assert image.width > 100 and image.height > 100
    # What the chart draws is in the figures: every live latency, each stage's time.
    results = json.loads(figures.read_text())
    assert len(results["live"]["latencies_ms"]) == results["live"]["frames"]
    assert set(results["recorded"]["timeline"]["batch_ms"]) == {
        "decode",
        "stack",
        "engine",
        "postprocess",
    }


def test_bench_plot_without_matplotlib_names_the_extra_before_measuring(
    gray_video, tmp_path, monkeypatch, fakes, capsys
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as when not installed
    chart = tmp_path / "bench.png"
    code, runners = _bench_with_fake_runner(monkeypatch, fakes, gray_video, "--plot", str(chart))
    assert code == 2
    assert capsys.readouterr().err == (
        "sleap-live: error: --plot needs matplotlib, which is not installed "
        "(pip install 'sleap-live[plot]')\n"
    )
    assert runners == [] and not chart.exists()


def test_bench_plot_refuses_a_file_that_is_not_png(
    gray_video, tmp_path, monkeypatch, fakes, capsys
):
    code, runners = _bench_with_fake_runner(
        monkeypatch, fakes, gray_video, "--plot", str(tmp_path / "bench.jpg")
    )
    assert code == 2 and runners == []
    assert "give a file name ending in .png" in capsys.readouterr().err


def test_a_recorded_pipeline_above_the_engine_is_explained():
    """Issue 37: bench showed the recorded pipeline at 196.6 fps above the engine's
    129.9 with no word why."""
    from sleap_live.stream.bench import faster_than_engine, plan

    above = {"ratio_of_medians": 1.51, "ratio_to_engine": 1.2, "ratio_runs": [0.95, 1.2, 1.6]}
    note = faster_than_engine(above)
    assert note is not None and "0.95 to 1.60 over the run pairs" in note
    assert "different loads" in note
    below = {"ratio_of_medians": 0.96, "ratio_to_engine": 0.97, "ratio_runs": [0.97]}
    assert faster_than_engine(below) is None
    # 2 x 5 x 1000 frames and a 20,000-frame soak at 100 fps, a 200-frame replay at 30 fps.
    assert "about 5.1 min at this machine's 100 fps" in plan(200, 5, 5, 8, 30.0, 20_000, 100.0)
