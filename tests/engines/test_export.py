"""Tests for sleap_live.engines.export and sleap_live.engines.load.metadata."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import onnx
import pytest
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export import export_model
from sleap_live.engines.export.exporter import (
    export_file,
    export_graph,
)
from sleap_live.engines.export.frames import check_batches, sample_frames, verification_frames
from sleap_live.engines.export.torchscript import load_torchscript, read_torchscript_metadata
from sleap_live.engines.export.verify import Exported, compare
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.host.agreement import DISAGREEMENT, NOISE
from sleap_live.engines.host.outputs import INSTANCE_OUTPUTS
from sleap_live.engines.load.metadata import (
    METADATA_KEY,
    ExportMetadata,
    info_from_dict,
    info_to_dict,
    read_onnx_info,
    read_onnx_metadata,
    sidecar_path,
)
from sleap_live.engines.runners.load import load_runner
from sleap_live.stream.runner import first_frames

DATA = Path(__file__).parents[1] / "data"
MODELS = DATA / "models"
# Every trained fixture model (pairs are top-down), with the test clip it was made for.
FIXTURE_MODELS = {
    "single_instance": (("single_instance",), "single.mkv"),
    "centroid": (("centroid",), "multi_gray.mkv"),
    "topdown": (("centroid", "centered_instance"), "multi_gray.mkv"),
    "bottomup": (("bottomup",), "multi_gray.mkv"),
    "centroid_rgb": (("centroid_rgb",), "multi_rgb.mp4"),
    "multi_class_topdown": (("centroid_rgb", "multi_class_topdown"), "multi_rgb.mp4"),
    "multi_class_bottomup": (("multi_class_bottomup",), "multi_rgb.mp4"),
}


def video_frames(name: str, count: int = 5) -> np.ndarray:
    """The first frames of a test clip as the decoders hand them (gray clips: 1 channel)."""
    path = DATA / "videos" / name
    pixel_format = "gray" if path.suffix == ".mkv" else "rgb24"
    with av.open(str(path)) as container:
        frames = [
            frame.to_ndarray(format=pixel_format)
            for _, frame in zip(range(count), container.decode(video=0), strict=False)
        ]
    return np.stack([frame.reshape(*frame.shape[:2], -1) for frame in frames])


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def toy_onnx(tmp_path_factory, toy_models):
    model = toy_models.ToyInstanceModel()
    path = export_graph(model, tmp_path_factory.mktemp("onnx"))
    return model, path


def test_onnx_export_writes_model_and_sidecar_with_the_same_metadata(toy_onnx):
    model, path = toy_onnx
    assert path.name == "model.onnx"
    embedded = read_onnx_metadata(path)
    sidecar = ExportMetadata.from_json(sidecar_path(path).read_text())
    assert embedded.to_dict() == sidecar.to_dict()
    assert read_onnx_info(path) == model.info
    assert embedded.format == "onnx"
    assert embedded.input_name == "frames"
    assert embedded.input_channels == (1, 3)
    assert embedded.output_names == INSTANCE_OUTPUTS
    assert embedded.exporter["opset"] == 17


def test_onnx_export_is_verified_at_two_frame_sizes_within_tolerance(toy_onnx):
    _, path = toy_onnx
    checks = read_onnx_metadata(path).verification
    # No frames given and no training labels: synthetic frames, the second batch
    # on a larger canvas of odd size.
    assert [check["frames"] for check in checks] == [[2, 240, 320, 3], [3, 263, 357, 3]]
    for check in checks:
        assert check["frame_source"].startswith("synthetic frames")
        assert len(check["detections"]) == check["frames"][0]
        assert all(count > 0 for count in check["detections"])
        assert check["instances"] >= sum(check["detections"])
        assert set(check["max_abs_diff"]) == set(INSTANCE_OUTPUTS)
        assert check["agreement"] == NOISE and check["ties"] == 0
        assert "from the graph" in check["bound"]


def test_onnx_graph_has_dynamic_frame_axes_and_instance_counts(toy_onnx):
    _, path = toy_onnx
    graph = onnx.load(str(path)).graph
    (frames,) = graph.input
    dims = [dim.dim_param or dim.dim_value for dim in frames.type.tensor_type.shape.dim]
    assert dims == ["batch", "height", "width", "channels"]
    assert frames.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    for output in graph.output:
        assert output.type.tensor_type.shape.dim[0].dim_param == "instances"


def test_onnx_export_runs_in_bare_onnxruntime_without_sleap_live(toy_onnx, tmp_path, toy_models):
    model, path = toy_onnx
    frames = sample_frames(2, 150, 190, 1, seed=5)
    np.save(tmp_path / "frames.npy", frames)
    script = (
        "import json, sys, numpy as np, onnxruntime as ort\n"
        f"session = ort.InferenceSession({str(path)!r}, providers=['CPUExecutionProvider'])\n"
        f"meta = json.loads(session.get_modelmeta().custom_metadata_map[{METADATA_KEY!r}])\n"
        f"frames = np.load({str(tmp_path / 'frames.npy')!r})\n"
        "outputs = session.run(meta['outputs'], {meta['input']['name']: frames})\n"
        f"np.savez({str(tmp_path / 'out.npz')!r}, *outputs)\n"
        "assert not any(name.startswith('sleap_live') for name in sys.modules)\n"
        "assert 'torch' not in sys.modules\n"
        "print(meta['model']['skeleton']['node_names'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "'head', 'body', 'tail'" in done.stdout
    with np.load(tmp_path / "out.npz") as bare:
        outputs = [bare[f"arr_{index}"] for index in range(len(INSTANCE_OUTPUTS))]
    expected = toy_models.eager_outputs(model, frames)
    assert outputs[0].shape[0] > 0
    reference = dict(zip(INSTANCE_OUTPUTS, map(np.asarray, expected), strict=True))
    agreement = compare(model, frames, reference, dict(zip(INSTANCE_OUTPUTS, outputs, strict=True)))
    assert agreement.outcome == NOISE, agreement.summary()


def test_torchscript_export_round_trips_with_metadata(tmp_path, toy_models):
    model = toy_models.ToyInstanceModel(input_channels=1)
    path = export_graph(model, tmp_path / "toy.pt", format="torchscript")
    assert path == tmp_path / "toy.pt"
    metadata = read_torchscript_metadata(path)
    assert metadata.info == model.info
    assert metadata.format == "torchscript"
    assert "opset" not in metadata.exporter
    assert metadata.to_dict() == json.loads(sidecar_path(path).read_text())
    loaded = load_torchscript(path)
    assert loaded.info == model.info and loaded.output_names == INSTANCE_OUTPUTS
    frames = sample_frames(3, 111, 177, 3, seed=9)
    eager = toy_models.eager_outputs
    for got, want in zip(eager(loaded, frames), eager(model, frames), strict=True):
        np.testing.assert_array_equal(got, want)


def test_verification_catches_shapes_frozen_by_tracing(tmp_path, toy_models):
    for format in ("onnx", "torchscript"):
        with pytest.raises(
            ExportError, match=r"differs from the torch model on 3×263×357×3"
        ) as error:
            export_graph(toy_models.FrozenSizeModel(), tmp_path, format=format)
        assert "points" in str(error.value)
        assert "Converting a tensor to a Python float" in str(error.value)
    assert not list(tmp_path.iterdir())


def test_unverified_export_skips_the_comparison_and_takes_only_its_own_channels(
    tmp_path, toy_models
):
    path = export_graph(toy_models.FrozenSizeModel(), tmp_path, verify=False)
    metadata = read_onnx_metadata(path)
    assert metadata.verification is None
    assert metadata.input_channels == (3,)
    (frames,) = onnx.load(str(path)).graph.input
    assert frames.type.tensor_type.shape.dim[3].dim_value == 3


def test_graph_that_cannot_convert_channels_gets_a_fixed_channel_input(tmp_path, toy_models):
    model = toy_models.BranchingChannelsModel(input_channels=1)
    path = export_graph(model, tmp_path, verify_frames=sample_frames(3, 64, 80, 1))
    metadata = read_onnx_metadata(path)
    assert metadata.input_channels == (1,)
    (frames,) = onnx.load(str(path)).graph.input
    assert frames.type.tensor_type.shape.dim[3].dim_value == 1
    # The fixed-channel graph is verified again, on the given frames' two sizes.
    assert [check["frames"] for check in metadata.verification] == [
        [2, 64, 80, 1],
        [3, 87, 117, 1],
    ]
    assert {check["frame_source"] for check in metadata.verification} == {"the given frames"}


def test_onnx_export_of_an_unsupported_operator_is_one_clear_error(tmp_path, toy_models, capfd):
    with pytest.raises(ExportError, match=r"_upsample_bilinear2d_aa.*try --format torchscript"):
        export_graph(toy_models.AntialiasedModel(), tmp_path)
    assert "graph" not in capfd.readouterr().out
    path = export_graph(toy_models.AntialiasedModel(), tmp_path, format="torchscript")
    assert read_torchscript_metadata(path).input_channels == (1, 3)


def test_sources_are_recorded_with_their_training_config_hash(tmp_path, toy_models):
    model_dir = tmp_path / "centroid"
    model_dir.mkdir()
    (model_dir / "training_config.yaml").write_text("model_config: {}\n")
    path = export_graph(
        toy_models.ToyInstanceModel(), tmp_path / "out.onnx", verify=False, sources=[model_dir]
    )
    (source,) = read_onnx_metadata(path).sources
    assert source == {
        "path": str(model_dir.resolve()),
        "training_config": "training_config.yaml",
        "sha256": hashlib.sha256(b"model_config: {}\n").hexdigest(),
    }


def test_bad_arguments_are_rejected(tmp_path, toy_models):
    model = toy_models.ToyInstanceModel()
    with pytest.raises(ValueError, match="unknown export format 'tensorrt'"):
        export_graph(model, tmp_path, format="tensorrt")
    with pytest.raises(ValueError, match=r"torchscript exports are written to '\.pt' files"):
        export_graph(model, tmp_path / "m.onnx", format="torchscript")
    with pytest.raises(ValueError, match="expected uint8"):
        export_graph(model, tmp_path, verify_frames=np.zeros((1, 8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="frames of one size"):
        export_graph(
            model,
            tmp_path,
            verify_frames=[sample_frames(1, 40, 40, 3), sample_frames(1, 41, 40, 3)],
        )
    with pytest.raises(ValueError, match="no frames given"):
        export_graph(model, tmp_path, verify_frames=np.zeros((0, 8, 8, 3), np.uint8))
    assert not list(tmp_path.iterdir())


def test_an_output_that_is_an_existing_file_is_refused_before_exporting(tmp_path, capsys):
    from sleap_live import cli

    video = tmp_path / "clip.mp4"
    video.write_bytes(b"a user's video")
    assert cli.main(["export", str(MODELS / "single_instance"), "-o", str(video)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"sleap-live: error: {video}: a file, not a folder; give a new '.onnx' path or a folder"
    ]
    notes = tmp_path / "notes"  # a file without a suffix: taken for a folder before
    notes.write_bytes(b"a user's notes")
    with pytest.raises(ValueError, match=r"notes: a file, not a folder; give a new '\.pt2' path"):
        export_file(notes, "model.pt2", "a pt2 export is a '.pt2' file")
    assert video.read_bytes() == b"a user's video"
    assert notes.read_bytes() == b"a user's notes"
    assert sorted(tmp_path.iterdir()) == [video, notes]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_reading_metadata_from_foreign_files_fails_clearly(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no such ONNX file"):
        read_onnx_info(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelConfigError, match=r"junk\.onnx: not a readable ONNX model"):
        read_onnx_info(tmp_path / "junk.onnx")
    plain = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["x"], ["y"])],
            "plain",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
        )
    )
    onnx.save(plain, str(tmp_path / "plain.onnx"))
    with pytest.raises(ModelConfigError, match="not exported by sleap-live"):
        read_onnx_info(tmp_path / "plain.onnx")
    torch.jit.save(torch.jit.script(torch.nn.Identity()), str(tmp_path / "plain.pt"))
    with pytest.raises(ModelConfigError, match=r"plain\.pt: no sleap-live metadata"):
        read_torchscript_metadata(tmp_path / "plain.pt")


def test_metadata_documents_are_validated(toy_onnx):
    _, path = toy_onnx
    document = read_onnx_metadata(path).to_dict()
    with pytest.raises(ModelConfigError, match=r"x\.json: not sleap-live export metadata"):
        ExportMetadata.from_dict({**document, "schema": "other"}, "x.json")
    with pytest.raises(ModelConfigError, match="schema version 9 is not supported"):
        ExportMetadata.from_dict({**document, "schema_version": 9})
    with pytest.raises(ModelConfigError, match="malformed export metadata"):
        ExportMetadata.from_dict({key: v for key, v in document.items() if key != "input"})
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        ExportMetadata.from_json("{")
    with pytest.raises(ModelConfigError, match="unknown model type 'yolo'"):
        info_from_dict({**document["model"], "model_type": "yolo"})


def test_model_info_survives_json(toy_models):
    info = toy_models.ToyInstanceModel().info
    assert info_from_dict(json.loads(json.dumps(info_to_dict(info)))) == info


def test_sample_frames_are_deterministic_uint8_with_bright_blobs():
    frames = sample_frames(2, 50, 60, 3, seed=1)
    assert frames.dtype == np.uint8 and frames.shape == (2, 50, 60, 3)
    np.testing.assert_array_equal(frames, sample_frames(2, 50, 60, 3, seed=1))
    assert frames.max() > 150 > np.median(frames)


def test_the_second_check_batch_grows_frames_by_reflecting_their_own_pixels():
    frames = sample_frames(5, 50, 60, 1, seed=2)
    first, grown = check_batches(frames)
    np.testing.assert_array_equal(first, frames[:2])
    assert grown.shape == (3, 73, 97, 1)
    assert grown.shape[1] % 2 == 1 and grown.shape[2] % 2 == 1
    picked = frames[[2, 3, 4]]
    np.testing.assert_array_equal(grown[:, :50, :60], picked)
    # Mirrored about the last row and column, so no flat margin for maps to tie on.
    np.testing.assert_array_equal(grown[:, 50:60, :60], picked[:, 48:38:-1])
    np.testing.assert_array_equal(grown[:, :50, 60:70], picked[:, :, 58:48:-1])
    assert all(len(np.unique(frame[50:, 60:])) > 1 for frame in grown)


def test_frames_a_pixel_high_still_grow_to_a_check_canvas():
    frames = np.full((3, 1, 8, 1), 7, np.uint8)
    _, grown = check_batches(frames)
    assert grown.shape == (3, 25, 45, 1) and (grown == 7).all()


# ------------------------------------------------------- frames with animals


def test_given_frames_without_animals_are_passed_over(tmp_path, toy_models):
    model = toy_models.ToyInstanceModel()
    frames = sample_frames(4, 64, 80, 3, seed=3)
    frames[1] = 0  # nothing to find: the check runs on the other three
    notes: list[str] = []
    path = export_graph(
        model, tmp_path, verify_frames=frames, sources=[tmp_path / "toy"], note=notes.append
    )
    checks = read_onnx_metadata(path).verification
    assert notes == []
    assert [check["frames"] for check in checks] == [[2, 64, 80, 3], [3, 87, 117, 3]]
    assert all(all(check["detections"]) for check in checks)
    assert all(check["frame_source"] == "the given frames" for check in checks)


def test_synthetic_frames_without_detections_verify_with_a_one_line_note(toy_models):
    blind = toy_models.ToyInstanceModel(threshold=2.0)  # brightness never exceeds 1
    notes: list[str] = []
    export_graph(blind, note=notes.append)
    [note] = notes
    assert note.startswith("verified the export of the topdown model on 5 frames without animals")
    assert "(none in the 5 looked at, from synthetic frames, as there are no training" in note
    assert note.endswith("--verify-video VIDEO)")


@pytest.mark.parametrize("name", FIXTURE_MODELS)
def test_every_fixture_model_verifies_on_real_animals_at_two_sizes(name, warm_export_cache):
    # The export `sleap-live run` makes on the video's first frames: the session's
    # shared cache holds it (made once for every test that loads these models).
    dirs, clip = FIXTURE_MODELS[name]
    video = DATA / "videos" / clip
    runner = load_runner(
        [MODELS / d for d in dirs], engine="onnx", verify_frames=first_frames(video)
    )
    checks = runner.metadata.verification
    runner.close()
    channels = video_frames(clip, 1).shape[3]
    assert [check["frames"] for check in checks] == [
        [2, 168, 200, channels],
        [3, 191, 237, channels],
    ]
    for check in checks:
        assert check["frame_source"] == f"the video {video}"
        # One animal in the single-instance clip, two elsewhere (bottom-up: peaks).
        least = 1 if name == "single_instance" else 2
        assert all(count >= least for count in check["detections"]), check["detections"]
        assert check["agreement"] != DISAGREEMENT


@pytest.fixture
def labelled_model_dir(tmp_path):
    """A copy of the centroid model directory with sleap-nn's training-labels file.

    The labels are user instances (the ground truth) on the `multi_gray` test clip,
    referenced by absolute path as `sleap-nn train` writes them.
    """
    import sleap_io as sio

    model_dir = tmp_path / "centroid"
    model_dir.mkdir()
    for name in ("training_config.yaml", "best.ckpt"):
        (model_dir / name).write_bytes((MODELS / "centroid" / name).read_bytes())
    truth = np.load(DATA / "ground_truth" / "multi_gray.npz")
    skeleton = sio.Skeleton(
        [str(n) for n in truth["node_names"]], [tuple(e) for e in truth["edges"].tolist()]
    )
    video = sio.Video.from_filename(str((DATA / "videos" / "multi_gray.mkv").resolve()))
    labelled = [
        sio.LabeledFrame(
            video=video,
            frame_idx=index,
            instances=[
                sio.Instance.from_numpy(points, skeleton) for points in truth["points"][index]
            ],
        )
        for index in (10, 50, 90)
    ]
    sio.Labels(labelled, videos=[video], skeletons=[skeleton]).save(
        str(model_dir / "labels_gt.train.0.slp")
    )
    return model_dir


def test_without_frames_the_training_labels_of_the_model_dir_are_used(labelled_model_dir):
    onnx_bytes = export_graph(
        load_inference_model(labelled_model_dir), sources=[labelled_model_dir]
    )
    metadata = ExportMetadata.from_json(
        {p.key: p.value for p in onnx.load_from_string(onnx_bytes).metadata_props}[METADATA_KEY]
    )
    labels = labelled_model_dir / "labels_gt.train.0.slp"
    assert [check["frames"] for check in metadata.verification] == [
        [2, 168, 200, 1],
        [3, 191, 237, 1],
    ]
    for check in metadata.verification:
        assert check["frame_source"] == f"the training labels {labels}"
        assert check["detections"] == [2] * check["frames"][0]


def test_training_labels_whose_video_is_gone_leave_synthetic_frames(labelled_model_dir):
    (labelled_model_dir / "labels_gt.train.0.slp").rename(
        labelled_model_dir / "labels_gt.val.0.slp"
    )
    import sleap_io as sio

    labels = sio.load_slp(str(labelled_model_dir / "labels_gt.val.0.slp"))
    labels.videos[0].replace_filename(str(labelled_model_dir / "gone.mkv"), open=False)
    labels.save(str(labelled_model_dir / "labels_gt.val.0.slp"))
    notes: list[str] = []
    onnx_bytes = export_graph(
        load_inference_model(labelled_model_dir), sources=[labelled_model_dir], note=notes.append
    )
    metadata = ExportMetadata.from_json(
        {p.key: p.value for p in onnx.load_from_string(onnx_bytes).metadata_props}[METADATA_KEY]
    )
    source = metadata.verification[0]["frame_source"]
    assert f"no training labels with their video on disk in {labelled_model_dir}" in source
    # The fixture centroid model finds animals in some synthetic frames, so no note.
    assert all(all(check["detections"]) for check in metadata.verification[:1])
    assert notes == []


def test_unreadable_training_labels_are_one_clear_error(tmp_path, toy_models):
    (tmp_path / "labels_gt.train.0.slp").write_bytes(b"not hdf5")
    with pytest.raises(ExportError, match=r"labels_gt\.train\.0\.slp: cannot read these"):
        export_graph(toy_models.ToyInstanceModel(), sources=[tmp_path])


# ------------------------------------------------- errors are errors, not answers


class Refusal(RuntimeError):
    """Stands in for the runtime's own way of refusing an input."""


