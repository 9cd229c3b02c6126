"""Where a rule's onsets and offsets go: small plug-ins, each in a thread of its own.

A `DeviceLink` opens, sends one `OutputMessage` and closes: a serial port (pyserial,
an Arduino or Teensy switching a TTL line), OSC over UDP (python-osc, read by
Bonsai's Osc package), the ZeroMQ publisher's socket (`Publisher`), a Python
callback, or a simulated device that only notes the time (a rehearsal on a
recorded video).

A `DeviceWorker` owns one link: the experiment's thread hands it messages through a
bounded channel that never waits (the oldest waiting message is dropped when the
device falls behind, and counted), so a slow or stalled device never delays the
decisions, and the decisions never delay the poses. A link that fails to open or
to send is reported once (a warning naming the device and the error, and
`DeviceStats.error`); its later messages are dropped and counted, and the run goes
on. The time each message's bytes were handed to the operating system is reported
to `on_sent`, for the event log.
"""

from __future__ import annotations

import logging
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
class OutputMessage:
    """One onset or offset of a rule, for one device.

    Attributes:
        rule: the rule's name.
        kind: ``"onset"`` or ``"offset"``.
        frame_index: the frame it was decided on.
        trial: its trial (None without trials).
        capture_time: that frame's capture time (the pipeline's clock).
        ready_time: when its poses left the engine (the pipeline's clock).
        decision_time: when the rule decided (the pipeline's clock).
        payload: the serial text or OSC address (`Output`); None: the default.
        event: the event log's number of this transition.
    """

    rule: str
    kind: str
    frame_index: int
    trial: int | None
    capture_time: float
    ready_time: float
    decision_time: float
    payload: str | None
    event: int

    @property
    def state(self) -> int:
        """1 at an onset, 0 at an offset."""
        return 1 if self.kind == "onset" else 0


class DeviceLink(Protocol):
    """A device's connection: opened, sent to and closed in the device's own thread."""

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
    """Text lines to a serial port (pyserial's `serial_for_url`, so ``loop://`` works)."""

    def __init__(self, device: SerialDevice) -> None:
        self._device = device
        self._port: Any = None

    def open(self) -> None:
        serial = _import("serial", "serial")
        self._port = serial.serial_for_url(
            self._device.port,
            baudrate=self._device.baudrate,
            write_timeout=self._device.write_timeout,
        )

    def send(self, message: OutputMessage) -> None:
        text = message.payload
        if text is None:
            text = f"{message.rule} {message.state}\n"
        written = self._port.write(text.encode())
        if written != len(text.encode()):
            raise OSError(f"wrote {written} of {len(text.encode())} bytes")

    def close(self) -> None:
        if self._port is not None:
            self._port.close()


class OscLink:
    """An OSC message per transition over UDP: the address (default ``/<rule>``) with
    the arguments state (1 or 0) and frame index."""

    def __init__(self, device: OscDevice) -> None:
        self._device = device
        self._client: Any = None

    def open(self) -> None:
        udp_client = _import("pythonosc.udp_client", "osc")
        self._client = udp_client.SimpleUDPClient(self._device.host, self._device.port)

    def send(self, message: OutputMessage) -> None:
        address = message.payload or f"/{message.rule}"
        self._client.send_message(address, [message.state, message.frame_index])

    def close(self) -> None:
        if self._client is not None:
            self._client._sock.close()


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

    def open(self) -> None:
        from sleap_live.stream.publish import Publisher

        self._publisher = Publisher(self._device.endpoint)

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


class SimulatedLink:
    """A device that is not there: each message is noted as sent when it is taken (a
    rehearsal on a recorded video)."""

    def __init__(self) -> None:
        self.messages: list[OutputMessage] = []

    def open(self) -> None:
        pass

    def send(self, message: OutputMessage) -> None:
        self.messages.append(message)

    def close(self) -> None:
        pass


def event_message(message: OutputMessage) -> dict[str, Any]:
    """The map a ZeroMQ transition message holds."""
    return attrs.asdict(message)


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
        link: its connection.
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
        self._queue: Channel[OutputMessage] = Channel(QUEUE, "drop_oldest", on_drop=self._dropped)
        self._error: str | None = None
        self._sent = 0
        self._lost = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"sleap-live experiment device {name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def submit(self, message: OutputMessage) -> None:
        """Queue a message; never waits."""
        try:
            self._queue.put_nowait(message)
        except ChannelClosed:
            self._dropped(message)

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
        except Exception as error:
            self._fail(f"cannot open: {_describe(error)}")
        try:
            for message in self._queue:
                if self._error is not None:
                    self._dropped(message)
                    continue
                try:
                    self._link.send(message)
                except Exception as error:
                    self._fail(f"failed: {_describe(error)}")
                    self._dropped(message)
                    continue
                sent = self._clock()
                with self._lock:
                    self._sent += 1
                self._on_sent(message, sent, None)
        finally:
            try:
                self._link.close()
            except Exception as error:
                logger.warning("experiment device %s: closing failed: %s", self.name, error)

    def _dropped(self, message: OutputMessage) -> None:
        with self._lock:
            self._lost += 1
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
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"a {kind} device needs {INSTALL_HINTS[kind]}") from None


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
