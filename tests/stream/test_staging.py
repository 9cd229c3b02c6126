"""The output rule's staging (`sleap_live/output_rule.py`): what is written where,
and what is left after a failure (issue #36)."""

from __future__ import annotations

import os

import pytest

from sleap_live.output_rule import OutputError, staged_file
from tests.users import as_user, other_user


def test_a_folder_output_replaces_an_earlier_one_whole_and_keeps_its_mode(tmp_path):
    out = tmp_path / "web"
    out.mkdir(mode=0o750)
    (out / "stale.onnx").write_text("an earlier export's graph")
    with staged_file(out, "the export") as staged:
        staged.mkdir()
        (staged / "model.onnx").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["model.onnx"]
    assert out.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web"]  # nothing left beside it


def test_a_failed_write_leaves_the_output_as_it_was_and_nothing_beside_it(tmp_path):
    out = tmp_path / "m.onnx"
    out.write_text("kept")
    with pytest.raises(RuntimeError), staged_file(out, "the export") as staged:
        staged.write_text("half")
        raise RuntimeError("the export failed")
    assert out.read_text() == "kept" and sorted(tmp_path.iterdir()) == [out]


def test_a_folder_output_where_a_link_was_planted_meanwhile_is_refused(tmp_path, shared_folder):
    victim = tmp_path / "theirs"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    out = shared_folder / "web"
    with pytest.raises(OutputError, match="owned by another user"):
        with staged_file(out, "the export") as staged:
            staged.mkdir()
            (staged / "model.onnx").write_text("new")
            as_user(other_user(), lambda: out.symlink_to(victim))
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert [p.name for p in shared_folder.iterdir()] == ["web"] and out.is_symlink()
    assert os.readlink(out) == str(victim)


def test_an_output_in_a_folder_one_may_write_but_not_list_is_written(shared_folder):
    # A 0733 drop folder: its folder descriptor is taken without read permission.
    user = other_user()
    drop = shared_folder / "drop"
    drop.mkdir()
    drop.chmod(0o733)
    out = drop / "m.onnx"

    def write() -> None:
        with staged_file(out, "the export") as staged:
            staged.write_text("model")

    as_user(user, write)
    assert out.read_text() == "model" and out.stat().st_uid == user[0]
    assert sorted(p.name for p in drop.iterdir()) == ["m.onnx"]


def test_many_videos_never_rename_another_users_link_into_place(shared_folder):
    # In a folder another user owns, they may put a link at a video's hidden
    # unfinished name; renamed into place it would become the output.
    from sleap_live.stream.many.finish import finish, unfinished_path

    user = other_user()
    theirs = shared_folder / "theirs"
    as_user(user, lambda: theirs.mkdir(mode=0o777))
    output = theirs / "v.predictions.slp"
    as_user(user, lambda: unfinished_path(output).symlink_to("/etc/passwd"))
    with pytest.raises(OutputError, match="not this run's own file"):
        finish(output)
    assert not output.exists() and not output.is_symlink()
