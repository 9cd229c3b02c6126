"""A headless chromium driven over the DevTools protocol (aiohttp's websocket client),
for the tests of the pages sleap-live serves: the preview and the web export."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Real seconds the browser may take to start or to show something: a hang guard only.
PATIENCE = 60.0


class Browser:
    """A headless chromium and its one page, driven over the DevTools protocol."""

    def __init__(self, profile: Path, flags: Sequence[str] = ("--disable-gpu",)) -> None:
        assert CHROMIUM is not None
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",  # tests may run as root
                *flags,
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--window-size=900,700",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Chromium writes the port it took, then the browser's path, to this file.
        active = profile / "DevToolsActivePort"
        self.wait(lambda: active.exists() and len(active.read_text().split()) == 2, "chromium")
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        self.page = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command on the page; its result."""
        return asyncio.run(self._call(method, params))

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        async with aiohttp.ClientSession() as session, session.ws_connect(self.page) as ws:
            return await self._send(ws, 1, method, params)

    def choose_file(self, element: str, path: Path) -> None:
        """Puts `path` in the page's file input `element`, as a user choosing it would."""
        asyncio.run(self._choose_file(element, path))

    async def _choose_file(self, element: str, path: Path) -> None:
        import aiohttp

        # Object ids live as long as the DevTools session: both calls on one connection.
        async with aiohttp.ClientSession() as session, session.ws_connect(self.page) as ws:
            expression = f"document.getElementById({element!r})"
            found = await self._send(ws, 1, "Runtime.evaluate", {"expression": expression})
            params = {"objectId": found["result"]["objectId"], "files": [str(path)]}
            await self._send(ws, 2, "DOM.setFileInputFiles", params)

    @staticmethod
    async def _send(ws: Any, number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await ws.send_json({"id": number, "method": method, "params": params})
        async for message in ws:
            reply = json.loads(message.data)
            if reply.get("id") == number:  # anything else is an event
                assert "error" not in reply, reply
                return dict(reply["result"])
        raise AssertionError(f"chromium closed the connection during {method}")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def awaited(self, expression: str) -> Any:
        """The value of a promise-valued expression; a rejection fails with its message."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        details = result.get("exceptionDetails")
        assert details is None, details.get("exception", {}).get("description", details)
        return result["result"].get("value")

    def text(self, element: str) -> str:
        return str(self.evaluate(f"document.getElementById({element!r}).textContent"))

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def canvas_pixel(self, x: int, y: int) -> tuple[int, int, int]:
        rgba = self.evaluate(
            f"Array.from(document.getElementById('view').getContext('2d')"
            f".getImageData({x}, {y}, 1, 1).data)"
        )
        return tuple(rgba[:3])

    def wait(self, condition: Any, what: str) -> None:
        give_up = time.monotonic() + PATIENCE
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"chromium exited ({self.process.returncode}) before {what}")
            if time.monotonic() > give_up:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(PATIENCE)