def _exported_with(monkeypatch, run_hook):
    """Makes the exporter wrap every ONNX export's run in `run_hook(run, frames)`."""
    from sleap_live.engines.export import exporter

    real = exporter.onnx_exported

    def wrapped(onnx_bytes, notes=()):
        exported = real(onnx_bytes, notes)
        return Exported(
            lambda frames: run_hook(exported.run, frames), (Refusal,), exported.tracer_notes
        )

    monkeypatch.setattr(exporter, "onnx_exported", wrapped)


def test_a_runtime_exception_during_verification_is_an_export_error(monkeypatch, toy_models):
    fault = Refusal("kernel fault")

    def failing(run, frames):
        raise fault

    _exported_with(monkeypatch, failing)
    with pytest.raises(ExportError, match=r"fails on 2×240×320×3 frames .*: kernel fault") as error:
        export_graph(toy_models.ToyInstanceModel())
    assert error.value.__cause__ is fault


def test_only_a_refusal_of_the_other_channel_count_means_fixed_channels(monkeypatch, toy_models):
    def refuses_gray(run, frames):
        if frames.shape[3] == 1:
            raise Refusal("wrong channel count")
        return run(frames)

    _exported_with(monkeypatch, refuses_gray)
    onnx_bytes = export_graph(toy_models.ToyInstanceModel())
    (frames,) = onnx.load_from_string(onnx_bytes).graph.input
    assert frames.type.tensor_type.shape.dim[3].dim_value == 3

    bug = ZeroDivisionError("exporter bug")

    def crashes_on_gray(run, frames):
        if frames.shape[3] == 1:
            raise bug
        return run(frames)

    _exported_with(monkeypatch, crashes_on_gray)
    with pytest.raises(ExportError, match="raised on 1-channel frames: exporter bug") as error:
        export_graph(toy_models.ToyInstanceModel())
    assert error.value.__cause__ is bug


