"""Keras goldens for the SLEAP 1.x model folders in tests/data/legacy_models.

Runs in a TensorFlow venv of its own (never a sleap-live dependency), with scipy
and networkx beside it for SLEAP 1.x's own grouping code:

    python3.11 -m venv /work/venvs/tf
    /work/venvs/tf/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py av==18.1.0 \
        scipy networkx
    TF=/work/venvs/tf/bin/python
    $TF scripts/make_legacy_goldens.py clips SLEAP_REPO_CHECKOUT [CLIP...]
    $TF scripts/make_legacy_goldens.py goldens SLEAP_REPO_CHECKOUT [CASE...]
    /work/venvs/snn/bin/python scripts/make_legacy_goldens.py sleap-nn

`clips` cuts the test clips from the videos SLEAP's repository ships with
(tests/data/videos/*.mp4 and tests/data/tracks/clip.mp4 of talmolab/sleap) into
tests/data/legacy_models/clips/.
The model folders are SLEAP's real test models (tests/data/models), copied without
their optimizer state by scripts/fixtures/strip_legacy_models.py.
`goldens` loads each model with tf-keras, feeds it the clip's frames preprocessed
as SLEAP 1.4's inference does, and writes tests/data/goldens/legacy_<case>.npz:

- `maps_<head>`: the Keras network's outputs (NHWC) for the first frames
  (`MAP_FRAMES`), per head, heads named without Keras's `_0` suffix;
- `points`, `scores` (frames x instances x nodes) and `counts`: the instances
  SLEAP 1.x's inference gives on every frame. Single instance and top-down are
  computed from the Keras outputs with SLEAP 1.4's peak finding
  (`sleap/nn/peak_finding.py`) and coordinate conventions (`sleap/nn/inference.py`),
  re-implemented below. Bottom-up, multi-class bottom-up and multi-class top-down
  run SLEAP's own `peak_finding`, `paf_grouping` and `identity` modules, loaded
  from the checkout (`sleap1_modules`), on the Keras outputs, with the inference
  layers' glue (strides, input scale, crop offsets) written out here;
- `instance_scores` (bottom-up: PAF score per instance) and `identities`
  (multi-class: the class of each instance).

`sleap-nn` (run with sleap-nn 0.3.5's venv) writes what `sleap-nn predict` gives
on the single-instance folder and clip, the one type where sleap-nn's port agrees
with Keras, to legacy_single_instance_sleap_nn.npz.

Frames are decoded as sleap-live decodes them (PyAV; a gray picture in a colour
format becomes its red plane, a gray pixel format stays one channel).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "data" / "legacy_models"
CLIPS = MODELS / "clips"
GOLDENS = ROOT / "tests" / "data" / "goldens"
MAP_FRAMES = 1
PEAK_THRESHOLD = 0.2
INTEGRAL_PATCH = 5

# Clip name -> (video in SLEAP's repository, frame indices, gray, window (rows,
# cols) of the frame kept; the tracks clip keeps the 384x384 around its two flies,
# which have left it by frame 1200).
CLIP_SOURCES = {
    "flies.mkv": (
        "tests/data/videos/centered_pair_small.mp4",
        range(0, 560, 140),
        True,
        (slice(None), slice(None)),
    ),
    "tracks.mkv": (
        "tests/data/tracks/clip.mp4",
        (0, 100, 750, 1200),
        True,
        (slice(240, 624), slice(160, 544)),
    ),
}
# Case -> (model folders, clip). Top-down lists the centroid model first.
CASES = {
    "single_instance": (("minimal_robot.UNet.single_instance",), "robot.mp4"),
    "topdown": (
        ("minimal_instance.UNet.centroid", "minimal_instance.UNet.centered_instance"),
        "flies.mkv",
    ),
    "bottomup": (("minimal_instance.UNet.bottomup",), "flies.mkv"),
    "bottomup_multiclass": (("min_tracks_2node.UNet.bottomup_multiclass",), "tracks.mkv"),
    "topdown_multiclass": (
        ("minimal_instance.UNet.centroid", "min_tracks_2node.UNet.topdown_multiclass"),
        "flies.mkv",
    ),
}


# SLEAP 1.x modules `sleap1_modules` loads from a checkout, in import order.
SLEAP1_MODULES = (
    "sleap.nn.utils",
    "sleap.nn.data.instance_cropping",
    "sleap.nn.peak_finding",
    "sleap.nn.paf_grouping",
    "sleap.nn.identity",
)


def sleap1_modules(sleap_repo: Path) -> SimpleNamespace:
    """SLEAP 1.x's own peak finding and grouping, from a checkout of talmolab/sleap.

    The `sleap` package's __init__ imports the whole application (GUI, I/O); these
    modules need only tensorflow, numpy, scipy, networkx and attrs, so they are
    loaded one by one under empty parent packages. `sleap.nn.config` and
    `sleap.Labels` are named only in their type hints.
    """
    for name in ("sleap", "sleap.nn", "sleap.nn.data", "sleap.nn.config"):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules[name] = package
    config = sys.modules["sleap.nn.config"]
    config.MultiInstanceConfig = config.InstanceCroppingConfig = object  # type: ignore[attr-defined]
    sys.modules["sleap"].Labels = object  # type: ignore[attr-defined]
    loaded = {}
    for name in SLEAP1_MODULES:
        spec = importlib.util.spec_from_file_location(
            name, sleap_repo / (name.replace(".", "/") + ".py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
        loaded[leaf] = module
    return SimpleNamespace(**loaded)


def decode(path: Path) -> np.ndarray:
    """(frames, H, W, C) uint8, as sleap-live's file source decodes them."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        gray_format = stream.codec_context.pix_fmt.startswith(("gray", "ya", "mono"))
        frames = [
            f.to_ndarray(format="gray")[..., None] if gray_format else f.to_ndarray(format="rgb24")
            for f in container.decode(stream)
        ]
    images = np.stack(frames)
    if (
        not gray_format
        and (images[0, ..., 0] == images[0, ..., 1]).all()
        and (images[0, ..., 0] == images[0, ..., 2]).all()
    ):
        images = images[..., :1]
    return images


