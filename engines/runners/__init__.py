"""Runtimes behind the `Runner` interface; each imports its library lazily."""

from sleap_live.engines.runners.base import Runner

__all__ = ["Runner"]
