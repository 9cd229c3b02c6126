"""The TensorRT engine file: its key, its header and its plan, read and written whole.

An engine is built for one GPU, one TensorRT version, one precision and one frame
size (height, width, channels), with two optimisation profiles: a latency profile
(batch 1) and a throughput profile (batches 2 to N, tuned for N) (`EngineKey`).
It is written as one self-contained file: a magic line, a JSON header (the cache
key, the export metadata with the skeleton and settings, the build settings, the
plan's sha256) and the serialised plan, so an engine file alone runs
(`read_engine_file`). Nothing here imports `tensorrt`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines import engine_table
from sleap_live.engines.errors import ModelConfigError, ModelNotFoundError
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.output_rule import staged_file

PRECISIONS = engine_table.engine("tensorrt").precisions
MAGIC = b"sleap-live tensorrt engine\n"
HEADER_SCHEMA = "sleap-live/tensorrt-engine"
HEADER_VERSION = 1
_LENGTH_BYTES = 8

FrameShape = tuple[int, int, int]


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
    """Writes `engine` atomically (a reader never sees half a file), by the output
    rule (`output_rule`).

    Raises:
        OutputError: the rule refuses `path` (another user's link).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_file(path, "the engine file") as staged:
        staged.write_bytes(engine.to_bytes())
    return path
