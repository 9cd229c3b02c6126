#!/usr/bin/env python
"""Which TensorRT each GPU extra installs, and whether ONNX Runtime's TensorRT provider loads it.

For each GPU extra of pyproject.toml ("gpu", "gpu-cu12"):

- pip's resolver (`pip install --dry-run --report`) picks the TensorRT the extra
  installs today (`tensorrt-cu13`/`tensorrt-cu12`, resolved with `--no-deps`: its
  `-libs` and `-bindings` are placeholders that download from NVIDIA's own index at
  install time, which this machine and CI cannot reach; the resolved metadata pins
  them to the same version);
- the onnxruntime-gpu wheels at both ends of the extra's range (manylinux, CPython
  3.12; `pip download`, about 255 MB each) are opened and their TensorRT provider's
  ELF NEEDED entries read (`readelf -d libonnxruntime_providers_tensorrt.so`);
- TensorRT's libraries carry its major version in their sonames (`libnvinfer.so.10`
  in 10.x; tensorrt-cu13 11.4's wheel ships `libnvinfer.so.11`), so the provider
  loads the resolved TensorRT when every `libnv*.so.N` it needs has N = that major.

    python scripts/gpu_extras_report.py

writes tests/data/gpu_extras_report.json (minutes: it downloads up to four wheels);
tests/test_install_extras.py checks that the report is of the extras pyproject.toml
has now and that each loads. Run it again after changing a GPU extra.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
OUTPUT = ROOT / "tests" / "data" / "gpu_extras_report.json"
EXTRAS = ("gpu", "gpu-cu12")
PROVIDER = "onnxruntime/capi/libonnxruntime_providers_tensorrt.so"
TENSORRT_SONAME = re.compile(r"libnv(infer|onnxparser)[a-z_]*\.so\.(\d+)$")
PLATFORM = ["--python-version", "3.12", "--platform", "manylinux_2_28_x86_64"]
PIP = [sys.executable, "-m", "pip"]


def extras(path: Path = PYPROJECT) -> dict[str, list[str]]:
    optional = tomllib.loads(path.read_text())["project"]["optional-dependencies"]
    return {name: list(optional[name]) for name in EXTRAS}


def resolved(requirement: str) -> dict[str, object]:
    """The version pip's resolver installs for `requirement`, and what it requires."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [*PIP, "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet"]
        subprocess.run([*command, "--report", str(report), requirement], check=True)
        (install,) = json.loads(report.read_text())["install"]
    metadata = install["metadata"]
    return {"version": metadata["version"], "requires": metadata.get("requires_dist", [])}


def versions(name: str) -> list[Version]:
    """Every version of `name` the index has (`pip index versions`)."""
    listed = subprocess.run(
        [*PIP, "index", "versions", name], check=True, capture_output=True, text=True
    ).stdout
    line = next(line for line in listed.splitlines() if line.startswith("Available versions:"))
    return [Version(text.strip()) for text in line.split(":", 1)[1].split(",")]


def provider_needs(version: Version, folder: Path) -> list[str]:
    """The ELF NEEDED entries of onnxruntime-gpu `version`'s TensorRT provider library."""
    command = [*PIP, "download", "--quiet", "--no-deps", "--only-binary=:all:", *PLATFORM]
    subprocess.run([*command, "--dest", str(folder), f"onnxruntime-gpu=={version}"], check=True)
    (wheel,) = folder.glob(f"onnxruntime_gpu-{version}-*.whl")
    library = folder / "provider.so"
    with zipfile.ZipFile(wheel) as archive:
        library.write_bytes(archive.read(PROVIDER))
    wheel.unlink()  # 255 MB each
    dynamic = subprocess.run(
        ["readelf", "-d", str(library)], check=True, capture_output=True, text=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)


def tensorrt_majors(needed: Sequence[str]) -> set[int]:
    return {int(match.group(2)) for name in needed if (match := TENSORRT_SONAME.search(name))}


def report_extra(requirements: Sequence[str], folder: Path) -> dict[str, object]:
    by_name = {Requirement(line).name.lower(): Requirement(line) for line in requirements}
    (tensorrt,) = [name for name in by_name if name.startswith("tensorrt")]
    trt = resolved(str(by_name[tensorrt]))
    major = Version(str(trt["version"])).major
    allowed = sorted(
        v for v in versions("onnxruntime-gpu") if by_name["onnxruntime-gpu"].specifier.contains(v)
    )
    onnxruntime = {}
    for version in sorted({allowed[0], allowed[-1]}):
        needed = provider_needs(version, folder)
        onnxruntime[str(version)] = {
            "tensorrt_provider_needs": needed,
            "loads_the_tensorrt": tensorrt_majors(needed) == {major},
        }
    return {
        "requirements": list(requirements),
        "tensorrt": {"name": tensorrt, **trt, "sonames": f"libnvinfer.so.{major}"},
        "onnxruntime-gpu": onnxruntime,
        "loads": all(entry["loads_the_tensorrt"] for entry in onnxruntime.values()),
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        report = {name: report_extra(lines, Path(folder)) for name, lines in extras().items()}
    OUTPUT.write_text(json.dumps(report, indent=1) + "\n")
    for name, entry in report.items():
        print(f"{name}: {entry['tensorrt']['name']} {entry['tensorrt']['version']}, "
              f"onnxruntime-gpu {', '.join(entry['onnxruntime-gpu'])}: "
              f"{'loads' if entry['loads'] else 'DOES NOT LOAD'}")  # fmt: skip
    return 0 if all(entry["loads"] for entry in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
