"""Pose files by suffix (.slp, .h5, .nwb, .csv) with provenance, and recordings by codec."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import av
import h5py
import numpy as np
import pytest
import sleap_io as sio
from pynwb import NWBHDF5IO

from sleap_live import cli
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.outputs.exports import CSV_COLUMNS, SUFFIXES
from sleap_live.stream.outputs.journal import journal_path
from sleap_live.stream.outputs.recorder import TIMESTAMP_COLUMNS, VideoRecorder, timestamps_path
from sleap_live.stream.outputs.recovery import recover_slp
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.sources import FileSource
from sleap_live.stream.types import PoseRecord
from tests.committed import require

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = DATA / "models" / "bottomup"
VIDEO = DATA / "videos" / "multi_gray.mkv"
N_FRAMES = 24


# ------------------------------------------------------------------ reading back


def _sorted(points: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Instances in a canonical order (by mean x), so formats that reorder compare."""
    order = np.argsort(np.nanmean(points[:, :, 0], axis=1), kind="stable")
    return (points[order], *(other[order] for other in others))


def poses_of(labels: sio.Labels) -> dict[int, tuple[np.ndarray, ...]]:
    """Frame index -> (points (n, nodes, 2), point scores (n, nodes), instance scores)."""
    poses = {}
    for frame in labels.labeled_frames:
        n_nodes = len(labels.skeletons[0].nodes)
        arrays = [instance.numpy(scores=True) for instance in frame.instances]
        points = np.stack([a[:, :2] for a in arrays]) if arrays else np.zeros((0, n_nodes, 2))
        scores = np.stack([a[:, 2] for a in arrays]) if arrays else np.zeros((0, n_nodes))
        instance_scores = np.array([float(instance.score) for instance in frame.instances])
        poses[frame.frame_idx] = _sorted(points, scores, instance_scores)
    return poses


