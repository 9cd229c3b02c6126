"""scripts/genicam_example.py without a camera or harvesters: its buffer conversion on
fake buffer components, and its acquisition loop against a stand-in `harvesters.core`
that follows harvesters 1.4's API (the real one is untested without the hardware)."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sleap_live.stream import Pipeline, open_source
from sleap_live.stream.errors import SourceError, SourceStalledError

SCRIPT = Path(__file__).parents[2] / "scripts" / "genicam_example.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("genicam_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def component(data, width, height, data_format):
    return SimpleNamespace(
        data=np.asarray(data).ravel(), width=width, height=height, data_format=data_format
    )


def test_mono8_is_a_gray_frame_copied_off_the_buffer(example):
    data = np.arange(12, dtype=np.uint8)
    frame = example.frame_from_component(component(data, 4, 3, "Mono8"))
    np.testing.assert_array_equal(frame, data.reshape(3, 4))
    data[:] = 0  # the camera reuses its buffer
    assert frame[2, 3] == 11


@pytest.mark.parametrize(("pixel_format", "bits"), [("Mono10", 10), ("Mono12", 12), ("Mono16", 16)])
def test_deep_gray_keeps_its_top_8_bits(example, pixel_format, bits):
    top = 2**bits - 1
    data = np.array([0, top, top // 2, 1 << (bits - 8)], dtype=np.uint16)
    frame = example.frame_from_component(component(data, 2, 2, pixel_format))
    assert frame.dtype == np.uint8
    np.testing.assert_array_equal(frame.ravel(), [0, 255, 127, 1])


def test_rgb8_and_bgr8_are_rgb_frames(example):
    rgb = np.array([[[10, 20, 30], [40, 50, 60]]], dtype=np.uint8)
    frame = example.frame_from_component(component(rgb, 2, 1, "RGB8"))
    np.testing.assert_array_equal(frame, rgb)
    frame = example.frame_from_component(component(rgb[:, :, ::-1].copy(), 2, 1, "BGR8"))
    np.testing.assert_array_equal(frame, rgb)
    assert frame.flags.c_contiguous


def test_unconverted_formats_and_short_buffers_are_refused(example):
    with pytest.raises(ValueError, match=r"BayerRG8 is not converted here.*PixelFormat=Mono8"):
        example.frame_from_component(component(np.zeros(4, np.uint8), 2, 2, "BayerRG8"))
    with pytest.raises(ValueError, match="a 4x3 Mono8 frame needs 12 samples, the buffer holds 6"):
        example.frame_from_component(component(np.zeros(6, np.uint8), 4, 3, "Mono8"))


def test_settings_are_typed_for_the_node_map(example):
    assert example.parse_settings(
        ["ExposureTime=5000", "Gain=6.5", "PixelFormat=Mono8", "ReverseX=true"]
    ) == {"ExposureTime": 5000, "Gain": 6.5, "PixelFormat": "Mono8", "ReverseX": True}
    with pytest.raises(ValueError, match="--set: expected NODE=VALUE, got 'Gain'"):
        example.parse_settings(["Gain"])


class FakeHarvesters:
    """A stand-in `harvesters.core` module: one camera sending `n_frames` Mono8 frames."""

    def __init__(self, n_frames: int, fail_at: int | None = None) -> None:
        self.n_frames = n_frames
        self.fail_at = fail_at
        self.calls: list[str] = []
        self.nodes: dict[str, object] = {}
        fake = self

        class Node:
            def __init__(self, name):
                self.name = name

            @property
            def value(self):
                return fake.nodes.get(self.name)

            @value.setter
            def value(self, value):
                fake.calls.append(f"set {self.name}")
                fake.nodes[self.name] = value

        class NodeMap:
            def __getattr__(self, name):
                return Node(name)

        class Buffer:
            def __init__(self, index):
                data = np.full(12, index, np.uint8)
                self.payload = SimpleNamespace(components=[component(data, 4, 3, "Mono8")])

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fake.calls.append("queue buffer")

        class Acquirer:
            remote_device = SimpleNamespace(node_map=NodeMap())
            fetched = 0

            def start(self):
                fake.calls.append("start")

            def try_fetch(self, timeout):
                if self.fetched == fake.fail_at:
                    raise RuntimeError("device lost")
                if self.fetched == fake.n_frames:
                    time.sleep(0.001)  # a real producer waits up to `timeout`
                    return None
                self.fetched += 1
                return Buffer(self.fetched - 1)

            def stop(self):
                fake.calls.append("stop")

            def destroy(self):
                fake.calls.append("destroy")

        class Harvester:
            device_info_list = ("camera",)

            def add_file(self, path, check_existence, check_validity):
                fake.calls.append(f"add {path}")

            def update(self):
                fake.calls.append("update")

            def create(self, key):
                fake.calls.append(f"create {key}")
                return Acquirer()

            def reset(self):
                fake.calls.append("reset")

        self.module = types.ModuleType("harvesters.core")
        self.module.Harvester = Harvester


@pytest.fixture
def harvesters(monkeypatch):
    def install(n_frames: int, fail_at: int | None = None) -> FakeHarvesters:
        fake = FakeHarvesters(n_frames, fail_at)
        package = types.ModuleType("harvesters")
        package.core = fake.module
        monkeypatch.setitem(sys.modules, "harvesters", package)
        monkeypatch.setitem(sys.modules, "harvesters.core", fake.module)
        return fake

    return install


def test_frames_flow_through_a_pipeline_and_closing_releases_the_camera(example, harvesters, fakes):
    fake = harvesters(n_frames=1000)
    stop = threading.Event()
    frames = example.genicam_frames("producer.cti", "SN1", {"ExposureTime": 5000}, stop)
    source = open_source(frames, live=True, source_id="genicam:SN1")
    assert source.frame_shape == (3, 4, 1)
    records = []
    with Pipeline(source, fakes.FakeRunner(), policy="recorded", batch_size=1) as pipeline:
        pipeline.on_poses(records.append)
        fakes.wait_for(lambda: len(records) >= 5, "five records")
    assert {record.source_id for record in records} == {"genicam:SN1"}
    assert fake.nodes == {"ExposureTime": 5000}
    opened = ["add producer.cti", "update", "create {'serial_number': 'SN1'}"]
    assert fake.calls[:5] == [*opened, "set ExposureTime", "start"]
    # Released by the reader thread, which may be inside a fetch when the run ends.
    fakes.wait_for(lambda: fake.calls[-1:] == ["reset"], "the camera released")
    assert fake.calls[-3:] == ["stop", "destroy", "reset"]


def test_a_quiet_camera_stalls_the_run_and_stop_releases_it(example, harvesters, fakes):
    fake = harvesters(n_frames=3)
    clock = fakes.FakeClock()
    stop = threading.Event()
    frames = example.genicam_frames("p.cti", None, {}, stop, "genicam:0")
    source = open_source(frames, live=True, source_id="genicam:0", clock=clock, read_timeout=2)
    runner = fakes.FakeRunner()
    pipeline = Pipeline(source, runner, clock=clock)
    with pytest.raises(SourceStalledError, match=r"^genicam:0: the source stalled"):
        with pipeline:
            fakes.wait_for(lambda: pipeline.stats.frames_captured == 3, "three frames")
            clock.advance(3.0)
            pipeline.join(fakes.HANG_TIMEOUT)
    assert "create 0" in fake.calls and "reset" not in fake.calls
    stop.set()
    fakes.wait_for(lambda: fake.calls[-1:] == ["reset"], "the camera released")
    assert fake.calls[-3:] == ["stop", "destroy", "reset"]


def test_a_failing_camera_ends_the_run_with_one_line_naming_it(example, harvesters, fakes):
    fake = harvesters(n_frames=100, fail_at=4)
    frames = example.genicam_frames("p.cti", "SN7", {}, threading.Event(), "genicam:SN7")
    source = open_source(frames, live=True, source_id="genicam:SN7")
    pipeline = Pipeline(source, fakes.FakeRunner(), policy="recorded", batch_size=1)
    with pytest.raises(SourceError, match=r"^genicam:SN7: RuntimeError: device lost$"):
        pipeline.run()
    assert pipeline.stats.frames_processed == 4
    assert fake.calls[-3:] == ["stop", "destroy", "reset"]
