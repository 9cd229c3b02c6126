"""Fault suite, bad arguments and odd inputs: every numeric option is bounded, every
refusal is one line that names the option or the input, before any work; stream
URLs are read, not mangled into file names; concatenated streams are judged by
what decodes (issue #11).

Runs use the fake engine (see test_cli.py). An unwritable output is covered in
test_faults_outputs.py.
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.engines.runners import load as engines_api
from sleap_live.stream import memory
from sleap_live.stream.errors import SourceError
from sleap_live.stream.memory import check_batch_memory
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.sources import FileSource, NetworkSource, open_source

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


def refused(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def run(*argv: str) -> int:
    return cli.main([*argv, "-m", "m", "-q", "--no-verify"])


# --- numbers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--duration", "inf", "must be a finite number, got 'inf'"),
        ("--duration", "nan", "must be positive, got nan"),
        ("--duration", "1e10", "must be at most 3.1536e+07 seconds (a year), got 1e+10"),
        ("--save-interval", "inf", "must be a finite number, got 'inf'"),
        ("--batch-size", "100000", "must be at most 1024, got 100000"),
        ("--batch-size", "0", "must be at least 1, got 0"),
    ],
)
def test_run_numbers_are_bounded(clip, tmp_path, fake_loads, capsys, option, value, why):
    out = tmp_path / "out.slp"
    assert run("run", str(clip), "-o", str(out), option, value) == 2
    assert refused(capsys) == f"sleap-live: error: argument {option}: {why}"
    assert fake_loads == [] and not out.exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("inf", "must be a finite number, got 'inf'"),
        ("1e9", "must be at most 10000 frames per second, got 1e+09"),
        ("-5", "must be positive, got -5"),
    ],
)
def test_replay_and_camera_rates_are_bounded(clip, fake_loads, capsys, value, why):
    assert run("replay", str(clip), "--fps", value) == 2
    assert refused(capsys) == f"sleap-live: error: argument --fps: {why}"
    assert run("run", "--camera", "0", "--fps", value) == 2
    assert refused(capsys) == f"sleap-live: error: argument --fps: {why}"
    assert fake_loads == []


def test_a_replay_rate_must_be_finite_in_the_api_too(clip):
    with pytest.raises(ValueError, match="replay fps must be finite, got inf"):
        open_source(clip, replay=True, fps=float("inf"))


def test_a_batch_size_too_large_for_memory_is_refused_before_the_model_loads(
    clip, fake_loads, capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)  # where the run without -o writes its poses
    # 32x24 gray frames, 2 MiB of memory: 6 batches of 64 in flight need 0.28 MiB,
    # of 512 need 2.25 MiB.
    monkeypatch.setattr(memory, "available_memory", lambda: 2 * 2**20)
    assert run("run", str(clip), "--batch-size", "512") == 2
    line = refused(capsys)
    assert line.startswith(
        "sleap-live: error: --batch-size: batch size 512 is too large for 32x24x1 frames: "
        "the 3072 frames in flight would need"
    )
    assert line.endswith("of memory is available; give a smaller batch size")
    assert fake_loads == []
    assert run("run", str(clip), "--batch-size", "64") == 0


def test_the_pipeline_checks_its_batch_against_memory(fakes):
    source = fakes.FakeSource(4, shape=(480, 640, 3))
    with pytest.raises(ValueError, match="batch size 256 is too large for 640x480x3 frames"):
        check_batch_memory("recorded", 256, source.frame_shape, available=2**30)
    check_batch_memory("recorded", 8, source.frame_shape, available=2**30)
    check_batch_memory("live", 256, source.frame_shape, available=2**31)
    huge = fakes.FakeSource(4, shape=(8000, 8000, 3))
    with pytest.raises(ValueError, match="batch size 1024 is too large"):
        Pipeline(huge, fakes.FakeRunner(), batch_size=1024)


# --- devices -------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda:x", "gpu", "cuda:", "cpu:0", "cuda:-1"])
def test_a_bad_device_is_one_line_naming_the_option(clip, fake_loads, capsys, device):
    assert run("run", str(clip), "--device", device) == 2
    assert refused(capsys) == (
        "sleap-live: error: argument --device: expected auto, cpu, cuda or cuda:N "
        f"(N a GPU index), got {device!r}"
    )
    assert fake_loads == []


def test_load_runner_refuses_a_bad_device_too():
    with pytest.raises(ValueError, match=r"unknown device 'cuda:x' \(expected auto, cpu, cuda"):
        engines_api.load_runner("model.onnx", device="cuda:x")


# --- outputs -------------------------------------------------------------------------


def test_record_to_a_slp_names_the_file_and_the_video_suffixes(clip, tmp_path, fake_loads, capsys):
    record = tmp_path / "x.slp"
    assert run("run", str(clip), "-o", str(tmp_path / "p.slp"), "--record", str(record)) == 2
    line = refused(capsys)
    assert str(record) in line and ".mp4, .mkv or .avi" in line
    assert fake_loads == [] and not record.exists()


# --- stream URLs ---------------------------------------------------------------------


def test_a_refused_rtsp_url_is_named_as_written(tmp_path, fake_loads, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "rtsp://127.0.0.1:1/cam"  # nothing listens on port 1
    assert run("run", url) == 1
    assert refused(capsys) == f"sleap-live: error: {url}: cannot open stream: Connection refused"
    assert fake_loads == [] and list(tmp_path.iterdir()) == []  # no rtsp:/ folder or output


def test_a_stream_url_given_as_camera_is_read_as_a_stream(fake_loads, capsys):
    url = "rtsp://127.0.0.1:1/cam"
    assert run("run", "--camera", url) == 1
    assert refused(capsys) == f"sleap-live: error: {url}: cannot open stream: Connection refused"
    assert run("run", "--camera", url, "--fps", "30") == 2
    assert "fps cannot be used with a network source" in refused(capsys)
    assert fake_loads == []


def test_stream_urls_are_not_replayed_or_decoded_on_the_gpu(fake_loads, capsys):
    url = "rtsp://127.0.0.1:1/cam"
    assert run("replay", url) == 2
    assert "replay paces a video file; a stream is live already" in refused(capsys)
    assert run("run", url, "--decoder", "nvdec") == 2
    assert "streams are read with PyAV" in refused(capsys)


def test_other_url_schemes_are_refused_in_one_line(fake_loads, capsys):
    assert run("run", "ftp://example.org/clip.mp4") == 2
    line = refused(capsys)
    assert "ftp://example.org/clip.mp4: ftp:// is not a stream sleap-live reads" in line
    with pytest.raises(ValueError, match="ftp:// is not a stream"):
        open_source("ftp://example.org/clip.mp4")


def test_open_source_reads_stream_urls_as_live_sources():
    with pytest.raises(SourceError, match=r"^rtsp://127.0.0.1:1/x: cannot open stream"):
        open_source("rtsp://127.0.0.1:1/x")
    with pytest.raises(ValueError, match="replay=True paces video files only, not a network"):
        open_source("rtsp://127.0.0.1:1/x", replay=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(clip):
    """`clip` served over HTTP on 127.0.0.1, as a stream URL."""
    handler = functools.partial(_QuietHandler, directory=str(clip.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{clip.name}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_an_http_stream_is_read_live(served, fakes):
    with open_source(served) as source:
        assert isinstance(source, NetworkSource) and source.is_live
        assert source.frame_shape == (24, 32, 1) and source.n_frames is None
        indices = [fakes.index_of(frame.image) for frame in source]
    assert indices == list(range(40))


def test_the_command_line_runs_a_stream_url(served, tmp_path, fake_loads):
    out = tmp_path / "stream.slp"
    assert run("run", served, "-o", str(out)) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    indices = [frame.frame_idx for frame in labels]
    # The live policy may drop frames it cannot keep up with, never reorder them.
    assert indices and indices == sorted(set(indices)) and indices[-1] < 40


# --- concatenated streams ------------------------------------------------------------


def write_ts(path: Path, n_frames: int, first: int) -> Path:
    with av.open(str(path), "w", format="mpegts") as container:
        stream = container.add_stream("mpeg2video", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for index in range(first, first + n_frames):
            image = np.full((48, 64, 3), index * 4, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return path


def test_byte_concatenated_mpeg_ts_files_are_whole_when_every_frame_decodes(tmp_path, fake_loads):
    joined = tmp_path / "joined.ts"
    joined.write_bytes(
        write_ts(tmp_path / "a.ts", 30, 0).read_bytes()
        + write_ts(tmp_path / "b.ts", 30, 30).read_bytes()
    )
    with FileSource(joined) as source:
        levels = [int(np.median(frame.image)) for frame in source]
    assert len(levels) == 60
    assert np.abs(np.array(levels) - np.arange(60) * 4).max() <= 3
    out = tmp_path / "joined.slp"
    assert run("run", str(joined), "-o", str(out)) == 0
    assert len(sio.load_slp(str(out), open_videos=False)) == 60


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        # Bad arguments, as argparse judges them: 2.
        (["run", "V", "-m", "M", "--batch-size", "0"], 2),
        (["run", "V", "-m", "M", "-o", "out.txt"], 2),
        (["export", "M", "-o", "out.onnx", "--format", "nope"], 2),
        (["render", "missing.slp", "-o", "o.mp4", "--frames", "5:2"], 2),
        # A missing or unusable input: 1, whichever command reads it.
        (["run", "missing.mp4", "-m", "M"], 1),
        (["render", "missing.slp", "-o", "o.mp4"], 1),
        (["track", "missing.slp", "-o", "t.slp"], 1),
        (["recover", "missing.slp"], 1),
        (["serve-web", "missing"], 1),
        (["serve-web", "."], 1),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_one_kind_of_mistake_one_exit_status(argv, status, tmp_path, monkeypatch, capsys):
    """Issue 37: a missing web export exited 2 and a missing video 1. The rule (docs
    cli.md, the command reference): 2 for bad arguments, 1 for a bad input or run."""
    monkeypatch.chdir(tmp_path)
    video = Path(__file__).parents[1] / "data" / "videos" / "demo.mp4"
    model = Path(__file__).parents[1] / "data" / "models" / "centroid"
    argv = [str(video) if a == "V" else str(model) if a == "M" else a for a in argv]
    assert cli.main(argv) == status
    refused(capsys)
    assert list(tmp_path.iterdir()) == []
