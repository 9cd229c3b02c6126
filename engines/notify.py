"""How engines tell the user what a slow step is doing or what went wrong on the way.

`Notify` is every such callback's type, one line of text in. A parameter that
takes one has one of two names: `progress`, told what a slow step is doing (for a
status line; default `quiet`), and `notify`, told a notice the user should see (a
rebuilt cache entry, a graph kept; default `notice`, that line on stderr, or the
module's logger where the engine reports through logging).
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
