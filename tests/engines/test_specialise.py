"""Graphs specialised to one frame shape: the same outputs as the dynamic graph, bit for bit.

Also: the passes that compute nothing at that shape are gone from them, the
runner uses one only after it matched the dynamic graph on its first batch, and
the export cache keys them by the frame shape.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sleap_live.engines.errors import ExportError
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.export.frames import sample_frames
from sleap_live.engines.export.on_demand import SpecialisedGraphExports
from sleap_live.engines.export.onnx import trace_to_onnx
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.load.export_cache import ExportCache
from sleap_live.engines.load.metadata import DEFAULT_OPSET
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.specialise import SpecialisedSessions, differing_output

MODELS = Path(__file__).parents[1] / "data" / "models"
TOPDOWN = [MODELS / "centroid", MODELS / "centered_instance"]
SINGLE = [MODELS / "single_instance"]
# The fixture models' size matcher takes frames to 168x200: that size makes it an identity.
TRAINING_SIZE = (168, 200)


def session(graph: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(graph, session_options(), providers=["CPUExecutionProvider"])


def outputs(graph: bytes | ort.InferenceSession, frames: np.ndarray) -> dict[str, np.ndarray]:
    run = graph if isinstance(graph, ort.InferenceSession) else session(graph)
    names = [output.name for output in run.get_outputs()]
    return dict(zip(names, run.run(None, {"frames": frames}), strict=True))


def op_count(graph: bytes, op_type: str) -> int:
    return sum(node.op_type == op_type for node in onnx.load_from_string(graph).graph.node)


def blob_frames(height: int, width: int, channels: int = 1) -> np.ndarray:
    """Frames the fixture models find animals in: the synthetic blobs."""
    return sample_frames(3, height, width, channels, seed=1)


@pytest.fixture(scope="session")
def built_models():
    """name -> a fixture model and a session of its dynamic graph (which takes 1- and
    3-channel frames), built once per process: every shape's test of a model shares
    them, however the tests are ordered or spread over workers."""

    @functools.cache
    def build(name: str) -> tuple[Any, ort.InferenceSession]:
        paths = {"topdown": TOPDOWN, "single_instance": SINGLE, "bottomup": [MODELS / "bottomup"]}
        inference_model = load_inference_model(paths[name]).eval()
        dynamic, _ = trace_to_onnx(
            inference_model, blob_frames(*TRAINING_SIZE), DEFAULT_OPSET, dynamic_channels=True
        )
        return inference_model, session(dynamic)

    return build


@pytest.fixture(params=["topdown", "single_instance", "bottomup"])
def model(request, built_models):
    """A fixture model and a session of its dynamic graph."""
    return built_models(request.param)


# At the training size the top-down centroid model's input scale 0.5 and, at twice
# it, every size matcher halve the frames by a whole factor (`WholeFactorPass`).
# Top-down, whose graph has the most passes (two scales, crops), takes every shape;
# the other models the identity, a general resize and the other channel count.
SHAPES = {
    "topdown": [
        (*TRAINING_SIZE, 1),
        (171, 203, 1),
        (240, 240, 1),
        (97, 130, 1),
        (171, 203, 3),
        (2 * TRAINING_SIZE[0], 2 * TRAINING_SIZE[1], 1),
    ],
    "single_instance": [(*TRAINING_SIZE, 1), (171, 203, 1), (171, 203, 3)],
    "bottomup": [(*TRAINING_SIZE, 1), (171, 203, 1), (171, 203, 3)],
}


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        pytest.param(name, shape, id=f"{name}-{'x'.join(map(str, shape))}")
        for name, shapes in SHAPES.items()
        for shape in shapes
    ],
    indirect=["model"],
)
def test_a_static_graph_gives_the_dynamic_graphs_outputs_bit_for_bit(model, shape):
    inference_model, dynamic = model
    frames = blob_frames(*shape)
    specialised = export_graph(inference_model, frame_shape=shape)
    expected, got = outputs(dynamic, frames), outputs(specialised, frames)
    assert differing_output(expected, got) is None
    # Another batch size runs on the same graph.
    assert differing_output(outputs(dynamic, frames[:1]), outputs(specialised, frames[:1])) is None


def test_a_static_graph_takes_only_its_frame_shape(model):
    inference_model, _ = model
    specialised = session(export_graph(inference_model, frame_shape=(*TRAINING_SIZE, 1)))
    (graph_input,) = specialised.get_inputs()
    assert graph_input.shape[1:] == [*TRAINING_SIZE, 1]
    with pytest.raises(Exception, match="invalid dimensions"):
        specialised.run(None, {"frames": blob_frames(170, 200)})


def test_identity_passes_are_left_out_at_the_training_size():
    inference_model = load_inference_model(SINGLE)  # size matcher only, scale 1
    dynamic = export_graph(inference_model, verify=False)
    specialised = export_graph(inference_model, frame_shape=(*TRAINING_SIZE, 1))
    # The exact resize is two MatMuls (one per axis); at the training size it is not there.
    assert op_count(dynamic, "MatMul") == 2
    assert op_count(specialised, "MatMul") == 0
    assert op_count(specialised, "Pad") < op_count(dynamic, "Pad")
    assert len(onnx.load_from_string(specialised).graph.node) < len(
        onnx.load_from_string(dynamic).graph.node
    )
    # At another size the size matcher resizes.
    other = export_graph(inference_model, frame_shape=(168, 300, 1))
    assert op_count(other, "MatMul") == 2


def test_a_resize_by_a_whole_factor_is_matrix_products_without_gathers():
    inference_model = load_inference_model(SINGLE)  # size matcher only, scale 1
    at_size = export_graph(inference_model, frame_shape=(*TRAINING_SIZE, 1))
    halved = export_graph(inference_model, frame_shape=(336, 400, 1))
    # One Gemm for the width and one MatMul for the height, over whole rows.
    assert op_count(halved, "Gather") == op_count(at_size, "Gather")
    assert op_count(halved, "Gemm") == op_count(at_size, "Gemm") + 1
    # 300 columns to 200 is not a whole factor: the general pass, which gathers.
    other = export_graph(inference_model, frame_shape=(168, 300, 1))
    assert op_count(other, "Gather") > op_count(at_size, "Gather")


def test_bad_frame_shapes_are_refused():
    inference_model = load_inference_model(SINGLE)
    for shape in [(0, 10, 1), (10, 10, 2)]:
        with pytest.raises(ValueError, match="frame_shape"):
            export_graph(inference_model, frame_shape=shape)


# --- the runner's choice -----------------------------------------------------------


class FakeSession:
    """Returns the given outputs, counting its runs."""

    class Port:
        def __init__(self, name: str) -> None:
            self.name = name

    def __init__(self, values: dict[str, np.ndarray]) -> None:
        self.values = values
        self.runs = 0

    def get_inputs(self):
        return [self.Port("frames")]

    def get_outputs(self):
        return [self.Port(name) for name in self.values]

    def run(self, names, feed):
        self.runs += 1
        return list(self.values.values())


class FakeGraphs:
    def __init__(self, graphs: dict[tuple[int, int, int], bytes | Exception]) -> None:
        self.graphs = graphs
        self.asked: list[tuple[int, int, int]] = []
        self.rejected: list[tuple[tuple[int, int, int], str]] = []

    def graph(self, shape):
        self.asked.append(shape)
        graph = self.graphs.get(shape)
        if isinstance(graph, Exception):
            raise graph
        return graph

    def reject(self, shape, reason):
        self.rejected.append((shape, reason))


POINTS = {"points": np.array([[1.5, np.nan]], np.float32), "instance_frame": np.array([0])}


def sessions_with(static_values, graphs=None):
    dynamic = FakeSession(POINTS)
    specialised = FakeSession(static_values)
    graphs = graphs or FakeGraphs({(4, 5, 1): b"specialised"})
    notes: list[str] = []
    made = {b"specialised": specialised}
    shapes = SpecialisedSessions(dynamic, graphs, made.__getitem__, notes.append)
    return shapes, dynamic, specialised, graphs, notes


def test_a_static_graph_runs_once_it_matched_the_dynamic_one():
    shapes, dynamic, specialised, graphs, notes = sessions_with(dict(POINTS))
    frames = np.zeros((2, 4, 5, 1), np.uint8)
    for _ in range(3):
        assert differing_output(POINTS, shapes.run(frames)) is None
    assert (dynamic.runs, specialised.runs) == (1, 3)
    assert shapes.session_for((4, 5, 1)) is specialised
    assert graphs.asked == [(4, 5, 1)] and notes == [] and graphs.rejected == []


@pytest.mark.parametrize(
    "values",
    [
        {"points": np.array([[1.5, 0.0]], np.float32), "instance_frame": np.array([0])},
        {"points": np.array([[1.5000001, np.nan]], np.float32), "instance_frame": np.array([0])},
        {"points": np.array([[1.5, np.nan]], np.float64), "instance_frame": np.array([0])},
        {"points": np.array([[1.5, np.nan]], np.float32)},
    ],
)
def test_a_static_graph_that_differs_by_a_bit_is_rejected(values):
    shapes, dynamic, specialised, graphs, notes = sessions_with(values)
    frames = np.zeros((1, 4, 5, 1), np.uint8)
    for _ in range(2):
        assert differing_output(POINTS, shapes.run(frames)) is None
    assert dynamic.runs == 2 and specialised.runs == 1
    assert shapes.session_for((4, 5, 1)) is dynamic
    assert len(graphs.rejected) == 1 and len(notes) == 1
    assert "5x4x1 frames is not used" in notes[0]


def test_shapes_without_a_static_graph_run_the_dynamic_one():
    failing = FakeGraphs({(4, 5, 1): ExportError("the export failed")})
    shapes, dynamic, specialised, _, notes = sessions_with(dict(POINTS), failing)
    shapes.run(np.zeros((1, 4, 5, 1), np.uint8))
    shapes.run(np.zeros((1, 4, 5, 1), np.uint8))
    shapes.run(np.zeros((1, 6, 5, 1), np.uint8))  # no graph for this shape: None
    assert specialised.runs == 0 and dynamic.runs == 3
    assert failing.asked == [(4, 5, 1), (6, 5, 1)]
    assert notes == [
        "no graph specialised to 5x4x1 frames (the export failed); running the dynamic graph"
    ]


# --- load_runner and the export cache ----------------------------------------------


def test_the_cache_keys_static_graphs_by_frame_shape(tmp_path):
    cache = ExportCache(tmp_path, lambda line: None)
    graphs = SpecialisedGraphExports(SINGLE, {"verify": False}, cache, lambda step: None)
    keys = {shape: graphs.key(shape) for shape in [(168, 200, 1), (200, 168, 1), (168, 200, 3)]}
    assert len({key.digest for key in keys.values()}) == 3
    assert keys[(168, 200, 1)].parts["export"] == {
        "opset": DEFAULT_OPSET,
        "static_frame_shape": [168, 200, 1],
    }
    # The dynamic graph's verification does not make another specialised graph; the opset does.
    verified = SpecialisedGraphExports(SINGLE, {"verify": True}, cache, lambda step: None)
    assert verified.key((168, 200, 1)) == keys[(168, 200, 1)]
    opset = SpecialisedGraphExports(SINGLE, {"opset": 18}, cache, lambda step: None)
    assert opset.key((168, 200, 1)) != keys[(168, 200, 1)]

    graph = graphs.graph((168, 200, 1))
    assert cache.read(keys[(168, 200, 1)]) == graph
    # Another loader finds it in the cache without building the torch model.
    again = SpecialisedGraphExports(SINGLE, {"verify": False}, cache, lambda step: None)
    again._exported = None  # would fail if called
    assert again.graph((168, 200, 1)) == graph
    again.reject((168, 200, 1), "a test")
    assert cache.read(keys[(168, 200, 1)]) is None


def test_load_runner_runs_the_frames_shape_on_a_checked_static_graph(tmp_path):
    frames = blob_frames(*TRAINING_SIZE)
    steps: list[str] = []
    runner = load_runner(
        TOPDOWN,
        engine="onnx",
        device="cpu",
        cache_dir=tmp_path,
        verify=False,
        verify_frames=frames,
        progress=steps.append,
    )
    assert any(step.startswith("specialising the model to 200x168x1 frames") for step in steps)
    dynamic = runner.session_for((999, 999, 1))
    poses = runner.run(frames)
    specialised = runner.session_for((*TRAINING_SIZE, 1))
    assert specialised is not dynamic
    assert specialised.get_inputs()[0].shape[1:] == [*TRAINING_SIZE, 1]
    assert sum(len(pose.instance_scores) for pose in poses) > 0
    # Other sizes still run, on the dynamic graph or their own.
    assert len(runner.run(blob_frames(171, 203))) == 3
    runner.close()


def test_static_graphs_are_for_the_cpu():
    from sleap_live.engines.runners.onnx import CUDA, OnnxRunner

    with pytest.raises(ValueError, match="run on the CPU"):
        OnnxRunner(b"", [CUDA], specialised=FakeGraphs({}))


def test_a_static_graph_exports_when_its_trace_finds_no_animal():
    """Crops resized by the instance model's input scale, and no centroid in the trace."""
    import attrs

    inference_model = load_inference_model(TOPDOWN).eval()
    inference_model.instance_preprocess = attrs.evolve(
        inference_model.instance_preprocess, scale=0.5
    )
    inference_model.stage.peak_threshold = 2.0  # confidence maps never reach it
    specialised = export_graph(inference_model, frame_shape=(*TRAINING_SIZE, 1))
    got = outputs(specialised, blob_frames(*TRAINING_SIZE))
    assert len(got["instance_frame"]) == 0 and got["points"].shape == (0, 5, 2)
