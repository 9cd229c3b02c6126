"""Live preview in the browser: the frames with their poses drawn, and the dashboard's figures.

A `PreviewServer` binds its address when it is made (so a port in use is an error
before any work) and serves while a pipeline runs, in the pipeline's ``preview``
stage thread: one asyncio event loop running an aiohttp application and the
sampler that feeds it. The pipeline stays unaware of the viewer:

- the emit stage drops a reference to each frame's image, with its record's
  sequence number in the ring, into a `LatestFrame` slot (one assignment under a
  lock; no copy, no encoding, never a wait);
- at most ``max_fps`` times a second, and only while a page is connected, the
  sampler takes the slot's newest frame, reads that very record from the ring
  (`RingBuffer.read`, so the overlay belongs to the image it is drawn on), encodes
  the image as JPEG and pushes it, the poses and a `PipelineStats` snapshot to the
  pages (the messages are `preview_messages`'). Frames that came in between are
  skipped, for the viewer only; a page slower than that gets the newest snapshot
  whenever it is ready for one.

Endpoints: ``/`` the page (``preview.html``, which draws the skeleton on a canvas,
and an experiment's regions and rule states), ``/ws`` a websocket sending first the
skeleton and the experiment's regions, then per update one JSON text message (stats,
and the frame's poses and rule states when a new frame follows) then the JPEG as a
binary message;
``/snapshot.json`` and ``/frame.jpg`` the same on request, for scripts.

When the ring closes (the run ended), the pages get a last update marked
``finished``, with the run's figures; the server waits up to `FINAL_SEND_SECONDS`
for them to take it, then shuts down, giving a send still blocked on a page that
stopped reading as long again before it is cancelled. `PreviewServer.hold` then
serves that last frame and those figures on the same address until the caller
stops it (Ctrl-C on the command line), for a run that ended before anyone looked.
A failure of the preview is logged and ends the preview only; the run goes on.
aiohttp and Pillow are the ``preview`` extra.

Who may look: a request whose ``Host`` is not one of the names the preview is
served on (loopback: ``127.0.0.1``, ``localhost``, ``[::1]``, with the port), or
whose ``Origin`` is another site's, gets 403, so that no web page the user visits
can read the frames (directly, or by DNS rebinding). Bound beyond loopback, any
``Host`` is taken, and a request needs the server's `token` instead, which its
`url` carries (``?token=...``) and the page passes on. At most `MAX_CONNECTIONS`
connections are served at once; one more is closed as soon as it is accepted, so
that idle peers cannot take the descriptors the run's outputs need.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hmac
import importlib.resources
import json
import logging
import math
import secrets
import socket
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sleap_live.engines.types import ModelInfo
from sleap_live.stream.consumers import LatestFrame, PipelineRun
from sleap_live.stream.errors import PreviewError
from sleap_live.stream.experiment.experiment import Experiment
from sleap_live.stream.loopback import MAX_CONNECTIONS, WarnOnce, is_loopback
from sleap_live.stream.preview_messages import (
    Snapshot,
    Snapshots,
    experiment_message,
    skeleton_message,
)
from sleap_live.stream.ring import RingBuffer
from sleap_live.stream.stats import PipelineStats

if TYPE_CHECKING:
    from aiohttp import web

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
# Unassigned by IANA and unlike the usual development-server ports.
DEFAULT_PORT = 8765
# Frames a second sent to the pages: smooth enough to watch, cheap to encode.
DEFAULT_MAX_FPS = 15.0
# Most real seconds the last update may take to reach the pages once the run ended.
FINAL_SEND_SECONDS = 1.0
# How often `hold` looks whether it was told to stop.
HOLD_POLL_SECONDS = 0.1
INSTALL_HINT = 'pip install "sleap-live[preview]"'
PAGE = "preview.html"
# The skeleton drawing the web export's page uses too, inlined into the page where it
# names the file.
SKELETON_SCRIPT = "skeleton.js"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def served_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values a server bound on `host`:`port` answers (see `refusal`)."""
    served = [*LOOPBACK_NAMES, f"[{host}]" if ":" in host else host]
    return frozenset(f"{name}:{port}" for name in served)


def refusal(
    host: str | None, origin: str | None, hosts: frozenset[str], exposed: bool
) -> str | None:
    """Why a request may not be served, None if it may: the rule of the preview and
    `serve-web` against other sites' pages and DNS rebinding.

    Args:
        host: the request's ``Host`` header.
        origin: its ``Origin`` header.
        hosts: the ``Host`` values the server answers (`served_hosts`).
        exposed: the server is bound beyond loopback, where any ``Host`` is taken
            (and something else, the preview's token, must guard it).
    """
    host = host or ""
    if not exposed and host not in hosts:
        return "unknown Host"
    if origin is not None and origin != f"http://{host}":
        return "foreign Origin"
    return None


