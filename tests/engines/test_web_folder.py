"""The web export's folder and `serve-web` without a browser: what the server sends, and
the one-line refusals (a folder that is no web export, a model type the page cannot
decode, an output folder holding other things). The page itself runs in
test_web_export.py."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from pathlib import Path

from sleap_live import cli
from sleap_live.cli import serve_web
from sleap_live.cli.serve_web import web_server
from tests.engines.goldens import DATA

PAGE_FILES = ("index.html", "app.js", "skeleton.js", "model.onnx", "model.json")


def fake_export(folder: Path) -> Path:
    folder.mkdir()
    for name in PAGE_FILES:
        (folder / name).write_text(name)
    (folder / "ort").mkdir()
    (folder / "ort" / "runtime.wasm").write_bytes(b"\0asm")
    (folder / "ort" / "runtime.mjs").write_text("export {};")
    return folder


def test_serve_web_sends_the_isolation_headers_and_the_module_and_wasm_types(tmp_path):
    server = web_server(fake_export(tmp_path / "site"), 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert server.server_address[0] == "127.0.0.1"
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        with urllib.request.urlopen(base, timeout=10) as reply:
            assert reply.read() == b"index.html"
            assert reply.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert reply.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        for path, kind in [
            ("ort/runtime.wasm", "application/wasm"),
            ("ort/runtime.mjs", "text/javascript"),
            ("app.js", "text/javascript"),
        ]:
            with urllib.request.urlopen(base + path, timeout=10) as reply:
                assert reply.headers["Content-Type"] == kind, path
    finally:
        server.shutdown()
        server.server_close()


def test_serve_web_refuses_a_folder_that_is_no_web_export_in_one_line(tmp_path, capsys):
    (tmp_path / "other").mkdir()
    assert cli.main(["serve-web", str(tmp_path / "other")]) == 1  # a bad input, not usage
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "other: not a web export" in error and "--format web" in error
    assert cli.main(["serve-web", str(tmp_path / "missing")]) == 1
    assert "missing: no such folder" in capsys.readouterr().err


def test_web_export_refuses_a_bottomup_model_in_one_line(tmp_path, capsys):
    output = tmp_path / "web"
    argv = ["export", str(DATA / "models" / "bottomup"), "--format", "web", "-o", str(output)]
    assert cli.main(argv) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "a bottomup model cannot run in the web page" in error
    assert not output.exists()


def test_web_export_never_writes_into_a_folder_holding_other_things(tmp_path, capsys):
    output = tmp_path / "mine"
    output.mkdir()
    (output / "notes.txt").write_text("keep")
    argv = ["export", str(DATA / "models" / "single_instance"), "--format", "web"]
    assert cli.main([*argv, "-o", str(output)]) == 2
    assert "not empty and not a web export" in capsys.readouterr().err
    assert [path.name for path in output.iterdir()] == ["notes.txt"]


def test_tensorrt_takes_one_frame_size(tmp_path, capsys):
    sizes = ["--frame-size", "4x4", "--frame-size", "8x8"]
    argv = ["export", str(DATA / "models" / "single_instance"), "--format", "tensorrt", *sizes]
    assert cli.main([*argv, "-o", str(tmp_path / "trt")]) == 2
    assert "give --frame-size once" in capsys.readouterr().err


def _get(port: int, path: str, headers: dict[str, str]) -> int:
    """The status of a GET of `path` with exactly `headers` (Host included)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        lines = [f"GET {path} HTTP/1.0", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        connection.sendall("\r\n".join(lines).encode())
        reply = connection.makefile("rb").readline()
    return int(reply.split()[1])


def test_serve_web_answers_only_its_own_host_and_origin_files_in_its_folder(tmp_path):
    # Issue #36: `Host: evil.com` got the whole model.onnx, any Origin was taken, the
    # folders were listed and a link in the export folder led to /etc/passwd.
    site = fake_export(tmp_path / "site")
    (site / "passwd.json").symlink_to("/etc/passwd")
    (site / "graphs").symlink_to("/etc")
    server = web_server(site, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        own = {"Host": f"127.0.0.1:{port}"}
        assert _get(port, "/model.onnx", own) == 200
        assert _get(port, "/model.onnx", {"Host": f"localhost:{port}"}) == 200
        assert _get(port, "/model.onnx", {"Host": "evil.com"}) == 403
        assert _get(port, "/model.onnx", {"Host": f"evil.com:{port}"}) == 403
        assert _get(port, "/model.onnx", {}) == 403
        assert _get(port, "/model.onnx", {**own, "Origin": "http://evil.com"}) == 403
        assert _get(port, "/model.onnx", {**own, "Origin": f"http://127.0.0.1:{port}"}) == 200
        assert _get(port, "/ort/", own) == 404  # no listing
        assert _get(port, "/passwd.json", own) == 404
        assert _get(port, "/graphs/passwd", own) == 404
    finally:
        server.shutdown()
        server.server_close()


def test_serve_web_serves_a_bounded_number_of_connections(tmp_path, monkeypatch):
    # Issue #36: a thread per idle connection, 722 seen. Past the bound a connection
    # is closed at once; the ones served close when idle.
    monkeypatch.setattr(serve_web, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(serve_web.WebExportHandler, "timeout", 1.0)
    server = web_server(fake_export(tmp_path / "site"), 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    before = threading.active_count()
    idle = []
    try:
        port = server.server_address[1]
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(12)]
        closed = 0
        for connection in idle[4:]:
            closed += connection.recv(1) == b""  # closed by the server, unserved
        assert closed == 8
        assert threading.active_count() <= before + 4
        deadline = time.monotonic() + 10
        while _get_or_none(port) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)  # the idle ones time out, and a request is served again
        assert _get_or_none(port) == 200
    finally:
        for connection in idle:
            connection.close()
        server.shutdown()
        server.server_close()


def _get_or_none(port: int) -> int | None:
    try:
        return _get(port, "/model.onnx", {"Host": f"127.0.0.1:{port}"})
    except (OSError, IndexError, ValueError):
        return None


def test_the_web_export_says_which_frame_sizes_its_page_runs(tmp_path):
    """Issue 37: the page refused the bundled clip (168x200) and nothing had said
    which sizes the export held."""
    import json

    from sleap_live.cli.export import web_sizes

    graphs = {"168x200": "graphs/168x200.onnx", "480x640": "graphs/480x640.onnx"}
    (tmp_path / "model.json").write_text(json.dumps({"graphs": graphs}))
    line = web_sizes(tmp_path)
    assert "the page runs frames of 168x200, 480x640 (height x width)" in line
    assert "--frame-size HxW" in line and "--verify-video VIDEO" in line
    # The documented command takes the bundled clip's size from --verify-video.
    docs = (Path(__file__).parents[2] / "docs" / "export-formats.md").read_text()
    command = docs[docs.index("sleap-live export tests/data/models/centroid") :]
    command = command[: command.index("sleap-live serve-web")]
    assert "--verify-video tests/data/videos/demo.mp4" in command
