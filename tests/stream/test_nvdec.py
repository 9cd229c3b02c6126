"""NvdecSource and decoder selection, on a fake PyNvVideoCodec that decodes with PyAV.

The fake hands out NV12 surfaces from a small pool it recycles the way NVDEC does:
every call for more frames first scribbles over the surfaces it handed out before,
so a source that kept a surface instead of copying it out would show the scribble.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import sys
import types
from pathlib import Path
from typing import ClassVar

import attrs
import av
import numpy as np
import pytest
import torch

from sleap_live.stream.sources import NvdecSource, nvdec, open_source
from sleap_live.stream.sources.file import FileSource

VIDEOS = Path(__file__).parents[1] / "data" / "videos"
DEMO = VIDEOS / "demo.mp4"  # H.264 yuv420p 200x168, 150 gray frames at 30 fps
SCRIBBLE = 77


class FakeSurface:
    """A decoded frame: DLPack export of a pooled NV12 tensor."""

    def __init__(self, planes: torch.Tensor) -> None:
        self._planes = planes

    def __dlpack__(self, **kwargs):
        return self._planes.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._planes.__dlpack_device__()


class FakeThreadedDecoder:
    """PyNvVideoCodec.ThreadedDecoder's documented surface, decoding with PyAV."""

    instances: ClassVar[list[FakeThreadedDecoder]] = []

    def __init__(
        self,
        path,
        buffer_size,
        gpu_id,
        cuda_context,
        cuda_stream,
        use_device_memory,
        output_color_type,
        start_frame=0,
    ):
        assert use_device_memory and output_color_type == "NATIVE"
        self.kwargs = {"buffer_size": buffer_size, "gpu_id": gpu_id, "start_frame": start_frame}
        self._container = av.open(path)
        self._frames = self._container.decode(video=0)
        for _ in range(start_frame):
            next(self._frames)
        self._pool: list[torch.Tensor] = []
        self._handed_out: list[torch.Tensor] = []
        self.ended = False
        FakeThreadedDecoder.instances.append(self)

    def get_batch_frames(self, count):
        for surface in self._handed_out:  # recycled: NVDEC writes the next frames there
            surface.fill_(SCRIBBLE)
        batch = []
        for _, frame in zip(range(count), self._frames, strict=False):
            nv12 = frame.reformat(format="nv12")
            luma, chroma = nv12.planes
            rows = np.concatenate(
                [
                    np.frombuffer(luma, np.uint8).reshape(luma.height, luma.line_size),
                    np.frombuffer(chroma, np.uint8).reshape(chroma.height, chroma.line_size),
                ]
            )
            if len(self._pool) < 2 * count:
                self._pool.append(torch.empty(rows.shape, dtype=torch.uint8))
            surface = self._pool[len(batch) % len(self._pool)]
            surface.copy_(torch.from_numpy(rows))
            batch.append(FakeSurface(surface))
        self._handed_out = [s._planes for s in batch]
        return batch

    def end(self):
        self.ended = True
        self._container.close()


@pytest.fixture
def fake_pynvvideocodec(monkeypatch):
    module = types.ModuleType("PyNvVideoCodec")
    module.__spec__ = importlib.machinery.ModuleSpec("PyNvVideoCodec", None)
    module.ThreadedDecoder = FakeThreadedDecoder
    module.OutputColorType = types.SimpleNamespace(NATIVE="NATIVE", RGB="RGB")
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", module)
    FakeThreadedDecoder.instances.clear()
    return module


def nvdec_on_the_cpu(*args, device, **kwargs) -> NvdecSource:
    """`NvdecSource` with CPU tensors for device memory, whatever device it is given."""
    return NvdecSource(*args, device="cpu", **kwargs)


def pyav_rgb(path: Path, start: int = 0, stop: int | None = None) -> list[np.ndarray]:
    """PyAV's RGB conversion of each decoded frame's NV12 form."""
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))[start:stop]
    return [frame.reformat(format="nv12").to_ndarray(format="rgb24") for frame in frames]


