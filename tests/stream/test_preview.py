"""The browser preview without a browser: its snapshots, its endpoints over HTTP and
websocket on 127.0.0.1, its command-line options, and that it never holds up a run.

The page itself, in a real headless chromium, is tested in test_preview_browser.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import attrs
import numpy as np
import pytest
import sleap_io as sio
from PIL import Image

from sleap_live import cli
from sleap_live.engines.export import web as web_export
from sleap_live.engines.types import FrameMasks
from sleap_live.stream import OutputOptions, Pipeline, preview_messages
from sleap_live.stream import preview as preview_module
from sleap_live.stream.errors import PreviewError
from sleap_live.stream.preview import LatestFrame, PreviewServer
from sleap_live.stream.preview_messages import Snapshots, encode_jpeg, host_image, stats_message
from sleap_live.stream.ring import RingBuffer
from sleap_live.stream.stats import PipelineStats
from sleap_live.stream.types import PoseRecord
from tests.stream import fakes as stream_fakes

# Real seconds a test waits for the server or a run: a hang guard only.
PATIENCE = 30.0
WEB_PAGE = Path(web_export.__file__).parent / "web_page"


def fetch(url: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=PATIENCE) as response:
        return response.read(), dict(response.headers)


def stats_of(processed: int) -> PipelineStats:
    return stream_fakes.pipeline_stats(
        policy="live",
        batch_size=1,
        elapsed=2.5,
        frames_total=None,
        frames_captured=processed + 3,
        frames_processed=processed,
        frames_dropped=3,
        fps=29.5,
        capture_fps=30.0,
        latency_p50=0.012,
        engine_latency_p50=0.01,
        engine_latency_p99=0.02,
        queue_depths={"frames": 1},
        instances_last_frame=2,
    )


def pixel_level(jpeg: bytes) -> int:
    """The gray level in the middle of a JPEG (fakes' frames are one level but for 2 pixels)."""
    image = np.asarray(Image.open(io.BytesIO(jpeg)))
    return int(image[image.shape[0] // 2, image.shape[1] // 2])


def test_a_snapshot_pairs_the_newest_frame_with_its_own_poses(fakes):
    ring = RingBuffer(8, 2, 2)
    frames = LatestFrame()
    snapshots = Snapshots(ring, frames, lambda: stats_of(ring.written))
    assert snapshots.take().frame is None  # nothing emitted yet

    for index in range(3):
        record = PoseRecord(index, 0.0, 0.1, "cam", fakes.poses_for(index))
        frames.put(ring.write(record), fakes.frame_image(index, (24, 32, 1)))
    snapshot = snapshots.take()

    assert snapshot.frame is not None and snapshot.jpeg is not None
    assert (snapshot.frame["frame_index"], snapshot.frame["sequence"]) == (2, 2)
    assert (snapshot.frame["width"], snapshot.frame["height"]) == (32, 24)
    poses = fakes.poses_for(2)
    assert [i["points"] for i in snapshot.frame["instances"]] == poses.points.tolist()
    assert [i["track"] for i in snapshot.frame["instances"]] == [0, 1]
    assert abs(pixel_level(snapshot.jpeg) - fakes.fill_of(2)) <= 3
    assert snapshot.stats["frames_processed"] == 3
    # The same frame is not encoded again; the stats are fresh every time.
    ring.write(PoseRecord(3, 0.0, 0.1, "cam", fakes.poses_for(3)))
    again = snapshots.take()
    assert again.jpeg is snapshot.jpeg and again.stats["frames_processed"] == 4
    assert again.tick == snapshot.tick + 1 and not again.finished


def test_missing_points_are_null_and_the_message_is_strict_json(fakes):
    ring, frames = RingBuffer(4, 2, 2), LatestFrame()
    poses = fakes.poses_for(4)
    poses.points[0, 1] = np.nan
    frames.put(ring.write(PoseRecord(4, 0.0, 0.1, "cam", poses)), fakes.frame_image(4))
    ring.close()
    snapshot = Snapshots(ring, frames, lambda: stats_of(1)).take()

    message = json.loads(snapshot.message())
    assert message["frame"]["instances"][0]["points"] == [[4.0, 0.0], None]
    assert message["finished"] is True
    assert json.loads(snapshot.message(with_frame=False))["frame"] is None


# A rule on while the fake's head (x = frame index) is in x 5..20, kept through the
# empty frames (every third); and a region no rule reads.
ZONE = {
    "regions": {
        "zone": {"rectangle": [5, -1, 20, 100]},
        "dish": {"ellipse": {"center": [16, 12], "radii": [6, 4], "angle": 30}},
        "tri": {"polygon": [[0, 0], [8, 0], [0, 8]]},
    },
    "rules": {
        "in_zone": {"when": {"in_region": {"region": "zone", "node": "head"}}, "missing": "keep"}
    },
}


def test_the_experiment_message_gives_each_region_in_frame_pixels_and_its_rules():
    from sleap_live.stream.experiment.experiment import experiment_from_dict

    message = preview_messages.experiment_message(experiment_from_dict(ZONE))
    assert json.loads(json.dumps(message)) == {
        "rules": ["in_zone"],
        "regions": [
            {"name": "zone", "shape": "rectangle", "x0": 5, "y0": -1, "x1": 20, "y1": 100,
             "rules": ["in_zone"]},
            {"name": "dish", "shape": "ellipse", "cx": 16, "cy": 12, "rx": 6, "ry": 4,
             "angle": 30, "rules": []},
            {"name": "tri", "shape": "polygon", "vertices": [[0, 0], [8, 0], [0, 8]],
             "rules": []},
        ],
    }  # fmt: skip
    assert preview_messages.experiment_message(None) is None


def test_a_frame_message_carries_its_records_rule_states(fakes):
    ring, frames = RingBuffer(4, 2, 2), LatestFrame()
    record = PoseRecord(4, 0.0, 0.1, "cam", fakes.poses_for(4), rules_on=(True, False))
    frames.put(ring.write(record), fakes.frame_image(4))
    frame = Snapshots(ring, frames, lambda: stats_of(1), rules=("a", "b")).take().frame
    assert frame is not None and frame["rules"] == {"a": True, "b": False}
    # Without an experiment: no rules.
    frames.put(ring.write(PoseRecord(5, 0.0, 0.1, "cam", fakes.poses_for(5))), fakes.frame_image(5))
    assert Snapshots(ring, frames, lambda: stats_of(2)).take().frame["rules"] == {}


def test_a_frame_message_carries_each_mask_as_runs_at_its_own_scale(fakes):
    # A segmentation model's mask at the output stride (84 x 100 for a 168 x 200 frame):
    # its runs, row by row, give back its pixels, and a blob costs a few hundred bytes.
    mask = np.zeros((84, 100), bool)
    mask[20:50, 30:70] = True
    mask[0, 0] = True  # runs start with the background's, here of none
    found = FrameMasks((mask,), np.array([0.75], np.float32), np.array([[0.5, 0.5]]))
    poses = attrs.evolve(fakes.poses_for(0), masks=found)
    frame = preview_messages.frame_message(0, PoseRecord(0, 0.0, 0.1, "cam", poses), (168, 200))
    (sent,) = json.loads(json.dumps(frame, allow_nan=False))["masks"]
    assert {k: sent[k] for k in ("rows", "columns", "scale", "score")} == {
        "rows": 84, "columns": 100, "scale": [0.5, 0.5], "score": 0.75
    }  # fmt: skip
    runs = sent["runs"]
    assert runs[:2] == [0, 1] and sum(runs) == mask.size
    pixels = np.repeat(np.arange(len(runs)) % 2 == 1, runs).reshape(mask.shape)
    assert (pixels == mask).all() and len(json.dumps(sent)) < 600
    assert (
        preview_messages.frame_message(
            0, PoseRecord(0, 0.0, 0.1, "cam", fakes.poses_for(0)), (168, 200)
        )["masks"]
        == []
    )


def test_the_stats_sent_are_the_dashboards_figures():
    stats = stats_of(10)
    message = stats_message(stats)
    for name, value in message.items():
        assert value == getattr(stats, name), name
    assert {"fps", "latency_p50", "latency_p99", "frames_dropped"} <= set(message)
    json.dumps(message, allow_nan=False)


def test_gray_and_rgb_frames_encode():
    rgb = np.zeros((10, 12, 3), np.uint8)
    rgb[..., 0] = 200
    decoded = np.asarray(Image.open(io.BytesIO(encode_jpeg(rgb))))
    assert decoded.shape == (10, 12, 3) and abs(int(decoded[5, 6, 0]) - 200) <= 3
    gray = np.full((10, 12, 1), 90, np.uint8)
    assert abs(pixel_level(encode_jpeg(gray)) - 90) <= 3


def test_a_tensor_frame_is_copied_to_the_host():
    """Frames from a GPU decoder are tensors; the preview copies the one it sends."""
    torch = pytest.importorskip("torch")
    image = torch.full((4, 6, 1), 7, dtype=torch.uint8)
    host = host_image(image)
    assert isinstance(host, np.ndarray) and host.shape == (4, 6, 1) and host[0, 0, 0] == 7


def held_run(
    fakes, n_frames: int = 30, hang_at: int = 10, token: str | None = None, **pipeline_options
):
    """A pipeline serving a preview whose source hangs before `hang_at` until released."""
    source = fakes.FakeSource(n_frames, hang_at=hang_at, shape=(24, 32, 1))
    server = PreviewServer(port=0, token=token)
    pipeline = Pipeline(source, fakes.FakeRunner(), batch_size=1, **pipeline_options)
    pipeline.attach(server)
    return source, server, pipeline


def test_the_endpoints_serve_the_page_the_poses_the_frame_and_the_stats(fakes):
    source, server, pipeline = held_run(fakes)
    with pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        page, headers = fetch(server.url)
        assert headers["Content-Type"].startswith("text/html")
        assert b"new WebSocket(`ws://${location.host}/ws${location.search}`)" in page

        body, _ = fetch(server.url + "snapshot.json")
        snapshot = json.loads(body)
        frame = snapshot["frame"]
        assert frame["frame_index"] == 9
        assert [i["points"] for i in frame["instances"]] == fakes.poses_for(9).points.tolist()
        assert snapshot["skeleton"] == {
            "nodes": ["head", "tail"],
            "edges": [[0, 1]],
            "tracks": ["left", "right"],
            "palette": preview_messages.skeleton_message(fakes.INFO)["palette"],
        }
        # While the source hangs the figures stand still: they are the pipeline's.
        assert snapshot["stats"] == stats_message(pipeline.stats) | {
            "elapsed": snapshot["stats"]["elapsed"],
            "fps": snapshot["stats"]["fps"],
            "capture_fps": snapshot["stats"]["capture_fps"],
            "running": True,
        }
        jpeg, headers = fetch(server.url + "frame.jpg")
        assert headers["Content-Type"] == "image/jpeg" and headers["X-Frame-Index"] == "9"
        assert abs(pixel_level(jpeg) - fakes.fill_of(9)) <= 3
        source.release.set()
        pipeline.join(PATIENCE)
    # The address is released with the pipeline.
    with pytest.raises(urllib.error.URLError):
        fetch(server.url)


def test_a_run_with_an_experiment_sends_its_regions_and_each_frames_rule_states(fakes):
    from sleap_live.stream.experiment.experiment import experiment_from_dict

    experiment = experiment_from_dict(ZONE)
    source, server, pipeline = held_run(fakes, experiment=experiment)
    with pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        snapshot = json.loads(fetch(server.url + "snapshot.json")[0])
        hello = asyncio.run(hello_of(server.url))
        source.release.set()
        pipeline.join(PATIENCE)
    expected = json.loads(json.dumps(preview_messages.experiment_message(experiment)))
    assert snapshot["experiment"] == expected == hello["experiment"]
    # Frame 9 is empty: the rule stays on from frame 5 (missing: keep).
    assert snapshot["frame"]["frame_index"] == 9 and snapshot["frame"]["rules"] == {"in_zone": True}


async def hello_of(url: str) -> dict:
    """The first message a websocket client gets."""
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url.replace("http", "ws") + "ws") as ws,
    ):
        return await ws.receive_json(timeout=PATIENCE)


async def watch(url: str, *, leave_after: int | None = None) -> list[tuple[dict, bytes | None]]:
    """Updates a websocket client gets: (text message, the JPEG that followed it or None);
    with `leave_after`, it closes after that many frames."""
    import aiohttp

    updates: list[tuple[dict, bytes | None]] = []
    frames = 0
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url.replace("http", "ws") + "ws") as ws,
    ):
        hello = await ws.receive_json(timeout=PATIENCE)
        assert hello["skeleton"]["nodes"] == ["head", "tail"]
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                updates.append((json.loads(message.data), None))
            elif message.type == aiohttp.WSMsgType.BINARY:
                assert updates[-1][0]["frame"] is not None and updates[-1][1] is None
                updates[-1] = (updates[-1][0], message.data)
                frames += 1
                if frames == leave_after:
                    break
    return updates


