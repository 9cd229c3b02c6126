"""The on-disk cache of the ONNX graphs that model directories are exported to.

A model directory run with ONNX Runtime is exported (and verified) once; the graph
is kept in the user's cache directory and later runs load it as they would a
sleap-live `.onnx` export, without building the torch model or importing torch.

Where: `sleap_live.engines.cache.cache_root()` (`$SLEAP_LIVE_CACHE_DIR`, else platformdirs'
`user_cache_dir("sleap-live")`, `~/.cache/sleap-live` on Linux), graphs under its
`onnx/` folder as `<key>.onnx` with a `<key>.onnx.json` sidecar.

The key (`cache_key`) is a sha256 over everything the graph depends on:

- each model directory's `training_config.yaml` and `best.ckpt` bytes (a SLEAP 1.x
  folder's `training_config.json` and `best_model.h5`) (by content,
  not path: a moved or copied directory still hits; the directories' order, which
  `load_runner` does not care about, does not count);
- sleap-live's version and a digest of the source files that build and export the
  graph (everything under `sleap_live.engines` but the runners), so an editable
  install that changes the graph code between releases never reuses a stale graph;
- the export options (opset, profile, frame size, and whether the graph was
  verified: an unverified export is kept apart from a verified one, whose probe
  may have let it take both channel counts);
- the inference settings built into the graph (`InferenceSettings.graph_key`);
  the host-side ones (bottom-up grouping) are applied to whichever graph loads,
  so they do not make another entry.

Which frames a graph was verified on is not part of the key: a graph verified on
one video's frames is a verified export of that model, and the verification
records embedded in it say which frames those were. Run once with `--no-cache`
(`cache=False`) to verify on other frames. The embedded `sources` paths are those
of the run that filled the cache.

An entry is trusted only when its sidecar is this schema's, names the same key and
gives the graph file's length, sha256 and keyed digest (`graph_mac`), and (checked by
the loader, see `embedded_key`) the graph's own metadata carries the key and ONNX
Runtime loads it.

The keyed digest is an HMAC-SHA256 of the graph whose key (`CacheKey.secret`) is
derived from the model files' own bytes, the export options, sleap-live's version
and code digest: the entry holds only sha256s of those bytes, from which the key
cannot be recomputed. So a graph changed by anything that has the cache but not the
model files (a cache folder copied or synced from elsewhere, a tool that rewrites
the cache, a sidecar "fixed" after the graph was edited: zeroed convolutions that
found no animal at all) is re-exported, with a one-line notice, instead of run. It
is no defence against someone who can read the model files as well: they can make
the digest again, as they can change the model itself or sleap-live's code.
Anything else is a corrupt entry: it is removed with a one-line notice and the
model is exported again. As ssh treats its keys, an entry or cache folder another
user owns, or that others may write (world-writable, or group-writable by a
group other than the user's), is not used, with a one-line notice, and nothing
is cached in such a folder: a shared `--cache-dir` cannot hand a run a graph
someone else changed. Entries are written atomically (a temporary file renamed
into place, the sidecar last), so concurrent runs and kills never leave a half
entry that passes these checks. A cache that cannot be written is a notice, never
a failed run.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import json
import os
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.load.metadata import (
    DEFAULT_OPSET,
    METADATA_KEY,
    ExportMetadata,
    sidecar_path,
)
from sleap_live.engines.load.spec import (
    CHECKPOINT,
    LEGACY_TRAINING_CONFIG,
    LEGACY_WEIGHTS,
    TRAINING_CONFIG,
)
from sleap_live.engines.notify import Notify
from sleap_live.engines.settings import InferenceSettings

ONNX_FOLDER = "onnx"
ENTRY_SCHEMA = "sleap-live/onnx-cache"
ENTRY_SCHEMA_VERSION = 2  # 2: the keyed graph digest (`graph_mac`)
# What the keyed digest's key is derived with (see the module's notes).
_SECRET_TAG = b"sleap-live/onnx-cache-graph-mac\0"
# Where the key goes in the graph's embedded `ExportMetadata`.
KEY_FIELD = "cache_key"
# The source folders of `sleap_live.engines` whose code does not shape the graph.
_NOT_GRAPH_CODE = ("runners",)


@attrs.frozen
class CacheKey:
    """What a cached graph was made from, and its digest.

    Attributes:
        digest: sha256 (hex) of `parts`, the entry's file name.
        parts: the keyed values, as written to the sidecar.
        secret: the key of the entry's graph digest, derived from the sources'
            own bytes (not from `parts`, which hold only their sha256s), never
            written (see the module's notes).
    """

    digest: str
    parts: Mapping[str, Any]
    secret: bytes = attrs.field(repr=False)


# Defaults of the export options every graph has: given as its default, an option is
# the same export as one left out, so both key the same entry. (The general graph's
# `verify` default is filled in by export on demand: a specialised graph has none.)
EXPORT_DEFAULTS: dict[str, Any] = {"opset": DEFAULT_OPSET}


def cache_key(
    paths: Sequence[Path],
    export_options: Mapping[str, Any],
    *,
    settings: InferenceSettings | None = None,
    version: str | None = None,
) -> CacheKey | None:
    """The key of the graph `paths` export to with `export_options` and `settings`.

    Args:
        paths: the model directories (in any order).
        export_options: the export's options (opset, verify, profile, frame_size,
            ...); `verify_frames` is left out (see the module docstring).
        settings: the inference settings (default: sleap-nn predict's); only
            their graph-side fields count.
        version: sleap-live's version (default: the installed one).

    Returns:
        The key, or None when a directory's config or checkpoint cannot be read
        (the model loader then says what is missing).
    """
    try:
        read = sorted(_model_digests(Path(path)) for path in paths)
    except OSError:
        return None
    models = [(config, ckpt) for config, ckpt, _ in read]
    given = {name: value for name, value in export_options.items() if name != "verify_frames"}
    options = {name: _plain(value) for name, value in {**EXPORT_DEFAULTS, **given}.items()}
    parts = {
        "models": [{TRAINING_CONFIG: config, CHECKPOINT: ckpt} for config, ckpt in models],
        "sleap_live_version": package_version() if version is None else version,
        "code": code_digest(),
        "export": dict(sorted(options.items())),
        "settings": (InferenceSettings() if settings is None else settings).graph_key(),
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    secret = hashlib.sha256(
        _SECRET_TAG + b"".join(bytes.fromhex(keyed) for _, _, keyed in read) + text.encode()
    ).digest()
    return CacheKey(hashlib.sha256(text.encode()).hexdigest(), parts, secret)


def graph_mac(key: CacheKey, onnx_bytes: bytes) -> str:
    """The keyed digest of an entry's graph (HMAC-SHA256 under `key.secret`, hex)."""
    return hmac.new(key.secret, onnx_bytes, hashlib.sha256).hexdigest()


def package_version() -> str:
    """The installed sleap-live's version ("unknown" when it is not installed)."""
    try:
        return importlib.metadata.version("sleap-live")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def code_digest() -> str:
    """sha256 of the source files that build and export the graph (see the module docstring)."""
    engines = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for relative in graph_code_files():
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256((engines / relative).read_bytes()).digest())
    return digest.hexdigest()


