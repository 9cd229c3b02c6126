"""The metadata record embedded in every sleap-live export, and how to read it back.

An exported model carries one JSON document (ONNX `metadata_props["sleap_live"]`,
TorchScript extra file `sleap_live.json`, and a `<file>.json` sidecar beside
either) that says everything a runner needs to turn the graph's outputs into
poses: the `ModelInfo`, the input contract and the output names. Reading it needs
only `json` (and `onnx` for `.onnx` files), never torch, so a bare onnxruntime
deployment can interpret its outputs.

Schema (version 1)::

    {
      "schema": "sleap-live/export", "schema_version": 1,
      "format": "onnx" | "torchscript",
      "sleap_live_version": "0.1.0", "created": "2025-01-01T00:00:00+00:00",
      "model": {"model_type": ..., "skeleton": {"name": ..., "node_names": [...],
                "edges": [[0, 1], ...]}, "input_channels": 1 | 3,
                "max_instances": ... | null, "class_names": [...],
                "peak_threshold": ..., "postprocess": {...},
                "settings": {"peak_threshold": 0.2, ...} | absent,
                "box_categories": [...] | absent, "embedding_dim": D | absent},
      "input": {"name": "frames", "dtype": "uint8", "layout": "NHWC",
                "channels": [1, 3]},
      "outputs": ["instance_frame", "points", "point_scores", "instance_scores"],
      "sources": [{"path": ..., "training_config": "training_config.yaml",
                   "sha256": ...}],
      "exporter": {"torch": "2.13.0", "opset": 17},
      "verification": [{"frames": [2, 200, 248, 3], "instances": 4,
                        "max_abs_diff": {"points": 0.0, ...}}, ...] | null,
      "profile": "default" | "tensorrt",
      "tensorrt": null | {"frame_shape": [H, W, C], "resize": ..., "tf32": {...}}
    }

`model.settings` (`sleap_live.engines.settings.InferenceSettings`, absent in
older files) are the inference settings the graph was built with; `max_instances`
is null where the graph keeps every instance it finds. `model.box_categories`
(a box top-down model's only) names its detector's categories; its graph also
outputs the boxes that seeded the crops. `model.embedding_dim` (a top-down model
with an embedding model's only) is the length of the `embeddings` it outputs.

`profile` (absent in older files: "default") says how the graph was built. The
default graph takes any frame size and lists the instances it finds; the
"tensorrt" graph (`PROFILES`) is made for TensorRT's ONNX importer: uint8 only at
its input, float32 inside, one frame size, and fixed instance slots
(`OUTPUT_LAYOUTS`). Its `tensorrt` record tells an engine builder the frame shape
and whether TF32 may stay on (the resize's exactness does not depend on it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.errors import ModelConfigError, ModelNotFoundError
from sleap_live.engines.settings import InferenceSettings
from sleap_live.engines.types import MODEL_TYPES, ModelInfo, Skeleton

SCHEMA = "sleap-live/export"
SCHEMA_VERSION = 1
METADATA_KEY = "sleap_live"
TORCHSCRIPT_METADATA_FILE = "sleap_live.json"
INPUT_NAME = "frames"
# The ONNX opset exports use unless told otherwise.
DEFAULT_OPSET = 17

DEFAULT_PROFILE = "default"
TENSORRT_PROFILE = "tensorrt"
PROFILES = (DEFAULT_PROFILE, TENSORRT_PROFILE)
# The output layout (`sleap_live.engines.host.outputs.LAYOUTS`) of each profile's graphs.
OUTPUT_LAYOUTS = {DEFAULT_PROFILE: "instance_list", TENSORRT_PROFILE: "instance_slots"}

# Bounds on a metadata document, far above any real model's, so a crafted file is
# refused in one line instead of exhausting time, memory or the stack.
MAX_METADATA_BYTES = 16 * 1024 * 1024
MAX_METADATA_DEPTH = 32
MAX_NODES = 10_000
MAX_EDGES = 100_000
MAX_CLASSES = 10_000


@attrs.frozen
class ExportMetadata:
    """Everything recorded about one exported model.

    Attributes:
        info: the model's `ModelInfo`.
        format: "onnx" or "torchscript".
        input_name: name of the graph's single uint8 NHWC input.
        input_channels: channel counts the graph itself accepts; frames with
            another count are converted on the host before the call.
        output_names: the graph's outputs, in order.
        sleap_live_version: version of the package that wrote the export.
        created: ISO 8601 time of the export.
        sources: one record per model directory the export was built from
            (path, training config file name and its sha256).
        exporter: tool versions and settings (torch version, ONNX opset).
        verification: one record per checked frame batch (shape, instances found,
            largest absolute difference per output), or None if not verified.
        profile: the graph's profile, one of `PROFILES`.
        tensorrt: for the "tensorrt" profile, what an engine builder needs to know
            (frame shape, resize arithmetic, whether TF32 may stay on and why).
    """

    info: ModelInfo
    format: str
    input_name: str
    input_channels: tuple[int, ...]
    output_names: tuple[str, ...]
    sleap_live_version: str
    created: str
    sources: tuple[Mapping[str, Any], ...] = ()
    exporter: Mapping[str, Any] = attrs.field(factory=dict)
    verification: tuple[Mapping[str, Any], ...] | None = None
    profile: str = attrs.field(default=DEFAULT_PROFILE)
    tensorrt: Mapping[str, Any] | None = None

    @profile.validator
    def _check_profile(self, attribute: Any, value: str) -> None:
        if value not in PROFILES:
            raise ModelConfigError(f"unknown export profile {value!r} (expected one of {PROFILES})")

    @property
    def output_layout(self) -> str:
        """The layout of the graph's outputs: "instance_list" or "instance_slots"."""
        return OUTPUT_LAYOUTS[self.profile]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready document described in the module docstring."""
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "format": self.format,
            "sleap_live_version": self.sleap_live_version,
            "created": self.created,
            "model": info_to_dict(self.info),
            "input": {
                "name": self.input_name,
                "dtype": "uint8",
                "layout": "NHWC",
                "channels": list(self.input_channels),
            },
            "outputs": list(self.output_names),
            "sources": [dict(source) for source in self.sources],
            "exporter": dict(self.exporter),
            "verification": (
                None if self.verification is None else [dict(v) for v in self.verification]
            ),
            "profile": self.profile,
            "tensorrt": None if self.tensorrt is None else dict(self.tensorrt),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], origin: str = "metadata") -> ExportMetadata:
        """Parses a document written by `to_dict`.

        Args:
            document: the parsed JSON.
            origin: file the document came from, for error messages.

        Raises:
            ModelConfigError: the document is not sleap-live export metadata or is
                missing fields.
        """
        if document.get("schema") != SCHEMA:
            raise ModelConfigError(f"{origin}: not sleap-live export metadata (no '{SCHEMA}')")
        version = document.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ModelConfigError(
                f"{origin}: export metadata schema version {version} is not supported "
                f"(this sleap-live reads version {SCHEMA_VERSION}); re-export the model"
            )
        try:
            model_input = document["input"]
            verification = document.get("verification")
            channels = tuple(int(c) for c in model_input["channels"])
            if not channels or any(c not in (1, 3) for c in channels):
                raise ModelConfigError(
                    f"{origin}: input.channels is {list(channels)[:8]}; "
                    "the graph takes 1 or 3 channels"
                )
            return cls(
                info=info_from_dict(document["model"], origin),
                format=str(document["format"]),
                input_name=str(model_input["name"]),
                input_channels=channels,
                output_names=tuple(str(name) for name in document["outputs"]),
                sleap_live_version=str(document["sleap_live_version"]),
                created=str(document["created"]),
                sources=tuple(document.get("sources", ())),
                exporter=dict(document.get("exporter", {})),
                verification=None if verification is None else tuple(verification),
                profile=str(document.get("profile", DEFAULT_PROFILE)),
                tensorrt=document.get("tensorrt"),
            )
        except ModelConfigError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise ModelConfigError(f"{origin}: malformed export metadata ({error!r})") from error

    @classmethod
    def from_json(cls, text: str | bytes, origin: str = "metadata") -> ExportMetadata:
        """Parses the JSON text of `to_json`, within `MAX_METADATA_BYTES` and
        `MAX_METADATA_DEPTH`.

        Raises:
            ModelConfigError: one line naming `origin`: too large, too deep, not JSON,
                or not export metadata (see `from_dict`).
        """
        document = bounded_json_object(
            text,
            f"{origin}: export metadata",
            MAX_METADATA_BYTES,
            MAX_METADATA_DEPTH,
            ModelConfigError,
        )
        return cls.from_dict(document, origin)


def bounded_json_object(
    text: str | bytes, what: str, max_size: int, max_depth: int, error: type[Exception]
) -> dict[str, Any]:
    """The JSON object of `text`, its size and nesting depth bounded before it is parsed.

    Raises:
        error: one line starting with `what`: too large, too deep, not JSON, or not an
            object.
    """
    if len(text) > max_size:
        raise error(f"{what} is more than {max_size} bytes")
    depth = json_depth(text)
    if depth > max_depth:
        raise error(f"{what} nests {depth} levels deep, more than the {max_depth} allowed")
    try:
        document = json.loads(text)
    # ValueError (UnicodeDecodeError among them) beyond JSONDecodeError: an integer
    # of more digits than Python converts (4,300 by default, `sys.set_int_max_str_digits`).
    except ValueError as problem:
        raise error(f"{what} is not valid JSON ({problem})") from None
    if not isinstance(document, dict):
        raise error(f"{what} is not a JSON object")
    return document


def json_depth(text: str | bytes) -> int:
    """How deeply the arrays and objects of JSON `text` nest, in linear time and
    constant stack (brackets inside strings do not count)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def info_to_dict(info: ModelInfo) -> dict[str, Any]:
    """`ModelInfo` as plain JSON types."""
    return {
        "model_type": info.model_type,
        "skeleton": {
            "name": info.skeleton.name,
            "node_names": list(info.skeleton.node_names),
            "edges": [list(edge) for edge in info.skeleton.edges],
        },
        "input_channels": info.input_channels,
        "max_instances": info.max_instances,
        "class_names": list(info.class_names),
        "peak_threshold": info.peak_threshold,
        "postprocess": dict(info.postprocess),
        **({} if info.settings is None else {"settings": info.settings.to_dict()}),
        # Only where there are some: the other models' records stay as they were.
        **({"box_categories": list(info.box_categories)} if info.box_categories else {}),
        **({} if info.embedding_dim is None else {"embedding_dim": info.embedding_dim}),
    }


