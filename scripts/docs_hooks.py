"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`).

The command-line reference page holds a marker that is replaced, at every build,
by the reference written from the parsers (`sleap_live.cli.reference`), so the page
lists exactly the options the installed command takes. Pages that other work adds
(`OPTIONAL_PAGES`) join the navigation where they exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sleap_live.cli import reference

# The line of docs/cli-reference.md that the generated reference replaces.
MARKER = "<!-- cli-reference -->"
PAGE = "cli-reference.md"
# Pages listed after `AFTER` in the navigation when docs/ has them, by title.
OPTIONAL_PAGES = {
    "Models": "models.md",
    "Tracking": "tracking.md",
    "Many videos": "many-videos.md",
}
AFTER = "Outputs and formats"


def on_config(config: Any) -> Any:
    """The navigation, with the optional pages that exist."""
    nav = config["nav"]
    present = [
        {title: page}
        for title, page in OPTIONAL_PAGES.items()
        if (Path(config["docs_dir"]) / page).is_file()
        and not any(page in entry.values() for entry in nav)
    ]
    at = next(i for i, entry in enumerate(nav) if AFTER in entry) + 1
    nav[at:at] = present
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """The page's Markdown, with the reference written in on the CLI page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE}: the marker {MARKER} is missing")
    return markdown.replace(MARKER, reference.markdown())
