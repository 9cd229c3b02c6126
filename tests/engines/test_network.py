"""The torch network: structure, sleap-nn checkpoint keys, outputs and export."""

from __future__ import annotations

import io
from pathlib import Path

import attrs
import numpy as np
import onnxruntime as ort
import pytest
import torch

from sleap_live.engines.errors import CheckpointError, ModelConfigError
from sleap_live.engines.graph.network import Network, build_network
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, PreprocessSpec, UNetSpec
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.types import Skeleton

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
PARTS = ("a", "b", "c")
CLASSES = ("x", "y")
UNET = UNetSpec(
    in_channels=1,
    kernel_size=3,
    filters=4,
    filters_rate=1.5,
    max_stride=16,
    stem_stride=None,
    middle_block=True,
    up_interpolate=True,
    stacks=1,
    convs_per_block=2,
    output_stride=2,
)


def heads(model_type: str, stride: int, **options) -> tuple[HeadSpec, ...]:
    confmaps = {"config_key": "confmaps", "output_stride": stride, "part_names": PARTS}
    if model_type == "centroid":
        sigmoid = options.get("sigmoid", False)
        return (
            HeadSpec("CentroidConfmapsHead", "confmaps", stride, use_sigmoid_activation=sigmoid),
        )
    if model_type == "single_instance":
        return (HeadSpec("SingleInstanceConfmapsHead", **confmaps),)
    if model_type == "centered_instance":
        return (HeadSpec("CenteredInstanceConfmapsHead", **confmaps),)
    if model_type == "bottomup":
        pafs = HeadSpec(
            "PartAffinityFieldsHead",
            "pafs",
            options.get("paf_stride", stride),
            edges=(("a", "b"), ("b", "c")),
            edge_indices=((0, 1), (1, 2)),
        )
        return (HeadSpec("MultiInstanceConfmapsHead", **confmaps), pafs)
    if model_type == "multi_class_bottomup":
        maps = HeadSpec("ClassMapsHead", "class_maps", stride, classes=CLASSES)
        return (HeadSpec("MultiInstanceConfmapsHead", **confmaps), maps)
    vectors = HeadSpec(
        "ClassVectorsHead",
        "class_vectors",
        UNET.max_stride,
        classes=CLASSES,
        num_fc_layers=options.get("num_fc_layers", 1),
        num_fc_units=options.get("num_fc_units", 64),
    )
    return (HeadSpec("CenteredInstanceConfmapsHead", **confmaps), vectors)


def make_spec(
    model_type: str = "single_instance",
    path: Path = Path("model"),
    head_options: dict | None = None,
    **unet,
) -> ModelSpec:
    backbone = attrs.evolve(UNET, **unet)
    return ModelSpec(
        path=path,
        model_type=model_type,
        skeleton=Skeleton(node_names=PARTS, edges=((0, 1), (1, 2))),
        backbone=backbone,
        heads=heads(model_type, backbone.output_stride, **(head_options or {})),
        preprocess=PreprocessSpec(),
    )


def sleap_nn_state_dict(network: Network) -> dict[str, torch.Tensor]:
    """`network`'s weights under the keys a sleap-nn checkpoint stores them."""
    return {network.sleap_nn_keys[k]: v.clone() for k, v in network.state_dict().items()}


def save_model_dir(path: Path, network: Network) -> None:
    """Write a best.ckpt next to an already written training config."""
    torch.save({"epoch": 3, "state_dict": sleap_nn_state_dict(network)}, path / "best.ckpt")


