"""`sleap-live render` and what it is built from: poses drawn on their video, written with PyAV."""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import numpy as np
import pytest
import sleap_io as sio
from sleap_io.rendering.colors import get_palette

from sleap_live import cli
from sleap_live.output_rule import OutputError
from sleap_live.stream.outputs.overlay import OverlayStyle
from sleap_live.stream.outputs.overlay_writer import OverlayWriter
from sleap_live.stream.outputs.render import render_slp
from sleap_live.stream.sources import FileSource

DATA = Path(__file__).resolve().parents[1] / "data"
# Two animals of two nodes; frame k holds them in the order of TRACK_ORDER[k % 2],
# so colouring by instance swaps their colours between frames and by track does not.
NODES = ("head", "tail")
TRACK_ORDER = (("a", "b"), ("b", "a"))
POINTS = {"a": ((12.0, 12.0), (24.0, 12.0)), "b": ((44.0, 34.0), (56.0, 34.0))}
# No drawn pixel lies farther than this from a point or an edge (marker radius 4,
# line width 2, antialiasing).
REACH = 7.0
PALETTE = get_palette("standard", 3)


def make_slp(path: Path, video: Path | str, frames: range = range(30)) -> Path:
    skeleton = sio.Skeleton(list(NODES), edges=[(NODES[0], NODES[1])])
    tracks = {name: sio.Track(name) for name in ("a", "b")}
    clip = sio.Video(filename=str(video), open_backend=False)
    labelled = [
        sio.LabeledFrame(
            video=clip,
            frame_idx=index,
            instances=[
                sio.Instance.from_numpy(np.array(POINTS[name]), skeleton, track=tracks[name])
                for name in TRACK_ORDER[index % 2]
            ],
        )
        for index in frames
    ]
    labels = sio.Labels(labelled, videos=[clip], skeletons=[skeleton], tracks=list(tracks.values()))
    sio.save_slp(labels, str(path))
    return path


def decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def source_frames(video: Path) -> list[np.ndarray]:
    with FileSource(video) as source:
        images = [np.asarray(frame.image) for frame in source]
    return [np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image for image in images]


def far_from_poses(shape: tuple[int, ...]) -> np.ndarray:
    """Pixels farther than REACH from every point and edge of every animal."""
    ys, xs = np.mgrid[: shape[0], : shape[1]]
    pixels = np.stack([xs, ys], axis=-1).astype(float)
    far = np.ones(shape[:2], bool)
    for (x0, y0), (x1, y1) in POINTS.values():
        start, end = np.array([x0, y0]), np.array([x1, y1])
        t = np.clip(((pixels - start) @ (end - start)) / np.sum((end - start) ** 2), 0, 1)
        nearest = start + t[..., None] * (end - start)
        far &= np.linalg.norm(pixels - nearest, axis=-1) > REACH
    return far


@pytest.fixture
def clip(tmp_path: Path, rgb_video: Path) -> Path:
    """A copy of the 30-frame, 64x48 H.264 test video in the test's own folder."""
    return Path(shutil.copy(rgb_video, tmp_path / "clip.mp4"))


@pytest.fixture
def poses(tmp_path: Path, clip: Path) -> Path:
    return make_slp(tmp_path / "poses.slp", clip.resolve())


def test_overlay_has_every_frame_of_the_range_at_the_video_size(poses, tmp_path, capsys):
    output = tmp_path / "overlay.mp4"
    assert cli.main(["render", str(poses), "-o", str(output), "--frames", "4:14"]) == 0
    frames = decode(output)
    assert len(frames) == 10 and frames[0].shape == (48, 64, 3)
    with av.open(str(output)) as container:
        assert container.streams.video[0].codec_context.name == "h264"
    assert "10 frames (4 to 13 of" in capsys.readouterr().err
    # Without a range: every frame of the video, with or without poses. A rerun
    # into the same output is refused without --overwrite, the output kept.
    before = output.read_bytes()
    assert cli.main(["render", str(poses), "-o", str(output), "--codec", "ffv1"]) == 1
    assert "-o exists; give --overwrite" in capsys.readouterr().err
    assert output.read_bytes() == before
    argv = ["render", str(poses), "-o", str(output), "--codec", "ffv1", "--overwrite"]
    assert cli.main(argv) == 0
    assert len(decode(output)) == 30


