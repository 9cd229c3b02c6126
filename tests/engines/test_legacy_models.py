"""SLEAP 1.x model folders (training_config.json + Keras best_model.h5) against Keras.

The goldens come from tf-keras running the real SLEAP 1.x test models on real frames
(`scripts/make_legacy_goldens.py`, in a TensorFlow venv of its own): the network's
outputs per head, and the instances SLEAP 1.x's inference gives on them.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio
import torch

from sleap_live import cli
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.graph.fp32 import relative_error
from sleap_live.engines.graph.legacy_peaks import sleap1_crops
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    frame_input,
    frames_to_nchw,
    network_input,
)
from sleap_live.engines.host.outputs import KEEP_UNCLASSIFIED
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.export_cache import cache_key
from sleap_live.engines.settings import LEGACY_SLEAP_NN, InferenceSettings
from tests.engines import goldens

DATA = Path(__file__).resolve().parents[1] / "data"
MODELS = DATA / "legacy_models"
GOLDENS = DATA / "goldens"
SINGLE = MODELS / "minimal_robot.UNet.single_instance"
ROBOT = MODELS / "clips" / "robot.mp4"
CENTROID = MODELS / "minimal_instance.UNet.centroid"
CENTERED = MODELS / "minimal_instance.UNet.centered_instance"
FLIES = MODELS / "clips" / "flies.mkv"
# SLEAP 1.x's own poses (Keras, TensorFlow's resize and peak rules as ported): the
# port's agreement, a few times the largest difference measured on these clips.
KERAS_POINTS_TOLERANCE = 0.01
SCORE_TOLERANCE = 1e-4


def assert_maps_agree(ours: np.ndarray, keras: np.ndarray, network: torch.nn.Module, name: str):
    """A network's maps against Keras's by what float32 promises for that network
    (`graph.fp32`: unit roundoff x its summed contraction lengths, relative to
    `max(1, |value|)`), not by what one CPU measured."""
    relative = np.abs(ours - keras) / np.maximum(1.0, np.abs(keras))
    assert relative.max() <= relative_error(network), name


def points_bound(models, settings: InferenceSettings | None = None) -> float:
    """The float32 bound of two correct runs' points for the model in `models`."""
    return goldens.bound_of(tuple(Path(m) for m in models), settings).points_px


