"""TensorRT export and runner: host logic against a fake `tensorrt`, and a GPU test.

The fake (`fake_tensorrt`) is a small module put in `sys.modules["tensorrt"]`
that records every call the builder and the runner make. Its "engine" runs a
Python kernel on the bytes at the addresses it is given (CPU torch tensors stand
in for device memory): one instance per frame, its points at (frame mean, frame
index). Its TensorRT 11 flavour lacks what 11 removed (`BuilderFlag.FP16`,
`platform_has_fast_fp16`, `EXPLICIT_BATCH`), so touching any of it fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
import types
from pathlib import Path

import attrs
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from sleap_live.engines.errors import (
    ExportError,
    InputMismatchError,
    ModelConfigError,
    RuntimeUnavailableError,
)
from sleap_live.engines.export import tensorrt as trt_export
from sleap_live.engines.export import tensorrt_on_demand
from sleap_live.engines.export.onnx import embed_metadata
from sleap_live.engines.export.tensorrt import (
    EngineCache,
    EngineFile,
    EngineKey,
    GpuInfo,
    build_engine,
    read_engine_file,
    read_onnx_model,
    write_engine_file,
)
from sleap_live.engines.load.metadata import INPUT_NAME, ExportMetadata
from sleap_live.engines.runners import devices
from sleap_live.engines.runners import load as runners_load
from sleap_live.engines.runners import tensorrt as trt_runner
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.tensorrt import TensorRTRunner, TorchMemory
from sleap_live.engines.types import ModelInfo, Skeleton
from tests.engines import fake_cuda

NODES = 2
H200 = GpuInfo("NVIDIA H200", (9, 0))
A6000 = GpuInfo("NVIDIA RTX A6000", (8, 6))
FRAME = (24, 32, 1)
BATCH = 4


# --- a fake `tensorrt` --------------------------------------------------------------


def _kernel(frames: np.ndarray) -> dict[str, np.ndarray]:
    """The fake engine's computation: one instance per frame."""
    batch = frames.shape[0]
    mean = frames.reshape(batch, -1).mean(axis=1).astype(np.float32)
    points = np.stack([mean, np.arange(batch, dtype=np.float32)], axis=-1)
    return {
        "instance_frame": np.arange(batch, dtype=np.int64),
        "points": np.repeat(points[:, None], NODES, axis=1),
        "point_scores": np.repeat((mean / 255)[:, None], NODES, axis=1),
        "instance_scores": mean / 255,
    }


def _view(address: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8)), (size,))
    return raw.view(dtype).reshape(shape)


