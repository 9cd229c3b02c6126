"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`).

The command-line reference page holds a marker that is replaced, at every build,
by the reference written from the parsers (`sleap_live.cli.reference`), so the page
lists exactly the options the installed command takes; the command-line overview
holds one replaced by the engine table (`sleap_live.engines.engine_table`), the
same table `load_runner` validates against. Pages that other work adds
(`OPTIONAL_PAGES`) join the navigation where they exist.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sleap_live.cli import reference
from sleap_live.engines import engine_table

# The line of docs/cli-reference.md that the generated reference replaces.
MARKER = "<!-- cli-reference -->"
PAGE = "cli-reference.md"
ENGINE_MARKER = "<!-- engine-table -->"
ENGINE_PAGE = "cli.md"
# Each page with a generated part: its marker and what replaces it.
GENERATED: dict[str, tuple[str, Callable[[], str]]] = {
    PAGE: (MARKER, reference.markdown),
    ENGINE_PAGE: (ENGINE_MARKER, engine_table.markdown),
}
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
    """The page's Markdown, with its generated part written in."""
    if page.file.src_uri not in GENERATED:
        return markdown
    marker, write = GENERATED[page.file.src_uri]
    if marker not in markdown:
        raise ValueError(f"docs/{page.file.src_uri}: the marker {marker} is missing")
    return markdown.replace(marker, write())
