"""A `torch.export` program as TensorFlow operations: what `--format saved_model` and
`--format tfjs` hold.

The program (core ATen operations after `run_decompositions`, every shape static)
is run once by a `torch.fx.Interpreter` inside a `tf.function`, each ATen operation
replaced by the TensorFlow operations that compute it (`tf_ops.OPS`). So the graph holds
only plain TensorFlow operations (Conv2D, MaxPool, GatherV2, GatherNd, TopKV2, ...),
which TensorFlow runs on any device and the TF.js converter takes; nothing of torch
is needed to run it.

Layout: torch computes in NCHW, TensorFlow's CPU kernels and TF.js convolve and
pool in NHWC only, so each convolution and max pooling is transposed in and out.
Integers: torch's int64 values (indices, counts) are int32 inside (TF.js has no
int64); the outputs are cast back to torch's dtypes unless `int64_outputs` is off.

An operation without a TensorFlow form here raises `UnsupportedOperation`, which
names it: the exporters refuse the model in one line. Imports TensorFlow (`tf_ops`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import torch

from sleap_live.engines.export.tf_ops import (
    OPS,
    Op,
    UnsupportedOperation,
    np_dtype,
    tf_dtype,
)


def core_program(model: torch.nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    """`model` exported by torch.export for `example`'s shape (static), in core ATen."""
    with torch.no_grad():
        program = torch.export.export(model, (example,), strict=False)
    return program.run_decompositions()


def unsupported_operations(program: torch.export.ExportedProgram) -> list[str]:
    """The ATen operations of `program` this converter has no TensorFlow form for."""
    return sorted(
        {
            str(node.target)
            for node in program.graph.nodes
            if node.op == "call_function" and node.target not in _ops()
        }
    )


def tf_function(
    program: torch.exported_program.ExportedProgram, *, int64_outputs: bool = True
) -> Any:
    """A `tf.function` computing `program` on its one input, with the input's
    static shape and dtype as its signature; it returns the outputs as a tuple.

    Raises:
        UnsupportedOperation: an operation without a TensorFlow form (before any
            graph is built).
    """
    missing = unsupported_operations(program)
    if missing:
        raise UnsupportedOperation(f"no TensorFlow form for {', '.join(missing)}")
    (user_input,) = [
        spec
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    placeholder = next(
        node
        for node in program.graph.nodes
        if node.op == "placeholder" and node.name == user_input.arg.name
    )
    example = placeholder.meta["val"]
    spec = tf.TensorSpec(tuple(example.shape), tf_dtype(example.dtype), name="frames")
    constants = _constants(program)
    output_dtypes = [node.meta["val"].dtype for node in _output_nodes(program)]

    def run(frames: Any) -> Any:
        outputs = _Interpreter(program, constants).run_program(frames)
        if int64_outputs:
            outputs = [
                tf.cast(output, tf.int64) if dtype == torch.int64 else output
                for output, dtype in zip(outputs, output_dtypes, strict=True)
            ]
        return tuple(outputs)

    return tf.function(run, input_signature=[spec], autograph=False)


def _output_nodes(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    (output,) = [node for node in program.graph.nodes if node.op == "output"]
    return list(output.args[0])


def _constants(program: torch.export.ExportedProgram) -> dict[str, np.ndarray]:
    """The values of the program's parameters, buffers and constants, by placeholder name."""
    kinds = torch.export.graph_signature.InputKind
    values: dict[str, np.ndarray] = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind == kinds.USER_INPUT:
            continue
        target = spec.target
        if spec.kind in (kinds.PARAMETER, kinds.BUFFER) and target in program.state_dict:
            tensor = program.state_dict[target]
        elif target in program.constants:
            tensor = program.constants[target]
        else:
            raise UnsupportedOperation(f"input {spec.arg.name} ({spec.kind}) has no value")
        values[spec.arg.name] = tensor.detach().cpu().numpy()
    return values


class _Interpreter(torch.fx.Interpreter):
    """Runs the program's graph on TensorFlow tensors: each call_function node is
    replaced by its TensorFlow form."""

    def __init__(self, program: torch.export.ExportedProgram, constants: dict[str, np.ndarray]):
        super().__init__(program.graph_module, garbage_collect_values=True)
        self.constants = constants
        self.frames: Any = None

    def run_program(self, frames: Any) -> list[Any]:
        self.frames = frames
        placeholders = [node for node in self.graph.nodes if node.op == "placeholder"]
        return list(self.run(*([None] * len(placeholders))))

    def placeholder(self, target: Any, args: Any, kwargs: Any) -> Any:
        node = self._current
        if node.name in self.constants:
            value = self.constants[node.name]
            return tf.constant(value.astype(np_dtype(value.dtype)))
        return self.frames

    def run_node(self, n: torch.fx.Node) -> Any:
        self._current = n
        return super().run_node(n)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        node = self._current
        return _ops()[target](node, *args, **kwargs)

    def output(self, target: Any, args: Any, kwargs: Any) -> Any:
        return list(args[0])


def _ops() -> Mapping[Any, Op]:
    """Each ATen operation's TensorFlow form (`tf_ops.OPS`), looked up when a node runs."""
    return OPS
