"""TensorRT engines built from sleap-live ONNX exports, and the engine cache.

An engine is built for one GPU, one TensorRT version, one precision and one frame
size (height, width, channels), with two optimisation profiles: a latency profile
(batch 1) and a throughput profile (batches 2 to N, tuned for N). It is written as
one self-contained file: a magic line, a JSON header (the cache key, the export
metadata with the skeleton and settings, the build settings, the plan's sha256)
and the serialised plan, so an engine file alone runs (`read_engine_file`).

Engines of several GPUs sit side by side in one directory: the file name carries
the key's fields (`EngineKey.file_name`), and the header carries the whole key,
compared in full before a cached engine is used. A cached engine whose key
differs is rebuilt, never trusted; an unreadable one is rebuilt with a one-line
notice. A timing cache per GPU and TensorRT version (`timing_cache_name`) sits
beside the engines and makes rebuilds fast.

Precision lives in the ONNX graph: the network is strongly typed (TensorRT 10
needs the creation flag; TensorRT 11 types every network strongly and removed
`BuilderFlag.FP16`), so "fp32" builds an fp32 engine from an fp32 graph and
"fp16" needs a graph with its own float16 casts. TF32 is cleared for fp32
builds unless the export records that its resize is exact under TF32 (the
"tensorrt" profile's does); otherwise an exact-integer resize may run as a MatMul,
which TF32 would round. The choice and its reason are stored with the engine.

`tensorrt` is imported lazily (`import_tensorrt`), so this module imports on a
host without it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from sleap_live.engines.errors import (
    ExportError,
    ModelConfigError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from sleap_live.engines.load.metadata import METADATA_KEY, ExportMetadata

PRECISIONS = ("fp32", "fp16")
ENGINE_SUFFIXES = (".engine", ".plan")
GPU_INSTALL_HINT = 'pip install "sleap-live[gpu]"'
MAGIC = b"sleap-live tensorrt engine\n"
HEADER_SCHEMA = "sleap-live/tensorrt-engine"
HEADER_VERSION = 1
DEFAULT_BATCH_SIZE = 8
DEFAULT_WORKSPACE_BYTES = 4 << 30
_LENGTH_BYTES = 8

Notify = Callable[[str], None]
FrameShape = tuple[int, int, int]


def notice(message: str) -> None:
    """The default notifier: one line on stderr."""
    print(f"sleap-live: {message}", file=sys.stderr)


def import_tensorrt() -> ModuleType:
    """The `tensorrt` module.

    Raises:
        RuntimeUnavailableError: TensorRT is not installed.
    """
    try:
        return importlib.import_module("tensorrt")
    except ImportError as error:
        raise RuntimeUnavailableError(f"TensorRT is not installed ({GPU_INSTALL_HINT})") from error


@attrs.frozen
class GpuInfo:
    """The GPU an engine is built for: TensorRT plans are specific to both fields."""

    name: str
    compute_capability: tuple[int, int]

    @property
    def slug(self) -> str:
        """Name and compute capability for file names, e.g. "nvidia-h200-sm90"."""
        name = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        major, minor = self.compute_capability
        return f"{name}-sm{major}{minor}"


def current_gpu(device: str = "cuda:0") -> GpuInfo:
    """The name and compute capability of a CUDA device, asked of torch.

    Raises:
        RuntimeUnavailableError: torch has no CUDA, or no such device.
    """
    import torch

    index = int(device.partition(":")[2] or 0)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise RuntimeUnavailableError(f"no CUDA GPU {device!r}: TensorRT engines need one")
    properties = torch.cuda.get_device_properties(index)
    return GpuInfo(properties.name, (int(properties.major), int(properties.minor)))


@attrs.frozen
class EngineKey:
    """Everything an engine depends on; an engine serves only its own key.

    Attributes:
        model_sha256: `model_hash` of the ONNX graph it was built from.
        gpu: the GPU it was built on.
        tensorrt_version: `tensorrt.__version__` of the builder.
        precision: one of `PRECISIONS`.
        frame: (height, width, channels) of the frames it takes.
        batch_size: the largest batch (the throughput profile's).
    """

    model_sha256: str
    gpu: GpuInfo
    tensorrt_version: str
    precision: str
    frame: FrameShape
    batch_size: int

    def __attrs_post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r} (expected one of {PRECISIONS})")
        if self.batch_size < 1 or len(self.frame) != 3 or min(self.frame) < 1:
            raise ValueError(f"bad engine shape: frames {self.frame}, batch {self.batch_size}")

    def file_name(self, stem: str) -> str:
        """`<stem>.<gpu>.trt<version>.<precision>.<H>x<W>x<C>-b<N>.engine`."""
        height, width, channels = self.frame
        return (
            f"{stem}.{self.gpu.slug}.trt{self.tensorrt_version}.{self.precision}."
            f"{height}x{width}x{channels}-b{self.batch_size}.engine"
        )

    def profiles(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """(min, opt, max) input shapes of each optimisation profile, latency first."""
        one = (1, *self.frame)
        latency = (one, one, one)
        if self.batch_size == 1:
            return (latency,)
        full = (self.batch_size, *self.frame)
        return latency, (one, full, full)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_sha256": self.model_sha256,
            "gpu": {"name": self.gpu.name, "compute_capability": list(self.gpu.compute_capability)},
            "tensorrt_version": self.tensorrt_version,
            "precision": self.precision,
            "frame": list(self.frame),
            "batch_size": self.batch_size,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> EngineKey:
        major, minor = document["gpu"]["compute_capability"]
        height, width, channels = document["frame"]
        return cls(
            model_sha256=str(document["model_sha256"]),
            gpu=GpuInfo(str(document["gpu"]["name"]), (int(major), int(minor))),
            tensorrt_version=str(document["tensorrt_version"]),
            precision=str(document["precision"]),
            frame=(int(height), int(width), int(channels)),
            batch_size=int(document["batch_size"]),
        )


def timing_cache_name(gpu: GpuInfo, tensorrt_version: str) -> str:
    """The timing cache file of one GPU and TensorRT version (shared by every model)."""
    return f"timing.{gpu.slug}.trt{tensorrt_version}.cache"


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
class EngineFile:
    """A serialised engine and everything needed to run it without other files.

    Attributes:
        key: what it was built for.
        metadata: the export metadata of the ONNX graph it was built from.
        plan: TensorRT's serialised engine.
        build: how it was built (strongly typed, TF32, workspace).
    """

    key: EngineKey
    metadata: ExportMetadata
    plan: bytes
    build: Mapping[str, Any] = attrs.field(factory=dict)

    def to_bytes(self) -> bytes:
        header = json.dumps(
            {
                "schema": HEADER_SCHEMA,
                "schema_version": HEADER_VERSION,
                "key": self.key.to_dict(),
                "metadata": self.metadata.to_dict(),
                "build": dict(self.build),
                "plan_sha256": hashlib.sha256(self.plan).hexdigest(),
                "plan_bytes": len(self.plan),
            }
        ).encode()
        return MAGIC + len(header).to_bytes(_LENGTH_BYTES, "little") + header + self.plan


class CorruptEngineError(ModelConfigError):
    """An engine file that is not a whole sleap-live engine (truncated, overwritten, foreign)."""


def parse_engine_file(data: bytes, origin: str) -> EngineFile:
    """Inverse of `EngineFile.to_bytes`.

    Raises:
        CorruptEngineError: wrong magic, unreadable header, or a plan that is not
            the one the header describes.
    """
    if not data.startswith(MAGIC):
        raise CorruptEngineError(f"{origin}: not a sleap-live TensorRT engine file")
    start = len(MAGIC) + _LENGTH_BYTES
    length = int.from_bytes(data[len(MAGIC) : start], "little")
    try:
        header = json.loads(data[start : start + length])
        if header["schema"] != HEADER_SCHEMA or header["schema_version"] != HEADER_VERSION:
            raise CorruptEngineError(f"{origin}: unsupported engine header {header['schema']!r}")
        key = EngineKey.from_dict(header["key"])
        metadata = ExportMetadata.from_dict(header["metadata"], origin)
        plan = data[start + length :]
        expected = (int(header["plan_bytes"]), str(header["plan_sha256"]))
    except CorruptEngineError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptEngineError(f"{origin}: unreadable engine header ({error!r})") from error
    if (len(plan), hashlib.sha256(plan).hexdigest()) != expected:
        raise CorruptEngineError(
            f"{origin}: engine plan is damaged ({len(plan)} of {expected[0]} bytes, or changed)"
        )
    return EngineFile(key, metadata, plan, header.get("build", {}))


def read_engine_file(path: str | Path) -> EngineFile:
    """Reads an engine file written by `write_engine_file`.

    Raises:
        ModelNotFoundError: no such file.
        CorruptEngineError: see `parse_engine_file`.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such TensorRT engine file")
    return parse_engine_file(path.read_bytes(), str(path))


def write_engine_file(path: str | Path, engine: EngineFile) -> Path:
    """Writes `engine` atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(engine.to_bytes())
    os.replace(partial, path)
    return path


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
        _save(timing_cache, bytes(memoryview(cache.serialize())), notify, "timing cache")
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


def _save(path: Path, data: bytes, notify: Notify, what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError as error:
        notify(f"cannot write the {what} {path} ({error.strerror}); kept in memory only")


@attrs.define
class EngineCache:
    """Engines of one ONNX model in a directory, built when missing or stale.

    Args:
        directory: where engines and timing caches live (created when needed).
        model: the ONNX export engines are built from.
        stem: file name stem of its engines ("model" beside `model.onnx`).
        trt: the `tensorrt` module.
        gpu: the GPU engines are built for.
        precision: one of `PRECISIONS`.
        settings: build settings.
        notify: told about rebuilds and unwritable files, one line each.
    """

    directory: Path
    model: OnnxModel
    stem: str
    trt: ModuleType
    gpu: GpuInfo
    precision: str = "fp32"
    settings: BuildSettings = BuildSettings()
    notify: Notify = notice

    def key(self, frame: FrameShape, batch_size: int) -> EngineKey:
        return EngineKey(
            model_sha256=self.model.sha256,
            gpu=self.gpu,
            tensorrt_version=str(self.trt.__version__),
            precision=self.precision,
            frame=frame,
            batch_size=batch_size,
        )

    def path(self, key: EngineKey) -> Path:
        return self.directory / key.file_name(self.stem)

    def engine(self, frame: FrameShape, batch_size: int) -> EngineFile:
        """The engine for `frame`-sized batches of up to `batch_size`: cached or built."""
        key = self.key(frame, batch_size)
        path = self.path(key)
        if path.is_file():
            try:
                cached = read_engine_file(path)
            except CorruptEngineError as error:
                self.notify(f"{error}; rebuilding it")
            else:
                if cached.key == key:
                    return cached
                self.notify(f"{path} was built for {_difference(cached.key, key)}; rebuilding it")
        built = build_engine(
            self.trt,
            self.model,
            key,
            settings=self.settings,
            timing_cache=self.directory / timing_cache_name(self.gpu, key.tensorrt_version),
            notify=self.notify,
        )
        _save(path, built.to_bytes(), self.notify, "TensorRT engine")
        return built


def _difference(cached: EngineKey, wanted: EngineKey) -> str:
    """What differs between two keys, in words: "another model (sha256 ab12… not cd34…)"."""
    old, new = cached.to_dict(), wanted.to_dict()
    fields = [name for name in new if old[name] != new[name]]
    if fields == ["model_sha256"]:
        return f"another model (sha256 {old['model_sha256'][:12]}, not {new['model_sha256'][:12]})"
    return "other " + ", ".join(f"{name} ({old[name]}, not {new[name]})" for name in fields)


def default_cache_dir() -> Path:
    """Where engines of model directories go: `$XDG_CACHE_HOME/sleap-live/tensorrt`."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sleap-live" / "tensorrt"


def export_tensorrt(
    paths: list[str | Path],
    output: str | Path,
    *,
    frame: tuple[int, ...],
    batch_size: int = DEFAULT_BATCH_SIZE,
    precision: str = "fp32",
    device: str = "cuda:0",
    notify: Notify = notice,
    **export_options: Any,
) -> Path:
    """Exports model directories to `output/model.onnx` and builds its engine beside it.

    Another GPU's engine for the same export can be added to the same directory by
    running the export there again; engines that are already current are kept.

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the export directory.
        frame: (height, width) or (height, width, channels) of the stream's
            frames; without channels, the model's own.
        batch_size: the throughput profile's batch size.
        precision: one of `PRECISIONS`.
        device: the CUDA device to build on.
        notify: told about rebuilds, one line each.
        **export_options: for `export_model` (`opset`, `verify`, `verify_frames`,
            `progress`); the export is always of the "tensorrt" profile, at `frame`'s
            size.

    Returns:
        The engine file's path.

    Raises:
        RuntimeUnavailableError: TensorRT or a CUDA GPU is missing.
        ExportError: the ONNX export or the build failed.
    """
    from sleap_live.engines.export.exporter import export_model

    trt = import_tensorrt()
    gpu = current_gpu(device)
    height, width, *channels = (int(n) for n in frame)
    onnx_path = export_model(
        paths,
        Path(output) / "model.onnx",
        format="onnx",
        profile="tensorrt",
        frame_size=(height, width),
        **export_options,
    )
    model = read_onnx_model(onnx_path)
    shape = (height, width, channels[0] if channels else model.metadata.input_channels[0])
    cache = EngineCache(onnx_path.parent, model, "model", trt, gpu, precision, notify=notify)
    cache.engine(shape, batch_size)
    return cache.path(cache.key(shape, batch_size))
