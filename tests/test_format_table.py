"""The one table of export formats: `export --help` prints it, docs/export-formats.md
holds the same rows, every `--format` choice has a row, and the README names the page."""

from __future__ import annotations

from pathlib import Path

from sleap_live import cli
from sleap_live.cli.export import format_table_markdown
from sleap_live.engines.export import EXPORT_FORMATS
from sleap_live.engines.export.formats import FORMAT_TABLE

REPO = Path(__file__).resolve().parents[1]


def test_every_format_has_one_row():
    assert [row.argument for row in FORMAT_TABLE] == list(EXPORT_FORMATS)


def test_export_help_prints_the_table(capsys):
    assert cli.main(["export", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for row in FORMAT_TABLE:
        assert " ".join([row.argument, row.writes, row.cpu, row.gpu]) in text


def test_the_docs_page_holds_the_same_table_and_the_readme_links_it():
    assert format_table_markdown() in (REPO / "docs" / "export-formats.md").read_text()
    assert "docs/export-formats.md" in (REPO / "README.md").read_text()