def test_poses_are_drawn_where_they_are_and_nowhere_else(poses, clip, tmp_path):
    output = tmp_path / "overlay.mkv"
    rendered = render_slp(poses, output, codec="ffv1", start=0, stop=6)
    assert (rendered.n_frames, rendered.n_posed) == (6, 6)
    drawn, original = decode(output), source_frames(clip)[:6]
    far = far_from_poses(original[0].shape)
    for after, before in zip(drawn, original, strict=True):
        changed = np.any(after != before, axis=-1)
        for node_points in POINTS.values():
            for x, y in node_points:
                assert changed[int(y), int(x)]
            # The edge between the nodes is drawn too.
            (x0, y0), (x1, y1) = node_points
            assert changed[int((y0 + y1) / 2), int((x0 + x1) / 2)]
        np.testing.assert_array_equal(after[far], before[far])


def test_lossy_output_differs_near_the_poses_only(poses, clip, tmp_path):
    output = tmp_path / "overlay.mp4"
    render_slp(poses, output, stop=3)
    after, before = decode(output)[0].astype(int), source_frames(clip)[0].astype(int)
    difference = np.abs(after - before).max(axis=-1)
    for node_points in POINTS.values():
        for x, y in node_points:
            assert difference[int(y), int(x)] > 40
    assert difference[far_from_poses(before.shape)].mean() < 4


@pytest.mark.parametrize(
    ("color_by", "swaps"), [("track", False), ("instance", True), ("auto", False)]
)
def test_colours_follow_the_track_or_the_instance(poses, tmp_path, color_by, swaps):
    output = tmp_path / f"{color_by}.mkv"
    style = OverlayStyle(color_by=color_by, marker_size=4.0)
    render_slp(poses, output, style=style, codec="ffv1", stop=2)
    first, second = decode(output)
    (x, y) = POINTS["a"][0]
    colour = [tuple(int(v) for v in frame[int(y), int(x)]) for frame in (first, second)]
    # Track "a" is the file's first track and the first instance of frame 0.
    assert colour[0] == PALETTE[0]
    assert colour[1] == (PALETTE[1] if swaps else PALETTE[0])


def test_node_colours_and_styles_are_passed_through(poses, tmp_path):
    output = tmp_path / "nodes.mkv"
    style = OverlayStyle(color_by="node", marker_size=6.0, marker_shape="square")
    render_slp(poses, output, style=style, codec="ffv1", stop=1)
    (frame,) = decode(output)
    (hx, hy), (tx, ty) = POINTS["b"]
    assert tuple(frame[int(hy), int(hx)]) == PALETTE[0]
    assert tuple(frame[int(ty), int(tx)]) == PALETTE[1]
    # A square of radius 6 reaches its corner; a circle of radius 4 would not.
    assert tuple(frame[int(hy) - 5, int(hx) - 5]) == PALETTE[0]


@pytest.mark.parametrize("argv", [["--start", "3", "--stop", "7"], ["--frames", "3:7"]])
def test_frame_range_writes_exactly_those_frames(poses, clip, tmp_path, argv):
    output = tmp_path / "range.mkv"
    assert cli.main(["render", str(poses), "-o", str(output), "--codec", "ffv1", *argv]) == 0
    drawn, original = decode(output), source_frames(clip)
    assert len(drawn) == 4
    far = far_from_poses(original[0].shape)
    for k, after in enumerate(drawn):
        # Frame k is video frame 3 + k: equal where nothing was drawn, and to no other.
        matches = [
            i for i, before in enumerate(original) if np.array_equal(after[far], before[far])
        ]
        assert matches == [3 + k]


def test_frames_without_poses_are_written_unchanged(tmp_path, clip):
    poses = make_slp(tmp_path / "sparse.slp", clip.resolve(), frames=range(2, 3))
    output = tmp_path / "sparse.mkv"
    rendered = render_slp(poses, output, codec="ffv1", stop=4)
    assert (rendered.n_frames, rendered.n_posed) == (4, 1)
    drawn, original = decode(output), source_frames(clip)[:4]
    for index in (0, 1, 3):
        np.testing.assert_array_equal(drawn[index], original[index])
    assert not np.array_equal(drawn[2], original[2])


def test_a_grey_video_gives_a_colour_overlay(tmp_path, gray_video):
    poses = make_slp(tmp_path / "grey.slp", gray_video.resolve())
    output = tmp_path / "grey.mkv"
    render_slp(poses, output, codec="ffv1", stop=2)
    first = decode(output)[0]
    (x, y) = POINTS["a"][0]
    assert first.shape == (48, 64, 3) and tuple(first[int(y), int(x)]) == PALETTE[0]


