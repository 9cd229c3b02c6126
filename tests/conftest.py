"""Fixtures for every test."""

from __future__ import annotations

import pytest

from sleap_live.engines.load.export_cache import CACHE_DIR_ENV


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """Each test starts with an empty sleap-live cache of its own, never the user's:
    model directories are exported as on a first run, and what one test caches
    cannot change what another sees (subprocesses inherit the variable)."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path_factory.mktemp("sleap_live_cache")))
