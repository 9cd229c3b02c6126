"""`sleap-live serve-web DIR`: serve a web export (`export --format web`) on 127.0.0.1.

A browser will not run a page's wasm and ES modules from `file://`, so the export's
folder needs a web server; this is a static one, on the loopback address only (the
webcam needs a secure context, which http://127.0.0.1 is). It sends the headers that
make the page cross-origin isolated, so onnxruntime-web's wasm may use threads, and
the MIME types wasm and ES modules must have. Ctrl-C stops it.

Who may look, and what: the preview's rule (`preview.refusal`): a request whose
``Host`` is not the server's own loopback name and port, or whose ``Origin`` is
another site's, gets 403, so no web page the user visits (directly or by DNS
rebinding) can read the model. Only files in the folder are sent: no folder
listing, nothing a link leads to outside it (404). At most `MAX_CONNECTIONS`
connections are served at once, one more is closed as soon as it is accepted,
and a connection idle for `IDLE_SECONDS` is closed.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import threading
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli.options import PROG, add_command

# Connections served at once, and seconds a connection may sit idle.
MAX_CONNECTIONS = 64
IDLE_SECONDS = 10.0

HOST = "127.0.0.1"
DEFAULT_PORT = 8000
TYPES = {
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".onnx": "application/octet-stream",
}


def add_parser(commands: Any) -> None:
    """Adds `serve-web` to the subcommands of the top-level parser."""
    serve = add_command(
        commands,
        "serve-web",
        handle,
        description="Serve the folder of `export --format web` on 127.0.0.1 (this machine "
        "only) and print the address to open. The page runs the model in the browser on "
        "onnxruntime-web's wasm (DIR/?backend=webgpu tries WebGPU, not verified), on the "
        "webcam or a video file, draws the skeleton, shows fps and latency, and offers the "
        "poses as JSON or CSV. Ctrl-C stops the server.",
        epilog=f"example:\n  {PROG} export MODEL_DIR --format web -o out/web\n"
        f"  {PROG} serve-web out/web",
    )
    serve.add_argument("folder", type=Path, metavar="DIR", help="the web export's folder")
    serve.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port on 127.0.0.1; 0 takes a free one",
    )


class WebExportServer(http.server.ThreadingHTTPServer):
    """A thread per connection, `MAX_CONNECTIONS` at most: one more is closed at once.

    Args:
        port: on 127.0.0.1; 0 takes a free one.
        handler: makes the handler of each request.
    """

    def __init__(self, port: int, handler: Callable[..., WebExportHandler]) -> None:
        from sleap_live.stream.preview import served_hosts

        super().__init__((HOST, port), handler)
        self.hosts = served_hosts(HOST, self.server_address[1])
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class WebExportHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with the isolation headers and the MIME types the page needs,
    under the rules of the module's docstring."""

    server: WebExportServer
    timeout = IDLE_SECONDS

    def send_head(self) -> Any:
        from sleap_live.stream.preview import refusal

        reason = refusal(
            self.headers.get("Host"), self.headers.get("Origin"), self.server.hosts, False
        )
        if reason is not None:
            self.send_error(HTTPStatus.FORBIDDEN, reason)
            return None
        root = os.path.realpath(self.directory)
        path = os.path.realpath(self.translate_path(self.path))
        if os.path.commonpath([root, path]) != root:
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        return super().send_head()

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        del path  # a folder is not listed
        self.send_error(HTTPStatus.NOT_FOUND, "File not found")

    def guess_type(self, path: str | os.PathLike[str]) -> str:
        # Browsers run ES modules and compile wasm only when served with these types.
        return TYPES.get(Path(path).suffix) or super().guess_type(path)

    def end_headers(self) -> None:
        # Cross-origin isolation: SharedArrayBuffer, hence wasm threads.
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        del format, args  # a request log would bury the address line


def web_server(folder: Path, port: int = DEFAULT_PORT) -> WebExportServer:
    """A server of `folder` on 127.0.0.1:`port` (not yet serving; call serve_forever).

    Raises:
        FileNotFoundError: `folder` is not a web export (a bad input, exit 1 as
            for a missing video; 2 is for bad arguments).
    """
    from sleap_live.engines.export.web import WEB_EXPORT_FILES, is_web_export

    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    if not is_web_export(folder):
        names = f"{', '.join(WEB_EXPORT_FILES[:-1])} and {WEB_EXPORT_FILES[-1]}"
        raise FileNotFoundError(
            f"{folder}: not a web export (no {names}); "
            f"make one with `{PROG} export MODEL_DIR --format web -o {folder}`"
        )
    handler = functools.partial(WebExportHandler, directory=str(folder))
    return WebExportServer(port, handler)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Serves until Ctrl-C; the address goes to stdout, for scripts to read."""
    server = web_server(args.folder, args.port)
    with server:
        port = server.server_address[1]
        print(f"serving {args.folder} at http://{HOST}:{port}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()
    return 0
