"""Fault suite, bad metadata: an export whose metadata does not hold together, or does
not belong to its graph, is refused on load in one line that names the model (issue #11).

Both kinds of export are covered: a sleap-live `.onnx` (metadata embedded in the
graph) and a `sleap-nn export` directory (`export_metadata.json`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from sleap_live import cli
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.load.metadata import METADATA_KEY
from sleap_live.engines.runners.load import load_runner

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def toy_export(toy_models, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("toy")
    return export_graph(toy_models.ToyInstanceModel(), folder / "toy.onnx", verify=False)


def edited_onnx(source: Path, target: Path, edit) -> Path:
    """A copy of a sleap-live export whose embedded metadata `edit` changed (no sidecar)."""
    model = onnx.load(str(source))
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            document = json.loads(prop.value)
            edit(document["model"]["skeleton"])
            prop.value = json.dumps(document)
    onnx.save(model, str(target))
    return target


def edited_export_dir(kind: str, target: Path, edit) -> Path:
    """A copy of a `sleap-nn export` directory whose export_metadata.json `edit` changed."""
    shutil.copytree(DATA / "exports" / kind, target)
    path = target / "export_metadata.json"
    metadata = json.loads(path.read_text())
    edit(metadata)
    path.write_text(json.dumps(metadata))
    return target


def test_an_out_of_range_edge_in_a_sleap_live_export_names_the_model(toy_export, tmp_path):
    def bad_edge(skeleton):
        skeleton["edges"].append([0, 40])

    model = edited_onnx(toy_export, tmp_path / "bad_edge.onnx", bad_edge)
    with pytest.raises(ModelConfigError) as caught:
        load_runner(model, device="cpu")
    message = str(caught.value)
    assert message.startswith(f"{model}: skeleton edge [0, 40] names a node that does not exist")


def test_a_node_count_not_matching_a_sleap_live_graph_names_the_model(toy_export, tmp_path):
    def extra_node(skeleton):
        skeleton["node_names"].append("extra")

    model = edited_onnx(toy_export, tmp_path / "extra_node.onnx", extra_node)
    with pytest.raises(ModelConfigError) as caught:
        runner = load_runner(model, device="cpu")
        runner.run(np.zeros((1, 64, 64, 1), np.uint8))
    message = str(caught.value)
    assert message.startswith(f"{model}: the metadata gives ")
    assert "does not belong to this graph" in message


@pytest.mark.parametrize("kind", ["bottomup", "single_instance", "topdown"])
def test_an_out_of_range_edge_in_a_sleap_nn_export_names_the_model(kind, tmp_path):
    def bad_edge(metadata):
        metadata["edge_inds"] = [[0, 1], [1, 9]]

    folder = edited_export_dir(kind, tmp_path / kind, bad_edge)
    with pytest.raises(ModelConfigError) as caught:
        load_runner(folder, device="cpu")
    assert str(caught.value) == (
        f"{folder / 'export_metadata.json'}: skeleton edge [1, 9] names a node that does "
        "not exist (the skeleton has 5 nodes, indices 0 to 4)"
    )


@pytest.mark.parametrize("kind", ["single_instance", "topdown", "bottomup"])
def test_a_node_count_not_matching_a_sleap_nn_graph_names_the_model(kind, tmp_path):
    def extra_node(metadata):
        metadata["node_names"].append("extra")

    folder = edited_export_dir(kind, tmp_path / kind, extra_node)
    with pytest.raises(ModelConfigError) as caught:
        runner = load_runner(folder, device="cpu")
        # A bottom-up graph leaves its nodes axis open: its first run finds the mismatch.
        runner.run(np.zeros((1, 64, 64, 1), np.uint8))
    message = str(caught.value)
    assert message.startswith(f"{folder / 'export_metadata.json'}: the metadata gives 6 nodes")
    assert "has 5; the metadata does not belong to this graph" in message


def test_repeated_node_names_and_bad_channels_are_refused(tmp_path):
    def repeated(metadata):
        metadata["node_names"][1] = metadata["node_names"][0]

    folder = edited_export_dir("single_instance", tmp_path / "repeated", repeated)
    with pytest.raises(ModelConfigError, match="skeleton node names repeat: nose"):
        load_runner(folder, device="cpu")

    def two_channels(metadata):
        metadata["input_channels"] = 2

    folder = edited_export_dir("single_instance", tmp_path / "channels", two_channels)
    with pytest.raises(ModelConfigError, match="input_channels is 2; models take 1 or 3"):
        load_runner(folder, device="cpu")


def test_the_command_line_says_it_in_one_line(tmp_path, capsys):
    def bad_edge(metadata):
        metadata["edge_inds"] = [[0, 1], [1, 9]]

    folder = edited_export_dir("bottomup", tmp_path / "bottomup", bad_edge)
    video = DATA / "videos" / "single.mkv"
    status = cli.main(["run", str(video), "-m", str(folder), "-o", str(tmp_path / "p.slp"), "-q"])
    assert status == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "skeleton edge [1, 9] names a node" in lines[0]
    assert str(folder) in lines[0]
    assert not (tmp_path / "p.slp").exists()


# ------------------------------------------------------ crafted metadata (issue #20)


def crafted_onnx(source: Path, target: Path, text) -> Path:
    """A copy of a sleap-live export whose embedded metadata is `text(document)`."""
    model = onnx.load(str(source))
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            prop.value = text(json.loads(prop.value))
    onnx.save(model, str(target))
    return target


def run_says(model: Path, tmp_path: Path, capsys) -> str:
    """The one line `sleap-live run` refuses `model` with."""
    video = DATA / "videos" / "single.mkv"
    status = cli.main(["run", str(video), "-m", str(model), "-o", str(tmp_path / "p.slp"), "-q"])
    assert status == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(model) in lines[0] and "Traceback" not in lines[0]
    return lines[0]


@pytest.mark.parametrize("n_nodes", [200_000, 2_000_000])
def test_millions_of_node_names_are_refused_in_one_line(n_nodes, toy_export, tmp_path, capsys):
    # Refused by a bound, in time linear in the file (the names were compared
    # pairwise: 2 M names took longer than 120 s).
    def many_nodes(document):
        document["model"]["skeleton"]["node_names"] = [f"n{i}" for i in range(n_nodes)]
        return json.dumps(document)

    model = crafted_onnx(toy_export, tmp_path / "many.onnx", many_nodes)
    line = run_says(model, tmp_path, capsys)
    assert "skeleton.node_names has" in line or "export metadata is" in line


def test_repeated_node_names_are_found_in_linear_time():
    from sleap_live.engines.load.metadata import check_skeleton
    from sleap_live.engines.types import Skeleton

    names = (*(f"n{i}" for i in range(300_000)), "n7")
    with pytest.raises(ModelConfigError, match=r"skeleton node names repeat: n7$"):
        check_skeleton(Skeleton(node_names=names), "crafted.onnx")


def test_deeply_nested_metadata_is_refused_in_one_line(toy_export, tmp_path, capsys):
    def nested(document):
        document["model"]["postprocess"] = "NESTED"
        return json.dumps(document).replace('"NESTED"', "[" * 100_000 + "]" * 100_000)

    model = crafted_onnx(toy_export, tmp_path / "nested.onnx", nested)
    assert "nests 100002 levels deep" in run_says(model, tmp_path, capsys)


def test_a_channel_count_the_graph_cannot_take_is_refused_in_one_line(toy_export, tmp_path, capsys):
    def seven(document):
        document["input"]["channels"] = [7]
        return json.dumps(document)

    model = crafted_onnx(toy_export, tmp_path / "seven.onnx", seven)
    assert "input.channels is [7]" in run_says(model, tmp_path, capsys)


def test_deeply_nested_sleap_nn_export_files_are_refused_in_one_line(tmp_path, capsys):
    def nested(metadata):
        metadata["crafted"] = "NESTED"

    folder = edited_export_dir("single_instance", tmp_path / "nested_json", nested)
    path = folder / "export_metadata.json"
    path.write_text(path.read_text().replace('"NESTED"', "[" * 100_000 + "]" * 100_000))
    assert "nests too deeply" in run_says(folder, tmp_path, capsys)
    folder = edited_export_dir("single_instance", tmp_path / "nested_yaml", lambda m: None)
    (folder / "training_config.yaml").write_text("[" * 100_000 + "]" * 100_000)
    assert "nests too deeply" in run_says(folder, tmp_path, capsys)


# ------------------------------------------------------ crafted metadata (issue #36)


def test_a_nan_peak_threshold_is_refused_at_load_naming_the_field(toy_export, tmp_path, capsys):
    # It ran every frame, then the save failed ("Out of range float values are not
    # JSON compliant: nan"), and `recover` the same way: every frame lost.
    def nan_threshold(document):
        document["model"]["peak_threshold"] = float("nan")
        return json.dumps(document)  # writes NaN, which JSON readers take

    model = crafted_onnx(toy_export, tmp_path / "nan.onnx", nan_threshold)
    assert "peak_threshold is nan; a number from 0 to 1" in run_says(model, tmp_path, capsys)


def test_a_5000_digit_max_instances_is_refused_naming_the_file(toy_export, tmp_path, capsys):
    def huge(document):
        document["model"]["max_instances"] = "HUGE"
        return json.dumps(document).replace('"HUGE"', "9" * 5000)

    model = crafted_onnx(toy_export, tmp_path / "huge.onnx", huge)
    assert "export metadata is not valid JSON" in run_says(model, tmp_path, capsys)
