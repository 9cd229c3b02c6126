"""Parsing training_config.yaml into a ModelSpec."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from sleap_live.engines.errors import ModelConfigError, UnsupportedModelError
from sleap_live.engines.load.spec import (
    MODEL_HEADS,
    TRAINING_CONFIG,
    ModelSpec,
    PreprocessSpec,
    TilingSpec,
    UNetSpec,
)
from sleap_live.engines.load.training_config import read_training_config
from tests.committed import require

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
NODES = ["head", "thorax", "abdomen", "tail"]
EDGES = [["head", "thorax"], ["thorax", "abdomen"], ["abdomen", "tail"]]
CLASSES = ["female", "male"]
UNET = {
    "in_channels": 1,
    "kernel_size": 3,
    "filters": 16,
    "filters_rate": 2.0,
    "max_stride": 16,
    "stem_stride": None,
    "middle_block": True,
    "up_interpolate": True,
    "stacks": 1,
    "convs_per_block": 2,
    "output_stride": 2,
}
CONFMAPS = {"part_names": None, "sigma": 2.5, "output_stride": 2, "loss_weight": 1.0}
HEADS = {
    "single_instance": {"confmaps": CONFMAPS},
    "centroid": {
        "confmaps": {
            "anchor_part": "thorax",
            "centroid_method": None,
            "sigma": 5.0,
            "output_stride": 4,
            "use_sigmoid_activation": False,
        }
    },
    "centered_instance": {"confmaps": CONFMAPS | {"anchor_part": "thorax"}},
    "bottomup": {
        "confmaps": CONFMAPS,
        "pafs": {"edges": None, "sigma": 15.0, "output_stride": 4, "loss_weight": 1.0},
    },
    "multi_class_bottomup": {
        "confmaps": CONFMAPS,
        "class_maps": {"classes": CLASSES, "sigma": 5.0, "output_stride": 2},
    },
    "multi_class_topdown": {
        "confmaps": CONFMAPS | {"anchor_part": "abdomen"},
        "class_vectors": {
            "classes": CLASSES,
            "num_fc_layers": 2,
            "num_fc_units": 32,
            "global_pool": True,
            "output_stride": 16,
        },
    },
    # sleap-nn 0.3.5's CenterNet box detector, as `sleap-nn train` writes it.
    "bbox_centernet": {
        "center": {
            "categories": ["mouse"],
            "sigma": None,
            "min_overlap": 0.7,
            "output_stride": 4,
            "loss_weight": 1.0,
            "focal_alpha": 2.0,
            "focal_beta": 4.0,
        },
        "size": {"output_stride": 4, "loss_weight": 0.1},
        "offset": {"output_stride": 4, "loss_weight": 1.0},
    },
    # A re-identification model, as training writes it (pool and carrier resolved).
    "embedding": {
        "embedding": {
            "embedding_dim": 16,
            "num_fc_layers": 1,
            "num_fc_units": 32,
            "pool": "gem",
            "normalize": True,
            "output_stride": 16,
            "freeze_backbone": False,
            "anchor_part": None,
            "centroid_method": None,
            "centroid_fallback": None,
            "detection_mode": "pose",
            "objective": None,
        }
    },
    # Its SSD detector, anchor sizes as training writes them in.
    "bbox_ssd": {
        "ssd": {
            "categories": ["mouse"],
            "output_stride": 8,
            "num_levels": 2,
            "anchor_sizes": [6.5, 15.2],
            "anchor_scales": [1.0, 1.26, 1.587],
            "aspect_ratios": [0.5, 1.0, 2.0],
            "pos_iou_threshold": 0.5,
            "neg_iou_threshold": 0.4,
            "neg_pos_ratio": 3.0,
            "box_variances": [0.1, 0.1, 0.2, 0.2],
            "head_channels": 128,
            "head_convs": 1,
            "loss_weight": 1.0,
        },
    },
    # Whole-frame foreground segmentation, its loss knobs as training writes them in.
    "semantic_segmentation": {
        "segmentation": {
            "output_stride": 2,
            "loss_weight": 1.0,
            "bce_weight": 0.5,
            "dice_weight": 0.5,
            "bce_pos_weight": None,
            "target_maxpool": False,
        },
    },
}
HEAD_ORDER = (
    "single_instance",
    "centroid",
    "centered_instance",
    "bottomup",
    "multi_class_bottomup",
    "multi_class_topdown",
    "bottomup_segmentation",
    "semantic_segmentation",
    "embedding",
    "bbox_centernet",
    "bbox_ssd",
)


def training_config(model_type: str, crop_size: int | None = 96) -> dict:
    """A config shaped like the ones `sleap-nn train` writes."""
    head_configs = {key: None for key in HEAD_ORDER}
    head_configs[model_type] = copy.deepcopy(HEADS[model_type])
    return {
        "data_config": {
            "train_labels_path": ["labels.slp"],
            "preprocessing": {
                "ensure_rgb": False,
                "ensure_grayscale": False,
                "max_height": None,
                "max_width": None,
                "scale": 1.0,
                "crop_size": crop_size,
                "min_crop_size": 100,
                "crop_mode": "fixed",
                "tiling": {"enabled": False, "tile_size": None},
            },
            "skeletons": [
                {
                    "nodes": [{"name": n} for n in NODES],
                    "edges": [
                        {"source": {"name": s}, "destination": {"name": d}} for s, d in EDGES
                    ],
                    "symmetries": [],
                    "name": "fly",
                }
            ],
        },
        "model_config": {
            "init_weights": "default",
            "backbone_config": {"unet": dict(UNET), "convnext": None, "swint": None},
            "head_configs": head_configs,
        },
        "trainer_config": {"max_epochs": 10},
        "sleap_nn_version": "0.3.5",
    }


def parse(tmp_path: Path, config: dict) -> ModelSpec:
    (tmp_path / "training_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return read_training_config(tmp_path)


@pytest.mark.parametrize("model_type", list(MODEL_HEADS))
def test_every_model_type_parses(tmp_path, model_type):
    spec = parse(tmp_path, training_config(model_type))
    assert spec.model_type == model_type
    assert spec.head_names == tuple(name for _, name in MODEL_HEADS[model_type])
    assert spec.backbone == UNetSpec(**UNET)
    assert spec.path == tmp_path
    assert spec.checkpoint_path == tmp_path / "best.ckpt"
    assert spec.config_path == tmp_path / "training_config.yaml"
    assert spec.sleap_nn_version == "0.3.5"


def test_skeleton_and_defaults_from_it(tmp_path):
    spec = parse(tmp_path, training_config("bottomup"))
    assert spec.skeleton.name == "fly"
    assert spec.skeleton.node_names == tuple(NODES)
    assert spec.skeleton.edges == ((0, 1), (1, 2), (2, 3))
    confmaps, pafs = spec.heads
    assert confmaps.part_names == tuple(NODES)
    assert confmaps.n_channels == 4
    assert pafs.edges == tuple(tuple(e) for e in EDGES)
    assert pafs.edge_indices == ((0, 1), (1, 2), (2, 3))
    assert pafs.n_channels == 6
    assert (confmaps.output_stride, pafs.output_stride) == (2, 4)
    assert spec.anchor_part is None
    assert spec.class_names == ()


def test_training_only_settings_are_not_read(tmp_path):
    config = training_config("bottomup")
    spec = parse(tmp_path, config)
    config["model_config"]["head_configs"]["bottomup"]["pafs"]["sigma"] = "wide"
    config["data_config"]["preprocessing"]["min_crop_size"] = None
    assert parse(tmp_path, config) == spec


def test_explicit_part_names_and_edges_win(tmp_path):
    config = training_config("bottomup")
    heads = config["model_config"]["head_configs"]["bottomup"]
    heads["confmaps"]["part_names"] = ["tail", "abdomen", "thorax", "head"]
    heads["pafs"]["edges"] = [["tail", "head"]]
    confmaps, pafs = parse(tmp_path, config).heads
    assert confmaps.part_names == ("tail", "abdomen", "thorax", "head")
    assert pafs.edge_indices == ((0, 3),)


def test_paf_edge_outside_parts_is_rejected(tmp_path):
    config = training_config("bottomup")
    config["model_config"]["head_configs"]["bottomup"]["pafs"]["edges"] = [["head", "wing"]]
    with pytest.raises(ModelConfigError, match="'wing', which is not a part"):
        parse(tmp_path, config)


def test_activations(tmp_path):
    config = training_config("centroid")
    assert parse(tmp_path, config).heads[0].activation == "identity"
    config["model_config"]["head_configs"]["centroid"]["confmaps"]["use_sigmoid_activation"] = True
    centroid = parse(tmp_path, config).heads[0]
    assert centroid.activation == "sigmoid"
    assert centroid.n_channels == 1
    maps = parse(tmp_path, training_config("multi_class_bottomup")).head("ClassMapsHead")
    assert (maps.activation, maps.n_channels) == ("sigmoid", 2)
    vectors = parse(tmp_path, training_config("multi_class_topdown")).head("ClassVectorsHead")
    assert (vectors.activation, vectors.n_channels) == ("softmax", 2)
    assert (vectors.num_fc_layers, vectors.num_fc_units, vectors.global_pool) == (2, 32, True)


def test_class_vector_defaults_follow_sleap_nn(tmp_path):
    config = training_config("multi_class_topdown")
    config["model_config"]["head_configs"]["multi_class_topdown"]["class_vectors"] = {
        "classes": CLASSES,
        "output_stride": 16,
    }
    vectors = parse(tmp_path, config).head("ClassVectorsHead")
    assert (vectors.num_fc_layers, vectors.num_fc_units, vectors.global_pool) == (1, 64, True)


@pytest.mark.parametrize(
    ("model_type", "head"),
    [("multi_class_topdown", "class_vectors"), ("multi_class_bottomup", "class_maps")],
)
def test_class_output_track_is_accepted_and_identity_refused(tmp_path, model_type, head):
    config = training_config(model_type)
    leaf = config["model_config"]["head_configs"][model_type][head]
    leaf["class_output"] = "track"
    parse(tmp_path, config)
    leaf["class_output"] = "identity"
    where = f"model_config.head_configs.{model_type}.{head}.class_output"
    assert_refused(tmp_path, config, f"{where} 'identity' is not supported (supported: track)")


def test_anchor_part_and_class_names(tmp_path):
    spec = parse(tmp_path, training_config("multi_class_topdown"))
    assert (spec.anchor_part, spec.anchor_part_name) == (2, "abdomen")
    assert spec.class_names == tuple(CLASSES)
    spec = parse(tmp_path, training_config("centroid"))
    assert (spec.anchor_part, spec.anchor_part_name) == (1, "thorax")


def test_unknown_anchor_part_is_rejected(tmp_path):
    config = training_config("centroid")
    config["model_config"]["head_configs"]["centroid"]["confmaps"]["anchor_part"] = "wing"
    with pytest.raises(ModelConfigError, match="anchor_part 'wing' is not a skeleton node"):
        parse(tmp_path, config)


def test_missing_classes_are_rejected(tmp_path):
    config = training_config("multi_class_bottomup")
    config["model_config"]["head_configs"]["multi_class_bottomup"]["class_maps"]["classes"] = None
    with pytest.raises(ModelConfigError, match=r"class_maps\.classes is empty"):
        parse(tmp_path, config)


def test_preprocessing(tmp_path):
    config = training_config("centered_instance", crop_size=128)
    config["data_config"]["preprocessing"] |= {
        "ensure_rgb": True,
        "max_height": 1024,
        "max_width": 1280,
        "scale": 0.5,
    }
    assert parse(tmp_path, config).preprocess == PreprocessSpec(
        ensure_rgb=True, scale=0.5, max_height=1024, max_width=1280, crop_size=128
    )


def test_preprocessing_defaults_when_keys_are_absent(tmp_path):
    config = training_config("single_instance")
    config["data_config"]["preprocessing"] = {}
    spec = parse(tmp_path, config)
    assert spec.preprocess == PreprocessSpec()
    assert spec.preprocess.scale == 1.0


def assert_refused(tmp_path: Path, config: dict, message: str) -> None:
    """Parsing fails with exactly `<config path>: <message>`."""
    with pytest.raises(ModelConfigError) as e:
        parse(tmp_path, config)
    assert str(e.value) == f"{tmp_path / TRAINING_CONFIG}: {message}"


def test_tiling_is_read_on_single_instance_models(tmp_path):
    config = training_config("single_instance")
    tiling = config["data_config"]["preprocessing"]["tiling"]
    assert parse(tmp_path, config).preprocess.tiling is None
    config["data_config"]["preprocessing"]["tiling"] = None
    assert parse(tmp_path, config).preprocess.tiling is None
    config["data_config"]["preprocessing"]["tiling"] = tiling
    # As sleap-nn train writes it: the geometry reconciled by its `check_tiling`.
    tiling |= {"enabled": True, "tile_size": 256, "overlap": 64, "min_overlap_fraction": 0.25,
               "blend": "pyramid", "sigma_scale": 0.2, "tile_batch_size": None}  # fmt: skip
    assert parse(tmp_path, config).preprocess.tiling == TilingSpec(256, 64, 0.25, "pyramid", 0.2)


TILING = "data_config.preprocessing.tiling"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"tile_size": None},
            f"{TILING}.tile_size or overlap is null; sleap-nn train writes "
            "the tiling geometry here and predict cannot tile without it",
        ),
        (
            {"tile_size": 200},
            f"{TILING}.tile_size 200 is not a multiple of 16 (the backbone's "
            "max_stride 16 and the output stride 2)",
        ),
        (
            {"overlap": 256},
            f"{TILING}.overlap 256 is not below tile_size 256 (a tile must "
            "advance; sleap-nn refuses it too)",
        ),
        ({"overlap": -2}, f"{TILING}.overlap is -2; expected an integer >= 0"),
        (
            {"blend": "cosine"},
            f"{TILING}.blend 'cosine' is not supported (supported: gaussian, pyramid, constant)",
        ),
        ({"sigma_scale": 0}, f"{TILING}.sigma_scale is 0; expected above 0, up to 1"),
        ({"min_overlap_fraction": 1.5}, f"{TILING}.min_overlap_fraction is 1.5; expected 0 to 1"),
        ({"tile_size": 32768}, f"{TILING}.tile_size is 32768; at most 16384 is run"),
    ],
)
def test_bad_tiling_is_refused_in_one_line(tmp_path, change, message):
    config = training_config("single_instance")
    config["data_config"]["preprocessing"]["tiling"] = {
        "enabled": True, "tile_size": 256, "overlap": 64} | change  # fmt: skip
    assert_refused(tmp_path, config, message)


def test_tiling_of_other_model_types_is_refused(tmp_path):
    config = training_config("centroid")
    config["data_config"]["preprocessing"]["tiling"] = {
        "enabled": True, "tile_size": 256, "overlap": 64}  # fmt: skip
    assert_refused(
        tmp_path,
        config,
        f"{TILING}.enabled is true on a centroid model; sleap-nn tiles only "
        "single-instance pose models (sleap-live does not run its tiled segmentation)",
    )


@pytest.mark.parametrize("model_type", ["centered_instance", "multi_class_topdown"])
def test_fixed_crops_are_accepted_and_bbox_crops_refused(tmp_path, model_type):
    config = training_config(model_type)
    parse(tmp_path, config)
    config["data_config"]["preprocessing"]["crop_mode"] = "bbox"
    assert_refused(
        tmp_path,
        config,
        "data_config.preprocessing.crop_mode 'bbox' is not supported (supported: fixed)",
    )


def test_ensure_rgb_and_ensure_grayscale_together_are_refused(tmp_path):
    config = training_config("single_instance")
    config["data_config"]["preprocessing"] |= {"ensure_rgb": True, "ensure_grayscale": True}
    assert_refused(
        tmp_path,
        config,
        "data_config.preprocessing.ensure_rgb and ensure_grayscale are both true; "
        "sleap-nn refuses this too (choose one)",
    )


@pytest.mark.parametrize("key", ["max_height", "max_width"])
def test_size_matcher_bounds_must_be_positive(tmp_path, key):
    config = training_config("single_instance")
    config["data_config"]["preprocessing"][key] = 0
    assert_refused(
        tmp_path, config, f"data_config.preprocessing.{key} is 0; expected an integer >= 1"
    )


# What sleap-nn 0.3.5's `resolve_centroid_method(anchor_part, centroid_method,
# centroid_fallback)` does with each setting: None where it returns, else the start
# of our message for the ValueError it raises.
CENTROID_SETTINGS = [
    (None, None, None, None),
    ("thorax", None, None, None),
    (None, "center_of_mass", None, None),
    (None, "bbox_center", None, None),
    (None, "geometric_median", None, None),
    ("thorax", "anchor", None, None),
    ("thorax", None, "bbox_center", None),
    ("thorax", "anchor", "geometric_median", None),
    (None, None, "bbox_center", None),
    ("thorax", "bbox_center", None, "centroid_method 'bbox_center' contradicts anchor_part"),
    (None, "anchor", None, "centroid_method 'anchor' needs an anchor_part"),
    (None, "median", None, "centroid_method 'median' is unknown"),
    ("thorax", None, "anchor", "centroid_fallback 'anchor' is unknown"),
    (None, None, "nope", "centroid_fallback 'nope' is unknown"),
]


@pytest.mark.parametrize(("anchor", "method", "fallback", "problem"), CENTROID_SETTINGS)
@pytest.mark.parametrize("model_type", ["centroid", "centered_instance", "multi_class_topdown"])
def test_centroid_method_is_checked_as_sleap_nn_checks_it(
    tmp_path, model_type, anchor, method, fallback, problem
):
    config = training_config(model_type)
    confmaps = config["model_config"]["head_configs"][model_type]["confmaps"]
    confmaps |= {"anchor_part": anchor, "centroid_method": method, "centroid_fallback": fallback}
    if problem is None:
        # sleap-nn predict uses the method only for ground-truth centroids, so the
        # model sleap-live builds does not depend on it.
        spec = parse(tmp_path, config)
        assert spec.anchor_part_name == anchor
        confmaps |= {"centroid_method": None, "centroid_fallback": None}
        assert parse(tmp_path, config) == spec
        return
    with pytest.raises(ModelConfigError) as e:
        parse(tmp_path, config)
    where = f"model_config.head_configs.{model_type}.confmaps"
    assert str(e.value).startswith(f"{tmp_path / TRAINING_CONFIG}: {where}.{problem}")
    assert "\n" not in str(e.value)


def test_centroid_method_table_matches_the_installed_sleap_nn():
    """Re-derives CENTROID_SETTINGS from sleap-nn itself where it is installed."""
    centroids = pytest.importorskip("sleap_nn.data.instance_centroids")
    for anchor, method, fallback, problem in CENTROID_SETTINGS:
        try:
            centroids.resolve_centroid_method(anchor, method, fallback)
        except ValueError:
            assert problem is not None, (anchor, method, fallback)
        else:
            assert problem is None, (anchor, method, fallback)


@pytest.mark.parametrize("model_type", ["centered_instance", "multi_class_topdown"])
def test_crop_models_need_a_crop_size(tmp_path, model_type):
    with pytest.raises(ModelConfigError, match="crop_size is null"):
        parse(tmp_path, training_config(model_type, crop_size=None))


@pytest.mark.parametrize("scale", [[0.5, 0.5], 0, -1.0, "half"])
def test_bad_scale_is_rejected(tmp_path, scale):
    config = training_config("single_instance")
    config["data_config"]["preprocessing"]["scale"] = scale
    with pytest.raises(ModelConfigError, match=r"preprocessing\.scale"):
        parse(tmp_path, config)


def test_model_type_is_the_first_head_config_set(tmp_path):
    config = training_config("single_instance")
    config["model_config"]["head_configs"]["bottomup"] = copy.deepcopy(HEADS["bottomup"])
    assert parse(tmp_path, config).model_type == "single_instance"


def test_a_pretrained_backbone_is_refused_in_one_line(tmp_path):
    config = training_config("single_instance")
    pretrained = {"source": "hf", "model_name": "microsoft/resnet-50"}
    config["model_config"]["backbone_config"] = {"unet": None, "pretrained": pretrained}
    with pytest.raises(UnsupportedModelError) as e:
        parse(tmp_path, config)
    assert str(e.value) == (
        f"{tmp_path}: a model on a pretrained backbone from Hugging Face "
        "('microsoft/resnet-50'); sleap-live does not run it"
    )


def test_unknown_backbone_and_no_backbone(tmp_path):
    config = training_config("single_instance")
    config["model_config"]["backbone_config"] = {"resnet": {"depth": 18}}
    with pytest.raises(
        UnsupportedModelError, match="a model on a backbone sleap-live does not know \\('resnet'\\)"
    ):
        parse(tmp_path, config)
    config["model_config"]["backbone_config"] = {"unet": None}
    with pytest.raises(ModelConfigError, match="has no backbone set"):
        parse(tmp_path, config)


def test_unknown_head_type(tmp_path):
    config = training_config("single_instance")
    config["model_config"]["head_configs"] = {
        "bottomup_segmentation": {"segmentation": {"dim": 128}},
        "single_instance": HEADS["single_instance"],
    }
    with pytest.raises(
        UnsupportedModelError, match="a segmentation model \\(bottomup_segmentation\\)"
    ):
        parse(tmp_path, config)
    config["model_config"]["head_configs"] = {"single_instance": None}
    with pytest.raises(ModelConfigError, match="has no head set"):
        parse(tmp_path, config)


def test_a_box_detectors_three_heads_at_one_stride(tmp_path):
    spec = parse(tmp_path, training_config("bbox_centernet", crop_size=None))
    center, size, offset = spec.heads
    assert (center.name, center.classes, center.n_channels, center.activation) == (
        "BBoxCenterHead",
        ("mouse",),
        1,
        "sigmoid",
    )
    assert (size.n_channels, offset.n_channels, size.activation) == (2, 2, "identity")
    assert spec.class_names == ()  # box categories are not identities
    config = training_config("bbox_centernet", crop_size=None)
    config["model_config"]["head_configs"]["bbox_centernet"]["center"]["categories"] = None
    assert parse(tmp_path, config).heads[0].classes == ("object",)  # sleap-nn's default
    config["model_config"]["head_configs"]["bbox_centernet"]["size"]["output_stride"] = 8
    with pytest.raises(ModelConfigError, match="center, size and offset output_strides differ"):
        parse(tmp_path, config)


def test_unknown_head_within_a_model_type(tmp_path):
    config = training_config("bottomup")
    config["model_config"]["head_configs"]["bottomup"]["offsets"] = {"output_stride": 2}
    with pytest.raises(ModelConfigError, match="unknown head 'offsets'"):
        parse(tmp_path, config)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (("model_config", "backbone_config", "unet"), "filters"),
        (("model_config", "backbone_config", "unet"), "stem_stride"),
        (("model_config", "head_configs", "bottomup", "pafs"), "output_stride"),
        (("model_config", "head_configs", "bottomup"), "pafs"),
        (("model_config",), "head_configs"),
        (("data_config",), "skeletons"),
        ((), "model_config"),
    ],
)
def test_missing_keys_are_named(tmp_path, path, key):
    config = training_config("bottomup")
    parent = config
    for part in path:
        parent = parent[part]
    del parent[key]
    with pytest.raises(ModelConfigError, match="missing key") as e:
        parse(tmp_path, config)
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'training_config.yaml'}: ")
    assert ".".join((*path, key)) in message


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("max_stride", 24, "power of two"),
        ("output_stride", 32, "exceeds max_stride"),
        ("filters", 0, "integer >= 1"),
        ("filters_rate", "fast", "positive number"),
        ("middle_block", "yes", "true or false"),
        ("in_channels", 4, "expected 1 or 3"),
        ("stem_stride", 16, "leaves no encoder blocks"),
    ],
)
def test_bad_unet_values(tmp_path, key, value, problem):
    config = training_config("single_instance")
    config["model_config"]["backbone_config"]["unet"][key] = value
    with pytest.raises(ModelConfigError, match=problem):
        parse(tmp_path, config)


def test_derived_unet_geometry():
    unet = UNetSpec(**UNET)
    assert (unet.stem_blocks, unet.down_blocks, unet.up_blocks, unet.input_stride) == (0, 4, 3, 16)
    stem = UNetSpec(**(UNET | {"stem_stride": 4, "output_stride": 4}))
    assert (stem.stem_blocks, stem.down_blocks, stem.up_blocks, stem.input_stride) == (2, 2, 4, 32)


def test_bad_skeleton(tmp_path):
    config = training_config("single_instance")
    config["data_config"]["skeletons"] = []
    with pytest.raises(ModelConfigError, match="model has no skeleton"):
        parse(tmp_path, config)
    config = training_config("single_instance")
    config["data_config"]["skeletons"][0]["edges"][0]["source"]["name"] = "wing"
    with pytest.raises(ModelConfigError, match="'wing', which is not a node"):
        parse(tmp_path, config)


def test_unreadable_yaml(tmp_path):
    (tmp_path / "training_config.yaml").write_text("model_config: [unclosed\n")
    with pytest.raises(ModelConfigError, match="not valid YAML"):
        read_training_config(tmp_path)
    (tmp_path / "training_config.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ModelConfigError, match="the document is not a mapping"):
        read_training_config(tmp_path)
    (tmp_path / "training_config.yaml").write_bytes(b"model_config: \xff\xfe\n")
    with pytest.raises(ModelConfigError, match=r"training_config\.yaml: not UTF-8 text"):
        read_training_config(tmp_path)


@pytest.mark.parametrize(
    "model_dir",
    sorted(MODELS.glob("*/training_config.yaml")) if MODELS.is_dir() else [],
    ids=lambda p: p.parent.name,
)
def test_trained_model_configs(model_dir):
    spec = read_training_config(model_dir.parent)
    assert spec.model_type in MODEL_HEADS
    assert spec.skeleton.n_nodes > 0
    for head in spec.heads:
        assert head.n_channels > 0
        assert head.output_stride <= spec.backbone.input_stride


def test_trained_models_are_present():
    require(MODELS)
    assert any(MODELS.glob("*/training_config.yaml"))
