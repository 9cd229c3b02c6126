"""Which device each engine runs on: the device names, and what the host has.

Asked of the CUDA driver itself (`gpu_present`, a ctypes call) and of ONNX
Runtime's providers rather than `torch.cuda`, so that a run of an ONNX export
never loads torch (and a host without torch still finds its GPU).
"""

from __future__ import annotations

from sleap_live.engines.errors import RuntimeUnavailableError

DEVICES = ("auto", "cpu", "cuda")
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N a GPU index)"


def is_device(device: str) -> bool:
    """Whether `device` is one of `DEVICE_FORMS`: "auto", "cpu", "cuda" or "cuda:N"."""
    kind, colon, index = device.partition(":")
    if not colon:
        return kind in DEVICES
    return kind == "cuda" and index.isascii() and index.isdigit()


def torch_device(device: str) -> str:
    """The torch device: "auto" means CUDA where torch can use it."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def onnx_device(device: str) -> str:
    """The ONNX Runtime device: "auto" means CUDA only if onnxruntime-gpu can use it."""
    if device != "auto":
        return device
    return "cuda" if ort_has_cuda() and gpu_present() else "cpu"


def onnx_can_use(device: str) -> bool:
    """Whether ONNX Runtime can run on `device` ("auto": on the device auto picks).

    Never where neither of its builds is installed (they come from the `cpu` and
    `gpu` extras): "auto" then runs model directories with torch.
    """
    if not ort_installed():
        return False
    if device == "cpu":
        return True
    if device == "auto":
        return ort_has_cuda() or not gpu_present()
    return ort_has_cuda()


def tensorrt_device(device: str) -> str:
    """The CUDA device TensorRT runs on ("cuda:N"); one-line errors where there is none."""
    if device == "cpu":
        raise ValueError("TensorRT runs on a CUDA GPU; on the CPU use --engine onnx or torch")
    if not gpu_present():
        raise RuntimeUnavailableError(
            "no CUDA GPU found (TensorRT needs an NVIDIA GPU and its driver); "
            "on the CPU use --engine onnx"
        )
    if device in ("auto", "cuda"):
        return "cuda:0"
    return device


def ort_installed() -> bool:
    """Whether an ONNX Runtime build (onnxruntime or onnxruntime-gpu) is installed."""
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def ort_has_cuda() -> bool:
    """Whether the installed ONNX Runtime has its CUDA provider (False without one)."""
    if not ort_installed():
        return False
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def gpu_present() -> bool:
    """Whether a CUDA GPU is usable, asked of the driver itself (see the module docstring)."""
    import ctypes
    import sys

    library = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        driver = ctypes.CDLL(library)
    except OSError:
        return False
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0
