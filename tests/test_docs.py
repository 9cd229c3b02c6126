"""The README and the documentation site (issue 24): the command reference has every
option of every command, every code block runs or parses, and the commands a new user
pastes write nowhere in the repository but `out/`, which git ignores.

The site itself is built by `.ci/run` (`mkdocs build --strict`); these checks need no
MkDocs. Python blocks are run by tests/stream/test_closed_loop_example.py (slow: a
model each); here every Python block is checked to be one of those, or marked
parse-only with its reason. Bash blocks are checked without running them: their
syntax (`bash -n`), each `sleap-live` command against the real parser (so a renamed
or removed option fails here), and each `python scripts/X.py` names a script that
exists.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess

import pytest
import yaml

from sleap_live import cli
from sleap_live.cli import COMMANDS, reference
from sleap_live.cli.options import UsageError
from tests import script_modules
from tests.docs_blocks import REPO, WRITES, Block, blocks, pages, python_after, shell_words
from tests.stream.test_closed_loop_example import RUN_HERE

# The pages a new user follows top to bottom: their commands write into out/ only.
FOLLOWED = ("README.md", "docs/getting-started.md", "docs/cli.md")
ALL_BLOCKS = [block for page in pages() for block in blocks(page)]


def sleap_live_commands(block: Block) -> list[list[str]]:
    return [command[1:] for command in shell_words(block) if command[0] == "sleap-live"]


def test_the_reference_lists_every_option_of_every_command():
    top = cli.parser()
    text = reference.markdown(top)
    found = reference.commands(top)
    assert set(found) == set(COMMANDS)
    sections = {part.split("`", 1)[0]: part for part in text.split("\n## `sleap-live ")[1:]}
    for name, command in found.items():
        section = sections[name]
        for option in reference.option_names(command):
            assert f"`{option}" in section, f"sleap-live {name}: {option} is not in the reference"


def test_the_site_build_writes_the_reference_into_its_page():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert "scripts/docs_hooks.py" in config["hooks"] and config["strict"] is True
    hooks = script_modules.load("docs_hooks.py")
    page_text = (REPO / "docs" / hooks.PAGE).read_text()

    class Page:
        class file:
            src_uri = hooks.PAGE

    built = hooks.on_page_markdown(page_text, page=Page)
    assert hooks.MARKER not in built and reference.markdown() in built
    # Every page of the site is in its navigation, bar those other work may add.
    listed = yaml.safe_dump(config["nav"])
    for page in sorted((REPO / "docs").glob("*.md")):
        if page.name not in hooks.OPTIONAL_PAGES.values():
            assert page.name in listed, f"docs/{page.name} is not in mkdocs.yml's nav"


@pytest.mark.parametrize(
    "block", [b for b in ALL_BLOCKS if b.language == "bash"], ids=lambda b: b.where
)
def test_every_bash_block_parses_and_its_commands_exist(block):
    syntax = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True)
    assert syntax.returncode == 0, f"{block.where}: {syntax.stderr}"
    top = cli.parser()
    for argv in sleap_live_commands(block):
        if argv[0] not in COMMANDS:
            argv = ["run", *argv]  # as `sleap-live --camera 0 ...` runs
        try:
            top.parse_args(argv)
        except UsageError as error:
            pytest.fail(f"{block.where}: sleap-live {shlex.join(argv)}: {error}")
    for command in shell_words(block):
        if command[0] in ("python", "python3") and command[1].startswith("scripts/"):
            assert (REPO / command[1]).is_file(), f"{block.where}: no {command[1]}"


def test_the_commands_a_new_user_follows_write_into_out_only():
    """Issue 24: README commands wrote demo.slp, model.onnx, ... into the repository."""
    gitignore = (REPO / ".gitignore").read_text().splitlines()
    assert "/out/" in gitignore and "/site/" in gitignore
    checked = 0
    for page in FOLLOWED:
        for block in blocks(REPO / page):
            if block.language != "bash":
                continue
            for argv in sleap_live_commands(block):
                for option, value in itertools.pairwise(argv):
                    if option in WRITES:
                        checked += 1
                        assert value.startswith("out/"), f"{block.where}: {option} {value}"
                assert argv[0] not in ("run", "replay", "export") or set(argv) & {"-o"}, (
                    f"{block.where}: sleap-live {shlex.join(argv)} writes into the working "
                    "directory without -o"
                )
    assert checked >= 10


def test_every_python_block_is_run_by_a_test_or_marked_parse_only():
    run = {python_after(page, after) for page, after in RUN_HERE}
    for block in ALL_BLOCKS:
        if block.language != "python":
            continue
        compile(block.code, block.where, "exec")
        if block.parse_only is None:
            assert block in run, f"{block.where}: run it in a test, or mark it parse-only"
        else:
            assert block.parse_only.strip(), f"{block.where}: say why it is parse-only"
    assert all(block.parse_only is None for block in run)


def test_the_readme_is_short_and_its_test_command_is_cis():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    [tests_block] = [b for b in blocks(REPO / "README.md") if "ci/run" in b.code]
    assert tests_block.code == "bash .ci/run\n"
    assert "minutes" in readme[readme.index("bash .ci/run") :]
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -q torch==2.13.0 -e ".[test,docs]"' in ci
    assert "mkdocs build --strict" in ci


def anchors(page) -> set[str]:
    """The ids of `page`'s headings, as the site's toc extension makes them."""
    from markdown.extensions.toc import slugify

    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            given = re.search(r"\{#([\w-]+)\}\s*$", title)
            found.add(given.group(1) if given else slugify(title, "-"))
    return found


def test_every_link_to_an_anchor_finds_it():
    """Issue 37: links into benchmarks.md named anchors its headings no longer had;
    mkdocs.yml's validation now fails the strict build on them too."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["validation"]["anchors"] == "warn"  # with strict: an error
    checked = 0
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([\w-]+)\)", page.read_text()):
            assert anchor in anchors(page.parent / target), f"{page.name}: {target}#{anchor}"
            checked += 1
    assert checked >= 3
    home = (REPO / "docs" / "index.md").read_text()
    where_next = home[home.index("Where to go next") :]
    for page in ("tracking.md", "many-videos.md", "models.md"):
        assert f"]({page})" in where_next, f"the home page's where to go next lacks {page}"


def test_the_install_notes_agree_on_what_the_pasted_command_installs():
    """Issue 37: the README said the command pulls PyPI's CUDA torch on Linux, the
    getting-started page that it pins PyTorch's CPU build."""
    for page in ("README.md", "docs/getting-started.md"):
        text = " ".join((REPO / page).read_text().split())
        assert "on Linux, the CUDA build (several GB; on macOS and Windows, the CPU" in text, page
        assert "--index-url https://download.pytorch.org/whl/cpu" in text, page
        assert "pins PyTorch's CPU build" not in text, page


def test_the_picture_is_committed_and_small():
    picture = REPO / "docs" / "images" / "overlay.png"
    assert picture.stat().st_size < 100_000
    assert "](docs/images/overlay.png)" in (REPO / "README.md").read_text()
    assert "](images/overlay.png)" in (REPO / "docs" / "index.md").read_text()
