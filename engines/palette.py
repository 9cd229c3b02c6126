"""The one colour scheme poses are drawn in: `sleap-live render`, overlay recordings,
the preview and the exported web page."""

from __future__ import annotations

DEFAULT_PALETTE = "standard"


def palette_hex(name: str = DEFAULT_PALETTE) -> list[str]:
    """sleap-io's palette `name` as ``#rrggbb`` strings, in its order (for the pages)."""
    from sleap_io.rendering.colors import PALETTES

    return [f"#{r:02x}{g:02x}{b:02x}" for r, g, b in PALETTES[name]]
