"""Runs a directory written by `sleap-nn export` (`export_metadata.json` + `model.onnx`).

Poses are those of `sleap-nn predict --runtime onnx` on the same directory
(sleap-nn 0.3.5, `Predictor.from_export_dir` and its `Exported*Layer` adapters,
with predict's defaults). The graph is used as sleap-nn wrote it: uint8 NCHW
`(batch, C, H, W)` named "image", which it normalises, resizes by `input_scale`
and decodes itself. Around it, as sleap-nn does:

- frames go in as they are: no size matching, no resize, no refinement;
- single_instance: one instance per frame, NaN where a node's peak is under the
  threshold, scored by the sum of its node values;
- centroid: one instance per valid slot, on the one-node "centroid" skeleton
  (a model of a larger skeleton), scored by the centroid value;
- topdown: one instance per valid slot with any node found, scored by the sum of
  its node values (sleap-nn's exported path sets no centroid score);
- multi_class_topdown_combined: the frame's valid instances get classes by
  Hungarian matching on the softmax of their class logits; instances come out
  in class order, those left without a class are dropped, scores as top-down;
- bottomup: PAF grouping of the graph's candidates with predict's defaults
  (`min_line_scores` 0.25, `min_instance_peaks` 0, no instance cap), peaks
  divided by `input_scale`;
- multi_class_bottomup: class-map grouping, one instance per class that got a
  peak, scored by the sum of its node values. Its graph already divides peaks by
  `input_scale` and sleap-nn's adapter divides them again; that is reproduced,
  so these poses stay sleap-nn's (it only matters for `input_scale` != 1).

Two steps go beyond sleap-nn, for frames its exported path cannot run:

- frames whose channel count differs from the graph's are converted as
  sleap-nn's `ensure_rgb` / `ensure_grayscale` do;
- frames are zero-padded bottom/right to a multiple of the backbone's
  `max_stride` (from the training config the export copied), as sleap-nn's
  checkpoint predict pads them; the graphs cannot run other sizes. Padding moves
  no coordinates, and frames that are already multiples get sleap-nn's exact
  poses. A graph of fixed size takes frames up to that size, padded to it.

A caveat of sleap-nn's tracer-based export: sizes computed with Python numbers
(`int(H * input_scale)` resizes, the top-down crop grid's `crop / width`) are
frozen to the size the graph was traced at (`--input-height/--input-width`), so
such graphs are only right for frames that, padded, have that size. sleap-nn's
own predict gives the same poses on other sizes.

The graph's outputs are rewritten into the outputs of sleap-live's own model of
that type and decoded by `sleap_live.engines.host.postprocess.decode`.
Centered-instance exports take crops, not frames, and are refused, as are
embedding and box models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.errors import (
    InputMismatchError,
    ModelConfigError,
    RuntimeUnavailableError,
    UnsupportedModelError,
)
from sleap_live.engines.host.frames import as_numpy, convert_channels
from sleap_live.engines.host.grouping import ClassMapGrouper, PafGrouper, linear_sum_assignment
from sleap_live.engines.host.outputs import GraphOutputs
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.dirs import EXPORT_METADATA, TRAINING_CONFIG, read_export_metadata
from sleap_live.engines.load.metadata import (
    ExportMetadata,
    check_graph_sizes,
    check_info,
    check_skeleton,
)
from sleap_live.engines.load.model_kind import UNRUN_EXPORT_TYPES
from sleap_live.engines.load.spec import ModelSpec
from sleap_live.engines.load.training_config import parse_training_config, read_yaml
from sleap_live.engines.runners.base import begin_run
from sleap_live.engines.runners.onnx import (
    BATCH_AXIS,
    CPU,
    BoundIO,
    Provider,
    create_session,
    device_of,
)
from sleap_live.engines.types import CENTROID_SKELETON, FramePoses, ModelInfo, Skeleton

MODEL_FILE = "model.onnx"
# sleap-nn model type -> sleap-live model type.
SLEAP_NN_MODEL_TYPES = {
    "single_instance": "single_instance",
    "centroid": "centroid",
    "topdown": "topdown",
    "multi_class_topdown_combined": "multi_class_topdown",
    "bottomup": "bottomup",
    "multi_class_bottomup": "multi_class_bottomup",
}
# The training config of the model that sees whole frames, by sleap-nn model type.
FRAME_MODEL_CONFIG = {
    "topdown": "training_config_centroid.yaml",
    "multi_class_topdown_combined": "training_config_centroid.yaml",
}
# sleap-nn's defaults for PAF grouping at predict time.
MIN_LINE_SCORES = 0.25
MIN_INSTANCE_PEAKS = 0

# The outputs of sleap-nn's export wrappers, with their axes, by sleap-nn model
# type. "slots" are the `max_instances` centroid slots, "pairs" the K x K
# candidate connections of an edge; every axis but the batch is fixed in size.
_INSTANCE_SLOTS = {
    "centroids": (BATCH_AXIS, "slots", "xy"),
    "centroid_vals": (BATCH_AXIS, "slots"),
    "instance_valid": (BATCH_AXIS, "slots"),
}
_TOPDOWN = {
    **_INSTANCE_SLOTS,
    "peaks": (BATCH_AXIS, "slots", "nodes", "xy"),
    "peak_vals": (BATCH_AXIS, "slots", "nodes"),
}
_PEAK_SLOTS = {
    "peaks": (BATCH_AXIS, "nodes", "peak_slots", "xy"),
    "peak_vals": (BATCH_AXIS, "nodes", "peak_slots"),
    "peak_mask": (BATCH_AXIS, "nodes", "peak_slots"),
}
OUTPUT_AXES: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "single_instance": {"peaks": (BATCH_AXIS, "nodes", "xy"), "peak_vals": (BATCH_AXIS, "nodes")},
    "centroid": _INSTANCE_SLOTS,
    "topdown": _TOPDOWN,
    "multi_class_topdown_combined": {**_TOPDOWN, "class_logits": (BATCH_AXIS, "slots", "classes")},
    "bottomup": {
        **_PEAK_SLOTS,
        "line_scores": (BATCH_AXIS, "edges", "pairs"),
        "candidate_mask": (BATCH_AXIS, "edges", "pairs"),
    },
    "multi_class_bottomup": {
        **_PEAK_SLOTS,
        "class_probs": (BATCH_AXIS, "nodes", "peak_slots", "classes"),
    },
}


@attrs.frozen
class _Layout:
    """How one export's outputs become poses."""

    sleap_nn_type: str
    info: ModelInfo
    input_scale: float


