"""`load_runner`: one entry point from whatever model the user has to a `Runner`.

Accepted models:

- one or two sleap-nn model directories (a top-down model is a centroid directory
  and a centered-instance directory, given together in any order);
- a sleap-live ONNX export (`.onnx`) or TorchScript export (`.pt`);
- a directory written by `sleap-nn export` (`export_metadata.json` + `model.onnx`).

Engines: "torch" runs the torch inference model (eager, or the TorchScript
export); "onnx" runs ONNX Runtime, exporting model directories to an in-memory
ONNX graph first, verified on frames with animals (`verify_frames`, e.g. the
first frames of the video about to be run; see `sleap_live.engines.export.frames`
for where frames come from otherwise); "auto" picks ONNX Runtime on the CPU (it
ran the toy models faster than eager torch, see scripts/bench_engines.py) and on
a GPU when `onnxruntime-gpu` is installed, torch otherwise.

"auto" picks the engine before anything is loaded and never changes it: an
export that fails or does not verify is an `ExportError`, not a quiet switch to
torch. `.onnx` files and sleap-nn export directories load without importing
torch (with `device="auto"`, torch is asked about a GPU only when installed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sleap_live.engines.errors import ExportError, ModelNotFoundError
from sleap_live.engines.runners.base import Runner

ENGINES = ("auto", "torch", "onnx")
DEVICES = ("auto", "cpu", "cuda")
# Options of the in-memory ONNX export of model directories (engine "onnx").
EXPORT_OPTIONS = ("opset", "verify", "verify_frames")


def load_runner(
    paths: str | Path | Sequence[str | Path],
    *,
    engine: str = "auto",
    device: str = "auto",
    threads: int | None = None,
    **options: Any,
) -> Runner:
    """Loads a model and returns a `Runner` for it.

    Args:
        paths: one path, or a list of one or two (see the module docstring).
        engine: "auto", "torch" or "onnx".
        device: "auto" (a CUDA GPU when one can be used, else the CPU), "cpu",
            "cuda" or "cuda:N".
        threads: CPU threads per operator for whichever engine runs (torch's
            `num_threads`, ONNX Runtime's `intra_op_threads`); None keeps the
            engine's default (one per physical core).
        **options: for model directories run with ONNX Runtime, `opset`, `verify`
            and `verify_frames` of the in-memory export (see `export_onnx_bytes`).

    Returns:
        A `TorchRunner`, `OnnxRunner` or `SleapNNExportRunner`.

    Raises:
        ValueError: unknown engine or device, or an engine that cannot run this
            kind of model.
        ModelNotFoundError, ModelConfigError, CheckpointError: the model cannot
            be read.
        RuntimeUnavailableError: the engine or device is not available.
        ExportError: model directories run with ONNX Runtime ("onnx", or "auto"
            on the CPU) whose export fails or does not verify; the message says
            to run with `--engine torch` or skip the verification instead.
    """
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (expected one of {ENGINES})")
    if device.partition(":")[0] not in DEVICES:
        raise ValueError(f"unknown device {device!r} (expected 'auto', 'cpu', 'cuda' or 'cuda:N')")
    if not 1 <= len(paths) <= 2:
        raise ValueError(
            f"give one model, or two model directories for top-down; got {len(paths)} paths"
        )
    unknown = set(options) - set(EXPORT_OPTIONS)
    if unknown:
        raise TypeError(f"load_runner got unknown options {sorted(unknown)}")
    for path in paths:
        if not path.exists():
            raise ModelNotFoundError(f"{path}: no such model file or directory")

    first = paths[0]
    if len(paths) == 1 and first.is_file():
        if first.suffix == ".onnx":
            return _onnx_file_runner(first, engine, device, threads)
        if first.suffix == ".pt":
            return _torchscript_runner(first, engine, device, threads)
        raise ValueError(
            f"{first}: unknown model file type (expected a sleap-live '.onnx' or '.pt' export, "
            "or a model directory)"
        )
    from sleap_live.engines.load.dirs import CHECKPOINT, TRAINING_CONFIG, is_sleap_nn_export_dir

    if len(paths) == 1 and is_sleap_nn_export_dir(first):
        return _sleap_nn_export_runner(first, engine, device, threads)
    for path in paths:
        if not path.is_dir():
            raise ValueError(
                f"{path}: expected a model directory ({TRAINING_CONFIG} and {CHECKPOINT}) "
                f"alongside {first}"
            )
    return _model_dir_runner(paths, engine, device, threads, options)


def _onnx_file_runner(path: Path, engine: str, device: str, threads: int | None) -> Runner:
    from sleap_live.engines.runners.onnx import OnnxRunner, providers_for

    _require(engine, "onnx", f"{path} is an ONNX export")
    return OnnxRunner(path, providers_for(_onnx_device(device)), intra_op_threads=threads)


def _torchscript_runner(path: Path, engine: str, device: str, threads: int | None) -> Runner:
    from sleap_live.engines.export.torchscript import load_torchscript
    from sleap_live.engines.runners.torch import TorchRunner

    _require(engine, "torch", f"{path} is a TorchScript export")
    model = load_torchscript(path)
    return TorchRunner(
        model,
        _torch_device(device),
        input_channels=model.metadata.input_channels,
        num_threads=threads,
    )


def _sleap_nn_export_runner(path: Path, engine: str, device: str, threads: int | None) -> Runner:
    from sleap_live.engines.runners.onnx import providers_for
    from sleap_live.engines.runners.sleap_nn_export import SleapNNExportRunner

    _require(engine, "onnx", f"{path} is a sleap-nn export directory")
    return SleapNNExportRunner(path, providers_for(_onnx_device(device)), intra_op_threads=threads)


def _model_dir_runner(
    paths: list[Path],
    engine: str,
    device: str,
    threads: int | None,
    export_options: dict[str, Any],
) -> Runner:
    from sleap_live.engines.graph.build import load_inference_model
    from sleap_live.engines.runners.torch import TorchRunner

    model = load_inference_model(paths)
    if engine == "torch" or (engine == "auto" and not _onnx_can_use(device)):
        return TorchRunner(model, _torch_device(device), num_threads=threads)

    from sleap_live.engines.export import export_onnx_bytes
    from sleap_live.engines.runners.onnx import OnnxRunner, providers_for

    try:
        onnx_bytes = export_onnx_bytes(model, sources=paths, **export_options)
    except ExportError as error:
        raise ExportError(
            f"cannot run {', '.join(map(str, paths))} with ONNX Runtime: {error}; "
            "or run the model with torch (--engine torch)"
        ) from error
    return OnnxRunner(onnx_bytes, providers_for(_onnx_device(device)), intra_op_threads=threads)


def _require(engine: str, needed: str, what: str) -> None:
    if engine not in ("auto", needed):
        raise ValueError(f"{what}; it runs with engine '{needed}', not {engine!r}")


def _torch_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _onnx_device(device: str) -> str:
    """The ONNX Runtime device: "auto" means CUDA only if onnxruntime-gpu can use it."""
    if device != "auto":
        return device
    return "cuda" if _ort_has_cuda() and _gpu_present() else "cpu"


def _onnx_can_use(device: str) -> bool:
    """Whether ONNX Runtime can run on `device` ("auto": on the device auto picks)."""
    if device == "cpu":
        return True
    if device == "auto":
        return _ort_has_cuda() or not _gpu_present()
    return _ort_has_cuda()


def _ort_has_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def _gpu_present() -> bool:
    """Whether a CUDA GPU is usable, asked of the driver itself.

    A ctypes call into the CUDA driver rather than `torch.cuda`, so that a run of
    an ONNX export never loads torch (and a host without torch still finds its GPU).
    """
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
