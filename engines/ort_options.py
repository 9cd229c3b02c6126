"""The ONNX Runtime session options of every session sleap-live makes.

ONNX Runtime's operator threads, by default, spin for a while after every run
before they sleep. On a machine whose cores are all free that saves a wake-up per
run; on one where decoding, another stage or another process needs a core, the
spinning threads take it: three test files that export and verify models
(tests/engines/test_verify_search.py, test_tensorrt_profile.py and
test_check_tensorrt.py, three pytest-xdist workers on two cores) took 116.5 s of
CPU with them and 98.6 s without (means of two interleaved runs each). Every
session sleap-live makes, for a runner (`sleap_live.engines.runners.onnx_session`)
or to verify an export (`sleap_live.engines.export.onnx`), lets them sleep, as
`sleap_live.engines.openmp` does for torch's threads.

onnxruntime is imported when the options are made, not with this module.
"""

from __future__ import annotations

from typing import Any


def session_options() -> Any:
    """`onnxruntime.SessionOptions` with every graph optimisation, sequential
    execution, and idle operator threads asleep rather than spinning.

    Raises:
        ImportError: onnxruntime is not installed.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options