def graph_code_files() -> list[Path]:
    """The source files `code_digest` hashes, relative to `sleap_live.engines`, in order:
    every module but the runners' (export on demand lives in `export/`, so it counts)."""
    engines = Path(__file__).resolve().parents[1]
    paths = (path.relative_to(engines) for path in sorted(engines.rglob("*.py")))
    return [path for path in paths if path.parts[0] not in _NOT_GRAPH_CODE]


def embedded_key(metadata: ExportMetadata) -> str | None:
    """The cache key a graph's embedded metadata carries, if any."""
    key = metadata.exporter.get(KEY_FIELD)
    return key if isinstance(key, str) else None


def with_embedded_key(onnx_bytes: bytes, key: CacheKey) -> bytes:
    """The graph with `key` added to its embedded metadata's `exporter` record."""
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            document = json.loads(prop.value)
            document["exporter"] = {**document.get("exporter", {}), KEY_FIELD: key.digest}
            prop.value = json.dumps(document, indent=2)
            return bytes(model.SerializeToString())
    raise ValueError(f"the graph carries no '{METADATA_KEY}' metadata to key")


@attrs.frozen
class ExportCache:
    """The ONNX graphs in one cache directory.

    Attributes:
        root: sleap-live's cache directory (graphs go in its `onnx/` folder).
        notify: called with a one-line notice when an entry is rebuilt or the
            cache cannot be written.
        folder: the folder of the root the graphs go in (`onnx`; `int8` for the
            quantised graphs, `sleap_live.engines.export.quantise`).
    """

    root: Path = attrs.field(converter=Path)
    notify: Notify
    folder: str = ONNX_FOLDER

    @property
    def directory(self) -> Path:
        return self.root / self.folder

    def graph_path(self, key: CacheKey) -> Path:
        return self.directory / f"{key.digest}.onnx"

    def read(self, key: CacheKey) -> bytes | None:
        """The cached graph of `key`; None when absent, or corrupt (removed, with a notice)."""
        graph = self.graph_path(key)
        sidecar = sidecar_path(graph)
        if not graph.exists() and not sidecar.exists():
            return None
        untrusted = _untrusted(self.root, self.directory, graph, sidecar)
        if untrusted is not None:
            self.notify(f"cached export {graph} is not used: {untrusted}; exporting the model")
            return None
        try:
            record = json.loads(sidecar.read_text())
            onnx_bytes = graph.read_bytes()
        except (OSError, UnicodeDecodeError, ValueError) as error:
            self.discard(key, f"unreadable ({type(error).__name__})")
            return None
        problem = _entry_problem(record, key, onnx_bytes)
        if problem is not None:
            self.discard(key, problem)
            return None
        return onnx_bytes

    def write(self, key: CacheKey, onnx_bytes: bytes) -> None:
        """Stores a keyed graph (see `with_embedded_key`): graph, then sidecar, each atomically."""
        record = {
            "schema": ENTRY_SCHEMA,
            "schema_version": ENTRY_SCHEMA_VERSION,
            "key": key.digest,
            "bytes": len(onnx_bytes),
            "sha256": hashlib.sha256(onnx_bytes).hexdigest(),
            "graph_mac": graph_mac(key, onnx_bytes),
            "parts": dict(key.parts),
        }
        graph = self.graph_path(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if _untrusted(self.root, self.directory) is not None:
                return  # `read` said why; an entry there would not be used
            _write_atomically(graph, onnx_bytes)
            _write_atomically(sidecar_path(graph), (json.dumps(record, indent=2) + "\n").encode())
        except OSError as error:
            self.notify(f"cannot cache the exported model in {self.directory} ({error})")

    def discard(self, key: CacheKey, reason: str) -> None:
        """Removes an entry found corrupt, saying so."""
        self.notify(f"cached export {self.graph_path(key)} is {reason}: exporting the model again")
        self.remove(key)

    def remove(self, key: CacheKey) -> None:
        """Removes an entry (the sidecar first, so that no half entry is ever trusted)."""
        graph = self.graph_path(key)
        for path in (sidecar_path(graph), graph):
            path.unlink(missing_ok=True)


def _untrusted(*paths: Path) -> str | None:
    """Why one of `paths` (cache folders, entry files) cannot be trusted, or None: it
    belongs to another user, or others may write it."""
    if sys.platform == "win32":
        return None  # no owners or modes to compare
    user = os.geteuid()
    for path in paths:
        try:
            status = path.stat()
        except FileNotFoundError:
            continue
        if status.st_uid != user:
            return f"{path} belongs to another user (uid {status.st_uid})"
        if status.st_mode & stat.S_IWOTH:
            return f"{path} is writable by every user"
        if status.st_mode & stat.S_IWGRP and status.st_gid != os.getegid():
            return f"{path} is writable by the group {status.st_gid}"
    return None


def _entry_problem(record: Any, key: CacheKey, onnx_bytes: bytes) -> str | None:
    """What is wrong with an entry's sidecar or graph file, or None."""
    if not isinstance(record, dict) or record.get("schema") != ENTRY_SCHEMA:
        return "not a sleap-live cache entry"
    if record.get("schema_version") != ENTRY_SCHEMA_VERSION:
        return f"of cache schema version {record.get('schema_version')}"
    if record.get("key") != key.digest:
        return "recorded under another key"
    if record.get("bytes") != len(onnx_bytes):
        return f"truncated or overwritten ({len(onnx_bytes)} bytes, {record.get('bytes')} recorded)"
    if record.get("sha256") != hashlib.sha256(onnx_bytes).hexdigest():
        return "damaged (its sha256 differs from the recorded one)"
    recorded = record.get("graph_mac")
    if not isinstance(recorded, str) or not hmac.compare_digest(
        recorded, graph_mac(key, onnx_bytes)
    ):
        return (
            "changed since its export (its graph does not match the keyed digest it was made with)"
        )
    return None


def _model_digests(path: Path) -> tuple[str, str, str]:
    """sha256 of a model directory's training config and checkpoint bytes (a SLEAP 1.x
    folder's `training_config.json` and Keras `best_model.h5`), and the tagged digest
    of both that the entry's keyed digest is made from (never written)."""
    config, weights = TRAINING_CONFIG, CHECKPOINT
    if not (path / TRAINING_CONFIG).is_file() and (path / LEGACY_TRAINING_CONFIG).is_file():
        config, weights = LEGACY_TRAINING_CONFIG, LEGACY_WEIGHTS
    keyed = hashlib.sha256(_SECRET_TAG)
    config_digest = _file_sha256(path / config, keyed)
    keyed.update(b"\0")
    weights_digest = _file_sha256(path / weights, keyed)
    return config_digest, weights_digest, keyed.hexdigest()


def _file_sha256(path: Path, also: Any = None) -> str:
    """sha256 of a file read in blocks (a large file is never held whole), each block
    also fed to the hash `also` where one is given."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
            if also is not None:
                also.update(block)
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """An export option as JSON (tuples as lists)."""
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def _write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to a temporary file beside `path`, then renames it into place."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