def exposure_warning(url: str) -> str:
    """The one-line warning printed when the preview is bound beyond loopback."""
    return (
        f"warning: the preview on {url} can be reached from other machines; anyone with "
        "its address (token included) sees the frames, unencrypted"
    )


class PreviewServer:
    """The preview's address, bound now, served while one pipeline runs.

    Attach it to a pipeline (`Pipeline.attach`, a `RingConsumer`): the pipeline
    serves it in a stage thread from `start` until the run ends, and the address is
    then released, unless `hold` is to serve the run's last frame and figures after
    it (``linger=True``). Close it yourself (or use ``with``) if the pipeline never
    starts, and after `hold`.

    Args:
        host: the address to listen on; only this machine can connect to the
            default. ``0.0.0.0`` exposes the preview to the network.
        port: the TCP port; 0 takes any free one (see `port`).
        max_fps: most frames a second sent to each page.
        token: the secret every request must carry (``?token=``); None takes a
            random one when `host` is beyond loopback, and needs none on loopback.
        linger: keep the address bound when the run ends, for `hold`.

    Attributes:
        host, port: the address bound (the port chosen for 0).
        token: the secret requests need, None if none is needed.

    Raises:
        ValueError: `max_fps` is not a positive number, or `port` is not 0 to 65535.
        PreviewError: aiohttp or Pillow is missing, or the address cannot be bound.
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        max_fps: float = DEFAULT_MAX_FPS,
        token: str | None = None,
        linger: bool = False,
    ) -> None:
        if not (max_fps > 0 and math.isfinite(max_fps)):
            raise ValueError(f"max_fps must be a positive number, got {max_fps}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0 to 65535, got {port}")
        self._web = _import_packages()
        self._socket = _bind(host, port)
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        self.exposed = not is_loopback(host)
        if token is None and self.exposed:
            token = secrets.token_urlsafe(16)
        self.token: str | None = token
        self._hosts = served_hosts(host, self.port)
        self._refused = WarnOnce(
            logger,
            "the preview on %s serves %d connections at most; more are closed",
            self.url,
            MAX_CONNECTIONS,
        )
        # Connections being served; only touched in the serving thread.
        self._connections = 0
        self._accept_failed = False
        self._interval = 1.0 / max_fps
        self._served = False
        self._linger = linger
        self._lock = threading.Lock()
        # Set while serving; only touched in the serving thread.
        self._changed: asyncio.Condition | None = None
        self._latest: Snapshot | None = None
        self._pages = 0
        # The first message to each page: the skeleton and the experiment.
        self._hello: dict[str, Any] = {}
        self._snapshots: Snapshots | None = None

    # As a `RingConsumer`: its stage, and it shows frames.
    name = "preview"
    takes_frames = True

    def start(self, run: PipelineRun) -> Callable[[], None]:
        """The body of the pipeline's preview stage: `serve` for `run`."""
        return functools.partial(
            self.serve, run.ring, run.frames, run.stats, run.info, run.experiment
        )

    def report(self, stats: PipelineStats) -> PipelineStats:
        """`stats` as they are: the preview adds no figures."""
        return stats

    @property
    def url(self) -> str:
        """The page's address (with the token it needs)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = "" if self.token is None else f"?token={self.token}"
        return f"http://{host}:{self.port}/{query}"

    def serve(
        self,
        ring: RingBuffer,
        frames: LatestFrame,
        get_stats: Callable[[], PipelineStats],
        info: ModelInfo,
        experiment: Experiment | None = None,
    ) -> None:
        """Serve until `ring` is closed, then release the address (the pipeline's stage).

        `experiment`: the run's, whose regions the pages draw, with the rules' states
        its records carry.

        Raises:
            PreviewError: the server was closed, or served already.
        """
        with self._lock:
            if self._served or self._socket.fileno() < 0:
                raise PreviewError(f"the preview on {self.url} was closed or served already")
            self._served = True
        rules = () if experiment is None else [rule.name for rule in experiment.rules]
        snapshots = Snapshots(ring, frames, get_stats, rules)
        hello = {"skeleton": skeleton_message(info), "experiment": experiment_message(experiment)}
        failed = True
        try:
            asyncio.run(self._serve(snapshots, hello))
            failed = False
        except Exception:
            logger.exception("the preview on %s failed; the run goes on without it", self.url)
        finally:
            if failed or not self._linger:
                self.close()

    @property
    def can_hold(self) -> bool:
        """Whether `hold` has a run to show: one served to its end, address still bound."""
        snapshots = self._snapshots
        return snapshots is not None and snapshots.finished and self._socket.fileno() >= 0

    def hold(self, stop: threading.Event | None = None) -> None:
        """Serve the run's last frame and figures until `stop` is set (or Ctrl-C, a
        KeyboardInterrupt in this thread), then release the address.

        For a server made with ``linger=True`` whose run has ended; pages opened now
        get that last update, marked finished.

        Raises:
            PreviewError: the server has not served a run, or was closed.
        """
        snapshots = self._snapshots
        if snapshots is None or not self.can_hold:
            raise PreviewError(f"the preview on {self.url} has no ended run to show")
        ended = stop if stop is not None else threading.Event()
        try:
            asyncio.run(self._serve(snapshots, self._hello, until=ended))
        finally:
            self.close()

    def close(self) -> None:
        """Release the address; idempotent."""
        self._socket.close()

    def __enter__(self) -> PreviewServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------- serving

    async def _serve(
        self,
        snapshots: Snapshots,
        hello: dict[str, Any],
        until: threading.Event | None = None,
    ) -> None:
        web = self._web
        asyncio.get_running_loop().set_exception_handler(self._loop_error)
        self._changed = asyncio.Condition()
        self._hello = hello
        self._snapshots = snapshots
        self._latest = snapshots.take()
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/snapshot.json", self._snapshot_json)
        app.router.add_get("/frame.jpg", self._frame_jpeg)
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=FINAL_SEND_SECONDS,
            logger=_RequestLog(logger, {}),
        )
        await runner.setup()
        handlers = runner.server
        assert handlers is not None

        def connection() -> asyncio.BaseProtocol:
            if self._connections < MAX_CONNECTIONS:
                self._connections += 1
                return _Counted(handlers(), self._connection_lost)
            return _Refused(self._refused)

        # A copy of the socket, as closing the server closes the socket it is given:
        # the address stays bound for `hold` until `close`.
        listening = await asyncio.get_running_loop().create_server(
            connection, sock=self._socket.dup()
        )
        try:
            await self._sample(snapshots)
            while until is not None and not until.is_set():
                await asyncio.sleep(HOLD_POLL_SECONDS)
        finally:
            listening.close()
            await runner.cleanup()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's errors, with a failing accept (no descriptor left, which asyncio
        logs with its traceback at each attempt) one line, the first time only."""
        error = context.get("exception")
        if not (isinstance(error, OSError) and "accept" in str(context.get("message"))):
            loop.default_exception_handler(context)
            return
        if not self._accept_failed:
            logger.warning(
                "the preview on %s cannot accept connections: %s (said once)",
                self.url,
                error.strerror or error,
            )
        self._accept_failed = True

    def _connection_lost(self) -> None:
        self._connections -= 1

    async def _sample(self, snapshots: Snapshots) -> None:
        """Take a snapshot every interval while a page is connected, until the run ends;
        then give the pages `FINAL_SEND_SECONDS` to get the last one."""
        changed = self._condition()
        while True:
            if self._pages or snapshots.finished:
                snapshot = snapshots.take()
                await self._publish(snapshot)
                if snapshot.finished:
                    break
            await asyncio.sleep(self._interval)
        async with changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    changed.wait_for(lambda: self._pages == 0), FINAL_SEND_SECONDS
                )

    async def _publish(self, snapshot: Snapshot) -> None:
        changed = self._condition()
        async with changed:
            self._latest = snapshot
            changed.notify_all()

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            raise RuntimeError("the preview is not serving")
        return self._changed

    async def _fresh(self) -> Snapshot:
        """A snapshot taken now (for the on-request endpoints)."""
        if self._snapshots is None:
            raise RuntimeError("the preview is not serving")
        snapshot = self._snapshots.take()
        await self._publish(snapshot)
        return snapshot

    # ------------------------------------------------------------------ handlers

    def _forbidden(self, request: web.Request) -> str | None:
        """Why `request` may not be served, None if it may."""
        headers = request.headers
        reason = refusal(headers.get("Host"), headers.get("Origin"), self._hosts, self.exposed)
        if reason is not None:
            return reason
        given = request.query.get("token", "")
        if self.token is not None and not hmac.compare_digest(given, self.token):
            return "no token or a wrong one"
        return None

    def _check(self, request: web.Request) -> None:
        """Refuse `request` (403) unless it may be served."""
        reason = self._forbidden(request)
        if reason is not None:
            raise self._web.HTTPForbidden(text=f"{reason}\n")

    async def _page(self, request: web.Request) -> web.StreamResponse:
        self._check(request)
        page = importlib.resources.files("sleap_live.stream").joinpath(PAGE).read_text("utf-8")
        export_files = importlib.resources.files("sleap_live.engines.export")
        drawing = export_files.joinpath("web_page").joinpath(SKELETON_SCRIPT).read_text("utf-8")
        page = page.replace(f"/* {SKELETON_SCRIPT} */", drawing, 1)
        return self._web.Response(text=page, content_type="text/html")

    async def _snapshot_json(self, request: web.Request) -> web.StreamResponse:
        self._check(request)
        snapshot = await self._fresh()
        body = json.loads(snapshot.message())
        body |= self._hello
        return self._web.json_response(body, headers={"Cache-Control": "no-store"})

    async def _frame_jpeg(self, request: web.Request) -> web.StreamResponse:
        self._check(request)
        snapshot = await self._fresh()
        if snapshot.jpeg is None or snapshot.frame is None:
            raise self._web.HTTPNotFound(text="no frame yet")
        return self._web.Response(
            body=snapshot.jpeg,
            content_type="image/jpeg",
            headers={
                "Cache-Control": "no-store",
                "X-Frame-Index": str(snapshot.frame["frame_index"]),
            },
        )

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        """Send the page each new snapshot until the run ends or the page leaves."""
        self._check(request)
        ws = self._web.WebSocketResponse(compress=False, timeout=FINAL_SEND_SECONDS)
        await ws.prepare(request)
        sending = asyncio.create_task(self._send_updates(ws))
        try:
            # The page sends nothing; reading notices when it leaves, and answers its close.
            async for _ in ws:
                pass
        finally:
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
        return ws

    async def _send_updates(self, ws: web.WebSocketResponse) -> None:
        """Send each new snapshot, skipping those that came while a send was under way;
        close the socket after the run's last one."""
        changed = self._condition()
        async with changed:
            self._pages += 1
        sent_tick, sent_frame = 0, None
        try:
            await ws.send_json(self._hello)
            while True:
                async with changed:
                    await changed.wait_for(functools.partial(self._newer_than, sent_tick))
                    snapshot = self._latest
                if snapshot is None:
                    continue
                frame = snapshot.frame
                new_frame = frame is not None and frame["sequence"] != sent_frame
                await ws.send_str(snapshot.message(with_frame=new_frame))
                if new_frame and frame is not None and snapshot.jpeg is not None:
                    await ws.send_bytes(snapshot.jpeg)
                    sent_frame = frame["sequence"]
                sent_tick = snapshot.tick
                if snapshot.finished:
                    break
        except ConnectionError:
            return  # the page went away
        finally:
            async with changed:
                self._pages -= 1
                changed.notify_all()
        await ws.close()

    def _newer_than(self, tick: int) -> bool:
        return self._latest is not None and self._latest.tick > tick