# sleap-nn 0.3.5's keys and weight shapes for `golden_spec` (from its Model).
GOLDEN_WEIGHTS = [
    ("backbone.stem.stem_stack.0.blocks.stem0_conv0", (4, 1, 7, 7)),
    ("backbone.stem.stem_stack.0.blocks.stem0_conv1", (4, 4, 7, 7)),
    ("backbone.encoders.0.encoder_stack.0.blocks.stack0_enc0_conv0", (6, 4, 3, 3)),
    ("backbone.encoders.0.encoder_stack.0.blocks.stack0_enc0_conv1", (6, 6, 3, 3)),
    ("backbone.encoders.0.encoder_stack.1.blocks.stack0_enc1_conv0", (9, 6, 3, 3)),
    ("backbone.encoders.0.encoder_stack.1.blocks.stack0_enc1_conv1", (9, 9, 3, 3)),
    ("backbone.decoders.0.decoder_stack.0.blocks.stack0_dec0_s16_to_s8_trans_conv", (13, 9, 3, 3)),
    (
        "backbone.decoders.0.decoder_stack.0.blocks.stack0_dec0_s16_to_s8_refine_conv0",
        (9, 18, 3, 3),
    ),
    ("backbone.decoders.0.decoder_stack.0.blocks.stack0_dec0_s16_to_s8_refine_conv1", (9, 9, 3, 3)),
    ("backbone.decoders.0.decoder_stack.1.blocks.stack0_dec1_s8_to_s4_trans_conv", (9, 6, 3, 3)),
    ("backbone.decoders.0.decoder_stack.1.blocks.stack0_dec1_s8_to_s4_refine_conv0", (6, 12, 3, 3)),
    ("backbone.decoders.0.decoder_stack.1.blocks.stack0_dec1_s8_to_s4_refine_conv1", (6, 6, 3, 3)),
    ("backbone.decoders.0.decoder_stack.2.blocks.stack0_dec2_s4_to_s2_trans_conv", (6, 4, 3, 3)),
    ("backbone.decoders.0.decoder_stack.2.blocks.stack0_dec2_s4_to_s2_refine_conv0", (4, 8, 3, 3)),
    ("backbone.decoders.0.decoder_stack.2.blocks.stack0_dec2_s4_to_s2_refine_conv1", (4, 4, 3, 3)),
    ("backbone.middle_blocks.0.blocks.stack0_enc3_middle_expand_conv0", (13, 9, 3, 3)),
    ("backbone.middle_blocks.1.blocks.stack0_enc4_middle_contract_conv0", (13, 13, 3, 3)),
    ("head_layers.0.MultiInstanceConfmapsHead.0", (3, 4, 1, 1)),
    ("head_layers.1.PartAffinityFieldsHead.0", (4, 6, 1, 1)),
]


def golden_spec() -> ModelSpec:
    return make_spec(
        "bottomup",
        max_stride=8,
        stem_stride=2,
        up_interpolate=False,
        head_options={"paf_stride": 4},
    )


def test_keys_and_shapes_match_sleap_nn():
    network = build_network(golden_spec())
    expected = {}
    for name, shape in GOLDEN_WEIGHTS:
        expected[f"model.{name}.weight"] = shape
        expected[f"model.{name}.bias"] = (shape[1] if "trans_conv" in name else shape[0],)
    got = {network.sleap_nn_keys[k]: tuple(v.shape) for k, v in network.state_dict().items()}
    assert got == expected


def test_class_vector_keys_match_sleap_nn():
    network = build_network(make_spec("multi_class_topdown", filters=8))
    keys = {v for v in network.sleap_nn_keys.values() if "head_layers.1" in v}
    assert keys == {
        "model.head_layers.1.pre_classification0_fc.weight",
        "model.head_layers.1.pre_classification0_fc.bias",
        "model.head_layers.1.ClassVectorsHead.weight",
        "model.head_layers.1.ClassVectorsHead.bias",
    }
    assert network.state_dict()["heads.ClassVectorsHead.hidden.0.weight"].shape == (64, 40)


OPTION_COMBOS = [
    ("single_instance", {}),
    ("single_instance", {"up_interpolate": False}),
    ("single_instance", {"filters_rate": 2.0, "max_stride": 32, "output_stride": 4}),
    ("single_instance", {"convs_per_block": 3, "kernel_size": 5, "output_stride": 1}),
    ("single_instance", {"filters_rate": 1.0, "middle_block": False, "convs_per_block": 1}),
    ("single_instance", {"stem_stride": 2, "output_stride": 4}),
    ("single_instance", {"stem_stride": 4, "output_stride": 8}),
    ("single_instance", {"in_channels": 3}),
    ("centroid", {"output_stride": 4}),
    ("centroid", {"output_stride": 16}),
    ("centered_instance", {}),
    ("bottomup", {}),
    ("multi_class_bottomup", {"up_interpolate": False, "output_stride": 4}),
    ("multi_class_topdown", {}),
]


