"""Fixtures shared by the engine tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch


def _helper_module(file_name: str, module_name: str) -> ModuleType:
    """The test helper file next to this one, imported once under `module_name`."""
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, Path(__file__).with_name(file_name)
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


# `tests/engines/goldens.py`, registered at once: test modules import it by this name
# (`import sleap_live_tests_goldens as goldens`) to parametrize over its cases.
_helper_module("goldens.py", "sleap_live_tests_goldens")


@pytest.fixture(scope="session")
def toy_models() -> ModuleType:
    """`tests/engines/toy_models.py`: small exportable inference models."""
    return _helper_module("toy_models.py", "sleap_live_tests_toy_models")


@pytest.fixture(scope="session")
def fake_networks() -> ModuleType:
    """`tests/engines/fake_networks.py`: stand-in networks and blob frames."""
    return _helper_module("fake_networks.py", "sleap_live_tests_fake_networks")


@pytest.fixture
def one_thread():
    """Runs the test with one torch intra-op thread, restoring the count after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
