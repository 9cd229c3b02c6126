"""onnxruntime-web, the browser runtime a web export carries.

The web export copies onnxruntime-web's files into its folder so that the page runs
offline, with no build step. They are not part of sleap-live (about 29 MiB); they come
from npm, once: the first web export runs `npm install onnxruntime-web@VERSION` into
the sleap-live cache (`<cache>/onnxruntime-web/VERSION`) and every later one copies
from there. A machine without npm (or offline) points `SLEAP_LIVE_ONNXRUNTIME_WEB` at
a folder holding the package's `dist` files (see `RUNTIME_FILES`), for instance one
copied from a machine that has them.

Either way the files are checked before they are copied (`npm_check`): the folders
the current user's or root's and not writable by others, and each file's sha256
that of the file in the registry's tarball (`RUNTIME_SHA256`). A cached install
that fails the hashes is installed again; another user's, or a named folder, is
refused in one line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from sleap_live.engines.cache import cache_root
from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.export.npm import npm_install
from sleap_live.engines.export.npm_check import file_sha256, untrusted_folders, untrusted_tree
from sleap_live.engines.notify import Notify, quiet

ONNXRUNTIME_WEB_VERSION = "1.31.1"
RUNTIME_ENV = "SLEAP_LIVE_ONNXRUNTIME_WEB"
# The WebGPU build's module and the wasm binary it loads: it runs the "webgpu" and
# the "wasm" execution providers both.
RUNTIME_FILES = (
    "ort.webgpu.min.mjs",
    "ort-wasm-simd-threaded.asyncify.mjs",
    "ort-wasm-simd-threaded.asyncify.wasm",
)
# The sha256 of each of `RUNTIME_FILES` in onnxruntime-web 1.31.1's tarball from the
# npm registry, whose integrity (`dist.integrity`, as npm's lockfile records it) is
# `ONNXRUNTIME_WEB_INTEGRITY` (tests/engines/test_npm_check.py checks them against
# that tarball where npm's cache holds it).
ONNXRUNTIME_WEB_INTEGRITY = (
    "sha512-5GeH+bWQ+HxM10z7erGlsWqryrwMbSvm/1tkIsKTT48g0fI19VXVVC435t4t7"
    "VsPdSQeS7NmuZPXrQ73k82URw=="
)
RUNTIME_SHA256 = {
    "ort.webgpu.min.mjs": "329cd956772397a1aedd668e911195d39afefb182f6fc14aafa4f08ac8d8f379",
    "ort-wasm-simd-threaded.asyncify.mjs": (
        "59cf781530e1a16df2a291d78798e3ec1152467edaec402d6f9599d85047c302"
    ),
    "ort-wasm-simd-threaded.asyncify.wasm": (
        "ca319e9539cd0f1e291cf56074760121eaf39650f5dbf84b6e52c07f4b2944ec"
    ),
}


def onnxruntime_web_dist(cache_dir: str | Path | None = None, notify: Notify = quiet) -> Path:
    """The folder holding onnxruntime-web's `RUNTIME_FILES`, installed from npm if needed.

    `SLEAP_LIVE_ONNXRUNTIME_WEB`, when set, names that folder and nothing is installed.
    The files are checked (see the module's notes); `notify` is told when a cached
    install is made again.

    Raises:
        RuntimeUnavailableError: the named folder lacks a file, or it or the cache's
            install cannot be trusted or holds other files than the registry's, or
            npm is missing or its install failed (one line, with what to do).
    """
    chosen = os.environ.get(RUNTIME_ENV)
    if chosen:
        dist = Path(chosen)
        _check_dist(dist, f"{RUNTIME_ENV}={chosen}")
        problem = untrusted_tree(dist) or _files_problem(dist)
        if problem is not None:
            raise RuntimeUnavailableError(f"{dist}: not used ({RUNTIME_ENV}): {problem}")
        return dist
    root = cache_root(cache_dir)
    prefix = root / "onnxruntime-web" / ONNXRUNTIME_WEB_VERSION
    dist = prefix / "node_modules" / "onnxruntime-web" / "dist"
    problem = untrusted_folders([root, prefix.parent]) or untrusted_tree(prefix)
    if problem is not None:
        raise RuntimeUnavailableError(
            f"{prefix}: not used: {problem}; remove it, or give another --cache-dir"
        )
    if all((dist / name).is_file() for name in RUNTIME_FILES):
        mismatch = _files_problem(dist)
        if mismatch is None:
            return dist
        notify(f"{prefix}: {mismatch}; installing it again")
        shutil.rmtree(prefix)
    npm_install(
        prefix,
        [f"onnxruntime-web@{ONNXRUNTIME_WEB_VERSION}"],
        needed_for=f"the web export carries onnxruntime-web {ONNXRUNTIME_WEB_VERSION}",
        instead=f"set {RUNTIME_ENV} to a folder holding {', '.join(RUNTIME_FILES)}",
    )
    _check_dist(dist, f"npm's install in {prefix}")
    problem = untrusted_tree(prefix) or _files_problem(dist)
    if problem is not None:
        raise RuntimeUnavailableError(f"{prefix}: npm's install not used: {problem}")
    return dist


def copy_runtime(dist: Path, folder: Path) -> None:
    """Copies the runtime's files into `folder`, each checked against `RUNTIME_SHA256`
    as it is copied (what was checked is what is written).

    Raises:
        RuntimeUnavailableError: a file's bytes are not the registry's.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME_FILES:
        data = (dist / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != RUNTIME_SHA256[name]:
            raise RuntimeUnavailableError(f"{dist / name}: {_not_the_registrys(name)}")
        (folder / name).write_bytes(data)


def _files_problem(dist: Path) -> str | None:
    for name in RUNTIME_FILES:
        if file_sha256(dist / name) != RUNTIME_SHA256[name]:
            return f"{name}: {_not_the_registrys(name)}"
    return None


def _not_the_registrys(name: str) -> str:
    return (
        f"not onnxruntime-web {ONNXRUNTIME_WEB_VERSION}'s {name} (its sha256 differs from "
        "that of the registry's tarball)"
    )


def _check_dist(dist: Path, origin: str) -> None:
    missing = [name for name in RUNTIME_FILES if not (dist / name).is_file()]
    if missing:
        raise RuntimeUnavailableError(
            f"{dist}: no onnxruntime-web {', '.join(missing)} there ({origin})"
        )
