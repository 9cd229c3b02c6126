"""The engine table: each engine's options, precisions, devices and kinds of model.

`LoadOptions` (so `load_runner`) checks its arguments against it, the command line takes its
`--engine` and `--precision` choices (and refuses a precision an engine does not
take) from it, and the docs' engine table is written from it (`markdown`), so the
three cannot disagree. A module of plain records: building the parser imports no
runner.
"""

from __future__ import annotations

import attrs

FP32 = "fp32"
BF16 = "bf16"
FP16 = "fp16"
INT8 = "int8"
# Options of the in-memory ONNX export of model directories, which every engine takes.
EXPORT_OPTIONS = ("opset", "verify", "verify_frames")
# Options of the GPU runners (torch and ONNX Runtime on CUDA).
GPU_OPTIONS = ("stream", "cuda_graphs", "execution_provider")
# The kinds of model (`load_runner`'s `RUNNERS` rows) each engine runs, in words.
MODEL_DIRS = "model directories"
ONNX_FILE = "sleap-live .onnx"
TORCHSCRIPT_FILE = "sleap-live .pt"
OPENVINO_FILE = "OpenVINO .xml"
SLEAP_NN_EXPORT = "sleap-nn export"
TENSORRT_FILE = "TensorRT .engine/.plan"


@attrs.frozen
class Engine:
    """One engine `load_runner` runs models on.

    Attributes:
        name: the `engine=` value (`--engine`).
        options: `load_runner` options it takes besides an on-demand export's
            (`EXPORT_OPTIONS`).
        precisions: the `precision=` values it takes (the first is its default).
        cli_precisions: those `--precision` offers with it (TensorRT's fp16 is
            the Python API's only).
        devices: where it runs.
        models: the kinds of model it runs.
    """

    name: str
    options: tuple[str, ...]
    precisions: tuple[str, ...]
    cli_precisions: tuple[str, ...]
    devices: tuple[str, ...]
    models: tuple[str, ...]


ENGINE_TABLE = (
    Engine(
        "auto",
        (*GPU_OPTIONS, "precision", "keep_int8"),
        (FP32, INT8),
        (FP32, INT8),
        ("cpu", "cuda"),
        (MODEL_DIRS, ONNX_FILE, TORCHSCRIPT_FILE, OPENVINO_FILE, SLEAP_NN_EXPORT, TENSORRT_FILE),
    ),
    Engine("torch", GPU_OPTIONS, (FP32,), (), ("cpu", "cuda"), (MODEL_DIRS, TORCHSCRIPT_FILE)),
    Engine(
        "onnx",
        (*GPU_OPTIONS, "precision", "keep_int8"),
        (FP32, INT8),
        (FP32, INT8),
        ("cpu", "cuda"),
        (MODEL_DIRS, ONNX_FILE, SLEAP_NN_EXPORT),
    ),
    Engine(
        "openvino",
        ("precision",),
        (FP32, BF16),
        (FP32, BF16),
        ("cpu",),
        (MODEL_DIRS, ONNX_FILE, OPENVINO_FILE),
    ),
    Engine(
        "tensorrt",
        ("frame_size", "batch_size", "precision", "engine_cache", "stream"),
        (FP32, FP16),
        (),
        ("cuda",),
        (MODEL_DIRS, ONNX_FILE, TENSORRT_FILE),
    ),
    Engine(
        "torch-compile", ("compile_mode", "stream"), (FP32,), (), ("cpu", "cuda"), (MODEL_DIRS,)
    ),
)
ENGINES = tuple(engine.name for engine in ENGINE_TABLE)
# The precisions `--precision` offers, each once. The table is read from its end
# here and in `engines_taking`, so that "auto", which picks an engine for you,
# comes after the engines it picks from.
CLI_PRECISIONS = tuple(dict.fromkeys(p for e in reversed(ENGINE_TABLE) for p in e.cli_precisions))


def engine(name: str) -> Engine:
    """The row of engine `name`.

    Raises:
        ValueError: no engine of that name.
    """
    for row in ENGINE_TABLE:
        if row.name == name:
            return row
    raise ValueError(f"unknown engine {name!r} (expected one of {ENGINES})")


def engines_taking(precision: str) -> tuple[str, ...]:
    """The engines `--precision precision` is an option of, "auto" last."""
    return tuple(e.name for e in reversed(ENGINE_TABLE) if precision in e.cli_precisions)


def markdown() -> str:
    """The table as a Markdown table, for the docs (`scripts/docs_hooks.py`)."""
    lines = [
        "| engine | runs | devices | precisions | options |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in ENGINE_TABLE:
        options = ", ".join(f"`{name}`" for name in row.options)
        lines.append(
            f"| `{row.name}` | {', '.join(row.models)} | {', '.join(row.devices)} | "
            f"{', '.join(row.precisions)} | {options} |"
        )
    return "\n".join(lines)
