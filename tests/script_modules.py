"""The project's scripts (`scripts/*.py`) as modules, for the tests of their logic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load(file_name: str) -> ModuleType:
    """`scripts/FILE_NAME`, imported once under a name of its own."""
    name = "sleap_live_script_" + Path(file_name).stem
    if name not in sys.modules:
        sys.path.insert(0, str(SCRIPTS))  # scripts import the `fixtures` package beside them
        try:
            spec = importlib.util.spec_from_file_location(name, SCRIPTS / file_name)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(SCRIPTS))
    return sys.modules[name]
