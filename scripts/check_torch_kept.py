#!/usr/bin/env python
"""`pip install` of sleap-live into an environment that has a torch it allows keeps that torch.

Labs train with sleap-nn and install sleap-live beside it: sleap-nn 0.3.5 installs
torch 2.14.1 (on Linux PyPI's CUDA build), and a torch range in pyproject.toml that
left it out would make pip replace the lab's GPU torch with another one.

This builds a venv (build/torch_kept/venv, git ignores build/) holding only torch at a
version the range allows and CI does not install (2.14.1; CI pins 2.13.0), installed
with --no-deps: whether pip keeps an installed torch depends on torch's version, not on
its CUDA wheels. Then it asks pip what `pip install ".[cpu]"` would install (`--dry-run
--report`: resolved, nothing written) and fails when that includes any distribution the
torch install put there (torch), naming it with both versions. CI runs it after the
suite (.ci/run).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK_DIR = ROOT / "build" / "torch_kept"
# The torch a sleap-nn 0.3.5 environment holds (docs/contributing.md's install of it;
# its wheel asks for any torch), which CI's own install (torch 2.13.0) does not use.
TORCH = "torch==2.14.1"


def canonical(name: str) -> str:
    """A distribution's name as pip compares names (PEP 503: case and -_. runs alike)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def replaced(report: Mapping[str, Any], installed: Mapping[str, str]) -> list[str]:
    """What the install would put over a distribution the environment has: one
    "NAME OLD -> NEW" line each. `report` is pip's installation report (format version 1,
    https://pip.pypa.io/en/stable/reference/installation-report/): its "install" list
    holds every distribution pip would install, each with "metadata" {name, version};
    `installed` maps the environment's distributions (any spelling) to their versions."""
    have = {canonical(name): version for name, version in installed.items()}
    lines = []
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if canonical(name) in have:
            lines.append(f"{name} {have[canonical(name)]} -> {version}")
    return lines


def pip(python: Path, *args: str, capture: bool = False) -> str:
    """`pip ARGS` in the environment of `python` (its output when `capture`)."""
    done = subprocess.run(
        [str(python), "-m", "pip", *args], check=True, capture_output=capture, text=True
    )
    return done.stdout if capture else ""


def installed_versions(python: Path) -> dict[str, str]:
    """The distributions installed in the environment of `python`, by name."""
    rows = json.loads(pip(python, "list", "--format", "json", capture=True))
    return {row["name"]: row["version"] for row in rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", default=TORCH, help=f"the torch in the venv (default {TORCH})")
    torch = parser.parse_args(argv).torch

    start = time.perf_counter()
    shutil.rmtree(WORK_DIR, ignore_errors=True)
    venv.create(WORK_DIR / "venv", with_pip=True)
    python = WORK_DIR / "venv" / "bin" / "python"
    bare = installed_versions(python)
    # uv (the test extra's, as scripts/gpu_payload.py's rehearsal) puts torch there, not
    # pip: pip keeps no download cache on this machine and fetched the 555 MB wheel in
    # every run; uv links it from its cache and compiles nothing (nothing here imports
    # torch). pip itself answers the question below.
    install = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--no-deps"]
    subprocess.run([*install, "--python", str(python), torch], check=True)
    built = time.perf_counter()
    # What the torch install put there (torch), not the venv's own pip and setuptools:
    # with --no-deps torch's own requirements (setuptools>=77 for 2.14) are left for the
    # dry run to bring, which changes no torch.
    kept = {name: v for name, v in installed_versions(python).items() if name not in bare}
    report_path = WORK_DIR / "report.json"
    pip(python, "install", "-q", "--dry-run", "--report", str(report_path), f"{ROOT}[cpu]")
    over = replaced(json.loads(report_path.read_text()), kept)
    shutil.rmtree(WORK_DIR / "venv")  # 1.2 GB of torch; the report stays
    took = f"venv with {torch} {built - start:.0f} s, dry run {time.perf_counter() - built:.0f} s"
    if over:
        print(f'pip install ".[cpu]" beside {torch} would replace {", ".join(over)} ({took})')
        return 1
    print(f'pip install ".[cpu]" beside {torch} keeps it ({took})')
    return 0


if __name__ == "__main__":
    sys.exit(main())