def test_the_websocket_sends_each_jpeg_after_its_poses_and_ends_with_the_run(fakes):
    source, server, pipeline = held_run(fakes, n_frames=40, hang_at=None)
    source.decode_delay = 0.02  # the run lasts long enough to send several frames
    with pipeline:
        updates = asyncio.run(watch(server.url))
        pipeline.join(PATIENCE)
    shown = [(message["frame"], jpeg) for message, jpeg in updates if message["frame"]]
    assert len(shown) >= 2
    for frame, jpeg in shown:
        assert jpeg is not None
        assert abs(pixel_level(jpeg) - fakes.fill_of(frame["frame_index"])) <= 3
        expected = fakes.poses_for(frame["frame_index"]).points.tolist()
        assert [i["points"] for i in frame["instances"]] == expected
    indices = [frame["frame_index"] for frame, _ in shown]
    assert indices == sorted(set(indices))
    last, _ = updates[-1]
    assert last["finished"] and [m["finished"] for m, _ in updates].count(True) == 1
    assert last["stats"]["frames_processed"] == 40 == pipeline.stats.frames_processed
    assert last["stats"]["latency_p50"] == pipeline.stats.latency_p50


def test_a_page_leaving_mid_run_costs_the_run_nothing(fakes, tmp_path):
    source, server, pipeline = held_run(fakes, outputs=OutputOptions(tmp_path / "poses.slp"))
    with pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        updates = asyncio.run(watch(server.url, leave_after=1))
        assert updates[-1][1] is not None
        source.release.set()
        assert pipeline.join(PATIENCE)
    assert pipeline.stats.frames_processed == 30
    assert len(sio.load_slp(str(tmp_path / "poses.slp"), open_videos=False)) == 30


