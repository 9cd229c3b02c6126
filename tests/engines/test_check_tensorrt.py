"""Tests for sleap_live.engines.export.check_tensorrt (the TensorRT 10 lint)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sleap_live.engines.errors import ModelNotFoundError
from sleap_live.engines.export.check_tensorrt import (
    DATA_DEPENDENT_RULE,
    DOUBLE_RULE,
    EXIT_CLEAN,
    EXIT_FINDINGS,
    MATRIX,
    OPSET_RULE,
    UINT8_RULE,
    Finding,
    UnreadableGraphError,
    check_tensorrt,
    exit_code,
    format_findings,
)
from tests.engines import goldens

U8, F32, F64, I64, BOOL = (
    TensorProto.UINT8,
    TensorProto.FLOAT,
    TensorProto.DOUBLE,
    TensorProto.INT64,
    TensorProto.BOOL,
)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    """A checked ONNX model; `inputs`/`outputs` are (name, elem type, shape) triples."""
    graph = helper.make_graph(
        nodes,
        "lint",
        [helper.make_tensor_value_info(*value) for value in inputs],
        [helper.make_tensor_value_info(*value) for value in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def test_uint8_gather_float64_cast_and_nonzero_are_exactly_the_findings():
    model = _model(
        [
            helper.make_node("Gather", ["frames", "channel"], ["picked"], "gather", axis=3),
            helper.make_node("Cast", ["picked"], ["as_float"], "to_float", to=F32),
            helper.make_node("Cast", ["as_float"], ["as_double"], "to_double", to=F64),
            helper.make_node("NonZero", ["as_float"], ["where"], "nonzero"),
        ],
        [("frames", U8, [1, 8, 8, 3])],
        [("as_double", F64, [1, 8, 8, 1]), ("where", I64, [4, None])],
        [_const("channel", [0])],
    )

    findings = check_tensorrt(model)

    assert findings == [
        Finding("gather", "Gather", "uint8 'frames', 'picked' inside the network", UINT8_RULE),
        Finding(
            "to_double", "Cast", "float64 'as_double': TensorRT computes it in float32", DOUBLE_RULE
        ),
        Finding(
            "nonzero",
            "NonZero",
            "output shape depends on the input values",
            f"{DATA_DEPENDENT_RULE} of NonZero",
        ),
    ]
    assert exit_code(findings) == EXIT_FINDINGS == 1
    lines = format_findings(findings).splitlines()
    assert lines == [str(finding) for finding in findings]
    assert (
        lines[0] == f"gather (Gather): uint8 'frames', 'picked' inside the network [{UINT8_RULE}]"
    )


def test_float32_graph_with_uint8_cast_at_its_edges_is_clean():
    model = _model(
        [
            helper.make_node("Cast", ["frames"], ["x"], "to_float", to=F32),
            helper.make_node("Relu", ["x"], ["y"], "relu"),
            helper.make_node("Cast", ["y"], ["y8"], "to_uint8", to=U8),
        ],
        [("frames", U8, [1, 8, 8, 3])],
        [("y", F32, [1, 8, 8, 3]), ("y8", U8, [1, 8, 8, 3])],
    )
    findings = check_tensorrt(model)
    assert findings == []
    assert exit_code(findings) == EXIT_CLEAN == 0
    assert format_findings(findings) == "clean: nothing TensorRT 10 refuses or changes"


def test_uint8_input_read_by_anything_but_a_cast_is_flagged_at_that_reader():
    model = _model(
        [
            helper.make_node("Cast", ["frames"], ["x"], "to_float", to=F32),
            helper.make_node("Shape", ["frames"], ["size"], "shape"),
        ],
        [("frames", U8, [1, 8, 8, 3])],
        [("x", F32, [1, 8, 8, 3]), ("size", I64, [4])],
    )
    assert [(f.node, f.reason) for f in check_tensorrt(model)] == [
        ("shape", "uint8 'frames' inside the network")
    ]


def test_float64_initializer_is_flagged_at_its_readers():
    model = _model(
        [helper.make_node("Cast", ["table"], ["x"], "narrow", to=F32)],
        [],
        [("x", F32, [2])],
        [_const("table", [0.5, 1.5], np.float64)],
    )
    assert [(f.node, f.reason) for f in check_tensorrt(model)] == [
        ("narrow", "float64 'table': TensorRT computes it in float32")
    ]


def _topk_model(k_values=None, k_nodes=(), axis_length=4000, **attributes):
    nodes, initializers = [], []
    if k_values is not None:
        initializers.append(_const("k", [k_values]))
    nodes.extend(k_nodes)
    nodes.append(helper.make_node("TopK", ["x", "k"], ["v", "i"], "topk", axis=1, **attributes))
    return _model(
        nodes,
        [("x", F32, [2, axis_length])],
        [("v", F32, [2, None]), ("i", I64, [2, None])],
        initializers,
    )


def _k_from_shape():
    # K = the length of the axis, known only when the input's shape is.
    return [
        helper.make_node("Shape", ["x"], ["x_shape"], "shape"),
        helper.make_node(
            "Constant", [], ["axis"], "axis", value=numpy_helper.from_array(np.array([1]))
        ),
        helper.make_node("Gather", ["x_shape", "axis"], ["k"], "k"),
    ]


def test_topk_with_k_over_the_limit_is_flagged_and_below_it_is_not():
    over = check_tensorrt(_topk_model(k_values=3840))
    assert [(f.node, f.op, f.reason) for f in over] == [
        ("topk", "TopK", "K=3840 is not below 3840")
    ]
    assert over[0].source == f"{MATRIX}: TopK restrictions"
    assert check_tensorrt(_topk_model(k_values=3839)) == []


def test_topk_k_from_a_constant_node_is_read():
    node = helper.make_node(
        "Constant", [], ["k"], "k", value=numpy_helper.from_array(np.array([5000]))
    )
    assert [f.reason for f in check_tensorrt(_topk_model(k_nodes=[node]))] == [
        "K=5000 is not below 3840"
    ]


@pytest.mark.parametrize(
    ("axis_length", "expected"),
    [
        (20, []),
        (4000, ["K 'k' is computed at run time over an axis of length 4000"]),
        (
            None,
            [
                "K 'k' is computed at run time over an axis of unknown length: "
                "nothing bounds it below 3840"
            ],
        ),
    ],
)
def test_topk_with_computed_k_is_bounded_by_its_axis_length(axis_length, expected):
    model = _topk_model(k_nodes=_k_from_shape(), axis_length=axis_length)
    assert [f.reason for f in check_tensorrt(model) if f.op == "TopK"] == expected


def test_topk_unsorted_is_flagged():
    findings = check_tensorrt(_topk_model(k_values=3, sorted=0))
    assert [f.reason for f in findings] == ["sorted=0: TensorRT's TopK returns sorted values only"]


def test_bool_is_flagged_only_where_the_op_excludes_it():
    model = _model(
        [
            helper.make_node("Pad", ["mask", "pads", "false"], ["padded"], "pad"),
            helper.make_node("Gather", ["mask", "index"], ["picked"], "gather"),
        ],
        [("mask", BOOL, [4])],
        [("padded", BOOL, [6]), ("picked", BOOL, [1])],
        [_const("pads", [1, 1]), _const("false", False, np.bool_), _const("index", [0])],
    )
    findings = check_tensorrt(model)
    assert [(f.node, f.reason) for f in findings] == [
        ("pad", "'mask' is BOOL, not one of Pad's types (BF16, FP16, FP32, INT32, INT64)")
    ]
    assert findings[0].source == f"{MATRIX}: Pad supported types"


def test_int64_is_not_flagged():
    model = _model(
        [helper.make_node("Add", ["a", "b"], ["c"], "add")],
        [("a", I64, [3]), ("b", I64, [3])],
        [("c", I64, [3])],
    )
    assert check_tensorrt(model) == []


def test_types_tensorrt_lacks_are_flagged():
    model = _model(
        [helper.make_node("Add", ["a", "a"], ["c"], "add")],
        [("a", TensorProto.INT16, [3])],
        [("c", TensorProto.INT16, [3])],
    )
    assert [f.reason for f in check_tensorrt(model)] == ["'a' is INT16, which TensorRT lacks"]


@pytest.mark.parametrize(
    ("node", "reason", "source"),
    [
        (
            helper.make_node("Unique", ["x"], ["y"], "node"),
            "not supported by TensorRT's ONNX importer",
            f"{MATRIX}: Unique",
        ),
        (
            helper.make_node("Gelu2", ["x"], ["y"], "node"),
            "not in TensorRT's operator support matrix",
            MATRIX,
        ),
        (
            helper.make_node("Blur", ["x"], ["y"], "node", domain="com.example"),
            "op of domain 'com.example': TensorRT needs a plugin for it",
            MATRIX,
        ),
    ],
)
def test_ops_the_importer_lacks_are_flagged(node, reason, source):
    graph = helper.make_graph(
        [node],
        "lint",
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("y", F32, [4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    assert check_tensorrt(model) == [Finding("node", node.op_type, reason, source)]


def test_nonmaxsuppression_is_data_dependent():
    model = _model(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"], "nms")],
        [("boxes", F32, [1, 5, 4]), ("scores", F32, [1, 1, 5])],
        [("selected", I64, [None, 3])],
    )
    assert [f.reason for f in check_tensorrt(model)] == ["output shape depends on the input values"]


def _one_float_node(node, initializers=(), inputs=(("x", F32, [1, 1, 8, 8]),)):
    rank = len(inputs[0][2])
    outputs = [(name, F32 if i == 0 else I64, [None] * rank) for i, name in enumerate(node.output)]
    return _model([node], list(inputs), outputs, initializers)


@pytest.mark.parametrize(
    ("model", "reasons"),
    [
        (
            _one_float_node(
                helper.make_node("Resize", ["x", "", "scales"], ["y"], "node", mode="cubic"),
                [_const("scales", [1, 1, 2, 2], np.float32)],
            ),
            ["mode=cubic is not supported"],
        ),
        (
            _one_float_node(
                helper.make_node(
                    "Resize",
                    ["x", "", "scales"],
                    ["y"],
                    "node",
                    coordinate_transformation_mode="tf_crop_and_resize",
                ),
                [_const("scales", [1, 1, 2, 2], np.float32)],
            ),
            ["coordinate_transformation_mode=tf_crop_and_resize is not supported"],
        ),
        (
            _one_float_node(
                helper.make_node("MaxPool", ["x"], ["y", "where"], "node", kernel_shape=[2, 2])
            ),
            ["the Indices output is not supported"],
        ),
        (
            _one_float_node(
                helper.make_node(
                    "MaxPool", ["x"], ["y"], "node", kernel_shape=[2, 2], dilations=[2, 2]
                ),
            ),
            ["dilations other than 1"],
        ),
        (
            _one_float_node(
                helper.make_node("MaxPool", ["x"], ["y"], "node", kernel_shape=[2]),
                inputs=[("x", F32, [1, 1, 8])],
            ),
            ["1D pooling: only 2D or 3D"],
        ),
        (
            _one_float_node(
                helper.make_node("ReduceSum", ["x", "axes"], ["y"], "node"),
                inputs=[("x", F32, [1, 1, 8, 8]), ("axes", I64, [1])],
            ),
            ["axes 'axes' is not a build-time constant"],
        ),
        (
            _one_float_node(
                helper.make_node("CumSum", ["x", "axis"], ["y"], "node"),
                inputs=[("x", F32, [1, 1, 8, 8]), ("axis", I64, [])],
            ),
            ["axis 'axis' is not a build-time constant"],
        ),
        (
            _one_float_node(
                helper.make_node(
                    "ScatterND", ["x", "indices", "updates"], ["y"], "node", reduction="add"
                ),
                [_const("indices", [[0]]), _const("updates", np.zeros((1, 1, 8, 8)), np.float32)],
            ),
            ["reduction=add is not supported"],
        ),
        (
            _one_float_node(
                helper.make_node(
                    "LayerNormalization", ["x", "scale"], ["y", "mean"], "node", axis=-1
                ),
                [_const("scale", np.ones(8), np.float32)],
            ),
            ["only output Y is supported, not 'mean'"],
        ),
    ],
)
def test_matrix_restrictions_decided_by_the_graph_are_flagged(model, reasons):
    findings = check_tensorrt(model)
    assert [f.reason for f in findings] == reasons
    assert {f.source for f in findings} == {f"{MATRIX}: {findings[0].op} restrictions"}


def test_supported_resize_and_constant_reduce_axes_are_clean():
    model = _model(
        [
            helper.make_node("Resize", ["x", "", "scales"], ["y"], "resize", mode="linear"),
            helper.make_node("ReduceSum", ["y", "axes"], ["z"], "sum"),
        ],
        [("x", F32, [1, 1, 8, 8])],
        [("z", F32, [1, 1, 1, 16])],
        [_const("scales", [1, 1, 2, 2], np.float32), _const("axes", [2])],
    )
    assert check_tensorrt(model) == []


def test_opset_outside_the_importer_range_is_flagged():
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"], "relu")],
        [("x", F32, [2])],
        [("y", F32, [2])],
        (),
        8,
    )
    assert check_tensorrt(model) == [
        Finding("<model>", "opset", "opset 8 is outside 9..24", OPSET_RULE)
    ]


def test_nodes_inside_a_branch_are_checked():
    branch = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["where"], "inner_nonzero")],
        "then",
        [],
        [helper.make_tensor_value_info("where", I64, [1, None])],
    )
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["none"], "empty", value=_const("e", np.zeros((1, 0))))],
        "else",
        [],
        [helper.make_tensor_value_info("none", I64, [1, None])],
    )
    model = _model(
        [
            helper.make_node(
                "If", ["flag"], ["out"], "branch", then_branch=branch, else_branch=other
            )
        ],
        [("flag", BOOL, []), ("x", F32, [4])],
        [("out", I64, [1, None])],
    )
    assert [(f.node, f.op) for f in check_tensorrt(model)] == [("inner_nonzero", "NonZero")]


def test_a_file_is_read_and_bad_files_raise_one_line_errors(tmp_path):
    model = _model(
        [helper.make_node("Cast", ["frames"], ["x"], "to_double", to=F64)],
        [("frames", F32, [2])],
        [("x", F64, [2])],
    )
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    assert [f.node for f in check_tensorrt(path)] == ["to_double"]
    assert [f.node for f in check_tensorrt(str(path))] == ["to_double"]

    with pytest.raises(ModelNotFoundError, match=r"missing\.onnx: no such file"):
        check_tensorrt(tmp_path / "missing.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\x00 not a protobuf")
    with pytest.raises(UnreadableGraphError, match=r"garbage\.onnx: not an ONNX model") as error:
        check_tensorrt(garbage)
    assert "\n" not in str(error.value)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", sorted(goldens.CASES))
def test_todays_exports_use_uint8_inside_and_float64(name, tmp_path, warm_export_cache):
    path = tmp_path / "model.onnx"
    path.write_bytes(goldens.warm_export(name, warm_export_cache))
    findings = check_tensorrt(path)
    sources = {finding.source for finding in findings}
    assert UINT8_RULE in sources
    assert DOUBLE_RULE in sources
    # Every op type the exports use is supported as such.
    assert not [f for f in findings if f.source == MATRIX or "importer" in f.reason]
    assert exit_code(findings) == EXIT_FINDINGS
