"""How engines tell the user what a slow step is doing or what went wrong on the way.

`Notify` is every such callback's type, one line of text in; `notice` is the
default, that line on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

# Told one line: what a slow step is doing, or a notice (a rebuilt cache entry, ...).
Notify = Callable[[str], None]


def notice(message: str) -> None:
    """The default `Notify`: one line on stderr."""
    print(f"sleap-live: {message}", file=sys.stderr)


def quiet(message: str) -> None:
    """A `Notify` that says nothing."""
    del message