def fake_tensorrt(version: str, log: list) -> types.ModuleType:
    """A `tensorrt` module of major version 10 or 11 that appends its calls to `log`."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    eleven = version.startswith("11.")
    trt.state = types.SimpleNamespace(parse_errors=[], fail_build=False, dynamic=False)
    trt.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, severity: None})
    flags = {"STRONGLY_TYPED": 1} if eleven else {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1}
    trt.NetworkDefinitionCreationFlag = types.SimpleNamespace(**flags)
    builder_flags = {"TF32": 7} if eleven else {"TF32": 7, "FP16": 0, "INT8": 1}
    trt.BuilderFlag = types.SimpleNamespace(**builder_flags)
    trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE="workspace")
    trt.TensorIOMode = types.SimpleNamespace(INPUT="input", OUTPUT="output")
    trt.nptype = lambda dtype: dtype

    class Network:
        def __init__(self, flags):
            self.flags, self.inputs, self.outputs = flags, {}, {}

    class Parser:
        def __init__(self, network, logger):
            self.network = network
            self.num_errors = 0

        def parse(self, data):
            log.append(("parse", len(data)))
            if trt.state.parse_errors:
                self.num_errors = len(trt.state.parse_errors)
                return False
            graph = onnx.load_from_string(data).graph
            for values, into in (
                (graph.input, self.network.inputs),
                (graph.output, self.network.outputs),
            ):
                for value in values:
                    dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
                    into[value.name] = dtype.name
            return True

        def get_error(self, index):
            return types.SimpleNamespace(desc=lambda: trt.state.parse_errors[index])

    class Profile:
        def __init__(self):
            self.shapes = {}

        def set_shape(self, name, minimum, optimum, maximum):
            self.shapes[name] = [list(minimum), list(optimum), list(maximum)]

    class TimingCache:
        def __init__(self, data):
            self.data = bytes(data)

        def serialize(self):
            return self.data + b"+"

    class Config:
        def __init__(self):
            self.cleared, self.profiles, self.pools, self.timing = [], [], {}, None

        def set_memory_pool_limit(self, pool, size):
            self.pools[pool] = size

        def clear_flag(self, flag):
            self.cleared.append(flag)

        def add_optimization_profile(self, profile):
            self.profiles.append(profile)

        def create_timing_cache(self, data):
            if bytes(data).startswith(b"junk"):
                raise RuntimeError("timing cache header mismatch")
            log.append(("timing cache", bytes(data)))
            return TimingCache(data)

        def set_timing_cache(self, cache, ignore_mismatch):
            self.timing = cache

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            log.append(("network flags", flags))
            return Network(flags)

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            return Profile()

        def build_serialized_network(self, network, config):
            log.append(("build", config.cleared, config.pools))
            if trt.state.fail_build:
                return None
            plan = {
                "version": version,
                "inputs": network.inputs,
                "outputs": network.outputs,
                "profiles": [p.shapes[INPUT_NAME] for p in config.profiles],
            }
            return json.dumps(plan).encode()

    if not eleven:
        Builder.platform_has_fast_fp16 = True

    class Context:
        def __init__(self, engine):
            self.engine, self.shape, self.addresses, self.profile = engine, None, {}, 0

        def set_optimization_profile_async(self, profile, stream):
            self.profile = profile
            log.append(("profile", profile, stream))

        def set_input_shape(self, name, shape):
            self.shape = tuple(shape)
            log.append(("input shape", self.profile, tuple(shape)))
            return True

        def get_tensor_shape(self, name):
            shape = _kernel(np.zeros(self.shape, np.uint8))[name].shape
            return (-1, *shape[1:]) if trt.state.dynamic else shape

        def set_tensor_address(self, name, address):
            self.addresses[name] = address

        def execute_async_v3(self, stream):
            log.append(("execute", self.profile, stream, dict(self.addresses)))
            frames = _view(self.addresses[INPUT_NAME], self.shape, np.dtype(np.uint8))
            for name, value in _kernel(frames.copy()).items():
                _view(self.addresses[name], value.shape, value.dtype)[...] = value
            return True

    class Engine:
        def __init__(self, plan):
            self.plan = plan
            self.names = [*plan["inputs"], *plan["outputs"]]
            self.num_io_tensors = len(self.names)
            self.num_optimization_profiles = len(plan["profiles"])

        def get_tensor_name(self, index):
            return self.names[index]

        def get_tensor_mode(self, name):
            return trt.TensorIOMode.INPUT if name in self.plan["inputs"] else "output"

        def get_tensor_dtype(self, name):
            return np.dtype({**self.plan["inputs"], **self.plan["outputs"]}[name])

        def get_tensor_profile_shape(self, name, profile):
            return self.plan["profiles"][profile]

        def create_execution_context(self):
            return Context(self)

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, plan):
            document = json.loads(bytes(plan))
            return Engine(document) if document["version"] == version else None

    trt.Builder, trt.OnnxParser, trt.Runtime = Builder, Parser, Runtime
    return trt


class FakeStream:
    def __init__(self, handle: int):
        self.cuda_stream = handle


class CountingMemory(TorchMemory):
    """`TorchMemory` on the CPU that counts what it allocates, copies and waits for."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.allocations = 0
        self.uploads = 0
        self.syncs: list[FakeStream] = []

    def device_buffer(self, shape, dtype):
        self.allocations += 1
        return super().device_buffer(shape, dtype)

    def host_buffer(self, shape, dtype):
        self.allocations += 1
        return super().host_buffer(shape, dtype)

    def upload(self, frames, buffer, stream):
        self.uploads += 1
        super().upload(frames, buffer, stream)

    def stream_handle(self, stream):
        return stream.cuda_stream

    def default_stream(self):
        return FakeStream(7)

    def synchronize(self, stream):
        self.syncs.append(stream)


# --- fixtures -------------------------------------------------------------------------


EXACT_RESIZE = {"resize_exact": True, "reason": "no MatMul in the resize"}


