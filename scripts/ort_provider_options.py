#!/usr/bin/env python
"""The provider option names a real onnxruntime-gpu wheel accepts, read from its libraries.

ONNX Runtime's Python binding parses the TensorRT provider's options itself: an
if-chain over the keys it knows, ending in `ORT_THROW("Invalid TensorRT EP option: ",
key)` (onnxruntime/python/onnxruntime_pybind_state.cc). The compiler lays that
chain's string literals out together in the binding's read-only data, right before the
message, after the "ORT_TENSORRT_UNAVAILABLE" literal the same function uses, so the
keys are the identifier-shaped strings between those two; `device_id`, the chain's
first key, is a literal the linker merged into the tail of another string
("set_cuda_device_id"), so it is checked for alone. The CUDA provider's options are
parsed in its own library (`libonnxruntime_providers_cuda.so`, "Unknown provider
option" for any other key); a documented CUDA option is accepted when that library
holds its name, whole or as the tail of a longer string (merged the same way).

    python scripts/ort_provider_options.py [--version 1.31.1] [--wheel PATH]

downloads the wheel (pip, about 255 MB, into a temporary folder) unless given one, and
writes tests/data/onnxruntime_gpu_options.json, which tests/engines/test_gpu_runners.py
checks every provider sleap-live builds against (CI has no GPU and does not download it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from gpu_payload import download as download_wheels

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "tests" / "data" / "onnxruntime_gpu_options.json"
DEFAULT_VERSION = "1.31.1"
BINDING = re.compile(r"onnxruntime/capi/onnxruntime_pybind11_state\..*\.so$")
CUDA_LIBRARY = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
TENSORRT_START = "ORT_TENSORRT_UNAVAILABLE"
TENSORRT_END = "Invalid TensorRT EP option: "
KEY = re.compile(r"[a-z][a-z0-9_]*")
# The CUDA provider's options as ONNX Runtime's docs list them
# (docs/execution-providers/CUDA-ExecutionProvider.md, "Configuration Options").
CUDA_DOCUMENTED = (
    "device_id",
    "user_compute_stream",
    "has_user_compute_stream",
    "do_copy_in_default_stream",
    "use_ep_level_unified_stream",
    "gpu_mem_limit",
    "arena_extend_strategy",
    "cudnn_conv_algo_search",
    "cudnn_conv_use_max_workspace",
    "cudnn_conv1d_pad_to_nc1d",
    "enable_cuda_graph",
    "enable_skip_layer_norm_strict_mode",
    "use_tf32",
    "gpu_external_alloc",
    "gpu_external_free",
    "gpu_external_empty_cache",
    "prefer_nhwc",
    "tunable_op_enable",
    "tunable_op_tuning_enable",
    "tunable_op_max_tuning_duration_ms",
    "sdpa_kernel",
    "fuse_conv_bias",
    "enable_cudnn",
)


def strings(data: bytes, least: int = 4) -> list[str]:
    """The printable ASCII runs of `data`, as `strings -a` lists them."""
    return [run.decode() for run in re.findall(rb"[\x20-\x7e]{%d,}" % least, data)]


def tensorrt_keys(binding: bytes) -> list[str]:
    """The keys the binding's TensorRT option parser accepts, in its order."""
    found = strings(binding)
    end = found.index(TENSORRT_END)
    start = max(i for i in range(end) if found[i] == TENSORRT_START)
    window = [text for text in found[start + 1 : end] if KEY.fullmatch(text)]
    if not _holds(found, "device_id") or "user_compute_stream" not in window:
        raise ValueError("the TensorRT option parser's strings are not where expected")
    return ["device_id", *window]


def cuda_keys(library: bytes) -> list[str]:
    """The documented CUDA provider options the CUDA provider's library names."""
    held = strings(library)
    return [key for key in CUDA_DOCUMENTED if _holds(held, key)]


def _holds(found: Sequence[str], key: str) -> bool:
    """Whether `key` is one of `found`, or the tail of one (a linker-merged literal)."""
    return any(text.endswith(key) for text in found)


def read_wheel(wheel: Path) -> dict[str, object]:
    with zipfile.ZipFile(wheel) as archive:
        (binding,) = [name for name in archive.namelist() if BINDING.search(name)]
        return {
            "wheel": wheel.name,
            "TensorrtExecutionProvider": tensorrt_keys(archive.read(binding)),
            "CUDAExecutionProvider": cuda_keys(archive.read(CUDA_LIBRARY)),
        }


def download(version: str, folder: Path) -> Path:
    """The wheel of that version for the GPU machine's Python (3.12, manylinux x86_64)."""
    (wheel,) = download_wheels([f"onnxruntime-gpu=={version}"], folder)
    return wheel


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--version", default=DEFAULT_VERSION)
    parser.add_argument("--wheel", type=Path, help="an onnxruntime-gpu wheel already here")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        wheel = args.wheel or download(args.version, Path(folder))
        report = {"onnxruntime-gpu": wheel.name.split("-")[1], **read_wheel(wheel)}
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{args.output}: {report['wheel']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
