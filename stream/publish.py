"""Poses to other programs: one ZeroMQ message per pose record, never holding up the pipeline.

A `Publisher` binds a ZeroMQ publish socket (pyzmq) and is attached to a pipeline
as a consumer (`Pipeline.attach`). `PosePublishing` is that consumer's run: in a
thread of its own it reads the ring through a lagging reader, so it never makes
the emit stage wait, and sends each record as a two-part message: the topic
``poses/<source id>`` (subscribers filter on its prefix, ``poses`` for every
source) and one msgpack map (`pose_message`).

What is lost, and who can see it:

- the publisher's thread falling more than a ring behind skips records: counted
  here (`PublishStats.skipped`);
- ZeroMQ drops a subscriber's messages while its queue is full (the send
  high-water mark, `hwm` messages per subscriber), silently, as publish sockets
  do: the sender cannot see it, and a slow subscriber never costs the others
  frames. Each message therefore carries ``sequence``, the record's number in the
  run, so a subscriber counts its own losses from the gaps.

The socket is an XPUB, which subscribers see as a plain publisher; it also tells
this side about subscriptions, which gives `PublishStats.subscribers` and
`Publisher.wait_for_subscribers` (a subscriber's subscription travels to the
publisher after it connects: messages sent before it arrives are not delivered,
ZeroMQ's "slow joiner").

Whatever peers send, the publisher's work and memory stay bounded: ZeroMQ tells
it only of a topic's first subscription and its last unsubscription (not every
message, as with ``XPUB_VERBOSER``: one peer repeating its subscription a million
times is nothing here), an incoming message longer than `MAX_SUBSCRIPTION_BYTES`
disconnects its peer, and at most `SUBSCRIPTION_CHANGES_PER_POLL` changes are
taken per record sent. ZeroMQ has no limit on connections: a TCP publisher's own
thread (`ConnectionLimit`) watches the socket's monitor and shuts down each
connection past `MAX_CONNECTIONS` as soon as ZeroMQ accepts it, whether or not
poses are being sent. ZeroMQ also keeps every distinct topic a peer subscribes, so
the same thread shuts down a connection that has sent more than `MAX_PEER_BYTES`
(the kernel's count of bytes received on it), which frees its topics: the
subscription state is bounded in bytes, not only in count.
An ``ipc://`` socket is readable and writable by its owner only (0600) from the
moment it is bound (`_bind_private`); a TCP endpoint bound beyond loopback gets
`exposure_warning`.

pyzmq and msgpack are the ``publish`` extra, imported when a publisher is made.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs

from sleap_live.engines.types import ModelInfo
from sleap_live.stream.consumers import PipelineRun
from sleap_live.stream.errors import PublishError
from sleap_live.stream.loopback import MAX_CONNECTIONS, WarnOnce, is_loopback
from sleap_live.stream.preview_messages import mask_messages
from sleap_live.stream.ring import RingBuffer
from sleap_live.stream.stats import PipelineStats, PublishStats
from sleap_live.stream.types import PoseRecord

if TYPE_CHECKING:
    import zmq

logger = logging.getLogger(__name__)

# The message layout's version: raised when a key changes meaning or goes away.
MESSAGE_VERSION = 1
TOPIC_PREFIX = "poses"
# Messages queued per subscriber before ZeroMQ drops that subscriber's newest
# ones: about 4 s at 60 fps. Old poses are of little use to a closed loop.
DEFAULT_HWM = 256
# How long closing waits for queued messages to leave (the run's last frames).
LINGER_SECONDS = 0.5
# How often an idle publisher looks at its subscriptions (real seconds).
SUBSCRIPTION_POLL_SECONDS = 0.5
# Subscription changes taken per poll (one poll per record sent): the rest wait for
# the next, so a peer flooding subscriptions never holds up the poses.
SUBSCRIPTION_CHANGES_PER_POLL = 64
# Longest message a subscriber may send (a subscription: one byte and the topic);
# ZeroMQ disconnects a peer sending more.
MAX_SUBSCRIPTION_BYTES = 1024
# Subscription messages ZeroMQ queues per peer before it stops reading that peer.
SUBSCRIPTION_QUEUE = 16
# Bytes one connection may send (its ZMTP greeting and handshake, about 100, then
# its subscriptions, each a topic and a few bytes): a connection past it is shut
# down. Subscribers send a few short topics ("poses/cam0"); ZeroMQ keeps every
# topic a peer subscribes in its trie (about 27 bytes per topic byte, measured), so
# this bounds the subscription state in bytes: at most `MAX_CONNECTIONS` x this of
# topics, whatever peers send. A subscriber with ZMTP heartbeats on also sends its
# pings (about 10 bytes each) and is shut down after some 6,000 of them.
MAX_PEER_BYTES = 64 * 1024
# How often the connection watcher looks at what each connection has sent, and
# whether its publisher was closed (real seconds; closing also wakes it at once).
CONNECTION_WATCH_SECONDS = 0.02
# struct tcp_info (linux/tcp.h): tcpi_bytes_received, a __u64 at this offset
# (Linux 4.1 and later).
_TCP_BYTES_RECEIVED = 128
# Longest Unix socket path, in bytes (Linux's sun_path holds 108 with its NUL).
UNIX_PATH_BYTES = 108
INSTALL_HINT = 'pip install "sleap-live[publish]"'
ENDPOINT_FORMS = "tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or ipc://PATH"

_TCP_PORT = re.compile(r"^tcp://(?P<host>.+):(?P<port>\*|\d+)$")
# ZeroMQ takes an interface's name where an address goes (zmq_tcp(7)): ``lo`` binds
# the loopback interface only.
_LOOPBACK_INTERFACE = "lo"


def check_endpoint(endpoint: str) -> str:
    """`endpoint` if it is a ZeroMQ endpoint another program can connect to.

    ZeroMQ itself would take a TCP port above 65535 modulo 65536, and an inproc://
    endpoint that only this process's own ZeroMQ context could reach.

    Raises:
        ValueError: naming the endpoint and what is wrong with it.
    """
    if endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"):
        return endpoint
    if endpoint.startswith("inproc://"):
        raise ValueError(
            f"{endpoint}: inproc:// is not reachable from another program; give {ENDPOINT_FORMS}"
        )
    match = _TCP_PORT.match(endpoint)
    if match is None:
        raise ValueError(f"{endpoint}: not a ZeroMQ endpoint; give {ENDPOINT_FORMS}")
    port = match["port"]
    if port != "*" and not 1 <= int(port) <= 65535:
        raise ValueError(f"{endpoint}: TCP port {port} is not 1 to 65535 (or * for any free one)")
    return endpoint


def exposure_warning(endpoint: str) -> str | None:
    """A one-line warning when `endpoint` is a TCP endpoint other machines can reach
    (any host but loopback: ``tcp://*:PORT``, ``tcp://0.0.0.0:PORT``, an interface)
    or an abstract ``ipc://@NAME`` every user of this machine can connect to; None
    for loopback and an ``ipc://`` path (its socket is 0600)."""
    if endpoint.startswith("ipc://@"):
        return (
            f"warning: --publish {endpoint} is an abstract socket, which has no permissions: "
            "every user of this machine can receive the poses; ipc://PATH is its owner's only"
        )
    match = _TCP_PORT.match(endpoint)
    if match is None or match["host"] == _LOOPBACK_INTERFACE or is_loopback(match["host"]):
        return None
    return (
        f"warning: --publish {endpoint} sends every pose, unencrypted and to anyone, to every "
        "machine that can reach this one; tcp://127.0.0.1:PORT keeps it on this machine"
    )


class Publisher:
    """A bound ZeroMQ publish socket that sends pose messages without ever waiting.

    Attach it to a pipeline (`Pipeline.attach`, a `RingConsumer`) to publish every
    pose record of the run; `stats.publish` then says what it sent. It stays the
    caller's to close.

    A ZeroMQ socket must not be used by two threads at once; a lock serialises the
    calls here, so closing it while the pipeline's publish thread sends is safe
    (that thread's next `send` then fails and stops the pipeline: close a
    publisher of your own after the pipeline has stopped).

    Args:
        endpoint: where to bind, `ENDPOINT_FORMS`; ``tcp://127.0.0.1:*`` takes a free port.
        hwm: messages queued per subscriber before ZeroMQ drops its newest ones.

    Attributes:
        endpoint: the endpoint bound (with the port chosen for ``*``).
        sent: messages handed to ZeroMQ.

    Raises:
        ValueError: `endpoint` is malformed (see `check_endpoint`), or `hwm` below 1.
        PublishError: pyzmq or msgpack is missing, or the endpoint cannot be bound
            (address in use, no such interface or folder).
    """

    def __init__(self, endpoint: str, *, hwm: int = DEFAULT_HWM) -> None:
        check_endpoint(endpoint)
        if hwm < 1:
            raise ValueError(f"hwm must be at least 1, got {hwm}")
        self._zmq, self._packb = _import_packages()
        lib = self._zmq
        self._context = lib.Context()
        # Sockets of this context that set no linger of their own (the monitor's) drop
        # what is queued when closed: a context let go of without `close` then ends in
        # its finaliser instead of blocking the thread that collected it for ever.
        self._context.setsockopt(lib.LINGER, 0)
        self._socket: zmq.Socket[bytes] = self._context.socket(lib.XPUB)
        try:
            self._socket.setsockopt(lib.SNDHWM, hwm)
            self._socket.setsockopt(lib.LINGER, int(LINGER_SECONDS * 1000))
            # Not verbose: ZeroMQ passes on only a topic's first subscription and its
            # last unsubscription, so a peer repeating them costs this side nothing.
            self._socket.setsockopt(lib.MAXMSGSIZE, MAX_SUBSCRIPTION_BYTES)
            # Few subscription messages queued per peer: a flooding peer then waits on
            # TCP's flow control instead of costing this process the CPU to decode it.
            self._socket.setsockopt(lib.RCVHWM, SUBSCRIPTION_QUEUE)
            # The socket file bound (its device and inode), removed on close.
            self._ipc_file: tuple[int, int] | None = None
            if endpoint.startswith("ipc://"):
                self._ipc_file = _bind_private(self._socket, endpoint[len("ipc://") :])
            else:
                self._socket.bind(endpoint)
        except (lib.ZMQError, OSError) as error:
            self._socket.close(linger=0)
            self._context.term()
            reason = _BIND_REASONS.get(error.errno or 0, f"cannot bind: {error.strerror}")
            raise PublishError(reason, endpoint=endpoint) from None
        self.endpoint: str = (
            endpoint
            if self._ipc_file is not None
            else self._socket.getsockopt_string(lib.LAST_ENDPOINT)
        )
        self.sent = 0
        self._subscriptions = 0
        self._connection_limit: ConnectionLimit | None = None
        if self.endpoint.startswith("tcp://"):
            events = (
                lib.EVENT_ACCEPTED
                | lib.EVENT_DISCONNECTED
                | lib.EVENT_CLOSED
                | lib.EVENT_MONITOR_STOPPED
            )
            self._connection_limit = ConnectionLimit(
                self._socket.get_monitor_socket(events), self.endpoint
            )
            # A publisher let go of without `close` stops its watcher too.
            weakref.finalize(self, self._connection_limit.stop)
        self._closed = False
        self._lock = threading.Lock()
        self._publishing: PosePublishing | None = None

    # As a `RingConsumer`: its stage, and it sends poses only.
    name = "publish"
    takes_frames = False

    def start(self, run: PipelineRun) -> Callable[[], None]:
        """Begin publishing `run`'s records (from its first); returns the stage's body."""
        self._publishing = PosePublishing(self, run.ring, run.info)
        return self._publishing.run

    def report(self, stats: PipelineStats) -> PipelineStats:
        """`stats` with what this publisher sent in the run it was last attached to."""
        if self._publishing is None:
            return stats
        return attrs.evolve(stats, publish=self._publishing.stats())

    @property
    def subscribers(self) -> int:
        """Topics subscribed to and not withdrawn (subscribers to the same topic count
        once: ZeroMQ tells a publisher only of a topic's first and last)."""
        return self._subscriptions

    def send(self, record: PoseRecord, sequence: int, info: ModelInfo) -> None:
        """Send one record as ``[topic, msgpack map]`` (see `pose_message`); never waits."""
        self.send_map(f"{TOPIC_PREFIX}/{record.source_id}", pose_message(record, sequence, info))
        self.sent += 1  # only the publishing stage sends records

    def send_map(self, topic: str, message: dict[str, Any]) -> None:
        """Send ``[topic, msgpack map]`` of your own (an experiment's transitions, on
        ``experiment/<rule>``); never waits."""
        payload = self._packb(message)
        with self._lock:
            if self._closed:
                raise PublishError("the publisher was closed", endpoint=self.endpoint)
            # A publish socket never blocks: at the high-water mark ZeroMQ drops instead.
            self._socket.send_multipart((topic.encode(), payload), flags=self._zmq.NOBLOCK)

    def poll_subscriptions(self, timeout: float = 0.0) -> int:
        """Take the subscription changes that arrived (at most
        `SUBSCRIPTION_CHANGES_PER_POLL`), waiting up to `timeout` (real seconds) for
        the first; returns `subscribers`."""
        waited = timeout
        with self._lock:
            for _ in range(SUBSCRIPTION_CHANGES_PER_POLL):
                if self._closed or not self._socket.poll(int(waited * 1000), self._zmq.POLLIN):
                    break
                change = self._socket.recv(self._zmq.NOBLOCK)
                # 1 then the topic: subscribe; 0 then the topic: unsubscribe.
                if change[:1] == b"\x01":
                    self._subscriptions += 1
                elif change[:1] == b"\x00":
                    self._subscriptions = max(0, self._subscriptions - 1)
                waited = 0.0
        return self._subscriptions

    def wait_for_subscribers(self, count: int = 1, timeout: float | None = None) -> bool:
        """Wait until `count` subscriptions have reached the publisher, so that the
        messages sent from then on are delivered to them: call it before the pipeline
        starts, so that its first frames reach them.

        Args:
            count: topics subscribed to, to wait for.
            timeout: most real seconds to wait; None waits as long as needed.

        Returns:
            True once there are `count`, False if `timeout` passed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            wait = 0.1 if remaining is None else max(0.0, min(remaining, 0.1))
            if self.poll_subscriptions(wait) >= count:
                return True
            if remaining is not None and remaining <= 0:
                return False

    def close(self) -> None:
        """Let queued messages leave (for at most `LINGER_SECONDS`) and unbind; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._connection_limit is not None:
                self._connection_limit.stop()
                self._socket.disable_monitor()
                self._connection_limit.join()
            self._socket.close()
        self._context.term()
        if self._ipc_file is not None:
            _remove_socket_file(self.endpoint[len("ipc://") :], self._ipc_file)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def pose_message(record: PoseRecord, sequence: int, info: ModelInfo) -> dict[str, Any]:
    """The map one pose record is published as (its layout is in docs/outputs.md);
    `sequence` is the record's number among the run's records, from 0."""
    poses = record.poses
    boxes = poses.boxes
    detector = info.model_type == "bbox"
    message = {
        "version": MESSAGE_VERSION,
        "sequence": sequence,
        "source_id": record.source_id,
        "frame_index": record.frame_index,
        "capture_time": record.capture_time,
        "ready_time": record.ready_time,
        "node_names": list(info.skeleton.node_names),
        # A box detector's class names are its box categories, not identities.
        "track_names": [] if detector else list(info.class_names),
        "points": poses.points.tolist(),
        "point_scores": poses.point_scores.tolist(),
        "instance_scores": poses.instance_scores.tolist(),
        "track_ids": poses.identities.tolist(),
    }
    if boxes is not None:
        message |= {
            "boxes": boxes.boxes.tolist(),
            "box_scores": boxes.scores.tolist(),
            "box_categories": boxes.categories.tolist(),
            "category_names": list(info.detector_categories),
        }
    if poses.masks is not None:
        message["masks"] = mask_messages(poses.masks)
    return message


class PosePublishing:
    """The pipeline's publishing consumer: a lagging ring reader feeding a `Publisher`.

    Create it before the first record is written, so that it starts at the first;
    run `run` in a thread of its own.
    """

    def __init__(self, publisher: Publisher, ring: RingBuffer, info: ModelInfo) -> None:
        self._publisher = publisher
        self._reader = ring.reader()
        self._info = info

    def run(self) -> None:
        """Publish every record until the ring is closed and drained."""
        reader = self._reader
        while True:
            record = reader.wait_next(SUBSCRIPTION_POLL_SECONDS)
            if record is not None:
                self._publisher.send(record, reader.position - 1, self._info)
            elif reader.done:
                return
            # After the send, so that it never delays a message.
            self._publisher.poll_subscriptions()

    def stats(self) -> PublishStats:
        return PublishStats(
            endpoint=self._publisher.endpoint,
            sent=self._publisher.sent,
            skipped=self._reader.missed,
            subscribers=self._publisher.subscribers,
        )


class ConnectionLimit:
    """A TCP publisher's thread that keeps its connections to `MAX_CONNECTIONS`, each
    to `MAX_PEER_BYTES` sent.

    ZeroMQ accepts every connection itself and has no limit; its socket monitor
    reports each accepted and closed one (with its descriptor). This thread, named
    ``sleap-live publisher connections``, waits on that monitor and shuts down each
    connection accepted past the limit at once (logged once), so idle peers never
    hold descriptors the run needs, even before the first pose is sent; every
    `CONNECTION_WATCH_SECONDS` it shuts down each kept connection that has sent more
    than `MAX_PEER_BYTES` (logged once). It owns the
    monitor socket (a ZeroMQ socket is used by one thread at a time) and ends when
    the monitor stops (`Publisher.close` disables it) or `stop` is called.

    Args:
        monitor: the publish socket's monitor (accepted, disconnected, closed and
            monitor-stopped events).
        endpoint: the TCP endpoint bound, with its port.
    """

    def __init__(self, monitor: zmq.Socket[bytes], endpoint: str) -> None:
        self._monitor = monitor
        self._port = int(endpoint.rsplit(":", 1)[-1])
        self._stopping = threading.Event()
        # The descriptors of the connections kept (only this thread uses it).
        self._connections: set[int] = set()
        self.refused = WarnOnce(
            logger,
            "the publisher on %s keeps %d connections at most; more are shut down",
            endpoint,
            MAX_CONNECTIONS,
        )
        # Connections shut down for sending more than `MAX_PEER_BYTES`.
        self.cut = WarnOnce(
            logger,
            "the publisher on %s shuts down connections that send more than %d bytes of "
            "subscriptions",
            endpoint,
            MAX_PEER_BYTES,
        )
        self._thread = threading.Thread(
            target=self._run, name="sleap-live publisher connections", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (at its next look, within `CONNECTION_WATCH_SECONDS`)."""
        self._stopping.set()

    def join(self) -> None:
        """Wait for the thread to end (after `stop`, or the monitor stopping)."""
        self._thread.join()

    def _run(self) -> None:
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        timeout_ms = int(CONNECTION_WATCH_SECONDS * 1000)
        try:
            while not self._stopping.is_set():
                self._check_bytes()
                if not self._monitor.poll(timeout_ms, zmq.POLLIN):
                    continue
                event = recv_monitor_message(self._monitor)
                assert isinstance(event, dict)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    return
                self._take(event["event"] == zmq.EVENT_ACCEPTED, int(event["value"]))
        except zmq.ZMQError:
            return  # the context ended under it: nothing left to watch
        finally:
            self._monitor.close(linger=0)

    def _check_bytes(self) -> None:
        """Shut down each kept connection that has sent more than `MAX_PEER_BYTES`."""
        for fd in list(self._connections):
            received = _bytes_received(fd, self._port)
            if received is None or received <= MAX_PEER_BYTES:
                continue
            self._connections.discard(fd)
            _shut_down(fd, self._port)
            self.cut()

    def _take(self, accepted: bool, fd: int) -> None:
        """Keep or shut down a connection ZeroMQ accepted; forget one that closed."""
        if not accepted:
            self._connections.discard(fd)
        elif len(self._connections) < MAX_CONNECTIONS:
            self._connections.add(fd)
        else:
            _shut_down(fd, self._port)
            self.refused()


def _bytes_received(fd: int, port: int) -> int | None:
    """Bytes the TCP connection on ZeroMQ's descriptor `fd` has received, or None if
    `fd` is no longer a connection to `port` or the kernel does not say."""
    try:
        copy = os.dup(fd)
    except OSError:
        return None
    try:
        connection = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return None
    with connection:
        try:
            if connection.type != socket.SOCK_STREAM or connection.getsockname()[1] != port:
                return None
            info = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        except (OSError, AttributeError):  # no TCP_INFO off Linux
            return None
    if len(info) < _TCP_BYTES_RECEIVED + 8:
        return None
    return int.from_bytes(info[_TCP_BYTES_RECEIVED : _TCP_BYTES_RECEIVED + 8], sys.byteorder)


def _shut_down(fd: int, port: int) -> None:
    """End the TCP connection on ZeroMQ's descriptor `fd` (ZeroMQ then closes it
    itself, as when a peer leaves), if `fd` still is a connection to `port`: one
    closed meanwhile, its number reused, is left alone."""
    try:
        copy = os.dup(fd)
    except OSError:
        return  # closed meanwhile, or no descriptor left to look with
    try:
        connection = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return
    with connection:
        try:
            if connection.type == socket.SOCK_STREAM and connection.getsockname()[1] == port:
                connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _bind_private(xpub: zmq.Socket[bytes], path: str) -> tuple[int, int] | None:
    """Bind `xpub` to the Unix socket `path` without it ever being connectable by
    anyone but its owner; the socket file's (device, inode), or None for ZeroMQ's
    own ``ipc://*`` (made inside a fresh 0700 folder of its own) and an abstract
    ``ipc://@NAME``.

    ZeroMQ creates the file as the umask allows (0755 with the usual 022), and
    would replace whatever `path` is. Here the socket is bound inside a fresh 0700
    folder beside `path` (which others cannot reach into), made 0600 there, and
    renamed onto `path`, which may only be a socket already (one left by an earlier
    run). The umask is left alone: it is the whole process's, and other threads
    create files meanwhile.

    Raises:
        OSError: `path` is not a socket, too long, or its folder is missing or not
            writable (errno says which).
        zmq.ZMQError: ZeroMQ cannot bind.
    """
    if path.startswith("@"):
        # Linux's abstract namespace: no file, no permissions (`exposure_warning`).
        xpub.bind(f"ipc://{path}")
        return None
    if path == "*":
        import zmq

        xpub.bind("ipc://*")
        os.chmod(xpub.getsockopt_string(zmq.LAST_ENDPOINT)[len("ipc://") :], 0o600)
        return None
    if len(os.fsencode(path)) >= UNIX_PATH_BYTES:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(existing.st_mode):
            raise OSError(errno.EEXIST, "exists and is not a socket", path)
    private = tempfile.mkdtemp(prefix=".sl", dir=os.path.dirname(path) or ".")
    try:
        inside = os.path.join(private, "s")
        xpub.bind(f"ipc://{inside}")
        os.chmod(inside, 0o600)
        os.rename(inside, path)
    finally:
        # Empty once renamed (ZeroMQ's own unlink of `inside` on close then finds
        # nothing); left with the socket in it where renaming failed.
        shutil.rmtree(private, ignore_errors=True)
    bound = os.lstat(path)
    return bound.st_dev, bound.st_ino


def _remove_socket_file(path: str, file: tuple[int, int]) -> None:
    """Remove the socket file at `path` if it still is the one bound (`file`)."""
    try:
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) == file:
            os.unlink(path)
    except OSError:
        pass  # gone already, or replaced by someone else's


def _import_packages() -> tuple[ModuleType, Callable[[object], bytes]]:
    """pyzmq and msgpack's `packb`, or a `PublishError` that says how to install them."""
    try:
        import msgpack
        import zmq
    except ImportError as error:
        raise PublishError(
            f"publishing poses needs pyzmq and msgpack ({error.name} is missing): {INSTALL_HINT}"
        ) from None
    return zmq, msgpack.Packer(use_bin_type=True).pack


_BIND_REASONS = {
    errno.EADDRINUSE: "address already in use (is another program publishing there?)",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address",
    errno.ENODEV: "no interface of this machine has that name or address",
    errno.EINVAL: "not an address or interface name ZeroMQ can bind",
    errno.ENOENT: "its folder does not exist",
    errno.ENAMETOOLONG: "the path is too long for a Unix socket",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied (a socket of another user's is there)",
    errno.EEXIST: "a file that is not a socket is there (it is left alone)",
}
