"""The GPU runners' host logic on the CPU, and their GPU checks (skipped without CUDA).

On the CPU: the torch CUDA runner's pinned uploads and host copies (pinning off),
CUDA graphs keyed by shape with a stand-in for `torch.cuda.CUDAGraph`, the
fixed-shape decision and its fallback notice; ONNX Runtime's execution provider
options (CUDA, TensorRT, compute stream, CUDA graphs) and the torch I/O binding,
run for real on CPU sessions of this project's exports (what it binds, what it
preallocates and reuses, CUDA graph ids and static inputs updated in place).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from packaging.requirements import Requirement

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.export.frames import sample_frames
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.host.frames import convert_channels
from sleap_live.engines.host.outputs import output_axes
from sleap_live.engines.runners import onnx as onnx_runners
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.runners.cuda import (
    GraphCache,
    GraphedForward,
    HostCopies,
    HostStaging,
    data_dependent_output,
)
from sleap_live.engines.runners.onnx import (
    CPU,
    CUDA,
    TENSORRT,
    OnnxRunner,
    create_session,
    device_of,
    providers_for,
)
from sleap_live.engines.runners.onnx_binding import NO_SYNC, TorchBinding
from sleap_live.engines.runners.onnx_session import (
    OutputShapes,
    with_compute_stream,
    with_tensorrt_profile,
)
from sleap_live.engines.runners.torch import TorchRunner
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import fake_cuda, goldens
from tests.engines.fake_cuda import StandInGraph

DATA = Path(__file__).resolve().parents[1] / "data"
HAS_CUDA = torch.cuda.is_available()
HAS_CUDA_EP = "CUDAExecutionProvider" in ort.get_available_providers()
BOTTOMUP_AXES = output_axes("bottomup")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bottomup_model():
    model_dir = DATA / "models" / "bottomup"
    require(model_dir / "best.ckpt")
    return load_inference_model([model_dir])


@pytest.fixture(scope="module")
def bottomup_onnx(warm_export_cache):
    # The bottom-up fixture model's export, as `load_runner` makes it (the suite's warm
    # export cache holds it).
    return goldens.warm_export("bottomup", warm_export_cache)


@pytest.fixture(scope="module")
def toy(toy_models):
    return toy_models.ToyInstanceModel()


@pytest.fixture(scope="module")
def toy_onnx(toy):
    return export_graph(toy, verify=False)


@pytest.fixture(scope="module")
def animal_frames():
    with FileSource(str(DATA / "videos" / "multi_gray.mkv")) as source:
        return np.stack([frame.image for _, frame in zip(range(4), source, strict=False)])


class Captures:
    """A `capture` function recording what it captured."""

    def __init__(self, fail=None):
        self.graphs = []
        self.fail = fail

    def __call__(self, forward, example):
        if self.fail is not None:
            raise self.fail
        self.graphs.append(StandInGraph(forward, example))
        return self.graphs[-1]


def fixed_forward(frames):
    """Bottom-up-shaped outputs of a batch: sizes fixed by the batch."""
    batch = frames.shape[0]
    value = frames.float().mean(dim=(1, 2, 3))
    peaks = value.view(batch, 1, 1, 1).expand(batch, 2, 3, 2) + 1
    scores = value.view(batch, 1, 1).expand(batch, 2, 3).clone()
    return peaks, scores, scores > 0, value.view(batch, 1, 1, 1).expand(batch, 1, 3, 3) * 2


BOTTOMUP_NAMES = ("peaks", "peak_scores", "peak_valid", "line_scores")


# --- uploads and host copies -----------------------------------------------------------


def test_host_copies_reuse_buffers_sync_once_and_hand_out_copies(monkeypatch):
    cuda = fake_cuda.install(monkeypatch)
    copies = HostCopies(pin=False)
    stream = cuda.Stream("cuda:0")
    first_outputs = {"a": torch.arange(6.0).view(2, 3), "b": torch.ones(4, dtype=torch.bool)}
    first = copies.fetch(first_outputs, stream)
    # Copies queued on the outputs' stream (not the caller's), then one synchronisation.
    handle = stream.cuda_stream
    assert cuda.calls[1:] == [
        ("enter stream", handle),
        ("leave stream", handle),
        ("synchronize", handle),
    ]
    np.testing.assert_array_equal(first["a"], first_outputs["a"].numpy())
    assert first["b"].dtype == np.bool_ and first["b"].all()
    assert copies.allocations() == {"a": 6, "b": 4}
    # A smaller output reuses the buffer; a later fetch never changes results handed out.
    second = copies.fetch(
        {"a": torch.full((1, 3), 7.0), "b": torch.zeros(2, dtype=torch.bool)}, stream
    )
    assert cuda.calls.count(("synchronize", handle)) == 2
    assert copies.allocations() == {"a": 6, "b": 4}
    np.testing.assert_array_equal(second["a"], np.full((1, 3), 7.0, np.float32))
    np.testing.assert_array_equal(first["a"], np.arange(6.0, dtype=np.float32).reshape(2, 3))
    # An instance list longer than before grows its buffer (at least doubling).
    copies.fetch({"a": torch.zeros(5, 3), "b": torch.zeros(0, dtype=torch.bool)}, None)
    assert copies.allocations()["a"] == 15
    copies.fetch({"a": torch.zeros(7, 3), "b": torch.zeros(1, dtype=torch.bool)}, None)
    assert copies.allocations()["a"] == 30


def test_host_staging_uploads_copies_through_one_buffer():
    staging = HostStaging(pin=False)
    frames = sample_frames(2, 10, 12, 3, seed=1)
    first = staging.upload(frames[:, :, ::-1], torch.device("cpu"))  # not contiguous
    np.testing.assert_array_equal(first.numpy(), frames[:, :, ::-1])
    second = staging.upload(np.zeros_like(frames), torch.device("cpu"))
    assert not second.any()
    np.testing.assert_array_equal(first.numpy(), frames[:, :, ::-1])
    assert staging._buffers.allocations() == {"frames": frames.size}


# --- the fixed-shape decision and CUDA graphs --------------------------------------------


def test_fixed_shape_decision_follows_the_output_contract():
    shapes = [(2, 5, 20, 2), (2, 5, 20), (2, 5, 20), (2, 4, 20, 20)]
    assert data_dependent_output(BOTTOMUP_AXES, BOTTOMUP_NAMES, shapes, 2) is None
    assert "batch" in data_dependent_output(BOTTOMUP_AXES, BOTTOMUP_NAMES, shapes, 3)
    instances = output_axes("topdown")
    reason = data_dependent_output(instances, ["points"], [(7, 3, 2)], 2)
    assert reason == "output 'points' is an instance list, as long as the data make it"
    assert "not in the output contract" in data_dependent_output({}, ["x"], [(2,)], 2)
    assert "not the contract's" in data_dependent_output(BOTTOMUP_AXES, ["peaks"], [(2, 5)], 2)
    # Fixed instance slots (the TensorRT profile's layout) are fixed-shape.
    slots = output_axes("topdown", "instance_slots")
    names = list(slots)
    slot_shapes = [(2, 4, 3, 2)[: len(slots[name])] for name in names]
    assert data_dependent_output(slots, names, slot_shapes, 2) is None


def test_graph_cache_keeps_the_most_recently_used():
    captures = Captures()
    cache = GraphCache(captures, max_graphs=2)
    for key in ("a", "b"):
        cache.capture(key, fixed_forward, torch.zeros(1, 2, 2, 1, dtype=torch.uint8))
    assert cache.get("a") is captures.graphs[0]
    cache.capture("c", fixed_forward, torch.zeros(1, 2, 2, 1, dtype=torch.uint8))
    assert cache.keys() == ["a", "c"] and cache.get("b") is None
    with pytest.raises(ValueError, match="at least 1"):
        GraphCache(captures, max_graphs=0)


def test_graphed_forward_captures_per_shape_after_an_eager_run_and_replays():
    captures, notices = Captures(), []
    graphed = GraphedForward(
        fixed_forward,
        BOTTOMUP_NAMES,
        BOTTOMUP_AXES,
        capture=captures,
        max_graphs=2,
        notify=notices.append,
    )
    small = torch.from_numpy(sample_frames(2, 8, 8, 1, seed=1))
    first = graphed(small)
    assert len(captures.graphs) == 1 and captures.graphs[0].replays == 0
    for got, want in zip(first, fixed_forward(small), strict=True):
        torch.testing.assert_close(got, want)
    other = torch.from_numpy(sample_frames(2, 8, 8, 1, seed=2))
    replayed = graphed(other)
    assert captures.graphs[0].replays == 1 and replayed is captures.graphs[0].outputs
    for got, want in zip(replayed, fixed_forward(other), strict=True):
        torch.testing.assert_close(got, want)
    # Each shape gets its own graph; beyond the bound the least recently used goes.
    graphed(torch.zeros(3, 8, 8, 1, dtype=torch.uint8))
    graphed(torch.zeros(1, 4, 4, 1, dtype=torch.uint8))
    assert len(captures.graphs) == 3 and len(graphed.graphs.keys()) == 2
    assert graphed.graphs.get(((2, 8, 8, 1), torch.uint8, "cpu")) is None
    assert notices == [] and graphed.eager_reason is None


def test_instance_lists_run_eagerly_after_one_notice(toy, toy_models):
    captures, notices = Captures(), []
    graphed = GraphedForward(
        toy,
        toy.output_names,
        output_axes(toy.info.model_type),
        capture=captures,
        notify=notices.append,
    )
    frames = sample_frames(2, 64, 80, 3, seed=3)
    with torch.inference_mode():
        for _ in range(3):
            outputs = graphed(torch.from_numpy(frames))
    assert captures.graphs == []
    assert notices == [
        "CUDA graphs off, running eagerly: output 'instance_frame' is an instance list, "
        "as long as the data make it"
    ]
    for got, want in zip(outputs, toy_models.eager_outputs(toy, frames), strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def test_a_failed_capture_turns_graphs_off_with_a_notice():
    notices = []
    graphed = GraphedForward(
        fixed_forward,
        BOTTOMUP_NAMES,
        BOTTOMUP_AXES,
        capture=Captures(fail=RuntimeError("operation not permitted when stream is capturing")),
        notify=notices.append,
    )
    frames = torch.zeros(1, 4, 4, 1, dtype=torch.uint8)
    graphed(frames)
    graphed(frames)
    assert notices == [
        "CUDA graphs off, running eagerly: capture failed "
        "(RuntimeError: operation not permitted when stream is capturing)"
    ]


def test_a_bottom_up_model_replays_its_eager_poses(bottomup_model, animal_frames):
    # The real model through static buffers, as a CUDA graph runs it.
    captures = Captures()
    graphed = GraphedForward(
        bottomup_model, bottomup_model.output_names, BOTTOMUP_AXES, capture=captures
    )
    with torch.inference_mode():
        graphed(torch.from_numpy(animal_frames[:2]))
        replayed = [output.clone() for output in graphed(torch.from_numpy(animal_frames[2:]))]
        eager = bottomup_model(torch.from_numpy(animal_frames[2:]))
    assert captures.graphs[0].replays == 1 and graphed.eager_reason is None
    for got, want in zip(replayed, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


# --- the torch runner -----------------------------------------------------------------


class RecordingStream:
    cuda_stream = 1234

    def __init__(self):
        self.synchronized = 0

    def synchronize(self):
        self.synchronized += 1


def test_torch_runner_options_need_cuda_and_cpu_runs_wait_for_the_stream(toy):
    for options in ({"cuda_graphs": True}, {"stream": RecordingStream()}):
        with pytest.raises(ValueError, match="need a CUDA device"):
            TorchRunner(toy, **options)
    runner = TorchRunner(toy)
    stream = RecordingStream()
    frames = sample_frames(1, 48, 64, 3, seed=1)
    expected = runner.run(frames)
    poses = runner.run(torch.from_numpy(frames), stream=stream)
    assert stream.synchronized == 1
    np.testing.assert_array_equal(poses[0].points, expected[0].points)


class StayingModel:
    """A model stand-in that `to(device)` leaves where it is (no CUDA here)."""

    def __init__(self, model):
        self.info, self.output_names, self.profile = model.info, model.output_names, model.profile

    def to(self, device):
        return self

    def eval(self):
        return self


def test_torch_cuda_runner_runs_on_a_stream_of_its_own_on_its_device(toy, monkeypatch):
    cuda = fake_cuda.install(monkeypatch)
    runner = TorchRunner(StayingModel(toy), "cuda:1")
    (own,) = cuda.made
    # Not torch's current stream, the legacy default stream (handle 0).
    assert runner._stream is own and own.cuda_stream != 0
    assert own.device == torch.device("cuda:1") and runner.device == "cuda:1"
    given = cuda.Stream("cuda:1")
    assert TorchRunner(StayingModel(toy), "cuda:1", stream=given)._stream is given
    assert len(cuda.made) == 2  # the given stream alone: none made for that runner


def test_frames_on_a_device_are_converted_there():
    rgb = sample_frames(2, 9, 11, 3, seed=5)
    device_frames = torch.from_numpy(rgb).to("meta")
    converted, batch = begin_run(object(), object(), device_frames, (1,))
    assert converted.device.type == "meta" and tuple(converted.shape) == (2, 9, 11, 1)
    assert batch == 2
    from sleap_live.engines.runners.base import _convert_on_device

    on_cpu = _convert_on_device(torch.from_numpy(rgb), 1)
    np.testing.assert_array_equal(on_cpu.numpy(), convert_channels(rgb, 1))


# --- ONNX Runtime: providers and sessions ------------------------------------------------


def test_providers_for_cuda_and_tensorrt(tmp_path):
    assert providers_for("cpu") == [CPU]
    assert providers_for("cuda:1") == [(CUDA, {"device_id": 1, "use_tf32": "0"})]
    tensorrt = providers_for("cuda", "tensorrt", trt_cache_dir=tmp_path, trt_fp16=True)
    assert tensorrt == [
        (
            TENSORRT,
            {
                "device_id": 0,
                "trt_engine_cache_enable": "True",
                "trt_engine_cache_path": str(tmp_path),
                "trt_timing_cache_enable": "True",
                "trt_timing_cache_path": str(tmp_path),
                "trt_fp16_enable": "True",
            },
        ),
        (CUDA, {"device_id": 0, "use_tf32": "0"}),
    ]
    assert device_of(tensorrt) == "cuda:0" and device_of(providers_for("cpu")) == "cpu"
    # By default in sleap-live's cache root ($SLEAP_LIVE_CACHE_DIR here); kept nowhere
    # with --no-cache.
    from sleap_live.engines.cache import cache_root

    default = providers_for("cuda:0", "tensorrt")[0][1]
    assert default["trt_engine_cache_path"] == str(cache_root() / "onnxruntime-tensorrt")
    uncached = providers_for("cuda:0", "tensorrt", trt_cache=False)[0][1]
    assert uncached["trt_engine_cache_enable"] == uncached["trt_timing_cache_enable"] == "False"
    with pytest.raises(RuntimeUnavailableError, match="needs a CUDA device"):
        providers_for("cpu", "tensorrt")
    with pytest.raises(ValueError, match="unknown execution provider 'openvino'"):
        providers_for("cuda", "openvino")


def test_the_cuda_provider_computes_without_tf32(tmp_path):
    # ONNX Runtime's CUDA provider defaults `use_tf32` on; the resize's exact integer
    # matrix products need float32's 24 bits. Behind TensorRT too.
    for provider in ("cuda", "tensorrt"):
        (cuda,) = [
            p for p in providers_for("cuda", provider, trt_cache_dir=tmp_path) if p[0] == CUDA
        ]
        assert cuda[1]["use_tf32"] == "0"


def test_gpu_providers_get_the_stream_and_never_the_null_handle():
    providers = [*providers_for("cuda:0", "tensorrt"), CPU]
    streamed = with_compute_stream(providers, 99)
    for _, options in streamed[:2]:
        assert options["user_compute_stream"] == "99"
    # The TensorRT provider takes the handle alone (its parser refuses the flag).
    assert "has_user_compute_stream" not in streamed[0][1]
    assert streamed[1][1]["has_user_compute_stream"] == "1"
    assert streamed[2] == CPU
    explicit = with_compute_stream([(CUDA, {"user_compute_stream": "5"})], 99)
    assert explicit[0][1]["user_compute_stream"] == "5"
    # Handle 0 is the legacy default stream: ONNX Runtime reads it as "no stream".
    with pytest.raises(ValueError, match="not the null handle"):
        with_compute_stream(providers, 0)


def test_every_provider_option_is_one_the_real_onnxruntime_gpu_accepts(tmp_path):
    # The option names onnxruntime-gpu's wheel accepts, read from its binding (TensorRT)
    # and its CUDA provider's library by scripts/ort_provider_options.py: a key the
    # binding does not know fails the TensorRT provider's start ("Invalid TensorRT EP
    # option"), and ONNX Runtime then runs on CUDA and the CPU without it.
    tomllib = pytest.importorskip("tomllib")
    accepted = json.loads((DATA / "onnxruntime_gpu_options.json").read_text())
    extra = tomllib.loads((DATA.parents[1] / "pyproject.toml").read_text())
    allowed = extra["project"]["optional-dependencies"]["gpu"]
    (onnxruntime_gpu,) = [r for r in allowed if r.startswith("onnxruntime-gpu")]
    assert Requirement(onnxruntime_gpu).specifier.contains(accepted["onnxruntime-gpu"])
    built = []
    for provider in ("cuda", "tensorrt"):
        for options in ({}, {"trt_cache": False}, {"trt_fp16": True}):
            providers = providers_for("cuda:1", provider, trt_cache_dir=tmp_path, **options)
            built += with_compute_stream(providers, 99)
            built += with_tensorrt_profile(with_compute_stream(providers, 7), fixed_frame_onnx())
    for name, options in built:
        unknown = set(options) - set(accepted[name])
        assert not unknown, f"{name} does not take {sorted(unknown)}"


def fixed_frame_onnx(height=24, width=32, channels=1):
    """A tiny graph whose frame size is fixed, as `export --profile tensorrt` makes them."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["frames"], ["out"], to=TensorProto.FLOAT)],
        "fixed",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, ["batch", height, width, 1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", height, width, 1])],
    )
    return helper.make_model(graph).SerializeToString()


