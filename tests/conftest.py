"""Fixtures for every test."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sleap_live.engines.cache import CACHE_DIR_ENV
from sleap_live.engines.openmp import prefer_passive_wait
from sleap_live.engines.runners.cpu_choice import ENGINE_ENV
from tests.users import shared_folder  # noqa: F401 (a fixture, for every test)

# torch's idle OpenMP threads sleep in the test process and every process it starts,
# as in sleap-live's own runs (engines/openmp.py): set before any test module imports
# torch, which is when OpenMP reads it. Spinning threads took a busy machine's core
# from the thread still working (the NV12 tests took 35 s instead of 3).
prefer_passive_wait()
# Inductor compiles in this process, not in a pool of its own: with pytest-xdist the
# workers already fill the cores, and each pool process imports torch first (about
# 10 s of CPU per compilation measured here).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-compile-parity",
        action="store_true",
        help="check torch-compile against sleap-nn on every model type, not only single "
        "instance (inductor takes most of a minute of CPU per model type)",
    )


# The longest tests (from a minute of one core down to about 10 s each), started first
# under pytest-xdist: run last, one of them is the whole suite's tail.
LONGEST_FIRST = (
    "tests/engines/test_parity.py::test_torch_compile_matches_sleap_nn_predict[single_instance]",
    "tests/engines/test_parity.py::test_backbones_match_sleap_nn_predict[swint_topdown]",
    "tests/engines/test_lab_models.py::test_a_top_down_pair_with_resized_crops",
    "tests/engines/test_lab_models.py::test_lab_models_export_and_verify_for_onnx_runtime",
    "tests/engines/test_legacy_models.py::test_topdown_runs_from_the_command_line_as_sleap_1x",
    "tests/test_torch_free.py::test_cli_runs_an_onnx_export_without_torch",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `LONGEST_FIRST` tests at the head of the collection, in its order, which
    pytest-xdist's schedulers give out first (the same order in every worker, as xdist
    requires)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def rank(item: pytest.Item) -> int:
        return next(i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix))

    longest = sorted((item for item in items if item.nodeid.startswith(LONGEST_FIRST)), key=rank)
    items[:] = longest + [item for item in items if item not in longest]


@pytest.fixture(scope="session", autouse=True)
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """One sleap-live cache for the whole run, never the user's: each fixture model is
    exported (and verified) once, by the first test that loads it with given export
    options and settings, and every later load hits that entry (subprocesses inherit
    the variable). The cache is keyed by the models' bytes, the export options and the
    graph-side settings, so sharing it changes no test's poses; a test that looks at
    what the cache does (first-run notices, entries written, corrupt entries) takes
    `private_cache_dir` instead. Under pytest-xdist every worker shares it (entries
    are written atomically)."""
    folder = _run_folder(tmp_path_factory) / "sleap_live_cache"
    folder.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(folder))
        yield folder


@pytest.fixture(scope="session")
def warm_export_cache(shared_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared cache with the ONNX export of every fixture model case (tests/engines/
    goldens.py) in it, and its graph specialised to the case video's frame shape,
    verified on the video's first frames as `sleap-live run` verifies them. The parity
    suite takes it; the rest of the cache fills as tests load models (each model,
    export options and settings exported once). The first worker to get here warms
    it; the others wait for it rather than export the same models again.

    Run before every test file that loads a fixture model, those passed as well: that
    is how the tests that need a first export of their own were found (they take
    `private_cache_dir`)."""
    from filelock import FileLock

    from sleap_live.engines.runners.load import load_runner
    from sleap_live.stream.runner import first_frames
    from tests.engines import goldens

    run_folder = _run_folder(tmp_path_factory)
    warmed = run_folder / "export_cache_warmed"
    with FileLock(run_folder / "export_cache_warming.lock"):
        if not warmed.exists():
            for name in (*goldens.CASES, *goldens.BOX_CASES):
                models, video, _, _ = goldens.case_paths(name)
                runner = load_runner(
                    models,
                    engine="onnx",
                    device="cpu",
                    cache_dir=shared_cache_dir,
                    verify_frames=first_frames(video),
                )
                runner.close()
            warmed.touch()
    return shared_cache_dir


@pytest.fixture(scope="session")
def demo_export_cache(shared_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared cache with the bundled top-down pair's export for the demo clip, as
    `sleap-live run tests/data/videos/demo.mp4 -m .../centroid -m .../centered_instance`
    makes it (the README's first command): the tests that run the README's code take
    it, so the export is made once, not by each of them (or by two of its commands
    side by side)."""
    from filelock import FileLock

    from sleap_live.stream.runner import load_for_source
    from sleap_live.stream.sources import open_source

    data = Path(__file__).parent / "data"
    run_folder = _run_folder(tmp_path_factory)
    warmed = run_folder / "demo_export_warmed"
    with FileLock(run_folder / "demo_export_warming.lock"):
        if not warmed.exists():
            models = [data / "models" / "centroid", data / "models" / "centered_instance"]
            with open_source(data / "videos" / "demo.mp4") as source:
                load_for_source(models, source, cache_dir=shared_cache_dir).close()
            warmed.touch()
    return shared_cache_dir


@pytest.fixture(scope="session")
def once_per_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, Callable[[], Any]], Any]:
    """`once_per_run(key, compute)`: `compute()`'s value, made by the first test of
    the whole run to ask for `key` and read back (pickled) by every later one, in any
    xdist worker: a session fixture or `functools.cache` is made once per worker, and
    under `--dist worksteal` the tests sharing a dear result (a whole video's poses, a
    CLI run) land in different workers. `key` names everything the value depends on."""
    from filelock import FileLock

    folder = _run_folder(tmp_path_factory) / "once_per_run"
    folder.mkdir(exist_ok=True)
    values: dict[str, Any] = {}

    def once(key: str, compute: Callable[[], Any]) -> Any:
        if key not in values:
            path = folder / f"{key}.pickle"
            with FileLock(folder / f"{key}.lock"):
                if path.exists():
                    values[key] = pickle.loads(path.read_bytes())
                else:
                    values[key] = compute()
                    path.write_bytes(pickle.dumps(values[key]))
        return values[key]

    return once


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this test run that every xdist worker shares (each worker's own
    base folder lies inside it); the base folder itself without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


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
