"""Fixtures for every test."""

from __future__ import annotations

import pytest

from sleap_live.engines.load.export_cache import CACHE_DIR_ENV
from sleap_live.engines.runners.cpu_choice import ENGINE_ENV


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """Each test starts with an empty sleap-live cache of its own, never the user's:
    model directories are exported as on a first run, and what one test caches
    cannot change what another sees (subprocesses inherit the variable)."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path_factory.mktemp("sleap_live_cache")))


@pytest.fixture(autouse=True)
def _auto_runs_onnx_runtime(monkeypatch):
    """`engine="auto"` on the CPU runs ONNX Runtime without timing OpenVINO against it,
    so a test's engine does not depend on how busy the machine is; the tests of that
    choice unset the variable."""
    monkeypatch.setenv(ENGINE_ENV, "onnx")
