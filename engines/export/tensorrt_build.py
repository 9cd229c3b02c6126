"""Building a TensorRT engine from a sleap-live ONNX export.

Precision lives in the ONNX graph: the network is strongly typed (TensorRT 10
needs the creation flag; TensorRT 11 types every network strongly and removed
`BuilderFlag.FP16`), so "fp32" builds an fp32 engine from an fp32 graph and
"fp16" needs a graph with its own float16 casts. TF32 is cleared for fp32
builds unless the export records that its resize is exact under TF32 (the
"tensorrt" profile's does); otherwise an exact-integer resize may run as a MatMul,
which TF32 would round. The choice and its reason are stored with the engine.

The builder is given the `tensorrt` module (`tensorrt.import_tensorrt`), so this
module imports on a host without it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export.tensorrt_engine import EngineFile, EngineKey
from sleap_live.engines.load.metadata import METADATA_KEY, ExportMetadata
from sleap_live.engines.notify import Notify, notice
from sleap_live.output_rule import staged_file

DEFAULT_WORKSPACE_BYTES = 4 << 30


@attrs.frozen
class OnnxModel:
    """A sleap-live ONNX export ready to build: its bytes, metadata and graph hash."""

    onnx_bytes: bytes
    metadata: ExportMetadata
    sha256: str
    origin: str


def read_onnx_model(source: bytes | str | Path) -> OnnxModel:
    """Reads a sleap-live ONNX export (a path or its bytes).

    Raises:
        ModelNotFoundError: no such file.
        ModelConfigError: not an ONNX model, or no sleap-live metadata.
    """
    import onnx

    if isinstance(source, bytes):
        onnx_bytes, origin = source, "ONNX model bytes"
    else:
        path = Path(source)
        if not path.is_file():
            raise ModelNotFoundError(f"{path}: no such ONNX file")
        onnx_bytes, origin = path.read_bytes(), str(path)
    try:
        model = onnx.load_from_string(onnx_bytes)
    except Exception as error:  # protobuf's DecodeError and friends
        raise ModelConfigError(f"{origin}: not a readable ONNX model ({error})") from error
    props = {prop.key: prop.value for prop in model.metadata_props}
    if METADATA_KEY not in props:
        raise ModelConfigError(
            f"{origin}: no '{METADATA_KEY}' metadata; not exported by sleap-live"
        )
    metadata = ExportMetadata.from_json(props[METADATA_KEY], origin)
    return OnnxModel(onnx_bytes, metadata, model_hash(model), origin)


def model_hash(model: Any) -> str:
    """sha256 of an ONNX model's graph and opsets, without its metadata.

    The metadata records when the export was made, so hashing the whole file would
    give every re-export of the same model a new hash and a needless rebuild.
    """
    digest = hashlib.sha256(model.graph.SerializeToString())
    for opset in model.opset_import:
        digest.update(opset.SerializeToString())
    return digest.hexdigest()


@attrs.frozen
class BuildSettings:
    """How engines are built; none of it changes what an engine computes."""

    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES


def build_engine(
    trt: ModuleType,
    model: OnnxModel,
    key: EngineKey,
    *,
    settings: BuildSettings = BuildSettings(),
    timing_cache: Path | None = None,
    notify: Notify = notice,
) -> EngineFile:
    """Builds the engine of `model` for `key` (on the GPU the key names).

    Args:
        trt: the `tensorrt` module (`import_tensorrt`).
        model: the ONNX export.
        key: what to build for; its model hash must be the model's.
        settings: workspace limit.
        timing_cache: file of the timing cache to load (if present) and save.
        notify: told when the timing cache cannot be read or written.

    Raises:
        ExportError: the graph is not TensorRT-ready, TensorRT's parser refuses
            it, fp16 was asked of an fp32 graph, or the build fails.
    """
    if key.model_sha256 != model.sha256:
        raise ValueError("the engine key was made for another model")
    _check_buildable(model, key)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if strongly_typed is not None:  # needed on TensorRT 10; ignored (always on) by 11
        flags |= 1 << int(strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.onnx_bytes):
        errors = [str(parser.get_error(index).desc()) for index in range(parser.num_errors)]
        first = errors[0] if errors else "no reason given"
        raise ExportError(
            f"{model.origin}: TensorRT {key.tensorrt_version}'s ONNX parser refuses the graph: "
            f"{first}" + (f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else "")
        )
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_bytes)
    tf32_kept, tf32_reason = _tf32_policy(model.metadata, key)
    tf32 = getattr(trt.BuilderFlag, "TF32", None)
    if not tf32_kept and tf32 is not None:
        config.clear_flag(tf32)
    input_name = model.metadata.input_name
    for minimum, optimum, maximum in key.profiles():
        profile = builder.create_optimization_profile()
        profile.set_shape(input_name, minimum, optimum, maximum)
        config.add_optimization_profile(profile)
    cache = _load_timing_cache(config, timing_cache, notify)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise ExportError(
            f"{model.origin}: TensorRT {key.tensorrt_version} could not build an engine "
            f"for {key.gpu.name} (its log above says why)"
        )
    if timing_cache is not None:
        save_or_notify(timing_cache, bytes(memoryview(cache.serialize())), notify, "timing cache")
    build = {
        "strongly_typed": True,
        "tf32": tf32_kept,
        "tf32_reason": tf32_reason,
        "workspace_bytes": settings.workspace_bytes,
    }
    return EngineFile(key, model.metadata, bytes(memoryview(plan)), build)


def _tf32_policy(metadata: ExportMetadata, key: EngineKey) -> tuple[bool, str]:
    """Whether TF32 may stay on in an fp32 build, and why.

    TF32 rounds MatMul and convolution inputs. A graph whose export records that its
    resize is exact under TF32 keeps it (the network's convolutions then round as
    TF32 does); any other graph may compute the resize as a MatMul of integers,
    which TF32 would change, so it is cleared.
    """
    if key.precision != "fp32":
        return True, "reduced precision: the graph's own casts decide"
    record = metadata.tensorrt or {}
    if record.get("tf32", {}).get("resize_exact"):
        return True, str(record["tf32"].get("reason", "the export says its resize is exact"))
    return False, "the export does not record a resize exact under TF32"


def _check_buildable(model: OnnxModel, key: EngineKey) -> None:
    """Refuses, in one line, what TensorRT would refuse or silently change."""
    import onnx

    from sleap_live.engines.export.check_tensorrt import check_tensorrt

    channels = key.frame[2]
    if channels not in model.metadata.input_channels:
        raise ExportError(
            f"{model.origin}: the graph takes {model.metadata.input_channels} channels, "
            f"not {channels}"
        )
    fixed = (model.metadata.tensorrt or {}).get("frame_shape")
    if fixed is not None and tuple(fixed) != key.frame:
        raise ExportError(
            f"{model.origin}: the graph is made for {'x'.join(map(str, fixed))} frames, not "
            f"{'x'.join(map(str, key.frame))}; export it for this size"
        )
    graph = onnx.load_from_string(model.onnx_bytes)
    if key.precision == "fp16" and not _has_float16(graph):
        raise ExportError(
            f"{model.origin}: fp16 engines are built from graphs with float16 casts in them "
            "(TensorRT's strongly typed networks take precision from the graph); "
            "this graph is float32: build an fp32 engine"
        )
    findings = check_tensorrt(graph)
    if findings:
        first = findings[0]
        raise ExportError(
            f"{model.origin}: the graph is not TensorRT-ready ({len(findings)} findings; first: "
            f"{first.node} {first.op}: {first.reason}); export it with --profile tensorrt"
        )


def _has_float16(graph: Any) -> bool:
    float16 = 10  # onnx.TensorProto.FLOAT16
    values = [*graph.graph.value_info, *graph.graph.output, *graph.graph.input]
    if any(value.type.tensor_type.elem_type == float16 for value in values):
        return True
    return any(
        attribute.name == "to" and attribute.i == float16
        for node in graph.graph.node
        if node.op_type == "Cast"
        for attribute in node.attribute
    )


def _load_timing_cache(config: Any, path: Path | None, notify: Notify) -> Any:
    data = b""
    if path is not None and path.is_file():
        data = path.read_bytes()
    try:
        cache = config.create_timing_cache(data)
    except Exception as error:  # TensorRT raises its own types on a damaged cache
        notify(f"timing cache {path} is unreadable ({error}); starting an empty one")
        cache = config.create_timing_cache(b"")
    config.set_timing_cache(cache, False)
    return cache


def save_or_notify(path: Path, data: bytes, notify: Notify, what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with staged_file(path, f"the {what}") as staged:
            staged.write_bytes(data)
    except OSError as error:
        notify(f"cannot write the {what} {path} ({error.strerror or error}); kept in memory only")
