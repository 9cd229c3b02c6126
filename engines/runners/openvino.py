"""Runs a sleap-live export with OpenVINO on the CPU.

OpenVINO reads this project's ONNX export directly (a `.onnx` file or the
in-memory bytes of a model directory's export), or the OpenVINO IR that
`sleap-live export --format openvino` writes (`.xml` + `.bin`,
`sleap_live.engines.export.openvino`). The graph keeps the ONNX's dynamic axes
(batch, height, width), and the sleap-live metadata travels with it: an ONNX
file's `metadata_props` appear in OpenVINO as rt_info `framework/sleap_live`, an
IR carries its own copy as rt_info `sleap_live`.

Precision: OpenVINO's CPU plugin computes in bf16 by default on CPUs that have it
(AMX, AVX512-BF16), which moves points by pixels. This runner asks for f32
(`INFERENCE_PRECISION_HINT`) unless bf16 is requested explicitly, and then
measures what bf16 costs: the same frames run at both precisions at load, and one
line reports the difference (`PrecisionCheck`).

Top-down graphs cut crops around the animals the centroid stage found and run
the second network on that crop batch; on a batch without animals the crop batch
is empty, and OpenVINO's CPU plugin refuses an empty batch ("... batch_size ...
> 0") and stops the inference. An empty crop batch means no frame of the batch
holds an instance, so the runner answers it on the host: every instance-list
output with no instances, and a box top-down model's box slots all empty
(`_NoInstances`), which is what the graph returns on ONNX Runtime. Batches with
any animal run in the graph as always.

Only `openvino`, numpy and scipy are needed; torch is never imported.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.engine_table import BF16, FP32
from sleap_live.engines.errors import (
    EngineError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.host.compare import pose_difference
from sleap_live.engines.host.frames import (
    DeferredFrames,
    as_numpy,
    convert_channels,
    given_frames,
)
from sleap_live.engines.host.outputs import BATCH_AXIS, INSTANCE_AXIS, INSTANCE_LIST, output_spec
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import METADATA_KEY, ExportMetadata
from sleap_live.engines.notify import Notify
from sleap_live.engines.optional import import_openvino
from sleap_live.engines.runners.base import begin_run, refuse_stream
from sleap_live.engines.types import FramePoses, ModelInfo

LOG = logging.getLogger("sleap_live.engines.runners")

# OpenVINO's hint for each of the engine table's precisions of engine "openvino".
PRECISIONS = {FP32: "f32", BF16: "bf16"}
DEFAULT_PRECISION = FP32
# Where the metadata sits in an OpenVINO model's rt_info: an IR's own copy, then
# the ONNX `metadata_props` the ONNX frontend keeps.
IR_METADATA_PATH = [METADATA_KEY]
ONNX_METADATA_PATH = ["framework", METADATA_KEY]
MODEL_SUFFIXES = (".onnx", ".xml")


@attrs.frozen
class PrecisionCheck:
    """How far a reduced-precision run is from f32 on the same frames.

    Attributes:
        precision: the reduced precision ("bf16").
        frames: frames compared.
        count_agreement: frames on which both found the same number of instances.
        points_max_px, points_median_px: distance between matched points present
            in both (NaN when no point was compared).
        presence_mismatches: matched points found by one side only.
    """

    precision: str
    frames: int
    count_agreement: int
    points_max_px: float
    points_median_px: float
    presence_mismatches: int

    def line(self) -> str:
        return (
            f"OpenVINO {self.precision} against fp32 on {self.frames} verification frames: "
            f"points max {self.points_max_px:.3g} px, median {self.points_median_px:.3g} px; "
            f"instance counts equal on {self.count_agreement}/{self.frames} frames; "
            f"{self.presence_mismatches} points found by one precision only"
        )


# Graphs that run a second network on crops around the animals found: on a batch
# without animals the crop batch is empty, which OpenVINO's CPU plugin refuses
# (see the module docstring; the runner answers such a batch on the host).
CROP_MODEL_TYPES = ("topdown", "multi_class_topdown")
# What the CPU plugin's refusal of an empty batch says (OpenVINO 2025: "[CPU]
# MaxPool node with name '/instance_network/...' Check 'batch_size...' failed ...
# Batch size is zero."), and the scope of the network that runs on the crops: a
# refusal there means the crop batch was empty.
EMPTY_BATCH_REFUSAL = "Batch size is zero"
CROP_NETWORK_SCOPE = "/instance_network/"


@attrs.frozen
class _NoInstances:
    """The instance-list outputs of a batch in which nothing was found.

    Attributes:
        shapes: each output's name, dtype and shape with the instance axis 0, or
            the batch axis -1 (a box top-down model's box slots, all empty: False,
            zeros the host never reads); every other axis is sized in the graph.
    """

    shapes: tuple[tuple[str, str, tuple[int, ...]], ...]

    @classmethod
    def of(cls, compiled: Any, outputs: Sequence[tuple[str, int]]) -> _NoInstances | None:
        """The empty outputs of a compiled instance-list graph, or None where an output
        has an axis the graph does not size (then the refusal stands)."""
        shapes = []
        for name, index in outputs:
            spec = output_spec(name, INSTANCE_LIST)
            graph_shape = compiled.outputs[index].get_partial_shape()
            sizes = [0]
            for position, axis in enumerate(spec.axes[1:], start=1):
                size = graph_shape[position]
                if axis == INSTANCE_AXIS or not size.is_static:
                    return None
                sizes.append(size.get_length())
            if spec.axes[0] == BATCH_AXIS:
                sizes[0] = -1
            elif spec.axes[0] != INSTANCE_AXIS:
                return None
            shapes.append((name, spec.dtype, tuple(sizes)))
        return cls(tuple(shapes))

    def outputs(self, batch_size: int) -> dict[str, np.ndarray]:
        return {
            name: np.zeros((batch_size if shape[0] < 0 else 0, *shape[1:]), dtype)
            for name, dtype, shape in self.shapes
        }


class OpenVINORunner:
    """Runs a sleap-live export (ONNX or OpenVINO IR) with OpenVINO on the CPU.

    Args:
        model: a `.onnx` or `.xml` path, or the bytes of a sleap-live ONNX export.
        precision: "fp32" (the default; agrees with ONNX Runtime to float32
            rounding) or "bf16" (explicit only; needs `check_frames`).
        threads: OpenVINO's `INFERENCE_NUM_THREADS`; None keeps its default.
        check_frames: uint8 (N, H, W, C) frames that show animals (or
            `DeferredFrames`); with "bf16", run at both precisions at load and
            compared (`precision_check`).
        cache_dir: OpenVINO's compiled-model cache (`CACHE_DIR`), so a later
            start skips most of the compilation; None compiles every time.
        notify: where the bf16 comparison line goes.

    Attributes:
        info, metadata, device ("cpu"), precision.
        precision_check: the bf16 comparison, or None at fp32.

    Raises:
        RuntimeUnavailableError: OpenVINO is not installed, or bf16 is asked of a
            CPU without it.
        ModelNotFoundError, ModelConfigError: the model cannot be read or carries
            no sleap-live metadata.
        ValueError: unknown precision, or bf16 without frames to check it on.
    """

    def __init__(
        self,
        model: str | Path | bytes,
        *,
        precision: str = DEFAULT_PRECISION,
        threads: int | None = None,
        check_frames: np.ndarray | DeferredFrames | None = None,
        cache_dir: str | Path | None = None,
        notify: Notify = LOG.warning,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(
                f"unknown precision {precision!r} (expected one of {tuple(PRECISIONS)})"
            )
        if precision != DEFAULT_PRECISION and check_frames is None:
            raise ValueError(
                f"precision {precision} is measured against fp32 at load on frames that show "
                "animals: give check_frames (on the command line, --verify-video VIDEO or keep "
                "the default verification)"
            )
        ov = import_openvino()
        origin = "ONNX model bytes" if isinstance(model, bytes) else str(model)
        core = ov.Core()
        if precision != DEFAULT_PRECISION:
            _require_capability(core, precision)
        graph = _read_model(core, model, origin)
        metadata = _metadata(graph, origin)
        self.metadata: ExportMetadata | None = metadata
        self.info: ModelInfo = metadata.info
        self._input_channels = metadata.input_channels
        self.device = "cpu"
        self.precision = precision
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        if cache_dir is not None:
            config["CACHE_DIR"] = str(cache_dir)
        self._compiled: Any = _compile(core, graph, precision, config)
        self._request: Any = self._compiled.create_infer_request()
        self._outputs = _output_ports(self._compiled, metadata.output_names, origin)
        self._no_instances: _NoInstances | None = None
        if self.info.model_type in CROP_MODEL_TYPES and metadata.output_layout == INSTANCE_LIST:
            self._no_instances = _NoInstances.of(self._compiled, self._outputs)
        self.precision_check: PrecisionCheck | None = None
        if precision != DEFAULT_PRECISION:
            assert check_frames is not None
            reference = _compile(core, graph, DEFAULT_PRECISION, config).create_infer_request()
            self.precision_check = self._compare(reference, np.asarray(given_frames(check_frames)))
            notify(self.precision_check.line())

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) batch (numpy or CPU tensor).

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
            ValueError: a CUDA `stream` (OpenVINO runs on the CPU).
        """
        refuse_stream(self, stream)
        return self._run(self._request, frames)

    def close(self) -> None:
        """Releases the compiled model; idempotent."""
        self._request = None
        self._compiled = None

    def _run(self, request: Any, frames: Any) -> list[FramePoses]:
        frames, batch_size = begin_run(self, request, frames, self._input_channels)
        # The input is read in place; outputs are copies, never overwritten later.
        try:
            results = request.infer([np.ascontiguousarray(as_numpy(frames))], share_inputs=True)
        except RuntimeError as error:
            if self.info.model_type not in CROP_MODEL_TYPES or not _empty_crop_batch(error):
                raise
            if self._no_instances is None:
                raise EngineError(
                    f"OpenVINO cannot run this {self.info.model_type} graph on a batch without "
                    "animals (its CPU plugin refuses the empty crop batch, and the graph does "
                    "not size its outputs' node axes); run it with --engine onnx"
                ) from error
            # The crop batch was empty: no frame of this batch holds an animal.
            return decode(self.info, self._no_instances.outputs(batch_size), batch_size)
        values = results.to_tuple()
        outputs = {name: values[index] for name, index in self._outputs}
        return decode(self.info, outputs, batch_size)

    def _compare(self, reference: Any, frames: np.ndarray) -> PrecisionCheck:
        """Runs `frames` at this runner's precision and at f32, and measures the difference."""
        frames = np.asarray(frames)
        if frames.shape[-1] not in self._input_channels:
            frames = convert_channels(frames, self._input_channels[0])
        return compare_poses(self.precision, self.run(frames), self._run(reference, frames))


