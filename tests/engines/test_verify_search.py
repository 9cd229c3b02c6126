"""An export is verified on frames that show animals wherever they are in the video,
and a valid model is never refused for want of them (issue 20, item 1).

The run tests use the multi-class top-down fixture pair on its video with blank
frames before it, as a recording whose animals enter late; the poses must be
sleap-nn's (the golden) on every frame of the original video.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.engines.errors import ExportError
from sleap_live.engines.export import exporter, frames
from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.export.frames import VerificationFrames, with_animals
from sleap_live.engines.export.verify import Exported
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.stream.runner import SPREAD_FRAMES, spread_frames, spread_indices
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

DATA = Path(__file__).resolve().parents[1] / "data"
MODELS = DATA / "models"
CASE = "multi_class_topdown"
# Frames before the animals appear: more than the 90 of the issue.
BLANK = 95
# A flat dark colour with no animal in it; not gray, so the clip stays RGB as the
# fixture video is read (a gray first frame would make it a gray recording).
BLANK_COLOUR = (40, 20, 10)
# Every bundled model, as `sleap-live export` takes it.
BUNDLED = {
    "single_instance": ("single_instance",),
    "centroid": ("centroid",),
    "centroid_rgb": ("centroid_rgb",),
    "topdown": ("centroid", "centered_instance"),
    "bottomup": ("bottomup",),
    "multi_class_topdown": ("centroid_rgb", "multi_class_topdown"),
    "multi_class_bottomup": ("multi_class_bottomup",),
}


def write_clip(path: Path, images: list[np.ndarray] | np.ndarray, fps: int = 30) -> Path:
    """A lossless (FFV1) RGB clip of `images`, decoded back bit for bit."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=fps)
        stream.width, stream.height = images[0].shape[1], images[0].shape[0]
        stream.pix_fmt = "bgr0"
        for image in images:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def video_images(video: Path) -> list[np.ndarray]:
    with FileSource(video) as source:
        return [frame.image for frame in source]


def blank(shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.asarray(BLANK_COLOUR, np.uint8), shape).copy()


@pytest.fixture(scope="module")
def case_video() -> Path:
    models, video, golden, _ = goldens.case_paths(CASE)
    require(*models, video, golden)
    return video


@pytest.fixture(scope="module")
def late_clip(case_video, tmp_path_factory) -> Path:
    """The case's video after `BLANK` frames without animals."""
    images = video_images(case_video)
    prefix = [blank(images[0].shape)] * BLANK
    return write_clip(tmp_path_factory.mktemp("late") / "late.mkv", prefix + images)


def slp_poses(path: Path, n_frames: int, track_names: list[str]) -> list[dict[str, np.ndarray]]:
    """Per-frame poses of a run's .slp in `goldens.compare`'s layout."""
    labels = sio.load_slp(str(path), open_videos=False)
    by_frame = {frame.frame_idx: frame for frame in labels}
    poses = []
    for index in range(n_frames):
        instances = list(by_frame[index].instances) if index in by_frame else []
        points = [instance.numpy(scores=True) for instance in instances]
        poses.append(
            {
                "points": np.asarray([p[:, :2] for p in points], float).reshape(-1, 5, 2),
                "point_scores": np.asarray([p[:, 2] for p in points], float).reshape(-1, 5),
                "instance_scores": np.asarray([i.score for i in instances], float),
                "identities": np.asarray(
                    [track_names.index(i.track.name) if i.track else -1 for i in instances]
                ),
            }
        )
    return poses


# ----------------------------------------------------------- where frames come from


def test_spread_indices_cover_the_video_first_then_fill_the_gaps():
    assert spread_indices(1100, 8) == [0, 550, 275, 825, 137, 412, 687, 962]
    assert sorted(spread_indices(3, 24)) == [0, 1, 2]
    indices = spread_indices(1100, SPREAD_FRAMES)
    assert len(set(indices)) == SPREAD_FRAMES and max(indices) < 1100


def test_spread_frames_seek_instead_of_decoding_a_long_video(case_video, tmp_path):
    # 1,100 frames: the candidates are read by seeking, within the decode budget.
    images = video_images(case_video)
    long_clip = write_clip(tmp_path / "long.mkv", [images[i % len(images)] for i in range(1100)])
    start = time.monotonic()
    candidates = spread_frames(long_clip)
    took = time.monotonic() - start
    assert len(candidates) >= 1 and candidates.shape[1:] == images[0].shape
    expected = spread_indices(1100, SPREAD_FRAMES)[: len(candidates)]
    for got, index in zip(candidates, expected, strict=True):
        np.testing.assert_array_equal(got, images[index % len(images)])
    assert took < 10, took
    # A budget spent after the first frame stops the decoding there.
    ticks = iter(range(100))
    one = spread_frames(long_clip, budget_s=0.5, clock=lambda: float(next(ticks)))
    assert len(one) == 1


def test_the_search_keeps_frames_with_animals_in_the_order_found():
    candidates = np.arange(10, dtype=np.uint8).reshape(10, 1, 1, 1).repeat(4, axis=1)
    seen: list[int] = []

    def detect(batch: np.ndarray) -> list[int]:
        seen.extend(int(frame[0, 0, 0]) for frame in batch)
        return [int(frame[0, 0, 0] >= 6) for frame in batch]

    chosen = with_animals(VerificationFrames(candidates, "the given frames"), detect)
    assert chosen.animals is True and chosen.searched == 10 and seen == list(range(10))
    assert [int(frame[0, 0, 0]) for frame in chosen.frames] == [6, 7, 8, 9]
    assert chosen.note("a model") is None

    none = with_animals(VerificationFrames(candidates, "the given frames"), lambda b: [0] * len(b))
    assert none.animals is False and len(none.frames) == frames.FRAMES_WANTED
    note = none.note("the topdown model (m)")
    assert note is not None and "\n" not in note
    assert note.startswith("verified the export of the topdown model (m) on 5 frames without")
    assert "none in the 10 looked at, from the given frames" in note
    assert "detections were not exercised" in note


