"""The export cache: model directories exported once, loaded from the cache after.

Exports are counted by wrapping `export_graph`; nothing here is timed.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sleap_live.cli import main
from sleap_live.engines.cache import CACHE_DIR_ENV, cache_root
from sleap_live.engines.export import exporter
from sleap_live.engines.load import export_cache
from sleap_live.engines.load.export_cache import (
    CacheKey,
    ExportCache,
    cache_key,
    with_embedded_key,
)
from sleap_live.engines.load.metadata import DEFAULT_OPSET, sidecar_path
from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.runner import first_frames
from tests.stream.many_videos import cut_clips

DATA = Path(__file__).parents[1] / "data"
SINGLE = DATA / "models" / "single_instance"
CENTROID = DATA / "models" / "centroid"
CENTERED = DATA / "models" / "centered_instance"
VIDEO = DATA / "videos" / "single.mkv"
TORCH_BLOCKER = Path(__file__).parents[1] / "torch_blocker.py"
HEADLINE = "exporting model (first run, cached for next time)"
SUFFIXES = (".onnx", ".onnx.json")

# What the cache does is what these tests look at: none shares the session's cache.
pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _export_key(model: Any, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What makes an export: the model folders (where and their bytes), the model's
    settings, the export options and the verification frames."""
    sources = tuple(
        (str(Path(path).resolve()), tuple(sorted(
            (file.name, hashlib.sha256(file.read_bytes()).hexdigest())
            for file in Path(path).iterdir() if file.is_file()
        )))
        for path in kwargs.get("sources", ())
    )  # fmt: skip
    frames = kwargs.get("verify_frames")
    frames_digest = None if frames is None else hashlib.sha256(np.asarray(frames)).hexdigest()
    options = sorted(
        (name, repr(value))
        for name, value in kwargs.items()
        if name not in ("sources", "progress", "verify_frames")
    )
    return sources, repr(model.info.settings), tuple(options), frames_digest


