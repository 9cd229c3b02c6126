"""The npm packages taken from the cache are checked before use (issue #36): by
owner and mode (a real second user plants them), and by the registry's hashes
(`engines/export/npm_check.py`)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.export.npm_check import Pinned, tree_digest
from sleap_live.engines.export.tfjs import (
    MODULES_ENV,
    TFJS_PACKAGES,
    TFJS_PINS,
    TFJS_VERSION,
    run_tfjs,
    tfjs_node_modules,
)
from sleap_live.engines.export.web_runtime import (
    ONNXRUNTIME_WEB_INTEGRITY,
    ONNXRUNTIME_WEB_VERSION,
    RUNTIME_ENV,
    RUNTIME_FILES,
    RUNTIME_SHA256,
    copy_runtime,
    onnxruntime_web_dist,
)
from tests.users import as_user, other_user

REPO = Path(__file__).resolve().parents[2]
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm")


def _plant(user: tuple[int, int], files: dict[Path, bytes]) -> None:
    """Write `files` as `user`, every folder and file open to all (umask 0)."""

    def write() -> None:
        os.umask(0)
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    as_user(user, write)


def _open_cache(shared: Path, folder: str) -> Path:
    """A cache of ours in the shared folder (where the other user can reach it), whose
    `folder` others may write (0777), as one made with a permissive umask."""
    cache = shared / "cache"
    (cache / folder).mkdir(parents=True)
    cache.chmod(0o755)
    (cache / folder).chmod(0o777)
    return cache


def test_another_users_planted_onnxruntime_web_is_refused(shared_folder):
    cache = _open_cache(shared_folder, "onnxruntime-web")
    dist = cache / "onnxruntime-web" / ONNXRUNTIME_WEB_VERSION / "node_modules"
    dist = dist / "onnxruntime-web" / "dist"
    _plant(other_user(), {dist / name: b"export default 'planted';" for name in RUNTIME_FILES})
    with pytest.raises(RuntimeUnavailableError) as error:
        onnxruntime_web_dist(cache)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "not used" in message
    assert message.startswith(f"{cache / 'onnxruntime-web' / ONNXRUNTIME_WEB_VERSION}: ")
    assert "is writable by every user" in message or "belongs to another user" in message


def test_a_named_runtime_folder_with_other_files_is_refused(tmp_path, monkeypatch):
    dist = tmp_path / "dist"
    dist.mkdir()
    for name in RUNTIME_FILES:
        (dist / name).write_bytes(b"not onnxruntime-web")
    monkeypatch.setenv(RUNTIME_ENV, str(dist))
    with pytest.raises(RuntimeUnavailableError) as error:
        onnxruntime_web_dist(tmp_path / "cache")
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{dist}: not used ({RUNTIME_ENV}): ")
    assert "sha256 differs from that of the registry's tarball" in message


def test_the_runtime_is_checked_as_it_is_copied(tmp_path):
    dist = tmp_path / "dist"
    dist.mkdir()
    for name in RUNTIME_FILES:
        (dist / name).write_bytes(b"changed after the check")
    with pytest.raises(RuntimeUnavailableError, match="sha256 differs"):
        copy_runtime(dist, tmp_path / "export")
    assert not any((tmp_path / "export").iterdir())


def _planted_tfjs(cache: Path, marker: Path) -> dict[Path, bytes]:
    """A node_modules whose TF.js packages each write `marker` when Node loads them."""
    modules = cache / "tfjs" / TFJS_VERSION / "node_modules"
    files = {}
    for package in TFJS_PACKAGES:
        files[modules / package / "package.json"] = json.dumps(
            {"name": package, "version": TFJS_VERSION, "main": "index.js"}
        ).encode()
        files[modules / package / "index.js"] = (
            f"require('fs').writeFileSync({json.dumps(str(marker))}, 'ran');".encode()
        )
    return files


@needs_node
def test_another_users_planted_node_modules_are_refused_and_never_run(
    shared_folder, tmp_path, monkeypatch
):
    cache = _open_cache(shared_folder, "tfjs")
    marker = shared_folder / "ran"
    _plant(other_user(), _planted_tfjs(cache, marker))
    monkeypatch.setenv("SLEAP_LIVE_CACHE_DIR", str(cache))
    monkeypatch.delenv(MODULES_ENV, raising=False)
    frames = np.zeros((1, 4, 4, 1), np.uint8)
    with pytest.raises(RuntimeUnavailableError) as error:
        run_tfjs(tmp_path, frames, ["out"])
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "not used" in message
    assert message.startswith(f"{cache / 'tfjs' / TFJS_VERSION}: ")
    assert not marker.exists()


@needs_node
def test_named_node_modules_with_other_files_are_refused(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    for path, data in _planted_tfjs(tmp_path, marker).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    modules = tmp_path / "tfjs" / TFJS_VERSION / "node_modules"
    monkeypatch.setenv(MODULES_ENV, str(modules))
    with pytest.raises(RuntimeUnavailableError) as error:
        tfjs_node_modules()
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{modules}: not used ({MODULES_ENV}): ")
    assert "its files are not those of @tensorflow/tfjs-backend-cpu@4.22.0" in message


# --- the pins are the registry's -------------------------------------------------


def _npm_cached_tarball(cache: Path, integrity: str) -> bytes | None:
    """The tarball of `integrity` in npm's cache folder `cache` (cacache's content-v2
    layout: https://github.com/npm/cacache#readme), checked against it; None when absent."""
    algorithm, encoded = integrity.split("-", 1)
    digest = base64.b64decode(encoded).hex()
    path = cache / "_cacache" / "content-v2" / algorithm / digest[:2] / digest[2:4] / digest[4:]
    if not path.is_file():
        return None
    data = path.read_bytes()
    assert hashlib.new(algorithm, data).hexdigest() == digest
    return data