def test_export_model_records_the_opset(tmp_path):
    path = export_model(
        [MODELS / "single_instance"],
        tmp_path / "m.onnx",
        opset=18,
        verify_frames=video_frames("single.mkv"),
    )
    assert read_onnx_metadata(path).exporter["opset"] == 18
    assert onnx.load(str(path)).opset_import[0].version == 18


def test_export_model_is_one_function_for_every_format(tmp_path):
    from sleap_live.engines.export import EXPORT_FORMATS

    assert EXPORT_FORMATS == (
        "onnx",
        "torchscript",
        "openvino",
        "tensorrt",
        "web",
        "pt2",
        "tflite",
        "coreml",
        "saved_model",
        "tfjs",
    )
    with pytest.raises(ValueError, match="unknown export format 'caffe'"):
        export_model([tmp_path], tmp_path / "model.caffemodel", format="caffe")
    with pytest.raises(ValueError, match="a TensorRT export needs frame_size"):
        export_model([tmp_path], tmp_path / "out", format="tensorrt")


def _moved_labels(model_dir, folder, *, video_too: bool):
    """The model directory's training labels moved to `folder` (with their video, where
    `video_too`: then the labels still name its old place), and its training config
    naming them there, relative to the model directory, as a clone of a lab's
    repository of models and data would have them."""
    import shutil

    import sleap_io as sio
    import yaml

    folder.mkdir()
    labels_path = folder / "session.slp"
    labels = sio.load_slp(str(model_dir / "labels_gt.train.0.slp"))
    (model_dir / "labels_gt.train.0.slp").unlink()
    if video_too:
        shutil.copy(labels.videos[0].filename, folder / "multi_gray.mkv")
        labels.videos[0].replace_filename(str(model_dir / "gone" / "multi_gray.mkv"), open=False)
    labels.save(str(labels_path))
    config_path = model_dir / "training_config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["data_config"]["train_labels_path"] = [f"../{folder.name}/session.slp"]
    config_path.write_text(yaml.safe_dump(config))
    return labels_path


def test_the_labels_the_training_config_names_are_found_without_being_told(labelled_model_dir):
    """Issue 24: an export verifies on frames with animals without --verify-video, from
    the labels its training config names, their video moved beside them."""
    labels = _moved_labels(labelled_model_dir, labelled_model_dir.parent / "data", video_too=True)
    found = verification_frames(1, model_dirs=[labelled_model_dir])
    assert found.source == f"the training labels {labels.resolve()}"
    assert found.frames.shape == (3, 168, 200, 1)
