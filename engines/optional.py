"""Optional libraries the engines use, imported on first use with a one-line error
that says how to install them: OpenVINO (`--engine openvino`, `export --format
openvino`), and the GPU extra (TensorRT, onnxruntime-gpu)."""

from __future__ import annotations

from typing import Any

from sleap_live.engines.errors import RuntimeUnavailableError

OPENVINO_INSTALL_HINT = 'pip install "sleap-live[openvino]"'
GPU_INSTALL_HINT = 'pip install "sleap-live[gpu]" for CUDA 13, "sleap-live[gpu-cu12]" for CUDA 12'
# ONNX Runtime comes from an extra: its CPU build, or its GPU build (see pyproject.toml).
ORT_INSTALL_HINT = f'pip install "sleap-live[cpu]", or for a GPU {GPU_INSTALL_HINT}'


def import_openvino() -> Any:
    """The `openvino` module, or a one-line error saying how to install it."""
    try:
        import openvino
    except ImportError:
        raise RuntimeUnavailableError(
            f"OpenVINO is not installed; {OPENVINO_INSTALL_HINT}"
        ) from None
    return openvino


def openvino_installed() -> bool:
    """Whether `openvino` can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("openvino") is not None
