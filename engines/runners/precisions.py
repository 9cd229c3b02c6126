"""The precisions engine "onnx" (and "auto" on the CPU) takes: "int8" quantises the
networks (`sleap_live.engines.runners.int8`). A module of its own, so that checking
an option imports no runner."""

from __future__ import annotations

FP32 = "fp32"
INT8 = "int8"
ONNX_PRECISIONS = (FP32, INT8)