def _tarball_files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {
            member.name.split("/", 1)[1]: tar.extractfile(member).read()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.isfile()
        }


@pytest.mark.slow
@needs_npm
def test_the_pins_are_those_of_the_registrys_tarballs():
    web = Pinned("onnxruntime-web", ONNXRUNTIME_WEB_VERSION, ONNXRUNTIME_WEB_INTEGRITY, "")
    done = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True)
    cache = Path(done.stdout.strip())
    checked = 0
    for pin in (*TFJS_PINS, web):
        data = _npm_cached_tarball(cache, pin.integrity)
        if data is None:
            continue  # npm has not fetched it on this machine
        files = _tarball_files(data)
        if pin is web:
            assert {
                name: hashlib.sha256(files[f"dist/{name}"]).hexdigest() for name in RUNTIME_FILES
            } == RUNTIME_SHA256
        else:
            hashes = [(name, hashlib.sha256(body).hexdigest()) for name, body in files.items()]
            assert tree_digest(hashes) == pin.tree, pin.spec
        checked += 1
    if not checked:
        pytest.skip("npm's cache holds none of the pinned tarballs")


# --- real installs (npm, shared with the export tests) -----------------------------


@needs_npm
def test_a_changed_cached_runtime_is_removed_and_installed_again(tmp_path, monkeypatch):
    from filelock import FileLock

    runtime = REPO / "build" / "web-runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    with FileLock(runtime / "install.lock"):  # the web export tests' install
        installed = onnxruntime_web_dist(runtime).parents[1]
    cache = tmp_path / "cache"
    prefix = cache / "onnxruntime-web" / ONNXRUNTIME_WEB_VERSION
    shutil.copytree(installed, prefix / "node_modules", symlinks=True)
    dist = prefix / "node_modules" / "onnxruntime-web" / "dist"
    assert onnxruntime_web_dist(cache) == dist  # a copy of npm's install passes
    (dist / RUNTIME_FILES[0]).write_bytes(b"changed")
    # The install again is npm's (the web export tests make one); without npm on the
    # PATH it stops there, after the changed install is gone.
    monkeypatch.setenv("PATH", str(tmp_path / "no-npm"))
    said: list[str] = []
    with pytest.raises(RuntimeUnavailableError, match="npm is not installed"):
        onnxruntime_web_dist(cache, said.append)
    (line,) = said
    assert line.startswith(f"{prefix}: ") and line.endswith("installing it again")
    assert "sha256 differs" in line and not prefix.exists()


@pytest.mark.slow
@needs_node
@needs_npm
def test_run_js_runs_the_checked_packages_by_path(tmp_path, monkeypatch):
    from filelock import FileLock

    runtime = REPO / "build" / "tfjs-runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    with FileLock(runtime / "install.lock"):  # the TF.js export tests' install
        modules = tfjs_node_modules(runtime)
    # A graph model of two Identity ops (run.js reads two or more outputs, as every
    # export has): each output is the input, which TF.js takes as int32.
    shape = {"dim": [{"size": "1"}, {"size": "2"}, {"size": "3"}, {"size": "1"}]}
    model = {
        "format": "graph-model",
        "modelTopology": {
            "versions": {"producer": 1},
            "node": [
                {"name": "frames", "op": "Placeholder",
                 "attr": {"dtype": {"type": "DT_INT32"}, "shape": {"shape": shape}}},
                {"name": "Identity", "op": "Identity", "input": ["frames"],
                 "attr": {"T": {"type": "DT_INT32"}}},
                {"name": "Identity_1", "op": "Identity", "input": ["frames"],
                 "attr": {"T": {"type": "DT_INT32"}}},
            ]
        },
        "weightsManifest": [],
        "signature": {
            "inputs": {"frames": {"name": "frames:0", "dtype": "DT_INT32", "tensorShape": shape}},
            "outputs": {
                "a": {"name": "Identity:0", "dtype": "DT_INT32", "tensorShape": shape},
                "b": {"name": "Identity_1:0", "dtype": "DT_INT32", "tensorShape": shape},
            },
        },
    }  # fmt: skip
    (tmp_path / "model.json").write_text(json.dumps(model))
    monkeypatch.setenv("NODE_PATH", str(tmp_path / "nothing"))  # not looked at
    frames = np.arange(6, dtype=np.uint8).reshape(1, 2, 3, 1)
    outputs = run_tfjs(tmp_path, frames, ["a", "b"], modules)
    for name in ("a", "b"):
        assert outputs[name].dtype == np.int32
        np.testing.assert_array_equal(outputs[name], frames.astype(np.int32))
