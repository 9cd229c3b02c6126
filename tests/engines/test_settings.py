"""`InferenceSettings`: defaults, checks, where each setting goes, and exports that hold them.

Faithfulness to `sleap-nn predict` with the same settings is in test_parity.py.
"""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import attrs
import numpy as np
import pytest

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.host.grouping import ClassMapGrouper, PafGrouper
from sleap_live.engines.load.export_cache import cache_key
from sleap_live.engines.load.metadata import info_from_dict, info_to_dict
from sleap_live.engines.load_options import LoadOptions
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.settings import (
    DEFAULT_SETTINGS,
    FIELDS,
    InferenceSettings,
    check_exported_settings,
    with_settings,
)
from sleap_live.engines.types import ModelInfo, Skeleton

DATA = Path(__file__).parents[1] / "data"
MODELS = DATA / "models"
SKELETON = Skeleton(("a", "b", "c"), ((0, 1), (1, 2)))


# --- the record ---------------------------------------------------------------------


def test_defaults_are_sleap_nn_predicts():
    # sleap_nn/cli.py, `predict`'s options (sleap-nn 0.3.5): every centroid and every
    # grouped instance kept, integral refinement on a 5-pixel window.
    assert DEFAULT_SETTINGS.to_dict() == {
        "peak_threshold": 0.2,
        "centroid_peak_threshold": None,
        "max_instances": None,
        "integral_refinement": True,
        "integral_patch_size": 5,
        "max_edge_length_ratio": 0.25,
        "dist_penalty_weight": 1.0,
        "n_points": 10,
        "min_instance_peaks": 0,
        "min_line_scores": 0.25,
        # SLEAP 1.x model folders only: run as SLEAP 1.x ran them.
        "legacy_postprocess": "sleap1",
    }
    assert DEFAULT_SETTINGS.centroid_threshold == 0.2
    assert InferenceSettings(centroid_peak_threshold=0.6).centroid_threshold == 0.6


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("peak_threshold", 1.5, "from 0 to 1"),
        ("peak_threshold", -0.1, "from 0 to 1"),
        ("peak_threshold", float("nan"), "from 0 to 1"),
        ("peak_threshold", "0.2", "from 0 to 1"),
        ("centroid_peak_threshold", 2, "from 0 to 1"),
        ("max_instances", 0, "at least 1"),
        ("max_instances", 2.5, "at least 1"),
        ("max_instances", True, "at least 1"),
        ("integral_refinement", "integral", "must be <class 'bool'>"),
        ("integral_patch_size", 4, "odd"),
        ("integral_patch_size", 0, "odd"),
        ("integral_patch_size", 33, "odd"),
        ("max_edge_length_ratio", 0, "above 0"),
        ("max_edge_length_ratio", float("inf"), "finite"),
        ("dist_penalty_weight", -1.0, "at least 0"),
        ("n_points", 0, "from 1 to"),
        ("min_instance_peaks", -1, "at least 0"),
        ("min_instance_peaks", 1.5, "at most 1"),
        ("min_line_scores", float("nan"), "finite"),
    ],
)
def test_values_out_of_range_are_refused_in_one_line(field, value, says):
    with pytest.raises((ValueError, TypeError)) as error:
        InferenceSettings(**{field: value})
    message = str(error.value)
    assert field in message and says in message and "\n" not in message


def test_settings_round_trip_through_json_and_unknown_fields_are_refused():
    settings = InferenceSettings(
        peak_threshold=0.5,
        max_instances=3,
        integral_refinement=False,
        min_instance_peaks=0.5,
        min_line_scores=-0.1,
    )
    document = json.loads(json.dumps(settings.to_dict()))
    assert InferenceSettings.from_dict(document) == settings
    assert InferenceSettings.from_dict({}) == DEFAULT_SETTINGS
    with pytest.raises(ModelConfigError, match=r"m.onnx: unknown inference settings \['k'\]"):
        InferenceSettings.from_dict({"k": 1}, "m.onnx")
    with pytest.raises(ModelConfigError, match=r"m\.onnx: n_points must be"):
        InferenceSettings.from_dict({"n_points": -2}, "m.onnx")


