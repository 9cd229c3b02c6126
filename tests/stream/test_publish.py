"""Poses to other programs: the ZeroMQ publisher, its messages, its option, its subscribers.

Subscribers run in other processes (`SUBSCRIBER`, plain pyzmq + msgpack). ZeroMQ's
slow joiner (messages sent before a subscription reaches the publisher are not
delivered to it) is avoided on the publisher's side: each test binds a
`Publisher`, starts the subscriber, and waits with `Publisher.wait_for_subscribers`
until its subscription has arrived before the pipeline starts.
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from pathlib import Path

import attrs
import msgpack
import numpy as np
import pytest
import sleap_io as sio
from rich.console import Console

from sleap_live import cli
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.types import FrameBoxes, FrameMasks, FramePoses, ModelInfo, Skeleton
from sleap_live.stream import (
    OutputOptions,
    Pipeline,
    PipelineError,
    PoseRecord,
    Publisher,
    PublishError,
    PublishStats,
    open_source,
)
from sleap_live.stream.dashboard import render_dashboard
from sleap_live.stream.publish import MESSAGE_VERSION, check_endpoint, pose_message

DATA = Path(__file__).parents[1] / "data"
SCRIPTS = Path(__file__).parents[2] / "scripts"
# Most real seconds a test waits for a subscriber or a subprocess: a hang guard only.
PATIENCE = 60.0
# The name of a TCP publisher's thread that caps its connections.
WATCHER = "sleap-live publisher connections"
KEYS = {
    "version",
    "sequence",
    "source_id",
    "frame_index",
    "capture_time",
    "ready_time",
    "node_names",
    "track_names",
    "points",
    "point_scores",
    "instance_scores",
    "track_ids",
}

# A subscriber that knows nothing of sleap-live. It subscribes to "poses", prints
# "subscribed", then receives until its stdin closes (with --stall it reads nothing
# before that), drains what is left and prints every message as a JSON line.
SUBSCRIBER = textwrap.dedent(
    """
    import json, sys
    import msgpack, zmq

    endpoint, stall = sys.argv[1], "--stall" in sys.argv
    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    if stall:
        socket.setsockopt(zmq.RCVHWM, 1)
    socket.connect(endpoint)
    socket.subscribe(b"poses")
    print("subscribed", flush=True)
    poller = zmq.Poller()
    poller.register(sys.stdin, zmq.POLLIN)
    if not stall:
        poller.register(socket, zmq.POLLIN)
    messages = []
    while True:
        ready = dict(poller.poll())
        if socket in ready:
            topic, payload = socket.recv_multipart()
            messages.append([topic.decode(), msgpack.unpackb(payload)])
        if sys.stdin.fileno() in ready and not sys.stdin.read(1):
            break
    while socket.poll(500):
        topic, payload = socket.recv_multipart()
        messages.append([topic.decode(), msgpack.unpackb(payload)])
    for message in messages:
        print(json.dumps(message), flush=True)
    socket.close(linger=0)
    context.term()
    """
)


class Subscriber:
    """`SUBSCRIBER` in a subprocess, connected to `publisher`, its subscription arrived."""

    def __init__(self, publisher: Publisher, *, stall: bool = False) -> None:
        argv = [sys.executable, "-c", SUBSCRIBER, publisher.endpoint]
        self._process = subprocess.Popen(
            [*argv, "--stall"] if stall else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout.readline().strip() == "subscribed"
        assert publisher.wait_for_subscribers(1, timeout=PATIENCE), "no subscription arrived"

    def finish(self) -> list[tuple[str, dict]]:
        """Tell it the run is over; the (topic, message) pairs it received, in order."""
        out, _ = self._process.communicate(timeout=PATIENCE)
        assert self._process.returncode == 0
        return [tuple(json.loads(line)) for line in out.splitlines()]

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.communicate()


@pytest.fixture
def short_dir():
    """A folder with a short path: an ipc:// endpoint is a Unix socket path (≤ 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="sl-pub-") as folder:
        yield Path(folder)


# ------------------------------------------------------------------ the message