class SleapNNExportRunner:
    """Runs a `sleap-nn export` directory's `model.onnx` (see the module docstring).

    Args:
        export_dir: the directory `sleap-nn export` wrote.
        providers: ONNX Runtime execution providers (see
            `sleap_live.engines.runners.onnx.providers_for`).
        intra_op_threads: threads per operator; None keeps ONNX Runtime's default.

    Attributes:
        info: the model's `ModelInfo`, from `export_metadata.json` and the copied
            training config.
        device: "cpu" or "cuda:N".

    Raises:
        ModelNotFoundError: the directory, its metadata or `model.onnx` is missing.
        ModelConfigError: the metadata or training config is unusable, or the
            model type cannot run on whole frames.
        RuntimeUnavailableError: see `create_session`.
    """

    def __init__(
        self,
        export_dir: str | Path,
        providers: Sequence[Provider] = (CPU,),
        *,
        intra_op_threads: int | None = None,
    ) -> None:
        export_dir = Path(export_dir)
        metadata = read_export_metadata(export_dir)
        model_path = export_dir / MODEL_FILE
        if not model_path.is_file():
            raise RuntimeUnavailableError(
                f"{export_dir}: no {MODEL_FILE}; sleap-live runs the ONNX graph of a sleap-nn "
                "export (re-export with `sleap-nn export --format onnx`)"
            )
        spec = _frame_model_spec(export_dir, metadata["model_type"])
        self._layout = _layout(metadata, spec, export_dir)
        self.info: ModelInfo = self._layout.info
        self.metadata: ExportMetadata | None = None  # not a sleap-live export
        self._stride = spec.max_stride

        session = create_session(model_path, providers, intra_op_threads=intra_op_threads)
        (graph_input,) = session.get_inputs()
        _, channels, height, width = graph_input.shape
        self._input_name = graph_input.name
        self._channels = int(channels) if isinstance(channels, int) else self.info.input_channels
        self._fixed_size = (
            (height, width) if isinstance(height, int) and isinstance(width, int) else None
        )
        self._output_names = [output.name for output in session.get_outputs()]
        output_axes = self._axes = OUTPUT_AXES[self._layout.sleap_nn_type]
        missing = [name for name in output_axes if name not in self._output_names]
        if missing:
            raise ModelConfigError(
                f"{model_path}: a {metadata['model_type']} export should output {missing}; "
                f"it outputs {self._output_names}"
            )
        self._origin = str(export_dir / EXPORT_METADATA)
        graph_outputs = [(output.name, output.shape) for output in session.get_outputs()]
        check_graph_sizes(self.info, graph_outputs, output_axes, self._origin)
        self.device = device_of(providers)
        self._io = BoundIO.for_device(session, self.device, output_axes)
        self._session: Any = session

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) numpy array or torch tensor.

        `stream` is not used: ONNX Runtime runs on its own stream and returns host
        outputs, so the run is complete when it returns.

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3), or larger
                than a fixed-size graph.
            EngineError: the runner is closed.
        """
        del stream
        frames, batch_size = begin_run(self, self._session, frames, (self._channels,))
        image = self.prepare(as_numpy(frames))
        if self._io is not None:
            outputs = self._io.run(image)
        else:
            values = self._session.run(None, {self._input_name: image})
            outputs = dict(zip(self._output_names, values, strict=True))
        # Axes the graph leaves open (a bottom-up graph's nodes) are checked on the data.
        check_graph_sizes(
            self.info,
            [(name, outputs[name].shape) for name in self._axes],
            self._axes,
            self._origin,
        )
        return _POSES[self._layout.sleap_nn_type](self._layout, outputs, batch_size)

    def prepare(self, frames: np.ndarray) -> np.ndarray:
        """uint8 (B, H, W, C) frames as the graph's uint8 (B, C, H, W) input.

        Converts them to the graph's channel count and pads them bottom/right to a
        multiple of the backbone's stride, or to the graph's fixed size (see the
        module docstring).

        Raises:
            InputMismatchError: frames are larger than a fixed-size graph.
        """
        frames = convert_channels(frames, self._channels)
        height, width = frames.shape[1:3]
        if self._fixed_size is None:
            target_height = -(-height // self._stride) * self._stride
            target_width = -(-width // self._stride) * self._stride
        else:
            target_height, target_width = self._fixed_size
            if height > target_height or width > target_width:
                raise InputMismatchError(
                    f"frames of {height}x{width} do not fit this sleap-nn export's fixed "
                    f"{target_height}x{target_width} input; re-export it with --input-height "
                    "and --input-width of at least the frame size"
                )
        image = frames.transpose(0, 3, 1, 2)
        if (target_height, target_width) != (height, width):
            padding = ((0, 0), (0, 0), (0, target_height - height), (0, target_width - width))
            image = np.pad(image, padding)
        return np.ascontiguousarray(image)

    def close(self) -> None:
        """Releases the session; idempotent."""
        self._io = None
        self._session = None


def _frame_model_spec(export_dir: Path, sleap_nn_type: str) -> ModelSpec:
    if sleap_nn_type in UNRUN_EXPORT_TYPES:
        raise UnsupportedModelError(
            f"{export_dir}: {UNRUN_EXPORT_TYPES[sleap_nn_type]} (a sleap-nn export); "
            "sleap-live does not run it"
        )
    if sleap_nn_type not in SLEAP_NN_MODEL_TYPES:
        raise ModelConfigError(
            f"{export_dir}: sleap-nn export of type {sleap_nn_type!r} cannot run on whole frames "
            f"(supported: {', '.join(SLEAP_NN_MODEL_TYPES)}; "
            "export a centered-instance model together with its centroid model)"
        )
    path = export_dir / FRAME_MODEL_CONFIG.get(sleap_nn_type, TRAINING_CONFIG)
    if not path.is_file():
        raise ModelConfigError(
            f"{path}: not found; sleap-live needs the training config sleap-nn export copies "
            "beside the graph (for the backbone stride)"
        )
    return parse_training_config(read_yaml(path), export_dir)


def _layout(metadata: Mapping[str, Any], spec: ModelSpec, export_dir: Path) -> _Layout:
    origin = export_dir / EXPORT_METADATA
    sleap_nn_type = metadata["model_type"]
    try:
        node_names = tuple(str(name) for name in metadata["node_names"])
        edges = tuple((int(a), int(b)) for a, b in metadata.get("edge_inds") or ())
        input_channels = int(metadata["input_channels"])
        input_scale = float(metadata.get("input_scale", 1.0))
        # sleap-nn falls back to 0.2 when the metadata has no threshold.
        threshold = float(metadata.get("peak_threshold") or 0.2)
        class_names = tuple(str(name) for name in metadata.get("class_names") or ())
        max_instances = metadata.get("max_instances")
        max_peaks = metadata.get("max_peaks_per_node")
    except (KeyError, TypeError, ValueError) as error:
        raise ModelConfigError(f"{origin}: malformed ({error!r})") from error
    if not edges and spec.skeleton.node_names == node_names:
        # Single-instance and top-down exports record no edges; the training config has them.
        edges = spec.skeleton.edges
    skeleton = Skeleton(node_names, edges, name=spec.skeleton.name)
    # Checked before the centroid's stand-in skeleton replaces it, and before grouping
    # settings index nodes by its edges.
    check_skeleton(skeleton, str(origin))
    if sleap_nn_type == "centroid" and len(node_names) > 1:
        skeleton = CENTROID_SKELETON

    postprocess: dict[str, Any] = {}
    if sleap_nn_type == "single_instance":
        max_instances = 1
    elif sleap_nn_type == "bottomup":
        if max_peaks is None:
            raise ModelConfigError(f"{origin}: no max_peaks_per_node for a bottomup export")
        postprocess = PafGrouper(
            n_nodes=len(node_names),
            edges=edges,
            min_line_scores=MIN_LINE_SCORES,
            min_instance_peaks=MIN_INSTANCE_PEAKS,
        ).postprocess_settings()
        # No cap, as in sleap-nn: there cannot be more instances than peaks.
        max_instances = len(node_names) * int(max_peaks)
    elif sleap_nn_type in ("multi_class_bottomup", "multi_class_topdown_combined"):
        if not class_names:
            raise ModelConfigError(f"{origin}: no class_names for a {sleap_nn_type} export")
        if sleap_nn_type == "multi_class_bottomup":
            postprocess = ClassMapGrouper(
                n_nodes=len(node_names), n_classes=len(class_names)
            ).postprocess_settings()
        max_instances = len(class_names)
    if max_instances is None:
        raise ModelConfigError(f"{origin}: no max_instances for a {sleap_nn_type} export")
    info = ModelInfo(
        model_type=SLEAP_NN_MODEL_TYPES[sleap_nn_type],
        skeleton=skeleton,
        input_channels=input_channels,
        max_instances=int(max_instances),
        class_names=class_names,
        peak_threshold=threshold,
        postprocess=postprocess,
    )
    check_info(info, str(origin))
    return _Layout(sleap_nn_type, info, input_scale)


def _point_scores(points: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Node values as float32, NaN wherever the point is missing."""
    return np.where(np.isnan(points[..., 0]), np.float32(np.nan), values).astype(np.float32)