def test_a_stuck_encoder_never_holds_up_the_engine(fakes, monkeypatch):
    """The preview's encoding blocks (a page is connected): every frame is still processed."""
    encoding, release = threading.Event(), threading.Event()
    encode = preview_messages.encode_jpeg

    def stuck(image, quality=preview_messages.JPEG_QUALITY):
        encoding.set()
        release.wait(PATIENCE)
        return encode(image, quality)

    monkeypatch.setattr(preview_messages, "encode_jpeg", stuck)
    source, server, pipeline = held_run(fakes, hang_at=1)
    with pipeline:
        page = threading.Thread(target=asyncio.run, args=(watch(server.url),), daemon=True)
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 1, "the first frame")
        page.start()
        fakes.wait_for(encoding.is_set, "the preview to encode")
        source.release.set()
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 30, "every frame")
        release.set()
        assert pipeline.join(PATIENCE)
    page.join(PATIENCE)


def test_a_page_that_stops_reading_cannot_hold_up_the_end_of_the_run(fakes, monkeypatch):
    """A client that never reads: the sends to it block once the socket's buffers are full
    (1 MB "frames" fill them in a few sends); the run still ends, and the preview with it."""
    monkeypatch.setattr(preview_messages, "encode_jpeg", lambda image, quality=80: bytes(1 << 20))
    source, server, pipeline = held_run(fakes, n_frames=60, hang_at=None)
    source.decode_delay = 0.02
    with pipeline, socket.create_connection(("127.0.0.1", server.port)) as stuck:
        stuck.sendall(
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        assert pipeline.join(PATIENCE)
    assert pipeline.stats.frames_processed == 60


def test_a_failing_preview_is_logged_and_the_run_goes_on(fakes, monkeypatch, caplog):
    def broken(image, quality=80):
        raise RuntimeError("encoder broke")

    monkeypatch.setattr(preview_messages, "encode_jpeg", broken)
    _, _, pipeline = held_run(fakes, hang_at=None)
    with caplog.at_level(logging.ERROR, logger="sleap_live.stream.preview"), pipeline:
        assert pipeline.join(PATIENCE)
    assert pipeline.stats.frames_processed == 30
    [entry] = caplog.records
    assert "the run goes on without it" in entry.getMessage()
    assert "encoder broke" in str(entry.exc_info[1])


def test_a_port_in_use_is_one_line(fakes):
    with PreviewServer(port=0) as taken:
        with pytest.raises(PreviewError) as raised:
            PreviewServer(port=taken.port)
    assert str(raised.value) == (
        f"127.0.0.1:{taken.port}: address already in use (is another preview running? "
        "--preview-port 0 takes any free port)"
    )


def test_an_unusable_host_or_port_is_refused():
    with pytest.raises(PreviewError, match=r"no-such-host\.invalid:0: unknown host"):
        PreviewServer("no-such-host.invalid", 0)
    with pytest.raises(ValueError, match="port must be 0 to 65535"):
        PreviewServer(port=70000)
    with pytest.raises(ValueError, match="max_fps"):
        PreviewServer(port=0, max_fps=0)


def test_a_server_serves_once(fakes):
    server = PreviewServer(port=0)
    server.close()
    with pytest.raises(PreviewError, match="closed or served already"):
        server.serve(RingBuffer(4, 2, 2), LatestFrame(), lambda: stats_of(0), fakes.INFO)


# ------------------------------------------------------------------ command line


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("command", ["run", "replay"])
def test_preview_on_run_and_replay_prints_its_address(
    command, clip, fake_loads, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where the poses go without -o
    argv = [command, str(clip), "-m", "m", "-q", "--preview", "--preview-port", "0"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert err.startswith("preview on http://127.0.0.1:")
    # A replay keeps the clip's pace and drops what a busy machine cannot keep up with.
    assert re.search(r"\b40 frames in" if command == "run" else r"\b\d+ frames in", err), err


def test_a_preview_beyond_loopback_prints_its_token_and_a_warning(
    clip, fake_loads, capsys, tmp_path, monkeypatch
):
    # As bound on 0.0.0.0, while listening on 127.0.0.1 only.
    monkeypatch.setattr(preview_module, "is_loopback", lambda host: False)
    monkeypatch.chdir(tmp_path)
    argv = ["replay", str(clip), "-m", "m", "-q", "--preview", "--preview-port", "0"]
    assert cli.main(argv) == 0
    address, warning, *_ = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"preview on http://127\.0\.0\.1:\d+/\?token=[\w-]{22}", address)
    assert warning.startswith("warning: the preview on http://127.0.0.1:")
    assert "can be reached from other machines" in warning


def test_a_preview_port_in_use_fails_before_any_work(clip, fake_loads, tmp_path, capsys):
    out = tmp_path / "poses.slp"
    with PreviewServer(port=0) as taken:
        argv = ["replay", str(clip), "-m", "m", "-o", str(out), "--preview"]
        assert cli.main([*argv, "--preview-port", str(taken.port)]) == 1
    assert error_line(capsys) == (
        f"sleap-live: error: --preview: 127.0.0.1:{taken.port}: address already in use "
        "(is another preview running? --preview-port 0 takes any free port)"
    )
    assert not fake_loads and not out.exists()


def test_a_camera_run_takes_preview(fake_loads, capsys):
    """`--camera` binds the preview before it opens the camera (which is missing here)."""
    with PreviewServer(port=0) as taken:
        argv = ["--camera", "/dev/no-such-camera", "-m", "m", "--preview"]
        assert cli.main([*argv, "--preview-port", str(taken.port)]) == 1
    assert "--preview: 127.0.0.1:" in error_line(capsys)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--preview-port", "8000"], "--preview-host and --preview-hold apply with --preview"),
        (["--preview-host", "0.0.0.0"], "--preview-host and --preview-hold apply with --preview"),
        (["--no-preview-hold"], "--preview-port, --preview-host and --preview-hold apply with"),
        (["--preview", "--preview-port", "70000"], "must be 0 to 65535, got 70000"),
    ],
)
def test_preview_options_are_checked(options, says, clip, fake_loads, tmp_path, capsys):
    # An output of its own: the default one, in the working directory, is the repository.
    out = str(tmp_path / "poses.slp")
    assert cli.main(["replay", str(clip), "-m", "m", "-o", out, *options]) == 2
    assert says in error_line(capsys)
    assert not fake_loads