def make_clips(sleap_repo: Path, names: list[str]) -> None:
    CLIPS.mkdir(parents=True, exist_ok=True)
    for name in names or list(CLIP_SOURCES):
        source, indices, gray, (rows, cols) = CLIP_SOURCES[name]
        frames = np.ascontiguousarray(decode(sleap_repo / source)[list(indices)][:, rows, cols])
        with av.open(str(CLIPS / name), "w") as out:
            stream = out.add_stream("libx264", rate=10)
            stream.width, stream.height = frames.shape[2], frames.shape[1]
            stream.pix_fmt = "gray" if gray else "yuv420p"
            stream.options = {"crf": "18", "g": "1"}
            for image in frames:
                fmt = "gray" if gray else "rgb24"
                data = image[..., 0] if gray else image
                out.mux(stream.encode(av.VideoFrame.from_ndarray(data, format=fmt)))
            out.mux(stream.encode(None))
        print(CLIPS / name, (CLIPS / name).stat().st_size, "bytes")


class KerasModel:
    """A SLEAP 1.x model folder run as SLEAP 1.4's inference layers run it."""

    def __init__(self, folder: Path) -> None:
        import tf_keras

        self.config = json.loads((folder / "training_config.json").read_text())
        saved = tf_keras.models.load_model(folder / "best_model.h5", compile=False)
        # SLEAP 1.4's predictors reset a saved model's input to any size
        # (`sleap.nn.utils.reset_input_layer`, `resize_input_layer=True`): a model
        # saved with a fixed input shape runs on frames of any size.
        layout = saved.get_config()
        layout["layers"][0]["config"]["batch_input_shape"] = (
            None,
            None,
            None,
            saved.input_shape[-1],
        )
        self.model = tf_keras.Model.from_config(layout)
        for layer, original in zip(self.model.layers, saved.layers, strict=True):
            layer.set_weights(original.get_weights())
        self.names = [name.removesuffix("_0") for name in self.model.output_names]
        preprocessing = self.config["data"]["preprocessing"]
        self.input_scale = float(preprocessing.get("input_scaling") or 1.0)
        self.pad_to_stride = int(preprocessing.get("pad_to_stride") or 1)
        self.channels = int(self.model.inputs[0].shape[-1])
        heads = self.config["model"]["heads"]
        head = next(value for value in heads.values() if value)
        self.output_stride = int((head.get("confmaps") or head)["output_stride"])
        self.crop_size = self.config["data"]["instance_cropping"].get("crop_size")

    def preprocess(self, images):
        """`InferenceLayer.preprocess`: channels, float, resize, pad bottom-right."""
        import tensorflow as tf

        x = tf.convert_to_tensor(images)
        if self.channels == 1 and x.shape[-1] == 3:
            x = tf.image.rgb_to_grayscale(x)
        elif self.channels == 3 and x.shape[-1] == 1:
            x = tf.image.grayscale_to_rgb(x)
        x = tf.cast(x, tf.float32) / 255.0
        if self.input_scale != 1.0:
            height, width = x.shape[1], x.shape[2]
            size = tf.cast(tf.cast([width, height], tf.float32) * self.input_scale, tf.int32)
            x = tf.image.resize(x, size=tf.reverse(size, [0]), method="bilinear")
        stride = self.pad_to_stride
        pad_bottom = (-x.shape[1]) % stride
        pad_right = (-x.shape[2]) % stride
        if pad_bottom or pad_right:
            x = tf.pad(x, [[0, 0], [0, pad_bottom], [0, pad_right], [0, 0]])
        return x

    def run(self, images) -> dict[str, np.ndarray]:
        outputs = self.model(self.preprocess(images), training=False)
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        return {name: np.asarray(out) for name, out in zip(self.names, outputs, strict=True)}

    def to_image(self, grid: np.ndarray) -> np.ndarray:
        """SLEAP 1.x's coordinate ladder: stride, then `/ scale + 0.5` when scaled."""
        points = grid * self.output_stride
        if self.input_scale != 1.0:
            points = points / self.input_scale + 0.5
        return points


