"""Tests for the frame sources and `open_source`."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live.engines.host.frames import convert_channels
from sleap_live.stream.errors import SourceError, SourceNotFoundError
from sleap_live.stream.sources import (
    CameraSource,
    FileSource,
    IteratorSource,
    ReplaySource,
    Source,
    open_source,
)
from sleap_live.stream.sources.camera import device_name

# Layout of the synthetic videos that conftest.py writes (tests cannot import it).
WIDTH, HEIGHT, FPS, N_FRAMES, MARK = 64, 48, 30, 30, 8

on_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="v4l2 is Linux-only")


def gray_mark(image: np.ndarray) -> int:
    """Frame index written into a gray test frame."""
    return int(image[0, 0, 0]) // MARK


def rgb_mark(image: np.ndarray) -> int:
    """Frame index written into an RGB test frame (H.264 is off by a few levels)."""
    return round(float(image[4:12, 4:12, 0].mean()) / MARK)


def check_frames(frames, source, channels: int) -> None:
    assert [frame.index for frame in frames] == list(range(len(frames)))
    timestamps = [frame.timestamp for frame in frames]
    assert timestamps == sorted(timestamps)
    assert timestamps[-1] > timestamps[0]
    for frame in frames:
        assert frame.source_id == source.source_id
        assert frame.image.shape == (HEIGHT, WIDTH, channels)
        assert frame.image.dtype == np.uint8
        assert frame.image.flags.c_contiguous


# --- video files ---------------------------------------------------------------------


def test_gray_video_decodes_to_one_channel(gray_video):
    with FileSource(gray_video) as source:
        assert isinstance(source, Source)
        assert source.frame_shape == (HEIGHT, WIDTH, 1)
        assert source.fps == FPS
        assert source.n_frames == N_FRAMES
        assert source.is_live is False
        assert source.source_id == str(gray_video)
        frames = list(source)
    assert len(frames) == N_FRAMES
    check_frames(frames, source, channels=1)
    assert [gray_mark(frame.image) for frame in frames] == list(range(N_FRAMES))
    assert source.closed


def test_rgb_video_decodes_to_rgb(rgb_video):
    with FileSource(rgb_video, source_id="arena") as source:
        assert source.frame_shape == (HEIGHT, WIDTH, 3)
        assert source.n_frames == N_FRAMES
        frames = list(source)
    assert len(frames) == N_FRAMES
    check_frames(frames, source, channels=3)
    assert [rgb_mark(frame.image) for frame in frames] == list(range(N_FRAMES))
    assert frames[0].source_id == "arena"


def test_gray_video_in_a_colour_format_decodes_to_its_red_plane(gray_h264_video):
    # As sleap-io reads it for sleap-nn: one channel, each frame's red plane. Made gray
    # from RGB with sleap-nn's weights instead, every pixel came out one level darker,
    # and lab-model poses moved by up to 30 px on a few frames (docs/benchmarks.md).
    with av.open(str(gray_h264_video)) as container:
        reds = [frame.to_ndarray(format="rgb24")[..., :1] for frame in container.decode(video=0)]
    as_rgb = np.repeat(reds[1][None], 3, axis=-1)  # what PyAV's rgb24 gives: R = G = B
    assert (convert_channels(as_rgb, 1)[0] < reds[1]).any()
    with FileSource(gray_h264_video) as source:
        assert source.frame_shape == (HEIGHT, WIDTH, 1)
        frames = list(source)
    check_frames(frames, source, channels=1)
    for frame, red in zip(frames, reds, strict=True):
        np.testing.assert_array_equal(frame.image, red)
    video = sio.load_video(str(gray_h264_video))
    np.testing.assert_array_equal(video[7], frames[7].image)
    # The test is the file's first frame, wherever reading starts.
    with FileSource(gray_h264_video, start=20) as source:
        assert source.frame_shape == (HEIGHT, WIDTH, 1)
        np.testing.assert_array_equal(next(iter(source)).image, reds[20])


@pytest.mark.parametrize("video", ["gray_video", "rgb_video"])
def test_start_stop_reads_a_range_with_file_indices(video, request):
    path = request.getfixturevalue(video)
    with FileSource(path) as source:
        everything = [frame.image for frame in source]
    with FileSource(path, start=11, stop=16) as source:
        assert source.n_frames == 5
        frames = list(source)
    assert [frame.index for frame in frames] == [11, 12, 13, 14, 15]
    for frame in frames:
        np.testing.assert_array_equal(frame.image, everything[frame.index])


def test_frame_range_is_validated(gray_video):
    with pytest.raises(ValueError, match=r"start=40 is past the end \(30 frames\)"):
        FileSource(gray_video, start=40)
    with pytest.raises(ValueError, match="stop must be greater than start, got start=5, stop=5"):
        FileSource(gray_video, start=5, stop=5)
    with pytest.raises(ValueError, match="start must be an int >= 0, got -1"):
        FileSource(gray_video, start=-1)


def test_breaking_out_releases_and_a_source_is_read_once(gray_video):
    source = FileSource(gray_video)
    for frame in source:
        if frame.index == 2:
            break
    assert source.closed
    with pytest.raises(ValueError, match="source is closed"):
        iter(source)
    source.close()


def test_close_from_another_thread_ends_iteration(gray_video):
    source = FileSource(gray_video)
    seen = []
    for frame in source:
        seen.append(frame.index)
        if frame.index == 3:
            closer = threading.Thread(target=source.close)
            closer.start()
            closer.join()
    assert seen == [0, 1, 2, 3]


def test_missing_file(tmp_path):
    path = tmp_path / "nope.mp4"
    with pytest.raises(SourceNotFoundError, match=f"^{path}: no such file$"):
        FileSource(path)
    assert issubclass(SourceNotFoundError, FileNotFoundError)


def test_corrupt_file_names_file_and_reason(corrupt_video):
    with pytest.raises(SourceError) as caught:
        FileSource(corrupt_video)
    assert str(caught.value) == (
        f"{corrupt_video}: cannot open video: Invalid data found when processing input"
    )


def test_directory_and_audio_only_file_are_rejected(tmp_path, audio_only_file):
    with pytest.raises(SourceError, match=f"{tmp_path}: is a directory"):
        FileSource(tmp_path)
    with pytest.raises(SourceError, match=r"tone.wav: no video stream \(streams found: audio\)"):
        FileSource(audio_only_file)


def test_truncated_mp4_without_its_index_fails_to_open(truncated_video):
    with pytest.raises(SourceError, match=f"{truncated_video}: cannot open video: Invalid data"):
        FileSource(truncated_video)


@pytest.mark.parametrize(
    ("video", "mark", "why"),
    [
        ("truncated_faststart_video", rgb_mark, "the header declares 30 frames but only"),
        ("truncated_gray_video", gray_mark, "its duration implies about 30 frames"),
    ],
)
def test_truncated_file_yields_what_decodes_then_raises(video, mark, why, request):
    path = request.getfixturevalue(video)
    frames = []
    source = FileSource(path)
    with pytest.raises(SourceError) as caught:
        frames.extend(source)
    message = str(caught.value)
    assert message.startswith(f"{path}: video is truncated or damaged (")
    assert why in message
    assert 5 <= len(frames) < N_FRAMES
    assert message.endswith(f"frames up to index {len(frames) - 1} were delivered")
    assert [mark(frame.image) for frame in frames] == list(range(len(frames)))
    assert source.closed


# --- paced replay ------------------------------------------------------------------------


def test_replay_releases_frames_on_schedule(rgb_video, fakes):
    clock = fakes.FakeClock(100.0)
    with ReplaySource(rgb_video, stop=12, drop_late=False, clock=clock) as source:
        assert source.is_live is True
        assert source.fps == FPS
        assert source.n_frames == 12
        frames = list(source)
    assert [frame.index for frame in frames] == list(range(12))
    elapsed = np.array([frame.timestamp - frames[0].timestamp for frame in frames])
    scheduled = np.arange(12) / FPS
    # Never early, never late: the fake clock has no scheduler jitter.
    assert np.all(elapsed >= scheduled - 1e-9)
    assert np.all(elapsed <= scheduled + 1e-9)
    assert np.median(np.diff(elapsed)) == pytest.approx(1 / FPS, abs=1e-9)


def test_replay_fps_overrides_the_file_rate(gray_video, fakes):
    clock = fakes.FakeClock()
    with ReplaySource(gray_video, fps=100, stop=11, drop_late=False, clock=clock) as source:
        frames = list(source)
    total = frames[-1].timestamp - frames[0].timestamp
    assert total == pytest.approx(0.1)


def test_replay_skips_frames_a_slow_consumer_was_too_late_for(rgb_video, fakes):
    clock = fakes.FakeClock()
    source = ReplaySource(rgb_video, stop=12, clock=clock)
    indices = []
    for frame in source:
        indices.append(frame.index)
        if frame.index == 2:
            clock.advance(4.5 / FPS)  # the consumer takes 4.5 frame intervals
    assert indices[:3] == [0, 1, 2]
    # Frames 3 to 5 were due more than an interval before the consumer came back.
    assert source.skipped == 3
    assert len(indices) + source.skipped == 12
    assert indices == sorted(indices) and indices[-1] == 11


def test_replay_without_drop_late_delivers_every_frame(rgb_video, fakes):
    clock = fakes.FakeClock()
    source = ReplaySource(rgb_video, stop=8, drop_late=False, clock=clock)
    frames = []
    for frame in source:
        frames.append(frame)
        if frame.index == 1:
            clock.advance(4 / FPS)
    assert [frame.index for frame in frames] == list(range(8))
    assert source.skipped == 0
    # The late frames come at once, then the schedule resumes where it was.
    assert [frame.timestamp - frames[0].timestamp for frame in frames[2:6]] == pytest.approx(
        [5 / FPS] * 4
    )
    assert frames[7].timestamp - frames[0].timestamp == pytest.approx(7 / FPS)


def test_close_wakes_a_waiting_replay(gray_video, fakes):
    # On a clock that only moves when told, the replay waits for frame 1 until
    # the close: nothing else could end that wait.
    clock = fakes.FakeClock(jump=False)
    source = ReplaySource(gray_video, fps=1, clock=clock)
    iterator = iter(source)
    next(iterator)
    rest = []
    reader = threading.Thread(target=lambda: rest.extend(iterator), daemon=True)
    reader.start()
    fakes.wait_for(lambda: clock.sleepers == 1, "the replay to wait for frame 1")
    source.close()
    reader.join(5)
    assert not reader.is_alive()
    assert rest == [] and clock() == 0.0
    assert source.closed


def test_replay_rejects_bad_rate_and_missing_file(gray_video, tmp_path):
    with pytest.raises(ValueError, match="replay fps must be positive, got 0"):
        ReplaySource(gray_video, fps=0)
    with pytest.raises(SourceNotFoundError, match=r"missing\.mp4: no such file"):
        ReplaySource(tmp_path / "missing.mp4")


# --- cameras -------------------------------------------------------------------------------


@on_linux
def test_missing_camera_names_the_device():
    with pytest.raises(SourceNotFoundError, match=r"^/dev/video99: no such camera device$"):
        CameraSource("/dev/video99")
    with pytest.raises(SourceNotFoundError, match="/dev/video99"):
        CameraSource(99)
    with pytest.raises(SourceNotFoundError, match="/dev/video99"):
        open_source("camera:99")


@pytest.mark.parametrize(("graph", "channels"), [("", 3), (",format=gray", 1)])
def test_synthetic_camera_streams_live_frames(graph, channels):
    device = f"testsrc=size={WIDTH}x{HEIGHT}:rate=30{graph}"
    with CameraSource(device, backend="lavfi", source_id="cam0") as source:
        assert source.is_live is True
        assert source.n_frames is None
        assert source.fps == 30
        assert source.frame_shape == (HEIGHT, WIDTH, channels)
        frames = []
        for frame in source:
            frames.append(frame)
            if len(frames) == 5:
                break
    check_frames(frames, source, channels)
    assert source.closed


def test_camera_size_rate_and_pixel_format_reach_ffmpeg(tmp_path):
    # FFmpeg's rawvideo demuxer takes the same options a camera device does.
    raw = tmp_path / "camera.raw"
    pixels = np.arange(3 * 6 * 8, dtype=np.uint8).reshape(3, 6, 8)
    raw.write_bytes(pixels.tobytes())
    source = CameraSource(
        str(raw), backend="rawvideo", width=8, height=6, fps=12.5, input_format="gray"
    )
    assert source.fps == 12.5
    assert source.frame_shape == (6, 8, 1)
    frames = list(source)
    assert len(frames) == 3
    for frame, expected in zip(frames, pixels, strict=True):
        np.testing.assert_array_equal(frame.image[:, :, 0], expected)


def test_camera_argument_and_backend_errors():
    with pytest.raises(ValueError, match="give camera width and height together"):
        CameraSource("x", backend="lavfi", width=640)
    with pytest.raises(ValueError, match="camera fps must be positive"):
        CameraSource("x", backend="lavfi", fps=0)
    with pytest.raises(ValueError, match="camera index must be >= 0"):
        CameraSource(-1)
    with pytest.raises(SourceError, match=r"^0: cannot open camera with nosuchdevice: "):
        CameraSource("0", backend="nosuchdevice")


def test_camera_index_to_device_name():
    assert device_name(2, "v4l2") == "/dev/video2"
    assert device_name(1, "avfoundation") == "1:none"
    assert device_name("video=Logitech BRIO", "dshow") == "video=Logitech BRIO"
    with pytest.raises(ValueError, match='for dshow "video=<camera name>"'):
        device_name(0, "dshow")


# --- Python iterables and callables ------------------------------------------------------


def test_iterable_of_gray_and_rgb_arrays():
    gray = [np.full((4, 5), i, np.uint8) for i in range(3)]
    with IteratorSource(gray, fps=10) as source:
        assert source.frame_shape == (4, 5, 1)
        assert source.n_frames == 3
        assert source.fps == 10
        assert source.is_live is False
        frames = list(source)
    assert [frame.index for frame in frames] == [0, 1, 2]
    assert [int(frame.image[0, 0, 0]) for frame in frames] == [0, 1, 2]
    rgb = np.zeros((2, 4, 5, 3), np.uint8)
    with IteratorSource(rgb, live=True, source_id="sdk") as source:
        assert source.is_live is True
        assert [frame.image.shape for frame in source] == [(4, 5, 3)] * 2


def test_callable_until_none_and_frames_are_copies():
    buffer = np.zeros((4, 5, 1), np.uint8)
    calls = iter(range(4))

    def grab():
        value = next(calls)
        if value == 3:
            return None
        buffer[:] = value
        return buffer

    with IteratorSource(grab) as source:
        assert source.n_frames is None
        values = [int(frame.image[0, 0, 0]) for frame in source]
    assert values == [0, 1, 2], "a reused buffer must not change frames already delivered"


def test_every_source_says_what_the_source_protocol_declares(gray_video):
    # (source, read timeout, skipped, bit depth, decoder, video file): none is optional.
    frames = [np.zeros((4, 5), np.uint8)] * 3
    sources = [
        (FileSource(gray_video), 1 / 30 + 5, 0, 8, "pyav", gray_video),
        (open_source(gray_video, replay=True, read_timeout=2.0), 2.0, 0, 8, "pyav", gray_video),
        (IteratorSource(frames, fps=10.0), 0.1 + 5, 0, None, "none", None),
    ]
    for source, timeout, skipped, depth, decoder, video in sources:
        with source:
            said = (source.read_timeout, source.skipped, source.bit_depth, source.decoder)
            assert said == (pytest.approx(timeout), skipped, depth, decoder), source
            assert source.video_file == video and source.decoder_notice is None


def test_closing_an_iterator_source_closes_the_callers_generator():
    closed = []

    def frames():
        try:
            while True:
                yield np.zeros((4, 5), np.uint8)
        finally:
            closed.append(True)

    source = IteratorSource(frames())
    for _ in zip(range(2), source, strict=False):
        pass
    source.close()
    assert closed == [True]


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([np.zeros((4, 5), np.float32)], "frame 0 has dtype float32; frames must be uint8"),
        ([np.zeros((4, 5, 4), np.uint8)], r"frame 0 has shape \(4, 5, 4\); frames must be"),
        ([np.zeros(5, np.uint8)], r"frame 0 has shape \(5,\); frames must be \(H, W\)"),
        ([], "the frame supplier produced no frames"),
    ],
)
def test_iterator_validation_errors_at_open(frames, message):
    with pytest.raises(SourceError, match=f"^iterator: {message}"):
        IteratorSource(frames)


def test_iterator_shape_change_is_an_error_when_reached():
    frames = [np.zeros((4, 5), np.uint8), np.zeros((4, 5, 1), np.uint8), np.zeros((4, 6), np.uint8)]
    source = IteratorSource(frames, source_id="sdk")
    got = []
    with pytest.raises(SourceError, match=r"^sdk: frame 2 has shape \(4, 6, 1\) but the first"):
        got.extend(source)
    assert len(got) == 2


def test_iterator_closes_the_generator_it_wraps():
    finished = []

    def generate():
        try:
            while True:
                yield np.zeros((2, 2), np.uint8)
        finally:
            finished.append(True)

    source = IteratorSource(generate())
    iterator = iter(source)
    next(iterator)
    next(iterator)
    source.close()
    assert finished == [True]
    assert list(iterator) == []


def test_iterator_rejects_non_iterables():
    with pytest.raises(TypeError, match="frames must be an iterable of arrays or a callable"):
        IteratorSource(3.5)


# --- open_source -------------------------------------------------------------------------


def test_open_source_dispatches_on_the_spec(gray_video):
    with open_source(gray_video) as source:
        assert type(source) is FileSource
    with open_source(str(gray_video), start=3) as source:
        assert type(source) is FileSource
        assert next(iter(source)).index == 3
    with open_source(gray_video, replay=True, fps=60, drop_late=False) as source:
        assert type(source) is ReplaySource
        assert source.fps == 60
    with open_source([np.zeros((2, 2), np.uint8)]) as source:
        assert type(source) is IteratorSource
    frames = [np.zeros((2, 2), np.uint8), None]
    with open_source(lambda: frames.pop(0), source_id="grabber", live=True) as source:
        assert type(source) is IteratorSource
        assert source.source_id == "grabber"
        assert source.is_live is True
        assert len(list(source)) == 1
    device = f"testsrc=size={WIDTH}x{HEIGHT}:rate=30"
    with open_source(device, camera=True, backend="lavfi") as source:
        assert type(source) is CameraSource
    with open_source(f"camera:{device}", backend="lavfi") as source:
        assert type(source) is CameraSource
        assert source.source_id == device


@pytest.mark.parametrize("spec", [3.5, None, True, b"video.mp4"])
def test_open_source_lists_supported_kinds_for_unknown_specs(spec):
    with pytest.raises(ValueError, match="supported sources are: a video file path") as caught:
        open_source(spec)
    assert "camera" in str(caught.value) and "iterable" in str(caught.value)


def test_open_source_rejects_options_of_another_kind(gray_video):
    with pytest.raises(ValueError, match="options height, width cannot be used with a file source"):
        open_source(gray_video, width=640, height=480)
    with pytest.raises(ValueError, match="replay=True paces video files only, not a iterator"):
        open_source([np.zeros((2, 2), np.uint8)], replay=True)
    with pytest.raises(ValueError, match="option start cannot be used with a camera source"):
        open_source("camera:0", start=3)
    with pytest.raises(ValueError, match="cannot open 0 with camera=False"):
        open_source(0, camera=False)
    with pytest.raises(ValueError, match="camera must be True, False or None"):
        open_source(gray_video, camera=1)


def test_open_source_with_camera_false_reads_a_file_named_like_a_camera(tmp_path):
    with pytest.raises(SourceNotFoundError, match="camera:0: no such file"):
        open_source(str(Path("camera:0")), camera=False)


def test_open_source_passes_the_clock_frames_are_stamped_on(gray_video, fakes):
    clock = fakes.FakeClock(42.0)
    with open_source(gray_video, stop=3, clock=clock) as source:
        assert [frame.timestamp for frame in source] == [42.0] * 3
    frames = [np.zeros((4, 4), np.uint8)] * 2
    with open_source(frames, clock=clock) as source:
        assert [frame.timestamp for frame in source] == [42.0] * 2