def test_preview_without_the_extra_names_it(clip, fake_loads, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "aiohttp", None)
    out = str(tmp_path / "poses.slp")  # the default output's journal would go to the repository
    argv = ["replay", str(clip), "-m", "m", "-o", out, "--preview", "--preview-port", "0"]
    assert cli.main(argv) == 1
    assert error_line(capsys) == (
        "sleap-live: error: --preview: the preview needs aiohttp and Pillow (aiohttp is "
        'missing): pip install "sleap-live[preview]"'
    )
    assert not fake_loads


def test_the_default_address_is_this_machine_only():
    assert (preview_module.DEFAULT_HOST, preview_module.DEFAULT_PORT) == ("127.0.0.1", 8765)
    with socket.create_server(("127.0.0.1", 0)) as probe:
        free = probe.getsockname()[1]
    with PreviewServer(port=free) as server:
        assert server.url == f"http://127.0.0.1:{free}/"


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
    b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: " + b"y" * 70_000 + b"\r\n\r\n",
    b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: a\r\n\r\nzz\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello
]


def test_each_malformed_request_is_one_log_line(fakes, caplog, capfd):
    # Issue #20: each printed a traceback.
    source, server, pipeline = held_run(fakes)
    with caplog.at_level(logging.DEBUG), pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        for request in MALFORMED:
            with socket.create_connection((server.host, server.port), timeout=PATIENCE) as peer:
                peer.sendall(request)
                peer.shutdown(socket.SHUT_WR)
                while peer.recv(65536):
                    pass
        fetch(server.url)  # the preview still serves
        source.release.set()
        pipeline.join(PATIENCE)
    noted = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in noted), noted
    assert len([r for r in noted if "malformed request" in r.getMessage()]) == len(MALFORMED)
    assert "Traceback" not in capfd.readouterr().err


