"""`precision="int8"`: ONNX Runtime's static quantisation of the networks, on the CPU.

One int8 graph is made (the single-instance fixture, calibrated on frames of its
video) and shared; the rest checks what it is made of, what it says at load, the
cache, and the refusals.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export import quantise
from sleap_live.engines.export.quantise import INT8_FOLDER, network_nodes
from sleap_live.engines.host.compare import pose_difference
from sleap_live.engines.runners import int8 as int8_module
from sleap_live.engines.runners.int8 import Int8Check
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

CASE = "single_instance"
# Frames spread over the fixture video, as a run's verification frames are.
CALIBRATION = slice(0, 200, 25)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
# The fixture's int8 points against fp32 (measured: median 0.011 px, p99 1.8 px on
# its calibration frames, no count changes): bounds that hold those with room, and
# that a quantised pre- or postprocessing (whole pixels off everywhere) fails.
MEDIAN_PX, P99_PX = 0.1, 4.0


@cache
def _frames() -> np.ndarray:
    _, video, _, _ = goldens.case_paths(CASE)
    require(video)
    with FileSource(str(video)) as source:
        return np.stack([frame.image for frame in source])


def _models() -> list[str]:
    models, _, _, _ = goldens.case_paths(CASE)
    require(*models)
    return [str(m) for m in models]


@pytest.fixture(scope="module")
def quantised(warm_export_cache, tmp_path_factory):
    """The int8 runner, its load line, the float32 export and the cache it went in."""
    folder = tmp_path_factory.mktemp("int8_cache")
    lines: list[str] = []
    frames = _frames()[CALIBRATION]
    onnx_bytes = goldens.warm_export(CASE, warm_export_cache)
    fp32 = OnnxRunner(onnx_bytes, intra_op_threads=1)
    runner = int8_module.int8_runner(
        onnx_bytes,
        threads=1,
        verify_frames=frames,
        cache_root=folder,
        notify=lines.append,
    )
    yield runner, fp32, lines, onnx_bytes, folder
    runner.close()
    fp32.close()


def test_int8_says_its_error_and_speed_up_at_load_and_keeps_close_to_fp32(quantised):
    runner, fp32, lines, _, _ = quantised
    (line,) = lines
    assert line.startswith("int8 (networks quantised, ONNX Runtime) against fp32 on 8 frames")
    for part in (
        "points median",
        "p99",
        "instance counts changed on 0/8 frames",
        "x; measured now",
    ):
        assert part in line
    frames = _frames()[CALIBRATION]
    difference = pose_difference(runner.run(frames), fp32.run(frames))
    assert difference.count_changes == 0 and difference.presence_mismatches == 0
    assert difference.quantile_px(0.5) <= MEDIAN_PX and difference.quantile_px(0.99) <= P99_PX


def test_only_the_networks_are_quantised(quantised):
    runner, _, _, onnx_bytes, folder = quantised
    full = onnx.load_from_string(onnx_bytes)
    (entry,) = (folder / INT8_FOLDER).glob("*.onnx")
    reduced = onnx.load(str(entry))
    networks = set(network_nodes(full))
    # Every node outside the networks is there unchanged; what was added is QDQ pairs.
    outside = [n for n in full.graph.node if n.name not in networks]
    kept = {n.name: n for n in reduced.graph.node}
    for node in outside:
        assert kept[node.name].op_type == node.op_type
        assert [i.removesuffix("_DequantizeLinear_Output") for i in kept[node.name].input] == list(
            node.input
        )
    added = {
        n.op_type for n in reduced.graph.node if n.name not in {m.name for m in full.graph.node}
    }
    assert added == set(QDQ_OPS)
    # Each quantised tensor is a network node's: inputs, weights or outputs.
    network_tensors = {
        t for n in full.graph.node if n.name in networks for t in (*n.input, *n.output)
    }
    quantised_tensors = {n.input[0] for n in reduced.graph.node if n.op_type == "QuantizeLinear"}
    assert quantised_tensors and quantised_tensors <= network_tensors
    # The graph is still a sleap-live export: same outputs, same metadata.
    assert [o.name for o in reduced.graph.output] == [o.name for o in full.graph.output]
    assert runner.metadata is not None and runner.info.model_type == CASE


def test_a_later_load_reads_the_cache_and_prints_the_kept_figures(quantised, monkeypatch):
    _, _, lines, onnx_bytes, folder = quantised
    monkeypatch.setattr(int8_module, "quantise_networks", lambda *_: pytest.fail("quantised"))
    monkeypatch.setattr(int8_module, "measure_int8", lambda *_: pytest.fail("measured"))
    again: list[str] = []
    runner = int8_module.int8_runner(
        onnx_bytes,
        threads=1,
        verify_frames=_frames()[CALIBRATION],
        cache_root=folder,
        notify=again.append,
    )
    assert isinstance(runner, OnnxRunner)
    (line,) = again
    assert line.endswith("measured when quantised, cached)")
    assert line.split("(")[1] == lines[0].split("(")[1]  # the same figures
    runner.close()


def test_int8_figures_survive_their_json():
    check = Int8Check(3, "the given frames", 0.1, float("nan"), 1, 0, 12.0, 6.0)
    back = Int8Check.from_json(check.to_json())
    assert back.speedup == 2.0 and np.isnan(back.points_p99_px)
    assert back.how == "measured when quantised, cached"


def test_network_nodes_are_the_network_scopes():
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Relu", ["a"], ["b"], name="/Cast"),
            onnx.helper.make_node("Relu", ["b"], ["c"], name="/stage/network/encoder.0/Conv"),
            onnx.helper.make_node("Relu", ["c"], ["d"], name="/instance_network/head/Conv"),
            onnx.helper.make_node("Relu", ["d"], ["e"], name="/network_peaks"),
        ],
        "g",
        [],
        [],
    )
    assert quantise.network_nodes(onnx.helper.make_model(graph)) == [
        "/stage/network/encoder.0/Conv",
        "/instance_network/head/Conv",
    ]


def test_int8_refusals(tmp_path):
    models = _models()
    with pytest.raises(ValueError, match="int8 runs on the CPU"):
        load_runner(models, engine="onnx", device="cuda", precision="int8")
    with pytest.raises(ValueError, match="ONNX Runtime runs fp32 or int8"):
        load_runner(models, engine="auto", precision="fp16")
    with pytest.raises(TypeError, match="precision"):
        load_runner(models, engine="torch", precision="int8")
    sleap_nn_export = Path(__file__).parents[1] / "data" / "exports" / CASE
    require(sleap_nn_export)
    with pytest.raises(ValueError, match="quantises sleap-live '\\.onnx' exports and model"):
        load_runner(sleap_nn_export, engine="onnx", device="cpu", precision="int8")


def test_int8_without_frames_to_calibrate_on_is_one_line(quantised):
    _, _, _, onnx_bytes, _ = quantised
    with pytest.raises(ModelConfigError, match="int8 is calibrated on frames that show animals"):
        int8_module.int8_runner(onnx_bytes, threads=1, verify_frames=None, cache_root=None)


@pytest.mark.parametrize(
    ("engine", "precision", "refusal"),
    [
        ("auto", "int8", None),
        ("onnx", "int8", None),
        ("openvino", "bf16", None),
        ("onnx", "fp32", None),
        ("torch", "int8", "--precision int8 is an option of --engine onnx or auto"),
        ("openvino", "int8", "--precision int8 is an option of --engine onnx or auto"),
        ("onnx", "bf16", "--precision bf16 is an option of --engine openvino"),
        ("tensorrt", "fp32", "--precision fp32 is an option of --engine openvino or onnx or auto"),
    ],
)
def test_the_cli_takes_each_precision_with_its_engines(engine, precision, refusal):
    import argparse

    from sleap_live.cli.options import UsageError, add_model_options, engine_options

    parser = argparse.ArgumentParser()
    add_model_options(parser, batch_size=None, batch_size_help="")
    args = parser.parse_args(["-m", "m", "--engine", engine, "--precision", precision])
    if refusal is None:
        assert engine_options(args) == {"precision": precision}
    else:
        with pytest.raises(UsageError, match=refusal):
            engine_options(args)