def info_from_dict(document: Mapping[str, Any], origin: str = "metadata") -> ModelInfo:
    """Inverse of `info_to_dict`.

    Raises:
        ModelConfigError: a field is missing or the model type is unknown.
    """
    try:
        skeleton = document["skeleton"]
        max_instances = document["max_instances"]
        settings = document.get("settings")
        for field, values, most in (
            ("skeleton.node_names", skeleton["node_names"], MAX_NODES),
            ("skeleton.edges", skeleton["edges"], MAX_EDGES),
            ("class_names", document.get("class_names", ()), MAX_CLASSES),
            ("box_categories", document.get("box_categories", ()), MAX_CLASSES),
        ):
            if len(values) > most:
                raise ModelConfigError(
                    f"{origin}: {field} has {len(values)} entries, more than {most}"
                )
        info = ModelInfo(
            model_type=str(document["model_type"]),
            skeleton=Skeleton(
                node_names=tuple(str(name) for name in skeleton["node_names"]),
                edges=tuple((int(a), int(b)) for a, b in skeleton["edges"]),
                name=str(skeleton.get("name", "skeleton")),
            ),
            input_channels=int(document["input_channels"]),
            max_instances=None if max_instances is None else int(max_instances),
            class_names=tuple(str(name) for name in document.get("class_names", ())),
            peak_threshold=float(document.get("peak_threshold", 0.2)),
            postprocess=dict(document.get("postprocess", {})),
            settings=None if settings is None else InferenceSettings.from_dict(settings, origin),
            box_categories=tuple(str(name) for name in document.get("box_categories", ())),
            embedding_dim=(
                None if document.get("embedding_dim") is None else int(document["embedding_dim"])
            ),
        )
    except ModelConfigError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise ModelConfigError(f"{origin}: malformed model info ({error!r})") from error
    if info.model_type not in MODEL_TYPES:
        raise ModelConfigError(
            f"{origin}: unknown model type {info.model_type!r} (expected one of {MODEL_TYPES})"
        )
    check_info(info, origin)
    return info