def poses_of_csv(path: Path, nodes: list[str]) -> dict[int, tuple[np.ndarray, ...]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == [
            *CSV_COLUMNS,
            *(f"{node}.{field}" for node in nodes for field in ("x", "y", "score")),
        ]
        rows: dict[int, list[dict[str, str]]] = {}
        for row in reader:
            found = rows.setdefault(int(row["frame_index"]), [])
            if row["instance"]:
                assert int(row["instance"]) == len(found)
                found.append(row)

    def value(text: str) -> float:
        return float(text) if text else np.nan

    poses = {}
    for frame, found in rows.items():
        points = np.array(
            [[[value(r[f"{n}.x"]), value(r[f"{n}.y"])] for n in nodes] for r in found]
        ).reshape(-1, len(nodes), 2)
        scores = np.array([[value(r[f"{n}.score"]) for n in nodes] for r in found]).reshape(
            -1, len(nodes)
        )
        instance_scores = np.array([value(r["instance_score"]) for r in found])
        poses[frame] = _sorted(points, scores, instance_scores)
    return poses


def nwb_frame_indices(path: Path, fps: float) -> set[int]:
    """The frames with animals in an NWB file, from its timestamps (read with pynwb)."""
    with NWBHDF5IO(str(path), "r") as io:
        nwbfile = io.read()
        frames: set[int] = set()
        for name, module in nwbfile.processing.items():
            if not name.startswith("SLEAP_VIDEO"):
                continue
            for estimation in module.data_interfaces.values():
                for series in estimation.pose_estimation_series.values():
                    if series.timestamps is not None:
                        times = np.asarray(series.timestamps[:])
                    else:
                        times = series.starting_time + np.arange(len(series.data)) / series.rate
                    frames.update(round(float(t) * fps) for t in times)
    return frames


def in_time_order(poses: dict[int, tuple[np.ndarray, ...]]) -> dict[int, tuple[np.ndarray, ...]]:
    """Frames with animals, renumbered 0, 1, ... in order.

    sleap-io reads NWB frames back numbered by their rank in time, not by index;
    the indices are checked on the timestamps instead (`nwb_frame_indices`).
    """
    kept = [poses[i] for i in sorted(poses) if len(poses[i][0])]
    return dict(enumerate(kept))


def assert_same_poses(got, expected, *, instance_scores: bool = True) -> None:
    assert sorted(got) == sorted(expected)
    for frame in expected:
        np.testing.assert_allclose(got[frame][0], expected[frame][0], rtol=0, atol=1e-4)
        np.testing.assert_allclose(got[frame][1], expected[frame][1], rtol=0, atol=1e-6)
        if instance_scores:
            np.testing.assert_allclose(got[frame][2], expected[frame][2], rtol=0, atol=1e-6)


# ------------------------------------------------------- every suffix, real model


@pytest.fixture(scope="module")
def runner(warm_export_cache):
    require(VIDEO, MODEL)
    with FileSource(VIDEO, stop=5) as source:
        frames = np.stack([f.image for f in source])
    # The bottom-up fixture case's export on this video, made once for the suite.
    loaded = load_runner(
        [str(MODEL)],
        engine="onnx",
        device="cpu",
        verify_frames=frames,
        cache_dir=warm_export_cache,
    )
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def reference(runner, tmp_path_factory):
    """The .slp of the clip: what every other format must hold."""
    path = tmp_path_factory.mktemp("reference") / "poses.slp"
    Pipeline(FileSource(VIDEO, stop=N_FRAMES), runner, outputs=OutputOptions(output=path)).run()
    return sio.load_file(str(path))


def test_each_pose_format_is_one_row_of_the_format_table():
    from sleap_live.stream.outputs.exports import FORMATS, sidecars

    assert SUFFIXES == tuple(FORMATS) == (".slp", ".h5", ".nwb", ".csv")
    assert [suffix for suffix, row in FORMATS.items() if row.slots] == [".h5", ".nwb"]
    assert sidecars(Path("a.CSV")) == [Path("a.CSV.provenance.json")]
    assert sidecars(Path("a.slp")) == sidecars(Path("a.mp4")) == []


def test_slp_holds_every_frame_and_the_provenance(reference):
    assert [frame.frame_idx for frame in reference] == list(range(N_FRAMES))
    assert sum(len(frame) for frame in reference) > N_FRAMES  # several animals per frame
    provenance = reference.provenance
    assert provenance["sleap_live_version"] == "0.1.0"
    assert provenance["engine"] and provenance["device"] == "cpu"
    assert provenance["source"] == str(VIDEO)
    model = provenance["models"][0]
    assert model["path"] == str(MODEL.resolve())
    assert set(model["sha256"]) >= {"training_config.yaml"}
    assert all(len(digest) == 64 for digest in model["sha256"].values())
    assert provenance["settings"] == {"policy": "recorded", "batch_size": 8}
    assert provenance["inference"]["peak_threshold"] == pytest.approx(0.2)
    # sleap-nn predict's defaults: the model directory was loaded without settings.
    assert provenance["inference_settings"] == InferenceSettings().to_dict()
    assert provenance["recording"] is None


@pytest.mark.parametrize("suffix", [".h5", ".nwb"])
def test_hdf5_and_nwb_hold_every_frame_of_the_slp(runner, reference, tmp_path, suffix):
    path = tmp_path / f"poses{suffix}"
    Pipeline(FileSource(VIDEO, stop=N_FRAMES), runner, outputs=OutputOptions(output=path)).run()
    assert not journal_path(path).exists()
    labels = sio.load_file(str(path))
    # Both formats keep frames with animals in them only.
    expected = {i: poses for i, poses in poses_of(reference).items() if len(poses[0])}
    if suffix == ".h5":
        assert_same_poses(poses_of(labels), expected)
    else:
        # NWB keeps no instance scores (sleap-io reads back the mean point score),
        # and the frames' indices are in their timestamps.
        got = in_time_order(poses_of(labels))
        assert_same_poses(got, in_time_order(expected), instance_scores=False)
        fps = reference.videos[0].backend_metadata["fps"]
        assert nwb_frame_indices(path, fps) == set(expected)
    with h5py.File(path, "r") as handle:
        stored = handle["provenance" if suffix == ".h5" else "general/notes"][()]
    provenance = json.loads(stored)
    assert provenance["models"] == reference.provenance["models"]
    assert provenance["engine"] == reference.provenance["engine"]


def test_csv_holds_every_frame_of_the_slp_with_a_provenance_sidecar(runner, reference, tmp_path):
    path = tmp_path / "poses.csv"
    Pipeline(FileSource(VIDEO, stop=N_FRAMES), runner, outputs=OutputOptions(output=path)).run()
    nodes = [node.name for node in reference.skeletons[0].nodes]
    # Every processed frame is there, an empty one as a row without an instance.
    assert_same_poses(poses_of_csv(path, nodes), poses_of(reference))
    sidecar = json.loads((tmp_path / "poses.csv.provenance.json").read_text())
    assert sidecar["models"] == reference.provenance["models"]
    assert sidecar["sleap_live_version"] == "0.1.0"


# ---------------------------------------------------------- fakes: tracks, refusal


def records(fakes, n: int) -> list[PoseRecord]:
    return [PoseRecord(i, i / 30, i / 30 + 0.01, "fake.mp4", fakes.poses_for(i)) for i in range(n)]


# The final save runs inside a stop's timeout; a fresh interpreter shows what it imports.
FINAL_SAVE_IMPORTS = """
import sys
from pathlib import Path
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.types import PoseRecord
from tests.stream import fakes
writer = SlpWriter(Path(sys.argv[1]), fakes.SKELETON, video="v.mp4", frame_shape=(8, 8, 1))
writer.write(PoseRecord(0, 0.0, 0.01, "fake.mp4", fakes.poses_for(0)))
before = set(sys.modules)
writer.close()
# The standard library's own lazy imports (codecs) cost nothing worth timing.
new = set(sys.modules) - before
print(sorted(m for m in new if m.split(".")[0] not in sys.stdlib_module_names))
"""


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_the_final_save_imports_nothing(tmp_path, suffix):
    # Opening the output imports the format's writer (sleap-io's for .slp alone
    # takes seconds on a busy machine), so closing it fits a stop's timeout.
    done = subprocess.run(
        [sys.executable, "-c", FINAL_SAVE_IMPORTS, str(tmp_path / f"poses{suffix}")],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_every_suffix_keeps_identities_and_recovers_from_its_journal(fakes, tmp_path, suffix):
    expected = tmp_path / "expected.slp"
    with SlpWriter(
        expected, fakes.SKELETON, video="v.mp4", frame_shape=(8, 8, 1), class_names=("l", "r")
    ) as slp:
        for record in records(fakes, 7):
            slp.write(record)
    path = tmp_path / f"poses{suffix}"
    slp = SlpWriter(
        path, fakes.SKELETON, video="v.mp4", frame_shape=(8, 8, 1), class_names=("l", "r")
    )
    for record in records(fakes, 7):
        slp.write(record)
    slp.flush()
    # A kill now: the journal, copied, is all that is left; recover writes the format.
    crashed = tmp_path / f"crashed{suffix}"
    shutil.copyfile(slp.journal, journal_path(crashed))
    slp.close()
    assert recover_slp(crashed).n_frames == 7
    assert not journal_path(crashed).exists()
    reference = poses_of(sio.load_slp(str(expected), open_videos=False))
    for written in (path, crashed):
        if suffix == ".csv":
            got = poses_of_csv(written, list(fakes.SKELETON.node_names))
            assert_same_poses(got, reference)
            continue
        labels = sio.load_file(str(written))
        non_empty = {i: p for i, p in reference.items() if len(p[0])}
        got = poses_of(labels)
        if suffix == ".slp":
            assert_same_poses(got, reference)
        elif suffix == ".h5":
            assert_same_poses(got, non_empty)
        else:
            got = in_time_order(got)
            assert_same_poses(got, in_time_order(non_empty), instance_scores=False)
            assert nwb_frame_indices(written, 1.0) == set(non_empty)
        if suffix == ".nwb":
            # sleap-io names NWB tracks track0, ...: the names are in the containers.
            with NWBHDF5IO(str(written), "r") as io:
                modules = io.read().processing
                names = {n for m in modules.values() for n in m.data_interfaces}
            assert {"track=l", "track=r"} <= names
            continue
        tracks = {
            (frame.frame_idx, instance.track.name)
            for frame in labels
            for instance in frame
            if instance.track is not None
        }
        assert {(1, "l"), (2, "l"), (2, "r")} <= tracks


def test_an_unknown_suffix_is_refused_before_any_work(fakes, tmp_path, capsys):
    with pytest.raises(
        ValueError, match=r"p\.parquet: .* pose files are \.slp, \.h5, \.nwb, \.csv"
    ):
        # The model path does not exist: the suffix is judged before any loading.
        Pipeline(
            fakes.FakeSource(),
            tmp_path / "no-model",
            outputs=OutputOptions(output=tmp_path / "p.parquet"),
        )
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"not read")
    argv = ["run", str(clip), "-m", str(MODEL), "-o", str(tmp_path / "p.parquet")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "p.parquet: cannot write poses to a .parquet file; pose files are .slp, .h5" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_a_csv_output_that_is_an_input_is_refused(fakes, tmp_path):
    source = tmp_path / "clip.csv"
    source.write_text("precious")
    with pytest.raises(OSError, match="is the source input"):
        Pipeline(
            fakes.FakeSource(source_id=str(source)),
            fakes.FakeRunner(),
            outputs=OutputOptions(output=source),
        ).run()
    assert source.read_text() == "precious"


# ----------------------------------------------------------------- recordings


def decode(path: Path, pixel_format: str) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format=pixel_format) for f in container.decode(video=0)])


