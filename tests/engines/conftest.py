"""Fixtures shared by the engine tests."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from tests.engines import fake_networks as fake_networks_module
from tests.engines import toy_models as toy_models_module


@pytest.fixture(scope="session")
def toy_models() -> ModuleType:
    """`tests/engines/toy_models.py`: small exportable inference models."""
    return toy_models_module


@pytest.fixture(scope="session")
def fake_networks() -> ModuleType:
    """`tests/engines/fake_networks.py`: stand-in networks and blob frames."""
    return fake_networks_module


@pytest.fixture
def one_thread():
    """Runs the test with one torch intra-op thread, restoring the count after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