def _node_sums(values: np.ndarray) -> np.ndarray:
    """sleap-nn's score of an instance without one of its own: `np.nansum` of its nodes."""
    return np.nansum(values.astype(np.float32), axis=-1).astype(np.float32)


def _instance_poses(
    layout: _Layout,
    batch_size: int,
    frames: np.ndarray,
    points: np.ndarray,
    values: np.ndarray,
    instance_scores: np.ndarray,
    class_scores: np.ndarray | None = None,
) -> list[FramePoses]:
    outputs: dict[str, np.ndarray] = {
        "instance_frame": frames.astype(np.int64),
        "points": points.astype(np.float32),
        "point_scores": _point_scores(points, values),
        "instance_scores": instance_scores.astype(np.float32),
    }
    if class_scores is not None:
        outputs["class_scores"] = class_scores.astype(np.float32)
    return decode(layout.info, outputs, batch_size)


def _single_instance(layout: _Layout, outputs: GraphOutputs, batch_size: int) -> list[FramePoses]:
    values = outputs["peak_vals"]
    return _instance_poses(
        layout, batch_size, np.arange(batch_size), outputs["peaks"], values, _node_sums(values)
    )


def _centroid(layout: _Layout, outputs: GraphOutputs, batch_size: int) -> list[FramePoses]:
    frames, slots = np.nonzero(outputs["instance_valid"])
    values = outputs["centroid_vals"][frames, slots]
    points = outputs["centroids"][frames, slots, None]
    return _instance_poses(layout, batch_size, frames, points, values[:, None], values)


