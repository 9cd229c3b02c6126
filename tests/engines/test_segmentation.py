"""Semantic segmentation (sleap-nn 0.3.5's `semantic_segmentation`) against sleap-nn's `predict`.

The golden (tests/data/goldens/semantic_segmentation.npz, made by
scripts/make_segmentation_fixture.py) holds sleap-nn predict's masks on the whole
`multi_gray` test video, as it stores them: at the output stride, with a sio scale.
Issue 40's acceptance: the same masks (count per frame) on at least 99.9 % of frames,
each mask's IoU with sleap-nn's at least 0.999, its scale the same and its score within
float32 noise.
"""

from __future__ import annotations

from functools import cache

import attrs
import av
import numpy as np
import pytest
import sleap_io as sio
import torch

from sleap_live import cli
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.dirs import poseless_kind
from sleap_live.engines.types import FrameMasks, FramePoses, Skeleton
from sleap_live.stream.outputs.journal import MaskChunk
from sleap_live.stream.outputs.overlay_recorder import OverlayRecorder
from sleap_live.stream.outputs.render import render_slp
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.pipeline import check_poseless_run
from sleap_live.stream.sources import FileSource
from sleap_live.stream.types import PoseRecord
from tests.committed import require
from tests.engines import goldens

MODEL = goldens.DATA / "models" / "semantic_segmentation"
VIDEO = goldens.DATA / "videos" / "multi_gray.mkv"
GOLDEN = goldens.DATA / "goldens" / "semantic_segmentation.npz"
MADE_BY = "scripts/make_segmentation_fixture.py"
SAME_MASKS, MASK_IOU, SCORE_REL = 0.999, 0.999, 1e-5
TORCH_FRAMES = 16

# One mask per frame at most: (mask, score, (scale x, scale y)) or None.
FrameMask = tuple[np.ndarray, float, tuple[float, float]] | None


@cache
def _golden() -> tuple[FrameMask, ...]:
    require(MODEL, VIDEO, GOLDEN, made_by=MADE_BY)
    golden = np.load(GOLDEN)
    found: list[FrameMask] = []
    for f, count in enumerate(golden["n_masks"]):
        assert count <= 1, "a semantic model stores one mask per frame at most"
        if count == 0:
            found.append(None)
            continue
        rows, cols = golden["mask_shapes"][f, 0]
        mask = np.unpackbits(golden["masks"][f, 0], axis=-1)[:rows, :cols].astype(bool)
        scale = golden["mask_scales"][f, 0]
        found.append((mask, float(golden["mask_scores"][f, 0]), (scale[0], scale[1])))
    return tuple(found)


@cache
def _frames() -> np.ndarray:
    with FileSource(VIDEO) as source:
        return np.stack([frame.image for frame in source])


def _assert_sleap_nns_masks(found: list[FrameMask], label: str) -> None:
    want = _golden()[: len(found)]
    same = [(a is None) == (b is None) for a, b in zip(want, found, strict=True)]
    assert np.mean(same) >= SAME_MASKS, f"{label}: {same.count(False)} frames differ in masks"
    ious = []
    for a, b in zip(want, found, strict=True):
        if a is None or b is None:
            continue
        assert a[0].shape == b[0].shape and a[2] == b[2], f"{label}: another mask grid"
        ious.append(np.count_nonzero(a[0] & b[0]) / max(1, np.count_nonzero(a[0] | b[0])))
        assert abs(a[1] - b[1]) <= SCORE_REL * max(1.0, abs(a[1])), f"{label}: mask scores"
    assert ious and min(ious) >= MASK_IOU, f"{label}: least IoU {min(ious):.5f}"


def _frame_mask(masks: FrameMasks | None) -> FrameMask:
    assert masks is not None
    if masks.n_masks == 0:
        return None
    scale = masks.scales[0]
    return masks.masks[0], float(masks.scores[0]), (scale[0], scale[1])


def test_the_torch_module_gives_sleap_nns_masks():
    # The model from its training directory: preprocessing, network, the threshold
    # and the extent of the map covering the frame in the graph; cropped on the host.
    _golden()
    model = load_inference_model(MODEL).eval()
    assert model.info.model_type == "semantic_segmentation"
    with torch.inference_mode():
        outputs = model(torch.from_numpy(_frames()[:TORCH_FRAMES]))
    named = {name: out.numpy() for name, out in zip(model.output_names, outputs, strict=True)}
    poses = decode(model.info, named, TORCH_FRAMES)
    assert all(pose.n_instances == 0 for pose in poses)
    _assert_sleap_nns_masks([_frame_mask(pose.masks) for pose in poses], "torch")


