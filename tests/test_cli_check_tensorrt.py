"""`sleap-live check-tensorrt`: the TensorRT lint on the command line."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper

from sleap_live import cli


def _save(tmp_path, nodes, inputs, outputs):
    graph = helper.make_graph(
        nodes,
        "lint",
        [helper.make_tensor_value_info(*value) for value in inputs],
        [helper.make_tensor_value_info(*value) for value in outputs],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def flagged(tmp_path):
    """A graph whose only finding is a uint8 Relu inside the network."""
    return _save(
        tmp_path,
        [
            helper.make_node("Relu", ["frames"], ["rectified"], "relu"),
            helper.make_node("Cast", ["rectified"], ["out"], "to_float", to=TensorProto.FLOAT),
        ],
        [("frames", TensorProto.UINT8, [1, 4])],
        [("out", TensorProto.FLOAT, [1, 4])],
    )


def test_findings_are_one_line_each_and_exit_1(flagged, capsys):
    assert cli.main(["check-tensorrt", str(flagged)]) == 1
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("relu (Relu): uint8 'frames', 'rectified' inside the network ["), line


def test_a_clean_graph_says_so_in_one_line_and_exits_0(tmp_path, capsys):
    clean = _save(
        tmp_path,
        [
            helper.make_node("Cast", ["frames"], ["as_float"], "to_float", to=TensorProto.FLOAT),
            helper.make_node("Relu", ["as_float"], ["out"], "relu"),
        ],
        [("frames", TensorProto.UINT8, [1, 4])],
        [("out", TensorProto.FLOAT, [1, 4])],
    )
    assert cli.main(["check-tensorrt", str(clean)]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("clean")


@pytest.mark.parametrize("content", [None, b"not an onnx model"])
def test_a_missing_or_unreadable_file_is_one_line_naming_it_and_exit_2(tmp_path, capsys, content):
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    assert cli.main(["check-tensorrt", str(path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("sleap-live: error: ") and str(path) in line


def test_python_m_sleap_live_runs_it_too(flagged):
    result = subprocess.run(
        [sys.executable, "-m", "sleap_live", "check-tensorrt", str(flagged)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and result.stdout.startswith("relu (Relu): uint8")


def _exported(path, model_type, profile="default", max_instances=None):
    """`path`'s graph carrying the metadata of a sleap-live export of `model_type`."""
    from sleap_live.engines.export.onnx import embed_metadata
    from sleap_live.engines.load.metadata import ExportMetadata
    from sleap_live.engines.types import ModelInfo, Skeleton

    info = ModelInfo(model_type, Skeleton(("head", "tail"), ((0, 1),)), 1, max_instances)
    metadata = ExportMetadata(
        info,
        "onnx",
        "frames",
        (1,),
        ("out",),
        "0.1.0",
        "2026-01-01T00:00:00",
        sources=(
            {"path": "models/centroid", "training_config": "training_config.yaml"},
            {"path": "models/centered instance", "training_config": "training_config.yaml"},
        ),
        profile=profile,
    )
    path.write_bytes(embed_metadata(path.read_bytes(), metadata))
    return path


def test_findings_end_with_their_count_and_the_export_that_tensorrt_takes(flagged, capsys):
    """Issue 24: a default export's hundreds of findings ended with nothing to do next."""
    assert cli.main(["check-tensorrt", str(_exported(flagged, "topdown"))]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1  # stdout: the findings alone
    [line] = err.splitlines()
    assert line.startswith("1 findings. This is a default-profile export"), line
    output = flagged.with_name("model.tensorrt.onnx")
    assert (
        "`sleap-live export models/centroid 'models/centered instance' --profile tensorrt "
        f"--max-instances N --verify-video VIDEO -o {output}` (N: the most animals" in line
    )


def test_the_next_step_keeps_the_exports_max_instances_and_needs_none_for_bottomup(flagged, capsys):
    assert cli.main(["check-tensorrt", str(_exported(flagged, "topdown", max_instances=3))]) == 1
    assert "--profile tensorrt --max-instances 3 --verify-video" in capsys.readouterr().err
    assert cli.main(["check-tensorrt", str(_exported(flagged, "bottomup"))]) == 1
    err = capsys.readouterr().err
    assert "--profile tensorrt --verify-video" in err and "max-instances" not in err


def test_the_next_step_of_other_graphs(flagged, capsys):
    assert cli.main(["check-tensorrt", str(flagged)]) == 1
    assert "Not a sleap-live export" in capsys.readouterr().err
    _exported(flagged, "topdown", profile="tensorrt", max_instances=2)
    assert cli.main(["check-tensorrt", str(flagged)]) == 1
    assert "exported with --profile tensorrt, which should lint clean" in capsys.readouterr().err