# ------------------------------------------------------------------ who may look


def status_of(port: int, path: str, headers: dict[str, str]) -> int:
    """The status of a GET of `path` on 127.0.0.1:`port` with exactly these headers."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        connection.putrequest("GET", path, skip_host=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


async def upgrade_status(url: str, origin: str) -> int:
    """The status a websocket upgrade to `url` with `origin` gets (101 when accepted)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, origin=origin) as ws:
                await ws.receive_json(timeout=PATIENCE)
                return 101
        except aiohttp.WSServerHandshakeError as error:
            return error.status


def test_a_foreign_host_or_origin_gets_403(fakes):
    source, server, pipeline = held_run(fakes)
    port = server.port
    with pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        for name in ("127.0.0.1", "localhost", "[::1]"):
            assert status_of(port, "/frame.jpg", {"Host": f"{name}:{port}"}) == 200
        # DNS rebinding: the attacker's name, resolved to 127.0.0.1.
        assert status_of(port, "/frame.jpg", {"Host": f"attacker.example:{port}"}) == 403
        assert status_of(port, "/snapshot.json", {"Host": "127.0.0.1:1"}) == 403
        own = {"Host": f"127.0.0.1:{port}"}
        assert status_of(port, "/frame.jpg", own | {"Origin": "http://evil.example"}) == 403
        assert status_of(port, "/frame.jpg", own | {"Origin": f"http://127.0.0.1:{port}"}) == 200
        ws = f"ws://127.0.0.1:{port}/ws"
        assert asyncio.run(upgrade_status(ws, "http://evil.example")) == 403
        assert asyncio.run(upgrade_status(ws, f"http://127.0.0.1:{port}")) == 101
        source.release.set()
        assert pipeline.join(PATIENCE)


