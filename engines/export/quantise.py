"""int8 graphs for the CPU: ONNX Runtime's static quantisation of an export's networks.

`quantise_networks` turns a sleap-live ONNX export (float32) into the same graph
with its networks in int8, in ONNX Runtime's QDQ format (each quantised tensor
passes a `QuantizeLinear`/`DequantizeLinear` pair, which ONNX Runtime fuses into
integer kernels on the CPU):

- only the networks are quantised: the nodes inside the networks' module scopes
  (`network_nodes`, every scope named `...network`). Preprocessing (channels, size
  matching, scaling, normalisation) and postprocessing (peaks, crops, sub-pixel
  refinement, PAF scores) stay float32 in the same graph, so coordinates are
  computed as precisely as ever from int8 maps;
- weights per output channel, activations uint8, ranges calibrated by MinMax on
  frames run through the whole graph: a top-down model's instance network is
  calibrated on the crops the graph itself cuts around the animals it finds;
- weights in the form that fits the CPU it runs on (`quant_form`): int8 (U8S8) on
  x86 with VNNI and on arm64, uint8 (U8U8) elsewhere. ONNX Runtime's quantization
  guide (docs/performance/model-optimizations/quantization.md in
  microsoft/onnxruntime, "Data type selection" and the FAQ; read for 1.32, the
  version measured) says its U8S8 kernels on x86 with AVX2 or AVX-512 but without
  VNNI use VPMADDUBSW, whose 16-bit sums can saturate, and to use U8U8 or 7-bit
  weights (`reduce_range`) there; x86 with VNNI and ARM have no such issue.
  Measured on an AVX2-only AMD EPYC (scripts/bench_int8_forms.py,
  docs/benchmarks.md): U8S8 moved the demo top-down pair's median point by 3.8 px
  and changed the 384 x 384 top-down pair's instance count on every frame; 7-bit
  weights still moved the demo's median point 0.16 px and changed 3 of 16 counts
  at 384; U8U8 kept the median within 0.08 px and no top-down count changed, so
  U8U8 is the form there (on the 1024 x 1024 top-down pair too: U8S8 changed every
  frame's instance count, 7-bit weights moved the median 0.15 px, U8U8 0.05 px).
  It is slower than fp32 on that CPU at 384 x 384 and below (1.13x faster at
  1024), and where it is, `--precision int8` runs fp32, saying so
  (`sleap_live.engines.runners.int8`).

The calibration frames are chosen by the caller (`sleap_live.engines.runners.int8`):
frames of the video about to be run or the model's training labels, those in
which the float32 graph finds animals.

The float32 graph's metadata is kept. Quantised graphs are cached under the
cache root's `int8/` folder (`ExportCache` entries, checked as exports are),
keyed by the float32 graph's bytes, the calibration frames' bytes, ONNX Runtime's
version, the settings below and the form (`int8_key`); the form is also written in
the int8 graph's metadata (`INT8_METADATA_KEY`).

Needs `onnx` and `onnxruntime` (its `quantization` package); torch is not imported.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import platform
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.load.export_cache import CacheKey

INT8_FOLDER = "int8"
# Frames per calibration run of the whole graph.
CALIBRATION_BATCH = 4
# Network ops left in float32 between a DequantizeLinear and a QuantizeLinear: the
# decoders' upsampling (bilinear on uint8 would round every interpolated value).
FLOAT_OPS = ("Resize",)
# The quantisation settings, part of the cache key (a change makes new entries).
SETTINGS: Mapping[str, Any] = {
    "format": "QDQ",
    "weights": "int8 per channel",
    "activations": "uint8",
    "calibration": "MinMax",
    "nodes": "networks",
    "float_ops": list(FLOAT_OPS),
    "version": 2,
}
# The int8 graph's `metadata_props` entry saying how it was quantised (JSON:
# `QuantForm` and `SETTINGS`), beside the float32 graph's own.
INT8_METADATA_KEY = "sleap_live_int8"
# The x86 flags (Linux's /proc/cpuinfo names) of the integer dot-product
# instructions that ONNX Runtime's U8S8 kernels use without saturating: AVX-512
# VNNI (VPDPBUSD) and its VEX form AVX-VNNI.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")
# numpy's names (`__cpu_features__`) of the flags `quant_form` reads, for CPUs
# without /proc/cpuinfo. numpy has no AVX-VNNI: such a CPU reads as without VNNI,
# and gets the form that is right everywhere (U8U8).
NUMPY_FLAGS = {"AVX512VNNI": "avx512_vnni", "AVX512F": "avx512f", "AVX2": "avx2"}


@attrs.frozen
class QuantForm:
    """How the networks are quantised for a CPU (module docstring; `quant_form`).

    Attributes:
        name: "U8S8" (uint8 activations, int8 weights), "U8U8" (uint8 weights), or
            "U8S8 reduce_range" (int8 weights in 7 bits, -64..63: measured against
            the others by scripts/bench_int8_forms.py, chosen for no CPU).
        cpu: the CPU family it was chosen for, with the flag that decided it.
        reduce_range: ONNX Runtime's `reduce_range`.
        weights: "int8" or "uint8".
    """

    name: str
    cpu: str
    reduce_range: bool
    weights: str = "int8"

    def describe(self) -> str:
        return f"{self.name}, for {self.cpu}"


def quant_form(machine: str, flags: Collection[str]) -> QuantForm:
    """The quantisation form for a CPU of architecture `machine` (`platform.machine()`)
    with feature `flags` (/proc/cpuinfo's names, `cpu_flags`).

    ARM and x86 with VNNI: U8S8; any other CPU (x86 without VNNI, and architectures
    ONNX Runtime's guide does not name): U8U8, which no kernel saturates.
    """
    arch = machine.lower()
    if arch in ("arm64", "aarch64"):
        return QuantForm("U8S8", "arm64", reduce_range=False)
    x86 = arch in ("x86_64", "amd64", "x64", "i386", "i686")
    vnni = [flag for flag in VNNI_FLAGS if flag in flags]
    if x86 and vnni:
        return QuantForm("U8S8", f"x86 with VNNI ({vnni[0]})", reduce_range=False)
    widest = next((flag for flag in ("avx512f", "avx2") if flag in flags), None)
    if x86:
        cpu = f"x86 without VNNI ({widest or 'no AVX2'})"
    else:
        cpu = f"{arch or 'an unknown architecture'}, not named by ONNX Runtime's guide"
    return QuantForm("U8U8", cpu, reduce_range=False, weights="uint8")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """This CPU's feature flags under Linux's names: `cpuinfo`'s `flags` line (the
    kernel's own reading of CPUID, and the only source here that knows AVX-VNNI),
    else numpy's CPU dispatch table (`__cpu_features__`, on macOS and Windows, and on
    arm64 Linux, whose /proc/cpuinfo says `Features`: `quant_form` needs no flags
    there)."""
    try:
        with cpuinfo.open() as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    features = numpy_cpu_features()
    return frozenset(name for key, name in NUMPY_FLAGS.items() if features.get(key))


def numpy_cpu_features() -> Mapping[str, bool]:
    """numpy's table of this CPU's features (numpy 2: `numpy._core`, 1.x:
    `numpy.core`); empty where neither has it."""
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            features: Mapping[str, bool] = importlib.import_module(module).__cpu_features__
            return features
        except (ImportError, AttributeError):
            continue
    return {}


def this_cpu_form() -> QuantForm:
    """The quantisation form for the CPU this process runs on."""
    return quant_form(platform.machine(), cpu_flags())


def network_nodes(model: Any) -> list[str]:
    """The names of the nodes inside the networks' module scopes.

    The exporter names each node by the module path it was traced in; the networks
    are the modules named `network` (`centroid.network`, `instance_network`, ...),
    everything else is pre- or postprocessing.
    """
    return [
        node.name
        for node in model.graph.node
        if any(part.endswith("network") for part in node.name.split("/")[:-1])
    ]


def int8_key(onnx_bytes: bytes, frames: np.ndarray, form: QuantForm) -> CacheKey:
    """The cache key of the int8 graph made from `onnx_bytes` in `form`, calibrated on
    `frames`."""
    frames = np.ascontiguousarray(frames)
    parts = {
        "graph": hashlib.sha256(onnx_bytes).hexdigest(),
        "frames": hashlib.sha256(frames.tobytes()).hexdigest(),
        "frames_shape": list(frames.shape),
        "onnxruntime": importlib.import_module("onnxruntime").__version__,
        "settings": dict(SETTINGS),
        "form": attrs.asdict(form),
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    # The keyed digest's key: from the source graph's and the frames' own bytes
    # (the entry holds only their sha256s; see `export_cache`'s notes).
    secret = hashlib.sha256(
        b"sleap-live/int8-cache-graph-mac\0" + onnx_bytes + frames.tobytes() + text.encode()
    ).digest()
    return CacheKey(hashlib.sha256(text.encode()).hexdigest(), parts, secret)


def quantise_networks(onnx_bytes: bytes, frames: np.ndarray, form: QuantForm) -> bytes:
    """The int8 graph of a sleap-live float32 export (see the module docstring).

    ONNX Runtime's `quantize_static` steps, with one change: only the networks'
    tensors keep their calibrated ranges. Its calibrator measures every tensor of
    the op types asked for, the postprocessing's too, and a postprocessing tensor
    that is all NaN (the constants that mark missing points) has no range, which
    the quantiser cannot take.

    Args:
        onnx_bytes: the float32 export.
        frames: uint8 (N, H, W, C) calibration frames, with the graph's channel count.
        form: the quantisation form (`quant_form`), written in the graph's metadata.

    Raises:
        ValueError: the graph has no network scopes to quantise.
    """
    import onnx
    from onnxruntime.quantization import (  # type: ignore[import-untyped]
        CalibrationDataReader,
        CalibrationMethod,
        QuantType,
        TensorsData,
        create_calibrator,
    )
    from onnxruntime.quantization.qdq_quantizer import (  # type: ignore[import-untyped]
        QDQQuantizer,
    )

    model = onnx.load_from_string(onnx_bytes)
    nodes = set(network_nodes(model))
    if not nodes:
        raise ValueError("the graph has no network scopes to quantise (not a sleap-live export?)")
    # Constants (shapes, a Resize's scales) are the graph's, never activations.
    network = [node for node in model.graph.node if node.name in nodes]
    constants = {name for node in network if node.op_type == "Constant" for name in node.output}
    op_types = sorted({node.op_type for node in network} - {"Constant", *FLOAT_OPS})
    tensors = {name for node in network for name in (*node.input, *node.output) if name} - constants
    (graph_input,) = [i for i in model.graph.input if i.name not in _initialisers(model)]

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches: Iterator[np.ndarray] = iter(
                frames[i : i + CALIBRATION_BATCH] for i in range(0, len(frames), CALIBRATION_BATCH)
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self._batches, None)
            return None if batch is None else {graph_input.name: np.ascontiguousarray(batch)}

    with tempfile.TemporaryDirectory(prefix="sleap-live-int8-") as folder:
        source = Path(folder) / "fp32.onnx"
        source.write_bytes(onnx_bytes)
        calibrator = create_calibrator(
            source,
            op_types,
            augmented_model_path=str(Path(folder) / "augmented.onnx"),
            calibrate_method=CalibrationMethod.MinMax,
        )
        calibrator.collect_data(Frames())
        measured = calibrator.compute_data()
        del calibrator
    ranges = TensorsData(
        CalibrationMethod.MinMax,
        {name: value for name, value in measured.data.items() if name in tensors},
    )
    quantiser = QDQQuantizer(
        model,
        True,  # per channel
        form.reduce_range,
        QuantType.QUInt8 if form.weights == "uint8" else QuantType.QInt8,
        QuantType.QUInt8,  # activations
        ranges,
        sorted(nodes),
        [],  # nodes to exclude
        op_types,
        {},
    )
    quantiser.quantize_model()
    quantised = quantiser.model.model
    record = {"form": attrs.asdict(form), "settings": dict(SETTINGS)}
    quantised.metadata_props.add(key=INT8_METADATA_KEY, value=json.dumps(record, sort_keys=True))
    return bytes(quantised.SerializeToString())


def _initialisers(model: Any) -> set[str]:
    return {init.name for init in model.graph.initializer}
