"""Every ONNX Runtime session sleap-live makes lets its idle threads sleep."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from sleap_live.engines.export.onnx import onnx_exported
from sleap_live.engines.load.metadata import INPUT_NAME
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.runners.onnx_session import create_session

SPINNING = "session.intra_op.allow_spinning"


def _identity_graph() -> bytes:
    frames = helper.make_tensor_value_info(INPUT_NAME, TensorProto.UINT8, ["b", "h", "w", "c"])
    out = helper.make_tensor_value_info("out", TensorProto.UINT8, ["b", "h", "w", "c"])
    graph = helper.make_graph(
        [helper.make_node("Identity", [INPUT_NAME], ["out"])], "g", [frames], [out]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def session_options_made(monkeypatch) -> list[Any]:
    """The options of every `onnxruntime.InferenceSession` made while the test runs."""
    made: list[Any] = []
    real = ort.InferenceSession

    def recording(model: Any, options: Any = None, *args: Any, **kwargs: Any) -> Any:
        made.append(options)
        return real(model, options, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    return made


def test_the_options_let_idle_threads_sleep_and_optimise_the_whole_graph():
    options = session_options()
    assert options.get_session_config_entry(SPINNING) == "0"
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL


def test_runner_and_verification_sessions_take_them(session_options_made):
    graph = _identity_graph()
    onnx.checker.check_model(onnx.load_from_string(graph))
    create_session(graph)
    exported = onnx_exported(graph)
    frames = np.zeros((1, 4, 4, 1), np.uint8)
    assert np.array_equal(exported.run(frames)["out"], frames)

    assert len(session_options_made) == 2
    for options in session_options_made:
        assert options.get_session_config_entry(SPINNING) == "0"
    # The verification session keeps refusals of probe frames out of the log.
    assert session_options_made[1].log_severity_level == 4
