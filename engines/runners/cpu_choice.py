"""How `engine="auto"` chooses between ONNX Runtime and OpenVINO on the CPU.

ONNX Runtime is the default. OpenVINO (at fp32; never bf16 unasked) is chosen
only when it is installed and was measured faster on this machine, for this
graph, frame size and thread count:

- the measurement runs both runners, whole (graph and host decode), on the
  verification frames (the first frames of the video about to be run) as one
  batch: one untimed run each, then `ROUNDS` alternating timed runs, so load
  changes on a shared machine hit both alike; the median per frame counts;
- OpenVINO wins only if its median is below `MARGIN` times ONNX Runtime's, so
  noise does not flip the choice back and forth;
- the result is kept in the cache directory (`cpu_engine/<key>.json`; the key
  hashes the graph without its metadata, the frame shape (not how many frames
  were timed: the verification frames are read within a time budget, so a busy
  machine reads fewer, and must not measure again for that), the thread count,
  the CPU's model name and core count, and both runtimes' versions), so only the
  first start of a model on a machine pays for the measurement (about one
  OpenVINO compilation plus 2 x (1 + ROUNDS) batches); an unreadable entry is
  measured again;
- without frames to time on, or with OpenVINO not installed, it stays ONNX
  Runtime.

The choice is told in one line (`CpuChoice.line`) whenever OpenVINO is installed.
OpenVINO is considered only where it runs: a graph it cannot read or compile
stays on ONNX Runtime, saying why. Top-down graphs are measured like any other
(the OpenVINO runner answers a batch without animals on the host, see
`sleap_live.engines.runners.openvino`). `SLEAP_LIVE_CPU_ENGINE=onnx|openvino` pins
the choice without measuring.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import numpy as np

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.host.frames import DeferredFrames, given_frames
from sleap_live.engines.notify import Notify
from sleap_live.engines.optional import openvino_installed
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.openvino import LOG

ONNX = "onnx"
OPENVINO = "openvino"
ROUNDS = 5
MARGIN = 0.95
FOLDER = "cpu_engine"
NAMES = {ONNX: "ONNX Runtime", OPENVINO: "OpenVINO"}
# Pins auto's choice on the CPU ("onnx" or "openvino") without measuring: for
# reproducible runs (and the test suite, which pins "onnx").
ENGINE_ENV = "SLEAP_LIVE_CPU_ENGINE"

OnnxRuntimeRunner = TypeVar("OnnxRuntimeRunner", bound=Runner)
OpenVINORunner = TypeVar("OpenVINORunner", bound=Runner)


@attrs.frozen
class CpuChoice:
    """The engine auto runs on the CPU, and the figures it was chosen on.

    Attributes:
        engine: "onnx" or "openvino".
        onnx_ms, openvino_ms: median milliseconds per frame, or None when not measured.
        frames: the shape of the batch timed.
        how: "measured now", "measured earlier (cached)", or why nothing was measured.
    """

    engine: str
    onnx_ms: float | None
    openvino_ms: float | None
    frames: tuple[int, ...]
    how: str

    def line(self) -> str:
        chosen = f"engine auto: {NAMES[self.engine]} on the CPU"
        if self.onnx_ms is None or self.openvino_ms is None:
            return f"{chosen} ({self.how})"
        shape = "x".join(str(n) for n in self.frames)
        return (
            f"{chosen}: {self.openvino_ms:.1f} ms per frame with OpenVINO fp32 against "
            f"{self.onnx_ms:.1f} ms with ONNX Runtime on {shape} verification frames "
            f"(OpenVINO is chosen when under {MARGIN:g}x; {self.how})"
        )


def choose_cpu_runner(
    model: str | Path | bytes,
    onnx_runner: Callable[[], OnnxRuntimeRunner],
    openvino_runner: Callable[[], OpenVINORunner],
    *,
    frames: np.ndarray | DeferredFrames | None,
    threads: int | None,
    cache_dir: Path | None,
    notify: Notify = LOG.warning,
) -> OnnxRuntimeRunner | OpenVINORunner:
    """The runner auto picks on the CPU (see the module docstring).

    Args:
        model: the sleap-live ONNX export (path or bytes) both runners run.
        onnx_runner, openvino_runner: make each runner.
        frames: uint8 (N, H, W, C) frames to time on, or None; `DeferredFrames` are
            read only when the choice is not cached.
        threads: the thread count both runners were given (part of the key).
        cache_dir: sleap-live's cache directory; None measures without keeping it.
        notify: where the one-line choice goes.
    """
    pinned = os.environ.get(ENGINE_ENV)
    if pinned is not None and pinned not in NAMES:
        raise ValueError(f"{ENGINE_ENV}={pinned!r}: expected one of {', '.join(NAMES)}")
    if pinned == OPENVINO:
        notify(CpuChoice(OPENVINO, None, None, (), f"pinned by {ENGINE_ENV}").line())
        return openvino_runner()
    if pinned == ONNX or not openvino_installed():
        return onnx_runner()
    onnx = onnx_runner()
    if frames is None:
        choice = CpuChoice(ONNX, None, None, (), "no verification frames to time OpenVINO on")
        notify(choice.line())
        return onnx
    frame_shape = (
        frames.frame_shape
        if isinstance(frames, DeferredFrames)
        else tuple(np.asarray(frames).shape[1:])
    )
    path = (
        None
        if cache_dir is None
        else cache_dir / FOLDER / f"{_key(model, frame_shape, threads)}.json"
    )
    cached = _cached(path, frame_shape)
    if cached is not None:
        notify(cached.line())
        if cached.engine == ONNX:
            return onnx
        onnx.close()
        return openvino_runner()
    try:
        openvino = openvino_runner()
    except ModelConfigError as error:
        notify(CpuChoice(ONNX, None, None, (), f"OpenVINO cannot run this graph: {error}").line())
        return onnx
    runners: dict[str, OnnxRuntimeRunner | OpenVINORunner] = {ONNX: onnx, OPENVINO: openvino}
    frames = np.asarray(given_frames(frames))
    timings = measure(runners, frames)
    engine = OPENVINO if timings[OPENVINO] < MARGIN * timings[ONNX] else ONNX
    choice = CpuChoice(
        engine, timings[ONNX], timings[OPENVINO], tuple(frames.shape), "measured now"
    )
    if path is not None:
        _store(path, choice)
    notify(choice.line())
    for name, runner in runners.items():
        if name != engine:
            runner.close()
    return runners[engine]


def measure(
    runners: Mapping[str, Runner], frames: np.ndarray, rounds: int = ROUNDS
) -> dict[str, float]:
    """Median milliseconds per frame of each runner on `frames`, timed in alternation."""
    for runner in runners.values():
        runner.run(frames)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            started = time.perf_counter()
            runner.run(frames)
            times[name].append(time.perf_counter() - started)
    return {name: 1000 * statistics.median(t) / len(frames) for name, t in times.items()}


def _key(model: str | Path | bytes, frame_shape: tuple[int, ...], threads: int | None) -> str:
    # The file's bytes, not its parsed graph: parsing needs `onnx`, whose import alone
    # costs most of a warm start. A re-export (new metadata) is measured once more.
    digest = hashlib.sha256(model if isinstance(model, bytes) else Path(model).read_bytes())
    parts = {
        "frame_shape": list(frame_shape),
        "threads": threads,
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        # Its CPU and GPU builds are different distributions of one module.
        "onnxruntime": importlib.import_module("onnxruntime").__version__,
        "openvino": importlib.metadata.version("openvino"),
    }
    digest.update(json.dumps(parts, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _cached(path: Path | None, frame_shape: tuple[int, ...]) -> CpuChoice | None:
    """The stored choice, or None when there is none or it cannot be read; it names
    the batch it was timed on (entries from before that was kept: the frame shape)."""
    if path is None or not path.is_file():
        return None
    try:
        record: Any = json.loads(path.read_text())
        engine = record["engine"]
        if engine not in NAMES:
            return None
        return CpuChoice(
            engine,
            float(record["onnx_ms"]),
            float(record["openvino_ms"]),
            tuple(int(n) for n in record.get("frames", frame_shape)),
            "measured earlier, cached",
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store(path: Path, choice: CpuChoice) -> None:
    """Keeps the choice; a cache that cannot be written only costs a new measurement."""
    record = {
        "engine": choice.engine,
        "onnx_ms": choice.onnx_ms,
        "openvino_ms": choice.openvino_ms,
        "frames": list(choice.frames),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)
    except OSError as error:
        LOG.warning(f"cannot keep the CPU engine choice in {path.parent} ({error})")
