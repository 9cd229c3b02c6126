"""scripts/bench_vs_sleap_nn.py: pose agreement, the markdown section, and picking models.

The timed runs need sleap-nn's own venv and minutes; these test the parts that judge
and report them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests import script_modules as scripts

bench = scripts.load("bench_vs_sleap_nn.py")


def _instances(*centres: tuple[float, float], nodes: int = 3) -> np.ndarray:
    """(instances, nodes, 2) points: each instance's nodes 1 px apart from its centre."""
    offsets = np.arange(nodes, dtype=float)[:, None] * [1.0, 0.0]
    return np.stack([np.asarray(c) + offsets for c in centres])


def test_agreement_matches_instances_in_any_order():
    reference = {0: _instances((10, 10), (50, 50)), 1: _instances((20, 20))}
    other = {0: _instances((50, 50.5), (10, 10)), 1: _instances((20, 20))}
    result = bench.agreement(reference, other)
    assert result["frames"] == 2 and result["frames_same_count"] == 2
    assert result["instances_matched"] == 1.0
    assert result["median_px"] == 0.0
    assert result["max_px"] == pytest.approx(0.5)
    assert result["points"] == 9 and result["points_over_1px"] == 0
    assert result["frames_counts_differ"] == [] and result["frames_worst"] == []


def test_agreement_says_how_many_points_are_off_and_where():
    # 100 frames agree to the pixel; frame 7 has one point 30 px off, frame 9 an
    # instance only the reference found (a weak peak at the threshold).
    reference = {i: _instances((10, 10), (50, 50)) for i in range(100)}
    other = {i: _instances((10, 10), (50, 50)) for i in range(100)}
    other[7][1, 2] += [0, 30]
    reference[9] = _instances((10, 10), (50, 50), (90, 90))
    result = bench.agreement(reference, other)
    assert result["points"] == 600 and result["points_over_1px"] == 1
    assert result["median_px"] == 0.0 and result["p99_px"] == 0.0
    assert result["max_px"] == pytest.approx(30.0)
    assert result["frames_counts_differ"] == [9]
    assert result["frames_worst"] == [{"frame": 7, "max_px": pytest.approx(30.0)}]


def test_agreement_counts_missing_instances_and_skips_missing_points():
    found = _instances((10, 10), (50, 50))
    partial = _instances((10, 12))
    partial[0, 0] = np.nan  # a node one side did not find
    reference = {0: found, 1: _instances((5, 5))}
    other = {0: partial}  # frame 1 has no instances at all
    result = bench.agreement(reference, other)
    assert result["frames_same_count"] == 0
    assert result["instances_matched"] == pytest.approx(1 / 3)  # 1 of max(2,1) + max(1,0)
    assert result["median_px"] == pytest.approx(2.0) and result["max_px"] == pytest.approx(2.0)


def test_same_pixels_compares_sleap_lives_frames_with_sleap_ios(tmp_path):
    # sleap-io stands in for sleap-nn's venv: a bin folder whose python is this one.
    from sleap_live.stream.bench import decode_all

    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    python = bin_folder / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    demo = Path(__file__).parent / "data" / "videos" / "demo.mp4"  # gray, in H.264 yuv420p
    frames = decode_all(demo, 12)
    check = bench.same_pixels(bin_folder, demo, frames, tmp_path)
    assert check == {"frames": 12, "identical": 12, "max_levels": 0}
    assert bench._pixels(check) == "12/12"
    assert not list(tmp_path.glob("*.npy"))
    # sleap-io's frames are `frames` (above): its reading is not started again.
    darker = frames.copy()
    darker[3] -= 1
    assert bench._pixels(bench.pixel_check(darker, frames)) == "11/12 (differ by up to 1)"
    gray_as_rgb = np.repeat(frames, 3, -1)
    assert bench._pixels(bench.pixel_check(gray_as_rgb, frames)) == "shapes differ"