def test_the_graph_key_leaves_out_the_host_side_fields():
    key = InferenceSettings(min_line_scores=0.9, min_instance_peaks=2).graph_key()
    assert key == DEFAULT_SETTINGS.graph_key()
    assert set(key) == set(FIELDS) - {"min_line_scores", "min_instance_peaks"}


# --- graph side and host side ---------------------------------------------------------


def test_graph_side_differences_are_refused_with_a_re_export_hint():
    exported = InferenceSettings(peak_threshold=0.5, max_instances=2)
    with pytest.raises(ModelConfigError) as error:
        check_exported_settings("topdown", exported, DEFAULT_SETTINGS, "m.onnx")
    message = str(error.value)
    assert message.startswith(
        "m.onnx: the exported graph was built with other settings (peak_threshold 0.2, "
        "exported with 0.5; max_instances None, exported with 2)"
    )
    assert "re-export" in message and "\n" not in message
    # An unset centroid threshold is the peak threshold.
    same = InferenceSettings(peak_threshold=0.5, centroid_peak_threshold=0.5, max_instances=2)
    check_exported_settings("topdown", exported, same, "m.onnx")
    # Settings a model type does not use, and host-side ones, never refuse.
    other = InferenceSettings(peak_threshold=0.5, max_instances=2, n_points=3, min_line_scores=0.9)
    check_exported_settings("topdown", exported, other, "m.onnx")
    check_exported_settings("bottomup", DEFAULT_SETTINGS, InferenceSettings(max_instances=1), "m")
    with pytest.raises(ModelConfigError, match="n_points 3, exported with 10"):
        check_exported_settings("bottomup", DEFAULT_SETTINGS, InferenceSettings(n_points=3), "m")
    with pytest.raises(ModelConfigError, match=r"records no inference settings.*re-export"):
        check_exported_settings("single_instance", None, DEFAULT_SETTINGS, "old.onnx")


def test_host_side_settings_reach_the_grouping():
    grouper = PafGrouper(3, SKELETON.edges)
    info = ModelInfo(
        "bottomup",
        SKELETON,
        1,
        None,
        postprocess=grouper.postprocess_settings(),
        settings=DEFAULT_SETTINGS,
    )
    settings = InferenceSettings(max_instances=2, min_line_scores=0.6, min_instance_peaks=0.5)
    applied = with_settings(info, settings)
    assert applied.settings == settings and applied.max_instances == 2
    assert PafGrouper.from_info(applied) == PafGrouper(
        3, SKELETON.edges, min_line_scores=0.6, min_instance_peaks=0.5, max_instances=2
    )
    classes = ModelInfo(
        "multi_class_bottomup",
        SKELETON,
        1,
        2,
        class_names=("x", "y"),
        postprocess=ClassMapGrouper(3, 2).postprocess_settings(),
    )
    assert ClassMapGrouper.from_info(with_settings(classes, settings)).max_instances == 2
    assert with_settings(classes, DEFAULT_SETTINGS).max_instances == 2  # one per class
    topdown = ModelInfo("topdown", SKELETON, 1, 4)
    assert with_settings(topdown, settings).max_instances == 4  # the graph's, checked before


# --- the export cache and the metadata ------------------------------------------------