def pyav_red(path: Path, start: int = 0, stop: int | None = None) -> list[np.ndarray]:
    """The red planes of `pyav_rgb`: NvdecSource's frames of a gray video."""
    return [image[..., :1] for image in pyav_rgb(path, start, stop)]


class SteppedClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def test_frames_are_copied_out_before_the_decoder_recycles_surfaces(fake_pynvvideocodec):
    clock = SteppedClock()
    with NvdecSource(DEMO, device="cpu", buffers=8, clock=clock) as source:
        assert source.frame_shape == (168, 200, 1) and source.n_frames == 150
        assert source.fps == FileSource(DEMO).fps == 30.0
        kept, pending = [], []
        for frame in source:
            # Each image is read only after the decoder was asked for more frames
            # (and recycled the surface it came from), but before `buffers` more
            # frames arrived (its own buffer's validity).
            pending.append(frame)
            if len(pending) > nvdec.DECODE_BATCH:
                old = pending.pop(0)
                kept.append((old.index, old.timestamp, old.image.clone()))
        kept += [(old.index, old.timestamp, old.image.clone()) for old in pending]
    expected = pyav_red(DEMO)
    assert [index for index, _, _ in kept] == list(range(150))
    stamps = [stamp for _, stamp, _ in kept]
    assert stamps == sorted(stamps) and len(set(stamps)) == 150
    for (_, _, image), want in zip(kept, expected, strict=True):
        assert image.dtype == torch.uint8
        np.testing.assert_array_equal(image.numpy(), want)
    assert FakeThreadedDecoder.instances[0].ended


def test_start_and_stop_give_file_positions(fake_pynvvideocodec):
    with NvdecSource(DEMO, device="cpu", start=10, stop=17) as source:
        assert source.n_frames == 7
        frames = [(frame.index, frame.image.clone()) for frame in source]
    assert [index for index, _ in frames] == list(range(10, 17))
    assert FakeThreadedDecoder.instances[0].kwargs["start_frame"] == 10
    for (_, image), want in zip(frames, pyav_red(DEMO, 10, 17), strict=True):
        np.testing.assert_array_equal(image.numpy(), want)


def test_buffers_are_reused_and_bounded(fake_pynvvideocodec):
    with NvdecSource(DEMO, device="cpu", buffers=3, stop=9) as source:
        pointers = {frame.image.data_ptr() for frame in source}
    assert len(pointers) == 3
    with pytest.raises(ValueError, match="buffers must be at least 2"):
        NvdecSource(DEMO, device="cpu", buffers=1)


def info(**changes) -> nvdec.StreamInfo:
    base = nvdec.probe(DEMO)
    return attrs.evolve(base, **changes)


