"""Fixtures shared by the engine tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def toy_models() -> ModuleType:
    """`tests/engines/toy_models.py`: small exportable inference models."""
    name = "sleap_live_tests_toy_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("toy_models.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def fake_networks() -> ModuleType:
    """`tests/engines/fake_networks.py`: stand-in networks and blob frames."""
    name = "sleap_live_tests_fake_networks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("fake_networks.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