def test_markdown_section_is_appended_then_replaced_in_place(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nHow they were measured.\n")
    first = f"{bench.MARK_START}\n| a |\n{bench.MARK_END}\n"
    bench.write_markdown(page, first)
    assert page.read_text() == "# Benchmarks\n\nHow they were measured.\n" + first

    page.write_text(page.read_text() + "\n## After\n")
    second = f"{bench.MARK_START}\n| b |\n{bench.MARK_END}\n"
    bench.write_markdown(page, second)
    assert page.read_text() == "# Benchmarks\n\nHow they were measured.\n" + second + "\n## After\n"


def test_markdown_with_one_marker_is_refused_and_left_alone(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text(f"text\n{bench.MARK_START}\nmore\n")
    with pytest.raises(SystemExit, match="one of the markers without the other"):
        bench.write_markdown(page, f"{bench.MARK_START}\n{bench.MARK_END}\n")
    assert page.read_text() == f"text\n{bench.MARK_START}\nmore\n"


def test_unknown_model_names_are_refused_with_the_known_ones():
    with pytest.raises(SystemExit, match=r"unknown nonesuch .*topdown_fixture"):
        bench.pick_cases(["nonesuch"])


def test_every_fixture_model_type_is_benchmarked():
    types = {case.model_type for case in bench.FIXTURES}
    assert types == {
        "topdown",
        "bottomup",
        "single_instance",
        "multi_class_topdown",
        "multi_class_bottomup",
        "bbox_centernet",
        "bbox_ssd",
    }
    assert all(case.trained() for case in bench.FIXTURES)


def test_a_detector_alones_boxes_are_compared_as_their_corners(tmp_path):
    # Two .slp files of boxes as sleap-nn and sleap-live write them (LabeledFrame.bboxes,
    # no instances): one box 0.5 px lower in the second, frame 2 with a box fewer.
    video = bench.sio.Video(filename=str(tmp_path / "clip.mkv"))

    def write(name, frames):
        labeled = [
            bench.sio.LabeledFrame(
                video=video,
                frame_idx=index,
                bboxes=[bench.sio.PredictedBoundingBox(*box, score=0.9) for box in boxes],
            )
            for index, boxes in frames.items()
        ]
        path = tmp_path / name
        bench.sio.save_slp(bench.sio.Labels(labeled_frames=labeled, videos=[video]), str(path))
        return bench.read_boxes(path, 4)

    both = [(10, 20, 30, 40), (50, 60, 70, 80)]
    reference = write("torch.slp", {0: both, 2: both})
    other = write("live.slp", {0: [(50, 60.5, 70, 80.5), both[0]], 2: both[:1]})
    assert sorted(reference) == [0, 2] and reference[0].shape == (2, 2, 2)
    np.testing.assert_array_equal(reference[0][1], [[50, 60], [70, 80]])
    result = bench.agreement(reference, other)
    assert result["frames_same_count"] == 1 and result["frames_counts_differ"] == [2]
    assert result["instances_matched"] == pytest.approx(3 / 4)
    assert result["points"] == 6 and result["max_px"] == pytest.approx(0.5)
    assert bench.pick_cases(["bbox_centernet_fixture"])[0].tools() == bench.TOOLS


def test_a_model_that_fails_is_reported_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "sleap-nn").write_text("")
    monkeypatch.setattr(bench, "environment", lambda sleap_nn: {"load_average_start": (0.0,)})
    ran = []

    def bench_case(case, args, tmp, say):
        ran.append(case.name)
        raise SystemExit(f"sleap-nn export ... failed (1): no {case.name}")

    monkeypatch.setattr(bench, "bench_case", bench_case)
    argv = ["--sleap-nn", str(bin_folder), "--models", "topdown_fixture", "bottomup_fixture"]
    assert bench.main(argv) == 1
    assert ran == ["topdown_fixture", "bottomup_fixture"]
    err = capsys.readouterr().err
    assert "topdown_fixture left out: sleap-nn export ... failed (1): no topdown_fixture" in err


def _fake_sleap_nn(tmp_path: Path) -> Path:
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "sleap-nn").write_text("")
    return bin_folder


