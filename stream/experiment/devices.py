"""Where a rule's onsets and offsets go: small plug-ins, each in a thread of its own.

A `DeviceLink` opens, sends one `OutputMessage` and closes: a serial port (pyserial,
an Arduino or Teensy switching a TTL line), OSC over UDP (python-osc, read by
Bonsai's Osc package), the ZeroMQ publisher's socket (`Publisher`), a Python
callback, or a simulated device that only notes the time (a rehearsal on a
recorded video).

A `DeviceWorker` owns one link: the deciding thread (the pipeline's emit stage)
hands it messages through a bounded channel that never waits (the oldest waiting
message is dropped when the device falls behind, and counted), so a slow or stalled
device never delays the decisions or the poses. A link that fails to open or
to send is reported once (a warning naming the device and the error, and
`DeviceStats.error`); its later messages are dropped and counted, and the run goes
on. The time each message's bytes were handed to the operating system is reported
to `on_sent`, for the event log.

A link that can write without waiting (`try_send`: a serial port, its descriptor
non-blocking; OSC's UDP socket; the ZeroMQ publisher, which never waits) is written
to from the deciding thread itself when its device is idle (nothing queued or
being sent): the bytes leave within microseconds of the decision, without waking the
device's thread, and a write that would wait goes to the device's thread as any
other message.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import ChannelClosed
from sleap_live.stream.experiment.experiment import (
    CallbackDevice,
    Device,
    GpioDevice,
    NidaqDevice,
    OscDevice,
    SerialDevice,
    ZmqDevice,
)

logger = logging.getLogger(__name__)

# Messages waiting for one device before the oldest is dropped: a device this far
# behind is stalled, and old onsets are worth less than the newest state.
QUEUE = 64
# Real seconds closing waits for a device's thread to send what is queued.
CLOSE_TIMEOUT = 2.0
INSTALL_HINTS = {
    "serial": 'pip install "sleap-live[closed-loop]" (pyserial)',
    "osc": 'pip install "sleap-live[closed-loop]" (python-osc)',
    "gpio": 'pip install "sleap-live[closed-loop]" (gpiozero; on a Raspberry Pi)',
    "nidaq": "pip install nidaqmx, and NI-DAQmx's driver (python -m nidaqmx installdriver)",
}


@attrs.frozen
class Decision:
    """One onset or offset of a rule, with its times (what its device messages and
    its event log entry share).

    Attributes:
        rule: the rule's name.
        kind: ``"onset"`` or ``"offset"``.
        frame_index: the frame it was decided on.
        trial: its trial (None without trials).
        capture_time: that frame's capture time (the pipeline's clock).
        ready_time: when its poses left the engine (the pipeline's clock).
        decision_time: when the rule decided (the pipeline's clock).
    """

    rule: str
    kind: str
    frame_index: int
    trial: int | None
    capture_time: float
    ready_time: float
    decision_time: float

    @property
    def state(self) -> int:
        """1 at an onset, 0 at an offset."""
        return 1 if self.kind == "onset" else 0


@attrs.frozen
class OutputMessage(Decision):
    """One onset or offset of a rule, for one device (a `Decision`, and):

    Attributes:
        payload: the serial text or OSC address (`Output`); None: the default.
        event: the event log's number of this transition.
    """

    payload: str | None
    event: int


class DeviceLink(Protocol):
    """A device's connection: opened, sent to and closed in the device's own thread.

    A link that can also write without waiting, from any thread, has a method
    ``try_send(message) -> bool``: it writes as much of the message as the device
    takes now, never waiting; True when all of it was written. False: give the
    message to `send`, which writes what is left of it.
    """

    def open(self) -> None:
        """Connect. Raises OSError (or any exception) when the device is unreachable."""
        ...

    def send(self, message: OutputMessage) -> None:
        """Hand the message to the device; returns once its bytes are written."""
        ...

    def close(self) -> None:
        """Disconnect; idempotent."""
        ...


class SerialLink:
    """Text lines to a serial port (pyserial's `serial_for_url`, so ``loop://`` works).

    On a POSIX port (pyserial opens its descriptor non-blocking) `try_send` writes
    with one ``os.write``; pyserial's own `write` follows each write with a
    ``select`` for its write timeout."""

    def __init__(self, device: SerialDevice) -> None:
        self._device = device
        self._port: Any = None
        self._fd: int | None = None
        # What a partial `try_send` left of its message, for `send` to finish.
        self._rest = b""

    def open(self) -> None:
        serial = _import("serial", "serial")
        self._port = serial.serial_for_url(
            self._device.port,
            baudrate=self._device.baudrate,
            write_timeout=self._device.write_timeout,
        )
        # serialposix.Serial.fileno; other backends (loop://, Windows) have none.
        fileno = getattr(self._port, "fileno", None)
        fd = fileno() if fileno is not None else None
        self._fd = fd if fd is not None and not os.get_blocking(fd) else None

    def try_send(self, message: OutputMessage) -> bool:
        if self._fd is None:
            return False
        data = _line(message)
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            return False
        self._rest = data[written:]
        return not self._rest

    def send(self, message: OutputMessage) -> None:
        data, self._rest = (self._rest or _line(message)), b""
        written = self._port.write(data)
        if written != len(data):
            raise OSError(f"wrote {written} of {len(data)} bytes")

    def close(self) -> None:
        if self._port is not None:
            self._port.close()


class OscLink:
    """An OSC message per transition over UDP: the address (default ``/<rule>``) with
    the arguments state (1 or 0) and frame index.

    Each (address, state)'s bytes up to the frame index are encoded once (python-osc's
    builder), so a send is one concatenation and one ``sendto`` on a non-blocking
    socket (a datagram goes whole or not at all: a full send buffer is the one "not
    now"), to the address resolved when opened."""

    def __init__(self, device: OscDevice) -> None:
        self._device = device
        self._socket: socket.socket | None = None
        self._address: Any = None
        self._builder: Any = None
        self._heads: dict[tuple[str, int], bytes] = {}

    def open(self) -> None:
        self._builder = _import("pythonosc.osc_message_builder", "osc").OscMessageBuilder
        family, kind, _, _, self._address = socket.getaddrinfo(
            self._device.host, self._device.port, type=socket.SOCK_DGRAM
        )[0]
        self._socket = socket.socket(family, kind)
        self._socket.setblocking(False)

    def try_send(self, message: OutputMessage) -> bool:
        try:
            self.send(message)
        except BlockingIOError:
            return False
        return True

    def send(self, message: OutputMessage) -> None:
        assert self._socket is not None
        self._socket.sendto(self._datagram(message), self._address)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()

    def _datagram(self, message: OutputMessage) -> bytes:
        address = message.payload or f"/{message.rule}"
        state, frame = message.state, message.frame_index
        head = self._heads.get((address, state))
        int32 = frame.bit_length() <= 31  # python-osc's test (a larger one goes as an int64)
        if head is None or not int32:
            builder = self._builder(address)
            builder.add_arg(state)
            builder.add_arg(frame)
            datagram: bytes = builder.build().dgram
            if int32:  # all but the frame index, a big-endian int32, kept
                self._heads[address, state] = datagram[:-4]
            return datagram
        return head + frame.to_bytes(4, "big", signed=True)


class GpioLink:
    """A GPIO pin (gpiozero): high while the rule is on. gpiozero picks the pin library
    (or ``GPIOZERO_PIN_FACTORY=mock``, its stand-in for tests and rehearsals)."""

    def __init__(self, device: GpioDevice) -> None:
        self._device = device
        self._output: Any = None

    def open(self) -> None:
        gpiozero = _import("gpiozero", "gpio")
        self._output = gpiozero.DigitalOutputDevice(
            self._device.pin, active_high=self._device.active_high, initial_value=False
        )

    def send(self, message: OutputMessage) -> None:
        if message.state:
            self._output.on()
        else:
            self._output.off()

    def close(self) -> None:
        if self._output is not None:
            self._output.close()


class NidaqLink:
    """NI-DAQmx digital output lines (nidaqmx 1.x: a `Task` with one channel per line,
    `task.write(state)` for all of them)."""

    def __init__(self, device: NidaqDevice) -> None:
        self._device = device
        self._task: Any = None
        self._lines = 0

    def open(self) -> None:
        nidaqmx = _import("nidaqmx", "nidaq")
        constants = _import("nidaqmx.constants", "nidaq")
        task = nidaqmx.Task()
        try:
            channel = task.do_channels.add_do_chan(
                self._device.lines, line_grouping=constants.LineGrouping.CHAN_PER_LINE
            )
            self._lines = len(channel.channel_names) if channel.channel_names else 1
            task.write([False] * self._lines if self._lines > 1 else False, auto_start=True)
        except Exception:
            task.close()
            raise
        self._task = task

    def send(self, message: OutputMessage) -> None:
        state = bool(message.state)
        self._task.write([state] * self._lines if self._lines > 1 else state, auto_start=True)

    def close(self) -> None:
        if self._task is not None:
            self._task.close()


class ZmqLink:
    """The pose publisher's ZeroMQ socket (`Publisher`), bound at `ZmqDevice.endpoint`:
    each transition a message on the topic ``experiment/<rule>`` (`event_message`)."""

    def __init__(self, device: ZmqDevice) -> None:
        self._device = device
        self._publisher: Any = None
        self._again: type[Exception] = Exception

    def open(self) -> None:
        import zmq  # the publisher's own dependency

        from sleap_live.stream.publish import Publisher

        self._publisher = Publisher(self._device.endpoint)
        self._again = zmq.Again

    def try_send(self, message: OutputMessage) -> bool:
        # `send_map` never waits (NOBLOCK, under the publisher's lock); a full queue
        # raises zmq.Again, which the device's thread's `send` meets again and reports.
        try:
            self.send(message)
        except self._again:
            return False
        return True

    def send(self, message: OutputMessage) -> None:
        self._publisher.send_map(f"experiment/{message.rule}", event_message(message))

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()


class CallbackLink:
    """A Python function called with each message (in the device's thread)."""

    def __init__(self, function: Callable[[OutputMessage], object]) -> None:
        self._function = function

    def open(self) -> None:
        pass

    def send(self, message: OutputMessage) -> None:
        self._function(message)

    def close(self) -> None:
        pass


class SimulatedLink(CallbackLink):
    """A device that is not there: each message is noted as sent when it is taken (a
    rehearsal on a recorded video)."""

    def __init__(self) -> None:
        self.messages: list[OutputMessage] = []
        super().__init__(self.messages.append)


def _line(message: OutputMessage) -> bytes:
    """A serial message's bytes: its payload, or ``"<rule> <state>\\n"``."""
    text = message.payload
    return (text if text is not None else f"{message.rule} {message.state}\n").encode()


def event_message(message: OutputMessage) -> dict[str, Any]:
    """The map a ZeroMQ transition message holds: its fields by name."""
    return {field: getattr(message, field) for field in _MESSAGE_FIELDS}


def link_for(device: Device) -> DeviceLink:
    """The link that drives `device`."""
    if isinstance(device, SerialDevice):
        return SerialLink(device)
    if isinstance(device, OscDevice):
        return OscLink(device)
    if isinstance(device, GpioDevice):
        return GpioLink(device)
    if isinstance(device, NidaqDevice):
        return NidaqLink(device)
    if isinstance(device, ZmqDevice):
        return ZmqLink(device)
    assert isinstance(device, CallbackDevice)
    return CallbackLink(device.function)


# `event_message`'s keys (attrs.asdict walks each value for nested records, slowly).
_MESSAGE_FIELDS = tuple(field.name for field in attrs.fields(OutputMessage))


@attrs.frozen
class DeviceStats:
    """What one device did.

    Attributes:
        name: the device's name in the experiment.
        sent: messages sent.
        dropped: messages never sent: dropped while it fell behind, or after it failed.
        error: the failure reported (once), or None.
    """

    name: str
    sent: int
    dropped: int
    error: str | None


class DeviceWorker:
    """One device's thread and its bounded queue.

    Args:
        name: the device's name (in warnings and stats).
        on_sent: called in the device's thread with each message and the time its
            bytes were written (None: not sent) and the error, if any.
        clock: what the sent times are read on (the pipeline's clock).
    """

    def __init__(
        self,
        name: str,
        link: DeviceLink,
        on_sent: Callable[[OutputMessage, float | None, str | None], None],
        clock: Clock = MONOTONIC,
    ) -> None:
        self.name = name
        self._link = link
        self._on_sent = on_sent
        self._clock = clock
        self._queue: Channel[OutputMessage] = Channel(QUEUE, "drop_oldest", on_drop=self._settled)
        self._try_send: Callable[[OutputMessage], bool] | None = getattr(link, "try_send", None)
        self._error: str | None = None
        self._sent = 0
        self._lost = 0
        # Messages submitted and not yet sent or dropped; only `submit` (the
        # deciding thread) adds to it, so that thread never sees 0 too early.
        self._pending = 0
        self._opened = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"sleap-live experiment device {name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def send_now(self, message: OutputMessage) -> float | None:
        """Write the message in the calling thread if that cannot wait: the link can
        (`try_send`), it is open and has not failed, and nothing of this device is
        queued or being sent (which keeps the messages in order). Never waits.

        Returns:
            The time its bytes were written; None: `submit` it (a write that failed
            is reported once, and the submitted message dropped).
        """
        if self._try_send is None or not self._opened or self._pending or self._error:
            return None
        try:
            if not self._try_send(message):
                return None
        except Exception as error:
            self._fail(f"failed: {_describe(error)}")
            return None
        sent = self._clock()
        with self._lock:
            self._sent += 1
        return sent

    def submit(self, message: OutputMessage) -> None:
        """Queue a message for the device's thread; never waits."""
        with self._lock:
            self._pending += 1
        try:
            self._queue.put_nowait(message)
        except ChannelClosed:
            self._settled(message)

    def close(self, timeout: float | None = None) -> bool:
        """Send what is queued (for at most `timeout` real seconds, default
        `CLOSE_TIMEOUT`), then close the link; False if the device's thread was still
        busy then (it is abandoned)."""
        timeout = CLOSE_TIMEOUT if timeout is None else timeout
        self._queue.close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._fail(f"still sending after {timeout:g} s: abandoned")
            return False
        return True

    def stats(self) -> DeviceStats:
        with self._lock:
            return DeviceStats(self.name, self._sent, self._lost, self._error)

    def _run(self) -> None:
        try:
            self._link.open()
            self._opened = True
        except Exception as error:
            self._fail(f"cannot open: {_describe(error)}")
        try:
            for message in self._queue:
                if self._error is not None:
                    self._settled(message)
                    continue
                try:
                    self._link.send(message)
                except Exception as error:
                    self._fail(f"failed: {_describe(error)}")
                    self._settled(message)
                    continue
                sent = self._clock()
                with self._lock:
                    self._sent += 1
                    self._pending -= 1
                self._on_sent(message, sent, None)
        finally:
            try:
                self._link.close()
            except Exception as error:
                logger.warning("experiment device %s: closing failed: %s", self.name, error)

    def _settled(self, message: OutputMessage) -> None:
        """A submitted message dropped (the device fell behind, or has failed)."""
        with self._lock:
            self._lost += 1
            self._pending -= 1
        self._on_sent(message, None, self._error or "dropped: the device fell behind")

    def _fail(self, problem: str) -> None:
        with self._lock:
            if self._error is not None:
                return
            self._error = problem
        # Once per device: a failing device must not flood the log at frame rate.
        logger.warning(
            "experiment device %s %s; its messages are dropped from now on, poses go on",
            self.name,
            problem,
        )


def _import(module: str, kind: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"a {kind} device needs {INSTALL_HINTS[kind]}") from None


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