def test_a_token_is_needed_on_every_request_and_the_address_carries_it(fakes):
    source, server, pipeline = held_run(fakes, token="s3cret")
    port = server.port
    assert server.url == f"http://127.0.0.1:{port}/?token=s3cret"
    own = {"Host": f"127.0.0.1:{port}"}
    with pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        assert status_of(port, "/", own) == 403
        assert status_of(port, "/frame.jpg?token=wrong", own) == 403
        assert status_of(port, "/?token=s3cret", own) == 200
        assert status_of(port, "/frame.jpg?token=s3cret", own) == 200
        ws = f"ws://127.0.0.1:{port}/ws"
        origin = f"http://127.0.0.1:{port}"
        assert asyncio.run(upgrade_status(ws, origin)) == 403
        assert asyncio.run(upgrade_status(ws + "?token=s3cret", origin)) == 101
        source.release.set()
        assert pipeline.join(PATIENCE)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
    ],
)
def test_only_loopback_addresses_go_without_a_token(host, loopback):
    assert preview_module.is_loopback(host) == loopback


def test_connections_past_the_maximum_are_closed_and_logged_once(fakes, caplog):
    source, server, pipeline = held_run(fakes)
    maximum = preview_module.MAX_CONNECTIONS
    idle: list[socket.socket] = []
    with caplog.at_level(logging.WARNING, logger=preview_module.__name__), pipeline:
        fakes.wait_for(lambda: pipeline.stats.frames_processed == 10, "10 frames")
        try:
            for _ in range(maximum + 20):
                idle.append(socket.create_connection(("127.0.0.1", server.port), PATIENCE))
            # The server closes each one past the maximum: the peer reads the end.
            for extra in idle[maximum:]:
                extra.settimeout(PATIENCE)
                assert extra.recv(1) == b""
        finally:
            for connection in idle:
                connection.close()
        fakes.wait_for(
            lambda: status_of(server.port, "/", {"Host": f"127.0.0.1:{server.port}"}) == 200,
            "a free slot",
        )
        source.release.set()
        assert pipeline.join(PATIENCE)
    refused = [r for r in caplog.records if "connections at most" in r.getMessage()]
    assert len(refused) == 1


