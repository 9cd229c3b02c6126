"""onnxruntime-web, the browser runtime a web export carries.

The web export copies onnxruntime-web's files into its folder so that the page runs
offline, with no build step. They are not part of sleap-live (about 29 MiB); they come
from npm, once: the first web export runs `npm install onnxruntime-web@VERSION` into
the sleap-live cache (`<cache>/onnxruntime-web/VERSION`) and every later one copies
from there. A machine without npm (or offline) points `SLEAP_LIVE_ONNXRUNTIME_WEB` at
a folder holding the package's `dist` files (see `RUNTIME_FILES`), for instance one
copied from a machine that has them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sleap_live.engines.cache import cache_root
from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.export.npm import npm_install

ONNXRUNTIME_WEB_VERSION = "1.31.1"
RUNTIME_ENV = "SLEAP_LIVE_ONNXRUNTIME_WEB"
# The WebGPU build's module and the wasm binary it loads: it runs the "webgpu" and
# the "wasm" execution providers both.
RUNTIME_FILES = (
    "ort.webgpu.min.mjs",
    "ort-wasm-simd-threaded.asyncify.mjs",
    "ort-wasm-simd-threaded.asyncify.wasm",
)


def onnxruntime_web_dist(cache_dir: str | Path | None = None) -> Path:
    """The folder holding onnxruntime-web's `RUNTIME_FILES`, installed from npm if needed.

    `SLEAP_LIVE_ONNXRUNTIME_WEB`, when set, names that folder and nothing is installed.

    Raises:
        RuntimeUnavailableError: the named folder lacks a file, or npm is missing or
            its install failed (one line, with what to do).
    """
    chosen = os.environ.get(RUNTIME_ENV)
    if chosen:
        dist = Path(chosen)
        _check_dist(dist, f"{RUNTIME_ENV}={chosen}")
        return dist
    prefix = cache_root(cache_dir) / "onnxruntime-web" / ONNXRUNTIME_WEB_VERSION
    dist = prefix / "node_modules" / "onnxruntime-web" / "dist"
    if all((dist / name).is_file() for name in RUNTIME_FILES):
        return dist
    npm_install(
        prefix,
        [f"onnxruntime-web@{ONNXRUNTIME_WEB_VERSION}"],
        needed_for=f"the web export carries onnxruntime-web {ONNXRUNTIME_WEB_VERSION}",
        instead=f"set {RUNTIME_ENV} to a folder holding {', '.join(RUNTIME_FILES)}",
    )
    _check_dist(dist, f"npm's install in {prefix}")
    return dist


def copy_runtime(dist: Path, folder: Path) -> None:
    """Copies the runtime's files, and its licence where the package has one, into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME_FILES:
        shutil.copyfile(dist / name, folder / name)
    licence = dist.parent / "LICENSE"
    if licence.is_file():
        shutil.copyfile(licence, folder / "LICENSE")


def _check_dist(dist: Path, origin: str) -> None:
    missing = [name for name in RUNTIME_FILES if not (dist / name).is_file()]
    if missing:
        raise RuntimeUnavailableError(
            f"{dist}: no onnxruntime-web {', '.join(missing)} there ({origin})"
        )