@pytest.mark.parametrize("channels", [1, 3])
def test_ffv1_recordings_are_lossless_at_any_size(tmp_path, channels):
    rng = np.random.default_rng(channels)
    frames = rng.integers(0, 256, (6, 9, 11, channels), np.uint8)
    path = tmp_path / "rec.mkv"
    with VideoRecorder(path, 30.0, (9, 11, channels), codec="ffv1") as recorder:
        for i, frame in enumerate(frames):
            recorder.encode(frame, source_frame_index=10 + i, capture_time=0.5 + i / 30)
    decoded = decode(path, "rgb24" if channels == 3 else "gray")
    np.testing.assert_array_equal(decoded.reshape(frames.shape), frames)
    with open(timestamps_path(path), newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == TIMESTAMP_COLUMNS
    assert [(int(a), int(b), float(c)) for a, b, c in rows[1:]] == [
        (i, 10 + i, 0.5 + i / 30) for i in range(6)
    ]


def test_lossy_codecs_take_a_quality_and_ffv1_needs_mkv(tmp_path):
    frame = np.full((16, 16, 3), 120, np.uint8)  # x265 takes 16 x 16 at least
    for codec, crf in (("h264", 30), ("h265", None)):
        path = tmp_path / f"{codec}.mp4"
        with VideoRecorder(path, 30, (16, 16, 3), codec=codec, crf=crf) as rec:
            rec.encode(frame)
        assert decode(path, "rgb24").shape == (1, 16, 16, 3)
        assert rec.quality == (30 if codec == "h264" else 23) and not rec.lossless
    with pytest.raises(ValueError, match=r"rec\.mp4: a ffv1 recording needs a \.avi or \.mkv"):
        VideoRecorder(tmp_path / "rec.mp4", 30, (8, 8, 3), codec="ffv1")
    with pytest.raises(ValueError, match="ffv1 is lossless and takes no quality"):
        VideoRecorder(tmp_path / "rec.mkv", 30, (8, 8, 3), codec="ffv1", crf=10)
    with pytest.raises(ValueError, match="unknown codec 'vp9'"):
        VideoRecorder(tmp_path / "rec.mkv", 30, (8, 8, 3), codec="vp9")
    assert not (tmp_path / "rec.mp4").exists() and not (tmp_path / "rec.mkv").exists()


def run_recorded(fakes, folder: Path, source_id: str, codec: str):
    shape = (9, 11, 3)
    records = list(
        Pipeline(
            fakes.FakeSource(12, shape=shape, source_id=source_id),
            fakes.FakeRunner(),
            outputs=OutputOptions(
                output=folder / "poses.slp", record=folder / "rec.mkv", record_codec=codec
            ),
        )
    )
    labels = sio.load_slp(str(folder / "poses.slp"), open_videos=False)
    return records, labels, shape


def test_a_lossless_recording_is_what_the_poses_link_to(fakes, tmp_path):
    source = tmp_path / "clip.mp4"
    source.write_bytes(b"stand-in")
    records, labels, shape = run_recorded(fakes, tmp_path, str(source), "ffv1")
    recording = tmp_path / "rec.mkv"
    assert labels.videos[0].filename == str(recording.resolve())
    # Bit for bit the frames the poses were made from.
    expected = np.stack([fakes.frame_image(r.frame_index, shape) for r in records])
    np.testing.assert_array_equal(decode(recording, "rgb24"), expected)
    with open(timestamps_path(recording), newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(row["capture_time"]) for row in rows] == [r.capture_time for r in records]
    assert [int(row["source_frame_index"]) for row in rows] == [r.frame_index for r in records]
    assert labels.provenance["recording"] == {
        "path": str(recording.resolve()),
        "codec": "ffv1",
        "quality": None,
        "lossless": True,
        "timestamps": str(timestamps_path(recording).resolve()),
    }


def test_a_lossy_recording_of_a_file_leaves_the_poses_on_the_file(fakes, tmp_path):
    source = tmp_path / "clip.mp4"
    source.write_bytes(b"stand-in")
    records, labels, _ = run_recorded(fakes, tmp_path, str(source), "h264")
    assert labels.videos[0].filename == str(source.resolve())
    assert [frame.frame_idx for frame in labels] == [r.frame_index for r in records]
    assert labels.provenance["recording"]["path"] == str((tmp_path / "rec.mkv").resolve())
    assert labels.provenance["recording"]["lossless"] is False


def test_a_lossy_recording_of_a_camera_is_the_only_picture_so_the_poses_link_to_it(
    fakes, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a relative recording path is linked resolved
    _, labels, _ = run_recorded(fakes, Path(), "camera:0", "h264")
    assert labels.videos[0].filename == str((tmp_path / "rec.mkv").resolve())