def test_the_video_is_found_beside_the_slp(tmp_path, clip, monkeypatch):
    poses = make_slp(tmp_path / "poses.slp", "clip.mp4")  # relative, as a move leaves it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["render", str(poses), "--stop", "2"]) == 0
    # The default output: the .slp's stem, in the working directory.
    assert len(decode(elsewhere / "poses.overlay.mp4")) == 2


def test_a_golden_rendered_on_the_bundled_video(tmp_path, monkeypatch):
    """A .slp sleap-nn predicted, on the video it names (relative to the repository)."""
    monkeypatch.chdir(DATA.parents[1])
    golden = DATA / "goldens" / "multi_class_topdown.slp"
    output = tmp_path / "golden.mp4"
    assert cli.main(["render", str(golden), "-o", str(output), "--frames", ":5"]) == 0
    drawn = decode(output)
    original = source_frames(DATA / "videos" / "multi_rgb.mp4")[:5]
    assert len(drawn) == 5 and drawn[0].shape == original[0].shape
    labels = sio.load_slp(str(golden), open_videos=False)
    frames = {frame.frame_idx: frame for frame in labels.labeled_frames}
    for index, (after, before) in enumerate(zip(drawn, original, strict=True)):
        difference = np.abs(after.astype(int) - before.astype(int)).max(axis=-1)
        assert frames[index].instances
        for instance in frames[index].instances:
            for x, y in instance.numpy()[:, :2]:
                if np.isfinite(x):
                    assert difference[int(y), int(x)] > 30


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("sleap-live: error: ") and err.count("\n") == 1, err
    return err


def test_missing_slp(tmp_path, capsys):
    missing = tmp_path / "nope.slp"
    assert cli.main(["render", str(missing), "-o", str(tmp_path / "o.mp4")]) == 1
    assert f"{missing}: no such file" in one_error_line(capsys)
    assert not (tmp_path / "o.mp4").exists()


def test_not_a_slp(tmp_path, capsys):
    text = tmp_path / "notes.slp"
    text.write_text("not poses")
    assert cli.main(["render", str(text), "-o", str(tmp_path / "o.mp4")]) == 1
    assert f"{text}: cannot read poses from it" in one_error_line(capsys)


def test_an_instance_range_past_its_table_is_refused(poses, tmp_path, capsys):
    """sleap-io cuts `instance_id_end` at the table's end without a word, so frame 0
    claiming up to 1e9 was drawn with every later frame's instances (rc 0)."""
    import h5py

    with h5py.File(poses, "r+") as file:
        frames = file["frames"][:]
        frames["instance_id_end"][0] = 10**9
        file["frames"][...] = frames
    out = tmp_path / "o.mp4"
    assert cli.main(["render", str(poses), "-o", str(out)]) == 1
    assert one_error_line(capsys) == (
        f"sleap-live: error: {poses}: frames row 0: instance_id_start 0 to instance_id_end "
        "1000000000 do not lie in the instance table (60 rows) after the previous frame's "
        "end (0)\n"
    )
    assert not out.exists()


def test_slp_whose_video_is_missing_says_where_it_looked(tmp_path, capsys):
    gone = tmp_path / "moved" / "clip.mp4"
    poses = make_slp(tmp_path / "poses.slp", gone)
    assert cli.main(["render", str(poses), "-o", str(tmp_path / "o.mp4")]) == 1
    err = one_error_line(capsys)
    assert f"its video {gone} is missing" in err and str(gone) in err
    assert str(tmp_path / "clip.mp4") in err and "--video" in err
    # Given where it is now, it renders.
    moved = tmp_path / "now.mp4"
    shutil.copy(DATA / "videos" / "demo.mp4", moved)
    output = tmp_path / "o.mp4"
    assert (
        cli.main(["render", str(poses), "-o", str(output), "--video", str(moved), "--stop", "1"])
        == 0
    )
    assert len(decode(output)) == 1


@pytest.mark.parametrize("target", ["video", "slp"])
def test_output_that_is_an_input_is_refused(poses, clip, tmp_path, capsys, target):
    output = clip if target == "video" else poses
    before = output.read_bytes()
    assert cli.main(["render", str(poses), "-o", str(output)]) == 1
    err = one_error_line(capsys)
    assert "writing it would destroy it" in err and str(output) in err
    assert output.read_bytes() == before


