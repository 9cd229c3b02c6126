#!/usr/bin/env python
"""Which TensorRT names sleap-live's runner and builder use, and which bindings have them.

The TensorRT Python bindings (`tensorrt_cu13_bindings`, 10.16.1.11 and 11.4.0.106 by
default; about 1.3 MB each) do not import without TensorRT's libraries, whose wheels
come from NVIDIA's own index, which this machine cannot reach. So each binding is
read instead: a name it defines is a string of its extension module
(`tensorrt_bindings/tensorrt.so`: pybind11 registers every class, method, property
and enum value by name), whole or as the tail of a longer one (where the linker
merged the literal), or a `def` of its `__init__.py` (`nptype`, `volume`).

The names used are read from the source (`SOURCES`): `trt.A.B` chains, methods
called on anything (`.name(`), and the attributes asked for with
`getattr(trt.X, "NAME", ...)`. Methods that no binding defines are Python's own
(`append`, `items`) and are listed apart.

    python scripts/tensorrt_binding_names.py

writes tests/data/tensorrt_binding_names.json; tests/engines/test_tensorrt.py checks
that it lists every name the sources use now, and that each TensorRT name is in both.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from gpu_payload import download as download_wheels

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "tests" / "data" / "tensorrt_binding_names.json"
VERSIONS = ("10.16.1.11", "11.4.0.106")
SOURCES = ("engines/runners/tensorrt.py", "engines/export/tensorrt_build.py")
CHAIN = re.compile(r"\btrt\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
CALL = re.compile(r"\.([a-z_][a-z0-9_]*)\(")
GETATTR = re.compile(r"getattr\(trt\.([A-Za-z_.]+),\s*\"([A-Za-z0-9_]+)\"")


def used_names(root: Path = ROOT) -> list[str]:
    """Every name the sources take from TensorRT, or may: see the module docstring."""
    names: set[str] = set()
    for relative in SOURCES:
        text = (root / relative).read_text()
        for chain in CHAIN.findall(text):
            names.update(chain.split("."))
        names.update(CALL.findall(text))
        for owner, name in GETATTR.findall(text):
            names.update([*owner.split("."), name])
    return sorted(names - {"__version__"})


def defined_names(wheel: Path, wanted: Iterable[str]) -> list[str]:
    """Those of `wanted` that the bindings wheel defines."""
    with zipfile.ZipFile(wheel) as archive:
        module = archive.read("tensorrt_bindings/tensorrt.so")
        init = archive.read("tensorrt_bindings/__init__.py").decode()
    strings = {run.decode() for run in re.findall(rb"[A-Za-z0-9_]{2,}", module)}
    defs = set(re.findall(r"^def ([A-Za-z_][A-Za-z0-9_]*)", init, re.MULTILINE))

    def defines(name: str) -> bool:
        # The linker keeps a literal that ends another once, as that one's tail
        # ("INPUT" inside a longer enum name's string).
        return name in strings or name in defs or any(s.endswith(name) for s in strings)

    return [name for name in wanted if defines(name)]


def download(version: str, folder: Path) -> Path:
    """The wheel of that version for the GPU machine's Python (3.12, manylinux x86_64)."""
    (wheel,) = download_wheels([f"tensorrt_cu13_bindings=={version}"], folder)
    return wheel


def main() -> int:
    used = used_names()
    report: dict[str, object] = {"sources": list(SOURCES), "used": used}
    with tempfile.TemporaryDirectory() as folder:
        defined = {v: defined_names(download(v, Path(folder)), used) for v in VERSIONS}
    report["tensorrt"] = defined
    known = set().union(*defined.values())
    report["not_tensorrt"] = [name for name in used if name not in known]
    missing = {v: sorted(known - set(names)) for v, names in defined.items()}
    report["missing"] = missing
    OUTPUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{OUTPUT}: {len(known)} TensorRT names; missing: {missing}")
    return 1 if any(missing.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
