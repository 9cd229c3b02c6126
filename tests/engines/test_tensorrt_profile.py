"""The "tensorrt" export profile: exact float32 resize, fixed slots, same poses.

Its graphs must be what TensorRT's ONNX importer takes as it is (the lint reports
nothing), decode to the same poses as the default profile's, and meet the same
golden tolerances against sleap-nn, at the test videos' size and at odd sizes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

from sleap_live.engines import export_model
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.check_tensorrt import check_tensorrt
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.graph.resize import _resize_tables, resize_tables, resize_values
from sleap_live.engines.host.agreement import compare_poses
from sleap_live.engines.host.outputs import INSTANCE_SLOTS, output_axes, output_names
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import ExportMetadata, read_onnx_metadata
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.runners.onnx import BoundIO, OnnxRunner
from sleap_live.engines.settings import InferenceSettings
from sleap_live.engines.types import ModelInfo, Skeleton
from sleap_live.stream.sources import FileSource
from tests.engines import goldens

MODELS = goldens.DATA / "models"
BATCH = 8
VERIFY_FRAMES = 5
# The profile against sleap-nn's goldens on the videos' first frames (the default
# profile meets them on the whole videos in test_parity.py): six batches, centroids
# and crops of every frame kind the fixtures have.
GOLDEN_FRAMES = 48


def _frames(video: Path) -> np.ndarray:
    with FileSource(str(video)) as source:
        return np.stack([frame.image for frame in source])


def _odd_canvas(frames: np.ndarray, grow: tuple[int, int] = (35, 75)) -> np.ndarray:
    """Frames zero-padded bottom/right to an odd size, so the size matcher resizes."""
    height, width = frames.shape[1] + grow[0], frames.shape[2] + grow[1]
    canvas = np.zeros((len(frames), height | 1, width | 1, frames.shape[3]), np.uint8)
    canvas[:, : frames.shape[1], : frames.shape[2]] = frames
    return canvas


def _poses(onnx_bytes: bytes, frames: np.ndarray) -> list[dict]:
    runner = OnnxRunner(onnx_bytes)
    try:
        out = []
        for start in range(0, len(frames), BATCH):
            for poses in runner.run(frames[start : start + BATCH]):
                out.append(
                    {
                        "points": poses.points,
                        "point_scores": poses.point_scores,
                        "instance_scores": poses.instance_scores,
                        "identities": poses.identities,
                    }
                )
        return out
    finally:
        runner.close()


# The tensorrt profile's instance slots per frame (centroid and top-down models need
# a number): far more than the fixtures' two animals, so it never binds and the
# poses are sleap-nn's, which keeps every centroid.
SLOTS = InferenceSettings(max_instances=20)


def _export(name: str, frames: np.ndarray, profile: str, verify: bool = True) -> bytes:
    models, _, _, _ = goldens.case_paths(name)
    model = load_inference_model(models, SLOTS)
    return export_graph(
        model,
        verify=verify,
        verify_frames=frames[:VERIFY_FRAMES],
        sources=models,
        profile=profile,
    )


# --- the resize --------------------------------------------------------------------
def test_host_tables_equal_the_graph_tables_for_every_size_pair():
    sizes = [*range(1, 48), 64, 100, 127, 168, 200, 203, 275, 480, 640, 1024]
    for in_size in sizes:
        for out_size in sizes:
            indices, weights, precision = resize_tables(in_size, out_size)
            graph = _resize_tables(torch.tensor([in_size]), torch.tensor([out_size]))
            assert np.array_equal(indices, graph[0].numpy()), (in_size, out_size)
            assert np.array_equal(weights, graph[1].numpy()), (in_size, out_size)
            assert precision == int(graph[2]), (in_size, out_size)


@pytest.mark.parametrize(
    "size",
    [
        (203, 275, 168, 200),  # the size matcher on an odd frame
        (168, 200, 84, 100),  # input scale 0.5
        (1024, 1024, 168, 168),  # a strong downscale: weights split high/low
        (37, 100, 300, 7),  # up one axis, down the other
        (9, 7, 3, 2),
    ],
)
def test_float32_resize_equals_torchs_uint8_kernel(size):
    in_height, in_width, height, width = size
    generator = torch.Generator().manual_seed(sum(size))
    image = torch.randint(0, 256, (2, 3, in_height, in_width), generator=generator)
    image = image.to(torch.uint8)
    expected = F.interpolate(image, (height, width), mode="bilinear", antialias=True)
    got = resize_values(image.float(), height, width)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected.float())


# --- the output contract and its decoding ---------------------------------------------
def test_slot_and_list_layouts_decode_to_the_same_poses():
    info = ModelInfo(
        model_type="multi_class_topdown",
        skeleton=Skeleton(node_names=("a", "b"), edges=((0, 1),)),
        input_channels=1,
        max_instances=3,
        class_names=("x", "y"),
    )
    rng = np.random.default_rng(0)
    valid = np.array([[True, True, False], [False, False, False], [True, False, False]])
    points = rng.uniform(0, 100, (3, 3, 2, 2)).astype(np.float32)
    points[2, 0, 1] = np.nan
    point_scores = rng.uniform(size=(3, 3, 2)).astype(np.float32)
    instance_scores = rng.uniform(size=(3, 3)).astype(np.float32)
    class_scores = rng.uniform(size=(3, 3, 2)).astype(np.float32)
    slots = {
        "instance_valid": valid,
        "points": np.where(valid[..., None, None], points, np.nan),
        "point_scores": point_scores,
        "instance_scores": instance_scores,
        "class_scores": class_scores,
    }
    frames, slot = np.nonzero(valid)
    listed = {
        "instance_frame": frames,
        "points": points[frames, slot],
        "point_scores": point_scores[frames, slot],
        "instance_scores": instance_scores[frames, slot],
        "class_scores": class_scores[frames, slot],
    }

    from_slots, from_list = decode(info, slots, 3), decode(info, listed, 3)

    assert [len(p.points) for p in from_slots] == [2, 0, 1]
    for a, b in zip(from_slots, from_list, strict=True):
        np.testing.assert_array_equal(a.points, b.points)
        np.testing.assert_array_equal(a.point_scores, b.point_scores)
        np.testing.assert_array_equal(a.instance_scores, b.instance_scores)
        np.testing.assert_array_equal(a.identities, b.identities)


def test_slot_outputs_have_no_data_dependent_axis():
    for model_type in ("single_instance", "centroid", "topdown", "multi_class_topdown"):
        axes = output_axes(model_type, INSTANCE_SLOTS)
        assert list(axes) == list(output_names(model_type, INSTANCE_SLOTS))
        assert all(names[:2] == ("batch", "instance_slots") for names in axes.values())


# --- exports of every model type --------------------------------------------------------
EXPORTS = {
    "single_instance": ["single_instance"],
    "centroid": ["centroid"],
    "topdown": ["centroid", "centered_instance"],
    "bottomup": ["bottomup"],
    "multi_class_bottomup": ["multi_class_bottomup"],
    "multi_class_topdown": ["centroid_rgb", "multi_class_topdown"],
}


# The odd size: the fixture videos' 168x200 frames grown to 203x275 (`_odd_canvas`).
ODD_SIZE = (203, 275)


@pytest.fixture(scope="module")
def odd_size_exports(tmp_path_factory):
    """Each model type's unverified tensorrt-profile export at the odd size, made once
    for the module: the lint test reads the file, the odd-size test runs it."""
    folder = tmp_path_factory.mktemp("tensorrt_odd_size")
    made: dict[str, Path] = {}

    def export(model_type: str) -> Path:
        if model_type not in made:
            made[model_type] = export_model(
                [MODELS / name for name in EXPORTS[model_type]],
                folder / f"{model_type}.onnx",
                verify=False,
                profile="tensorrt",
                frame_size=ODD_SIZE,
                settings=SLOTS,
            )
        return made[model_type]

    return export


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("model_type", sorted(EXPORTS))
def test_tensorrt_profile_export_is_lint_clean_fixed_shape_and_preallocated(
    model_type, odd_size_exports
):
    path = odd_size_exports(model_type)

    assert check_tensorrt(path) == []
    metadata = read_onnx_metadata(path)
    assert metadata.profile == "tensorrt"
    assert metadata.output_layout == INSTANCE_SLOTS
    assert metadata.tensorrt["frame_shape"][:2] == list(ODD_SIZE)
    assert metadata.tensorrt["tf32"]["resize_exact"] is True
    graph = onnx.load(str(path)).graph
    (frames,) = graph.input
    dims = [d.dim_value or d.dim_param for d in frames.type.tensor_type.shape.dim]
    assert dims[1:] == [*ODD_SIZE, metadata.input_channels[0]]
    # Every output is sized in the graph but for the batch, so bound I/O
    # preallocates all of them.
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    layout = output_axes(metadata.info.model_type, metadata.output_layout)
    binding = BoundIO(session, "cpu", output_axes=layout)
    assert set(binding._output_buffers(3)) == set(metadata.output_names)


@pytest.mark.parametrize("model_type", ["centroid", "topdown"])
def test_tensorrt_profile_of_centroids_needs_max_instances(model_type):
    # sleap-nn keeps every centroid; a graph with fixed slots per frame cannot.
    model = load_inference_model([MODELS / name for name in EXPORTS[model_type]])
    assert model.info.max_instances is None
    with pytest.raises(ModelConfigError, match=r"give max_instances \(--max-instances N"):
        export_graph(model, verify=False, profile="tensorrt")
    assert model.profile == "default"


def test_tensorrt_profile_is_onnx_only_and_restores_the_models_profile():
    model = load_inference_model([MODELS / "single_instance"])
    with pytest.raises(ValueError, match="ONNX only"):
        export_model([MODELS / "single_instance"], "x.pt", format="torchscript", profile="tensorrt")
    export_graph(model, verify=False, profile="tensorrt")
    assert model.profile == "default"
    with pytest.raises(ValueError, match="unknown profile"):
        model.set_profile("fast")


def test_metadata_records_the_profile_and_reads_old_documents():
    model = load_inference_model([MODELS / "single_instance"])
    document = onnx.load_from_string(export_graph(model, verify=False, profile="tensorrt"))
    (prop,) = document.metadata_props
    metadata = ExportMetadata.from_json(prop.value)
    assert metadata.profile == "tensorrt"
    old = metadata.to_dict()
    del old["profile"], old["tensorrt"]
    assert ExportMetadata.from_dict(old).profile == "default"


# --- goldens ----------------------------------------------------------------------------
# A tiled model has no tensorrt profile: it is refused in one line (test_tiling.py).
PROFILE_CASES = [name for name in goldens.CASES if name != "tiled_single_instance"]


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILE_CASES)
def test_tensorrt_profile_matches_sleap_nn_predict(name):
    _, video, golden_path, _ = goldens.case_paths(name)
    frames = _frames(video)[:GOLDEN_FRAMES]
    ours = _poses(_export(name, frames, "tensorrt"), frames)
    golden = dict(np.load(golden_path))
    info_classes = load_inference_model(goldens.case_paths(name)[0]).info.class_names
    frames = goldens.compared_frames(name, len(ours))
    bound = goldens.bound_of(tuple(goldens.case_paths(name)[0]))
    agreement = goldens.agreement(ours, golden, bound, info_classes, frames)
    print(f"{name}: {agreement.summary()}")
    assert agreement.points > 0 and agreement.agrees, agreement.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILE_CASES)
def test_tensorrt_profile_agrees_with_the_default_at_an_odd_size(name, odd_size_exports):
    _, video, _, _ = goldens.case_paths(name)
    frames = _odd_canvas(_frames(video)[:16])
    assert frames.shape[1:3] == ODD_SIZE
    # The default graph's own check grows the frames further, past where the
    # fixture models find animals; it is verified at other sizes elsewhere. The
    # tensorrt graph's check against torch is the golden test's; here it is held
    # to the default graph, frame by frame.
    default = _poses(_export(name, frames, "default", verify=False), frames)
    tensorrt = _poses(odd_size_exports(name).read_bytes(), frames)
    bound = goldens.bound_of(tuple(goldens.case_paths(name)[0]))
    agreement = compare_poses(goldens.frame_poses(default), goldens.frame_poses(tensorrt), bound)
    assert agreement.agrees, f"{name} at {frames.shape[1]}x{frames.shape[2]}: {agreement.summary()}"
