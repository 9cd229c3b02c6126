"""A lint for ONNX graphs: what TensorRT 10's ONNX importer refuses or silently changes.

`check_tensorrt(model)` runs ONNX shape inference to learn every tensor's element
type and shape, then reports per node:

- ops the importer does not support, and ops outside its opset range;
- uint8 anywhere but on a network input consumed by a Cast or a network output
  produced by one (TensorRT takes uint8 only at the network's edges);
- float64 tensors, which TensorRT demotes to float32;
- element types (bool among them) outside an op's supported types;
- ops whose output shape depends on the input values (NonZero, ...);
- the restrictions of the support matrix that the graph alone decides (TopK's K
  limit, Resize modes, pooling, constant `axes` / `axis` / `depth` inputs, ...).
  Nodes inside If/Loop/Scan bodies are checked too. Restrictions this does not
  decide (Attention's inputs, If's branch ranks, Loop's carried shapes, RNN
  activations, Squeeze/Unsqueeze `axes` "resolvable to a constant") are not checked.

INT64 is not reported: TensorRT 10 handles it natively.

A command line built on this prints `format_findings(findings)` and exits with
`exit_code(findings)`: `EXIT_CLEAN` (0, one "clean" line), `EXIT_FINDINGS` (1, one
line per finding); a file that is not an ONNX model raises `UnreadableGraphError`,
whose one-line message names the file, and should exit with `EXIT_UNREADABLE` (2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sleap_live.engines.errors import EngineError, ModelNotFoundError

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2

# Rule sources. The support matrix is onnx-tensorrt's docs/operators.md as shipped
# with TensorRT 10.15 (10.15 GA, 2026-02-02): "TensorRT 10.15 supports operators in
# the inclusive range of opset 9 to opset 24", its data-type notes, and one row
# (Supported, Supported Types, Restrictions) per operator.
MATRIX = "onnx-tensorrt docs/operators.md (TensorRT 10.15)"
UINT8_RULE = f"{MATRIX}, note: UINT8 only as network input or output"
DOUBLE_RULE = f"{MATRIX}, note: DOUBLE is cast down to FLOAT"
OPSET_RULE = f"{MATRIX}: opsets 9 to 24"
# The ONNX operator spec (onnx/onnx docs/Operators.md) defines these outputs' shapes
# by the input values: NonZero is (rank, number of non-zero elements),
# NonMaxSuppression is (number of selected boxes, 3).
DATA_DEPENDENT_RULE = "ONNX operator spec (docs/Operators.md): output shape"

OPSET_RANGE = (9, 24)
TOPK_K_LIMIT = 3840  # the TopK row: "`K` input must be less than 3840"

# Element types of the matrix's "Supported Types" column, keyed by ONNX type.
# Types missing here (INT16, UINT16/32/64, STRING, COMPLEX, FP8 E5M2, ...) do not exist
# in TensorRT. UINT8 and DOUBLE have their own rules above.
_TRT_TYPES: dict[int, str] = {
    TensorProto.FLOAT: "FP32",
    TensorProto.FLOAT16: "FP16",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.FLOAT8E4M3FN: "FP8",
    TensorProto.FLOAT4E2M1: "FP4",
    TensorProto.INT4: "INT4",
    TensorProto.INT8: "INT8",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.UINT8: "UINT8",
    TensorProto.BOOL: "BOOL",
}

# --- The TensorRT 10.15 support matrix: op -> "Supported Types" ---------------------
_F = frozenset({"FP32", "FP16", "BF16"})
_H = frozenset({"FP32", "FP16"})
_FI = _F | {"INT32", "INT64"}
_FIB = _FI | {"BOOL"}
_B = frozenset({"BOOL"})
_GROUPS: dict[frozenset[str], str] = {
    _F: "Acos Acosh Asin Asinh Atan Atanh AveragePool BatchNormalization Ceil Celu Clip "
    "Conv ConvTranspose Cos Cosh CumSum Dropout Einsum Elu Erf Exp Floor Gemm "
    "GlobalAveragePool GlobalLpPool GlobalMaxPool GroupNormalization GRU HardSigmoid "
    "HardSwish Hardmax ImageScaler InstanceNormalization IsInf LayerNormalization "
    "LeakyRelu Log LogSoftmax LRN LSTM LpNormalization LpPool MatMul MaxPool "
    "MeanVarianceNormalization ParametricSoftplus PRelu QuantizeLinear RandomNormal "
    "RandomNormalLike RandomUniform RandomUniformLike Reciprocal Resize RMSNormalization "
    "RNN RotaryEmbedding Round ScaledTanh Scan Selu Sigmoid Sin Sinh Softmax Softplus "
    "Softsign Sqrt Tan Tanh ThresholdedRelu Upsample",
    _H: "BlackmanWindow DeformConv GridSample HammingWindow HannWindow Mish "
    "NonMaxSuppression NonZero RoiAlign",
    _FI: "Abs Add ArgMax ArgMin DepthToSpace Div Equal Greater GreaterOrEqual IsNaN Less "
    "LessOrEqual Max Min Mod Mul Neg Pad Pow Range ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare "
    "Relu Scatter ScatterElements ScatterND Shrink Sign SpaceToDepth Sub Sum TopK",
    _FIB: "Concat Expand EyeLike Flatten Gather GatherElements GatherND Identity If Loop "
    "OneHot ReverseSequence Reshape Shape Size Slice Split Squeeze Tile Transpose Trilu "
    "Unsqueeze Where",
    _B: "And Not Or Xor",
}
SUPPORTED_TYPES: dict[str, frozenset[str]] = {
    op: types for types, ops in _GROUPS.items() for op in ops.split()
} | {
    "Attention": _F | {"INT8", "FP8"},
    "Cast": _FIB | {"UINT8"},
    "CastLike": _FIB | {"UINT8"},
    "Constant": _FIB | {"FP8", "FP4", "INT4"},
    "ConstantOfShape": _FIB | {"FP8", "FP4", "INT4"},
    "DequantizeLinear": frozenset({"INT8", "FP8", "FP4", "INT4"}),
    "Gelu": _FI | {"INT8"},
    "Mean": _FI | {"FP8"},
    "STFT": frozenset({"FP32"}),
    "TensorScatter": _F | {"INT32"},
}
# Rows marked N (not supported).
UNSUPPORTED_OPS = frozenset(
    "AffineGrid Bernoulli BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor CenterCropPad "
    "Col2Im Compress ConcatFromSequence ConvInteger DFT Det DynamicQuantizeLinear "
    "ImageDecoder MatMulInteger MaxRoiPool MaxUnpool MelWeightMatrix Multinomial "
    "NegativeLogLikelihoodLoss Optional OptionalGetElement OptionalHasElement QLinearConv "
    "QLinearMatMul RegexFullMatch SequenceAt SequenceConstruct SequenceEmpty SequenceErase "
    "SequenceInsert SequenceLength SequenceMap SoftmaxCrossEntropyLoss SplitToSequence "
    "StringConcat StringNormalizer StringSplit TfIdfVectorizer Unique".split()
)
DATA_DEPENDENT_OPS = frozenset({"NonZero", "NonMaxSuppression"})

# Which of a node's tensors carry the type the matrix constrains: input 0 unless
# listed (indices, shapes, conditions and comparison results are not constrained).
_TYPED_INPUTS: dict[str, tuple[int, ...]] = {"Where": (1, 2)}
_TYPED_OUTPUTS: dict[str, tuple[int, ...]] = {
    "Cast": (0,),
    "CastLike": (0,),
    "Constant": (0,),
    "ConstantOfShape": (0,),
    "RandomNormal": (0,),
    "RandomUniform": (0,),
}
_NO_TYPED_INPUT = frozenset({"Constant", "ConstantOfShape", "RandomNormal", "RandomUniform"})
_CASTS = frozenset({"Cast", "CastLike"})
_ONNX_DOMAINS = frozenset({"", "ai.onnx"})


class UnreadableGraphError(EngineError, ValueError):
    """The file to check is not an ONNX model, or ONNX shape inference rejects it."""


@attrs.frozen
class Finding:
    """One thing TensorRT's ONNX importer refuses or changes, at one node.

    Attributes:
        node: the node's name (`<op #index>` when it has none; `<model>` for the
            model as a whole).
        op: its op type.
        reason: what is wrong, naming the tensors involved.
        source: the documented rule it breaks.
    """

    node: str
    op: str
    reason: str
    source: str

    def __str__(self) -> str:
        return f"{self.node} ({self.op}): {self.reason} [{self.source}]"


def check_tensorrt(model: onnx.ModelProto | str | Path) -> list[Finding]:
    """The findings of the TensorRT 10 lint for an ONNX model or `.onnx` file, in node order.

    Raises:
        ModelNotFoundError: the file does not exist.
        UnreadableGraphError: it is not an ONNX model, or shape inference fails.
    """
    proto, label = _load(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except (onnx.shape_inference.InferenceError, ValueError) as error:
        raise UnreadableGraphError(f"{label}: ONNX shape inference failed: {error}") from error
    findings = _check_opset(inferred)
    graph = inferred.graph
    network_inputs = {value.name for value in graph.input} - {
        init.name for init in graph.initializer
    }
    network_outputs = {value.name for value in graph.output}
    _check_graph(graph, _Scope(), network_inputs, network_outputs, findings)
    return findings


def format_findings(findings: Sequence[Finding]) -> str:
    """One line per finding, or a single "clean" line when there are none."""
    if not findings:
        return "clean: nothing TensorRT 10 refuses or changes"
    return "\n".join(str(finding) for finding in findings)


def exit_code(findings: Sequence[Finding]) -> int:
    """`EXIT_FINDINGS` when there are findings, else `EXIT_CLEAN`."""
    return EXIT_FINDINGS if findings else EXIT_CLEAN


@attrs.define
class _Scope:
    """What is known of the tensors visible in a graph (and its enclosing graphs)."""

    types: dict[str, int] = attrs.Factory(dict)
    shapes: dict[str, tuple[int | None, ...]] = attrs.Factory(dict)
    constants: dict[str, np.ndarray] = attrs.Factory(dict)
    produced: set[str] = attrs.Factory(set)

    def nested(self) -> _Scope:
        return _Scope(dict(self.types), dict(self.shapes), dict(self.constants), set(self.produced))


def _load(model: onnx.ModelProto | str | Path) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        return model, "model"
    path = Path(model)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such file")
    try:
        proto = onnx.load(str(path))
    except Exception as error:  # onnx raises protobuf's DecodeError, OSError, ... on junk
        raise UnreadableGraphError(f"{path}: not an ONNX model ({error})") from error
    if not proto.graph.node:
        raise UnreadableGraphError(f"{path}: not an ONNX model (no graph nodes)")
    return proto, str(path)


def _check_opset(model: onnx.ModelProto) -> list[Finding]:
    low, high = OPSET_RANGE
    return [
        Finding("<model>", "opset", f"opset {entry.version} is outside {low}..{high}", OPSET_RULE)
        for entry in model.opset_import
        if entry.domain in _ONNX_DOMAINS and not low <= entry.version <= high
    ]


def _check_graph(
    graph: onnx.GraphProto,
    outer: _Scope,
    network_inputs: set[str],
    network_outputs: set[str],
    findings: list[Finding],
) -> None:
    scope = outer.nested()
    for value in [*graph.input, *graph.output, *graph.value_info]:
        _record_value(scope, value)
    for init in graph.initializer:
        scope.types[init.name] = init.data_type
        scope.shapes[init.name] = tuple(init.dims)
        scope.constants[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        scope.produced.update(name for name in node.output if name)
        if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS:
            value = _constant_value(node)
            if value is not None:
                scope.constants[node.output[0]] = value
                scope.types.setdefault(node.output[0], helper.np_dtype_to_tensor_dtype(value.dtype))
    for index, node in enumerate(graph.node):
        name = node.name or f"<{node.op_type} #{index}>"
        for reason, source in _check_node(node, scope, network_inputs, network_outputs):
            findings.append(Finding(name, node.op_type, reason, source))
        for attribute in node.attribute:
            bodies = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else []
            # A branch's or loop body's outputs are not the network's.
            for body in [*bodies, *attribute.graphs]:
                _check_graph(body, scope, network_inputs, set(), findings)


def _check_node(
    node: onnx.NodeProto, scope: _Scope, network_inputs: set[str], network_outputs: set[str]
) -> list[tuple[str, str]]:
    """(reason, source) of each rule the node breaks."""
    op = node.op_type
    if node.domain not in _ONNX_DOMAINS:
        return [(f"op of domain '{node.domain}': TensorRT needs a plugin for it", MATRIX)]
    if op in UNSUPPORTED_OPS:
        return [("not supported by TensorRT's ONNX importer", f"{MATRIX}: {op}")]
    if op not in SUPPORTED_TYPES:
        return [("not in TensorRT's operator support matrix", MATRIX)]
    found = []

    network_edges = network_inputs | network_outputs if op in _CASTS else set()
    if uint8 := _answerable(node, scope, TensorProto.UINT8, exempt=network_edges):
        found.append((f"uint8 {_names(uint8)} inside the network", UINT8_RULE))
    if double := _answerable(node, scope, TensorProto.DOUBLE, exempt=set()):
        found.append((f"float64 {_names(double)}: TensorRT computes it in float32", DOUBLE_RULE))
    type_problems = [
        problem
        for name in _typed_tensors(node)
        if (problem := _type_problem(op, name, scope.types.get(name, TensorProto.UNDEFINED)))
    ]
    if type_problems:
        found.append(("; ".join(type_problems), f"{MATRIX}: {op} supported types"))
    if op in DATA_DEPENDENT_OPS:
        found.append(("output shape depends on the input values", f"{DATA_DEPENDENT_RULE} of {op}"))
    restrictions = _RESTRICTIONS.get(op, _no_restrictions)(node, scope)
    found += [(reason, f"{MATRIX}: {op} restrictions") for reason in restrictions]
    return found


def _answerable(node: onnx.NodeProto, scope: _Scope, elem_type: int, exempt: set[str]) -> list[str]:
    """The node's tensors of `elem_type`, except `exempt`, that it is answerable for.

    A tensor is reported once: at the node that makes it, or, for graph inputs and
    initializers, at each node that reads it.
    """
    unproduced = [name for name in node.input if name and name not in scope.produced]
    return [
        name
        for name in [*unproduced, *node.output]
        if name and scope.types.get(name) == elem_type and name not in exempt
    ]


def _typed_tensors(node: onnx.NodeProto) -> list[str]:
    inputs = () if node.op_type in _NO_TYPED_INPUT else _TYPED_INPUTS.get(node.op_type, (0,))
    outputs = _TYPED_OUTPUTS.get(node.op_type, ())
    chosen = [node.input[i] for i in inputs if i < len(node.input)]
    chosen += [node.output[i] for i in outputs if i < len(node.output)]
    return [name for name in chosen if name]


def _type_problem(op: str, name: str, elem_type: int) -> str | None:
    if elem_type in (TensorProto.UINT8, TensorProto.DOUBLE):
        return None  # the uint8 and float64 rules report these
    if elem_type == TensorProto.UNDEFINED:
        return f"type of '{name}' unknown after shape inference, so unchecked"
    trt_type = _TRT_TYPES.get(elem_type)
    if trt_type is None:
        return f"'{name}' is {TensorProto.DataType.Name(elem_type)}, which TensorRT lacks"
    if trt_type not in SUPPORTED_TYPES[op]:
        allowed = ", ".join(sorted(SUPPORTED_TYPES[op]))
        return f"'{name}' is {trt_type}, not one of {op}'s types ({allowed})"
    return None


def _names(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in dict.fromkeys(names))


def _record_value(scope: _Scope, value: onnx.ValueInfoProto) -> None:
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        return
    scope.types[value.name] = tensor.elem_type
    if tensor.HasField("shape"):
        scope.shapes[value.name] = tuple(
            dim.dim_value if dim.HasField("dim_value") else None for dim in tensor.shape.dim
        )


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attribute in node.attribute:
        if attribute.name == "value":
            return numpy_helper.to_array(attribute.t)
        if attribute.name in ("value_int", "value_ints", "value_float", "value_floats"):
            return np.asarray(helper.get_attribute_value(attribute))
    return None


# --- Restrictions column: the ones the graph alone decides ---------------------------
def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            value = helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def _no_restrictions(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    return []


def _topk(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    reasons = []
    if _attr(node, "sorted", 1) != 1:
        reasons.append("sorted=0: TensorRT's TopK returns sorted values only")
    k_name = _input(node, 1)
    k = _attr(node, "k") if not k_name else scope.constants.get(k_name)
    if k is not None:
        if (value := int(np.asarray(k).reshape(-1)[0])) >= TOPK_K_LIMIT:
            reasons.append(f"K={value} is not below {TOPK_K_LIMIT}")
        return reasons
    shape = scope.shapes.get(node.input[0])
    axis = int(_attr(node, "axis", -1))
    length = shape[axis] if shape and -len(shape) <= axis < len(shape) else None
    if length is None:
        reasons.append(
            f"K '{k_name}' is computed at run time over an axis of unknown length: "
            f"nothing bounds it below {TOPK_K_LIMIT}"
        )
    elif length >= TOPK_K_LIMIT:
        reasons.append(f"K '{k_name}' is computed at run time over an axis of length {length}")
    return reasons


_RESIZE_MODES = {
    "mode": ("nearest", "linear"),
    "coordinate_transformation_mode": (
        "half_pixel",
        "pytorch_half_pixel",
        "tf_half_pixel_for_nn",
        "asymmetric",
        "align_corners",
    ),
    "keep_aspect_ratio_policy": ("stretch",),
}


def _resize(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    reasons = [
        f"{name}={_attr(node, name)} is not supported"
        for name, allowed in _RESIZE_MODES.items()
        if _attr(node, name, allowed[0]) not in allowed
    ]
    if _attr(node, "antialias", 0):
        reasons.append("antialias is not supported")
    return reasons


def _pool(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    reasons = []
    kernel = _attr(node, "kernel_shape", [])
    if node.op_type != "LpPool" and len(kernel) not in (2, 3):
        reasons.append(f"{len(kernel)}D pooling: only 2D or 3D")
    if any(step != 1 for step in _attr(node, "dilations", [])):
        reasons.append("dilations other than 1")
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        reasons.append("the Indices output is not supported")
    return reasons


def _constant_inputs(**positions: int) -> Callable[[onnx.NodeProto, _Scope], list[str]]:
    """Inputs (name=index) that must be build-time constants: initializers or Constants."""

    def check(node: onnx.NodeProto, scope: _Scope) -> list[str]:
        return [
            f"{what} '{name}' is not a build-time constant"
            for what, index in positions.items()
            if (name := _input(node, index)) and name not in scope.constants
        ]

    return check


def _scatter_nd(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    reduction = _attr(node, "reduction", "none")
    return [] if reduction == "none" else [f"reduction={reduction} is not supported"]


def _layer_norm(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    extra = [name for name in node.output[1:] if name]
    return [f"only output Y is supported, not {_names(extra)}"] if extra else []


def _constant(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    return [
        f"attribute {attribute.name} is not supported"
        for attribute in node.attribute
        if attribute.name in ("sparse_value", "value_string", "value_strings")
    ]


def _lstm(node: onnx.NodeProto, scope: _Scope) -> list[str]:
    return [f"{name} must be 0" for name in ("input_forget", "layout") if _attr(node, name, 0)]


_RESTRICTIONS: dict[str, Callable[[onnx.NodeProto, _Scope], list[str]]] = {
    "TopK": _topk,
    "Resize": _resize,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "LpPool": _pool,
    "CumSum": _constant_inputs(axis=1),
    "OneHot": _constant_inputs(depth=1),
    "STFT": _constant_inputs(frame_step=1, window=2),
    "ScatterND": _scatter_nd,
    "LayerNormalization": _layer_norm,
    "Constant": _constant,
    "LSTM": _lstm,
} | {
    f"Reduce{kind}": _constant_inputs(axes=1)
    for kind in "L1 L2 LogSum LogSumExp Max Mean Min Prod Sum SumSquare".split()
}
