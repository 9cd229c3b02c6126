#!/usr/bin/env python
"""The wheels scripts/gpu_check.py takes to the lent GPU machine, and a rehearsal of it.

`python scripts/gpu_payload.py` downloads the wheels listed in scripts/gpu_payload.txt
for that machine (CPython 3.12, manylinux x86_64) into build/gpu_payload/ (git
ignores build/), strips PyNvVideoCodec of what decoding does not need, repacks every
wheel with LZMA (the limit counts bytes: PyAV's wheel, deflated as published, is
34.1 MiB, 25.5 MiB in LZMA; pip reads LZMA members through zipfile, and the rehearsal
installs the same repacked wheels), and prints the payload's size and its total with
the working tree the `run` tool copies; it fails when the total is over the 64 MiB
that machine takes.

`--rehearse` then builds a venv (build/gpu_rehearsal/) holding only the GPU machine's
image packages, its CUDA torch 2.11 included (it runs without a GPU), and runs
scripts/gpu_check.py there with the payload's wheels: everything but the GPU parts must
run and pass. CI runs it (.ci/run). The venv is of this Python (3.11 here), so the
rehearsal downloads the same list, stripped alike, for this Python's version.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "scripts" / "gpu_payload.txt"
PAYLOAD_DIR = ROOT / "build" / "gpu_payload"
REHEARSAL_DIR = ROOT / "build" / "gpu_rehearsal"
LIMIT_BYTES = 64 * 2**20  # what the `run` tool takes along: tree plus carried paths
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")

# Files of a wheel (by distribution) that nothing sleap-live runs needs. PyNvVideoCodec
# ships FFmpeg's source tarball, notebooks and benchmarks, and each of its two FFmpeg
# libraries three times over (zip has no symlinks): its modules load the
# `.so.<major>` names alone (readelf -d: NEEDED libavformat.so.63, libavutil.so.61).
STRIP = {
    "pynvvideocodec": (
        "*.data/*",
        "samples/*",
        "benchmarks/*",
        "PyNvVideoCodec/libavformat.so",
        "PyNvVideoCodec/libavformat.so.*.*",
        "PyNvVideoCodec/libavutil.so",
        "PyNvVideoCodec/libavutil.so.*.*",
    ),
}

# The GPU machine's image, as far as sleap-live uses it (CuPy is left out: no CPU part
# imports it). torch is the image's, 2.11, PyPI's CUDA build (about 2.5 GB with its
# nvidia-* wheels, 80 s to install here), which runs on a machine without a GPU: the
# rehearsal meets that torch's own behaviour (its inductor's thread-local CUDA graph
# trees, for one) rather than a later release's.
IMAGE_PACKAGES = (
    "torch==2.11.0",
    "onnxruntime",
    "opencv-python-headless",
    "numpy",
    "scipy",
    "h5py",
    "attrs",
    "pyyaml",
    "rich",
    "pillow",
    "aiohttp",
    "msgpack",
    "psutil",
)
# The rehearsal's gpu_check: the CPU stand-in through every part, on the model types
# with speed targets, few frames, the smallest square the test videos fit in (2 CPU
# cores; about 3 minutes in CI with the venv, most of it installing torch).
REHEARSAL_CHECK = (
    "--rehearse",
    "--cases",
    "single_instance,topdown,bottomup",
    "--frames",
    "16",
    "--clip-frames",
    "32",
    "--sizes",
    "256",
    "--large-size",
    "256",
    "--max-window",
    "0.5",
    "--budget",
    "240",
)


# What runs on the lent GPU machine, with the payload carried (docs/gpu_check.md): it
# fails at once when torch there sees no GPU, rather than skipping every GPU part.
GPU_COMMAND = (
    "python3.12 scripts/gpu_check.py --expect-gpu --wheel-dir build/gpu_payload "
    "--json $OUT/gpu_check.json > >(tee $OUT/gpu_check.log) 2>&1"
)


def requirements(path: Path = REQUIREMENTS) -> list[str]:
    """The requirement lines of a requirements file (comments and blanks dropped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def download(wanted: Sequence[str], target: Path, python: str = PYTHON_VERSION) -> list[Path]:
    """The wheels of `wanted` for Python `python` on manylinux x86_64 (the GPU machine's
    by default), in `target` (emptied first)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    platforms = [arg for name in PLATFORMS for arg in ("--platform", name)]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        *platforms,
        "--dest",
        str(target),
        *wanted,
    ]
    subprocess.run(command, check=True)
    return sorted(target.glob("*.whl"))


def distribution(wheel: Path) -> str:
    """A wheel's normalised distribution name (`PyNvVideoCodec-2.2.4-...` -> pynvvideocodec)."""
    return wheel.name.split("-", 1)[0].lower().replace("_", "-")


def repack_wheel(wheel: Path, patterns: Iterable[str] = ()) -> int:
    """Rewrites `wheel` LZMA-compressed, without the files matching `patterns` (and
    their RECORD lines); returns the bytes saved."""
    patterns = tuple(patterns)
    before = wheel.stat().st_size

    def dropped(name: str) -> bool:
        return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)

    with tempfile.NamedTemporaryFile(dir=wheel.parent, suffix=".whl", delete=False) as file:
        stripped = Path(file.name)
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stripped, "w") as sink:
        for item in source.infolist():
            if dropped(item.filename):
                continue
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not dropped(line.split(",")[0])).encode()
            sink.writestr(item, data, compress_type=zipfile.ZIP_LZMA)
    stripped.replace(wheel)
    return before - wheel.stat().st_size


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree the `run` tool copies: tracked files, and untracked
    ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    paths = {root / name for name in listed.decode().split("\0") if name}
    return sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def size_report(payload: int, tree: int, limit: int = LIMIT_BYTES) -> tuple[bool, str]:
    """Whether payload and tree fit in `limit`, and one line saying so."""
    total = payload + tree
    fits = total <= limit
    verdict = "fits" if fits else "OVER"
    line = (
        f"payload {mib(payload)} + working tree {mib(tree)} = {mib(total)}: {verdict} "
        f"the {mib(limit)} the GPU machine takes ({mib(abs(limit - total))} "
        f"{'to spare' if fits else 'too much'})"
    )
    return fits, line


