"""What a many-videos run is given besides videos (issue #36): FIFOs, devices, link
loops and links to folders out of a folder are skipped with one escaped line each and never
opened; an output that is no pose file of its video is refused, not skipped as done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sleap_live import LoadOptions, run_many
from sleap_live.cli import main
from sleap_live.stream.many.videos import VideoListError, escaped, find_videos
from tests.stream.many_videos import MODEL, corrupt_video, cut_clips

ONNX_CPU = LoadOptions(engine="onnx", device="cpu")

REPO = Path(__file__).resolve().parents[2]


def test_a_fifo_given_beside_a_video_is_skipped_with_a_line_never_opened(tmp_path):
    (video,) = cut_clips(tmp_path, {"clip": (0, 2)})
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)  # opening it would block until someone writes it
    lines: list[str] = []
    assert find_videos([fifo, video], lines.append) == [video]
    assert lines == [f"{fifo}: a FIFO, not a video file: skipped"]
    with pytest.raises(VideoListError, match="matches no video file"):
        find_videos([tmp_path / "*.mp4"], lines.append)  # the FIFO alone


def test_a_pattern_over_link_loops_ends_and_names_each_loop(tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    (folder / "clip.mp4").write_bytes(b"")
    (folder / "self").symlink_to(".")  # a folder loop: ** must not walk into it
    (folder / "up").symlink_to("..")
    (folder / "l1.mp4").symlink_to("l2.mp4")  # a link loop matched by the pattern
    (folder / "l2.mp4").symlink_to("l1.mp4")
    script = (
        "import sys\n"
        "from sleap_live.stream.many.videos import find_videos\n"
        "print([str(v) for v in find_videos([sys.argv[1]])])\n"
    )
    # A subprocess with a deadline: the glob module's walk never ends here.
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder / "**" / "*.mp4")],
        capture_output=True, text=True, timeout=30, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([str(folder / "clip.mp4")])
    assert sorted(done.stderr.splitlines()) == [
        f"{folder / 'l1.mp4'}: a link that loops: skipped",
        f"{folder / 'l2.mp4'}: a link that loops: skipped",
    ]


def test_a_folder_run_names_each_thing_it_skips_escaped(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "videos"
    cut_clips(folder, {"clip": (0, 2)})
    os.mkfifo(folder / "pipe.mp4")
    os.mkfifo(folder / "new\nline.mkv")
    (folder / "etc").symlink_to("/etc")
    (folder / "passwd.mp4").symlink_to("/etc/passwd")
    corrupt_video(folder / "bad\rname.mp4")
    monkeypatch.chdir(tmp_path)
    arguments = ["run", "videos", "-m", str(MODEL), "--engine", "onnx", "--device", "cpu", "-q"]
    assert main(arguments) == 1  # the corrupt video fails; the others are not videos
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "videos/pipe.mp4: a FIFO, not a video file: skipped" in lines
    assert "videos/new\\nline.mkv: a FIFO, not a video file: skipped" in lines
    out = "videos/etc: a link to a folder out of videos (to /etc): not searched; "
    assert out + "give that folder to search it" in lines
    # A link to a file elsewhere is taken as that file: this one is no video.
    assert any(
        line.endswith(
            "videos/passwd.mp4: failed: "
            + escaped(folder / "passwd.mp4")
            + ": cannot open video: Invalid data found when processing input"
        )
        for line in lines
    ), lines
    failed = escaped(folder / "bad\rname.mp4") + ": failed:"
    assert any(line.startswith(failed) for line in lines), lines
    assert (tmp_path / "clip.predictions.slp").is_file()
    assert "\r" not in err and not any(line.startswith("line.mkv") for line in lines)


def test_names_are_escaped_one_line_each():
    assert escaped("a\nb\tc") == "a\\nb\\tc"
    assert escaped("caf\u00e9.mp4") == "caf\u00e9.mp4"
    assert escaped(os.fsdecode(b"x\xff.mp4")) == "x\\xff.mp4"


def _empty(path: Path) -> str:
    path.write_bytes(b"")
    return "is empty, not a pose file"


def _garbage(path: Path) -> str:
    path.write_bytes(b"not a pose file" * 64)
    return "is no readable pose file"


def _folder(path: Path) -> str:
    path.mkdir()
    return "is a folder, not a pose file"


@pytest.mark.parametrize("plant", [_empty, _garbage, _folder])
def test_resume_refuses_an_output_that_is_no_pose_file_of_its_video(tmp_path, plant):
    (video,) = cut_clips(tmp_path / "videos", {"clip": (0, 2)})
    output = tmp_path / "clip.predictions.slp"
    says = plant(output)
    before = sorted(os.listdir(tmp_path))
    run = run_many([video], MODEL, output_dir=tmp_path, load=ONNX_CPU)
    (result,) = run.results
    assert result.status == "failed" and not run.ok
    assert result.error is not None and says in result.error and str(output) in result.error
    assert "--overwrite" in result.error and len(result.error.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == before  # the user's file is left as it was


def test_resume_with_overwrite_redoes_a_video_whose_output_is_garbage(tmp_path):
    (video,) = cut_clips(tmp_path / "videos", {"clip": (0, 2)})
    output = tmp_path / "clip.predictions.slp"
    _garbage(output)
    run = run_many([video], MODEL, output_dir=tmp_path, load=ONNX_CPU, overwrite=True)
    assert [result.status for result in run.results] == ["done"]
    again = run_many([video], MODEL, output_dir=tmp_path, load=ONNX_CPU)
    assert [result.status for result in again.results] == ["skipped"]


def test_resume_refuses_the_poses_of_another_video(tmp_path):
    one, two = cut_clips(tmp_path / "videos", {"one": (0, 2), "two": (2, 2)})
    run_many([one], MODEL, output_dir=tmp_path, load=ONNX_CPU)
    (tmp_path / "one.predictions.slp").rename(tmp_path / "two.predictions.slp")
    run = run_many([two], MODEL, output_dir=tmp_path, load=ONNX_CPU)
    (result,) = run.results
    assert result.status == "failed"
    assert result.error is not None and "holds the poses of another video" in result.error
