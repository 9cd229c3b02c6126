"""Fixtures for every test."""

from __future__ import annotations

from pathlib import Path

import pytest

from sleap_live.engines.cache import CACHE_DIR_ENV
from sleap_live.engines.runners.cpu_choice import ENGINE_ENV


@pytest.fixture(scope="session", autouse=True)
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """One sleap-live cache for the whole session, never the user's: each fixture model
    is exported (and verified) once, by the first test that loads it with given export
    options and settings, and every later load hits that entry (subprocesses inherit
    the variable). The cache is keyed by the models' bytes, the export options and the
    graph-side settings, so sharing it changes no test's poses; a test that looks at
    what the cache does (first-run notices, entries written, corrupt entries) takes
    `private_cache_dir` instead."""
    folder = tmp_path_factory.mktemp("sleap_live_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(folder))
        yield folder


@pytest.fixture(scope="session")
def warm_export_cache(shared_cache_dir: Path) -> Path:
    """The shared cache with the ONNX export of every fixture model case (tests/engines/
    goldens.py) in it, and its graph specialised to the case video's frame shape,
    verified on the video's first frames as `sleap-live run` verifies them. The parity
    suite takes it; the rest of the cache fills as tests load models (each model,
    export options and settings exported once).

    Run before every test file that loads a fixture model, those passed as well: that
    is how the tests that need a first export of their own were found (they take
    `private_cache_dir`)."""
    from sleap_live.cli.options import first_frames
    from sleap_live.engines.runners.load import load_runner
    from tests.engines import goldens

    for name in goldens.CASES:
        models, video, _, _ = goldens.case_paths(name)
        frames = first_frames(video)
        runner = load_runner(
            models, engine="onnx", device="cpu", cache_dir=shared_cache_dir, verify_frames=frames
        )
        runner.close()
    return shared_cache_dir


@pytest.fixture
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Path:
    """An empty sleap-live cache of this test's own: model directories are exported as
    on a first run, and what this test caches no other test sees."""
    folder = tmp_path_factory.mktemp("private_cache")
    monkeypatch.setenv(CACHE_DIR_ENV, str(folder))
    return folder


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
