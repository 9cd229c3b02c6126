"""The code blocks of README.md and the documentation site (docs/*.md), for the tests
that run or check them.

A block is fenced with its language: ```bash (commands), ```python (code), anything
else (```text, or none) is output or a listing, not run. A block right after the line
`<!-- parse-only: REASON -->` needs what a test machine lacks (a camera, a GPU, a
cluster, the network, a publisher to listen to, the user's own files) or takes long:
it is checked for syntax only, and REASON says why. Every other block is run as
pasted (tests/test_docs_commands.py, tests/stream/test_closed_loop_example.py).
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parents[1]
PARSE_ONLY = re.compile(r"<!-- parse-only: (.+) -->")
FENCE = re.compile(r"^```(\w*)\s*$")
# Options that name a file a command writes.
WRITES = ("-o", "--output", "--record", "--record-overlay", "--json", "--plot")
SEPARATORS = {"&&", "||", ";", "|"}


@attrs.frozen
class Block:
    """One fenced code block: its page, the line its code starts on, its language, its
    code, and why it is only parsed (None: it is run, or checked as a command)."""

    page: str
    line: int
    language: str
    code: str
    parse_only: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page of the site."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of `path`, in order."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(REPO))
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = lines[index - 1] if index else ""
        marked = PARSE_ONLY.search(before)
        code = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(
            Block(page, index + 2, opening[1], code, None if marked is None else marked[1])
        )
        index = end + 1
    return found


def python_after(page: str, after: str) -> Block:
    """The first Python block of `page` after the line starting with `after`."""
    text = (REPO / page).read_text()
    start_line = text[: text.index("\n" + after)].count("\n") + 1
    return next(
        block
        for block in blocks(REPO / page)
        if block.language == "python" and block.line > start_line
    )


def shell_words(block: Block) -> list[list[str]]:
    """The commands of a bash block, as argument lists (continuations joined)."""
    found: list[list[str]] = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, ";"]:
            if word in SEPARATORS:
                if command:
                    found.append(command)
                command = []
            else:
                command.append(word)
    return found


def run_chains(shell_blocks: list[Block]) -> list[list[Block]]:
    """The bash blocks to run, in page order, each block once (the README's commands
    are getting started's too), in chains: a block that reads a file under `out/` an
    earlier block writes runs after it, in its folder; chains run side by side."""
    chains: list[list[Block]] = []
    writer: dict[str, int] = {}  # out/ path -> its chain
    seen: set[str] = set()
    for block in shell_blocks:
        if block.parse_only is not None or block.code in seen:
            continue
        seen.add(block.code)
        words = [word for command in shell_words(block) for word in command]
        written = {value for option, value in itertools.pairwise(words) if option in WRITES}
        read = {word for word in words if word.startswith("out/")} - written
        chain = next((writer[path] for path in sorted(read) if path in writer), None)
        if chain is None:
            chains.append([])
            chain = len(chains) - 1
        chains[chain].append(block)
        writer.update(dict.fromkeys(written, chain))
    return chains