class Exports:
    """Counts calls of `export_graph` for a general graph (the loader imports it at each
    export); each distinct export is made by the real one once and kept in `graphs`, by
    `_export_key`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, graphs: dict[tuple[Any, ...], bytes]):
        self.calls = 0
        real = exporter.export_graph

        def counted(model, **kwargs):
            if "frame_shape" in kwargs:  # a specialised graph: not the export counted
                return real(model, **kwargs)
            self.calls += 1
            key = _export_key(model, kwargs)
            if key not in graphs:
                graphs[key] = real(model, **kwargs)
            return graphs[key]

        monkeypatch.setattr(exporter, "export_graph", counted)


@pytest.fixture(scope="module")
def graphs() -> dict[tuple[Any, ...], bytes]:
    """Each distinct export these tests ask for, made once for the module: what they
    look at is when the cache exports and what it reads and writes, not the exporter,
    and an export of the same model bytes with the same options gives the same graph."""
    return {}


@pytest.fixture
def exports(monkeypatch, graphs) -> Exports:
    return Exports(monkeypatch, graphs)


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return first_frames(VIDEO)


def load(cache_dir: Path, **options):
    """The single-instance model on ONNX Runtime, unverified unless told (quick to export)."""
    options.setdefault("verify", False)
    return load_runner(SINGLE, engine="onnx", device="cpu", cache_dir=cache_dir, **options)


def entries(cache_dir: Path) -> list[str]:
    folder = cache_dir / "onnx"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def copy_model(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


# --- the key ---------------------------------------------------------------------


def test_key_follows_the_checkpoint_config_version_and_options(tmp_path):
    model = copy_model(SINGLE, tmp_path / "model")
    options = {"verify": True}
    base = cache_key([model], options)
    assert base is not None and len(base.digest) == 64
    assert cache_key([model], options).digest == base.digest

    moved = copy_model(SINGLE, tmp_path / "elsewhere")
    assert cache_key([moved], options).digest == base.digest, "keyed by content, not path"

    different = {
        "opset": cache_key([model], {**options, "opset": 18}),
        "no-verify": cache_key([model], {"verify": False}),
        "profile": cache_key([model], {**options, "profile": "tensorrt"}),
        "frame_size": cache_key([model], {**options, "frame_size": (64, 80)}),
        "version": cache_key([model], options, version="99.0"),
    }
    checkpoint = model / "best.ckpt"
    checkpoint.write_bytes(checkpoint.read_bytes() + b"\0")
    different["checkpoint"] = cache_key([model], options)
    checkpoint.write_bytes(checkpoint.read_bytes()[:-1])
    assert cache_key([model], options).digest == base.digest
    config = model / "training_config.yaml"
    config.write_text(config.read_text() + "\n# edited\n")
    different["config"] = cache_key([model], options)
    digests = {name: key.digest for name, key in different.items() if key is not None}
    assert len(digests) == len(different)
    assert base.digest not in digests.values()
    assert len(set(digests.values())) == len(digests), digests


def test_key_ignores_the_verification_frames_and_the_directories_order(frames):
    plain = cache_key([CENTROID, CENTERED], {"verify": True})
    framed = cache_key([CENTERED, CENTROID], {"verify": True, "verify_frames": frames})
    assert plain is not None and framed is not None and plain.digest == framed.digest


def test_the_default_opset_given_keys_the_same_entry_as_none_given():
    left_out = cache_key([SINGLE], {"verify": True})
    given = cache_key([SINGLE], {"verify": True, "opset": DEFAULT_OPSET})
    assert left_out is not None and given is not None and given.digest == left_out.digest
    assert cache_key([SINGLE], {"verify": True, "opset": 18}).digest != left_out.digest


def test_verify_given_as_its_default_hits_the_entry_of_a_load_without_it(tmp_path, exports):
    # `sleap-live run` passes verify=True; `load_runner(dirs)` leaves it out: one export.
    for options in ({}, {"verify": True}):
        load_runner([SINGLE], engine="onnx", cache_dir=tmp_path, **options).close()
    assert exports.calls == 1
    load_runner([SINGLE], engine="onnx", cache_dir=tmp_path, verify=False).close()
    assert exports.calls == 2


def test_key_follows_the_code_that_builds_the_graph(monkeypatch):
    before = cache_key([SINGLE], {})
    monkeypatch.setattr(export_cache, "code_digest", lambda: "0" * 64)
    after = cache_key([SINGLE], {})
    assert before is not None and after is not None and before.digest != after.digest


def test_unreadable_model_files_have_no_key(tmp_path):
    model = copy_model(SINGLE, tmp_path / "model")
    (model / "best.ckpt").unlink()
    assert cache_key([model], {}) is None


def test_the_code_digest_covers_what_makes_graphs_and_not_the_runners():
    files = {path.as_posix() for path in export_cache.graph_code_files()}
    # Export on demand and the specialised graphs shape what the cache holds.
    assert {"export/on_demand.py", "export/exporter.py", "graph/build.py"} <= files
    assert "export/tensorrt_on_demand.py" in files and "load/export_cache.py" in files
    assert not any(name.startswith("runners/") for name in files)


def test_cache_root_is_the_given_dir_else_the_environment_variable_else_the_user_cache(
    monkeypatch, tmp_path
):
    import platformdirs

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    assert cache_root() == tmp_path
    assert cache_root(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv(CACHE_DIR_ENV)
    assert cache_root() == Path(platformdirs.user_cache_dir("sleap-live", appauthor=False))


# --- hits and misses -------------------------------------------------------------


def test_a_second_load_runs_the_cached_graph_without_exporting(tmp_path, exports, frames):
    steps: list[str] = []
    first = load(tmp_path, verify=True, verify_frames=frames, progress=steps.append)
    assert exports.calls == 1
    # The dynamic graph, then the one specialised to the frames' shape.
    specialising = "specialising the model to 200x168x1 frames"
    assert steps and all(step.startswith((HEADLINE, specialising)) for step in steps)
    assert steps[0].startswith(HEADLINE) and steps[-1].startswith(specialising)
    assert any("verifying" in step for step in steps)
    key = cache_key([SINGLE], {"verify": True})
    static = cache_key([SINGLE], {"static_frame_shape": [168, 200, 1]})
    assert entries(tmp_path) == sorted(
        f"{digest}{suffix}" for digest in (key.digest, static.digest) for suffix in SUFFIXES
    )

    steps.clear()
    second = load(tmp_path, verify=True, verify_frames=frames, progress=steps.append)
    assert exports.calls == 1 and steps == []
    assert second.metadata.verification == first.metadata.verification  # a verified export
    assert second.metadata.exporter["cache_key"] == key.digest
    for a, b in zip(first.run(frames), second.run(frames), strict=True):
        np.testing.assert_array_equal(a.points, b.points)
        np.testing.assert_array_equal(a.point_scores, b.point_scores)

    load(tmp_path)  # unverified exports are keyed apart
    assert exports.calls == 2 and len(entries(tmp_path)) == 6


def test_a_copy_of_a_model_elsewhere_is_named_as_given(tmp_path, exports):
    # The cache is keyed by the models' bytes: a copy hits the first export's entry,
    # whose metadata names the folder it was exported from, not this one.
    cache, copy = tmp_path / "cache", tmp_path / "elsewhere" / "single_instance"
    shutil.copytree(SINGLE, copy)
    first = load(cache)
    second = load_runner(copy, engine="onnx", device="cpu", cache_dir=cache, verify=False)
    assert exports.calls == 1  # the copy ran the cached graph
    assert [source["path"] for source in first.metadata.sources] == [str(SINGLE.resolve())]
    assert [source["path"] for source in second.metadata.sources] == [str(copy.resolve())]


def test_a_changed_checkpoint_is_exported_again(tmp_path, exports):
    model = copy_model(SINGLE, tmp_path / "model")
    cache = tmp_path / "cache"
    for expected in (1, 1):
        load_runner(model, engine="onnx", device="cpu", cache_dir=cache, verify=False)
        assert exports.calls == expected
    checkpoint = model / "best.ckpt"
    checkpoint.write_bytes(checkpoint.read_bytes() + b"\0")  # torch ignores trailing bytes
    load_runner(model, engine="onnx", device="cpu", cache_dir=cache, verify=False)
    assert exports.calls == 2 and len(entries(cache)) == 4


def test_without_the_cache_nothing_is_read_or_written(tmp_path, exports):
    load(tmp_path)
    before = {name: (tmp_path / "onnx" / name).stat().st_mtime_ns for name in entries(tmp_path)}
    load(tmp_path, cache=False)
    load(tmp_path, cache=False)
    assert exports.calls == 3
    after = {name: (tmp_path / "onnx" / name).stat().st_mtime_ns for name in entries(tmp_path)}
    assert after == before
    empty = tmp_path / "never"
    load(empty, cache=False)
    assert not empty.exists()


def test_the_torch_engine_uses_no_cache(tmp_path):
    load_runner(SINGLE, engine="torch", device="cpu", cache_dir=tmp_path)
    assert not (tmp_path / "onnx").exists()


def test_an_unwritable_cache_is_a_notice_not_a_failure(tmp_path, exports, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    runner = load(blocked)
    assert runner.info.model_type == "single_instance"
    assert "cannot cache the exported model" in capsys.readouterr().err


# --- corrupt entries -------------------------------------------------------------


@pytest.fixture
def cached(tmp_path, exports) -> tuple[Path, CacheKey]:
    """A cache directory holding the unverified single-instance export, and its key."""
    load(tmp_path)
    key = cache_key([SINGLE], {"verify": False})
    assert exports.calls == 1
    return tmp_path, key


def _rewrite(cache_dir: Path, key: CacheKey, onnx_bytes: bytes) -> None:
    """Replaces the entry's graph, its sidecar made to match (length and sha256)."""
    ExportCache(cache_dir, print).write(key, onnx_bytes)