@pytest.mark.parametrize(("model_type", "unet"), OPTION_COMBOS, ids=str)
def test_network_runs_with_each_option(model_type, unet):
    spec = make_spec(model_type, **unet)
    network = build_network(spec)
    stride = spec.backbone.input_stride
    x = torch.rand(2, spec.in_channels, stride * 3, stride * 2)
    with torch.inference_mode():
        outputs = network(x)
    assert set(outputs) == set(spec.head_names)
    for head in spec.heads:
        out = outputs[head.name]
        if head.name == "ClassVectorsHead":
            assert out.shape == (2, len(CLASSES))
            torch.testing.assert_close(out.sum(dim=1), torch.ones(2))
        else:
            s = head.output_stride
            assert out.shape == (2, head.n_channels, stride * 3 // s, stride * 2 // s)
        assert torch.isfinite(out).all()


def test_bottomup_heads_read_their_own_strides():
    spec = make_spec("bottomup", head_options={"paf_stride": 8})
    outputs = build_network(spec)(torch.rand(1, 1, 64, 32))
    assert outputs["MultiInstanceConfmapsHead"].shape == (1, 3, 32, 16)
    assert outputs["PartAffinityFieldsHead"].shape == (1, 4, 8, 4)


def test_sigmoid_heads():
    x = torch.rand(1, 1, 64, 64) * 50
    centroid = build_network(make_spec("centroid", head_options={"sigmoid": True}))
    out = centroid(x)["CentroidConfmapsHead"]
    assert ((out > 0) & (out < 1)).all()
    maps = build_network(make_spec("multi_class_bottomup"))(x)["ClassMapsHead"]
    assert ((maps > 0) & (maps < 1)).all()


def test_channel_conversion_matches_sleap_nn_model_forward():
    gray = build_network(make_spec())
    rgb = torch.rand(1, 3, 32, 32)
    luma = 0.2989 * rgb[:, :1] + 0.587 * rgb[:, 1:2] + 0.114 * rgb[:, 2:]
    torch.testing.assert_close(gray(rgb), gray(luma))
    color = build_network(make_spec(in_channels=3))
    mono = torch.rand(1, 1, 32, 32)
    torch.testing.assert_close(color(mono), color(mono.repeat(1, 3, 1, 1)))


@pytest.mark.parametrize(
    ("unet", "problem"),
    [
        ({"stacks": 2}, "runs only 1 stack"),
        ({"convs_per_block": 1}, "convs_per_block 1 cannot be built"),
        ({"middle_block": False}, "middle_block false"),
        ({"stem_stride": 4, "output_stride": 2}, "without its skip connection"),
    ],
)
def test_configs_sleap_nn_cannot_run_are_rejected(unet, problem):
    with pytest.raises(ModelConfigError, match=problem) as e:
        build_network(make_spec(**unet))
    assert str(e.value).startswith("model/training_config.yaml: ")


def test_head_at_a_stride_the_decoder_does_not_produce():
    spec = make_spec("bottomup", head_options={"paf_stride": 16})
    with pytest.raises(ModelConfigError, match="output_stride 16 is not a decoder stride"):
        build_network(spec)


def test_class_vectors_need_matching_units_without_hidden_layers():
    spec = make_spec("multi_class_topdown", head_options={"num_fc_layers": 0})
    with pytest.raises(ModelConfigError, match="num_fc_layers 0 needs num_fc_units 20"):
        build_network(spec)
    spec = make_spec("multi_class_topdown", head_options={"num_fc_layers": 0, "num_fc_units": 20})
    assert build_network(spec)(torch.rand(1, 1, 32, 32))["ClassVectorsHead"].shape == (1, 2)


def test_state_dict_round_trip():
    spec = make_spec("bottomup", up_interpolate=False)
    source = build_network(spec)
    target = build_network(spec)
    target.load_sleap_nn_state_dict(sleap_nn_state_dict(source), Path("x.ckpt"))
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value)
    x = torch.rand(1, 1, 48, 64)
    for name, out in source(x).items():
        assert torch.equal(target(x)[name], out)