def test_choose_decoder_falls_back_naming_what_is_missing(fake_pynvvideocodec, monkeypatch):
    assert nvdec.choose_decoder("pyav", info()) == nvdec.DecoderChoice("pyav", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    choice = nvdec.choose_decoder("auto", info())
    assert choice.decoder == "pyav"
    assert choice.notice == (
        "NVDEC not used: no CUDA device is available to torch; decoding with PyAV on the CPU"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert nvdec.choose_decoder("nvdec", info()) == nvdec.DecoderChoice("nvdec", None)
    for changes, reason in (
        ({"codec": "ffv1"}, "NVDEC does not decode ffv1"),
        ({"pixel_format": "yuv420p10le"}, "yuv420p10le frames are not converted"),
        ({"width": 199}, "odd frame size 199x168"),
    ):
        assert reason in nvdec.choose_decoder("auto", info(**changes)).notice
    with pytest.raises(ValueError, match="decoder must be one of auto, nvdec, pyav"):
        nvdec.choose_decoder("cuda", info())


def test_without_pynvvideocodec_the_notice_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)
    monkeypatch.setattr(nvdec.importlib.util, "find_spec", lambda name: None)
    notice = nvdec.choose_decoder("nvdec", info()).notice
    assert "PyNvVideoCodec is not installed (pip install PyNvVideoCodec)" in notice


def test_open_source_picks_nvdec_or_falls_back_with_one_line(
    fake_pynvvideocodec, monkeypatch, caplog
):
    monkeypatch.setattr(nvdec, "NvdecSource", nvdec_on_the_cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with caplog.at_level(logging.INFO, logger=nvdec.__name__):
        source = open_source(DEMO, decoder="auto")
        assert isinstance(source, NvdecSource) and source.decoder == "nvdec"
        source.close()
        gray = open_source(VIDEOS / "single.mkv", decoder="nvdec")
        assert isinstance(gray, FileSource) and gray.decoder == "pyav"
        gray.close()
        auto = open_source(VIDEOS / "single.mkv", decoder="auto", replay=True)
        assert auto.decoder == "pyav" and "ffv1" in auto.decoder_notice
        auto.close()
        plain = open_source(DEMO)
        assert isinstance(plain, FileSource) and plain.decoder_notice is None
        plain.close()
    notices = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert notices == [
        (logging.WARNING, gray.decoder_notice),
        (logging.INFO, auto.decoder_notice),
    ]
    assert all("\n" not in message for _, message in notices)
    with pytest.raises(ValueError, match="option decoder cannot be used with a iterator source"):
        open_source([np.zeros((4, 4, 1), np.uint8)], decoder="nvdec")


def test_importing_the_sources_does_not_import_torch_or_pynvvideocodec():
    import subprocess

    code = (
        "import sys; import sleap_live.stream;"
        "from sleap_live.stream.sources import nvdec;"
        "assert 'torch' not in sys.modules and 'PyNvVideoCodec' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_nvdec_matches_pyav_on_the_gpu():
    pytest.importorskip("PyNvVideoCodec")
    with NvdecSource(DEMO, stop=16) as source:
        images = [frame.image.cpu().numpy() for frame in source]
    for image, want in zip(images, pyav_red(DEMO, 0, 16), strict=True):
        np.testing.assert_array_equal(image, want)


# --- NVDEC that cannot start falls back to PyAV ---------------------------------------


class RaisingImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `PyNvVideoCodec` (as an installed wheel is found) but its import raises, as
    it does in a container without the driver's video libraries."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def find_spec(self, name, path=None, target=None):
        if name != "PyNvVideoCodec":
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise self.error


@pytest.fixture
def cuda_reported(monkeypatch):
    """torch says CUDA is there; NvdecSource's buffers stay on the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(nvdec, "NvdecSource", nvdec_on_the_cpu)


@pytest.mark.parametrize(
    "error",
    [
        # PyNvVideoCodec 2.2.4's own, where the driver's video libraries are missing
        # (its troubleshooting pages after the first line are left out of the notice).
        RuntimeError(
            "Failed to load NVENC library: libnvidia-encode.so.1: cannot open shared object "
            "file: No such file or directory\n\n=== TROUBLESHOOTING STEPS ===\n1. Docker?"
        ),
        OSError("libnvidia-encode.so.1: cannot open shared object file"),
        ImportError("libcudart.so.12: cannot open shared object file"),
    ],
)
def test_a_pynvvideocodec_that_cannot_import_falls_back_to_pyav(
    cuda_reported, monkeypatch, caplog, error
):
    monkeypatch.delitem(sys.modules, "PyNvVideoCodec", raising=False)
    monkeypatch.setattr(sys, "meta_path", [RaisingImport(error), *sys.meta_path])
    with caplog.at_level(logging.INFO, logger=nvdec.__name__):
        source = open_source(DEMO, decoder="nvdec")
    source.close()
    assert isinstance(source, FileSource) and source.decoder == "pyav"
    assert type(error).__name__ in source.decoder_notice or "cannot be imported" in (
        source.decoder_notice
    )
    assert str(error).splitlines()[0] in source.decoder_notice
    assert "TROUBLESHOOTING" not in source.decoder_notice
    assert [record.getMessage() for record in caplog.records] == [source.decoder_notice]
    assert "\n" not in source.decoder_notice


def test_a_decoder_that_cannot_start_falls_back_to_pyav(
    fake_pynvvideocodec, cuda_reported, monkeypatch, caplog
):
    def no_decoder(*args, **kwargs):
        raise RuntimeError("cuvidCreateDecoder failed: CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(fake_pynvvideocodec, "ThreadedDecoder", no_decoder)
    with caplog.at_level(logging.INFO, logger=nvdec.__name__):
        source = open_source(DEMO, decoder="auto", start=3)
    with source:
        first = next(iter(source))
    assert isinstance(source, FileSource) and source.decoder == "pyav"
    assert first.index == 3
    assert source.decoder_notice == (
        f"NVDEC not used: {DEMO}: NVDEC cannot open it: cuvidCreateDecoder failed: "
        "CUDA_ERROR_NO_DEVICE; decoding with PyAV on the CPU"
    )
    assert [record.getMessage() for record in caplog.records] == [source.decoder_notice]


def test_no_gpu_for_the_buffers_falls_back_to_pyav(fake_pynvvideocodec, monkeypatch):
    # torch built with CUDA, but no device: its allocation raises.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    source = open_source(DEMO, decoder="auto", device="cuda:1")
    source.close()
    assert isinstance(source, FileSource)
    assert source.decoder_notice.startswith(f"NVDEC not used: {DEMO}: NVDEC cannot start")


# --- NVDEC's reused buffers, released by an event after the consumer's copy ------------


class RecordedEvent:
    def __init__(self, stream) -> None:
        self.stream = stream


def test_a_buffer_is_reused_only_after_the_event_its_consumer_recorded():
    waits = []
    buffers = nvdec.ReusedBuffers(["a", "b"], waits.append)
    assert buffers.take() == (0, "a") and buffers.take() == (1, "b")
    copied = RecordedEvent("copy stream")
    buffers.copied(0, copied)
    # Slot 0 again: its writer's stream waits for the consumer's copy first, once.
    assert buffers.take() == (0, "a") and waits == [copied]
    assert buffers.take() == (1, "b") and waits == [copied]  # never released: no wait
    assert buffers.take() == (0, "a") and waits == [copied]


def test_frames_carry_their_buffers_release(fake_pynvvideocodec):
    with NvdecSource(DEMO, device="cpu", buffers=2, stop=3) as source:
        frames = list(source)
    assert all(callable(frame.release) for frame in frames)


def test_the_batcher_releases_device_frames_after_stacking_on_its_copy_stream(monkeypatch):
    from sleap_live.stream import batching
    from sleap_live.stream.types import Frame

    calls = []

    class Event:
        def record(self, stream):
            calls.append(("ready", stream))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    streams = batching.DeviceStreams("copy stream", "inference stream")
    frames = [
        Frame(i, 0.0, "s", torch.full((2, 2, 1), i, dtype=torch.uint8), calls.append)
        for i in range(2)
    ]
    images, _ = batching._stack_on_device(frames, streams)
    assert calls == [("ready", "copy stream"), "copy stream", "copy stream"]
    assert images[:, 0, 0, 0].tolist() == [0, 1]


def test_a_device_batchs_host_copy_waits_for_its_stack():
    from sleap_live.stream import batching
    from sleap_live.stream.types import Frame

    calls = []

    class Ready:
        def synchronize(self):
            calls.append("stack done")

    image = torch.full((2, 2, 1), 5, dtype=torch.uint8)
    frame = Frame(0, 0.0, "s", image)
    times = batching.StageTimes(decode=(0.0, 0.0))
    batch = batching.Batch((frame,), image[None], times, None, Ready())
    assert batch.image(0, on_host=False) is not None and calls == []
    assert batch.image(0, on_host=True).tolist() == image.tolist() and calls == ["stack done"]