def test_the_message_is_one_msgpack_map_with_every_key(fakes):
    poses = FramePoses(
        points=np.array([[[1.5, 2.5], [np.nan, np.nan]], [[3, 4], [5, 6]]], np.float32),
        point_scores=np.array([[0.9, np.nan], [0.5, 0.25]], np.float32),
        instance_scores=np.array([0.75, 0.5], np.float32),
        identities=np.array([1, -1], np.int32),
    )
    record = PoseRecord(
        frame_index=7, capture_time=100.25, ready_time=100.5, source_id="cam0", poses=poses
    )
    message = msgpack.unpackb(msgpack.packb(pose_message(record, 3, fakes.INFO)))

    assert set(message) == KEYS
    assert message["version"] == MESSAGE_VERSION == 1
    assert (message["sequence"], message["frame_index"], message["source_id"]) == (3, 7, "cam0")
    assert (message["capture_time"], message["ready_time"]) == (100.25, 100.5)
    assert message["node_names"] == ["head", "tail"]
    assert message["track_names"] == ["left", "right"]
    assert message["points"][0][0] == [1.5, 2.5] and message["points"][1] == [[3, 4], [5, 6]]
    assert all(math.isnan(v) for v in message["points"][0][1])
    assert message["point_scores"][1] == [0.5, 0.25] and math.isnan(message["point_scores"][0][1])
    assert message["instance_scores"] == [0.75, 0.5]
    assert message["track_ids"] == [1, -1]


def test_a_frame_without_instances_has_empty_lists(fakes):
    record = PoseRecord(0, 1.0, 2.0, "cam0", FramePoses.empty(2))
    message = pose_message(record, 0, fakes.INFO)
    assert [message[k] for k in ("points", "point_scores", "instance_scores", "track_ids")] == [
        [],
        [],
        [],
        [],
    ]


def test_a_box_detectors_message_carries_its_boxes(fakes):
    boxes = FrameBoxes(
        boxes=np.array([[1, 2, 3, 4]], np.float32),
        scores=np.array([0.5], np.float32),
        categories=np.array([0], np.int32),
    )
    info = attrs.evolve(fakes.INFO, model_type="bbox", class_names=("mouse",))
    record = PoseRecord(0, 1.0, 2.0, "cam0", attrs.evolve(FramePoses.empty(2), boxes=boxes))
    message = msgpack.unpackb(msgpack.packb(pose_message(record, 0, info)))
    assert set(message) == KEYS | {"boxes", "box_scores", "box_categories", "category_names"}
    assert message["boxes"] == [[1, 2, 3, 4]] and message["box_scores"] == [0.5]
    assert message["box_categories"] == [0] and message["category_names"] == ["mouse"]
    assert message["track_names"] == [] and message["points"] == []


def test_a_segmentation_models_message_carries_its_masks(fakes):
    # As the preview sends them (their runs are tested there).
    mask = np.array([[False, True, True], [False, False, False]])
    masks = FrameMasks((mask,), np.array([0.5], np.float32), np.array([[0.25, 0.25]]))
    record = PoseRecord(0, 1.0, 2.0, "cam0", attrs.evolve(FramePoses.empty(2), masks=masks))
    message = msgpack.unpackb(msgpack.packb(pose_message(record, 0, fakes.INFO)))
    assert set(message) == KEYS | {"masks"} and message["points"] == []
    assert message["masks"] == [
        {"rows": 2, "columns": 3, "scale": [0.25, 0.25], "score": 0.5, "runs": [1, 2, 3]}
    ]


# ------------------------------------------------------------------ the endpoint


@pytest.mark.parametrize(
    "endpoint", ["tcp://127.0.0.1:5555", "tcp://*:5555", "tcp://127.0.0.1:*", "ipc:///tmp/x"]
)
def test_endpoints_other_programs_can_reach_are_accepted(endpoint):
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("127.0.0.1:5555", "not a ZeroMQ endpoint"),
        ("tcp://127.0.0.1", "not a ZeroMQ endpoint"),
        ("http://127.0.0.1:5555", "not a ZeroMQ endpoint"),
        ("tcp://127.0.0.1:99999", "not 1 to 65535"),
        ("tcp://127.0.0.1:0", "not 1 to 65535"),
        ("inproc://poses", "not reachable from another program"),
    ],
)
def test_bad_endpoints_are_refused_in_one_line(endpoint, says):
    with pytest.raises(ValueError, match=says) as caught:
        Publisher(endpoint)
    assert str(caught.value).startswith(endpoint) and "\n" not in str(caught.value)


