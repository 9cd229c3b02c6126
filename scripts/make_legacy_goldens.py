"""Keras goldens for the SLEAP 1.x model folders in tests/data/legacy_models.

Runs in a TensorFlow venv of its own (never a sleap-live dependency):

    python3.11 -m venv /work/venvs/tf
    /work/venvs/tf/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py av==18.1.0
    /work/venvs/tf/bin/python scripts/make_legacy_goldens.py clips SLEAP_REPO_CHECKOUT
    /work/venvs/tf/bin/python scripts/make_legacy_goldens.py fixtures SLEAP_REPO/tests/data/models
    /work/venvs/tf/bin/python scripts/make_legacy_goldens.py goldens
    /work/venvs/snn/bin/python scripts/make_legacy_goldens.py sleap-nn

`clips` cuts the test clips from the videos SLEAP's repository ships with
(tests/data/videos/*.mp4 of talmolab/sleap) into tests/data/legacy_models/clips/.
`fixtures` writes small folders in SLEAP 1.x's Keras layout for the bottom-up and
multi-class types, whose real test models (0.4 to 0.7 MB each) would not fit the
repository's size budget: the real folders' training_config.json with fewer
filters, the Keras model SLEAP 1.4 builds for it, seeded random weights.
`goldens` loads each model with tf-keras, feeds it the clip's frames preprocessed
as SLEAP 1.4's inference does, and writes tests/data/goldens/legacy_<case>.npz:

- `maps_<head>`: the Keras network's outputs (NHWC) for the first frames
  (`MAP_FRAMES`), per head, heads named without Keras's `_0` suffix;
- for the fixture folders only the network outputs (`legacy_<type>.npz`);
- `points`, `scores` (frames x instances x nodes) and `counts`: the instances
  SLEAP 1.x's inference gives on every frame, computed here from the Keras
  outputs with SLEAP 1.4's peak finding (`sleap/nn/peak_finding.py`) and
  coordinate conventions (`sleap/nn/inference.py`), re-implemented below.

`sleap-nn` (run with sleap-nn 0.3.5's venv) writes what `sleap-nn predict` gives
on the single-instance folder and clip, the one type where sleap-nn's port agrees
with Keras, to legacy_single_instance_sleap_nn.npz.

Frames are decoded as sleap-live decodes them (PyAV; a gray picture in a colour
format becomes its red plane, a gray pixel format stays one channel).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "data" / "legacy_models"
CLIPS = MODELS / "clips"
GOLDENS = ROOT / "tests" / "data" / "goldens"
MAP_FRAMES = 1
PEAK_THRESHOLD = 0.2
INTEGRAL_PATCH = 5

# Clip name -> (video in SLEAP's repository, frame indices, gray).
CLIP_SOURCES = {
    "flies.mkv": ("tests/data/videos/centered_pair_small.mp4", range(0, 560, 140), True),
}
# Case -> (model folders, clip). Top-down lists the centroid model first.
CASES = {
    "single_instance": (("minimal_robot.UNet.single_instance",), "robot.mp4"),
    "topdown": (
        ("minimal_instance.UNet.centroid", "minimal_instance.UNet.centered_instance"),
        "flies.mkv",
    ),
}


# Fixture folders in SLEAP 1.x's Keras layout for the types whose real test models
# are too large to commit: name -> (real folder whose training_config.json it takes,
# config changes). Made by `fixtures` with seeded random weights.
FIXTURES = {
    "fixture.UNet.bottomup": ("minimal_instance.UNet.bottomup", {"filters": 4}),
    "fixture.UNet.bottomup_multiclass": (
        "min_tracks_2node.UNet.bottomup_multiclass",
        {"filters": 4},
    ),
    "fixture.UNet.topdown_multiclass": (
        "min_tracks_2node.UNet.topdown_multiclass",
        {"filters": 4, "num_fc_units": 8},
    ),
}
# Network-only cases: (folder, clip, side of the top-left square of the frames fed).
NETWORK_CASES = {
    "bottomup": ("fixture.UNet.bottomup", "flies.mkv", 96),
    "bottomup_multiclass": ("fixture.UNet.bottomup_multiclass", "flies.mkv", 96),
    "topdown_multiclass": ("fixture.UNet.topdown_multiclass", "flies.mkv", 128),
}


def build_sleap_unet(config: dict, channels: int, seed: int):
    """The tf-keras model SLEAP 1.4 builds for a UNet config (`UNet.from_config`,
    `Model.make_model`), layer names included; seeded random weights."""
    import tensorflow as tf
    import tf_keras
    from tf_keras import layers

    tf.random.set_seed(seed)
    unet = config["model"]["backbone"]["unet"]
    head_key, head = next((k, v) for k, v in config["model"]["heads"].items() if v)
    filters, rate = unet["filters"], unet["filters_rate"]
    down = int(np.log2(unet["max_stride"]))
    confmaps = head.get("confmaps") or head
    up = int(np.log2(unet["max_stride"] // confmaps["output_stride"]))

    def level(n: int) -> int:
        return int(filters * rate**n)

    def convs(x, n_filters, prefix, count):
        for j in range(count):
            x = layers.Conv2D(n_filters, 3, padding="same", name=f"{prefix}_conv{j}")(x)
            x = layers.Activation("relu", name=f"{prefix}_act{j}_relu")(x)
        return x

    x_in = layers.Input((None, None, channels), name="input")
    x, skips = x_in, {}
    for b in range(down):
        if b > 0:
            x = layers.MaxPool2D(2, 2, padding="same", name=f"stack0_enc{b}_pool")(x)
        x = convs(x, level(b), f"stack0_enc{b}", 2)
        skips[2**b] = x
    x = layers.MaxPool2D(2, 2, padding="same", name=f"stack0_enc{down}_last_pool")(x)
    if unet["middle_block"]:
        x = convs(x, level(down), f"stack0_enc{down + 1}_middle_expand", 1)
        x = convs(x, level(down), f"stack0_enc{down + 2}_middle_contract", 1)
    features, stride = {2**down: x}, 2**down
    for i in range(up):
        prefix = f"stack0_dec{i}_s{stride}_to_s{stride // 2}"
        out = level(down - 1 - i)
        if unet["up_interpolate"]:
            name = f"{prefix}_interp_bilinear"
            x = layers.UpSampling2D(2, interpolation="bilinear", name=name)(x)
        else:
            x = layers.Conv2DTranspose(out, 3, 2, padding="same", name=f"{prefix}_trans_conv")(x)
            x = layers.Activation("relu", name=f"{prefix}_trans_conv_act_relu")(x)
        x = layers.Concatenate(name=f"{prefix}_skip_concat")([skips[stride // 2], x])
        for j in range(2):
            x = layers.Conv2D(out, 3, padding="same", name=f"{prefix}_refine_conv{j}")(x)
            x = layers.Activation("relu", name=f"{prefix}_refine_conv{j}_act_relu")(x)
        stride //= 2
        features[stride] = x
    outputs = []

    def conv_head(name, config_part, n_channels, activation="linear"):
        feature = features[config_part["output_stride"]]
        conv = layers.Conv2D(n_channels, 1, activation=activation, name=f"{name}_0")
        outputs.append(conv(feature))

    parts = len(confmaps["part_names"])
    if head_key == "multi_instance":
        conv_head("MultiInstanceConfmapsHead", confmaps, parts)
        conv_head("PartAffinityFieldsHead", head["pafs"], 2 * len(head["pafs"]["edges"]))
        if confmaps.get("offset_refinement"):
            conv_head("OffsetRefinementHead", confmaps, 2 * parts)
    elif head_key == "multi_class_bottomup":
        conv_head("MultiInstanceConfmapsHead", confmaps, parts)
        class_maps = head["class_maps"]
        conv_head("ClassMapsHead", class_maps, len(class_maps["classes"]), "sigmoid")
    elif head_key == "multi_class_topdown":
        conv_head("CenteredInstanceConfmapsHead", confmaps, parts)
        vectors = head["class_vectors"]
        pool = layers.GlobalMaxPool2D(name="pre_classification_global_pool")
        v = pool(features[vectors["output_stride"]])
        v = layers.Flatten(name="pre_classification_flatten")(v)
        for i in range(vectors["num_fc_layers"]):
            v = layers.Dense(vectors["num_fc_units"], name=f"pre_classification{i}_fc")(v)
            v = layers.Activation("relu", name=f"pre_classification{i}_relu")(v)
        classes = len(vectors["classes"])
        outputs.append(layers.Dense(classes, activation="softmax", name="ClassVectorsHead_0")(v))
    # Random biases too, so that every weight is checked.
    model = tf_keras.Model(x_in, outputs)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if len(weights) == 2:
            layer.set_weights([weights[0], rng.normal(0, 0.1, weights[1].shape).astype(np.float32)])
    return model


def make_fixtures(sleap_models: Path) -> None:
    for seed, (name, (source, changes)) in enumerate(FIXTURES.items()):
        config = json.loads((sleap_models / source / "training_config.json").read_text())
        unet = config["model"]["backbone"]["unet"]
        unet["filters"] = changes["filters"]
        if "num_fc_units" in changes:
            config["model"]["heads"]["multi_class_topdown"]["class_vectors"]["num_fc_units"] = (
                changes["num_fc_units"]
            )
        folder = MODELS / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "training_config.json").write_text(json.dumps(config, indent=2))
        model = build_sleap_unet(config, channels=1, seed=seed)
        model.save(folder / "best_model.h5", include_optimizer=False)
        print(folder, (folder / "best_model.h5").stat().st_size, "bytes")


def golden_network(name: str) -> None:
    folder, clip, crop = NETWORK_CASES[name]
    frames = decode(CLIPS / clip)[:MAP_FRAMES]
    if crop:
        frames = frames[:, :crop, :crop]
    model = KerasModel(MODELS / folder)
    maps = model.run(frames)
    path = GOLDENS / f"legacy_{name}.npz"
    np.savez_compressed(path, **{f"maps_{key}": value for key, value in maps.items()})
    print(path, path.stat().st_size, "bytes", {k: v.shape for k, v in maps.items()})


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


def make_clips(sleap_repo: Path) -> None:
    CLIPS.mkdir(parents=True, exist_ok=True)
    for name, (source, indices, gray) in CLIP_SOURCES.items():
        frames = decode(sleap_repo / source)[list(indices)]
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
        self.model = tf_keras.models.load_model(folder / "best_model.h5", compile=False)
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


def golden_topdown(models: list[KerasModel], frames: np.ndarray) -> dict[str, np.ndarray]:
    centroid, instance = models
    maps = centroid.run(frames)
    golden = {f"maps_{name}": value[:MAP_FRAMES] for name, value in maps.items()}
    found = local_peaks(maps["CentroidConfmapsHead"], maps.get("OffsetRefinementHead"))
    size = int(instance.crop_size)
    per_frame = []
    for i, (grid, _values) in enumerate(found):
        centers = centroid.to_image(grid)
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
    most = max(len(points) for points, _ in per_frame)
    nodes = max(points.shape[1] for points, _ in per_frame)
    all_points = np.full((len(frames), most, nodes, 2), np.nan, np.float32)
    all_scores = np.full((len(frames), most, nodes), np.nan, np.float32)
    for i, (points, values) in enumerate(per_frame):
        all_points[i, : len(points)] = points
        all_scores[i, : len(points)] = values
    golden.update(
        points=all_points,
        scores=all_scores,
        counts=np.array([len(points) for points, _ in per_frame]),
        centroids=np.concatenate([centroid.to_image(grid) for grid, _ in found]),
    )
    return golden


def make_goldens(names: list[str]) -> None:
    makers = {"single_instance": golden_single_instance, "topdown": golden_topdown}
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
        make_clips(Path(sys.argv[2]))
    elif stage == "fixtures":
        make_fixtures(Path(sys.argv[2]))
    elif stage == "goldens":
        make_goldens(sys.argv[2:])
        for name in NETWORK_CASES:
            golden_network(name)
    elif stage == "sleap-nn":
        sleap_nn_reference()
    else:
        raise SystemExit(f"unknown stage {stage!r}: clips, fixtures, goldens or sleap-nn")


if __name__ == "__main__":
    main()