def _frames(path: Path, gray: bool = False) -> np.ndarray:
    """The frames as sleap-live's file source reads them: a gray picture stored as
    YUV is its red plane."""
    with av.open(str(path)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    return frames[..., :1] if gray else frames


def _golden(name: str) -> dict[str, np.ndarray]:
    with np.load(GOLDENS / f"legacy_{name}.npz") as golden:
        return dict(golden)


def _torch_points(
    model_dir: Path | list[Path], frames: np.ndarray, settings: InferenceSettings
) -> np.ndarray:
    model = load_inference_model(model_dir, settings)
    with torch.no_grad():
        return model(torch.from_numpy(frames))[1].numpy()


def test_single_instance_folder_reads_as_sleap_1x_says():
    spec = read_model_dir(SINGLE)
    assert spec.model_type == "single_instance"
    assert spec.skeleton.node_names == ("A", "B")
    assert spec.in_channels == 3 and spec.max_stride == 4
    assert spec.preprocess.scale == 0.5
    assert spec.legacy is not None and spec.legacy.offset_heads == ()
    assert spec.checkpoint_path == SINGLE / "best_model.h5"


def test_a_sleap_1x_folder_has_an_export_cache_key_from_its_bytes(tmp_path):
    """So that `sleap-live run` exports it once, and again only when its files change."""
    key = cache_key([SINGLE], {})
    assert key is not None
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("training_config.json", "best_model.h5"):
        (copy / name).write_bytes((SINGLE / name).read_bytes())
    assert cache_key([copy], {}) == key
    with (copy / "best_model.h5").open("ab") as weights:
        weights.write(b"\0")
    changed = cache_key([copy], {})
    assert changed is not None and changed.digest != key.digest


def test_single_instance_network_matches_keras():
    golden = _golden("single_instance")
    keras_maps = golden["maps_SingleInstanceConfmapsHead"]
    model = load_inference_model(SINGLE)
    frames = torch.from_numpy(_frames(ROBOT)[: len(keras_maps)])
    with torch.no_grad():
        image, _ = frame_input(frames_to_nchw(frames), model.preprocess)
        maps = model.network(image)["SingleInstanceConfmapsHead"]
    ours = maps.permute(0, 2, 3, 1).numpy()
    assert_maps_agree(ours, keras_maps, model.network, "SingleInstanceConfmapsHead")


def test_single_instance_runs_from_the_command_line_as_sleap_1x(tmp_path, warm_export_cache):
    """`sleap-live run -m LEGACY_DIR` (exported to ONNX): SLEAP 1.x's points, and the
    torch module's within the float32 bound."""
    golden = _golden("single_instance")
    out = tmp_path / "poses.slp"
    assert (
        cli.main(["run", str(ROBOT), "-m", str(SINGLE), "-o", str(out), "-q", "--engine", "onnx"])
        == 0
    )
    labels = sio.load_slp(str(out), open_videos=False)
    assert [len(frame.instances) for frame in labels] == list(golden["counts"])
    assert [n.name for n in labels.skeletons[0].nodes] == ["A", "B"]
    exported = np.stack([frame.instances[0].numpy() for frame in labels])
    keras = golden["points"][:, 0]
    assert np.abs(exported - keras).max() < KERAS_POINTS_TOLERANCE
    torch_points = _torch_points(SINGLE, _frames(ROBOT), InferenceSettings())
    assert np.abs(exported - torch_points).max() <= points_bound([SINGLE])


def test_single_instance_sleap_nn_conventions_match_sleap_nn_predict():
    reference = _golden("single_instance_sleap_nn")
    settings = InferenceSettings(legacy_postprocess=LEGACY_SLEAP_NN)
    points = _torch_points(SINGLE, _frames(ROBOT), settings)
    distance = np.abs(points[reference["frames"]] - reference["points"]).max()
    assert distance <= points_bound([SINGLE], settings)


@pytest.mark.parametrize(
    ("backbone", "kind"),
    [
        ("leap", "LEAP CNN"),
        ("hourglass", "stacked hourglass"),
        ("resnet", "ResNet"),
        ("pretrained_encoder", "pretrained-encoder UNet"),
    ],
)
def test_a_sleap_1x_backbone_other_than_unet_is_refused(backbone, kind, tmp_path):
    """The committed LEAP fixture folder, and copies of it naming the other backbones."""
    folder = MODELS / "leap_cnn"
    if backbone != "leap":
        config = json.loads((folder / "training_config.json").read_text())
        backbones = config["model"]["backbone"]
        backbones[backbone] = backbones.pop("leap")
        folder = tmp_path / backbone
        folder.mkdir()
        (folder / "training_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelConfigError) as refused:
        read_model_dir(folder)
    assert str(refused.value) == (
        f"{folder}: a SLEAP 1.x {kind} model; sleap-live runs only SLEAP 1.x UNet models"
    )


def test_the_refusal_comes_before_any_work(tmp_path, capsys):
    folder = MODELS / "leap_cnn"
    out = tmp_path / "poses.slp"
    assert cli.main(["run", str(ROBOT), "-m", str(folder), "-o", str(out), "-q"]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "LEAP CNN" in error[0] and str(folder) in error[0]
    assert not out.exists()


def test_topdown_networks_match_keras():
    """Centroid maps and offsets on frames, instance maps and offsets on SLEAP 1.x's
    crops around Keras's centroids."""
    golden = _golden("topdown")
    model = load_inference_model([CENTROID, CENTERED])
    frames = torch.from_numpy(_frames(FLIES, gray=True))
    n_map_frames = len(golden["maps_CentroidConfmapsHead"])
    with torch.no_grad():
        image, _ = frame_input(frames_to_nchw(frames[:n_map_frames]), model.stage.preprocess)
        heads = model.stage.network(image)
        for name in ("CentroidConfmapsHead", "OffsetRefinementHead"):
            ours = heads[name].permute(0, 2, 3, 1).numpy()
            assert_maps_agree(ours, golden[f"maps_{name}"], model.stage.network, name)
        n_crops = int(golden["counts"][:n_map_frames].sum())
        frame_of_crop = torch.repeat_interleave(
            torch.arange(n_map_frames), torch.from_numpy(golden["counts"][:n_map_frames])
        )
        centroids = torch.from_numpy(golden["centroids"][:n_crops])
        crops = sleap1_crops(frames, frame_of_crop, centroids, model.crop_size)
        image = network_input(crops.permute(0, 3, 1, 2), model.instance_preprocess)
        heads = model.instance_network(image)
    for name in ("CenteredInstanceConfmapsHead", "OffsetRefinementHead"):
        ours = heads[name].permute(0, 2, 3, 1).numpy()
        assert_maps_agree(ours, golden[f"instance_maps_{name}"], model.instance_network, name)


def test_topdown_runs_from_the_command_line_as_sleap_1x(tmp_path, warm_export_cache):
    """Centroid + centered-instance folders: as many instances as SLEAP 1.x on every
    frame, its points to 0.01 px, the ONNX export's points the torch module's within
    the float32 bound."""
    golden = _golden("topdown")
    out = tmp_path / "poses.slp"
    models = ["-m", str(CENTROID), "-m", str(CENTERED)]
    argv = ["run", str(FLIES), *models, "-o", str(out), "-q", "--engine", "onnx"]
    assert cli.main(argv) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    by_frame = {frame.frame_idx: frame for frame in labels}
    counts = [
        len(by_frame[i].instances) if i in by_frame else 0 for i in range(len(golden["counts"]))
    ]
    assert counts == list(golden["counts"])
    model = load_inference_model([CENTROID, CENTERED])
    with torch.no_grad():
        instance_frame, torch_points = (
            output.numpy() for output in model(torch.from_numpy(_frames(FLIES, gray=True)))[:2]
        )
    worst_keras = worst_torch = 0.0
    for i, count in enumerate(golden["counts"]):
        if not count:
            continue
        exported = np.stack([instance.numpy() for instance in by_frame[i].instances])
        keras = golden["points"][i, :count]
        ours = torch_points[instance_frame == i]
        assert (np.isnan(exported) == np.isnan(keras)).all()
        worst_keras = max(worst_keras, float(np.nanmax(np.abs(_matched(exported, keras)))))
        worst_torch = max(worst_torch, float(np.nanmax(np.abs(_matched(exported, ours)))))
    assert worst_keras < KERAS_POINTS_TOLERANCE
    assert worst_torch <= points_bound([CENTROID, CENTERED])


def test_a_sleap_1x_centroid_model_pairs_with_a_sleap_nn_instance_model():
    """Each stage keeps its own conventions: SLEAP 1.x's centroid stage (offset head,
    its resize and coordinates), sleap-nn's crops and peaks for the sleap-nn model.
    The frame preprocessing follows sleap-nn's pairing rule (the instance model's
    size matcher where the centroid model has none)."""
    model = load_inference_model([CENTROID, DATA / "models" / "centered_instance"])
    assert model.stage.sleap1 and model.stage.preprocess.sleap1_resize
    assert not model.instance_sleap1 and not model.instance_preprocess.sleap1_resize
    with torch.no_grad():
        instance_frame, points, *_ = model(torch.from_numpy(_frames(FLIES, gray=True)[:1]))
    assert len(instance_frame) > 0 and points.shape[1:] == (model.info.skeleton.n_nodes, 2)


BOTTOMUP = MODELS / "minimal_instance.UNet.bottomup"
BOTTOMUP_MULTICLASS = MODELS / "min_tracks_2node.UNet.bottomup_multiclass"
TOPDOWN_MULTICLASS = MODELS / "min_tracks_2node.UNet.topdown_multiclass"
TRACKS = MODELS / "clips" / "tracks.mkv"
# SLEAP's real test models, each on real frames: case -> (folders, clip).
GROUPED_CASES = {
    "bottomup": ([BOTTOMUP], FLIES),
    "bottomup_multiclass": ([BOTTOMUP_MULTICLASS], TRACKS),
    "topdown_multiclass": ([CENTROID, TOPDOWN_MULTICLASS], FLIES),
}


@pytest.mark.parametrize(
    ("case", "model_type"),
    [
        ("bottomup", "bottomup"),
        ("bottomup_multiclass", "multi_class_bottomup"),
        ("topdown_multiclass", "multi_class_topdown"),
    ],
)
def test_bottomup_and_multi_class_folders_build_their_inference_models(case, model_type):
    """The SLEAP 1.x conventions reach every model type; the skeleton and classes
    come from the legacy config."""
    folders, _clip = GROUPED_CASES[case]
    model = load_inference_model(folders)
    assert model.info.model_type == model_type
    spec = read_model_dir(folders[-1])
    assert model.info.skeleton.node_names == spec.skeleton.node_names
    assert model.info.class_names == spec.class_names
    sleap1 = model.instance_sleap1 if model_type == "multi_class_topdown" else model.sleap1
    assert sleap1


def _matched(found: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """`found - reference` with each found instance paired to the nearest reference one
    (the .slp keeps the graph's instance order, which is SLEAP 1.x's raster order)."""
    distance = np.nanmean(np.abs(found[:, None] - reference[None]), axis=(2, 3))
    return found - reference[distance.argmin(axis=1)]


@pytest.mark.parametrize("case", ["bottomup", "bottomup_multiclass"])
def test_bottomup_networks_match_keras(case):
    """Every head (confidence maps, PAFs, offsets, class maps) on a real frame,
    preprocessed as SLEAP 1.x did."""
    golden = _golden(case)
    (folder,), clip = GROUPED_CASES[case]
    spec = read_model_dir(folder)
    network = load_model_network(spec)
    frames = torch.from_numpy(_frames(clip, gray=True)[:1])
    with torch.no_grad():
        image, _ = frame_input(frames_to_nchw(frames), PreprocessConfig.from_spec(spec))
        heads = network(image)
    assert {f"maps_{name}" for name in heads} == {k for k in golden if k.startswith("maps_")}
    for name, output in heads.items():
        ours = output.permute(0, 2, 3, 1).numpy()
        # The multi-class network's float32 rounding alone moves its outputs by 2.5e-5
        # (torch float32 against float64; Keras's float32 is 2.6e-5 from float64).
        assert_maps_agree(ours, golden[f"maps_{name}"], network, name)


def test_multi_class_topdown_network_matches_keras():
    """The instance network's confidence maps and class vectors on SLEAP 1.x's crops
    around Keras's centroids."""
    golden = _golden("topdown_multiclass")
    model = load_inference_model([CENTROID, TOPDOWN_MULTICLASS])
    frames = torch.from_numpy(_frames(FLIES, gray=True))
    counts = torch.from_numpy(golden["centroid_counts"])
    frame_of_crop = torch.repeat_interleave(torch.arange(len(counts)), counts)
    crops = sleap1_crops(frames, frame_of_crop, torch.from_numpy(golden["centroids"]), 128)
    with torch.no_grad():
        image = network_input(crops.permute(0, 3, 1, 2), model.instance_preprocess)
        heads = model.instance_network(image)
    vectors = heads["ClassVectorsHead"].numpy()
    keras = golden["instance_maps_ClassVectorsHead"]
    assert_maps_agree(vectors, keras, model.instance_network, "ClassVectorsHead")
    maps = golden["instance_maps_CenteredInstanceConfmapsHead"]
    ours = heads["CenteredInstanceConfmapsHead"][: len(maps)].permute(0, 2, 3, 1).numpy()
    assert_maps_agree(ours, maps, model.instance_network, "CenteredInstanceConfmapsHead")


@pytest.mark.parametrize("case", list(GROUPED_CASES))
def test_grouped_models_give_sleap_1x_poses(case):
    """SLEAP 1.x's instances on every frame: the same count, points to 0.01 px,
    peak values, and for the multi-class models the same class for each instance
    (SLEAP 1.x's one instance per class, in class order); for bottom-up the PAF
    grouping score. The goldens ran SLEAP 1.x's own grouping code on Keras's maps."""
    golden = _golden(case)
    folders, clip = GROUPED_CASES[case]
    model = load_inference_model(folders)
    frames = _frames(clip, gray=True)
    with torch.no_grad():
        outputs = model(torch.from_numpy(frames))
    named = {name: output.numpy() for name, output in zip(model.output_names, outputs, strict=True)}
    poses = decode(model.info, named, len(frames))
    assert [frame.n_instances for frame in poses] == list(golden["counts"])
    assert sum(golden["counts"]) >= 4
    for i, frame in enumerate(poses):
        count = int(golden["counts"][i])
        keras = golden["points"][i, :count]
        if "identities" in golden:
            assert frame.identities.tolist() == golden["identities"][i, :count].tolist()
            order = np.arange(count)
        else:
            order = _nearest(frame.points, keras)
        assert (np.isnan(frame.points) == np.isnan(keras[order])).all()
        assert np.nanmax(np.abs(frame.points - keras[order]), initial=0) < KERAS_POINTS_TOLERANCE
        scores = golden["scores"][i, :count][order]
        assert np.nanmax(np.abs(frame.point_scores - scores), initial=0) < SCORE_TOLERANCE
        if "instance_scores" in golden:
            paf_scores = golden["instance_scores"][i, :count][order]
            assert np.abs(frame.instance_scores - paf_scores).max(initial=0) < SCORE_TOLERANCE


def test_sleap_nn_conventions_keep_the_instances_no_class_was_given():
    """With `--legacy-postprocess sleap-nn` a multi-class top-down pair keeps, as
    sleap-nn does, the crops left without a class (identity -1), which SLEAP 1.x
    drops: on these frames there are more crops than classes."""
    golden = _golden("topdown_multiclass")
    settings = InferenceSettings(legacy_postprocess=LEGACY_SLEAP_NN)
    model = load_inference_model([CENTROID, TOPDOWN_MULTICLASS], settings)
    assert model.info.postprocess[KEEP_UNCLASSIFIED]
    frames = _frames(FLIES, gray=True)
    with torch.no_grad():
        outputs = model(torch.from_numpy(frames))
    named = {name: output.numpy() for name, output in zip(model.output_names, outputs, strict=True)}
    poses = decode(model.info, named, len(frames))
    unclassified = sum(int((frame.identities == -1).sum()) for frame in poses)
    assert unclassified > 0
    assert [frame.n_instances for frame in poses] != list(golden["counts"])


def _nearest(found: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Index of the reference instance nearest each found one."""
    distance = np.nanmean(np.abs(found[:, None] - reference[None]), axis=(2, 3))
    return distance.argmin(axis=1)