# A run with a preview and a .slp output under a 1,024-descriptor soft limit:
# prints its preview port, replays 300 frames at 30 fps, prints what it processed.
LIMITED_RUN = """
import resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.preview import PreviewServer
from tests.stream import fakes
server = PreviewServer(port=0)
print(server.port, flush=True)
source = fakes.FakeSource(300, paced=True, fps=30.0, shape=(24, 32, 1))
pipeline = Pipeline(source, fakes.FakeRunner(), outputs=OutputOptions(Path(sys.argv[1])))
pipeline.attach(server)
stats = pipeline.run()
print(stats.frames_processed, stats.frames_dropped, flush=True)
"""


def test_idle_connections_past_the_descriptor_limit_cost_the_run_nothing(tmp_path, fakes):
    """1,100 idle connections to the preview of a run whose soft limit is 1,024
    descriptors: the run processes and saves every frame, and logs a line, not a
    traceback per refused connection."""
    fakes.assert_idle_connections_cost_the_run_nothing(LIMITED_RUN, tmp_path / "poses.slp")


def test_a_failing_accept_is_logged_once_in_one_line(caplog):
    """As asyncio reports each accept that finds no descriptor left (EMFILE)."""
    import errno

    with PreviewServer(port=0) as server:

        async def fail_accepts() -> None:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(server._loop_error)
            for _ in range(100):
                loop.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(errno.EMFILE, "Too many open files"),
                    }
                )

        with caplog.at_level(logging.WARNING, logger=preview_module.__name__):
            asyncio.run(fail_accepts())
    [line] = [record.getMessage() for record in caplog.records]
    assert line.endswith("cannot accept connections: Too many open files (said once)")
    assert all(record.exc_info is None for record in caplog.records)


# ------------------------------------------------------------ after the run (issue 24)


def test_a_lingering_server_holds_the_last_frame_and_figures_until_stopped(fakes):
    source = fakes.FakeSource(12, shape=(24, 32, 1))
    server = PreviewServer(port=0, linger=True)
    pipeline = Pipeline(source, fakes.FakeRunner(), batch_size=1)
    pipeline.attach(server)
    pipeline.run()
    assert server.can_hold
    stop = threading.Event()
    holding = threading.Thread(target=server.hold, args=(stop,))
    holding.start()
    try:
        # A page opened after the run: the last frame, its poses and the final figures.
        snapshot = json.loads(fetch(server.url + "snapshot.json")[0])
        assert snapshot["finished"] and snapshot["frame"]["frame_index"] == 11
        assert snapshot["stats"]["frames_processed"] == 12 and not snapshot["stats"]["running"]
        jpeg, headers = fetch(server.url + "frame.jpg")
        assert headers["X-Frame-Index"] == "11" and abs(pixel_level(jpeg) - fakes.fill_of(11)) <= 3
        updates = asyncio.run(watch(server.url))
        [(message, frame_jpeg)] = updates
        assert message["finished"] and message["frame"]["frame_index"] == 11 and frame_jpeg
    finally:
        stop.set()
        holding.join(PATIENCE)
    assert not holding.is_alive() and not server.can_hold
    with pytest.raises(urllib.error.URLError):
        fetch(server.url)