def compare_poses(
    precision: str, reduced: Sequence[FramePoses], full: Sequence[FramePoses]
) -> PrecisionCheck:
    """Matches each frame's instances (`pose_difference`) and measures the points."""
    difference = pose_difference(reduced, full)
    return PrecisionCheck(
        precision=precision,
        frames=difference.frames,
        count_agreement=difference.same_count,
        points_max_px=difference.max_px(),
        points_median_px=difference.quantile_px(0.5),
        presence_mismatches=difference.presence_mismatches,
    )


def _empty_crop_batch(error: RuntimeError) -> bool:
    """Whether OpenVINO refused the crop network's empty batch (see the module docstring)."""
    message = str(error)
    return EMPTY_BATCH_REFUSAL in message and CROP_NETWORK_SCOPE in message


def _require_capability(core: Any, precision: str) -> None:
    capabilities = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if precision.upper() not in capabilities:
        raise RuntimeUnavailableError(
            f"this CPU has no {precision} support in OpenVINO (it offers "
            f"{', '.join(capabilities)}); run at fp32"
        )


def _read_model(core: Any, model: str | Path | bytes, origin: str) -> Any:
    if isinstance(model, bytes):
        try:
            return core.read_model(model)
        except RuntimeError as error:
            raise ModelConfigError(f"{origin}: OpenVINO cannot read it ({error})") from error
    path = Path(model)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such model file")
    if path.suffix not in MODEL_SUFFIXES:
        raise ModelConfigError(
            f"{path}: OpenVINO runs sleap-live '.onnx' exports or '.xml' IR exports"
        )
    try:
        return core.read_model(str(path))
    except RuntimeError as error:
        raise ModelConfigError(f"{path}: OpenVINO cannot read it ({error})") from error