class _RequestLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log, with each malformed request one warning line.

    aiohttp logs a request it cannot parse with its traceback (anyone who can
    reach the port can send them); the other records pass through as they are.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        from aiohttp.http_exceptions import HttpProcessingError

        error = kwargs.get("exc_info")
        if error is True:
            error = sys.exc_info()[1]
        if not isinstance(error, HttpProcessingError):
            super().log(level, msg, *args, **kwargs)
            return
        said = str(msg) % args if args else str(msg)
        reason = " ".join(str(error).split())[:200]
        self.logger.warning("%s: malformed request (%s)", said, reason)


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, noting when the connection ends.

    (aiohttp counts its connections only once they are set up, after the accept
    loop has taken a whole backlog.)
    """

    def __init__(self, handler: asyncio.Protocol, lost: Callable[[], None]) -> None:
        self._handler = handler
        self._lost = lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()
        self._handler.connection_lost(exc)


class _Refused(asyncio.Protocol):
    """A connection past `MAX_CONNECTIONS`: closed as soon as it is accepted."""

    def __init__(self, note: Callable[[], None]) -> None:
        self._note = note

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._note()
        transport.close()


def _import_packages() -> ModuleType:
    """aiohttp's `web` (Pillow checked too), or a `PreviewError` saying how to install them."""
    try:
        import PIL.Image  # noqa: F401
        from aiohttp import web
    except ImportError as error:
        raise PreviewError(
            f"the preview needs aiohttp and Pillow ({error.name} is missing): {INSTALL_HINT}"
        ) from None
    return web


_BIND_REASONS = {
    errno.EADDRINUSE: "address already in use (is another preview running? --preview-port 0 "
    "takes any free port)",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port`.

    Raises:
        PreviewError: naming the address and the problem.
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except socket.gaierror as error:
        raise PreviewError(f"{host}:{port}: unknown host ({error.strerror})") from None
    except OSError as error:
        reason = _BIND_REASONS.get(error.errno or 0, f"cannot listen: {error.strerror}")
        raise PreviewError(f"{host}:{port}: {reason}") from None