def _topdown(layout: _Layout, outputs: GraphOutputs, batch_size: int) -> list[FramePoses]:
    frames, slots = np.nonzero(outputs["instance_valid"])
    values = outputs["peak_vals"][frames, slots]
    return _instance_poses(
        layout, batch_size, frames, outputs["peaks"][frames, slots], values, _node_sums(values)
    )


def _topdown_multi_class(
    layout: _Layout, outputs: GraphOutputs, batch_size: int
) -> list[FramePoses]:
    """Instances in class order, as sleap-nn's adapter slots them (module docstring)."""
    n_classes = len(layout.info.class_names)
    frames: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    classes: list[np.ndarray] = []
    for frame in range(batch_size):
        (valid,) = np.nonzero(outputs["instance_valid"][frame])
        if valid.size == 0:
            continue
        logits = outputs["class_logits"][frame, valid].astype(np.float32)
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        rows, cols = linear_sum_assignment(-probs)
        order = np.argsort(cols)
        frames.append(np.full(rows.size, frame))
        slots.append(valid[rows[order]])
        classes.append(cols[order])
    if not frames:
        frames = slots = classes = [np.zeros(0, np.int64)]
    frame_of, slot_of, class_of = (np.concatenate(parts) for parts in (frames, slots, classes))
    values = outputs["peak_vals"][frame_of, slot_of]
    # The assignment is made above; as one-hot scores, `decode` keeps it.
    one_hot = np.eye(n_classes, dtype=np.float32)[class_of]
    return _instance_poses(
        layout,
        batch_size,
        frame_of,
        outputs["peaks"][frame_of, slot_of],
        values,
        _node_sums(values),
        one_hot,
    )


