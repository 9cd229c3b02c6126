"""Every shell block of the README and the documentation site runs as pasted (issue 37:
`--output-dir out/poses` needed a mkdir, the web-export page named models that are
not in the clone, and no test ran the shell blocks).

A block runs with bash from a fresh folder laid out as a clone's root (its
`tests/data` models and clips, and `out/`, which the install block makes), so nothing
lands in the repository; any command that fails fails the test. A block marked
`<!-- parse-only: REASON -->` (a camera, a GPU, a cluster, the network, the user's
own files, or minutes of work) is only checked for syntax, by tests/test_docs.py.

Each block runs once (the README's commands are getting started's too), and the
blocks run side by side, a block that reads another's output after it in its folder
(`docs_blocks.run_chains`): the whole test takes about as long as its longest chain.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs_blocks import REPO, Block, blocks, pages, run_chains

SHELL_BLOCKS = [block for page in pages() for block in blocks(page) if block.language == "bash"]
# What a clone's root holds that the documented commands read.
CLONE_DATA = ("tests/data/models", "tests/data/videos", "docs/experiments")


def clone_root(folder: Path) -> Path:
    """`folder` laid out as a clone's root after the install block: the bundled models,
    clips and experiment files (linked, read only by the commands) and `out/`."""
    for data in CLONE_DATA:
        (folder / data).parent.mkdir(parents=True, exist_ok=True)
        (folder / data).symlink_to(REPO / data)
    (folder / "out").mkdir()
    return folder


def files_under(folder: Path) -> set[str]:
    return {str(Path(root) / name) for root, _, names in os.walk(folder) for name in names}


def test_every_shell_block_is_run_or_marked_with_its_reason():
    fences = {block.language for page in pages() for block in blocks(page)}
    # One name for shell blocks, so none escapes the checks under another.
    assert not fences & {"sh", "shell", "console", "zsh"}, fences
    run = {block for chain in run_chains(SHELL_BLOCKS) for block in chain}
    for block in SHELL_BLOCKS:
        if block.parse_only is not None:
            assert block.parse_only.strip(), f"{block.where}: say why it is parse-only"
        else:
            assert block in run or any(block.code == other.code for other in run), block.where
    # The README's first result, its preview, and getting started's render and export.
    assert len(run) >= 4


def test_every_shell_block_not_marked_runs_as_pasted_from_a_clone(tmp_path, demo_export_cache):
    before = files_under(REPO / "tests" / "data")
    environment = dict(os.environ)
    # The clone's own installed commands: sleap-live and python.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    running: list[tuple[list[Block], subprocess.Popen[str]]] = []
    for number, chain in enumerate(run_chains(SHELL_BLOCKS)):
        folder = clone_root(tmp_path / f"clone{number}")
        script = "".join(block.code for block in chain)
        command = ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script]
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        running.append((chain, process))
    for chain, process in running:
        output, _ = process.communicate(timeout=600)
        where = ", ".join(block.where for block in chain)
        assert process.returncode == 0, f"{where} failed as pasted:\n{output[-3000:]}"
    for number in range(len(running)):
        folder = tmp_path / f"clone{number}"
        # Everything a command wrote is under out/.
        written = files_under(folder) - files_under(folder / "out")
        assert written == set(), written
        assert files_under(folder / "out"), f"clone{number}: nothing written into out/"
    assert files_under(REPO / "tests" / "data") == before