def global_peaks(cms: np.ndarray, offsets: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """`find_global_peaks` (integral refinement) or `find_global_peaks_with_offsets`.

    cms: (S, H, W, C). Returns (S, C, 2) grid xy (NaN below the threshold), (S, C).
    """
    samples, height, width, channels = cms.shape
    rows = cms.max(axis=2).argmax(axis=1)  # (S, C)
    cols = cms.max(axis=1).argmax(axis=1)
    s, c = np.meshgrid(np.arange(samples), np.arange(channels), indexing="ij")
    values = cms[s, rows, cols, c]
    points = np.stack([cols, rows], axis=-1).astype(np.float32)
    if offsets is not None:
        refined = points + offsets.reshape(samples, height, width, channels, 2)[s, rows, cols, c]
    else:
        half = (INTEGRAL_PATCH - 1) // 2
        grid = np.arange(INTEGRAL_PATCH, dtype=np.float32) - half
        padded = np.pad(cms, ((0, 0), (half, half), (half, half), (0, 0)))
        refined = points.copy()
        for i in range(samples):
            for k in range(channels):
                patch = padded[i, rows[i, k] : rows[i, k] + INTEGRAL_PATCH, cols[i, k] :][
                    :, :INTEGRAL_PATCH, k
                ]
                total = patch.sum()
                refined[i, k, 0] += (patch * grid[None, :]).sum() / total
                refined[i, k, 1] += (patch * grid[:, None]).sum() / total
    missing = values < PEAK_THRESHOLD
    refined[missing] = np.nan
    return refined, values


def local_peaks(cms: np.ndarray, offsets: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """`find_local_peaks_with_offsets` on one-channel maps: per sample (points, values).

    A peak is above the threshold and strictly above its 8 neighbours.
    """
    samples, height, width, _ = cms.shape
    padded = np.pad(cms[..., 0], ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    neighbours = np.stack(
        [
            padded[:, 1 + dy : 1 + dy + height, 1 + dx : 1 + dx + width]
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if dy or dx
        ]
    ).max(axis=0)
    found = []
    for i in range(samples):
        rows, cols = np.nonzero(
            (cms[i, ..., 0] > neighbours[i]) & (cms[i, ..., 0] > PEAK_THRESHOLD)
        )
        points = np.stack([cols, rows], axis=-1).astype(np.float32)
        if offsets is not None:
            points = points + offsets[i, rows, cols, :2]
        found.append((points, cms[i, rows, cols, 0]))
    return found


def sleap_crops(image: np.ndarray, centers: np.ndarray, size: int) -> np.ndarray:
    """`make_centered_bboxes` + `crop_bboxes`: bilinear crops cast back to uint8."""
    import tensorflow as tf

    half = (size - 1) / 2
    boxes = np.stack(
        [centers[:, 1] - half, centers[:, 0] - half, centers[:, 1] + half, centers[:, 0] + half],
        axis=1,
    ).astype(np.float32)
    height, width = image.shape[:2]
    normalized = boxes / np.array([height - 1, width - 1, height - 1, width - 1], np.float32)
    crops = tf.image.crop_and_resize(
        image[None].astype(np.uint8),
        boxes=normalized,
        box_indices=np.zeros(len(centers), np.int32),
        crop_size=(size, size),
        method="bilinear",
    )
    return np.asarray(tf.cast(crops, tf.uint8))


def golden_single_instance(models: list[KerasModel], frames: np.ndarray) -> dict[str, np.ndarray]:
    (model,) = models
    maps = model.run(frames)
    offsets = maps.get("OffsetRefinementHead")
    grid, values = global_peaks(maps["SingleInstanceConfmapsHead"], offsets)
    points = model.to_image(grid)
    return {
        **{f"maps_{name}": value[:MAP_FRAMES] for name, value in maps.items()},
        "points": points[:, None],
        "scores": values[:, None],
        "counts": np.ones(len(frames), np.int64),
    }


def keras_centroids(
    centroid: KerasModel, frames: np.ndarray
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """`CentroidCrop`: the centroid network's maps and each frame's centroids (image xy)."""
    maps = centroid.run(frames)
    found = local_peaks(maps["CentroidConfmapsHead"], maps.get("OffsetRefinementHead"))
    return maps, [centroid.to_image(grid) for grid, _values in found]


def padded_instances(
    per_frame: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames' (points (n, N, 2), scores (n, N)) as NaN-padded arrays and counts."""
    most = max(1, max(len(points) for points, _ in per_frame))
    nodes = max(points.shape[1] for points, _ in per_frame)
    all_points = np.full((len(per_frame), most, nodes, 2), np.nan, np.float32)
    all_scores = np.full((len(per_frame), most, nodes), np.nan, np.float32)
    for i, (points, values) in enumerate(per_frame):
        all_points[i, : len(points)] = points
        all_scores[i, : len(points)] = values
    return all_points, all_scores, np.array([len(points) for points, _ in per_frame])


def golden_topdown(models: list[KerasModel], frames: np.ndarray) -> dict[str, np.ndarray]:
    centroid, instance = models
    maps, centers_per_frame = keras_centroids(centroid, frames)
    golden = {f"maps_{name}": value[:MAP_FRAMES] for name, value in maps.items()}
    size = int(instance.crop_size)
    per_frame = []
    for i, centers in enumerate(centers_per_frame):
        if not len(centers):
            per_frame.append((np.zeros((0, 0, 2)), np.zeros((0, 0))))
            continue
        crops = sleap_crops(frames[i], centers, size)
        heads = instance.run(crops)
        if i < MAP_FRAMES:
            for name, value in heads.items():
                golden.setdefault(f"instance_maps_{name}", []).append(value)
        cms = heads["CenteredInstanceConfmapsHead"]
        peaks, peak_values = global_peaks(cms, heads.get("OffsetRefinementHead"))
        points = instance.to_image(peaks) + (centers - size / 2)[:, None] / instance.input_scale
        per_frame.append((points, peak_values))
    for key in [k for k in golden if k.startswith("instance_maps_")]:
        golden[key] = np.concatenate(golden[key])
    points, scores, counts = padded_instances(per_frame)
    golden.update(
        points=points, scores=scores, counts=counts, centroids=np.concatenate(centers_per_frame)
    )
    return golden


def sleap1_local_peaks(sleap: SimpleNamespace, model: KerasModel, maps: dict[str, np.ndarray]):
    """`BottomUpInferenceLayer.find_peaks` (and the multi-class layer's): SLEAP 1.x's
    local peaks, refined by the offset head where the model has one and by integral
    regression otherwise (the predictors' default), in input pixels."""
    cms = maps["MultiInstanceConfmapsHead"]
    offsets = maps.get("OffsetRefinementHead")
    if offsets is None:
        found = sleap.peak_finding.find_local_peaks(
            cms,
            threshold=PEAK_THRESHOLD,
            refinement="integral",
            integral_patch_size=INTEGRAL_PATCH,
        )
    else:
        found = sleap.peak_finding.find_local_peaks_with_offsets(
            cms, offsets, threshold=PEAK_THRESHOLD
        )
    peaks, values, sample_inds, channel_inds = found
    return peaks * float(model.output_stride), values, sample_inds, channel_inds


def undo_input_scale(model: KerasModel, points: np.ndarray) -> np.ndarray:
    """The inference layers' last step: `/ input_scale + 0.5` when scaled."""
    if model.input_scale != 1.0:
        return points / model.input_scale + 0.5
    return points


def golden_bottomup(
    models: list[KerasModel], frames: np.ndarray, sleap: SimpleNamespace
) -> dict[str, np.ndarray]:
    """`BottomUpPredictor` with its defaults: SLEAP's PAFScorer on the Keras maps."""
    import tensorflow as tf

    (model,) = models
    maps = model.run(frames)
    peaks, values, sample_inds, channel_inds = sleap1_local_peaks(sleap, model, maps)
    head = model.config["model"]["heads"]["multi_instance"]
    scorer = sleap.paf_grouping.PAFScorer(
        part_names=head["confmaps"]["part_names"],
        edges=[tuple(edge) for edge in head["pafs"]["edges"]],
        pafs_stride=head["pafs"]["output_stride"],
    )
    rows = {"nrows": len(frames)}
    instances, peak_scores, instance_scores, *_ = scorer.predict(
        tf.convert_to_tensor(maps["PartAffinityFieldsHead"]),
        tf.RaggedTensor.from_value_rowids(peaks, sample_inds, **rows),
        tf.RaggedTensor.from_value_rowids(values, sample_inds, **rows),
        tf.RaggedTensor.from_value_rowids(channel_inds, sample_inds, **rows),
    )
    nodes = len(head["confmaps"]["part_names"])
    per_frame = [
        (
            undo_input_scale(model, np.asarray(points, np.float32).reshape(-1, nodes, 2)),
            np.asarray(scores, np.float32).reshape(-1, nodes),
        )
        for points, scores in zip(instances.to_list(), peak_scores.to_list(), strict=True)
    ]
    points, scores, counts = padded_instances(per_frame)
    most = points.shape[1]
    padded_scores = np.full((len(frames), most), np.nan, np.float32)
    for i, frame_scores in enumerate(instance_scores.to_list()):
        padded_scores[i, : len(frame_scores)] = frame_scores
    return {
        **{f"maps_{name}": value[:MAP_FRAMES] for name, value in maps.items()},
        "points": points,
        "scores": scores,
        "counts": counts,
        "instance_scores": padded_scores,
    }


def class_instances(
    points: np.ndarray, values: np.ndarray
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[np.ndarray]]:
    """The predictors' object builder for class-grouped outputs: per frame the
    classes with any point, as (points, scores) and their class indices."""
    per_frame, identities = [], []
    for frame_points, frame_values in zip(points, values, strict=True):
        found = ~np.isnan(frame_points).all(axis=(1, 2))
        per_frame.append((frame_points[found], frame_values[found]))
        identities.append(np.flatnonzero(found))
    return per_frame, identities


def class_golden(
    maps: dict[str, np.ndarray], points: np.ndarray, values: np.ndarray
) -> dict[str, np.ndarray]:
    per_frame, identities = class_instances(points, values)
    points, scores, counts = padded_instances(per_frame)
    padded_identities = np.full(points.shape[:2], -1, np.int64)
    for i, classes in enumerate(identities):
        padded_identities[i, : len(classes)] = classes
    return {
        **{f"maps_{name}": value[:MAP_FRAMES] for name, value in maps.items()},
        "points": points,
        "scores": scores,
        "counts": counts,
        "identities": padded_identities,
    }


def golden_bottomup_multiclass(
    models: list[KerasModel], frames: np.ndarray, sleap: SimpleNamespace
) -> dict[str, np.ndarray]:
    """`BottomUpMultiClassInferenceLayer`: SLEAP's `classify_peaks_from_maps`."""
    (model,) = models
    maps = model.run(frames)
    peaks, values, sample_inds, channel_inds = sleap1_local_peaks(sleap, model, maps)
    class_maps = maps["ClassMapsHead"]
    head = model.config["model"]["heads"]["multi_class_bottomup"]
    class_stride = int(head["class_maps"]["output_stride"])
    points, point_values, _class_probs = sleap.identity.classify_peaks_from_maps(
        class_maps,
        peaks / float(class_stride),
        values,
        sample_inds,
        channel_inds,
        n_channels=maps["MultiInstanceConfmapsHead"].shape[3],
    )
    points = undo_input_scale(model, np.asarray(points) * float(class_stride))
    return class_golden(maps, points, np.asarray(point_values))


def golden_topdown_multiclass(
    models: list[KerasModel], frames: np.ndarray, sleap: SimpleNamespace
) -> dict[str, np.ndarray]:
    """`CentroidCrop` + `TopDownMultiClassFindPeaks`: global peaks in each crop, crops
    assigned to classes by SLEAP's `classify_peaks_from_vectors`."""
    centroid, instance = models
    _centroid_maps, centers_per_frame = keras_centroids(centroid, frames)
    size = int(instance.crop_size)
    crops = np.concatenate(
        [sleap_crops(frames[i], centers, size) for i, centers in enumerate(centers_per_frame)]
    )
    sample_inds = np.repeat(
        np.arange(len(frames)), [len(centers) for centers in centers_per_frame]
    ).astype(np.int32)
    centers = np.concatenate(centers_per_frame).astype(np.float32)
    heads = instance.run(crops)
    peaks, peak_values = global_peaks(
        heads["CenteredInstanceConfmapsHead"], heads.get("OffsetRefinementHead")
    )
    peak_points = undo_input_scale(instance, peaks * instance.output_stride)
    peak_points = peak_points + (centers - size / 2)[:, None]
    points, point_values, _class_probs = sleap.identity.classify_peaks_from_vectors(
        peak_points.astype(np.float32),
        peak_values.astype(np.float32),
        heads["ClassVectorsHead"],
        sample_inds,
        len(frames),
    )
    # The centroid maps are the top-down golden's (the same model and clip).
    golden = class_golden({}, np.asarray(points), np.asarray(point_values))
    golden.update(
        centroids=centers,
        centroid_counts=np.array([len(centers) for centers in centers_per_frame]),
        instance_maps_ClassVectorsHead=heads["ClassVectorsHead"],
        **{
            f"instance_maps_{name}": value[: int(np.sum(sample_inds < MAP_FRAMES))]
            for name, value in heads.items()
            if name != "ClassVectorsHead"
        },
    )
    return golden


def make_goldens(sleap_repo: Path, names: list[str]) -> None:
    sleap = sleap1_modules(sleap_repo)
    makers = {
        "single_instance": lambda models, frames: golden_single_instance(models, frames),
        "topdown": lambda models, frames: golden_topdown(models, frames),
        "bottomup": lambda models, frames: golden_bottomup(models, frames, sleap),
        "bottomup_multiclass": lambda models, frames: golden_bottomup_multiclass(
            models, frames, sleap
        ),
        "topdown_multiclass": lambda models, frames: golden_topdown_multiclass(
            models, frames, sleap
        ),
    }
    for name in names or list(CASES):
        folders, clip = CASES[name]
        frames = decode(CLIPS / clip)
        models = [KerasModel(MODELS / folder) for folder in folders]
        golden = makers[name](models, frames)
        path = GOLDENS / f"legacy_{name}.npz"
        np.savez_compressed(path, **golden)
        print(path, path.stat().st_size, "bytes", {k: v.shape for k, v in golden.items()})


def sleap_nn_reference() -> None:
    """`sleap-nn predict` on the single-instance folder and clip (run with the sleap-nn
    venv's python): tests/data/goldens/legacy_single_instance_sleap_nn.npz."""
    import subprocess
    import tempfile

    import sleap_io

    folders, clip = CASES["single_instance"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "predictions.slp"
        command = [
            str(Path(sys.executable).with_name("sleap-nn")),
            "predict",
            "--data_path",
            str(CLIPS / clip),
            "--model_paths",
            str(MODELS / folders[0]),
            "-o",
            str(out),
        ]
        subprocess.run(command, check=True)
        labels = sleap_io.load_slp(str(out))
        points = np.stack([frame.instances[0].numpy() for frame in labels.labeled_frames])
        frames = np.array([frame.frame_idx for frame in labels.labeled_frames])
    path = GOLDENS / "legacy_single_instance_sleap_nn.npz"
    np.savez_compressed(path, points=points.astype(np.float32), frames=frames)
    print(path, points.shape)


def main() -> None:
    stage = sys.argv[1]
    if stage == "clips":
        make_clips(Path(sys.argv[2]), sys.argv[3:])
    elif stage == "goldens":
        make_goldens(Path(sys.argv[2]), sys.argv[3:])
    elif stage == "sleap-nn":
        sleap_nn_reference()
    else:
        raise SystemExit(f"unknown stage {stage!r}: clips, goldens or sleap-nn")


if __name__ == "__main__":
    main()
