"""Fault suite, outputs: no output path, second writer or kill destroys data (issue #11).

Each test is one case of the issue's list: the run is refused in one line before
any work, or it writes what it should and nothing else is touched. Runs use the
fake engine (see test_cli.py); the kill tests run `scripts/fault_soak.py child`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.stream.outputs.journal import journal_path
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.types import PoseRecord
from tests.users import as_user, other_user, shell_as_user

ROOT = Path(__file__).parents[2]
SOAK = ROOT / "scripts" / "fault_soak.py"
sys.path.insert(0, str(SOAK.parent))
import fault_soak  # noqa: E402


def refused(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_record_naming_the_input_video_is_refused_and_the_video_kept(clip, fake_loads, capsys):
    before = clip.read_bytes()
    status = cli.main(["run", str(clip), "-m", "m", "--record", str(clip), "--no-verify"])
    assert status == 1
    line = refused(capsys)
    assert "the output of --record is the VIDEO input" in line and str(clip) in line
    assert clip.read_bytes() == before
    assert fake_loads == []  # refused before any work


def test_slp_output_that_is_the_input_is_refused(clip, tmp_path, fake_loads, capsys):
    renamed = tmp_path / "clip.slp"
    clip.rename(renamed)
    before = renamed.read_bytes()
    assert cli.main(["run", str(renamed), "-m", "m", "-o", str(renamed), "--no-verify"]) == 1
    assert "the output of -o is the VIDEO input" in refused(capsys)
    assert renamed.read_bytes() == before and fake_loads == []


def test_an_output_linked_to_an_input_is_refused(clip, tmp_path, fake_loads, capsys):
    link = tmp_path / "poses.slp"
    link.symlink_to(clip)
    hard = tmp_path / "hard.mp4"
    os.link(clip, hard)
    before = clip.read_bytes()
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(link), "--no-verify"]) == 1
    assert "-o is the VIDEO input" in refused(capsys)
    assert cli.main(["run", str(clip), "-m", "m", "--record", str(hard), "--no-verify"]) == 1
    assert "--record is the VIDEO input" in refused(capsys)
    assert link.is_symlink() and clip.read_bytes() == before and fake_loads == []


def test_record_naming_a_model_file_is_refused(clip, tmp_path, fake_loads, capsys):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"onnx bytes")
    assert cli.main(["run", str(clip), "-m", str(model), "--record", str(model)]) == 1
    assert "the output of --record is the -m input" in refused(capsys)
    directory = tmp_path / "centroid"
    directory.mkdir()
    (directory / "best.ckpt").write_bytes(b"weights")
    argv = ["run", str(clip), "-m", str(directory), "--record", str(directory / "best.ckpt")]
    assert cli.main(argv) == 1
    assert "--record is the -m input" in refused(capsys)
    assert (directory / "best.ckpt").read_bytes() == b"weights" and fake_loads == []


def test_the_pose_output_and_the_recording_must_differ(clip, tmp_path, fake_loads, capsys):
    out = tmp_path / "same.slp"
    argv = ["run", str(clip), "-m", "m", "-o", str(out), "--record", str(out), "--no-verify"]
    assert cli.main(argv) == 1
    assert "the output of --record is the -o input" in refused(capsys)
    assert fake_loads == []


def test_an_unwritable_output_is_found_before_any_work(clip, tmp_path, fake_loads, capsys):
    missing = tmp_path / "missing" / "out.slp"
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(missing), "--no-verify"]) == 1
    assert "does not exist" in refused(capsys)
    folder = tmp_path / "folder.slp"
    folder.mkdir()
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(folder), "--no-verify"]) == 1
    assert "names a folder" in refused(capsys)
    recording = tmp_path / "missing" / "rec.mp4"
    assert cli.main(["run", str(clip), "-m", "m", "--record", str(recording), "--no-verify"]) == 1
    line = refused(capsys)
    assert "does not exist" in line and "--record" in line
    assert fake_loads == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_a_read_only_output_folder_is_found_before_any_work(clip, tmp_path, fake_loads, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        argv = ["run", str(clip), "-m", "m", "-o", str(locked / "out.slp"), "--no-verify"]
        assert cli.main(argv) == 1
    finally:
        locked.chmod(0o700)
    assert "is not writable" in refused(capsys) and fake_loads == []


def test_a_symlinked_output_stays_a_link_to_the_poses(clip, tmp_path, fake_loads):
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "poses.slp"
    link = tmp_path / "out.slp"
    link.symlink_to(target)
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(link), "-q", "--no-verify"]) == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert len(sio.load_slp(str(target), open_videos=False)) == 40


def test_the_final_save_goes_through_a_private_folder_of_this_process(
    clip, tmp_path, fake_loads, monkeypatch
):
    # Not one fixed `.X.partial.slp` that two runs would share, nor a name another
    # user could plant a link at: a fresh 0700 folder of this process's (issue #36).
    written: list[tuple[Path, int]] = []
    save_slp = sio.save_slp

    def save(labels, filename, **options):
        folder = Path(os.path.realpath(Path(filename).parent))
        written.append((folder / Path(filename).name, folder.stat().st_mode & 0o777))
        return save_slp(labels, filename, **options)

    monkeypatch.setattr(sio, "save_slp", save)
    out = tmp_path / "out.slp"
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]) == 0
    [(file, mode)] = written
    assert file.name == "out.slp" and file.parent.parent == tmp_path and mode == 0o700
    assert file.parent.name.startswith(f".out.slp.{os.getpid()}.")
    assert not file.parent.exists() and len(sio.load_slp(str(out), open_videos=False)) == 40


def test_the_pose_writer_holds_only_the_frames_since_its_last_save(tmp_path, fakes):
    # Memory does not grow with the session: after a save the writer keeps nothing
    # of the frames it saved (the issue measured ~5.7 KB per frame kept).
    clock = fakes.FakeClock()
    slp = SlpWriter(
        tmp_path / "out.slp",
        fakes.SKELETON,
        video="camera:0",
        frame_shape=(24, 32, 1),
        save_interval=1.0,
        clock=clock,
    )

    def feed(frames: range) -> int:
        for index in frames:
            clock.advance(1 / 30)
            slp.write(PoseRecord(index, clock(), clock(), "camera:0", fakes.poses_for(index)))
        return tracemalloc.get_traced_memory()[0]

    feed(range(300))
    tracemalloc.start()
    try:
        early = feed(range(300, 600))
        late = feed(range(600, 3600))
    finally:
        tracemalloc.stop()
    assert slp.n_frames_written - slp.n_frames_saved <= 30  # one interval's frames
    assert late - early < 200_000  # kept, these 3000 frames would take about 1.8 MB
    slp.close()
    assert [
        lf.frame_idx for lf in sio.load_slp(str(tmp_path / "out.slp"), open_videos=False)
    ] == list(range(3600))


def start(tmp_path: Path, name: str, argv: list[str], delay: float = 0.02):
    log_dir = tmp_path / name
    return log_dir, fault_soak.start_child(log_dir, argv, delay=delay)


def test_two_runs_writing_the_same_output_at_once(tmp_path, capsys, fake_loads):
    clip = fault_soak.write_clip(tmp_path / "long.mkv", 600)
    out = tmp_path / "out.slp"
    argv = ["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]
    log_dir, first = start(tmp_path, "first", argv)
    try:
        fault_soak.wait_for(log_dir / "ready", first)
        assert cli.main(argv) == 1  # the second run, while the first writes
        line = refused(capsys)
        assert "being written by another sleap-live run" in line and str(out) in line
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err
    labels = sio.load_slp(str(out), open_videos=False)
    assert [lf.frame_idx for lf in labels] == list(range(600))
    assert not journal_path(out).exists()
    assert list(tmp_path.glob(".*partial*")) == []


def test_kill_before_the_first_save_leaves_a_recoverable_output(tmp_path):
    clip = fault_soak.write_clip(tmp_path / "long.mkv", 600)
    out = tmp_path / "out.slp"
    argv = ["replay", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]
    log_dir, process = start(tmp_path, "run", [*argv, "--save-interval", "1000"])
    try:
        fault_soak.wait_for(log_dir / "ready", process)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    assert not out.exists() and journal_path(out).exists()
    done = recover(out)
    assert done.returncode == 0 and "recovered 0 frames" in done.stdout + done.stderr
    labels = sio.load_slp(str(out), open_videos=False)
    assert len(labels) == 0 and labels.skeletons[0].node_names == ["head", "tail"]


def recover(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sleap_live", "recover", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("kind", ["replay", "run"])
def test_kill_mid_run_keeps_every_frame_up_to_the_last_save(kind, tmp_path):
    clip = fault_soak.write_clip(tmp_path / "long.mkv", 3000)
    out = tmp_path / "out.slp"
    argv = [kind, str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]
    log_dir, process = start(tmp_path, "run", [*argv, "--save-interval", "0.2"])
    journal = journal_path(out)
    try:
        fault_soak.wait_for(log_dir / "ready", process)
        header_only = journal.stat().st_size
        deadline = time.monotonic() + 60
        while journal.stat().st_size == header_only and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        killed_at = time.monotonic()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    figures = fault_soak.check_killed_output(out, log_dir, killed_at)  # recovers; checks order
    assert figures["recovered"] and figures["saved"] > 0
    assert not journal.exists()
    # Recovering twice finds nothing left to recover, and the .slp is kept.
    shutil.copyfile(out, tmp_path / "kept.slp")
    again = recover(out)
    assert again.returncode == 1 and "no journal to recover" in again.stderr
    assert out.read_bytes() == (tmp_path / "kept.slp").read_bytes()


@pytest.fixture
def full_disk(tmp_path):
    """A real 64 KiB filesystem (tmpfs) for a pose output, skipped where none can be mounted."""
    folder = tmp_path / "small"
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_at_the_final_save_ends_with_one_line_and_the_journal(full_disk, tmp_path):
    # A real model's 200 frames: the journal fits in 64 KiB, the .slp does not, and
    # HDF5 fails in the flush of its close (issue #20: the process then died of
    # SIGSEGV at exit, after h5py's __dealloc__ tracebacks).
    data = ROOT / "tests" / "data"
    out = full_disk / "out.slp"
    video, model = data / "videos" / "single.mkv", data / "exports" / "single_instance"
    argv = ["run", str(video), "-m", str(model)]
    done = subprocess.run(
        [sys.executable, "-m", "sleap_live", *argv, "-o", str(out), "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sleap-live: error: "), done.stderr
    assert "No space left on device" in lines[0] and str(journal_path(out)) in lines[0]
    assert not out.exists() and list(full_disk.glob(".*partial*")) == []
    # The journal holds every frame: recovered where there is room.
    kept = tmp_path / "kept.slp"
    shutil.copyfile(journal_path(out), journal_path(kept))
    assert recover(kept).returncode == 0
    assert len(sio.load_slp(str(kept), open_videos=False)) == 200


# -------------------------------------------- links another user planted (issue #20)


def test_another_users_link_in_a_shared_folder_is_not_followed(
    clip, tmp_path, shared_folder, fake_loads, capsys
):
    victim = tmp_path / "accounts.csv"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    link = shared_folder / "poses.csv"
    as_user(other_user(), lambda: link.symlink_to(victim))
    assert link.lstat().st_uid != os.geteuid()
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(link), "-q", "--no-verify"]) == 1
    line = refused(capsys)
    assert str(link) in line and "owned by another user" in line
    assert victim.read_text() == "secret\n" and stat_mode(victim) == 0o600
    assert sorted(tmp_path.iterdir()) == sorted([clip, victim])  # no sidecar, no journal
    assert fake_loads == []
    # The pose writer itself refuses it too (as `recover` does).
    with pytest.raises(OSError, match="owned by another user"):
        SlpWriter(link, skeleton(), video="v.mp4", frame_shape=(4, 4, 1))


def test_a_link_to_another_users_file_is_not_followed(
    clip, tmp_path, shared_folder, fake_loads, capsys
):
    user = other_user()
    theirs = shared_folder / "theirs"
    as_user(user, lambda: theirs.mkdir())
    victim = theirs / "poses.slp"
    as_user(user, lambda: victim.write_text("their poses\n"))
    link = tmp_path / "out.slp"  # my own link, in my own folder
    link.symlink_to(victim)
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(link), "-q", "--no-verify"]) == 1
    line = refused(capsys)
    assert str(link) in line and "owned by another user" in line
    assert victim.read_text() == "their poses\n"
    assert sorted(p.name for p in theirs.iterdir()) == ["poses.slp"]  # no journal there


def test_a_folder_link_into_another_users_folder_is_not_followed(
    clip, tmp_path, shared_folder, fake_loads, capsys
):
    user = other_user()
    theirs = shared_folder / "theirs"
    as_user(user, lambda: theirs.mkdir())
    via = tmp_path / "via"  # my own link to their folder, not the last part of -o
    via.symlink_to(theirs)
    out = via / "poses.slp"
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]) == 1
    assert "is a link to the folder" in refused(capsys)
    assert list(theirs.iterdir()) == []  # no journal, no temporary file there


def test_my_own_link_in_a_shared_folder_is_followed(clip, tmp_path, shared_folder, fake_loads):
    other_user()  # the same conditions as the refusals above
    target = tmp_path / "poses.slp"
    link = shared_folder / "mine.slp"
    link.symlink_to(target)
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(link), "-q", "--no-verify"]) == 0
    assert link.is_symlink() and len(sio.load_slp(str(target), open_videos=False)) == 40


def test_a_planted_journal_link_is_not_followed(clip, tmp_path, fake_loads, capsys):
    victim = tmp_path / "victim.txt"
    victim.touch()  # empty: a journal would be written into it
    out = tmp_path / "out.slp"
    journal_path(out).symlink_to(victim)
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]) == 1
    assert str(journal_path(out)) in refused(capsys)
    assert victim.read_bytes() == b"" and journal_path(out).is_symlink()


@pytest.mark.parametrize("suffix", [".slp", ".csv"])
def test_a_rewritten_output_keeps_its_mode_and_a_new_one_follows_the_umask(
    suffix, clip, tmp_path, fake_loads
):
    kept = tmp_path / f"kept{suffix}"
    kept.write_text("old\n")
    kept.chmod(0o600)
    new = tmp_path / f"new{suffix}"
    umask = os.umask(0o027)
    try:
        for out in (kept, new):
            argv = ["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]
            assert cli.main([*argv, "--overwrite"]) == 0
    finally:
        os.umask(umask)
    assert stat_mode(kept) == 0o600 and stat_mode(new) == 0o640
    if suffix == ".csv":
        assert stat_mode(Path(f"{new}.provenance.json")) == 0o640


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def skeleton():
    from sleap_live.engines.types import Skeleton

    return Skeleton(node_names=("head", "tail"), edges=((0, 1),), name="s")


@pytest.mark.parametrize("folder", ["sticky", "theirs"])
@pytest.mark.parametrize("suffix", [".slp", ".h5", ".csv"])
def test_links_planted_while_the_final_save_runs_are_never_written_through(
    suffix, folder, clip, tmp_path, shared_folder, fake_loads, monkeypatch
):
    # Issue #36 (Why 2): another user re-plants the temporary file's name as a link
    # while the final save runs, in a shared sticky folder or in a folder of theirs
    # (where they may also swap the folders in it). The save is staged in a fresh
    # 0700 folder reached through its descriptor: nothing is written through a link,
    # the output is the run's own file.
    from sleap_live.stream.outputs import recovery as slp_module

    user = other_user()
    victim = tmp_path / "victim.h5"  # root's 0600 file, which the other user cannot write
    victim.write_text("keep\n")
    victim.chmod(0o600)
    where = shared_folder
    if folder == "theirs":
        where = shared_folder / "theirs"
        as_user(user, lambda: where.mkdir(mode=0o755))
    out = where / f"out{suffix}"
    save_labels = slp_module.save_labels
    pid = os.getpid()

    # This process's old temporary names, and the staged file's own folder; planted
    # by a shell of the other user's (the run's threads are running: no fork).
    plant = (
        'cd "$1" || exit 0; for name in "$2" "$3"; do ln -s "$4" "$name"; done; '
        'for staging in "$5".*.partial; do [ -e "$staging" ] || continue; '
        'mv "$staging" "$staging.moved" && mkdir "$staging" && ln -s "$4" "$staging/$6"; done'
    )
    names = [f".out.{pid}.partial{suffix}", f".out{suffix}.provenance.json.{pid}.partial"]

    def save_while_planting(labels, path, final):
        shell_as_user(user, plant, str(where), *names, str(victim), f".out{suffix}", out.name)
        save_labels(labels, path, final)

    monkeypatch.setattr(slp_module, "save_labels", save_while_planting)
    assert cli.main(["run", str(clip), "-m", "m", "-o", str(out), "-q", "--no-verify"]) == 0
    assert victim.read_text() == "keep\n" and stat_mode(victim) == 0o600
    assert not out.is_symlink() and out.stat().st_uid == os.geteuid()
    assert out.stat().st_size > 0
    if suffix == ".slp":
        assert len(sio.load_slp(str(out), open_videos=False)) == 40


def test_track_does_not_follow_another_users_link(tmp_path, shared_folder, capsys):
    # Issue #36: every writer follows the output rule of `run`, `track` included.
    from tests.committed import DATA, require

    poses = DATA / "goldens" / "bottomup.slp"
    require(poses)
    victim = tmp_path / "theirs.slp"
    victim.write_text("their poses\n")
    victim.chmod(0o600)
    link = shared_folder / "tracked.slp"
    as_user(other_user(), lambda: link.symlink_to(victim))
    assert cli.main(["track", str(poses), "-o", str(link)]) == 1
    line = refused(capsys)
    assert str(link) in line and "owned by another user" in line
    assert victim.read_text() == "their poses\n" and link.is_symlink()
