"""Fixtures shared by the stream tests: stand-in engines/sources and tiny synthetic videos.

`fakes` is `tests/stream/fakes.py` (fake runners and sources for pipeline tests);
`fake_loads` puts its runner behind every model load, and `clip` is a short video
whose frames tell that runner their index (for command-line tests).

The videos are written with PyAV once per test session. Every frame carries its own
index so tests can check which frame they got: in gray videos the top half is
``8 * index`` (lossless FFV1, exact), in RGB videos the red channel of the top-left
block is ``8 * index`` (H.264, within a few levels).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import av
import numpy as np
import pytest

from tests.stream import fakes as fakes_module

WIDTH, HEIGHT, FPS = 64, 48, 30
N_FRAMES = 30
MARK = 8  # pixel value step per frame index


@pytest.fixture(scope="session")
def fakes() -> ModuleType:
    """`tests/stream/fakes.py`."""
    return fakes_module


@pytest.fixture
def fake_loads(monkeypatch, fakes) -> list:
    """Every model load gives a fake runner: the runners made, in order (still empty
    after a command means it loaded no model, so it did no work)."""
    from sleap_live.cli import loading as cli_loading
    from sleap_live.engines.runners import load as runners_load

    made: list = []

    def load(models, **options):
        made.append(fakes.FakeRunner())
        return made[-1]

    # The command line's own loading, and `load_for_source`'s (which looks it up
    # in `runners.load` when called).
    monkeypatch.setattr(cli_loading, "load_runner", load)
    monkeypatch.setattr(runners_load, "load_runner", load)
    return made


@pytest.fixture
def clip(tmp_path, fakes) -> Path:
    """40 lossless gray frames (32x24, 30 fps) that the fake runner reads its poses from."""
    path = tmp_path / "clip.mkv"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=30)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "gray"
        for index in range(40):
            image = fakes.frame_image(index, (24, 32, 1))[..., 0]
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="gray")))
        container.mux(stream.encode())
    return path


def marked_frame(index: int, channels: int, noise: np.random.Generator | None = None) -> np.ndarray:
    """The (H, W, channels) image written as frame ``index``."""
    image = np.full((HEIGHT, WIDTH, channels), 40, np.uint8)
    if noise is not None:
        # Incompressible texture keeps every encoded frame large, so cutting a file
        # in half cuts it at about half its frames.
        image[HEIGHT // 2 :] = noise.integers(0, 256, (HEIGHT // 2, WIDTH, channels), np.uint8)
    if channels == 1:
        image[: HEIGHT // 2] = (index * MARK) % 256
    else:
        image[:16, :16] = ((index * MARK) % 256, 255 - (index * MARK) % 256, 100)
    return image


def write_video(
    path: Path,
    *,
    codec: str,
    pixel_format: str,
    channels: int,
    n_frames: int = N_FRAMES,
    container_options: dict[str, str] | None = None,
    noise: bool = False,
) -> Path:
    """Encode ``n_frames`` marked frames into ``path``."""
    rng = np.random.default_rng(0) if noise else None
    with av.open(str(path), "w", options=container_options or {}) as container:
        stream = container.add_stream(codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, pixel_format
        input_format = "gray" if channels == 1 else "rgb24"
        for index in range(n_frames):
            image = marked_frame(index, channels, rng)
            frame = av.VideoFrame.from_ndarray(
                image[:, :, 0] if channels == 1 else image, format=input_format
            )
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.fixture(scope="session")
def video_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("videos")


@pytest.fixture(scope="session")
def gray_video(video_dir: Path) -> Path:
    """30 gray frames, FFV1 in Matroska (which declares a duration but no frame count)."""
    return write_video(video_dir / "gray.mkv", codec="ffv1", pixel_format="gray", channels=1)


@pytest.fixture(scope="session")
def gray_h264_video(video_dir: Path) -> Path:
    """30 gray frames stored in a colour format, as most H.264 is (yuv420p, MP4)."""
    return write_video(video_dir / "gray.mp4", codec="libx264", pixel_format="yuv420p", channels=1)


@pytest.fixture(scope="session")
def rgb_video(video_dir: Path) -> Path:
    """30 color frames, H.264 in MP4 with its index (moov) at the end."""
    return write_video(video_dir / "rgb.mp4", codec="libx264", pixel_format="yuv420p", channels=3)


@pytest.fixture(scope="session")
def faststart_video(video_dir: Path) -> Path:
    """30 noisy color frames, H.264 in MP4 with its index at the start."""
    return write_video(
        video_dir / "faststart.mp4",
        codec="libx264",
        pixel_format="yuv420p",
        channels=3,
        container_options={"movflags": "faststart"},
        noise=True,
    )


def cut_in_half(source: Path, target: Path) -> Path:
    data = source.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    return target


@pytest.fixture(scope="session")
def truncated_video(video_dir: Path, rgb_video: Path) -> Path:
    """The MP4 cut in half: its index is lost, so it cannot even be opened."""
    return cut_in_half(rgb_video, video_dir / "truncated.mp4")


@pytest.fixture(scope="session")
def truncated_faststart_video(video_dir: Path, faststart_video: Path) -> Path:
    """The fast-start MP4 cut in half: the first frames decode, the rest is gone."""
    return cut_in_half(faststart_video, video_dir / "truncated_faststart.mp4")


@pytest.fixture(scope="session")
def truncated_gray_video(video_dir: Path, gray_video: Path) -> Path:
    """The Matroska file cut in half: it ends cleanly, but early for its duration."""
    return cut_in_half(gray_video, video_dir / "truncated_gray.mkv")


@pytest.fixture(scope="session")
def corrupt_video(video_dir: Path) -> Path:
    """Random bytes named like a video."""
    path = video_dir / "corrupt.mp4"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, np.uint8).tobytes())
    return path


@pytest.fixture(scope="session")
def audio_only_file(video_dir: Path) -> Path:
    """A WAV file: a valid container without a video stream."""
    path = video_dir / "tone.wav"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        samples = np.zeros((1, 800), np.int16)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 8000
        container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path