def test_the_tensorrt_provider_gets_a_profile_from_batch_1_to_8(tmp_path):
    # Without one, ONNX Runtime's TensorRT provider rebuilds when batch 1 follows batch 8.
    providers = providers_for("cuda:1", "tensorrt", trt_cache_dir=tmp_path)
    model = fixed_frame_onnx()
    profiled = with_tensorrt_profile(providers, model)
    assert profiled[0][1]["trt_profile_min_shapes"] == "frames:1x24x32x1"
    assert profiled[0][1]["trt_profile_opt_shapes"] == "frames:8x24x32x1"
    assert profiled[0][1]["trt_profile_max_shapes"] == "frames:8x24x32x1"
    assert profiled[0][1]["device_id"] == 1 and profiled[1] == providers[1]
    path = tmp_path / "fixed.onnx"
    path.write_bytes(model)
    assert with_tensorrt_profile(providers, path, max_batch=16)[0][1]["trt_profile_max_shapes"] == (
        "frames:16x24x32x1"
    )
    # A graph of any frame size cannot be given one; CUDA alone needs none.
    assert with_tensorrt_profile(providers, fixed_frame_onnx(height="h")) == providers
    assert with_tensorrt_profile(providers_for("cuda"), model) == providers_for("cuda")


@pytest.mark.skipif(HAS_CUDA_EP, reason="onnxruntime-gpu is installed")
@pytest.mark.parametrize("execution_provider", ["cuda", "tensorrt"])
def test_missing_gpu_providers_name_the_install(toy_onnx, execution_provider, tmp_path):
    providers = providers_for("cuda", execution_provider, trt_cache_dir=tmp_path)
    with pytest.raises(RuntimeUnavailableError) as error:
        create_session(toy_onnx, providers)
    message = str(error.value)
    assert "\n" not in message and 'pip install "sleap-live[gpu]"' in message
    assert providers[0][0] in message