def test_an_address_in_use_or_a_missing_folder_is_a_publish_error(tmp_path):
    with Publisher("tcp://127.0.0.1:*") as first:
        with pytest.raises(PublishError, match="address already in use") as caught:
            Publisher(first.endpoint)
        assert caught.value.endpoint == first.endpoint
    with pytest.raises(PublishError, match="folder does not exist"):
        Publisher(f"ipc://{tmp_path}/missing/poses")
    with pytest.raises(PublishError, match="too long for a Unix socket"):
        Publisher(f"ipc://{tmp_path}/{'p' * 200}")
    with pytest.raises(PublishError, match="no interface of this machine has that name"):
        Publisher("tcp://no-such-interface.invalid:5555")


def test_missing_packages_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "zmq", None)
    with pytest.raises(PublishError, match=r"pyzmq and msgpack .*sleap-live\[publish\]"):
        Publisher("tcp://127.0.0.1:*")


def test_a_closed_publisher_refuses_to_send(fakes):
    publisher = Publisher("tcp://127.0.0.1:*")
    publisher.close()
    publisher.close()
    with pytest.raises(PublishError, match="closed"):
        publisher.send(PoseRecord(0, 1.0, 2.0, "cam0", fakes.poses_for(0)), 0, fakes.INFO)
    assert publisher.poll_subscriptions() == 0 and publisher.sent == 0


def test_a_publisher_attaches_once_and_before_the_start(fakes):
    with Publisher("tcp://127.0.0.1:*") as publisher:
        pipeline = Pipeline(fakes.FakeSource(3), fakes.FakeRunner())
        pipeline.attach(publisher)
        with pytest.raises(ValueError, match="'publish' is attached already"):
            pipeline.attach(publisher)
        pipeline.run()
        with pytest.raises(PipelineError, match="attach 'publish' before the pipeline starts"):
            pipeline.attach(publisher)
        assert pipeline.stats.publish.sent == 3


# ------------------------------------------------------------- real subscribers


def test_a_subscriber_in_another_process_receives_a_60_fps_replay(tmp_path):
    """The acceptance check: fixture top-down model, demo clip replayed at 60 fps."""
    runner = load_runner([str(DATA / "exports" / "topdown")], engine="onnx", device="cpu")
    publisher = Publisher("tcp://127.0.0.1:*")
    subscriber = Subscriber(publisher)
    try:
        source = open_source(DATA / "videos" / "demo.mp4", replay=True, fps=60)
        out = tmp_path / "poses.slp"
        pipeline = Pipeline(source, runner, outputs=OutputOptions(output=out))
        pipeline.attach(publisher)
        stats = pipeline.run()
        publisher.close()  # lets the last messages leave
        received = subscriber.finish()
    finally:
        subscriber.kill()
        publisher.close()
        runner.close()

    assert stats.publish is not None and stats.publish.subscribers == 1
    assert stats.publish.sent + stats.publish.skipped == stats.frames_processed > 0
    assert len(received) >= 0.95 * stats.frames_processed
    sequences = [message["sequence"] for _, message in received]
    assert sequences == sorted(set(sequences)) and sequences[-1] < stats.frames_processed
    saved = {frame.frame_idx: frame for frame in sio.load_slp(str(out), open_videos=False)}
    nodes = runner.info.skeleton.node_names
    for topic, message in received:
        assert set(message) == KEYS and message["version"] == MESSAGE_VERSION
        assert topic == f"poses/{message['source_id']}" and message["node_names"] == list(nodes)
        assert message["capture_time"] <= message["ready_time"]
        points = np.array(message["points"], np.float64).reshape(-1, len(nodes), 2)
        scores = np.array(message["point_scores"], np.float64).reshape(-1, len(nodes))
        assert len(points) == len(message["instance_scores"]) == len(message["track_ids"])
        frame = saved.get(message["frame_index"])
        expected = [instance.numpy() for instance in frame.instances] if frame else []
        np.testing.assert_array_equal(points, np.array(expected).reshape(points.shape))
        assert scores.shape == points.shape[:2]
    assert any(len(message["points"]) == 2 for _, message in received)