def check_info(info: ModelInfo, origin: str) -> None:
    """Raises `ModelConfigError`, naming `origin`, unless `info` holds together: a
    valid skeleton (`check_skeleton`), 1 or 3 input channels, room for at least
    one instance (or no limit), and a `peak_threshold` from 0 to 1 (a NaN there
    would run every frame, then fail the save of their poses)."""
    check_skeleton(info.skeleton, origin)
    if not 0 <= info.peak_threshold <= 1:
        raise ModelConfigError(
            f"{origin}: peak_threshold is {info.peak_threshold}; a number from 0 to 1"
        )
    if info.input_channels not in (1, 3):
        raise ModelConfigError(
            f"{origin}: input_channels is {info.input_channels}; models take 1 or 3 channels"
        )
    if info.max_instances is not None and info.max_instances < 1:
        raise ModelConfigError(f"{origin}: max_instances is {info.max_instances}; at least 1")


def check_skeleton(skeleton: Skeleton, origin: str) -> None:
    """Raises `ModelConfigError`, naming `origin`, unless `skeleton` has distinct nodes
    and every edge joins two of them."""
    nodes = skeleton.node_names
    if not nodes:
        raise ModelConfigError(f"{origin}: the skeleton has no nodes")
    repeated = sorted(name for name, times in Counter(nodes).items() if times > 1)
    if repeated:
        shown = ", ".join(repeated[:10]) + (
            f" and {len(repeated) - 10} more" if len(repeated) > 10 else ""
        )
        raise ModelConfigError(f"{origin}: skeleton node names repeat: {shown}")
    for edge in skeleton.edges:
        if not all(0 <= node < len(nodes) for node in edge):
            raise ModelConfigError(
                f"{origin}: skeleton edge {list(edge)} names a node that does not exist "
                f"(the skeleton has {len(nodes)} nodes, indices 0 to {len(nodes) - 1})"
            )


