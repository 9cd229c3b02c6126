"""Exports follow the output rule of `run` (issue #36): never through another user's
link, written in a private folder and renamed into place with the link checked then."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sleap_live import cli
from sleap_live.engines.export import exporter
from sleap_live.engines.export.exporter import export_graph
from sleap_live.output_rule import OutputError
from tests.committed import DATA
from tests.users import as_user, other_user

MODELS = DATA / "models"


def victim_file(folder: Path) -> Path:
    """Root's own 0600 file, which the other user can point a link at, not write."""
    victim = folder / "accounts.h5"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    return victim


@pytest.mark.parametrize(
    ("name", "options"),
    [("m.onnx", []), ("m.pt", ["--format", "torchscript"]), ("m.pt2", ["--format", "pt2"])],
)
def test_export_refuses_another_users_link_before_exporting(
    name, options, tmp_path, shared_folder, capsys
):
    victim = victim_file(tmp_path)
    link = shared_folder / name
    as_user(other_user(), lambda: link.symlink_to(victim))
    argv = ["export", str(MODELS / "single_instance"), "-o", str(link), *options]
    assert cli.main(argv) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(link) in line and "owned by another user" in line
    assert victim.read_text() == "secret\n" and victim.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("name", "format"), [("m.onnx", "onnx"), ("m.pt", "torchscript")])
def test_a_link_planted_while_exporting_is_never_written_through(
    name, format, tmp_path, shared_folder, toy_models, monkeypatch
):
    # The claim passed; the link appears while the model is exported: the rename
    # into place checks the path again and refuses, nothing written through it.
    victim = victim_file(tmp_path)
    link = shared_folder / name
    export = exporter._export

    def export_then_plant(*args, **kwargs):
        exported = export(*args, **kwargs)
        as_user(other_user(), lambda: link.symlink_to(victim))
        return exported

    monkeypatch.setattr(exporter, "_export", export_then_plant)
    model = toy_models.ToyInstanceModel(input_channels=1)
    with pytest.raises(OutputError, match="owned by another user"):
        export_graph(model, link, format=format, verify=False)
    assert victim.read_text() == "secret\n"
    assert sorted(p.name for p in shared_folder.iterdir()) == [name]  # nothing left behind


def test_an_export_is_written_in_a_private_folder_and_keeps_the_mode(tmp_path, toy_models):
    out = tmp_path / "m.onnx"
    out.write_bytes(b"an earlier export")
    out.chmod(0o600)
    model = toy_models.ToyInstanceModel(input_channels=1)
    assert export_graph(model, out, verify=False, overwrite=True) == out
    assert out.stat().st_mode & 0o777 == 0o600 and out.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.json"]
    assert os.geteuid() == out.stat().st_uid