def clean_onnx(nodes: int = NODES, *, float64: bool = False, tf32=EXACT_RESIZE) -> bytes:
    """A small graph that lints clean for TensorRT (unless `float64`), with sleap-live metadata."""
    floats, int64 = TensorProto.FLOAT, TensorProto.INT64
    first = (
        [
            helper.make_node("Cast", ["frames"], ["wide"], to=TensorProto.DOUBLE),
            helper.make_node("Cast", ["wide"], ["x"], to=floats),
        ]
        if float64
        else [helper.make_node("Cast", ["frames"], ["x"], to=floats)]
    )
    graph = helper.make_graph(
        [
            *first,
            helper.make_node("ReduceMean", ["x"], ["instance_scores"], axes=[1, 2, 3], keepdims=0),
            helper.make_node("Unsqueeze", ["instance_scores", "axis1"], ["s1"]),
            helper.make_node("Mul", ["s1", "ones_n"], ["point_scores"]),
            helper.make_node("Unsqueeze", ["point_scores", "axis2"], ["s2"]),
            helper.make_node("Mul", ["s2", "ones_xy"], ["points"]),
            helper.make_node("Cast", ["instance_scores"], ["instance_frame"], to=int64),
        ],
        "clean",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, ["batch", "h", "w", 1])],
        [
            helper.make_tensor_value_info("instance_frame", int64, ["batch"]),
            helper.make_tensor_value_info("points", floats, ["batch", nodes, 2]),
            helper.make_tensor_value_info("point_scores", floats, ["batch", nodes]),
            helper.make_tensor_value_info("instance_scores", floats, ["batch"]),
        ],
        [
            helper.make_tensor("axis1", int64, [1], [1]),
            helper.make_tensor("axis2", int64, [1], [2]),
            helper.make_tensor("ones_n", floats, [1, nodes], [1.0] * nodes),
            helper.make_tensor("ones_xy", floats, [1, 1, 2], [1.0, 1.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    info = ModelInfo(
        model_type="topdown",
        skeleton=Skeleton(tuple(f"node{i}" for i in range(nodes)), ((0, 1),), "toy"),
        input_channels=1,
        max_instances=4,
    )
    metadata = ExportMetadata(
        info=info,
        format="onnx",
        input_name=INPUT_NAME,
        input_channels=(1,),
        output_names=("instance_frame", "points", "point_scores", "instance_scores"),
        sleap_live_version="test",
        created="2025-01-01T00:00:00+00:00",
        profile="tensorrt",
        tensorrt={"frame_shape": list(FRAME), "tf32": tf32},
    )
    return embed_metadata(model.SerializeToString(), metadata)


@pytest.fixture(params=["10.13.0.35", "11.1.0.6"])
def trt(request, monkeypatch):
    """The fake `tensorrt` (both major versions), installed in sys.modules."""
    log: list = []
    module = fake_tensorrt(request.param, log)
    module.log = log
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    return module


@pytest.fixture(scope="module")
def model():
    return read_onnx_model(clean_onnx())


def frames(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (batch, *FRAME), dtype=np.uint8)


def builds(trt) -> int:
    return sum(1 for entry in trt.log if entry[0] == "build")


def key_for(model, trt, **changes) -> EngineKey:
    key = EngineKey(model.sha256, H200, trt.__version__, "fp32", FRAME, BATCH)
    return attrs.evolve(key, **changes)


# --- keys, files, building -----------------------------------------------------------


def test_engine_key_names_every_field_and_two_profiles(model, trt):
    key = key_for(model, trt)
    assert key.file_name("model") == (
        f"model.nvidia-h200-sm90.trt{trt.__version__}.fp32.24x32x1-b4.engine"
    )
    one, full = (1, *FRAME), (BATCH, *FRAME)
    assert key.profiles() == ((one, one, one), (one, full, full))
    assert attrs.evolve(key, batch_size=1).profiles() == ((one, one, one),)
    assert EngineKey.from_dict(key.to_dict()) == key
    with pytest.raises(ValueError, match="precision"):
        attrs.evolve(key, precision="int8")


def test_model_hash_ignores_metadata_but_not_the_graph(model):
    assert read_onnx_model(clean_onnx()).sha256 == model.sha256
    rewritten = onnx.load_from_string(clean_onnx())
    rewritten.metadata_props[0].value = rewritten.metadata_props[0].value.replace("2025", "2026")
    assert read_onnx_model(rewritten.SerializeToString()).sha256 == model.sha256
    assert read_onnx_model(clean_onnx(nodes=3)).sha256 != model.sha256


def test_tf32_is_cleared_unless_the_export_says_its_resize_is_exact(trt):
    inexact = read_onnx_model(clean_onnx(tf32={"resize_exact": False}))
    built = build_engine(trt, inexact, key_for(inexact, trt))
    assert built.build["tf32"] is False
    assert [entry[1] for entry in trt.log if entry[0] == "build"] == [[trt.BuilderFlag.TF32]]


def test_a_fixed_size_graph_builds_only_for_its_size(model, trt):
    with pytest.raises(ExportError, match="made for 24x32x1 frames, not 30x32x1"):
        build_engine(trt, model, key_for(model, trt, frame=(30, 32, 1)))


def test_build_is_strongly_typed_fp32_without_removed_flags(model, trt, tmp_path):
    built = build_engine(trt, model, key_for(model, trt), timing_cache=tmp_path / "timing")
    (flags,) = [entry[1] for entry in trt.log if entry[0] == "network flags"]
    assert flags == 1 << trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED
    (build,) = [entry for entry in trt.log if entry[0] == "build"]
    assert build[1] == []  # the export says its resize is exact: TF32 stays on
    assert build[2] == {"workspace": trt_export.DEFAULT_WORKSPACE_BYTES}
    plan = json.loads(built.plan)
    one, full = [1, *FRAME], [BATCH, *FRAME]
    assert plan["profiles"] == [[one, one, one], [one, full, full]]
    assert built.build == {
        "strongly_typed": True,
        "tf32": True,
        "tf32_reason": "no MatMul in the resize",
        "workspace_bytes": trt_export.DEFAULT_WORKSPACE_BYTES,
    }
    if trt.__version__.startswith("11."):
        assert not hasattr(trt.BuilderFlag, "FP16") and not hasattr(
            trt.Builder, "platform_has_fast_fp16"
        )


def test_timing_cache_is_loaded_and_saved(model, trt, tmp_path):
    path = tmp_path / "timing.cache"
    build_engine(trt, model, key_for(model, trt), timing_cache=path)
    assert path.read_bytes() == b"+"
    build_engine(trt, model, key_for(model, trt, batch_size=2), timing_cache=path)
    assert [entry[1] for entry in trt.log if entry[0] == "timing cache"] == [b"", b"+"]
    assert path.read_bytes() == b"++"
    path.write_bytes(b"junk")
    notes: list[str] = []
    build_engine(trt, model, key_for(model, trt), timing_cache=path, notify=notes.append)
    assert len(notes) == 1 and "unreadable" in notes[0] and "\n" not in notes[0]


def test_build_failures_are_one_line(model, trt):
    trt.state.parse_errors = ["Unsupported op Foo", "second"]
    with pytest.raises(
        ExportError, match=r"parser refuses the graph: Unsupported op Foo \(and 1 more"
    ):
        build_engine(trt, model, key_for(model, trt))
    trt.state.parse_errors = []
    trt.state.fail_build = True
    with pytest.raises(ExportError, match="could not build an engine for NVIDIA H200"):
        build_engine(trt, model, key_for(model, trt))
    with pytest.raises(ExportError, match="fp16 engines are built from graphs with float16"):
        build_engine(trt, model, key_for(model, trt, precision="fp16"))
    with pytest.raises(ExportError, match="takes \\(1,\\) channels, not 3"):
        build_engine(trt, model, key_for(model, trt, frame=(24, 32, 3)))


def test_graphs_that_are_not_tensorrt_ready_are_refused(trt):
    wide = read_onnx_model(clean_onnx(float64=True))
    key = EngineKey(wide.sha256, H200, trt.__version__, "fp32", FRAME, 2)
    with pytest.raises(
        ExportError, match=r"not TensorRT-ready .* export it with --profile tensorrt"
    ):
        build_engine(trt, wide, key)
    assert builds(trt) == 0


def test_engine_file_round_trip_and_damage(model, trt, tmp_path):
    built = build_engine(trt, model, key_for(model, trt))
    path = write_engine_file(tmp_path / "a.engine", built)
    assert read_engine_file(path) == built
    assert not list(tmp_path.glob("*.partial"))
    data = path.read_bytes()
    for damaged, reason in (
        (data[:-3], "damaged"),
        (data[:-3] + b"xyz", "damaged"),
        (b"not an engine", "not a sleap-live TensorRT engine"),
        (data[:40] + b"{" + data[41:], "unreadable engine header"),
    ):
        path.write_bytes(damaged)
        with pytest.raises(trt_export.CorruptEngineError, match=reason):
            read_engine_file(path)


# --- the cache ------------------------------------------------------------------------


def cache_for(model, trt, directory, notes, gpu=H200, precision="fp32"):
    return EngineCache(directory, model, "model", trt, gpu, precision, notify=notes.append)


def test_cache_builds_once_and_keeps_gpus_side_by_side(model, trt, tmp_path):
    notes: list[str] = []
    first = cache_for(model, trt, tmp_path, notes).engine(FRAME, BATCH)
    again = cache_for(model, trt, tmp_path, notes).engine(FRAME, BATCH)
    assert again == first and builds(trt) == 1 and notes == []
    cache_for(model, trt, tmp_path, notes, gpu=A6000).engine(FRAME, BATCH)
    assert builds(trt) == 2
    names = sorted(path.name for path in tmp_path.iterdir())
    version = trt.__version__
    assert names == [
        f"model.nvidia-h200-sm90.trt{version}.fp32.24x32x1-b4.engine",
        f"model.nvidia-rtx-a6000-sm86.trt{version}.fp32.24x32x1-b4.engine",
        f"timing.nvidia-h200-sm90.trt{version}.cache",
        f"timing.nvidia-rtx-a6000-sm86.trt{version}.cache",
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"model_sha256": "0" * 64},
        {"gpu": GpuInfo("NVIDIA H200", (9, 1))},
        {"gpu": GpuInfo("NVIDIA H100", (9, 0))},
        {"tensorrt_version": "10.0.0"},
        {"precision": "fp16"},
        {"frame": (24, 30, 1)},
        {"batch_size": 2},
    ],
    ids=lambda changes: next(iter(changes)),
)
def test_an_engine_whose_key_differs_is_rebuilt(model, trt, tmp_path, changes):
    notes: list[str] = []
    cache = cache_for(model, trt, tmp_path, notes)
    wanted = cache.key(FRAME, BATCH)
    stale = attrs.evolve(build_engine(trt, model, wanted), key=attrs.evolve(wanted, **changes))
    write_engine_file(cache.path(wanted), stale)
    assert cache.engine(FRAME, BATCH).key == wanted
    assert builds(trt) == 2
    (note,) = notes
    assert "rebuilding" in note
    assert next(iter(changes)) in note or "another model" in note
    assert read_engine_file(cache.path(wanted)).key == wanted


def test_a_changed_model_rebuilds_its_engine(trt, tmp_path):
    notes: list[str] = []
    cache_for(read_onnx_model(clean_onnx()), trt, tmp_path, notes).engine(FRAME, BATCH)
    cache_for(read_onnx_model(clean_onnx(nodes=3)), trt, tmp_path, notes).engine(FRAME, BATCH)
    assert builds(trt) == 2
    assert len(notes) == 1 and "another model" in notes[0]


def test_a_corrupt_engine_is_rebuilt_with_one_notice(model, trt, tmp_path):
    notes: list[str] = []
    cache = cache_for(model, trt, tmp_path, notes)
    cache.engine(FRAME, BATCH)
    path = cache.path(cache.key(FRAME, BATCH))
    path.write_bytes(path.read_bytes()[:-10])
    assert cache.engine(FRAME, BATCH).key == cache.key(FRAME, BATCH)
    assert builds(trt) == 2
    assert len(notes) == 1 and "damaged" in notes[0] and "rebuilding" in notes[0]
    assert "\n" not in notes[0]


def test_an_unwritable_cache_keeps_the_engine_in_memory(model, trt, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    notes: list[str] = []
    built = cache_for(model, trt, blocker / "cache", notes).engine(FRAME, BATCH)
    assert built.key.frame == FRAME
    assert any("kept in memory only" in note for note in notes)


# --- the runner -----------------------------------------------------------------------


@pytest.fixture
def engine_file(model, trt) -> EngineFile:
    return build_engine(trt, model, key_for(model, trt))


def runner_for(engine_file, trt, memory, **options):
    return TensorRTRunner.from_engine_file(engine_file, tensorrt=trt, memory=memory, **options)


def expected_points(batch: np.ndarray) -> np.ndarray:
    return _kernel(batch)["points"]


def test_runner_chooses_the_profile_by_batch_size(engine_file, trt):
    runner = runner_for(engine_file, trt, CountingMemory())
    for batch in (1, BATCH, 3):
        runner.run(frames(batch))
    executed = [entry[1] for entry in trt.log if entry[0] == "execute"]
    assert executed == [0, 1, 1]
    assert ("profile", 1, 7) in trt.log  # the throughput context was set to profile 1


def test_buffers_are_allocated_once_per_shape_and_reused(engine_file, trt):
    memory = CountingMemory()
    runner = runner_for(engine_file, trt, memory)
    runner.run(frames(BATCH))
    per_shape = memory.allocations
    assert per_shape == 1 + 2 * 4  # input, and each output on the device and the host
    runner.run(frames(BATCH, seed=1))
    assert memory.allocations == per_shape
    runner.run(frames(2))
    runner.run(frames(2, seed=2))
    assert memory.allocations == 2 * per_shape
    input_shapes = [entry[2] for entry in trt.log if entry[0] == "input shape"]
    assert input_shapes == [(BATCH, *FRAME), (2, *FRAME)]  # set only when it changes


def test_every_tensor_is_bound_and_the_given_stream_used_with_one_sync(engine_file, trt):
    memory = CountingMemory()
    own = FakeStream(99)
    runner = runner_for(engine_file, trt, memory, stream=own)
    runner.run(frames(1))  # loads the engine (one wait, for its contexts' profiles)
    memory.syncs.clear()
    memory.uploads = 0
    batch = frames(BATCH)
    poses = runner.run(batch)
    execute = trt.log[-1]
    assert execute[2] == 99
    assert set(execute[3]) == {
        INPUT_NAME,
        "instance_frame",
        "points",
        "point_scores",
        "instance_scores",
    }
    assert memory.syncs == [own] and memory.uploads == 1
    np.testing.assert_allclose([p.points[0, 0] for p in poses], expected_points(batch)[:, 0])
    other = FakeStream(5)
    runner.run(batch, stream=other)
    assert trt.log[-1][2] == 5 and memory.syncs == [own, other]


class DeviceLoggingMemory(CountingMemory):
    """`CountingMemory` that logs into the fake TensorRT's log when the runner's device
    is made current and when its stream is ordered after the caller's."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.log = log

    @contextlib.contextmanager
    def on_device(self):
        self.log.append(("device on",))
        yield
        self.log.append(("device off",))

    def order_after_caller(self, stream):
        self.log.append(("after caller", stream.cuda_stream))


def test_engines_load_and_run_with_the_device_current_after_the_callers_work(
    engine_file, trt, monkeypatch
):
    deserialize = trt.Runtime.deserialize_cuda_engine

    def logged(runtime, plan):
        trt.log.append(("deserialize",))
        return deserialize(runtime, plan)

    monkeypatch.setattr(trt.Runtime, "deserialize_cuda_engine", logged)
    runner = runner_for(engine_file, trt, DeviceLoggingMemory(trt.log))
    trt.log.clear()
    runner.run(frames(1))
    steps = [entry[0] for entry in trt.log if entry[0] != "input shape"]
    assert steps == ["device on", "deserialize", "profile", "after caller", "execute", "device off"]
    assert ("after caller", 7) in trt.log  # the runner's own stream (not given one)


def test_torch_memory_runs_on_a_stream_of_its_own_on_its_device(monkeypatch):
    cuda = fake_cuda.install(monkeypatch)
    memory = TorchMemory("cuda:1")
    stream = memory.default_stream()
    # Not torch's current stream, the legacy default stream (handle 0): one of its own.
    assert stream is memory.default_stream() and cuda.made == [stream]
    assert stream.device == torch.device("cuda:1") and memory.stream_handle(stream) != 0
    memory.order_after_caller(stream)
    assert stream.waited == [cuda.legacy]
    with memory.on_device():
        assert cuda.current_device() == 1
    cuda.device_index = 2
    assert TorchMemory("cuda").device == torch.device("cuda:2")


def test_torch_frames_on_the_device_are_read_in_place(engine_file, trt):
    memory = CountingMemory()
    runner = runner_for(engine_file, trt, memory)
    batch = torch.from_numpy(frames(BATCH))
    poses = runner.run(batch)
    assert memory.uploads == 0
    assert trt.log[-1][3][INPUT_NAME] == batch.data_ptr()
    np.testing.assert_allclose(
        [p.points[0, 0] for p in poses], expected_points(batch.numpy())[:, 0]
    )
    runner.run(batch.transpose(1, 2).contiguous().transpose(1, 2))  # strided: copied once
    assert memory.uploads == 1


def test_results_are_copies_and_large_batches_run_in_slices(engine_file, trt):
    runner = runner_for(engine_file, trt, CountingMemory())
    first = runner.run(frames(BATCH))
    kept = first[0].points.copy()
    runner.run(frames(BATCH, seed=3))
    np.testing.assert_array_equal(first[0].points, kept)
    big = frames(BATCH + 3, seed=4)
    poses = runner.run(big)
    assert len(poses) == BATCH + 3
    means = big.reshape(len(big), -1).mean(axis=1)
    np.testing.assert_allclose([p.points[0, 0, 0] for p in poses], means, rtol=1e-6)


def test_engine_file_alone_runs_and_refuses_other_sizes(engine_file, trt, tmp_path):
    path = write_engine_file(tmp_path / "alone.engine", engine_file)
    runner = runner_for(path, trt, CountingMemory())
    assert runner.info.skeleton.node_names == ("node0", "node1")
    assert len(runner.run(frames(2))) == 2
    with pytest.raises(InputMismatchError, match="takes 24x32x1 frames, not 20x32x1; build one"):
        runner.run(np.zeros((1, 20, 32, 1), np.uint8))
    runner.close()
    runner.close()
    with pytest.raises(Exception, match="closed"):
        runner.run(frames(1))


def test_data_dependent_outputs_are_refused(engine_file, trt):
    trt.state.dynamic = True
    with pytest.raises(ModelConfigError, match=r"sized by the data .* --profile tensorrt"):
        runner_for(engine_file, trt, CountingMemory()).run(frames(1))


def test_an_engine_of_another_tensorrt_version_says_so(model, trt):
    other = attrs.evolve(
        build_engine(trt, model, key_for(model, trt)),
        plan=json.dumps({"version": "9.0"}).encode(),
    )
    with pytest.raises(ModelConfigError, match="cannot load the engine built with TensorRT"):
        runner_for(other, trt, CountingMemory()).run(frames(1))


# --- load_runner ----------------------------------------------------------------------


def test_missing_tensorrt_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    path = tmp_path / "model.onnx"
    path.write_bytes(clean_onnx())
    with pytest.raises(
        RuntimeUnavailableError,
        match=r'TensorRT is not installed \(pip install "sleap-live\[gpu\]" for CUDA 13',
    ):
        load_runner(path, engine="tensorrt")


def test_no_gpu_and_cpu_device_are_one_line(trt, monkeypatch, tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(clean_onnx())
    with pytest.raises(ValueError, match="TensorRT runs on a CUDA GPU"):
        load_runner(path, engine="tensorrt", device="cpu")
    monkeypatch.setattr(devices, "gpu_present", lambda: False)
    with pytest.raises(RuntimeUnavailableError, match="no CUDA GPU found"):
        load_runner(path, engine="tensorrt")
    with pytest.raises(TypeError, match="frame_size"):
        load_runner(path, engine="onnx", frame_size=(24, 32))


@pytest.fixture
def fake_gpu(trt, monkeypatch):
    """load_runner on the fake: a GPU present, CPU tensors for device memory."""
    monkeypatch.setattr(devices, "gpu_present", lambda: True)
    monkeypatch.setattr(trt_export, "current_gpu", lambda device: H200)
    monkeypatch.setattr(trt_runner, "TorchMemory", lambda device: CountingMemory())
    return trt


def test_load_runner_builds_beside_an_onnx_export_and_runs_the_engine_file(fake_gpu, tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(clean_onnx())
    runner = load_runner(path, engine="tensorrt", batch_size=BATCH)
    assert builds(fake_gpu) == 1  # a "tensorrt" profile graph has one size: built at load
    (engine_path,) = tmp_path.glob("model.*.engine")
    assert len(runner.run(frames(BATCH))) == BATCH
    rgb = np.repeat(frames(2), 3, axis=3)  # converted on the host to the graph's channel
    assert len(runner.run(rgb)) == 2 and builds(fake_gpu) == 1
    with pytest.raises(ExportError, match="made for 24x32x1 frames, not 30x40x1"):
        runner.run(np.zeros((1, 30, 40, 1), np.uint8))
    assert load_runner(path, engine="tensorrt", batch_size=BATCH) and builds(fake_gpu) == 1
    alone = load_runner(engine_path)  # engine "auto" runs an engine file with TensorRT
    assert isinstance(alone, TensorRTRunner) and len(alone.run(frames(2))) == 2
    with pytest.raises(ValueError, match="TensorRT engine; it runs with engine 'tensorrt'"):
        load_runner(engine_path, engine="onnx")


def test_load_runner_exports_model_dirs_per_frame_size_and_caches_by_hash(
    fake_gpu, monkeypatch, tmp_path
):
    from sleap_live.engines.graph import build

    info = read_onnx_model(clean_onnx()).metadata.info
    exports = []

    def export(model, paths, frame, options):
        exports.append((frame, options))
        return clean_onnx()

    monkeypatch.setattr(
        build, "load_inference_model", lambda paths, settings=None: types.SimpleNamespace(info=info)
    )
    monkeypatch.setattr(tensorrt_on_demand, "tensorrt_onnx_bytes", export)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    cache = tmp_path / "cache"
    runner = load_runner(model_dir, engine="tensorrt", engine_cache=cache, verify=False)
    assert builds(fake_gpu) == 0 and exports == []  # no frame size yet: on the first batch
    runner.run(frames(2))
    runner.run(frames(3))
    assert exports == [(FRAME, {"verify": False})] and builds(fake_gpu) == 1
    sha = read_onnx_model(clean_onnx()).sha256
    assert [path.name.split(".")[0] for path in cache.glob("*.engine")] == [sha[:16]]
    load_runner(model_dir, engine="tensorrt", engine_cache=cache, frame_size=FRAME[:2])
    assert builds(fake_gpu) == 1  # exported again, and found in the cache


def test_load_runner_keeps_model_dir_engines_in_the_cache_root_or_nowhere(
    fake_gpu, monkeypatch, tmp_path
):
    from sleap_live.engines.graph import build

    info = read_onnx_model(clean_onnx()).metadata.info
    monkeypatch.setattr(
        build, "load_inference_model", lambda paths, settings=None: types.SimpleNamespace(info=info)
    )
    monkeypatch.setattr(tensorrt_on_demand, "tensorrt_onnx_bytes", lambda *_: clean_onnx())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    root, steps = tmp_path / "root", []
    options = {"engine": "tensorrt", "frame_size": FRAME[:2], "verify": False}
    load_runner(model_dir, cache_dir=root, progress=steps.append, **options)
    assert builds(fake_gpu) == 1 and len(list((root / "tensorrt").glob("*.engine"))) == 1
    assert steps[0] == "loading the torch model" and "building the TensorRT engine" in steps[1]
    load_runner(model_dir, cache_dir=root, **options)
    assert builds(fake_gpu) == 1  # found in the cache root
    # Without the cache, engines are built for this run and written nowhere.
    monkeypatch.setenv("SLEAP_LIVE_CACHE_DIR", str(tmp_path / "env"))
    load_runner(model_dir, cache=False, **options)
    assert builds(fake_gpu) == 2 and sorted(tmp_path.iterdir()) == [model_dir, root]
    load_runner(model_dir, **options)  # the default root: $SLEAP_LIVE_CACHE_DIR
    assert len(list((tmp_path / "env" / "tensorrt").glob("*.engine"))) == 1


def test_load_runner_needs_max_instances_for_top_down_model_dirs(fake_gpu, monkeypatch, tmp_path):
    from sleap_live.engines.graph import build
    from sleap_live.engines.settings import InferenceSettings

    info = read_onnx_model(clean_onnx()).metadata.info
    given = []

    def load(paths, settings=None):
        given.append(settings)
        return types.SimpleNamespace(
            info=attrs.evolve(info, max_instances=settings.max_instances, settings=settings)
        )

    monkeypatch.setattr(build, "load_inference_model", load)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    with pytest.raises(ModelConfigError, match=r"give max_instances \(--max-instances N"):
        load_runner(model_dir, engine="tensorrt", settings=InferenceSettings(), verify=False)
    runner = load_runner(
        model_dir, engine="tensorrt", settings=InferenceSettings(max_instances=4), verify=False
    )
    assert runner.info.max_instances == 4 and runner.info.settings == given[-1]


def test_cli_export_tensorrt_writes_the_onnx_and_its_engine(
    fake_gpu, monkeypatch, tmp_path, capsys
):
    from sleap_live import cli
    from sleap_live.engines.export import exporter

    exported = []

    def export_model(paths, output, options):
        exported.append(options)
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_bytes(clean_onnx())
        return Path(output)

    monkeypatch.setattr(exporter, "export_traced", export_model)
    argv = ["export", "m", "-f", "tensorrt", "--no-verify", "-o", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    assert "needs --frame-size HxW" in capsys.readouterr().err
    assert cli.main([*argv, "--frame-size", "24x32", "--batch-size", "2"]) == 0
    (engine,) = (tmp_path / "out").glob("*.engine")
    assert engine.name.endswith(".fp32.24x32x1-b2.engine") and engine.name.startswith("model.")
    assert read_engine_file(engine).metadata.info.model_type == "topdown"
    assert exported[0].verify is False
    assert cli.main([*argv, "--frame-size", "24by32"]) == 2


def test_engine_suffixes_agree():
    assert runners_load.ENGINE_SUFFIXES == trt_export.ENGINE_SUFFIXES


# --- a real engine on a GPU -------------------------------------------------------------


def _has_tensorrt() -> bool:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and _has_tensorrt()), reason="needs TensorRT and a CUDA GPU"
)
def test_real_engine_matches_onnx_runtime_on_a_fixture_model(tmp_path):
    from sleap_live.engines.export.exporter import export_graph
    from sleap_live.engines.export.frames import sample_frames
    from sleap_live.engines.graph.build import load_inference_model
    from sleap_live.engines.runners.onnx import OnnxRunner

    model_dir = Path(__file__).parents[1] / "data" / "models" / "single_instance"
    batch = sample_frames(4, 64, 80, 1)
    runner = load_runner(
        model_dir,
        engine="tensorrt",
        engine_cache=tmp_path,
        frame_size=(64, 80),
        batch_size=4,
        verify=False,
    )
    onnx_bytes = export_graph(
        load_inference_model([model_dir]), profile="tensorrt", frame_size=(64, 80), verify=False
    )
    reference = OnnxRunner(onnx_bytes).run(batch)
    for poses in (
        runner.run(batch),
        runner.run(torch.from_numpy(batch).cuda()),
        runner.run(batch[:1]),
    ):
        for got, want in zip(poses, reference, strict=False):
            np.testing.assert_allclose(got.points, want.points, atol=1e-2)


def test_every_tensorrt_name_the_runner_and_builder_use_is_in_tensorrt_10_and_11():
    # Read from the real tensorrt_cu13_bindings 10.16.1.11 and 11.4.0.106 wheels by
    # scripts/tensorrt_binding_names.py (they do not import without TensorRT's
    # libraries); 11 removed EXPLICIT_BATCH and BuilderFlag.FP16, for one.
    from tests import script_modules

    names = script_modules.load("tensorrt_binding_names.py")
    report = json.loads(names.OUTPUT.read_text())
    assert report["used"] == names.used_names(), (
        "the TensorRT sources changed: run scripts/tensorrt_binding_names.py again"
    )
    ten, eleven = (set(report["tensorrt"][version]) for version in names.VERSIONS)
    assert ten == eleven, f"only in 10: {ten - eleven}; only in 11: {eleven - ten}"
    assert {"execute_async_v3", "set_tensor_address", "STRONGLY_TYPED", "TF32"} <= ten