def _metadata(graph: Any, origin: str) -> ExportMetadata:
    for key in (IR_METADATA_PATH, ONNX_METADATA_PATH):
        if graph.has_rt_info(key):
            return ExportMetadata.from_json(graph.get_rt_info(key).astype(str), origin)
    raise ModelConfigError(
        f"{origin}: no '{METADATA_KEY}' metadata; not exported by sleap-live "
        "(for a `sleap-nn export` output, pass its directory instead)"
    )


def _compile(core: Any, graph: Any, precision: str, config: dict[str, Any]) -> Any:
    settings = {**config, "INFERENCE_PRECISION_HINT": PRECISIONS[precision]}
    try:
        return core.compile_model(graph, "CPU", settings)
    except RuntimeError as error:
        raise ModelConfigError(f"OpenVINO cannot compile the model ({error})") from error


def _output_ports(compiled: Any, names: Sequence[str], origin: str) -> list[tuple[str, int]]:
    """Each metadata output name with the index of the compiled model's output of that name.

    Indices, not ports: they are the same in every compilation of the graph (the
    f32 reference of a bf16 runner).

    A port may carry several tensor names (OpenVINO merges names of tensors that
    fold into one), so ports are matched by membership, never by `any_name`.
    """
    indices = []
    for name in names:
        found = [i for i, port in enumerate(compiled.outputs) if name in port.get_names()]
        if not found:
            raise ModelConfigError(f"{origin}: the graph has no output named {name!r}")
        indices.append((name, found[0]))
    return indices