def test_checkpoint_mismatches_name_the_file_and_key():
    spec = make_spec("centroid", output_stride=4)
    network = build_network(spec)
    good = sleap_nn_state_dict(network)
    key = "model.head_layers.0.CentroidConfmapsHead.0.weight"

    wrong_shape = dict(good) | {key: torch.zeros(1, 5, 1, 1)}
    with pytest.raises(
        CheckpointError, match=r"x\.ckpt: .*CentroidConfmapsHead\.0\.weight has shape"
    ):
        network.load_sleap_nn_state_dict(wrong_shape, Path("x.ckpt"))

    missing = {k: v for k, v in good.items() if k != key}
    with pytest.raises(CheckpointError, match=r"x\.ckpt: checkpoint lacks .*0\.weight"):
        network.load_sleap_nn_state_dict(missing, Path("x.ckpt"))

    extra = dict(good) | {"model.backbone.extra.weight": torch.zeros(1)}
    with pytest.raises(CheckpointError, match=r"first model\.backbone\.extra\.weight"):
        network.load_sleap_nn_state_dict(extra, Path("x.ckpt"))


def test_load_network_from_a_model_dir(tmp_path):
    spec = make_spec("centroid", path=tmp_path, output_stride=4)
    source = build_network(spec)
    save_model_dir(tmp_path, source)
    loaded = load_model_network(spec)
    assert not loaded.training
    x = torch.rand(1, 1, 32, 48)
    torch.testing.assert_close(loaded(x), source(x), rtol=0, atol=0)


def test_load_network_rejects_a_checkpoint_of_another_config(tmp_path):
    save_model_dir(tmp_path, build_network(make_spec("centroid", path=tmp_path, filters=8)))
    with pytest.raises(CheckpointError, match=r"best\.ckpt: .* has shape .* implies"):
        load_model_network(make_spec("centroid", path=tmp_path))


@pytest.mark.parametrize(
    ("model_type", "unet"),
    [
        ("bottomup", {}),
        ("multi_class_topdown", {"up_interpolate": False}),
        ("single_instance", {"stem_stride": 2, "output_stride": 4}),
    ],
    ids=["bottomup", "topdown-classes", "stem"],
)
def test_onnx_export_with_dynamic_size(model_type, unet):
    network = build_network(make_spec(model_type, **unet))
    names = list(network.spec.head_names)
    buffer = io.BytesIO()
    torch.onnx.export(
        network,
        (torch.rand(1, 1, 64, 64),),
        buffer,
        input_names=["image"],
        output_names=names,
        dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}},
        opset_version=17,
        dynamo=False,
    )
    session = ort.InferenceSession(
        buffer.getvalue(), session_options(), providers=["CPUExecutionProvider"]
    )
    for shape in [(2, 1, 48, 80), (1, 1, 96, 32)]:
        x = torch.rand(shape)
        got = session.run(None, {"image": x.numpy()})
        with torch.inference_mode():
            expected = network(x)
        for name, value in zip(names, got, strict=True):
            np.testing.assert_allclose(value, expected[name].numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "model_dir",
    sorted(p for p in MODELS.glob("*") if (p / "best.ckpt").is_file()) if MODELS.is_dir() else [],
    ids=lambda p: p.name,
)
def test_trained_models_load_and_run(model_dir):
    spec = read_model_dir(model_dir)
    network = load_model_network(spec)
    stride = spec.backbone.input_stride
    side = -(-(spec.preprocess.crop_size or 64) // stride) * stride
    with torch.inference_mode():
        outputs = network(torch.rand(1, spec.in_channels, side, side))
    assert set(outputs) == set(spec.head_names)
    assert all(torch.isfinite(v).all() for v in outputs.values())


def test_sigmoid_heads_keep_saturated_values_in_onnx():
    from sleap_live.engines.graph.decoder_heads import ConvHead

    head = ConvHead(2, 2, sigmoid=True).eval()
    x = torch.linspace(-40, 40, 2 * 16 * 16).reshape(1, 2, 16, 16)
    buffer = io.BytesIO()
    torch.onnx.export(head, (x,), buffer, dynamo=False, input_names=["x"])
    ours = ort.InferenceSession(buffer.getvalue(), session_options()).run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        expected = torch.sigmoid(head.conv(x)).numpy()
    assert (ours > 0).all()  # no flush to zero: saturated class maps must not tie
    np.testing.assert_allclose(ours, expected, rtol=1e-4)