def test_output_shapes_of_this_projects_exports(bottomup_onnx, toy_onnx, toy):
    bottomup = OutputShapes.of_session(create_session(bottomup_onnx), BOTTOMUP_AXES)
    assert bottomup.data_dependent() is None
    assert bottomup("peak_scores", 3) == (3, 5, 20) and bottomup("line_scores", 1)[0] == 1
    toy_shapes = OutputShapes.of_session(create_session(toy_onnx), output_axes(toy.info.model_type))
    assert toy_shapes("points", 2) is None
    assert toy_shapes.data_dependent() == "output 'instance_frame' is as long as the data make it"


# --- ONNX Runtime: the torch I/O binding, on real CPU sessions ----------------------------


class RecordingSession:
    """A real session whose bindings record what they are bound to."""

    def __init__(self, session):
        self.session = session
        self.bindings = []
        self.runs = []

    def __getattr__(self, name):
        return getattr(self.session, name)

    def io_binding(self):
        self.bindings.append(RecordingBinding(self.session.io_binding()))
        return self.bindings[-1]

    def run_with_iobinding(self, binding, run_options=None):
        self.runs.append((binding, run_options))
        self.session.run_with_iobinding(binding.binding, run_options)


class RecordingBinding:
    def __init__(self, binding):
        self.binding = binding
        self.inputs = []
        self.outputs = []

    def __getattr__(self, name):
        return getattr(self.binding, name)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        self.inputs.append((name, device_type, tuple(shape), buffer_ptr))
        self.binding.bind_input(name, device_type, device_id, element_type, shape, buffer_ptr)

    def bind_output(self, name, device_type="cpu", device_id=0, *args):
        self.outputs.append((name, device_type, *(args[1:2] if args else ()), *args[2:]))
        self.binding.bind_output(name, device_type, device_id, *args)


