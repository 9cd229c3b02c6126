"""Fixtures for every test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from sleap_live.engines.cache import CACHE_DIR_ENV
from sleap_live.engines.runners.cpu_choice import ENGINE_ENV

# `tests/script_modules.py`, registered at once: test modules import it by this name
# (`import sleap_live_tests_scripts as scripts`) to load the scripts they test.
_SPEC = importlib.util.spec_from_file_location(
    "sleap_live_tests_scripts", Path(__file__).with_name("script_modules.py")
)
sys.modules[_SPEC.name] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sys.modules[_SPEC.name])


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


@pytest.fixture(autouse=True)
def _leaves_nothing_in_the_working_directory():
    """A test that runs the CLI without -o must run in a folder of its own: default
    outputs land in the working directory, which under pytest is the repository."""
    folder = Path.cwd()
    before = set(folder.iterdir())
    yield
    left = sorted(
        path.name
        for path in set(folder.iterdir()) - before
        if path.suffix in {".slp", ".journal", ".h5", ".nwb", ".csv", ".onnx"}
    )
    assert not left, f"the test left {', '.join(left)} in {folder}"