def test_cache_key_follows_the_graph_side_settings_only():
    base = cache_key([MODELS / "single_instance"], {"verify": True})
    assert base is not None
    same = [
        cache_key([MODELS / "single_instance"], {"verify": True}, settings=DEFAULT_SETTINGS),
        cache_key(
            [MODELS / "single_instance"],
            {"verify": True},
            settings=InferenceSettings(min_line_scores=0.7, min_instance_peaks=2),
        ),
    ]
    assert all(key is not None and key.digest == base.digest for key in same)
    changed = [
        InferenceSettings(peak_threshold=0.3),
        InferenceSettings(centroid_peak_threshold=0.3),
        InferenceSettings(max_instances=2),
        InferenceSettings(integral_refinement=False),
        InferenceSettings(integral_patch_size=3),
        InferenceSettings(max_edge_length_ratio=0.5),
        InferenceSettings(dist_penalty_weight=2.0),
        InferenceSettings(n_points=5),
    ]
    digests = set()
    for settings in changed:
        key = cache_key([MODELS / "single_instance"], {"verify": True}, settings=settings)
        assert key is not None and key.digest != base.digest, settings
        digests.add(key.digest)
    assert len(digests) == len(changed)


def test_metadata_round_trips_the_settings_and_reads_documents_without_them():
    settings = InferenceSettings(peak_threshold=0.4, max_instances=None, min_instance_peaks=2)
    info = ModelInfo("topdown", SKELETON, 3, None, settings=settings)
    document = json.loads(json.dumps(info_to_dict(info)))
    assert document["max_instances"] is None and document["settings"]["peak_threshold"] == 0.4
    assert info_from_dict(document) == info
    del document["settings"]
    document["max_instances"] = 20
    assert info_from_dict(document) == attrs.evolve(info, settings=None, max_instances=20)
    document["settings"] = {"peak_threshold": 7}
    with pytest.raises(ModelConfigError, match="peak_threshold must be"):
        info_from_dict(document, "m.onnx")


# --- models and runners -----------------------------------------------------------------


def test_model_directories_are_built_with_the_settings():
    from sleap_live.engines.graph.build import load_inference_model

    settings = InferenceSettings(
        peak_threshold=0.4,
        centroid_peak_threshold=0.3,
        max_instances=2,
        integral_refinement=False,
        integral_patch_size=3,
    )
    topdown = load_inference_model([MODELS / "centroid", MODELS / "centered_instance"], settings)
    assert topdown.info.settings == settings and topdown.info.max_instances == 2
    assert topdown.stage.peak_threshold == 0.3 and topdown.peak_threshold == 0.4
    assert topdown.stage.max_instances == 2 and not topdown.refine and topdown.patch_size == 3
    default = load_inference_model([MODELS / "centroid"])
    assert default.info.settings == DEFAULT_SETTINGS and default.stage.max_instances is None
    paf = InferenceSettings(n_points=4, max_edge_length_ratio=0.5, dist_penalty_weight=2.0)
    bottomup = load_inference_model([MODELS / "bottomup"], paf)
    scorer = bottomup.scorer
    assert (scorer.max_edge_length_ratio, scorer.dist_penalty_weight) == (0.5, 2.0)
    assert bottomup.info.postprocess["n_points"] == 4


@pytest.fixture(scope="module")
def bottomup_export(tmp_path_factory) -> Path:
    from sleap_live.engines.export import export_model

    folder = tmp_path_factory.mktemp("exports")
    settings = InferenceSettings(peak_threshold=0.3, min_line_scores=0.4)
    return export_model([MODELS / "bottomup"], folder / "bu.onnx", verify=False, settings=settings)