def session_outputs(session, frames):
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, {"frames": frames}), strict=True))


def assert_outputs_equal(got, want):
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


def test_torch_binding_binds_tensors_in_place_and_preallocates(bottomup_onnx, animal_frames):
    session = create_session(bottomup_onnx, intra_op_threads=1)
    recording = RecordingSession(session)
    shapes = OutputShapes.of_session(session, BOTTOMUP_AXES)
    binding = TorchBinding(recording, "cpu", shapes)
    frames = torch.from_numpy(animal_frames[:2].copy())
    first = binding.run(frames)
    assert_outputs_equal(first, session_outputs(session, animal_frames[:2]))
    (bound,) = recording.bindings
    # The tensor itself is bound, no copy; every output goes to a preallocated tensor.
    assert bound.inputs == [("frames", "cpu", tuple(frames.shape), frames.data_ptr())]
    buffers = binding.bound_shapes[2].outputs
    assert sorted(buffers) == sorted(first)
    assert [(name, ptr) for name, _, _, ptr in bound.outputs] == [
        (name, buffers[name].data_ptr()) for name in first
    ]
    assert recording.runs[0][1].get_run_config_entry(NO_SYNC) == "1"
    # The same buffers serve the next batch of that size; results handed out stay.
    second = binding.run(animal_frames[2:])
    assert len(recording.bindings) == 1 and binding.bound_shapes[2].outputs is buffers
    assert_outputs_equal(second, session_outputs(session, animal_frames[2:]))
    assert_outputs_equal(first, session_outputs(session, animal_frames[:2]))
    binding.run(animal_frames[:3])
    assert sorted(binding.bound_shapes) == [2, 3]