def test_unverified_names_a_model_that_is_not_run(tmp_path, capsys):
    argv = ["--sleap-nn", str(_fake_sleap_nn(tmp_path)), "--models", "topdown_fixture"]
    with pytest.raises(SystemExit):
        bench.main([*argv, "--unverified", "bottomup_fixture"])
    assert "--unverified: bottomup_fixture is not among the models run" in capsys.readouterr().err


def test_an_unverified_model_runs_without_the_export_check(tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(bench, "run_logged", lambda command, log: commands.append(command) or 1.0)
    case = bench.pick_cases(["topdown_fixture"])[0]
    for verify in (True, False):
        bench.whole_process(tmp_path, case, tmp_path / "c.mkv", tmp_path, tmp_path, None, verify)
    live = [command for command in commands if "sleap_live" in command]
    assert ["--no-verify" in command for command in live] == [False, True]


def test_no_warm_leaves_out_sleap_nns_in_process_runs(tmp_path, monkeypatch):
    case = bench.pick_cases(["topdown_fixture"])[0]
    calls = []
    monkeypatch.setattr(bench, "make_clip", lambda case, frames, folder: folder / "c.mkv")
    monkeypatch.setattr(bench, "frame_shape", lambda clip: (8, 8, 1))
    monkeypatch.setattr(bench, "sleap_nn_export", lambda *args: tmp_path)
    monkeypatch.setattr(
        bench,
        "sleap_live_warm",
        lambda case, clip, folder, batch, verify: {"frames": np.zeros((1, 8, 8, 1), np.uint8)},
    )
    monkeypatch.setattr(bench, "same_pixels", lambda *args: {"frames": 1, "identical": 1})
    monkeypatch.setattr(
        bench,
        "whole_process",
        lambda *args: {tool: {"whole_s": 2.0, "slp": tool} for tool in bench.TOOLS},
    )
    monkeypatch.setattr(bench, "read_poses", lambda slp: {})
    monkeypatch.setattr(bench, "sleap_nn_warm", lambda *args: calls.append(args) or {})
    args = bench.argparse.Namespace(
        frames=4, sleap_nn=tmp_path, batch_size=None, unverified=None, no_warm=True
    )
    result = bench.bench_case(case, args, tmp_path, lambda line: None)
    assert calls == []
    assert "warm_fps" not in result["runs"]["sleap-nn torch"]


def test_the_table_names_an_unverified_engine():
    runs = {tool: {"whole_s": 2.0, "whole_fps": 1.0} for tool in bench.TOOLS}
    runs["sleap-live"].update(engine="OnnxRunner", verified=False)
    pixels = {"frames": 1, "identical": 1, "max_levels": 0}
    result = {"model": "m", "frame": "8x8x1", "runs": runs, "same_pixels": pixels}
    names = [row[2] for row in bench.rows([result])]
    assert names == ["sleap-nn torch", "sleap-nn onnx", "sleap-live (OnnxRunner, unverified)"]


def test_the_table_gives_sleap_lives_whole_process_over_its_networks_alone():
    runs = {tool: {"whole_s": 11.5, "whole_fps": 100.0} for tool in bench.TOOLS}
    runs["sleap-live"].update(engine="OnnxRunner", networks_ms=10.0)
    pixels = {"frames": 1, "identical": 1, "max_levels": 0}
    result = {"model": "m", "frame": "8x8x1", "frames": 1000, "runs": runs, "same_pixels": pixels}
    column = bench.COLUMNS.index("whole / networks")
    # 11.5 s over 1,000 frames of 10 ms each.
    assert [row[column] for row in bench.rows([result])] == [
        bench._fmt(None),
        bench._fmt(None),
        "1.15",
    ]


NEW_KINDS = ("tiled_single_instance_fixture", "bbox_topdown_fixture")
NEW_KINDS += ("bbox_multi_class_topdown_fixture",)


def test_the_kinds_sleap_nn_cannot_export_are_benchmarked_without_its_onnx_run():
    cases = bench.pick_cases(list(NEW_KINDS))
    assert all(case.trained() and case.no_export for case in cases)
    assert [case.tools() for case in cases] == [("sleap-nn torch", "sleap-live")] * 3
    assert [case.models[0].name for case in cases] == [
        "tiled_single_instance",
        "bbox_centernet",
        "bbox_centernet_rgb",
    ]
    # The networks-alone floor runs whole frames: not what a tiled engine runs.
    assert [case.networks_alone for case in cases] == [False, True, True]
    exported = bench.pick_cases(["topdown_fixture"])[0]
    assert exported.tools() == bench.TOOLS and not exported.no_export


def test_a_model_without_sleap_nns_export_runs_no_export_and_no_onnx_predict(tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(bench, "run_logged", lambda command, log: commands.append(command) or 1.0)
    case = bench.pick_cases(["bbox_topdown_fixture"])[0]
    results = bench.whole_process(tmp_path, case, tmp_path / "c.mkv", None, tmp_path, None)
    assert set(results) == {"sleap-nn torch", "sleap-live"}
    assert not any("onnx" in command for command in commands)

    ran = []

    def run(command, **kwargs):
        ran.append(command)
        return bench.subprocess.CompletedProcess(command, 0, 'RESULT {"torch": {}}\n', "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    assert bench.sleap_nn_warm(tmp_path, case, tmp_path / "c.mkv", None, None) == {"torch": {}}
    # clip, export folder (none), batch size (default), runtimes, models
    assert ran[0][3:7] == [str(tmp_path / "c.mkv"), "", "", "torch"]


def test_the_table_says_why_sleap_nn_onnx_was_not_run_and_compares_with_torch():
    runs = {
        "sleap-nn torch": {"whole_s": 100.0, "whole_fps": 2.0},
        "sleap-live": {"whole_s": 20.0, "whole_fps": 10.0, "engine": "OnnxRunner"},
    }
    pixels = {"frames": 1, "identical": 1, "max_levels": 0}
    result = {"model": "m", "frame": "8x8x1", "runs": runs, "same_pixels": pixels}
    result["no_export"] = bench.BOX_NO_EXPORT
    table = bench.rows([result])
    assert len(table) == 3 and all(len(row) == len(bench.COLUMNS) for row in table)
    assert table[1][2] == f"sleap-nn onnx: not run, {bench.BOX_NO_EXPORT}"
    assert set(table[1][3:]) == {""}
    torch_ratio = bench.COLUMNS.index("x torch predict")
    onnx_ratio = bench.COLUMNS.index("x onnx predict")
    assert [table[2][torch_ratio], table[2][onnx_ratio]] == ["5.00", ""]


def test_a_named_section_leaves_the_main_table_alone(tmp_path):
    page = tmp_path / "benchmarks.md"
    main_table = f"{bench.MARK_START}\n| main |\n{bench.MARK_END}\n"
    page.write_text("# Benchmarks\n" + main_table)
    start, end = bench.markers("new-kinds")
    bench.write_markdown(page, f"{start}\n| a |\n{end}\n", "new-kinds")
    bench.write_markdown(page, f"{start}\n| b |\n{end}\n", "new-kinds")
    assert page.read_text() == "# Benchmarks\n" + main_table + f"{start}\n| b |\n{end}\n"


def test_section_without_markdown_is_refused(tmp_path, capsys):
    argv = ["--sleap-nn", str(_fake_sleap_nn(tmp_path)), "--section", "new-kinds"]
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert "--section names markers in the --markdown file" in capsys.readouterr().err
