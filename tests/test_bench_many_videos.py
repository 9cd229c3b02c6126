"""scripts/bench_many_videos.py: it runs end to end and ends with the docs' table.

The real run (20 clips, every layout, Ray) takes minutes; this one cuts two clips of
three frames and runs one layout twice in this process.
"""

from __future__ import annotations

from tests import script_modules as scripts

bench = scripts.load("bench_many_videos.py")


def test_the_benchmark_runs_end_to_end_and_prints_a_table_for_the_docs(capsys):
    arguments = ["--clips", "2", "--frames", "3", "--layouts", "1x2x1", "--repeat", "2"]
    assert bench.main(arguments) == 0
    printed = capsys.readouterr().out
    assert f"`python scripts/bench_many_videos.py {' '.join(arguments)}`: 2 clips" in printed
    assert "| layout | what | wall s (best) | fps (best) | every run, s | same poses |" in printed
    (row,) = [line.split(" | ") for line in printed.splitlines() if line.startswith("| 1x2x1")]
    assert row[1] == "this process, with 2 videos in flight and 1 engine thread"
    assert row[4].count(",") == 1  # both runs listed
    assert row[5] == "yes |"  # the poses of every run equal the first's


def test_layouts_are_described_in_words():
    assert (
        bench.describe("2x1x1")
        == "2 worker processes, each with 1 video in flight and 1 engine thread"
    )
    assert (
        bench.describe("ray:4x2x2")
        == "4 Ray actors, each with 2 videos in flight and 2 engine threads"
    )
