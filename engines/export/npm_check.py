"""Checks of the npm packages sleap-live uses from its cache (issue #36), before use.

The web export copies onnxruntime-web's files into the export (`web_runtime`) and
the TF.js verification runs the TF.js packages in Node as the current user
(`tfjs`). The threat checked for is another user who can write a folder on the way
(a shared `--cache-dir`, a world-writable folder) planting or changing packages
there, so that sleap-live copies their files or runs their code (as root, where it
runs as root). So, as ssh treats its keys and as the ONNX cache does
(`sleap_live.engines.load.export_cache`):

- every folder from the cache root down, and every file and folder of the
  install, is the current user's or root's, and not writable by others (group
  write only by the user's own group), and holds no FIFO, socket or device, and
  no link out of the install (`untrusted_folders`, `untrusted_tree`);
- each package's files are those of the tarball the registry gave for its
  pinned version: pinned here are npm's `integrity` of that tarball (sha512, as
  npm's lockfile records it) and a digest of its files (`tree_digest`), made
  from the tarball whose sha512 is that integrity; the hidden lockfile npm
  writes (`node_modules/.package-lock.json`) must name the same integrity, and
  the files present must give the same digest (`packages_problem`).

What fails is refused in one line naming the folder (another user's install is
not ours to remove), or, for sleap-live's own install in its cache, installed
again. No defence against the current user (or root) changing the files: they can
as well change sleap-live itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

# The lockfile npm (7 and later) writes into node_modules on every install.
HIDDEN_LOCKFILE = ".package-lock.json"
_HASH_BLOCK = 1 << 20


@attrs.frozen
class Pinned:
    """One npm package at the version sleap-live uses.

    Attributes:
        name: its name ("@tensorflow/tfjs-core").
        version: its version.
        integrity: the registry's `dist.integrity` of its tarball (npm's lockfile's).
        tree: `tree_digest` of that tarball's files (its `package/` folder).
    """

    name: str
    version: str
    integrity: str
    tree: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


def untrusted_folders(paths: Iterable[Path]) -> str | None:
    """Why one of the folders `paths` (those that exist) cannot be trusted, or None."""
    for path in paths:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            return f"{path} is a link"
        problem = _untrusted_status(path, info)
        if problem is not None:
            return problem
    return None


def untrusted_tree(top: Path) -> str | None:
    """Why `top` or anything under it cannot be trusted (see the module's notes), or
    None; a missing `top` is None. Links are followed nowhere: each must stay in `top`."""
    if sys.platform == "win32":
        return None  # no owners or modes to compare
    problem = untrusted_folders([top])
    if problem is not None or not top.exists():
        return problem
    inside = os.path.realpath(top)
    for folder, names, files in os.walk(top):
        for name in [*names, *files]:
            path = Path(folder) / name
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                target = os.path.realpath(path)
                if os.path.commonpath([inside, target]) != inside or not os.path.exists(target):
                    return f"{path} is a link out of {top}"
                continue
            problem = _untrusted_status(path, info)
            if problem is not None:
                return problem
    return None


def _untrusted_status(path: Path, info: os.stat_result) -> str | None:
    if sys.platform == "win32":
        return None
    if info.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to another user (uid {info.st_uid})"
    if info.st_mode & stat.S_IWOTH:
        return f"{path} is writable by every user"
    if info.st_mode & stat.S_IWGRP and info.st_gid != os.getegid():
        return f"{path} is writable by the group {info.st_gid}"
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return f"{path} is not a file or folder"
    return None


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """sha256 over (relative path, sha256 of its bytes) of each file of a package,
    in path order: the same for the tarball's `package/` folder and an install of it."""
    digest = hashlib.sha256()
    for relative, sha256 in sorted(files):
        digest.update(f"{relative}\0{sha256}\n".encode())
    return digest.hexdigest()


def installed_files(folder: Path) -> list[tuple[str, str]]:
    """(path relative to `folder`, sha256) of every file under it, a link as its target."""
    found = []
    for parent, _, files in os.walk(folder):
        for name in files:
            path = Path(parent) / name
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink():
                found.append((relative, f"-> {os.readlink(path)}"))
            else:
                found.append((relative, file_sha256(path)))
    return found


def packages_problem(modules: Path, pins: Sequence[Pinned]) -> str | None:
    """Why the node_modules folder `modules` does not hold `pins`' packages as the
    registry gave them, or None (see the module's notes)."""
    lockfile = modules / HIDDEN_LOCKFILE
    locked: dict[str, object] = {}
    if lockfile.is_file():
        try:
            locked = json.loads(lockfile.read_text()).get("packages", {})
        except (OSError, ValueError, AttributeError):
            return f"{lockfile} is not npm's lockfile"
    for scope in sorted({pin.name.split("/")[0] for pin in pins if pin.name.startswith("@")}):
        # Node looks for a package's dependencies in every node_modules above it,
        # the scope's folder included.
        if os.path.lexists(modules / scope / "node_modules"):
            return f"{modules / scope / 'node_modules'} is no package's (Node would look in it)"
    for pin in pins:
        folder = modules / pin.name
        if not folder.is_dir():
            return f"no {pin.spec} in {modules}"
        entry = locked.get(f"node_modules/{pin.name}")
        if locked and (not isinstance(entry, dict) or entry.get("integrity") != pin.integrity):
            return f"{lockfile} does not give {pin.spec} the registry's integrity"
        if tree_digest(installed_files(folder)) != pin.tree:
            return (
                f"{folder}: its files are not those of {pin.spec} "
                f"(npm integrity {pin.integrity[:19]}...)"
            )
    return None
