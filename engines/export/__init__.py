"""Export sleap-live inference models to ONNX or TorchScript, verified on frames with animals.

- `exporter`: the public export functions and their steps;
- `onnx`: tracing to ONNX and embedding the metadata;
- `torchscript`: TorchScript tracing, saving, and loading exports to run;
- `verify`: the numerical comparison of an export with its torch module;
- `frames`: which frames the verification runs on.
"""

from sleap_live.engines.export.exporter import (
    EXPORT_FORMATS,
    export_inference_model,
    export_model,
    export_onnx_bytes,
    export_static_onnx_bytes,
)
from sleap_live.engines.export.onnx import DEFAULT_OPSET
from sleap_live.engines.export.torchscript import load_torchscript, read_torchscript_metadata
from sleap_live.engines.export.verify import TOLERANCE

__all__ = [
    "DEFAULT_OPSET",
    "EXPORT_FORMATS",
    "TOLERANCE",
    "export_inference_model",
    "export_model",
    "export_onnx_bytes",
    "export_static_onnx_bytes",
    "load_torchscript",
    "read_torchscript_metadata",
]