@pytest.mark.slow
def test_sleap_live_run_writes_sleap_nns_masks(tmp_path, capsys):
    # Exported to ONNX (verified against torch), run by ONNX Runtime through the whole
    # command: sleap-io PredictedSegmentationMasks in LabeledFrame.masks, as sleap-nn
    # writes them.
    _golden()
    out = tmp_path / "masks.slp"
    cache_dir = ["--cache-dir", str(tmp_path / "cache")]
    argv = ["run", str(VIDEO), "-m", str(MODEL), "-o", str(out), "--device", "cpu", "-q"]
    assert cli.main([*argv, *cache_dir]) == 0
    said = capsys.readouterr()
    assert "found no animal" not in said.out + said.err  # frames with masks count as found
    labels = sio.load_slp(str(out), open_videos=False)
    found: list[FrameMask] = [None] * len(_frames())
    for frame in labels:
        assert not frame.instances and len(frame.masks) <= 1
        for mask in frame.masks:
            assert tuple(mask.offset) == (0.0, 0.0)
            found[frame.frame_idx] = (np.asarray(mask.data, bool), mask.score, tuple(mask.scale))
    _assert_sleap_nns_masks(found, "sleap-live run (onnx)")


def test_refused_before_any_work_what_a_segmentation_model_does_not_do(tmp_path):
    # Tracking and pose tables are refused from the config, in one line, before loading.
    assert poseless_kind([MODEL]) == "semantic_segmentation"
    with pytest.raises(ValueError, match="segmentation model's masks are not tracked"):
        check_poseless_run([MODEL], tracked=True, output=tmp_path / "a.slp")
    with pytest.raises(ValueError, match=r"masks are written to \.slp only"):
        check_poseless_run([MODEL], tracked=False, output=tmp_path / "a.csv")
    check_poseless_run([MODEL], tracked=False, output=tmp_path / "a.slp")


def test_the_slp_writer_keeps_masks_through_its_journal(tmp_path):
    # Masks of any size (one frame none, one two) survive the journal bit for bit, as
    # sleap-io PredictedSegmentationMasks with their score and scale.
    rng = np.random.default_rng(0)
    shapes = [[(5, 7)], [], [(3, 3), (1, 9)]]
    written = []
    with SlpWriter(
        tmp_path / "m.slp", Skeleton(("a",)), video="v.mp4", frame_shape=(10, 14, 1)
    ) as w:
        for f, frame_shapes in enumerate(shapes):
            masks = tuple(rng.random(shape) > 0.5 for shape in frame_shapes)
            found = FrameMasks(
                masks,
                rng.random(len(masks)).astype(np.float32),
                np.full((len(masks), 2), 0.5),
            )
            written.append(found)
            poses = attrs.evolve(FramePoses.empty(1), masks=found)
            w.write(
                PoseRecord(
                    frame_index=f, capture_time=0.0, ready_time=0.0, source_id="", poses=poses
                )
            )
    read = {
        frame.frame_idx: frame.masks
        for frame in sio.load_slp(str(tmp_path / "m.slp"), open_videos=False)
    }
    for f, found in enumerate(written):
        got = read.get(f, [])
        assert len(got) == found.n_masks
        for mask, want, score in zip(got, found.masks, found.scores, strict=True):
            assert np.array_equal(mask.data, want) and mask.score == pytest.approx(score)
            assert tuple(mask.scale) == (0.5, 0.5)
    chunk = MaskChunk(
        np.array([2], np.int32), written[2].masks, written[2].scores, written[2].scales
    )
    with pytest.raises(OSError, match="holds"):
        MaskChunk.from_bytes(chunk.to_bytes()[:-1])


def test_masks_are_drawn_where_they_are_by_render_and_the_live_overlay(tmp_path):
    # sleap-nn's masks of the first frames, written to a .slp and drawn by `render`: each
    # frame changes exactly on its mask's pixels (at the frame's scale); the live
    # overlay of the same records is the same video (both lossless here).
    frames, golden = _frames()[:4], _golden()[:4]
    records = [
        PoseRecord(
            frame_index=f,
            capture_time=0.0,
            ready_time=0.0,
            source_id="",
            poses=attrs.evolve(
                FramePoses.empty(1),
                masks=FrameMasks(
                    (found[0],), np.array([found[1]], np.float32), np.array([found[2]])
                ),
            ),
        )
        for f, found in enumerate(golden)
        if found is not None
    ]
    assert len(records) == len(frames)
    slp, after, live = tmp_path / "m.slp", tmp_path / "after.mkv", tmp_path / "live.mkv"
    with SlpWriter(slp, Skeleton(("a",)), video=str(VIDEO), frame_shape=frames.shape[1:]) as w:
        for record in records:
            w.write(record)
    render_slp(slp, after, stop=len(frames), codec="ffv1")
    recorder = OverlayRecorder(live, 30.0, frames.shape[1:], Skeleton(("a",)), codec="ffv1")
    with recorder:
        for record, frame in zip(records, frames, strict=True):
            recorder.write(record, frame)
    with av.open(str(after)) as a, av.open(str(live)) as b:
        drawn = [x.to_ndarray(format="rgb24") for x in a.decode(video=0)]
        assert all(
            (x.to_ndarray(format="rgb24") == y).all()
            for x, y in zip(b.decode(video=0), drawn, strict=True)
        )
    for image, plain, found in zip(drawn, frames, golden, strict=True):
        assert found is not None
        mask = found[0].repeat(2, axis=0).repeat(2, axis=1)  # scale 0.5: 2 x 2 pixels each
        changed = (image != plain).any(axis=2)
        assert mask.any() and (changed == mask[: plain.shape[0], : plain.shape[1]]).all()
