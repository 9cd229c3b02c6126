"""Specialised graphs (engines/graph/specialised.py): whole graphs with no host round trip.

Also what the torch runner's CUDA-graph path does with them on the CPU, with stand-ins
for `torch.cuda`: each batch shape's specialised graph is what gets captured, warmed
up on a side stream and captured in thread-local mode, and its `status` says when it
runs eagerly instead.

For every model type the specialised model passes `torch.export(strict=True)` and
`torch.compile(fullgraph=True)` (each fails on a graph break: a branch on a computed
value, `nonzero`, `item`, a tensor made from Python values at run time), and its
poses, its export's and its compiled form's are the eager model's. Stand-in networks
(tests/engines/fake_networks.py) keep the traces to a few seconds each; the fixture
models' poses through the compiled engine are checked in test_parity.py.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.bottomup import BottomUpModel, MultiClassBottomUpModel
from sleap_live.engines.graph.centroid import CentroidModel
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.graph.single_instance import SingleInstanceModel
from sleap_live.engines.graph.specialised import (
    DEFAULT_SLOTS,
    BatchShape,
    SpecialisedModel,
    specialised_input_channels,
)
from sleap_live.engines.graph.topdown import MultiClassTopDownModel, TopDownModel
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import DEFAULT_PROFILE
from sleap_live.engines.runners.cuda import (
    CAPTURE_WARMUP_RUNS,
    GraphedForward,
    capture_cuda_graph,
)
from sleap_live.engines.runners.torch import SpecialisedModels
from sleap_live.engines.types import Skeleton
from tests.engines.fake_cuda import StandInGraph

SKELETON = Skeleton(("head", "thorax", "tail"), ((0, 1), (1, 2)))
CLASSES = ("dim", "bright")
# Frames resized (scale 0.5) and padded to the stride, so the trace holds resize tables.
FRAMES = {"height": 72, "width": 88}
BLOBS = [[(20, 24, 0.9), (60, 44, 0.6)], [(40, 30, 0.8)]]


def _config(**settings) -> PreprocessConfig:
    return PreprocessConfig(in_channels=1, max_stride=8, **settings)


def _model(fakes, model_type: str, **options):
    sampled = fakes.SampledNetwork
    if model_type == "single_instance":
        network = sampled({"SingleInstanceConfmapsHead": 3}, stride=2)
        return SingleInstanceModel(network, _config(scale=0.5), SKELETON, 2)
    if model_type == "centroid":
        network = sampled({"CentroidConfmapsHead": 1}, stride=2)
        return CentroidModel(network, _config(scale=0.5), SKELETON, 2, **options)
    if model_type in ("topdown", "multi_class_topdown"):
        multi = model_type == "multi_class_topdown"
        cls = MultiClassTopDownModel if multi else TopDownModel
        extra = {"class_names": CLASSES} if multi else {}
        return cls(
            sampled({"CentroidConfmapsHead": 1}, stride=2),
            sampled({"CenteredInstanceConfmapsHead": 3}, stride=1, classes=2 if multi else 0),
            _config(scale=0.5),
            _config(),
            SKELETON,
            2,
            1,
            16,
            **extra,
            **options,
        )
    if model_type == "bottomup":
        network = sampled({"MultiInstanceConfmapsHead": 3, "PartAffinityFieldsHead": 4}, stride=2)
        return BottomUpModel(
            network, _config(scale=0.5), SKELETON, SKELETON.edges, 2, 2, max_peaks_per_node=4
        )
    network = sampled({"MultiInstanceConfmapsHead": 3, "ClassMapsHead": 2}, stride=2)
    return MultiClassBottomUpModel(
        network, _config(scale=0.5), SKELETON, CLASSES, 2, 2, max_peaks_per_node=4
    )


MODEL_TYPES = (
    "single_instance",
    "centroid",
    "topdown",
    "multi_class_topdown",
    "bottomup",
    "multi_class_bottomup",
)


def _named(names, outputs) -> dict[str, np.ndarray]:
    return {name: output.detach().numpy() for name, output in zip(names, outputs, strict=True)}


def _assert_same_poses(info, expected, got, batch: int) -> None:
    for want, have in zip(decode(info, expected, batch), decode(info, got, batch), strict=True):
        assert have.points.shape == want.points.shape
        np.testing.assert_array_equal(have.points, want.points)
        for key in ("point_scores", "instance_scores"):
            np.testing.assert_array_equal(getattr(have, key), getattr(want, key))
        np.testing.assert_array_equal(have.identities, want.identities)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_specialised_graph_exports_strict_as_one_graph(fake_networks, model_type):
    options = {"max_instances": 3} if model_type in ("centroid", "topdown") else {}
    model = _model(fake_networks, model_type, **options).eval()
    frames = fake_networks.blob_frames(BLOBS, **FRAMES)
    with torch.inference_mode():
        eager = _named(model.output_names, model(frames))
    fixed = SpecialisedModel(model, BatchShape.of(frames))
    # The trace leaves the model as it was.
    assert (model.profile, model.branch_free) == (DEFAULT_PROFILE, False)

    with torch.inference_mode():
        traced = _named(fixed.output_names, fixed(frames))
    _assert_same_poses(model.info, eager, traced, len(frames))
    # Something found: peaks (bottom-up; the stand-in's PAFs group nothing) or points.
    scores = traced["peak_scores" if "peak_scores" in traced else "point_scores"]
    assert np.isfinite(scores).sum() >= 2

    # A strict export is dynamo's capture of the whole graph, as torch.compile's
    # `fullgraph=True` needs it (the runner's compilation: test_torch_compile.py;
    # inductor's code: test_parity.py).
    exported = torch.export.export(fixed, (frames,), strict=True)
    with torch.inference_mode():
        from_export = _named(fixed.output_names, exported.module()(frames))
    _assert_same_poses(model.info, traced, from_export, len(frames))


# Height a whole multiple of the model input (72 = 2 x 36 at scale 0.5: a
# `WholeFactorPass`), width not (87 -> 44: gathers): both kinds of resize pass in one graph.
MIXED_FRAMES = BatchShape(2, 72, 87, 1)
# Where a traced graph moves a tensor between devices.
_DEVICE_COPIES = ("aten._to_copy", "aten.to.", "aten.copy.", "aten._copy_from")


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_specialised_graphs_hold_no_host_constants_or_device_copies(fake_networks, model_type):
    # What CUDA graphs capture, traced for a device without one: on "meta". A constant
    # left on the CPU, or a copy to the device inside the graph, would copy from pageable
    # host memory on every call, which synchronises the stream; capture refuses that, and
    # the runner falls back to eager with those copies blocking every batch.
    options = {"max_instances": 3} if model_type in ("centroid", "topdown") else {}
    model = _model(fake_networks, model_type, **options).eval().to("meta")
    fixed = SpecialisedModel(model, MIXED_FRAMES, "meta")
    on_host = [name for name, tensor in fixed.state_dict().items() if tensor.device.type != "meta"]
    assert not on_host, f"constants on the host: {on_host}"
    copies = [
        node.format_node()
        for node in fixed.graph.nodes
        if node.op == "call_function"
        and str(node.target).startswith(_DEVICE_COPIES)
        and "device" in node.kwargs
    ]
    assert not copies, f"device copies in the graph: {copies}"


def test_centroids_beyond_the_default_slots_are_flagged(fake_networks):
    model = _model(fake_networks, "topdown").eval()  # max_instances None: every centroid
    many = [[(8 + 9 * (i % 8), 10 + 20 * (i // 8), 0.9) for i in range(DEFAULT_SLOTS + 1)]]
    frames = fake_networks.blob_frames(many, **FRAMES)
    fixed = SpecialisedModel(model, BatchShape.of(frames))
    assert fixed.slots == DEFAULT_SLOTS
    with torch.inference_mode():
        full = _named(fixed.output_names, fixed(frames))
        few = _named(fixed.output_names, fixed(fake_networks.blob_frames(BLOBS[:1], **FRAMES)))
    assert fixed.may_have_dropped(full)
    assert not fixed.may_have_dropped(few)


# --- CUDA graphs of specialised graphs (the torch runner's `cuda_graphs=True`) ----------


def test_cuda_graphs_capture_each_batch_shapes_specialised_graph(fake_networks):
    model = _model(fake_networks, "topdown").eval()  # instance lists in its own profile
    graphs = SpecialisedModels(model, torch.device("cpu"), max_graphs=2)
    captured = []

    def capture(forward, example):
        captured.append(StandInGraph(forward, example))
        return captured[-1]

    graphed = GraphedForward(graphs, graphs.output_names, None, capture=capture)
    frames = fake_networks.blob_frames(BLOBS, **FRAMES)
    with torch.inference_mode():
        first = _named(graphs.output_names, graphed(frames))
        replayed = _named(graphs.output_names, graphed(frames))
        eager = _named(model.output_names, model(frames))
    # What was captured is the batch shape's traced graph, at that shape.
    assert len(captured) == 1 and captured[0].forward is graphs
    assert isinstance(graphs.graph_for(BatchShape.of(frames)), SpecialisedModel)
    assert captured[0].input.shape == frames.shape and captured[0].replays == 1
    assert graphed.eager_reason is None
    assert graphed.status == "CUDA graphs (1 captured, one per input shape)"
    _assert_same_poses(model.info, eager, first, len(frames))
    _assert_same_poses(model.info, eager, replayed, len(frames))


def test_a_failed_capture_says_eager_in_the_status(fake_networks):
    model = _model(fake_networks, "single_instance").eval()
    graphs = SpecialisedModels(model, torch.device("cpu"), max_graphs=2)

    def capture(forward, example):
        raise RuntimeError("operation not permitted when stream is capturing")

    notices = []
    graphed = GraphedForward(
        graphs, graphs.output_names, None, capture=capture, notify=notices.append
    )
    with torch.inference_mode():
        graphed(fake_networks.blob_frames(BLOBS, **FRAMES))
    assert graphed.status == (
        "eager (CUDA graphs off: capture failed "
        "(RuntimeError: operation not permitted when stream is capturing))"
    )
    assert len(notices) == 1


class FakeCuda:
    """Records the calls `capture_cuda_graph` makes of `torch.cuda`, in order."""

    def __init__(self):
        self.calls = []
        self.current = self.FakeStream(self, "current")

    class FakeStream:
        def __init__(self, cuda, name):
            self.cuda, self.name = cuda, name

        def wait_stream(self, other):
            self.cuda.calls.append(f"{self.name} waits for {other.name}")

    def current_stream(self, device=None):
        return self.current

    def Stream(self, device=None):
        return self.FakeStream(self, "side")

    @contextlib.contextmanager
    def stream(self, stream):
        self.calls.append(f"on {stream.name}")
        yield
        self.calls.append(f"off {stream.name}")

    def CUDAGraph(self):
        return "graph"

    @contextlib.contextmanager
    def graph(self, graph, capture_error_mode="global"):
        self.calls.append(f"capture {graph} in {capture_error_mode} mode")
        yield
        self.calls.append("captured")


def test_capture_warms_up_on_a_side_stream_and_captures_thread_local(monkeypatch):
    fake = FakeCuda()
    for name in ("current_stream", "Stream", "stream", "CUDAGraph", "graph"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))

    def forward(frames):
        fake.calls.append("forward")
        return (frames.float(),)

    graph = capture_cuda_graph(forward, torch.zeros(1, 2, 2, 1, dtype=torch.uint8))
    assert fake.calls == [
        "side waits for current",
        "on side",
        *["forward"] * CAPTURE_WARMUP_RUNS,
        "off side",
        "current waits for side",
        "capture graph in thread_local mode",
        "forward",
        "captured",
    ]
    assert graph.input.shape == (1, 2, 2, 1)


def test_a_top_down_model_that_crops_rgb_frames_has_no_specialised_graph(fake_networks):
    sampled = fake_networks.SampledNetwork
    model = TopDownModel(
        sampled({"CentroidConfmapsHead": 1}, stride=2),
        sampled({"CenteredInstanceConfmapsHead": 3}, stride=1),
        _config(ensure_grayscale=True),
        _config(),
        SKELETON,
        2,
        1,
        16,
    )
    with pytest.raises(ModelConfigError, match="ensure_grayscale crops the RGB frames"):
        specialised_input_channels(model)
    with pytest.raises(ModelConfigError, match="ensure_grayscale"):
        SpecialisedModel(model, BatchShape(1, 32, 32, 3))