def test_a_server_without_linger_releases_its_address_with_the_run(fakes):
    server = PreviewServer(port=0)
    pipeline = Pipeline(fakes.FakeSource(3, shape=(24, 32, 1)), fakes.FakeRunner(), batch_size=1)
    pipeline.attach(server)
    pipeline.run()
    assert not server.can_hold
    with pytest.raises(PreviewError, match="has no ended run to show"):
        server.hold()


def test_the_page_draws_in_the_colours_of_render_and_overlays(fakes):
    from sleap_io.rendering.colors import PALETTES

    from sleap_live.stream.outputs.overlay import OverlayStyle

    message = preview_messages.skeleton_message(fakes.INFO)
    expected = [f"#{r:02x}{g:02x}{b:02x}" for r, g, b in PALETTES[OverlayStyle().palette]]
    assert message["palette"] == expected
    script = (Path(preview_module.__file__).parent / "preview.html").read_text()
    drawing = (WEB_PAGE / preview_module.SKELETON_SCRIPT).read_text()
    # The page draws with the web export's skeleton.js (inlined where it names it),
    # in the palette the server sends.
    assert f"/* {preview_module.SKELETON_SCRIPT} */" in script
    assert "drawSkeletons(context, frame.instances, skeleton.edges, skeleton.palette" in script
    assert "palette[key % palette.length]" in drawing
    # no palette of its own (it had red, green, ...)
    assert "PALETTE" not in script and "PALETTE" not in drawing


def test_the_page_draws_an_experiment_in_the_colours_of_render_and_overlays():
    from sleap_live.stream.experiment.overlay import OFF_REGION, OFF_RULE, ON

    script = (Path(preview_module.__file__).parent / "preview.html").read_text()
    for name, colour in (("RULE_ON", ON), ("REGION_OFF", OFF_REGION), ("RULE_OFF", OFF_RULE)):
        assert f'const {name} = "rgb{colour}";' in script


def test_the_address_is_printed_once_the_model_is_ready_and_held_until_ctrl_c(
    clip, fakes, capsys, tmp_path, monkeypatch
):
    import _thread
    import signal

    from sleap_live.engines.runners import load as runners_load

    printed_before_load: list[str] = []

    def load(models, **options):
        printed_before_load.append(capsys.readouterr().err)
        return fakes.FakeRunner()

    monkeypatch.setattr(runners_load, "load_runner", load)
    url: list[str] = []
    seen: list[dict] = []

    def look_then_press_ctrl_c() -> None:
        fakes.wait_for(lambda: url, "the holding line")
        seen.append(json.loads(fetch(url[0] + "snapshot.json")[0]))
        _thread.interrupt_main()

    real_hold = PreviewServer.hold

    def hold(self, stop=None):
        url.append(self.url)
        real_hold(self, stop)

    monkeypatch.setattr(PreviewServer, "hold", hold)
    looker = threading.Thread(target=look_then_press_ctrl_c)
    looker.start()
    out = tmp_path / "poses.slp"
    argv = ["run", str(clip), "-m", "m", "-o", str(out), "--preview", "--preview-port", "0"]
    # xdist workers ignore SIGINT; Ctrl-C needs Python's handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert cli.main([*argv, "--preview-hold"]) == 0
    finally:
        signal.signal(signal.SIGINT, previous)
        looker.join(PATIENCE)
    err = capsys.readouterr().err
    assert "preview on" not in printed_before_load[0]
    addresses = [line for line in err.splitlines() if line.startswith("preview on")]
    assert addresses == [f"preview on {url[0]}"]
    assert re.search(r"the run ended; the preview on \S+ shows its last frame .* until Ctrl-C", err)
    [snapshot] = seen
    assert snapshot["finished"] and snapshot["frame"]["frame_index"] == 39


def test_no_preview_hold_ends_with_the_run(clip, fake_loads, capsys, tmp_path):
    out = tmp_path / "poses.slp"
    argv = ["run", str(clip), "-m", "m", "-o", str(out), "--preview", "--preview-port", "0"]
    assert cli.main([*argv, "--no-preview-hold"]) == 0
    assert "until Ctrl-C" not in capsys.readouterr().err