def _garbage(graph: Path) -> str:
    graph.write_bytes(b"not an onnx graph at all" * 100)
    return "truncated or overwritten"


def _truncated(graph: Path) -> str:
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    return "truncated or overwritten"


def _flipped(graph: Path) -> str:
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    return "damaged"


def _bad_sidecar(graph: Path) -> str:
    sidecar_path(graph).write_text("{ not json")
    return "unreadable"


def _no_sidecar(graph: Path) -> str:
    sidecar_path(graph).unlink()
    return "unreadable"


def _other_key_in_sidecar(graph: Path) -> str:
    sidecar = sidecar_path(graph)
    record = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**record, "key": "0" * 64}))
    return "recorded under another key"


def _zeroed_convolutions_sidecar_recomputed(graph: Path) -> str:
    # What the owner of the cache alone can do (issue #36): every convolution's
    # weights zeroed (the model then finds no animal), the sidecar's length and
    # sha256 made to match; its keyed digest needs the model files' bytes.
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(graph.read_bytes())
    weights = {node.input[1] for node in model.graph.node if node.op_type == "Conv"}
    zeroed = [init for init in model.graph.initializer if init.name in weights]
    assert zeroed, "the fixture graph has convolutions with constant weights"
    for init in zeroed:
        init.CopyFrom(
            numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(init)), init.name)
        )
    data = model.SerializeToString()
    graph.write_bytes(data)
    sidecar = sidecar_path(graph)
    record = json.loads(sidecar.read_text())
    record.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    sidecar.write_text(json.dumps(record))
    return "changed since its export"


