"""Tests for sleap_live.engines.export.onnx and sleap_live.engines.load.metadata."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch

from sleap_live.engines.errors import ExportError, ModelConfigError, ModelNotFoundError
from sleap_live.engines.export.onnx import (
    TOLERANCE,
    export_inference_model,
    load_torchscript,
    read_torchscript_metadata,
    sample_frames,
)
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

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def toy_onnx(tmp_path_factory, toy_models):
    model = toy_models.ToyInstanceModel()
    path = export_inference_model(model, tmp_path_factory.mktemp("onnx"))
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
    assert [check["frames"] for check in checks] == [[2, 240, 320, 3], [3, 203, 275, 3]]
    assert all(check["instances"] > 0 for check in checks)
    for check in checks:
        assert set(check["max_abs_diff"]) == set(INSTANCE_OUTPUTS)
        assert max(check["max_abs_diff"].values()) <= TOLERANCE


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
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=TOLERANCE)


def test_torchscript_export_round_trips_with_metadata(tmp_path, toy_models):
    model = toy_models.ToyInstanceModel(input_channels=1)
    path = export_inference_model(model, tmp_path / "toy.pt", format="torchscript")
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
            ExportError, match=r"differs from the torch model on 3×203×275×3"
        ) as error:
            export_inference_model(toy_models.FrozenSizeModel(), tmp_path, format=format)
        assert "points" in str(error.value)
        assert "Converting a tensor to a Python float" in str(error.value)
    assert not list(tmp_path.iterdir())


def test_unverified_export_skips_the_comparison(tmp_path, toy_models):
    path = export_inference_model(toy_models.FrozenSizeModel(), tmp_path, verify=False)
    assert read_onnx_metadata(path).verification is None


def test_graph_that_cannot_convert_channels_gets_a_fixed_channel_input(tmp_path, toy_models):
    model = toy_models.BranchingChannelsModel(input_channels=1)
    path = export_inference_model(model, tmp_path, frames=[sample_frames(1, 64, 80, 1)])
    assert read_onnx_metadata(path).input_channels == (1,)
    (frames,) = onnx.load(str(path)).graph.input
    assert frames.type.tensor_type.shape.dim[3].dim_value == 1


def test_onnx_export_of_an_unsupported_operator_is_one_clear_error(tmp_path, toy_models, capfd):
    with pytest.raises(ExportError, match=r"_upsample_bilinear2d_aa.*try --format torchscript"):
        export_inference_model(toy_models.AntialiasedModel(), tmp_path)
    assert "graph" not in capfd.readouterr().out
    path = export_inference_model(toy_models.AntialiasedModel(), tmp_path, format="torchscript")
    assert read_torchscript_metadata(path).input_channels == (1, 3)


def test_sources_are_recorded_with_their_training_config_hash(tmp_path, toy_models):
    model_dir = tmp_path / "centroid"
    model_dir.mkdir()
    (model_dir / "training_config.yaml").write_text("model_config: {}\n")
    path = export_inference_model(
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
        export_inference_model(model, tmp_path, format="tensorrt")
    with pytest.raises(ValueError, match=r"torchscript exports are written to '\.pt' files"):
        export_inference_model(model, tmp_path / "m.onnx", format="torchscript")
    with pytest.raises(ValueError, match="expected uint8"):
        export_inference_model(model, tmp_path, frames=[np.zeros((1, 8, 8, 3), np.float32)])


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
