"""The CPU runners of ONNX graphs: engine "openvino", "auto" on the CPU (ONNX
Runtime, unless OpenVINO measured faster, see `sleap_live.engines.runners.cpu_choice`),
and precision "int8" (ONNX Runtime, see `sleap_live.engines.runners.int8`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.engine_table import INT8
from sleap_live.engines.runners.base import Runner
from sleap_live.engines.runners.devices import onnx_device
from sleap_live.engines.runners.specialise import SpecialisedGraphs

# OpenVINO's compiled models go in this folder of the cache root.
OPENVINO_FOLDER = "openvino"


@attrs.frozen
class CpuRunners:
    """Engine "openvino", and "auto" on the CPU.

    Attributes:
        engine, device, threads: as given to `load_runner`.
        options: `load_runner`'s options (`precision`; `keep_int8`; `verify_frames`
            to check bf16 and int8 on, to calibrate int8 on and to time the CPU
            engines on).
        cache_dir: sleap-live's cache root (OpenVINO's compiled models, the auto
            choice, int8 graphs), or None with `cache=False`.
        model_dirs: the model directories given (int8 calibrates on their
            training labels' frames when no frames are given).
    """

    engine: str
    device: str
    threads: int | None
    options: dict[str, Any]
    cache_dir: Path | None
    model_dirs: tuple[Path, ...] = ()

    @property
    def int8(self) -> bool:
        return self.options.get("precision") == INT8

    def runs(self, gpu: dict[str, Any]) -> bool:
        """Whether this picks the runner: engine "openvino", "auto" on the CPU, or int8."""
        if self.engine == "openvino":
            if self.device not in ("auto", "cpu") or gpu:
                raise ValueError("OpenVINO runs on the CPU (--device cpu), without GPU options")
            return True
        on_cpu = not gpu and onnx_device(self.device) == "cpu"
        return (self.engine == "auto" or self.int8) and on_cpu

    def runner(self, model: Path | bytes, specialised: SpecialisedGraphs | None = None) -> Runner:
        """An `OpenVINORunner` (engine "openvino"), an int8 ONNX Runtime runner
        (precision "int8"), or auto's choice on the CPU.

        `specialised`: the ONNX Runtime runner's specialised graphs (see `OnnxRunner`).
        """
        if self.engine == "openvino":
            return self.openvino(model)
        if self.int8:
            from sleap_live.engines.runners.int8 import int8_runner

            return int8_runner(
                model if isinstance(model, bytes) else model.read_bytes(),
                threads=self.threads,
                verify_frames=self.options.get("verify_frames"),
                model_dirs=self.model_dirs,
                cache_root=self.cache_dir,
                keep=bool(self.options.get("keep_int8")),
            )
        from sleap_live.engines.runners.cpu_choice import choose_cpu_runner
        from sleap_live.engines.runners.onnx import OnnxRunner

        runner: Runner = choose_cpu_runner(
            model,
            lambda: OnnxRunner(model, intra_op_threads=self.threads, specialised=specialised),
            lambda: self.openvino(model),
            frames=self.options.get("verify_frames"),
            threads=self.threads,
            cache_dir=self.cache_dir,
        )
        return runner

    def openvino(self, model: Path | bytes) -> Runner:
        from sleap_live.engines.runners.openvino import OpenVINORunner

        return OpenVINORunner(
            model,
            precision=self.options.get("precision", "fp32"),
            threads=self.threads,
            check_frames=self.options.get("verify_frames"),
            cache_dir=None if self.cache_dir is None else self.cache_dir / OPENVINO_FOLDER,
        )