@pytest.mark.parametrize(
    "corrupt",
    [
        _garbage,
        _truncated,
        _flipped,
        _bad_sidecar,
        _no_sidecar,
        _other_key_in_sidecar,
        _zeroed_convolutions_sidecar_recomputed,
    ],
)
def test_a_corrupt_entry_is_exported_again_with_a_notice(cached, exports, capsys, corrupt):
    cache_dir, key = cached
    graph = cache_dir / "onnx" / f"{key.digest}.onnx"
    capsys.readouterr()
    says = corrupt(graph)
    runner = load(cache_dir)
    assert exports.calls == 2
    (notice,) = capsys.readouterr().err.strip().splitlines()
    assert str(graph) in notice and says in notice and "exporting the model again" in notice
    assert runner.metadata.exporter["cache_key"] == key.digest
    load(cache_dir)  # the rebuilt entry is good
    assert exports.calls == 2


def test_a_graph_onnx_runtime_cannot_load_is_exported_again(cached, exports, capsys):
    cache_dir, key = cached
    _rewrite(cache_dir, key, b"\x08\x07" + b"\xff" * 300)  # consistent sidecar, junk graph
    capsys.readouterr()
    load(cache_dir)
    assert exports.calls == 2
    assert "not loadable" in capsys.readouterr().err


def test_a_graph_keyed_differently_in_its_own_metadata_is_exported_again(cached, exports, capsys):
    cache_dir, key = cached
    graph = cache_dir / "onnx" / f"{key.digest}.onnx"
    other = CacheKey("f" * 64, {}, b"")
    _rewrite(cache_dir, key, with_embedded_key(graph.read_bytes(), other))
    capsys.readouterr()
    runner = load(cache_dir)
    assert exports.calls == 2
    assert "keyed differently in its own metadata" in capsys.readouterr().err
    assert runner.metadata.exporter["cache_key"] == key.digest


def test_a_changed_version_misses(cached, exports, monkeypatch):
    cache_dir, _ = cached
    monkeypatch.setattr(export_cache, "package_version", lambda: "99.0")
    load(cache_dir)
    assert exports.calls == 2 and len(entries(cache_dir)) == 4


# --- the command line ------------------------------------------------------------


@pytest.fixture
def clip(tmp_path) -> Path:
    """The first 10 frames of the single-instance fixture video."""
    (path,) = cut_clips(tmp_path, {"clip": (0, 10)}, VIDEO)
    return path