def test_torch_binding_leaves_instance_lists_to_onnx_runtime(toy_onnx, toy):
    session = create_session(toy_onnx, intra_op_threads=1)
    recording = RecordingSession(session)
    shapes = OutputShapes.of_session(session, output_axes(toy.info.model_type))
    binding = TorchBinding(recording, "cpu", shapes)
    frames = sample_frames(2, 96, 128, 3, seed=4)
    assert_outputs_equal(binding.run(frames), session_outputs(session, frames))
    (bound,) = recording.bindings
    assert all(len(output) == 2 for output in bound.outputs)  # (name, device) only
    with pytest.raises(RuntimeError, match="does not have configuration"):
        recording.runs[0][1].get_run_config_entry(NO_SYNC)


# --- ONNX Runtime: the runner's choices --------------------------------------------------


def test_onnx_runner_options_need_a_gpu(toy_onnx):
    for options in ({"cuda_graphs": True}, {"stream": RecordingStream()}):
        with pytest.raises(ValueError, match="need a CUDA execution provider"):
            OnnxRunner(toy_onnx, **options)


@pytest.fixture
def sessions(monkeypatch):
    """The providers of each session OnnxRunner makes; the sessions made on the CPU."""
    calls = []

    def create(model, providers, **options):
        calls.append(providers)
        return create_session(model, intra_op_threads=1)

    monkeypatch.setattr(onnx_runners, "create_session", create)
    monkeypatch.setattr(onnx_runners, "torch_has_cuda", lambda: True)
    return calls