def check_graph_sizes(
    info: ModelInfo,
    outputs: Iterable[tuple[str, Sequence[Any]]],
    output_axes: Mapping[str, Sequence[str]],
    origin: str,
) -> None:
    """Raises `ModelConfigError`, naming `origin`, where a graph output's fixed size
    along its nodes, edges or classes axis disagrees with the metadata.

    Args:
        info: the metadata's model record.
        outputs: `(name, dims)` of each graph output (ints, or names/None where
            the graph leaves a dim open), as ONNX Runtime lists them.
        output_axes: axis names of each output (`sleap_live.engines.host.outputs`).
        origin: the model, for the message.
    """
    expected = {
        "nodes": info.skeleton.n_nodes,
        "edges": len(info.skeleton.edges),
        "classes": len(info.class_names),
    }
    for name, dims in outputs:
        axes = output_axes.get(name)
        if axes is None or len(axes) != len(dims):
            continue
        for axis, size in zip(axes, dims, strict=True):
            if axis in expected and isinstance(size, int) and size != expected[axis]:
                raise ModelConfigError(
                    f"{origin}: the metadata gives {expected[axis]} {axis} but the graph's "
                    f"output {name!r} has {size}; the metadata does not belong to this graph"
                )


def sidecar_path(model_path: str | Path) -> Path:
    """Where the JSON copy of an export's metadata lives: `<file>.json`."""
    model_path = Path(model_path)
    return model_path.with_name(model_path.name + ".json")


def read_onnx_metadata(path: str | Path) -> ExportMetadata:
    """The metadata embedded in a sleap-live `.onnx` export.

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not an ONNX model or carries no sleap-live
            metadata.
    """
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # onnx raises DecodeError, ValueError, ... on junk
        raise ModelConfigError(f"{path}: not a readable ONNX model ({error})") from error
    props = {prop.key: prop.value for prop in model.metadata_props}
    if METADATA_KEY not in props:
        raise ModelConfigError(
            f"{path}: no '{METADATA_KEY}' metadata; not exported by sleap-live "
            "(for a `sleap-nn export` output, pass its directory instead)"
        )
    return ExportMetadata.from_json(props[METADATA_KEY], str(path))


def read_onnx_info(path: str | Path) -> ModelInfo:
    """The `ModelInfo` of a sleap-live `.onnx` export (see `read_onnx_metadata`)."""
    return read_onnx_metadata(path).info
