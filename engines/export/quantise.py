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
- weights int8 per output channel, activations uint8 (ONNX Runtime's
  recommendation for x86 CPUs), ranges calibrated by MinMax on frames run through
  the whole graph: a top-down model's instance network is calibrated on the crops
  the graph itself cuts around the animals it finds.

The calibration frames are chosen by the caller (`sleap_live.engines.runners.int8`):
frames of the video about to be run or the model's training labels, those in
which the float32 graph finds animals.

The float32 graph's metadata is kept. Quantised graphs are cached under the
cache root's `int8/` folder (`ExportCache` entries, checked as exports are),
keyed by the float32 graph's bytes, the calibration frames' bytes, ONNX Runtime's
version and the settings below (`int8_key`).

Needs `onnx` and `onnxruntime` (its `quantization` package); torch is not imported.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

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
    "version": 1,
}


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


def int8_key(onnx_bytes: bytes, frames: np.ndarray) -> CacheKey:
    """The cache key of the int8 graph made from `onnx_bytes`, calibrated on `frames`."""
    frames = np.ascontiguousarray(frames)
    parts = {
        "graph": hashlib.sha256(onnx_bytes).hexdigest(),
        "frames": hashlib.sha256(frames.tobytes()).hexdigest(),
        "frames_shape": list(frames.shape),
        "onnxruntime": importlib.import_module("onnxruntime").__version__,
        "settings": dict(SETTINGS),
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return CacheKey(hashlib.sha256(text.encode()).hexdigest(), parts)


def quantise_networks(onnx_bytes: bytes, frames: np.ndarray) -> bytes:
    """The int8 graph of a sleap-live float32 export (see the module docstring).

    ONNX Runtime's `quantize_static` steps, with one change: only the networks'
    tensors keep their calibrated ranges. Its calibrator measures every tensor of
    the op types asked for, the postprocessing's too, and a postprocessing tensor
    that is all NaN (the constants that mark missing points) has no range, which
    the quantiser cannot take.

    Args:
        onnx_bytes: the float32 export.
        frames: uint8 (N, H, W, C) calibration frames, with the graph's channel count.

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
        False,  # reduce range
        QuantType.QInt8,  # weights
        QuantType.QUInt8,  # activations
        ranges,
        sorted(nodes),
        [],  # nodes to exclude
        op_types,
        {},
    )
    quantiser.quantize_model()
    return bytes(quantiser.model.model.SerializeToString())


def _initialisers(model: Any) -> set[str]:
    return {init.name for init in model.graph.initializer}
