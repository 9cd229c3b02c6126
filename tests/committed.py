"""The committed fixtures under tests/data: a missing one fails the test that needs it.

A lost model, video or golden must show up as a failure that names the file and the
script that makes it, never as a quiet skip.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
MAKE_FIXTURES = "scripts/make_fixtures.py (see tests/data/README.md)"
MAKE_LAB_MODELS = "scripts/make_fixtures.py --stages lab_data lab_train"


def require(*paths: Path | str, made_by: str = MAKE_FIXTURES) -> None:
    """Fails, naming the first missing path and `made_by`, unless every path exists."""
    missing = [Path(path) for path in paths if not Path(path).exists()]
    assert not missing, f"committed fixture {missing[0]} is missing: it is made by {made_by}"