def _bottomup(layout: _Layout, outputs: GraphOutputs, batch_size: int) -> list[FramePoses]:
    valid = outputs["peak_mask"].astype(bool)
    _, n_edges, pairs = outputs["line_scores"].shape
    k = valid.shape[2]
    line_scores = np.where(outputs["candidate_mask"], outputs["line_scores"], np.nan)
    adapted = {
        "peaks": _valid_points(outputs["peaks"] / layout.input_scale, valid),
        "peak_scores": np.where(valid, outputs["peak_vals"], np.nan).astype(np.float32),
        "peak_valid": valid,
        "line_scores": line_scores.reshape(batch_size, n_edges, k, pairs // k).astype(np.float32),
    }
    return decode(layout.info, adapted, batch_size)


def _bottomup_multi_class(
    layout: _Layout, outputs: GraphOutputs, batch_size: int
) -> list[FramePoses]:
    valid = outputs["peak_mask"].astype(bool)
    adapted = {
        # Divided by input_scale a second time, as sleap-nn's adapter does.
        "peaks": _valid_points(outputs["peaks"] / layout.input_scale, valid),
        "peak_scores": np.where(valid, outputs["peak_vals"], np.nan).astype(np.float32),
        "peak_valid": valid,
        "class_probs": outputs["class_probs"].astype(np.float32),
    }
    return [
        attrs.evolve(poses, instance_scores=_node_sums(poses.point_scores))
        for poses in decode(layout.info, adapted, batch_size)
    ]


def _valid_points(points: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return np.where(valid[..., None], points, np.nan).astype(np.float32)


# sleap-nn export outputs -> poses, by sleap-nn model type.
_POSES: Mapping[str, Callable[[_Layout, GraphOutputs, int], list[FramePoses]]] = {
    "single_instance": _single_instance,
    "centroid": _centroid,
    "topdown": _topdown,
    "multi_class_topdown_combined": _topdown_multi_class,
    "bottomup": _bottomup,
    "multi_class_bottomup": _bottomup_multi_class,
}