def test_frames_read_from_a_video_name_it_in_the_note(case_video, tmp_path):
    clip = write_clip(tmp_path / "dark.mkv", [blank(video_images(case_video)[0].shape)] * 8)
    for read in (spread_frames(clip), spread_frames(clip, count=30), spread_frames(clip)[:3]):
        candidates = frames.verification_frames(3, read)
        none = with_animals(candidates, lambda batch: [0] * len(batch))
        note = none.note("the topdown model (m)")
        assert note is not None and f"from the video {clip})" in note
        assert none.source == f"the video {clip}"
    # Frames of no video file keep saying so.
    plain = frames.verification_frames(3, np.asarray(spread_frames(clip)))
    assert plain.source == "the given frames"


def test_the_search_stops_at_its_time_budget():
    candidates = np.zeros((40, 2, 2, 1), np.uint8)
    ticks = iter(float(t) for t in range(100))
    chosen = with_animals(
        VerificationFrames(candidates, "x"),
        lambda batch: [0] * len(batch),
        budget_s=2.5,
        clock=lambda: next(ticks),
    )
    # The deadline is 2.5: the first batch is always looked at, the next two at
    # times 1 and 2; at 3 the budget is spent.
    assert chosen.searched == 3 * frames.SEARCH_BATCH and chosen.animals is False


# ------------------------------------------------------------------ runs and exports


def test_a_run_whose_animals_enter_late_gives_sleap_nns_poses(
    late_clip, tmp_path, private_cache_dir, capsys
):
    models, _, golden_path, _ = goldens.case_paths(CASE)
    out = tmp_path / "late.slp"
    argv = ["run", str(late_clip), "-o", str(out), "-q"]
    for model in models:
        argv += ["-m", str(model)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "without animals" not in capsys.readouterr().err
    golden = dict(np.load(golden_path))
    names = [str(name) for name in golden["track_names"]]
    n_golden = len(golden["frame_indices"])
    poses = slp_poses(out, BLANK + n_golden, names)
    assert all(len(pose["points"]) == 0 for pose in poses[:BLANK])
    agreement = goldens.agreement(poses[BLANK:], golden, goldens.bound_of(tuple(models)), names)
    assert agreement.points > 0 and agreement.agrees, agreement.summary()


def test_a_video_without_animals_runs_with_a_one_line_note(
    case_video, tmp_path, private_cache_dir, capsys
):
    shape = video_images(case_video)[0].shape
    clip = write_clip(tmp_path / "empty.mkv", [blank(shape)] * 40)
    models, _, _, _ = goldens.case_paths(CASE)
    out = tmp_path / "empty.slp"
    argv = ["run", str(clip), "-o", str(out), "-q"]
    for model in models:
        argv += ["-m", str(model)]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "without animals" in line]
    assert len(notes) == 1, err
    assert "on 5 frames without animals (none in the 24 looked at" in notes[0]
    assert f"from the video {clip})" in notes[0]
    assert "detections were not exercised" in notes[0]
    assert all(not frame.instances for frame in sio.load_slp(str(out), open_videos=False))


@pytest.mark.parametrize("name", list(BUNDLED))
def test_export_works_on_every_bundled_model_without_a_video(name, tmp_path, capsys):
    dirs = [MODELS / model for model in BUNDLED[name]]
    require(*dirs)
    out = tmp_path / "out.onnx"
    assert cli.main(["export", *map(str, dirs), "-o", str(out)]) == 0, capsys.readouterr().err
    assert out.is_file() and out.stat().st_size > 0
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if "without animals" in line]) <= 1


def test_a_graph_that_disagrees_with_torch_is_still_refused(monkeypatch, toy_models):
    real = exporter.onnx_exported

    def changed(change: Callable[[np.ndarray], np.ndarray]) -> None:
        def exported_so(onnx_bytes: bytes, notes: tuple[str, ...]) -> Exported:
            exported = real(onnx_bytes, notes)

            def run(batch: np.ndarray) -> dict[str, np.ndarray]:
                return {name: change(np.asarray(v)) for name, v in exported.run(batch).items()}

            return Exported(run, exported.refusals, exported.tracer_notes)

        monkeypatch.setattr(exporter, "onnx_exported", exported_so)

    # On frames with animals: every value is compared.
    changed(lambda value: value + 1)
    with pytest.raises(ExportError, match=r"differs from the torch model .*: \d+ real disagree"):
        export_graph(toy_models.ToyInstanceModel(), note=lambda line: None)
    # Without animals the instance lists are empty, but their shapes still count.
    changed(lambda value: value[None])
    blind = toy_models.ToyInstanceModel(threshold=2.0)
    with pytest.raises(ExportError, match="has shape"):
        export_graph(blind, note=lambda line: None)


def test_the_multi_class_pair_exports_on_the_late_clip_from_its_animals(late_clip):
    models, _, _, _ = goldens.case_paths(CASE)
    model = load_inference_model(models)
    notes: list[str] = []
    export_graph(model, verify_frames=spread_frames(late_clip), note=notes.append)
    assert notes == []