def test_onnx_runner_computes_on_a_stream_of_its_own_on_its_device(
    sessions, bottomup_onnx, monkeypatch
):
    cuda = fake_cuda.install(monkeypatch)
    runner = OnnxRunner(bottomup_onnx, providers_for("cuda:1"))
    (own,) = cuda.made
    assert own.device == torch.device("cuda:1") and own.cuda_stream != 0
    ((name, options),) = sessions[0]
    assert name == CUDA and options["device_id"] == 1
    assert options["user_compute_stream"] == str(own.cuda_stream) != "0"
    assert isinstance(runner._io, TorchBinding) and runner._io._stream is own


def test_onnx_runner_orders_its_stream_after_the_frames_and_the_caller(
    sessions, bottomup_onnx, monkeypatch
):
    cuda = fake_cuda.install(monkeypatch)
    given = cuda.Stream("cuda:0")
    runner = OnnxRunner(bottomup_onnx, providers_for("cuda"), stream=given)
    assert sessions[0][0][1]["user_compute_stream"] == str(given.cuda_stream)
    frames_ready = cuda.Stream("cuda:0")
    cuda.calls.clear()
    with runner._io._on_stream(frames_ready):
        assert cuda.current is given
    assert cuda.calls[:3] == [
        ("wait_stream", given.cuda_stream, frames_ready.cuda_stream),
        ("wait_stream", given.cuda_stream, 0),
        ("enter stream", given.cuda_stream),
    ]


