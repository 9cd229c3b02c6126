"""Runs a directory written by `sleap-nn export` (`export_metadata.json` + `model.onnx`).

The graph is used as sleap-nn wrote it. Its input contract is uint8 NCHW
`(batch, C, H, W)` named "image", with `C` the model's channel count and `H`, `W`
either fixed or free but then required to be multiples of the backbone's stride.
Frames are brought to that contract on the host:

1. channels converted as sleap-nn's `ensure_rgb` / `ensure_grayscale` do;
2. the size matcher of the training config (`max_height` / `max_width`),
   letterboxing exactly as sleap-nn's checkpoint path does;
3. for a graph of fixed size, frames that are larger are letterboxed down into
   it (antialiased, as sleap-nn resizes) and smaller ones padded; otherwise
   padding bottom/right to a multiple of the backbone's `max_stride` (read from
   the training config the export copied beside the graph).

Padding bottom/right leaves coordinates unchanged; resizing is undone by dividing
coordinates by the scale. The graph's outputs (see sleap-nn's export wrappers)
are rewritten into the outputs of sleap-live's own model of that type and decoded
by `sleap_live.engines.host.postprocess.decode`, so poses mean the same whichever
runner produced them:

- single_instance (peaks, peak_vals): one instance per frame, scored by the sum
  of its node scores;
- centroid (centroids, centroid_vals, instance_valid): a one-node instance per
  valid slot (on the "centroid" skeleton), scored by the centroid value;
- topdown (+ peaks, peak_vals): one instance per valid slot, scored by the
  centroid value;
- multi_class_topdown_combined (+ class_logits): softmax class probabilities,
  assigned to instances per frame by Hungarian matching;
- bottomup (peaks, peak_vals, peak_mask, line_scores, candidate_mask): PAF
  grouping with sleap-nn's predict defaults;
- multi_class_bottomup (peaks, peak_vals, peak_mask, class_probs): class-map
  grouping.

Bottom-up peaks come in scaled-input pixels and are divided by `input_scale`;
multi-class bottom-up peaks are already unscaled inside the graph (sleap-nn's own
adapter divides them a second time, which is a bug). Centered-instance exports
take crops, not frames, and are refused, as are embedding and box models.

A caveat of sleap-nn's tracer-based export: sizes computed with Python numbers
(`int(H * input_scale)` resizes, the top-down crop grid's `crop / width`) are
frozen to the size the graph was traced at (`--input-height/--input-width`).
Such graphs are only exact for frames that, after steps 1-3, have that size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import yaml

from sleap_live.engines.errors import (
    EngineError,
    ModelConfigError,
    RuntimeUnavailableError,
)
from sleap_live.engines.host.frames import check_frames, convert_channels
from sleap_live.engines.host.grouping import ClassMapGrouper, PafGrouper
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.dirs import read_export_metadata
from sleap_live.engines.load.spec import ModelSpec, parse_training_config
from sleap_live.engines.runners.onnx import CPU, BoundIO, Provider, create_session, device_of
from sleap_live.engines.types import CENTROID_SKELETON, FramePoses, ModelInfo, Skeleton

MODEL_FILE = "model.onnx"
# sleap-nn model type -> sleap-live model type.
MODEL_TYPES = {
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
DEFAULT_CONFIG = "training_config.yaml"
# sleap-nn's defaults for PAF grouping at predict time.
MIN_LINE_SCORES = 0.25
MIN_INSTANCE_PEAKS = 0

Outputs = Mapping[str, np.ndarray]


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
        self._stride = spec.max_stride
        self._max_size = (spec.preprocess.max_height, spec.preprocess.max_width)

        session = create_session(model_path, providers, intra_op_threads=intra_op_threads)
        (graph_input,) = session.get_inputs()
        _, channels, height, width = graph_input.shape
        self._input_name = graph_input.name
        self._channels = int(channels) if isinstance(channels, int) else self.info.input_channels
        self._fixed_size = (
            (height, width) if isinstance(height, int) and isinstance(width, int) else None
        )
        self._output_names = [output.name for output in session.get_outputs()]
        needed = _OUTPUTS[self._layout.sleap_nn_type]
        missing = [name for name in needed if name not in self._output_names]
        if missing:
            raise ModelConfigError(
                f"{model_path}: a {metadata['model_type']} export should output {missing}; "
                f"it outputs {self._output_names}"
            )
        self.device = device_of(providers)
        self._io = BoundIO.for_device(session, self.device)
        self._session: Any = session

    def run(self, frames: Any) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) numpy array or torch tensor.

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
        """
        if self._session is None:
            raise EngineError("this SleapNNExportRunner is closed")
        check_frames(frames)
        image, scale = self.prepare(
            frames if isinstance(frames, np.ndarray) else frames.cpu().numpy()
        )
        if self._io is not None:
            outputs = self._io.run(image)
        else:
            values = self._session.run(None, {self._input_name: image})
            outputs = dict(zip(self._output_names, values, strict=True))
        adapted = _ADAPTERS[self._layout.sleap_nn_type](self._layout, outputs, scale)
        return decode(self.info, adapted, image.shape[0])

    def prepare(self, frames: np.ndarray) -> tuple[np.ndarray, float]:
        """Frames as the graph takes them (steps 1-3 of the module docstring).

        Returns:
            `(image, scale)`: the uint8 (B, C, H, W) input and the factor by which
            frame coordinates were scaled into it.
        """
        image = np.ascontiguousarray(convert_channels(frames, self._channels).transpose(0, 3, 1, 2))
        scale = 1.0
        if self._max_size != (None, None):
            image, scale = _letterbox(image, *self._max_size)
        height, width = image.shape[2:]
        if self._fixed_size is not None:
            target_height, target_width = self._fixed_size
            if height > target_height or width > target_width:
                image, fitted = _letterbox(image, target_height, target_width)
                scale *= fitted
        else:
            target_height = -(-height // self._stride) * self._stride
            target_width = -(-width // self._stride) * self._stride
        return _pad(image, target_height, target_width), scale

    def close(self) -> None:
        """Releases the session; idempotent."""
        self._io = None
        self._session = None


def _frame_model_spec(export_dir: Path, sleap_nn_type: str) -> ModelSpec:
    name = FRAME_MODEL_CONFIG.get(sleap_nn_type, DEFAULT_CONFIG)
    path = export_dir / name
    if sleap_nn_type not in MODEL_TYPES:
        raise ModelConfigError(
            f"{export_dir}: sleap-nn export of type {sleap_nn_type!r} cannot run on whole frames "
            f"(supported: {', '.join(MODEL_TYPES)}; export a centered-instance model together "
            "with its centroid model)"
        )
    if not path.is_file():
        raise ModelConfigError(
            f"{path}: not found; sleap-live needs the training config sleap-nn export copies "
            "beside the graph (for the backbone stride and size matcher)"
        )
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ModelConfigError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from error
    return parse_training_config(config, export_dir)


def _layout(metadata: Mapping[str, Any], spec: ModelSpec, export_dir: Path) -> _Layout:
    origin = export_dir / "export_metadata.json"
    sleap_nn_type = metadata["model_type"]
    try:
        node_names = tuple(str(name) for name in metadata["node_names"])
        edges = tuple((int(a), int(b)) for a, b in metadata.get("edge_inds") or ())
        input_channels = int(metadata["input_channels"])
        input_scale = float(metadata.get("input_scale", 1.0))
        threshold = float(metadata.get("peak_threshold") or 0.2)
        class_names = tuple(str(name) for name in metadata.get("class_names") or ())
        max_instances = metadata.get("max_instances")
        max_peaks = metadata.get("max_peaks_per_node")
    except (KeyError, TypeError, ValueError) as error:
        raise ModelConfigError(f"{origin}: malformed ({error!r})") from error
    if not edges and spec.skeleton.node_names == node_names:
        # Single-instance exports record no edges; the training config has them.
        edges = spec.skeleton.edges
    skeleton = Skeleton(node_names, edges, name=spec.skeleton.name)
    if sleap_nn_type == "centroid" and len(node_names) > 1:
        # As sleap-live's own centroid model: one-node instances on sleap-io's skeleton.
        skeleton = CENTROID_SKELETON

    postprocess: dict[str, Any] = {}
    if sleap_nn_type == "single_instance":
        max_instances = 1
    elif sleap_nn_type == "bottomup":
        postprocess = PafGrouper(
            n_nodes=len(node_names),
            edges=edges,
            min_line_scores=MIN_LINE_SCORES,
            min_instance_peaks=MIN_INSTANCE_PEAKS,
        ).postprocess_settings()
        max_instances = len(node_names) * int(max_peaks or 1)
    elif sleap_nn_type == "multi_class_bottomup":
        postprocess = ClassMapGrouper(
            n_nodes=len(node_names), n_classes=len(class_names)
        ).postprocess_settings()
        max_instances = len(class_names)
    elif sleap_nn_type == "multi_class_topdown_combined":
        max_instances = len(class_names)
    if max_instances is None:
        raise ModelConfigError(f"{origin}: no max_instances for a {sleap_nn_type} export")
    info = ModelInfo(
        model_type=MODEL_TYPES[sleap_nn_type],
        skeleton=skeleton,
        input_channels=input_channels,
        max_instances=int(max_instances),
        class_names=class_names,
        peak_threshold=threshold,
        postprocess=postprocess,
    )
    return _Layout(sleap_nn_type, info, input_scale)


def _letterbox(
    image: np.ndarray, max_height: int | None, max_width: int | None
) -> tuple[np.ndarray, float]:
    """sleap-nn's size matcher on uint8 (B, C, H, W) frames."""
    import torch

    from sleap_live.engines.graph.preprocess import sizematch

    matched, scale = sizematch(torch.from_numpy(image), max_height, max_width)
    return matched.numpy(), float(scale)


def _pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    pad_height, pad_width = height - image.shape[2], width - image.shape[3]
    if pad_height == 0 and pad_width == 0:
        return image
    return np.pad(image, ((0, 0), (0, 0), (0, pad_height), (0, pad_width)))


def _missing_as_nan(points: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Scores as float32, NaN wherever the point is missing."""
    return np.where(np.isnan(points[..., 0]), np.float32(np.nan), scores).astype(np.float32)


def _instance_lists(
    frames: np.ndarray, points: np.ndarray, point_scores: np.ndarray, instance_scores: np.ndarray
) -> dict[str, np.ndarray]:
    return {
        "instance_frame": frames.astype(np.int64),
        "points": points.astype(np.float32),
        "point_scores": _missing_as_nan(points, point_scores),
        "instance_scores": instance_scores.astype(np.float32),
    }


def _single_instance(layout: _Layout, outputs: Outputs, scale: float) -> dict[str, np.ndarray]:
    points = outputs["peaks"] / scale
    scores = _missing_as_nan(points, outputs["peak_vals"])
    totals = np.where(np.isnan(scores), 0, scores).sum(axis=1)
    return _instance_lists(np.arange(points.shape[0]), points, scores, totals)


def _centroid(layout: _Layout, outputs: Outputs, scale: float) -> dict[str, np.ndarray]:
    frames, slots = np.nonzero(outputs["instance_valid"])
    values = outputs["centroid_vals"][frames, slots]
    points = outputs["centroids"][frames, slots, None] / scale
    return _instance_lists(frames, points, values[:, None], values)


def _topdown(layout: _Layout, outputs: Outputs, scale: float) -> dict[str, np.ndarray]:
    frames, slots = np.nonzero(outputs["instance_valid"])
    return _instance_lists(
        frames,
        outputs["peaks"][frames, slots] / scale,
        outputs["peak_vals"][frames, slots],
        outputs["centroid_vals"][frames, slots],
    )


def _topdown_multi_class(layout: _Layout, outputs: Outputs, scale: float) -> dict[str, np.ndarray]:
    frames, slots = np.nonzero(outputs["instance_valid"])
    logits = outputs["class_logits"][frames, slots].astype(np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    return {
        **_topdown(layout, outputs, scale),
        "class_scores": probs.astype(np.float32),
    }


def _bottomup(layout: _Layout, outputs: Outputs, scale: float) -> dict[str, np.ndarray]:
    valid = outputs["peak_mask"].astype(bool)
    batch, n_edges, pairs = outputs["line_scores"].shape
    k = valid.shape[2]
    line_scores = np.where(outputs["candidate_mask"], outputs["line_scores"], np.nan)
    return {
        "peaks": _valid_points(outputs["peaks"] / (layout.input_scale * scale), valid),
        "peak_scores": np.where(valid, outputs["peak_vals"], np.nan).astype(np.float32),
        "peak_valid": valid,
        "line_scores": line_scores.reshape(batch, n_edges, k, pairs // k).astype(np.float32),
    }


def _bottomup_multi_class(layout: _Layout, outputs: Outputs, scale: float) -> dict[str, np.ndarray]:
    # sleap-nn's graph already divides these peaks by input_scale.
    valid = outputs["peak_mask"].astype(bool)
    return {
        "peaks": _valid_points(outputs["peaks"] / scale, valid),
        "peak_scores": np.where(valid, outputs["peak_vals"], np.nan).astype(np.float32),
        "peak_valid": valid,
        "class_probs": outputs["class_probs"].astype(np.float32),
    }


def _valid_points(points: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return np.where(valid[..., None], points, np.nan).astype(np.float32)


# sleap-nn export outputs -> the outputs `postprocess.decode` takes for the model type.
_ADAPTERS: Mapping[str, Callable[[_Layout, Outputs, float], dict[str, np.ndarray]]] = {
    "single_instance": _single_instance,
    "centroid": _centroid,
    "topdown": _topdown,
    "multi_class_topdown_combined": _topdown_multi_class,
    "bottomup": _bottomup,
    "multi_class_bottomup": _bottomup_multi_class,
}
_OUTPUTS = {
    "single_instance": ("peaks", "peak_vals"),
    "centroid": ("centroids", "centroid_vals", "instance_valid"),
    "topdown": ("centroid_vals", "peaks", "peak_vals", "instance_valid"),
    "multi_class_topdown_combined": (
        "centroid_vals",
        "peaks",
        "peak_vals",
        "class_logits",
        "instance_valid",
    ),
    "bottomup": ("peaks", "peak_vals", "peak_mask", "line_scores", "candidate_mask"),
    "multi_class_bottomup": ("peaks", "peak_vals", "peak_mask", "class_probs"),
}