def test_cli_caches_in_cache_dir_and_a_warm_run_needs_no_torch(tmp_path, clip, capsys):
    cache = tmp_path / "cache"
    argv = ["run", str(clip), "-m", str(SINGLE), "--cache-dir", str(cache)]
    assert main([*argv, "-o", str(tmp_path / "cold.slp")]) == 0
    assert HEADLINE in capsys.readouterr().err
    assert len(entries(cache)) == 4  # the general graph and the one for the clip's frames

    warm = subprocess.run(
        [sys.executable, str(TORCH_BLOCKER), "-m", "sleap_live", *argv, "-o", "warm.slp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert warm.returncode == 0, warm.stderr
    assert "torch_blocker" not in warm.stderr and HEADLINE not in warm.stderr
    assert "poses:" in warm.stderr and (tmp_path / "warm.slp").is_file()


def test_a_warm_run_reads_no_verification_frames(tmp_path, clip, monkeypatch, exports):
    # The frames spread over the video verify a first export; a run whose export and
    # specialised graph are cached never decodes them (seconds of seeking at 1024 px).
    from sleap_live.stream import runner as stream_runner

    read: list[Path] = []
    spread = stream_runner.spread_frames

    def counted(video: Path, *args: Any, **kwargs: Any) -> Any:
        read.append(video)
        return spread(video, *args, **kwargs)

    monkeypatch.setattr(stream_runner, "spread_frames", counted)
    cache = tmp_path / "cache"
    argv = ["run", str(clip), "-m", str(SINGLE), "--engine", "onnx", "--cache-dir", str(cache)]
    assert main([*argv, "-q", "-o", str(tmp_path / "first.slp")]) == 0
    assert read == [clip] and exports.calls == 1
    assert main([*argv, "-q", "-o", str(tmp_path / "warm.slp")]) == 0
    assert read == [clip] and exports.calls == 1


def test_cli_no_cache_exports_without_the_cache(tmp_path, clip, capsys, exports):
    cache = tmp_path / "cache"
    argv = ["run", str(clip), "-m", str(SINGLE), "--engine", "onnx", "--no-verify"]
    assert main([*argv, "--no-cache", "-o", str(tmp_path / "a.slp")]) == 0
    assert "exporting model" in capsys.readouterr().err and exports.calls == 1
    assert main([*argv, "--cache-dir", str(cache), "-o", str(tmp_path / "b.slp")]) == 0
    assert main([*argv, "--cache-dir", str(cache), "-o", str(tmp_path / "c.slp")]) == 0
    assert exports.calls == 2 and len(entries(cache)) == 4  # general and specialised


def test_cli_no_cache_and_cache_dir_are_exclusive(tmp_path, capsys):
    argv = ["run", "clip.mkv", "-m", str(SINGLE), "--no-cache", "--cache-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_loading_status_is_one_line_on_a_terminal_and_a_line_per_step_elsewhere():
    import io

    from rich.console import Console

    from sleap_live.cli.loading import loading_status

    steps = [f"{HEADLINE}: exporting to ONNX", f"{HEADLINE}: verifying on frames (2, 8, 8, 1)"]
    log = io.StringIO()
    with loading_status(Console(file=log, width=200)) as progress:
        for step in steps:
            progress(step)
    assert log.getvalue().splitlines() == steps

    screen = io.StringIO()
    with loading_status(Console(file=screen, force_terminal=True, width=200)) as progress:
        for step in steps:
            progress(step)
    shown = screen.getvalue()  # one spinner line, updated in place, erased when loading ends
    assert steps[-1] in shown and shown.count("\n") == 1 and shown.endswith("\x1b[2K")

    quiet = io.StringIO()
    with loading_status(Console(file=quiet, force_terminal=True), quiet=True) as progress:
        progress(steps[0])
    assert quiet.getvalue() == ""


# --- entries others could have changed (issue #20) ---------------------------------


def _another_users(graph: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(graph, pwd.getpwnam("nobody").pw_uid, -1)
    return "belongs to another user"


def _world_writable_folder(graph: Path) -> str:
    graph.parent.chmod(0o777)
    return "is writable by every user"


def _group_writable_graph(graph: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another group needs root")
    os.chown(graph, -1, grp.getgrnam("nogroup").gr_gid)
    graph.chmod(0o664)
    return "is writable by the group"


@pytest.mark.parametrize("expose", [_another_users, _world_writable_folder, _group_writable_graph])
def test_an_entry_others_could_have_changed_is_not_used(cached, exports, capsys, expose):
    # Its sidecar still matches it (as after someone recomputed the hash): the
    # graph is not used all the same, and not removed (it is not ours to delete).
    cache_dir, key = cached
    graph = cache_dir / "onnx" / f"{key.digest}.onnx"
    capsys.readouterr()
    says = expose(graph)
    runner = load(cache_dir)
    assert exports.calls == 2
    (notice,) = capsys.readouterr().err.strip().splitlines()
    assert str(graph) in notice and says in notice and "is not used" in notice
    assert runner.info.model_type == "single_instance" and graph.exists()