def build_payload(target: Path = PAYLOAD_DIR) -> bool:
    """Downloads and strips the payload; prints each wheel and the sizes; True if it fits."""
    fetch_stripped(target, PYTHON_VERSION)
    fits, line = size_report(folder_bytes(target), tree_bytes())
    print(line, flush=True)
    return fits


def fetch_stripped(target: Path, python: str, repacked: Path | None = None) -> None:
    """The listed wheels for `python` in `target`, stripped and repacked; each printed
    with its size.

    A wheel of the same file name in `repacked` (a folder this function filled, for
    another Python) is the same wheel stripped alike: it is copied rather than repacked
    again. PyAV's abi3 wheel and the pure-Python ones serve 3.11 and 3.12 alike, and
    LZMA took about a minute of one core for PyAV's alone.
    """
    wheels = download(requirements(), target, python)
    for wheel in wheels:
        done = repacked / wheel.name if repacked is not None else None
        if done is not None and done.is_file():
            saved = wheel.stat().st_size - done.stat().st_size
            shutil.copyfile(done, wheel)
        else:
            saved = repack_wheel(wheel, STRIP.get(distribution(wheel), ()))
        note = f" ({mib(saved)} less, stripped and repacked)" if saved > 0 else ""
        print(f"  {wheel.name}: {mib(wheel.stat().st_size)}{note}", flush=True)


def rehearsal_venv(folder: Path = REHEARSAL_DIR) -> Path:
    """A venv of the image's packages alone (kept between rehearsals: gpu_check puts
    the payload in a folder of its own, never into the venv)."""
    python = folder / "venv" / "bin" / "python"
    marker = folder / "venv" / "image-packages.txt"
    wanted = "\n".join(IMAGE_PACKAGES)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    shutil.rmtree(folder / "venv", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    # uv (the test extra's) rather than pip: it fetches and unpacks the CUDA torch's
    # 2.5 GB of wheels in parallel and links them from its cache, 22 s cold and 2 s warm
    # where pip took 80 s to 5 min on this 2-core machine.
    install = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python)]
    subprocess.run([*install, *IMAGE_PACKAGES], check=True)
    marker.write_text(wanted)
    return python


def rehearse(folder: Path = REHEARSAL_DIR, expect_gpu: bool = False) -> int:
    """gpu_check.py in the image-only venv with the payload's wheels for this Python;
    its exit status (with `expect_gpu`, 1 where torch sees no GPU)."""
    started = time.perf_counter()
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    payload = folder / f"payload-{here}"
    print(f"rehearsal payload (Python {here}):", flush=True)
    fetch_stripped(payload, here, repacked=PAYLOAD_DIR)
    python = rehearsal_venv(folder)
    print(f"rehearsal venv ready in {time.perf_counter() - started:.0f} s", flush=True)
    command = [
        str(python),
        str(ROOT / "scripts" / "gpu_check.py"),
        "--wheel-dir",
        str(payload),
        "--work-dir",
        str(folder / "work"),
        "--json",
        str(folder / "gpu_check.json"),
        *REHEARSAL_CHECK,
        *(["--expect-gpu"] if expect_gpu else []),
    ]
    # Nothing of this environment's packages may leak in: only the venv's, and the payload.
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    code = subprocess.run(command, cwd=ROOT, env=environment).returncode
    print(f"rehearsal: gpu_check exit {code} after {time.perf_counter() - started:.0f} s")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_payload.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="then run scripts/gpu_check.py in a venv of the GPU machine's image packages "
        "(its CUDA torch 2.11) plus the payload",
    )
    parser.add_argument(
        "--expect-gpu",
        action="store_true",
        help="the rehearsal's gpu_check fails at once where torch sees no GPU, as the "
        "lent machine's command does",
    )
    parser.add_argument(
        "--skip-download",
        action="store_true",
        help=f"use the payload already in {PAYLOAD_DIR.relative_to(ROOT)} (sizes still checked)",
    )
    args = parser.parse_args(argv)
    if args.skip_download and PAYLOAD_DIR.is_dir():
        fits, line = size_report(folder_bytes(PAYLOAD_DIR), tree_bytes())
        print(line, flush=True)
    else:
        fits = build_payload()
    if not fits:
        return 1
    print(f"on the GPU machine, carrying build/gpu_payload: {GPU_COMMAND}", flush=True)
    return rehearse(expect_gpu=args.expect_gpu) if args.rehearse else 0


if __name__ == "__main__":
    sys.exit(main())
