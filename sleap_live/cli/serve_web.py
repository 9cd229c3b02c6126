"""`sleap-live serve-web DIR`: serve a web export (`export --format web`) on 127.0.0.1.

A browser will not run a page's wasm and ES modules from `file://`, so the export's
folder needs a web server; this is a static one, on the loopback address only (the
webcam needs a secure context, which http://127.0.0.1 is). It sends the headers that
make the page cross-origin isolated, so onnxruntime-web's wasm may use threads, and
the MIME types wasm and ES modules must have. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from sleap_live.cli.options import PROG, UsageError

SUMMARY = "serve a web export (export --format web) on 127.0.0.1, to open in a browser"
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
    serve = commands.add_parser(
        "serve-web",
        help=SUMMARY,
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
    serve.set_defaults(handler=handle)


class WebExportHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with the isolation headers and the MIME types the page needs."""

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


def web_server(folder: Path, port: int = DEFAULT_PORT) -> http.server.ThreadingHTTPServer:
    """A server of `folder` on 127.0.0.1:`port` (not yet serving; call serve_forever).

    Raises:
        UsageError: `folder` is not a web export.
    """
    from sleap_live.engines.export.web import WEB_EXPORT_FILES, is_web_export

    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder")
    if not is_web_export(folder):
        names = f"{', '.join(WEB_EXPORT_FILES[:-1])} and {WEB_EXPORT_FILES[-1]}"
        raise UsageError(
            f"{folder}: not a web export (no {names}); "
            f"make one with `{PROG} export MODEL_DIR --format web -o {folder}`"
        )
    handler = functools.partial(WebExportHandler, directory=str(folder))
    return http.server.ThreadingHTTPServer((HOST, port), handler)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Serves until Ctrl-C; the address goes to stdout, for scripts to read."""
    server = web_server(args.folder, args.port)
    with server:
        port = server.server_address[1]
        print(f"serving {args.folder} at http://{HOST}:{port}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()
    return 0
