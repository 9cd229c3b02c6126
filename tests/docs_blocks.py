"""The code blocks of README.md and the documentation site (docs/*.md), for the tests
that run or check them.

A block is fenced with its language: ```bash (commands), ```python (code), anything
else (```text, or none) is output or a listing, not run. A block right after the line
`<!-- parse-only: REASON -->` needs what a test machine lacks (a camera, a GPU, a
publisher to listen to): it is checked for syntax only, and REASON says why.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parents[1]
PARSE_ONLY = re.compile(r"<!-- parse-only: (.+) -->")
FENCE = re.compile(r"^```(\w*)\s*$")


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
