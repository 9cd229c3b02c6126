"""npm installs into the cache (engines/export/npm.py): what fails says so in one line,
naming the install and what to do instead."""

from __future__ import annotations

import pytest

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.export.npm import npm_install

INSTEAD = "set SOMETHING to a folder holding it"


def test_without_npm_the_error_says_what_needs_it_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeUnavailableError) as error:
        npm_install(tmp_path / "prefix", ["pkg@1.0.0"], needed_for="a test needs pkg 1.0.0",
                    instead=INSTEAD)  # fmt: skip
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("a test needs pkg 1.0.0 from npm, and npm is not installed")
    assert message.endswith(INSTEAD)
    assert not (tmp_path / "prefix").exists()


def test_a_failed_install_gives_npms_last_line(tmp_path, monkeypatch):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    npm = bin_folder / "npm"
    npm.write_text(
        "#!/bin/sh\necho 'npm warn something' >&2\necho 'npm error 404 Not Found' >&2\nexit 1\n"
    )
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_folder))
    with pytest.raises(RuntimeUnavailableError) as error:
        npm_install(tmp_path / "prefix", ["pkg@1.0.0", "other@1.0.0"], needed_for="unused",
                    instead=INSTEAD)  # fmt: skip
    assert str(error.value) == (
        f"npm install pkg@1.0.0 other@1.0.0 failed (npm error 404 Not Found); {INSTEAD}"
    )