class WidePosesRunner:
    """Twenty instances of 50 nodes in every frame: about 30 kB per message, so that a
    few hundred frames outgrow every queue and socket buffer between the processes."""

    device = "cpu"
    metadata = None
    info = ModelInfo(
        model_type="bottomup",
        skeleton=Skeleton(node_names=tuple(f"n{i}" for i in range(50))),
        input_channels=1,
        max_instances=20,
    )

    def run(self, frames: np.ndarray, *, stream: object = None) -> list[FramePoses]:
        shape = (20, 50)
        return [
            FramePoses(
                points=np.full((*shape, 2), float(i), np.float32),
                point_scores=np.ones(shape, np.float32),
                instance_scores=np.ones(20, np.float32),
                identities=np.full(20, -1, np.int32),
            )
            for i in range(len(frames))
        ]

    def close(self) -> None:
        pass


def test_a_stalled_subscriber_never_holds_up_the_pipeline(fakes, short_dir):
    """It reads nothing until the run is over: every frame is still processed and
    published; what ZeroMQ dropped for it shows as gaps in `sequence`."""
    n_frames = 300
    publisher = Publisher(f"ipc://{short_dir}/poses", hwm=4)
    subscriber = Subscriber(publisher, stall=True)
    try:
        pipeline = Pipeline(fakes.FakeSource(n_frames), WidePosesRunner())
        pipeline.attach(publisher)
        pipeline.start()
        assert pipeline.join(timeout=PATIENCE), "the pipeline waited for the subscriber"
        stats = pipeline.stats
        publisher.close()
        received = subscriber.finish()
    finally:
        subscriber.kill()
        publisher.close()

    assert stats.frames_processed == n_frames
    assert stats.publish.sent + stats.publish.skipped == n_frames
    sequences = [message["sequence"] for _, message in received]
    # In order, none twice, and some missing: the gaps are what the subscriber missed.
    assert sequences == sorted(set(sequences)) and sequences[-1] < n_frames
    assert len(sequences) < n_frames


def test_stats_and_the_dashboard_say_what_was_published(fakes):
    with Publisher("tcp://127.0.0.1:*") as publisher:
        pipeline = Pipeline(fakes.FakeSource(12), fakes.FakeRunner())
        pipeline.attach(publisher)
        assert pipeline.stats.publish is None  # nothing runs before start
        pipeline.run()
        stats = pipeline.stats
    assert stats.publish == PublishStats(publisher.endpoint, sent=12, skipped=0, subscribers=0)
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render_dashboard(stats))
    assert f"publish    {publisher.endpoint}: 12 sent, 0 skipped, 0 subscribed" in (
        console.file.getvalue()
    )
    assert Pipeline(fakes.FakeSource(1), fakes.FakeRunner()).run().publish is None


def test_the_subscriber_example_prints_frames_and_what_it_missed(fakes, short_dir):
    endpoint = f"ipc://{short_dir}/poses"
    with Publisher(endpoint) as publisher:
        example = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "subscriber_example.py"), endpoint, "--count", "4"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert publisher.wait_for_subscribers(1, timeout=PATIENCE)
            for sequence in (0, 1, 5, 6):  # 2, 3 and 4 never come
                record = PoseRecord(sequence, 1.0, 2.0, "cam0", fakes.poses_for(sequence))
                publisher.send(record, sequence, fakes.INFO)
            out, _ = example.communicate(timeout=PATIENCE)
        finally:
            example.kill()
    lines = out.splitlines()
    assert example.returncode == 0 and len(lines) == 5
    assert lines[1].startswith("poses/cam0 frame 1: 1 instances, head at (1.0, 0.0), tracks [0]")
    assert lines[-1] == "received 4 messages, missed 3"


