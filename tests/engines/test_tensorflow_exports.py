"""`export --format saved_model` and `--format tfjs`: every model type becomes a SavedModel
(run by TensorFlow) and a TF.js model (run by TF.js's cpu backend in Node) whose
instances are ONNX Runtime's within 1e-3 px (checked at export time, the check in
the metadata; the test reads it back, and runs the SavedModel again); a graph with an
operation they have no TensorFlow form for is refused in one line. TensorFlow's
install takes minutes, so CI does not install it: these tests skip there (but the
one-line error without it), and scripts/check_format_exports.py saved_model|tfjs
runs them and every network. (Figures: docs/export-formats.md.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.engines.load.metadata import TENSORRT_PROFILE
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream.runner import first_frames
from tests import script_modules as scripts
from tests.engines.goldens import DATA

REPO = Path(__file__).resolve().parents[2]

HAVE_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None
needs_tensorflow = pytest.mark.skipif(
    not HAVE_TENSORFLOW, reason='needs pip install "sleap-live[saved-model]"'
)

# Each model type, on a video of its kind: scripts/check_format_exports.py's cases.
CASES = scripts.load("check_format_exports.py").CASES
# What each layout's instance positions are called.
POSITIONS = ("points", "peaks")


def _export(format, case, output, frame_count=2):
    from sleap_live.engines.export import export_model

    models, video = CASES[case]
    frames = first_frames(DATA / "videos" / video, frame_count)
    path = export_model(
        [DATA / "models" / model for model in models], output, format=format,
        verify_frames=frames, settings=InferenceSettings(max_instances=2),
    )  # fmt: skip
    return path, frames


def _checked_within_tolerance(path):
    from sleap_live.engines.export.saved_model import read_saved_model_metadata

    metadata = read_saved_model_metadata(path)
    (check,) = metadata.verification
    assert check["against"] == "ONNX Runtime"
    positions = [key for key in POSITIONS if key in check["max_abs_diff"]]
    assert positions and all(check["max_abs_diff"][key] <= 1e-3 for key in positions)
    assert metadata.profile == TENSORRT_PROFILE
    return metadata, check


@pytest.fixture(scope="module")
def tfjs_modules():
    """TF.js's npm packages, installed once into build/tfjs-runtime (git ignores build/)
    and named by SLEAP_LIVE_TFJS_NODE_MODULES; skips without tensorflowjs, Node or npm."""
    if not HAVE_TENSORFLOW:
        pytest.skip('needs pip install "sleap-live[tfjs]"')
    from filelock import FileLock

    from sleap_live.engines.export.tfjs import (
        MODULES_ENV,
        import_tensorflowjs,
        tfjs_node_modules,
    )

    runtime = REPO / "build" / "tfjs-runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    try:
        import_tensorflowjs()
        with FileLock(runtime / "install.lock"):  # xdist workers share the one install
            modules = tfjs_node_modules(runtime)
    except RuntimeUnavailableError as error:
        pytest.skip(str(error))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MODULES_ENV, str(modules))
        yield modules


@pytest.mark.skipif(HAVE_TENSORFLOW, reason="TensorFlow is installed")
@pytest.mark.parametrize("format", ["saved_model", "tfjs"])
def test_without_tensorflow_the_export_says_how_to_install_it_in_one_line(format, tmp_path, capsys):
    from sleap_live import cli

    argv = ["export", str(DATA / "models" / "single_instance"), "--format", format]
    assert cli.main([*argv, "-o", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "pip install" in error and "[" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("format", "what"), [("saved_model", "a SavedModel export"), ("tfjs", "a TF.js export")]
)
def test_the_export_never_writes_into_a_folder_holding_other_things(format, what, tmp_path, capsys):
    # Checked before TensorFlow is imported: with it or without.
    from sleap_live import cli

    output = tmp_path / "mine"
    output.mkdir()
    (output / "model.json").write_text("mine")
    argv = ["export", str(DATA / "models" / "single_instance"), "--format", format]
    assert cli.main([*argv, "-o", str(output)]) == 2
    assert f"not empty and not {what}" in capsys.readouterr().err
    assert [path.name for path in output.iterdir()] == ["model.json"]
    assert (output / "model.json").read_text() == "mine"


@needs_tensorflow
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_saved_model_gives_onnx_runtimes_instances(case, tmp_path):
    from sleap_live.engines.export.saved_model import run_saved_model

    path, frames = _export("saved_model", case, tmp_path / "model_saved_model")
    metadata, check = _checked_within_tolerance(path)
    assert check["runtime"].startswith("TensorFlow ")
    assert (path / "saved_model.pb").is_file()
    # TensorFlow runs the folder again, with no torch model in sight: the same outputs.
    outputs = run_saved_model(path, frames, metadata.output_names)
    assert set(outputs) == set(metadata.output_names)
    assert all(len(value) == len(frames) for value in outputs.values())


@needs_tensorflow
def test_single_instance_poses_decode_from_the_saved_model(tmp_path):
    from sleap_live.engines.export.saved_model import run_saved_model
    from sleap_live.engines.host.postprocess import decode

    path, frames = _export("saved_model", "single_instance", tmp_path / "out", frame_count=3)
    metadata, _ = _checked_within_tolerance(path)
    poses = decode(metadata.info, run_saved_model(path, frames, metadata.output_names), 3)
    assert [len(pose.points) for pose in poses] == [1, 1, 1]
    assert not np.isnan(poses[0].points).all()


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_tfjs_in_node_gives_onnx_runtimes_instances(case, tmp_path, tfjs_modules):
    from sleap_live.engines.export.tfjs import MODEL_FILE

    path, _ = _export("tfjs", case, tmp_path / "model_tfjs")
    _, check = _checked_within_tolerance(path)
    assert check["runtime"].startswith("TF.js 4.22.0, cpu backend, Node ")
    assert (path / MODEL_FILE).is_file()


@needs_tensorflow
@pytest.mark.parametrize("format", ["saved_model", "tfjs"])
def test_an_operation_without_a_tensorflow_form_is_refused_in_one_line(
    format, tmp_path, capsys, monkeypatch, request
):
    import torch

    from sleap_live import cli
    from sleap_live.engines.export import tf_graph

    if format == "tfjs":
        request.getfixturevalue("tfjs_modules")
    # As if the converter had no TensorFlow form for ReLU, which every UNet has.
    reduced = {
        op: form for op, form in tf_graph._ops().items() if op != torch.ops.aten.relu.default
    }
    monkeypatch.setattr(tf_graph, "_ops", lambda: reduced)
    argv = ["export", str(DATA / "models" / "single_instance"), "--format", format]
    assert cli.main([*argv, "-o", str(tmp_path / "out"), "--no-verify"]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "no TensorFlow form" in error and "aten.relu.default" in error
    assert not (tmp_path / "out").exists()


def test_the_node_runner_ships_with_the_package():
    from importlib import resources

    script = resources.files("sleap_live.engines.export") / "tfjs_node" / "run.js"
    assert script.is_file() and "loadGraphModel" in script.read_text()


def test_tfjs_outputs_sharing_a_shape_get_their_names_back(tmp_path):
    from sleap_live.engines.errors import ExportError
    from sleap_live.engines.export.tfjs import name_outputs

    # As tensorflowjs writes the multi-class bottom-up model's: peaks and class_probs
    # share dtype and shape, so it names them by their graph tensors.
    names = ("peaks", "peak_scores", "peak_valid", "class_probs")
    written = {
        "peak_scores": {"name": "Identity_1:0"},
        "peak_valid": {"name": "Identity_2:0"},
        "Identity:0": {"name": "Identity:0"},
        "Identity_3:0": {"name": "Identity_3:0"},
    }
    model_file = tmp_path / "model.json"
    model_file.write_text(json.dumps({"signature": {"outputs": written}}))
    name_outputs(model_file, names)
    outputs = json.loads(model_file.read_text())["signature"]["outputs"]
    assert list(outputs) == list(names)
    assert outputs["class_probs"]["name"] == "Identity:0"
    assert outputs["peaks"]["name"] == "Identity_3:0"
    # A name tensorflowjs found that the order contradicts is an error, not a guess.
    written["peak_scores"] = {"name": "Identity_2:0"}
    model_file.write_text(json.dumps({"signature": {"outputs": written}}))
    with pytest.raises(ExportError):
        name_outputs(model_file, names)