def test_an_export_runs_with_its_settings_or_applies_host_side_ones(bottomup_export):
    exported = InferenceSettings(peak_threshold=0.3, min_line_scores=0.4)
    with closing(load_runner(bottomup_export, engine="onnx", device="cpu")) as runner:
        assert runner.info.settings == exported
        assert runner.info.postprocess["min_line_scores"] == 0.4
        frames = np.zeros((1, 64, 64, 1), np.uint8)
        runner.run(frames)

    grouping = InferenceSettings(
        peak_threshold=0.3, min_line_scores=0.9, min_instance_peaks=2, max_instances=1
    )
    grouped = load_runner(bottomup_export, engine="onnx", device="cpu", settings=grouping)
    with closing(grouped) as runner:
        assert runner.info.settings == grouping and runner.metadata.info == runner.info
        assert PafGrouper.from_info(runner.info) == PafGrouper(
            5, SKELETON_EDGES, min_line_scores=0.9, min_instance_peaks=2, max_instances=1
        )

    with pytest.raises(ModelConfigError) as error:
        load_runner(bottomup_export, engine="onnx", device="cpu", settings=DEFAULT_SETTINGS)
    assert str(error.value) == (
        f"{bottomup_export}: the exported graph was built with other settings "
        "(peak_threshold 0.2, exported with 0.3); re-export the model with these, or run it "
        "with the ones it was exported with"
    )


def test_a_cached_graph_runs_with_the_host_side_settings_of_the_run_that_loads_it(tmp_path):
    def load(settings: InferenceSettings | None) -> ModelInfo:
        runner = load_runner(
            MODELS / "bottomup",
            engine="onnx",
            device="cpu",
            verify=False,
            cache_dir=tmp_path,
            settings=settings,
        )
        runner.close()
        return runner.info

    grouping = InferenceSettings(min_line_scores=0.9, min_instance_peaks=2)
    first = load(grouping)
    assert first.settings == grouping and first.postprocess["min_line_scores"] == 0.9
    # The same graph (host-side settings are not in the key), with this run's settings.
    again = load(None)
    assert len(list((tmp_path / "onnx").glob("*.onnx"))) == 1
    assert again.settings == DEFAULT_SETTINGS
    assert (again.postprocess["min_line_scores"], again.postprocess["min_instance_peaks"]) == (
        0.25,
        0,
    )


SKELETON_EDGES = ((0, 1), (1, 2), (2, 3), (3, 4))


def test_exports_without_recorded_settings_refuse_settings(bottomup_export, tmp_path):
    import onnx

    graph = onnx.load(str(bottomup_export))
    (prop,) = graph.metadata_props
    document = json.loads(prop.value)
    del document["model"]["settings"]  # as sleap-live wrote it before the settings
    prop.value = json.dumps(document)
    old = tmp_path / "old.onnx"
    onnx.save(graph, str(old))
    with closing(load_runner(old, engine="onnx", device="cpu")) as runner:
        assert runner.info.settings is None
    with pytest.raises(ModelConfigError, match=r"records no inference settings.*re-export"):
        load_runner(old, engine="onnx", device="cpu", settings=DEFAULT_SETTINGS)

    sleap_nn_export = DATA / "exports" / "single_instance"
    with pytest.raises(ModelConfigError, match="sleap-nn export directory runs with the settings"):
        load_runner(sleap_nn_export, device="cpu", settings=DEFAULT_SETTINGS)


def test_a_pipeline_gives_settings_to_the_model_it_loads_not_to_a_runner(monkeypatch, tmp_path):
    import sleap_live.engines.runners.load as runners_load
    from sleap_live.stream.pipeline import Pipeline
    from sleap_live.stream.sources import FileSource

    video = DATA / "videos" / "single.mkv"
    settings = InferenceSettings(peak_threshold=0.6)
    loaded = {}

    def load(paths, **options):
        loaded.update(options)
        return load_runner(paths, engine="torch", device="cpu", settings=options["settings"])

    monkeypatch.setattr(runners_load, "load_runner", load)
    with FileSource(video, stop=2) as source:
        pipeline = Pipeline(
            source, str(MODELS / "single_instance"), load=LoadOptions(settings=settings)
        )
        assert loaded["settings"] == settings and pipeline.runner.info.settings == settings
        pipeline.run()
    with FileSource(video, stop=2) as source, pytest.raises(ValueError, match="load_runner"):
        Pipeline(source, pipeline.runner, load=LoadOptions(settings=settings))