def test_onnx_cuda_graphs_are_not_offered_and_never_build_a_second_session(
    sessions, bottomup_onnx, monkeypatch, caplog
):
    fake_cuda.install(monkeypatch)
    caplog.set_level(logging.WARNING, logger="sleap_live.engines.runners")
    OnnxRunner(bottomup_onnx, providers_for("cuda", "tensorrt"), cuda_graphs=True)
    (providers,) = sessions
    for _, options in providers:
        assert not {"enable_cuda_graph", "trt_cuda_graph_enable"} & set(options)
    (record,) = caplog.records
    assert record.getMessage().startswith(
        "CUDA graphs off, running without them: ONNX Runtime captures CUDA graphs in global mode"
    )


# --- on a GPU --------------------------------------------------------------------------


def assert_same_poses(got, want, atol):
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert mine.n_instances == theirs.n_instances
        np.testing.assert_allclose(mine.points, theirs.points, atol=atol)
        np.testing.assert_allclose(mine.point_scores, theirs.point_scores, atol=atol)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_torch_cuda_runner_matches_the_cpu(bottomup_model, toy, animal_frames, cuda_graphs):
    stream = torch.cuda.Stream()
    for model, frames in ((bottomup_model, animal_frames), (toy, sample_frames(2, 96, 128, 3))):
        expected = TorchRunner(model).run(frames)
        runner = TorchRunner(model, "cuda", cuda_graphs=cuda_graphs, stream=stream)
        for _ in range(3):  # eager, captured, replayed
            assert_same_poses(runner.run(torch.from_numpy(frames).cuda()), expected, 1e-3)
            assert_same_poses(runner.run(frames), expected, 1e-3)
        model.to("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_CUDA_EP and HAS_CUDA), reason="needs onnxruntime-gpu and CUDA torch")
def test_onnx_cuda_runner_binds_torch_tensors_and_matches_the_cpu(bottomup_onnx, animal_frames):
    expected = OnnxRunner(bottomup_onnx).run(animal_frames)
    runner = OnnxRunner(bottomup_onnx, providers_for("cuda"))
    assert isinstance(runner._io, TorchBinding)
    for _ in range(3):
        assert_same_poses(runner.run(torch.from_numpy(animal_frames).cuda()), expected, 1e-3)
        assert_same_poses(runner.run(animal_frames), expected, 1e-3)


@pytest.mark.skipif(HAS_CUDA_EP, reason="onnxruntime-gpu is installed")
def test_both_onnxruntime_builds_installed_is_named_with_the_fix(toy_onnx, monkeypatch):
    import importlib.metadata

    real_version = importlib.metadata.version

    def version(distribution):
        return "1.31.1" if distribution == "onnxruntime-gpu" else real_version(distribution)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(RuntimeUnavailableError) as error:
        create_session(toy_onnx, providers_for("cuda"))
    message = str(error.value)
    assert "\n" not in message
    assert "onnxruntime and onnxruntime-gpu are both installed" in message
    assert "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu" in message