# ------------------------------------------------------------------- the option


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("command", ["run", "replay"])
def test_publish_on_run_and_replay_says_what_it_sent(
    command, clip, fake_loads, short_dir, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where the poses go without -o
    endpoint = f"ipc://{short_dir}/poses"
    assert cli.main([command, str(clip), "-m", "m", "--publish", endpoint]) == 0
    err = capsys.readouterr().err
    assert f"publishing poses on {endpoint}" in err
    processed = int(err.split(" frames in ")[0].split()[-1])
    assert f"published: {processed} messages on {endpoint} (0 skipped)" in err


def test_publish_beyond_loopback_prints_one_warning_line(
    clip, fake_loads, capsys, tmp_path, monkeypatch
):
    from sleap_live.stream import publish

    argv = ["replay", str(clip), "-m", "m", "--publish", "tcp://127.0.0.1:*"]
    assert cli.main([*argv, "-o", str(tmp_path / "p.slp")]) == 0
    assert "warning:" not in capsys.readouterr().err
    # As bound on tcp://*, while listening on 127.0.0.1 only.
    monkeypatch.setattr(publish, "is_loopback", lambda host: False)
    assert cli.main([*argv, "-o", str(tmp_path / "again.slp")]) == 0
    [warning] = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warning.startswith("warning: --publish tcp://127.0.0.1:* sends every pose")


def test_a_camera_run_takes_publish(fake_loads, monkeypatch, capsys):
    """`--camera` binds the endpoint before it opens the camera (which is missing here)."""
    with Publisher("tcp://127.0.0.1:*") as taken:
        status = cli.main(
            ["--camera", "/dev/no-such-camera", "-m", "m", "--publish", taken.endpoint]
        )
    assert status == 1
    assert error_line(capsys).endswith(
        f"--publish {taken.endpoint}: address already in use (is another program publishing there?)"
    )


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("5555", "not a ZeroMQ endpoint"),
        ("tcp://127.0.0.1:70000", "TCP port 70000 is not 1 to 65535"),
        ("inproc://x", "not reachable from another program"),
    ],
)
def test_a_bad_endpoint_is_a_usage_error(endpoint, says, clip, fake_loads, tmp_path, capsys):
    out = str(tmp_path / "poses.slp")  # the default output's journal would go to the repository
    assert cli.main(["replay", str(clip), "-m", "m", "-o", out, "--publish", endpoint]) == 2
    line = error_line(capsys)
    assert "--publish" in line and endpoint in line and says in line
    assert not fake_loads


def test_an_endpoint_in_use_fails_before_any_work(clip, fake_loads, tmp_path, capsys):
    out = tmp_path / "poses.slp"
    with Publisher("tcp://127.0.0.1:*") as taken:
        argv = ["replay", str(clip), "-m", "m", "-o", str(out), "--publish", taken.endpoint]
        assert cli.main(argv) == 1
    assert error_line(capsys) == (
        f"sleap-live: error: --publish {taken.endpoint}: address already in use "
        "(is another program publishing there?)"
    )
    assert not fake_loads and not out.exists()


