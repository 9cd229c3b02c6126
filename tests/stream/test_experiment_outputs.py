"""Experiment outputs and the event log, on tiny synthetic poses: serial through a real
pseudo-terminal pair (the peer timestamping what it reads), OSC on loopback UDP, the
ZeroMQ publisher, callbacks; a port that cannot be opened, a device that stalls and
one that disconnects mid-run (each reported once, decisions never held up); the CSV
journal and the events written into a .slp."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import sleap_io as sio

from sleap_live.engines.types import FramePoses, ModelInfo, Skeleton
from sleap_live.stream.experiment import (
    CallbackDevice,
    Experiment,
    GpioDevice,
    InRegion,
    NidaqDevice,
    OscDevice,
    Output,
    Rectangle,
    Rule,
    SerialDevice,
    ZmqDevice,
)
from sleap_live.stream.experiment.closed_loop import ClosedLoop
from sleap_live.stream.experiment.devices import (
    DeviceWorker,
    OscLink,
    OutputMessage,
    SerialLink,
    ZmqLink,
)
from sleap_live.stream.experiment.events import EVENT_COLUMNS, write_slp_events
from sleap_live.stream.types import PoseRecord

INFO = ModelInfo("single_instance", Skeleton(("nose", "tail")), 1, None)
# The nose inside x 0..10 on frames 2-4 and 7-8 of ten.
INSIDE = {2, 3, 4, 7, 8}


def record(index: int) -> PoseRecord:
    x = 5.0 if index in INSIDE else 50.0
    poses = FramePoses(
        np.asarray([[[x, 5.0], [x + 10, 5.0]]], np.float32),
        np.ones((1, 2), np.float32),
        np.ones(1, np.float32),
        np.full(1, -1, np.int32),
    )
    now = time.monotonic()
    return PoseRecord(index, now - 0.01, now, "clip", poses)


def experiment(devices: dict, outputs: tuple[Output, ...]) -> Experiment:
    rule = Rule("zone", InRegion("box", "nose"), outputs=outputs)
    return Experiment((rule,), {"box": Rectangle(0, 0, 10, 10)}, devices)


def run_loop(loop: ClosedLoop, frames: int = 10, *, live: bool = True) -> list[float]:
    """Bind and start `loop` as a run of a replay would (live: real devices), or of a
    file (simulated devices), and decide `frames` records directly; returns the
    seconds each decision took."""
    loop.bind(INFO, fps=10.0, recorded_video=True, lossless=not live, tracked=False)

    class Run:  # the parts of `PipelineRun` a closed loop reads
        from sleap_live.stream.ring import RingBuffer

        ring = RingBuffer(8, 1, 2)
        info = INFO

    loop.start(Run())  # type: ignore[arg-type]
    took = []
    for index in range(frames):
        started = time.perf_counter()
        loop.decide(record(index))
        took.append(time.perf_counter() - started)
    return took


def finish(loop: ClosedLoop) -> None:
    for transition in loop._timeline.finish():
        loop._dispatch(transition, None, time.monotonic())
    for worker in loop._workers.values():
        worker.close(timeout=1.0)
    loop.log.close()


def test_serial_bytes_reach_the_peer_of_a_pseudo_terminal(tmp_path):
    peer, port = os.openpty()
    received: list[tuple[float, bytes]] = []

    def read() -> None:
        while True:
            try:
                data = os.read(peer, 64)
            except OSError:
                return
            if not data:
                return
            received.append((time.monotonic(), data))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    devices = {"laser": SerialDevice(os.ttyname(port))}
    loop = ClosedLoop(
        experiment(devices, (Output("laser", "1\n", "0\n"),)),
        simulate=False,
        events_csv=tmp_path / "events.csv",
    )
    run_loop(loop)
    finish(loop)
    deadline = time.monotonic() + 5
    while b"".join(d for _, d in received).count(b"\n") < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.close(port)
    os.close(peer)
    assert b"".join(d for _, d in received) == b"1\n0\n1\n0\n"
    entries = loop.log.entries
    assert [(e.kind, e.frame_index) for e in entries] == [
        ("onset", 2),
        ("offset", 5),
        ("onset", 7),
        ("offset", 9),
    ]
    # Decided, then written: the peer reads the bytes after the decision (it may read
    # them before the writing thread notes its time).
    sent, error = entries[0].sent["laser"]
    assert error is None and sent is not None
    assert entries[0].decision_time <= min(sent, received[0][0])
    rows = (tmp_path / "events.csv").read_text().splitlines()
    assert rows[0] == ",".join(EVENT_COLUMNS)
    assert [row.split(",")[:3] for row in rows[1:]] == [
        ["zone", "onset", "2"],
        ["zone", "offset", "5"],
        ["zone", "onset", "7"],
        ["zone", "offset", "9"],
    ]


def test_an_unreachable_port_is_reported_once_and_decisions_go_on(tmp_path, caplog):
    devices = {"laser": SerialDevice(str(tmp_path / "no-such-port"))}
    loop = ClosedLoop(experiment(devices, (Output("laser"),)), simulate=False)
    with caplog.at_level(logging.WARNING):
        run_loop(loop)
        finish(loop)
    warnings = [r.getMessage() for r in caplog.records if "laser" in r.getMessage()]
    assert len(warnings) == 1 and "cannot open" in warnings[0], warnings
    (stats,) = loop.stats().devices
    assert (stats.sent, stats.dropped) == (0, 4) and "cannot open" in stats.error
    # Every transition is still in the log, marked not sent.
    assert len(loop.log.entries) == 4
    assert all(e.sent["laser"][0] is None for e in loop.log.entries)


def test_a_stalled_device_never_holds_up_the_decisions(caplog):
    release = threading.Event()
    calls: list[OutputMessage] = []

    def stuck(message: OutputMessage) -> None:
        calls.append(message)
        release.wait(10)

    loop = ClosedLoop(experiment({"lamp": CallbackDevice(stuck)}, (Output("lamp"),)))
    took = run_loop(loop, frames=10)
    assert max(took) < 0.5  # the device's one call blocks for 10 s
    with caplog.at_level(logging.WARNING):
        assert loop._workers["lamp"].close(timeout=0.2) is False
    release.set()
    assert any("abandoned" in r.getMessage() for r in caplog.records)
    assert len(calls) == 1 and len(loop.log.entries) == 4


def test_a_device_that_disconnects_mid_run_is_reported_once(caplog):
    peer, port = os.openpty()
    link = SerialLink(SerialDevice(os.ttyname(port)))
    sent: list[tuple[float | None, str | None]] = []
    worker = DeviceWorker("laser", link, lambda message, when, error: sent.append((when, error)))
    worker.start()
    message = OutputMessage("zone", "onset", 0, None, 0.0, 0.0, 0.0, None, 0)
    worker.submit(message)
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    os.close(peer)  # the device goes away
    os.close(port)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            worker.submit(message)
        assert worker.close(timeout=2.0)
    stats = worker.stats()
    assert stats.sent == 1 and stats.dropped == 3 and stats.error is not None
    assert sum("laser" in r.getMessage() for r in caplog.records) == 1


def test_osc_messages_on_loopback():
    from pythonosc.dispatcher import Dispatcher
    from pythonosc.osc_server import ThreadingOSCUDPServer

    got: list[tuple[str, tuple]] = []
    dispatcher = Dispatcher()
    dispatcher.set_default_handler(lambda address, *args: got.append((address, args)))
    server = ThreadingOSCUDPServer(("127.0.0.1", 0), dispatcher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        devices = {"bonsai": OscDevice("127.0.0.1", port)}
        loop = ClosedLoop(experiment(devices, (Output("bonsai", "/laser"),)), simulate=False)
        run_loop(loop)
        finish(loop)
        deadline = time.monotonic() + 5
        while len(got) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        server.shutdown()
        server.server_close()
    assert got == [("/laser", (1, 2)), ("/zone", (0, 5)), ("/laser", (1, 7)), ("/zone", (0, 9))]


def test_zeromq_messages_through_the_publisher():
    import msgpack
    import zmq

    context = zmq.Context()
    subscriber = context.socket(zmq.SUB)
    try:
        devices = {"pub": ZmqDevice("tcp://127.0.0.1:*")}
        loop = ClosedLoop(experiment(devices, (Output("pub"),)), simulate=False)
        # Bind first (in the device's thread), then connect and subscribe.
        run_loop(loop, frames=0)
        deadline = time.monotonic() + 5
        link = loop._workers["pub"]._link
        while link._publisher is None and time.monotonic() < deadline:
            time.sleep(0.01)
        subscriber.connect(link._publisher.endpoint)
        subscriber.setsockopt(zmq.SUBSCRIBE, b"experiment/")
        assert link._publisher.wait_for_subscribers(1, timeout=5)
        for index in range(10):
            loop.decide(record(index))
        got = []
        while len(got) < 4 and subscriber.poll(5000):
            topic, payload = subscriber.recv_multipart()
            got.append((topic, msgpack.unpackb(payload)))
        finish(loop)
    finally:
        subscriber.close(0)
        context.term()
    assert [(t, m["kind"], m["frame_index"]) for t, m in got] == [
        (b"experiment/zone", "onset", 2),
        (b"experiment/zone", "offset", 5),
        (b"experiment/zone", "onset", 7),
        (b"experiment/zone", "offset", 9),
    ]


def test_simulated_devices_open_nothing(tmp_path):
    devices = {"laser": SerialDevice(str(tmp_path / "no-such-port"))}
    loop = ClosedLoop(experiment(devices, (Output("laser"),)))  # simulated: a file
    run_loop(loop, live=False)
    assert loop.stats().simulated
    finish(loop)
    (stats,) = loop.stats().devices
    assert (stats.sent, stats.error) == (4, None)


def test_events_go_into_a_slp_as_sleap_io_events(tmp_path):
    loop = ClosedLoop(experiment({}, ()))
    run_loop(loop)
    finish(loop)
    video = sio.Video(filename=str(tmp_path / "clip.mkv"), open_backend=False)
    skeleton = sio.Skeleton(["nose", "tail"])
    frame = sio.LabeledFrame(
        video=video,
        frame_idx=0,
        instances=[sio.PredictedInstance.from_numpy(np.zeros((2, 2)), skeleton=skeleton)],
    )
    slp = tmp_path / "poses.slp"
    sio.save_slp(sio.Labels([frame], videos=[video], skeletons=[skeleton]), str(slp))
    assert write_slp_events(slp, loop.log.entries) == 2
    events = sio.load_slp(str(slp)).events
    # Inclusive spans: on from the onset's frame to the frame before the offset.
    assert [(e.type.name, e.start_frame, e.end_frame) for e in events] == [
        ("zone", 2, 4),
        ("zone", 7, 8),
    ]
    assert float(events[0].metadata["onset_capture_time"]) == loop.log.entries[0].capture_time
    assert not list(Path(tmp_path).glob("*.partial"))


def test_a_gpio_pin_is_high_while_the_rule_is_on(monkeypatch):
    """gpiozero 2.0's mock pins (`GPIOZERO_PIN_FACTORY=mock`, its own stand-in for a
    Raspberry Pi) record every state the pin was driven to."""
    import gpiozero

    monkeypatch.setenv("GPIOZERO_PIN_FACTORY", "mock")
    monkeypatch.setattr(gpiozero.Device, "pin_factory", None)  # chosen again from the variable
    loop = ClosedLoop(experiment({"led": GpioDevice(17)}, (Output("led"),)), simulate=False)
    run_loop(loop)
    worker = loop._workers["led"]
    deadline = time.monotonic() + 5
    while worker.stats().sent < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    states = [state.state for state in worker._link._output.pin.states]
    finish(loop)
    assert states == [False, True, False, True, False]
    assert [e.sent["led"][1] for e in loop.log.entries] == [None] * 4


def test_events_go_into_an_nwb_as_a_time_intervals_table(tmp_path):
    import datetime

    from pynwb import NWBHDF5IO, NWBFile

    from sleap_live.stream.experiment.events import NWB_TABLE, write_nwb_events

    loop = ClosedLoop(experiment({}, ()))
    run_loop(loop)
    finish(loop)
    nwb = tmp_path / "poses.nwb"
    start = datetime.datetime.now(datetime.timezone.utc)
    with NWBHDF5IO(str(nwb), "w") as io:
        io.write(NWBFile(session_description="poses", identifier="x", session_start_time=start))
    assert write_nwb_events(nwb, loop.log.entries, fps=10.0) == 2
    with NWBHDF5IO(str(nwb), "r") as io:
        table = io.read().intervals[NWB_TABLE].to_dataframe()
    # Times as the pose series are timed: frame index over the frame rate.
    assert table[["start_time", "stop_time", "start_frame", "end_frame"]].values.tolist() == [
        [0.2, 0.5, 2, 4],
        [0.7, 0.9, 7, 8],
    ]
    assert list(table["rule"]) == ["zone", "zone"]
    assert not list(tmp_path.glob("*.partial"))


def fake_nidaqmx(writes: list) -> tuple[types.ModuleType, types.ModuleType]:
    """A stand-in for nidaqmx 1.7.0, which needs NI-DAQmx's driver (none here): the calls
    `NidaqLink` makes, as that version defines them: `nidaqmx.Task()`,
    `task.do_channels.add_do_chan(lines, line_grouping=...)` returning a `DOChannel`
    whose `channel_names` is the unflattened list of lines
    (nidaqmx/task/collections/_do_channel_collection.py, task/channels/_channel.py),
    `task.write(data, auto_start=...)` taking a scalar for one channel and a list of
    one sample per channel for several (nidaqmx/task/_task.py), `task.close()`, and
    `nidaqmx.constants.LineGrouping.CHAN_PER_LINE` (nidaqmx/constants.py)."""
    import enum

    constants = types.ModuleType("nidaqmx.constants")
    constants.LineGrouping = enum.Enum(
        "LineGrouping", {"CHAN_PER_LINE": 0, "CHAN_FOR_ALL_LINES": 1}
    )

    class Channel:
        def __init__(self, lines: str) -> None:
            # "Dev1/port0/line0:1" unflattens to line0 and line1.
            base, _, span = lines.rpartition("line")
            first, _, last = span.partition(":")
            self.channel_names = [
                f"{base}line{i}" for i in range(int(first), int(last or first) + 1)
            ]

    class Task:
        def __init__(self) -> None:
            self.do_channels = types.SimpleNamespace(add_do_chan=self._add)

        def _add(self, lines, name_to_assign_to_lines="", line_grouping=None):
            assert line_grouping is constants.LineGrouping.CHAN_PER_LINE
            return Channel(lines)

        def write(self, data, auto_start=None, timeout=10.0):
            writes.append((data, auto_start))

        def close(self) -> None:
            writes.append("closed")

    module = types.ModuleType("nidaqmx")
    module.Task = Task
    module.constants = constants
    return module, constants


def test_ni_daq_lines_follow_the_rule(monkeypatch):
    writes: list = []
    module, constants = fake_nidaqmx(writes)
    monkeypatch.setitem(sys.modules, "nidaqmx", module)
    monkeypatch.setitem(sys.modules, "nidaqmx.constants", constants)
    devices = {"daq": NidaqDevice("Dev1/port0/line0:1")}
    loop = ClosedLoop(experiment(devices, (Output("daq"),)), simulate=False)
    run_loop(loop)
    finish(loop)
    low, high = ([False, False], True), ([True, True], True)
    assert writes == [low, high, low, high, low, "closed"]


def test_ni_daq_without_its_driver_is_reported_once(monkeypatch, caplog):
    """No nidaqmx (or its driver) here: the device says what to install, once."""
    monkeypatch.setitem(sys.modules, "nidaqmx", None)
    loop = ClosedLoop(
        experiment({"daq": NidaqDevice("Dev1/port0/line0")}, (Output("daq"),)), simulate=False
    )
    with caplog.at_level(logging.WARNING):
        run_loop(loop)
        finish(loop)
    (stats,) = loop.stats().devices
    assert "pip install nidaqmx" in stats.error and stats.dropped == 4
    assert sum("daq" in r.getMessage() for r in caplog.records) == 1


def test_a_stalled_device_costs_a_pipeline_no_poses(fakes, clip, tmp_path, monkeypatch):
    """A device that never returns, in a whole run: every frame is processed and saved,
    the run ends (the device's thread abandoned), and the log holds every decision."""
    from sleap_live.stream import OutputOptions, Pipeline, open_source
    from sleap_live.stream.experiment import devices

    monkeypatch.setattr(devices, "CLOSE_TIMEOUT", 0.2)
    release = threading.Event()
    rule = Rule("zone", InRegion("box", "head"), outputs=(Output("stuck"),))
    stuck = CallbackDevice(lambda message: release.wait(30))
    exp = Experiment((rule,), {"box": Rectangle(10, -1, 20, 100)}, {"stuck": stuck})
    out = tmp_path / "poses.slp"
    pipeline = Pipeline(
        open_source(clip), fakes.FakeRunner(), outputs=OutputOptions(output=out), experiment=exp
    )
    try:
        stats = pipeline.run()
        loop = pipeline.experiment
        assert loop is not None
        (device,) = loop.stats().devices  # before the device is let go
    finally:
        release.set()
    assert stats.frames_processed == 40 and out.exists()
    assert loop.stats().frames == 40
    assert device.sent == 0 and "abandoned" in device.error
    # The fake's animals are in x 10..20 on frames 10-20, absent on every third frame.
    assert [(e.kind, e.frame_index) for e in loop.log.entries][:2] == [
        ("onset", 10),
        ("offset", 12),
    ]


def _opened_worker(port: int, sent: list) -> DeviceWorker:
    return _idle_worker(
        "laser",
        SerialLink(SerialDevice(os.ttyname(port))),
        lambda message, when, error: sent.append((message.payload, when, error)),
    )


def _idle_worker(name: str, link, on_sent=lambda message, when, error: None) -> DeviceWorker:
    """A started device worker whose link is open."""
    worker = DeviceWorker(name, link, on_sent)
    worker.start()
    deadline = time.monotonic() + 5
    while not worker._opened and time.monotonic() < deadline:
        time.sleep(0.001)
    return worker


def test_an_idle_serial_port_is_written_from_the_deciding_thread():
    peer, port = os.openpty()
    os.set_blocking(peer, False)
    sent: list = []
    worker = _opened_worker(port, sent)
    message = OutputMessage("zone", "onset", 0, None, 0.0, 0.0, 0.0, "1\n", 0)
    before = time.monotonic()
    written = worker.send_now(message)
    # The bytes are at the peer when it returns, without the device's thread.
    assert written is not None and before <= written <= time.monotonic()
    assert os.read(peer, 64) == b"1\n"
    assert worker.stats().sent == 1 and sent == []  # its row is the caller's to log
    assert worker.close(timeout=2.0)
    os.close(peer)
    os.close(port)


def test_a_full_serial_port_hands_the_rest_to_the_devices_thread_in_order():
    peer, port = os.openpty()
    sent: list = []
    worker = _opened_worker(port, sent)
    # Fill the terminal's buffer, then let one byte out: a long line can only be
    # written in part without waiting.
    filler = os.open(os.ttyname(port), os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    stuffed = 0
    try:
        while True:
            stuffed += os.write(filler, b"x" * 256)
    except BlockingIOError:
        pass
    os.close(filler)
    received = os.read(peer, 1)
    lines = ["0" * 60000 + "\n", "1\n", "2\n"]
    messages = [
        OutputMessage("zone", "onset", i, None, 0.0, 0.0, 0.0, line, i)
        for i, line in enumerate(lines)
    ]
    assert worker.send_now(messages[0]) is None
    worker.submit(messages[0])
    # A message with the device's thread: the next waits its turn (order kept).
    assert worker.send_now(messages[1]) is None
    worker.submit(messages[1])
    expected = stuffed + len(lines[0]) + len(lines[1])
    deadline = time.monotonic() + 10
    while len(received) < expected and time.monotonic() < deadline:
        received += os.read(peer, 65536)
    while len(sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    # Idle again: written at once, after the others.
    assert worker.send_now(messages[2]) is not None
    received += os.read(peer, 64)
    # Every line whole, once, in order (the partly written one finished by the thread).
    assert received.replace(b"x", b"") == "".join(lines).encode()
    assert [(payload, error) for payload, _, error in sent] == [(lines[0], None), (lines[1], None)]
    assert worker.close(timeout=2.0)
    os.close(peer)
    os.close(port)


def test_a_port_that_goes_away_under_the_deciding_thread_is_reported_once(caplog):
    peer, port = os.openpty()
    loop = ClosedLoop(
        experiment({"laser": SerialDevice(os.ttyname(port))}, (Output("laser", "1\n", "0\n"),)),
        simulate=False,
    )
    loop.bind(INFO, fps=10.0, recorded_video=True, lossless=False, tracked=False)

    class Run:  # the parts of `PipelineRun` a closed loop reads
        from sleap_live.stream.ring import RingBuffer

        ring = RingBuffer(8, 1, 2)
        info = INFO

    loop.start(Run())  # type: ignore[arg-type]
    worker = loop._workers["laser"]
    deadline = time.monotonic() + 5
    while not worker._opened and time.monotonic() < deadline:
        time.sleep(0.001)
    for index in range(5):  # the onset at frame 2 and the offset at 5 written at once
        loop.decide(record(index))
    assert os.read(peer, 64) == b"1\n"
    os.close(peer)  # the device goes away
    with caplog.at_level(logging.WARNING):
        for index in range(5, 10):
            loop.decide(record(index))
        finish(loop)
    os.close(port)
    warnings = [r.getMessage() for r in caplog.records if "laser" in r.getMessage()]
    assert len(warnings) == 1 and "failed" in warnings[0], warnings
    sent = [e.sent["laser"] for e in loop.log.entries]
    assert sent[0][0] is not None and sent[0][1] is None
    # The three transitions after it: none sent, each with the one error.
    assert [s[0] for s in sent[1:]] == [None] * 3 and all(s[1] for s in sent[1:])
    stats = worker.stats()
    assert (stats.sent, stats.dropped) == (1, 3) and stats.error is not None


def test_an_idle_osc_link_is_written_from_the_deciding_thread():
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(5)
    worker = _idle_worker("bonsai", OscLink(OscDevice("127.0.0.1", peer.getsockname()[1])))
    try:
        message = OutputMessage("zone", "onset", 3, None, 0.0, 0.0, 0.0, "/laser", 0)
        assert worker.send_now(message) is not None
        datagram = peer.recv(512)  # sent before send_now returned
        assert datagram.startswith(b"/laser\x00") and worker.stats().sent == 1
    finally:
        assert worker.close(timeout=2.0)
        peer.close()


def test_osc_datagrams_are_python_osc_messages():
    from pythonosc.osc_message_builder import OscMessageBuilder

    link = OscLink(OscDevice("127.0.0.1", 9))
    link.open()
    try:
        for frame in (0, 5, 2**31 - 1, 2**31, -3, -(2**31), 3):  # the int64s too, and again
            for payload, kind in ((None, "onset"), ("/laser", "offset"), ("/laser", "onset")):
                message = OutputMessage("zone", kind, frame, None, 0.0, 0.0, 0.0, payload, 0)
                builder = OscMessageBuilder(payload or "/zone")
                builder.add_arg(message.state)
                builder.add_arg(frame)
                assert link._datagram(message) == builder.build().dgram, (frame, payload)
    finally:
        link.close()


def test_an_idle_zeromq_link_is_written_from_the_deciding_thread():
    import msgpack
    import zmq

    link = ZmqLink(ZmqDevice("tcp://127.0.0.1:*"))
    worker = _idle_worker("pub", link)
    context = zmq.Context()
    subscriber = context.socket(zmq.SUB)
    try:
        subscriber.connect(link._publisher.endpoint)
        subscriber.setsockopt(zmq.SUBSCRIBE, b"experiment/")
        assert link._publisher.wait_for_subscribers(1, timeout=5)
        message = OutputMessage("zone", "offset", 4, None, 0.0, 0.0, 0.0, None, 0)
        assert worker.send_now(message) is not None and worker.stats().sent == 1
        assert subscriber.poll(5000)
        topic, payload = subscriber.recv_multipart()
        assert topic == b"experiment/zone" and msgpack.unpackb(payload)["frame_index"] == 4
    finally:
        subscriber.close(0)
        context.term()
        assert worker.close(timeout=2.0)