def test_a_hard_link_to_the_video_is_refused(poses, clip, tmp_path, capsys):
    link = tmp_path / "link.mp4"
    link.hardlink_to(clip)
    assert cli.main(["render", str(poses), "-o", str(link)]) == 1
    assert "VIDEO input" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--frames", "3:7", "--start", "1"], "argument --frames: not allowed with --start"),
        (["--frames", "7:3"], "the frame range is empty: stop 3 is not after start 7"),
        (["--frames", "x"], "argument --frames: expected A:B"),
        (["--start", "-1"], "argument --start: must be at least 0"),
        (["--marker-size", "0"], "argument --marker-size: must be positive"),
        (["--color-by", "colour"], "argument --color-by: invalid choice"),
        (["--palette", "nope"], "argument --palette: invalid choice"),
        (["--codec", "mpeg2"], "argument --codec: invalid choice"),
    ],
)
def test_bad_options_are_one_line_usage_errors(poses, tmp_path, capsys, argv, message):
    output = tmp_path / "o.mp4"
    assert cli.main(["render", str(poses), "-o", str(output), *argv]) == 2
    assert message in one_error_line(capsys)
    assert not output.exists()


def test_start_past_the_end(poses, tmp_path, capsys):
    output = tmp_path / "o.mp4"
    assert cli.main(["render", str(poses), "-o", str(output), "--start", "99"]) == 2
    assert "start=99 is past the end (30 frames)" in one_error_line(capsys)
    assert not output.exists()


def test_an_unwritable_format_leaves_the_old_output(poses, tmp_path, capsys):
    output = tmp_path / "overlay.notavideo"
    output.write_bytes(b"old")
    assert cli.main(["render", str(poses), "-o", str(output), "--overwrite"]) == 2
    assert "is not a video format FFmpeg can write" in one_error_line(capsys)
    assert output.read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir() if "partial" in path.name] == []


def test_a_failed_render_keeps_the_previous_output(poses, tmp_path):
    output = tmp_path / "overlay.mkv"
    output.write_bytes(b"previous render")

    def fail(done: int, total: int | None) -> None:
        if done == 3:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        render_slp(poses, output, codec="ffv1", progress=fail, overwrite=True)
    assert output.read_bytes() == b"previous render"
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "clip.mp4",
        "overlay.mkv",
        "poses.slp",
    ]


def test_ctrl_c_keeps_the_frames_drawn_so_far(poses, tmp_path):
    output = tmp_path / "overlay.mkv"
    seen = []

    def interrupt(done: int, total: int | None) -> None:
        seen.append(total)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        render_slp(poses, output, codec="ffv1", progress=interrupt)
    assert len(decode(output)) == 3 and seen == [30, 30, 30, 30]


def test_a_second_writer_of_the_same_output_is_refused(tmp_path):
    output = tmp_path / "busy.mp4"
    with OverlayWriter(output, 30, (48, 64)) as writer:
        with pytest.raises(OutputError, match="another"):
            OverlayWriter(output, 30, (48, 64))
        writer.write(np.zeros((48, 64, 3), np.uint8))
    assert len(decode(output)) == 1


def test_a_video_without_frames_is_not_written(tmp_path):
    output = tmp_path / "empty.mp4"
    with OverlayWriter(output, 30, (48, 64)):
        pass
    assert list(tmp_path.iterdir()) == []


def test_odd_sizes_are_padded_for_h264(tmp_path):
    output = tmp_path / "odd.mp4"
    with OverlayWriter(output, 30, (47, 63)) as writer:
        writer.write(np.full((47, 63, 3), 200, np.uint8))
        with pytest.raises(ValueError, match="expected uint8"):
            writer.write(np.zeros((48, 64, 3), np.uint8))
    (frame,) = decode(output)
    assert frame.shape == (48, 64, 3)


def test_ctrl_c_on_the_command_line_says_what_was_kept(poses, tmp_path, capsys, monkeypatch):
    output = tmp_path / "overlay.mkv"
    write = OverlayWriter.write

    def write_then_interrupt(self, image):
        write(self, image)
        if self.n_frames_written == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(OverlayWriter, "write", write_then_interrupt)
    argv = ["render", str(poses), "-o", str(output), "--codec", "ffv1", "--start", "2"]
    assert cli.main(argv) == 130
    assert (
        f"{output}: interrupted; kept the 4 frames drawn so far (2 to 5)" in capsys.readouterr().err
    )
    assert len(decode(output)) == 4