def test_a_server_that_cannot_bind_leaves_no_journal_behind(clip, fake_loads, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "poses.slp"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = ["replay", str(clip), "-m", "m", "-o", str(out), "--preview"]
        assert cli.main([*argv, "--preview-port", str(port)]) == 1
    assert "address already in use" in error_line(capsys)
    assert not fake_loads and os.listdir(out.parent) == []


def test_a_journal_that_cannot_be_opened_fails_the_run_before_any_server_binds(
    clip, fake_loads, tmp_path, capsys, monkeypatch
):
    """The pose output's journal is opened before the servers bind (issue 20, item
    3): one that cannot be (here an earlier run's unrecovered frames, as far as its
    name says) fails the run in one line with no server started and no work done."""
    from sleap_live.cli import run as run_command

    journal = tmp_path / "poses.slp.journal"
    journal.write_bytes(b"something else")
    servers: list[str] = []
    for name in ("Publisher", "PreviewServer"):
        real = getattr(run_command, name)

        def made(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            servers.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(run_command, name, made)
    out = tmp_path / "poses.slp"
    argv = ["replay", str(clip), "-m", "m", "-o", str(out), "--publish", "tcp://127.0.0.1:*"]
    assert cli.main([*argv, "--preview", "--preview-port", "0"]) == 1
    line = error_line(capsys)
    assert line.endswith(f"{journal}: exists and is not a sleap-live journal; move it away")
    assert servers == [] and not fake_loads
    assert journal.read_bytes() == b"something else" and not out.exists()


def test_publish_without_the_extra_names_it(clip, fake_loads, tmp_path, monkeypatch, capsys):
    # The run claims its default output's journal (in the working directory) before
    # the publisher fails: not in the repository, where another test may be looking.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "msgpack", None)
    assert cli.main(["replay", str(clip), "-m", "m", "--publish", "tcp://127.0.0.1:*"]) == 1
    line = error_line(capsys)
    assert line.startswith("sleap-live: error: --publish tcp://127.0.0.1:*: publishing poses")
    assert 'pip install "sleap-live[publish]"' in line and not fake_loads


# ----------------------------------------------------------- hostile subscribers


@pytest.fixture
def xsub_peer():
    """A raw XSUB socket that sends subscription messages as it is told, unthrottled."""
    import zmq

    context = zmq.Context()
    peer = context.socket(zmq.XSUB)
    peer.setsockopt(zmq.SNDHWM, 0)
    yield peer
    peer.close(linger=0)
    context.term()


def test_a_subscription_flood_from_one_peer_costs_the_publisher_a_bounded_poll(xsub_peer):
    """One peer repeating its subscription 7,000 times (56 KB, within `MAX_PEER_BYTES`;
    past it the peer is shut down): each poll takes a bounded number of changes, and
    the repeats are one topic, not 7,000 subscribers."""
    peer = xsub_peer
    with Publisher("tcp://127.0.0.1:*") as publisher:
        peer.connect(publisher.endpoint)
        for _ in range(7_000):
            peer.send(b"\x01poses")
        assert publisher.wait_for_subscribers(1, timeout=PATIENCE)
        # Give ZeroMQ the time to pass the whole flood on to the socket.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            publisher.poll_subscriptions()
            assert time.perf_counter() - started < 0.5
            time.sleep(0.05)
        assert publisher.subscribers == 1


def test_subscription_state_is_bounded_in_bytes_and_poses_keep_flowing(xsub_peer, fakes):
    """A peer subscribing 1,000 distinct 300-byte topics (300 KB; 1 M of them took
    the publisher from 162 to 914 MB RSS, and 355 of 1,000 frames) is shut down once
    it has sent `MAX_PEER_BYTES`, which frees what ZeroMQ kept of its topics (it
    tells of each one's last unsubscription); a subscriber of "poses" is kept and
    gets every message sent meanwhile, a record between polls as a run sends them."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    from sleap_live.stream.publish import MAX_PEER_BYTES

    topics = 1000
    assert topics * 300 > 4 * MAX_PEER_BYTES
    context = zmq.Context()
    good = context.socket(zmq.SUB)
    good.setsockopt(zmq.SUBSCRIBE, b"poses")
    peer = xsub_peer
    peer.setsockopt(zmq.RECONNECT_IVL, -1)  # once shut down, it stays away
    events = peer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        with Publisher("tcp://127.0.0.1:*") as publisher:
            good.connect(publisher.endpoint)
            assert publisher.wait_for_subscribers(1, timeout=PATIENCE)
            peer.connect(publisher.endpoint)
            for topic in range(topics):
                peer.send(b"\x01%012d" % topic + b"x" * 288)
            sent = received = 0
            shut_down = False
            deadline = time.monotonic() + PATIENCE
            while time.monotonic() < deadline and not (shut_down and publisher.subscribers == 1):
                record = PoseRecord(sent, 1.0, 2.0, "cam0", fakes.poses_for(sent))
                publisher.send(record, sent, fakes.INFO)
                sent += 1
                publisher.poll_subscriptions(0.01)
                while good.poll(0):
                    good.recv_multipart()
                    received += 1
                while events.poll(0):
                    shut_down |= recv_monitor_message(events)["event"] == zmq.EVENT_DISCONNECTED
            assert shut_down, "the flooding peer was kept"
            assert publisher.subscribers == 1, "the flooding peer's topics are still kept"
            while received < sent and good.poll(int(PATIENCE * 1000)):
                good.recv_multipart()
                received += 1
            assert received == sent
    finally:
        peer.disable_monitor()
        events.close(linger=0)
        good.close(linger=0)
        context.term()


def test_a_poll_takes_a_bounded_number_of_subscription_changes(xsub_peer):
    from sleap_live.stream.publish import SUBSCRIPTION_CHANGES_PER_POLL

    peer = xsub_peer
    with Publisher("tcp://127.0.0.1:*") as publisher:
        peer.connect(publisher.endpoint)
        for topic in range(1000):
            peer.send(b"\x01poses/" + str(topic).encode())
        assert publisher.wait_for_subscribers(1, timeout=PATIENCE)
        # However fast the 1,000 reach the socket (a busy machine delays them), no
        # poll takes more than its bound, so taking them all needs polls enough.
        taken = [publisher.subscribers]
        deadline = time.monotonic() + PATIENCE
        while taken[-1] < 1000 and time.monotonic() < deadline:
            taken.append(publisher.poll_subscriptions(0.1))
        assert taken[-1] == 1000
        steps = np.diff(taken)
        assert steps.max() <= SUBSCRIPTION_CHANGES_PER_POLL, steps
        assert len(steps) >= (1000 - taken[0]) / SUBSCRIPTION_CHANGES_PER_POLL


def test_an_oversized_subscription_disconnects_its_peer(xsub_peer):
    peer = xsub_peer
    with Publisher("tcp://127.0.0.1:*") as publisher:
        peer.connect(publisher.endpoint)
        peer.send(b"\x01" + b"p" * 100_000)
        assert not publisher.wait_for_subscribers(1, timeout=1.0)


def test_connections_past_the_cap_are_shut_down_when_accepted_without_any_poll():
    """A publisher nobody polls (no pose sent yet, no subscription looked at): the
    connections past `MAX_CONNECTIONS` are shut down as ZeroMQ accepts them, and
    those within it stay."""

    from sleap_live.stream.publish import MAX_CONNECTIONS

    extra = 5
    with Publisher("tcp://127.0.0.1:*") as publisher:
        port = int(publisher.endpoint.rsplit(":", 1)[1])
        peers = [
            socket.create_connection(("127.0.0.1", port), PATIENCE)
            for _ in range(MAX_CONNECTIONS + extra)
        ]
        for peer in peers:
            peer.setblocking(False)
        ended: set[int] = set()
        # Well within ZeroMQ's 30 s handshake limit, after which it ends them all.
        deadline = time.monotonic() + 10.0
        while len(ended) < extra and time.monotonic() < deadline:
            for index, peer in enumerate(peers):
                try:
                    while index not in ended:  # ZeroMQ's greeting, then the end
                        if not peer.recv(4096):
                            ended.add(index)
                except (BlockingIOError, ConnectionResetError) as error:
                    if isinstance(error, ConnectionResetError):
                        ended.add(index)
            time.sleep(0.05)
        assert len(ended) == extra
        for peer in peers:
            peer.close()
    assert WATCHER not in [thread.name for thread in threading.enumerate()]


def test_a_publisher_let_go_of_without_close_ends_its_connection_watcher():
    import gc

    publisher = Publisher("tcp://127.0.0.1:*")
    assert WATCHER in [thread.name for thread in threading.enumerate()]
    del publisher
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # pyzmq's, for the open socket
        gc.collect()
    deadline = time.monotonic() + PATIENCE
    while WATCHER in [t.name for t in threading.enumerate()] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert WATCHER not in [thread.name for thread in threading.enumerate()]


def test_an_ipc_socket_is_never_connectable_by_others(short_dir, monkeypatch):
    """Right after ZeroMQ binds (before anything else can run), the endpoint's path
    is either absent or a 0600 socket, and where ZeroMQ bound can be reached by its
    owner only: with the usual umask ZeroMQ makes socket files 0755."""
    import stat

    import zmq

    os.chmod(short_dir, 0o755)  # a folder others may look into
    path = Path(short_dir) / "poses"
    seen: list[tuple[int | None, int]] = []
    bind = zmq.Socket.bind

    def watched_bind(self, address: str):  # type: ignore[no-untyped-def]
        bound = bind(self, address)
        where = Path(address[len("ipc://") :])
        mode = path.lstat().st_mode & 0o777 if path.exists() else None
        # What another user needs to connect: a way into the folder, write on the file.
        reachable = where.parent.stat().st_mode & 0o011 and where.stat().st_mode & 0o022
        seen.append((mode, reachable))
        return bound

    monkeypatch.setattr(zmq.Socket, "bind", watched_bind)
    umask = os.umask(0o022)
    try:
        publisher = Publisher(f"ipc://{path}")
    finally:
        os.umask(umask)
    with publisher:
        assert seen and all(mode in (None, 0o600) and not reachable for mode, reachable in seen)
        assert stat.S_ISSOCK(path.lstat().st_mode) and path.lstat().st_mode & 0o777 == 0o600
        assert publisher.endpoint == f"ipc://{path}"
        assert os.listdir(short_dir) == ["poses"]  # the private folder is gone
        context = zmq.Context()
        subscriber = context.socket(zmq.SUB)
        subscriber.connect(publisher.endpoint)
        subscriber.subscribe(b"poses")
        assert publisher.wait_for_subscribers(1, timeout=PATIENCE)
        subscriber.close(linger=0)
        context.term()
    assert not path.exists()  # removed on close, as ZeroMQ would have


@pytest.mark.skipif(sys.platform != "linux", reason="abstract sockets are Linux's")
def test_an_abstract_ipc_endpoint_stays_abstract(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = f"ipc://@sleap-live-test-{os.getpid()}"
    with Publisher(name) as publisher:
        assert publisher.endpoint == name
        assert os.listdir(tmp_path) == []  # no socket file, no private folder


def test_an_ipc_endpoint_replaces_a_stale_socket_but_no_other_file(short_dir):
    stale = Path(short_dir) / "stale"
    with socket.socket(socket.AF_UNIX) as left_behind:
        left_behind.bind(str(stale))
    with Publisher(f"ipc://{stale}"):
        assert stale.lstat().st_mode & 0o777 == 0o600
    kept = Path(short_dir) / "notes.txt"
    kept.write_text("not a socket")
    with pytest.raises(PublishError, match="a file that is not a socket is there"):
        Publisher(f"ipc://{kept}")
    assert kept.read_text() == "not a socket"
    assert sorted(os.listdir(short_dir)) == ["notes.txt"]


@pytest.mark.parametrize(
    ("endpoint", "warned"),
    [
        ("tcp://*:5555", True),
        ("tcp://0.0.0.0:5555", True),
        ("tcp://eth0:5555", True),
        ("tcp://127.0.0.1:5555", False),
        ("tcp://localhost:5555", False),
        ("tcp://[::1]:5555", False),
        ("ipc:///tmp/poses", False),
        ("ipc://@poses", True),
    ],
)
def test_publishing_beyond_loopback_is_warned_of_in_one_line(endpoint, warned):
    from sleap_live.stream.publish import exposure_warning

    warning = exposure_warning(endpoint)
    assert (warning is not None) == warned
    if warning is not None:
        assert endpoint in warning and "\n" not in warning


# A publishing run with a .slp output under a 1,024-descriptor soft limit: prints
# its port, replays 300 frames at 30 fps, prints what it processed.
LIMITED_RUN = """
import resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from sleap_live.stream import OutputOptions, Pipeline, Publisher
from tests.stream import fakes
with Publisher("tcp://127.0.0.1:*") as publisher:
    print(publisher.endpoint.rsplit(":", 1)[1], flush=True)
    source = fakes.FakeSource(300, paced=True, fps=30.0)
    pipeline = Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(Path(sys.argv[1])))
    pipeline.attach(publisher)
    stats = pipeline.run()
print(stats.frames_processed, stats.frames_dropped, flush=True)
"""


def test_idle_connections_past_the_descriptor_limit_cost_the_publishing_run_nothing(
    tmp_path, fakes
):
    """1,100 idle connections to the publisher of a run whose soft limit is 1,024
    descriptors: the run processes and saves every frame, and logs one line."""
    fakes.assert_idle_connections_cost_the_run_nothing(LIMITED_RUN, tmp_path / "poses.slp")
