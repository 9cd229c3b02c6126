"""Fault suite, crafted journals: `sleap-live recover` refuses a journal that was
tampered with or damaged in one line naming it, never a traceback (issue #20).

Each journal is written byte by byte as the format (`journal` module docstring)
lays it out: a valid one, then one field or size wrong at a time.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import sleap_io as sio

from sleap_live import cli
from sleap_live.stream.outputs.journal import MAGIC, journal_path


def header(video, **changes) -> bytes:
    fields = {
        "skeleton": {"node_names": ["head", "tail"], "edges": [[0, 1]], "name": "s"},
        "class_names": [],
        "video": video,
        "frame_shape": [24, 32, 1],
        "fps": 30.0,
        "n_frames": None,
        "provenance": {},
        "pid": 1,
    }
    fields.update(changes)
    return json.dumps(fields).encode()


def chunk(
    indices=(0, 1, 2),
    nodes: int = 2,
    sizes: tuple[int, int, int] | None = None,
    identity: int = -1,
) -> bytes:
    """One instance per frame, at (frame, frame), of `identity` (-1: none)."""
    n = len(indices)
    points = np.repeat(np.array(indices, "<f4")[:, None, None], nodes, 1).repeat(2, 2)
    return b"".join(
        (
            struct.pack("<III", *(sizes or (n, n, nodes))),
            np.array(indices, "<i8").tobytes(),
            np.ones(n, "<i4").tobytes(),
            points.tobytes(),
            np.ones((n, nodes), "<f4").tobytes(),
            np.ones(n, "<f4").tobytes(),
            np.full(n, identity, "<i4").tobytes(),
        )
    )


def box_chunk(categories=(0, 0, 0)) -> bytes:
    """The boxes of a 3-frame chunk: one per frame, of the given categories."""
    n = len(categories)
    return b"".join(
        (
            struct.pack("<II", 3, n),
            np.array([1, 1, 1] if n == 3 else [n, 0, 0], "<i4").tobytes(),
            np.tile(np.array([1, 2, 3, 4], "<f4"), (n, 1)).tobytes(),
            np.full(n, 0.5, "<f4").tobytes(),
            np.array(categories, "<i4").tobytes(),
        )
    )


def journal(out: Path, head: bytes, *chunks: bytes, boxes: bytes | None = None) -> Path:
    """A journal of `chunks` of frames; `boxes`, a chunk of boxes, after the first."""

    def record(kind: bytes, payload: bytes) -> bytes:
        return struct.pack("<cII", kind, len(payload), zlib.crc32(payload)) + payload

    records = [record(b"F", c) for c in chunks]
    if boxes is not None:
        records.insert(1, record(b"B", boxes))
    body = record(b"H", head) + b"".join(records)
    journal_path(out).write_bytes(MAGIC + body)
    return journal_path(out)


def refused(out: Path, capsys) -> str:
    assert cli.main(["recover", str(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(journal_path(out)) in lines[0] and "Traceback" not in lines[0]
    assert not out.exists() and journal_path(out).exists()  # the journal is kept
    return lines[0]


def test_a_valid_journal_is_recovered(clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    journal(out, header(str(clip)), chunk((0, 1, 2)), chunk((3,)))
    assert cli.main(["recover", str(out)]) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    assert [lf.frame_idx for lf in labels] == [0, 1, 2, 3]
    # A video moved away since is kept as the link it was (the .slp need not open it).
    moved = tmp_path / "moved.slp"
    journal(moved, header(str(tmp_path / "gone.mkv")), chunk())
    assert cli.main(["recover", str(moved)]) == 0


def test_a_box_detectors_boxes_are_recovered_and_a_wrong_category_refused(clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    journal(out, header(str(clip), box_categories=["mouse"]), chunk(), boxes=box_chunk())
    assert cli.main(["recover", str(out)]) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    boxes = [box for frame in labels for box in frame.bboxes]
    assert [box.xyxy for box in boxes] == [(1, 2, 3, 4)] * 3
    assert {box.category.name for box in boxes} == {"mouse"} and not labels.tracks
    capsys.readouterr()
    wrong = tmp_path / "wrong.slp"
    journal(wrong, header(str(clip), box_categories=["mouse"]), chunk(), boxes=box_chunk((0, 1)))
    assert "a box's category is not one of the journal's 1" in refused(wrong, capsys)


def test_a_chunk_that_claims_more_than_it_holds(clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    journal(out, header(str(clip)), chunk(sizes=(3, 3000, 2)))
    assert "a chunk says 3 frames, 3000 instances" in refused(out, capsys)


def test_a_chunk_of_another_skeleton(clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    journal(out, header(str(clip)), chunk(nodes=3))
    assert "poses of 3 nodes; the skeleton has 2" in refused(out, capsys)


@pytest.mark.parametrize("index", [2**62, -1])
def test_a_frame_index_out_of_range(index, clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    journal(out, header(str(clip)), chunk((0, index)))
    assert f"frame index {index} is outside 0 to" in refused(out, capsys)


def test_frame_indices_past_the_headers_frame_count_are_kept(clip, tmp_path):
    # n_frames may be estimated from the video's duration, and counts the frames
    # of a --start/--stop range, whose indices start at --start.
    out = tmp_path / "out.slp"
    journal(out, header(str(clip), n_frames=40), chunk((100, 101)))
    assert cli.main(["recover", str(out)]) == 0
    assert [lf.frame_idx for lf in sio.load_slp(str(out), open_videos=False)] == [100, 101]


def test_a_deeply_nested_header(clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    nested = header(str(clip)).replace(b'"provenance": {}', b'"provenance": ' + b"[" * 100_000)
    journal(out, nested, chunk())
    assert "header nests too deeply" in refused(out, capsys)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"skeleton": {"node_names": 7, "edges": [], "name": "s"}}, "skeleton.node_names"),
        ({"skeleton": {"node_names": ["a"], "edges": [[0, 5]], "name": "s"}}, "skeleton.edges"),
        ({"frame_shape": [24, 32]}, "frame_shape"),
        ({"frame_shape": [24, 32, -1]}, "frame_shape"),
        ({"fps": "fast"}, "fps"),
        ({"n_frames": 2**62}, "n_frames"),
        ({"video": ["a"]}, "video"),
    ],
)
def test_a_header_field_of_the_wrong_kind(change, says, clip, tmp_path, capsys):
    out = tmp_path / "out.slp"
    journal(out, header(**{"video": str(clip), **change}), chunk())
    assert says in refused(out, capsys)


@pytest.mark.parametrize("video", ["/etc/shadow", "/etc/passwd", "/dev/zero", "/etc"])
def test_a_video_that_is_not_a_video(video, tmp_path, capsys):
    if not Path(video).exists():
        pytest.skip(f"{video} does not exist here")
    out = tmp_path / "out.slp"
    journal(out, header(video), chunk())
    line = refused(out, capsys)
    assert f"the journal's video {video}" in line


# ------------------------------------ crafted journals that are recovered (issue #36)


def test_an_identity_of_2_31_minus_1_is_recovered_at_once(clip, tmp_path):
    # One track was made per number up to it: > 120 s, then a MemoryError.
    out = tmp_path / "out.slp"
    journal(out, header(str(clip)), chunk((0, 1), identity=2**31 - 1), chunk((2,), identity=3))
    assert cli.main(["recover", str(out)]) == 0
    labels = sio.load_slp(str(out), open_videos=False)
    assert [track.name for track in labels.tracks] == ["track_3", "track_2147483647"]
    assert [lf.instances[0].track.name for lf in labels] == [
        "track_2147483647",
        "track_2147483647",
        "track_3",
    ]


@pytest.mark.parametrize(
    "change", [{"fps": float("nan")}, {"fps": float("inf")}, {"provenance": {"x": float("nan")}}]
)
def test_a_nan_in_the_header_costs_no_frame(change, clip, tmp_path):
    # The save failed ("Out of range float values are not JSON compliant: nan").
    out = tmp_path / "out.slp"
    journal(out, header(str(clip), **change), chunk((0, 1, 2)))
    assert cli.main(["recover", str(out)]) == 0
    assert [lf.frame_idx for lf in sio.load_slp(str(out), open_videos=False)] == [0, 1, 2]


def test_a_chunk_of_vectors_reads_back_and_a_damaged_one_is_one_line():
    from sleap_live.stream.outputs.journal import EmbeddingChunk, JournalError

    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    vectors[1] = np.nan
    data = EmbeddingChunk(vectors).to_bytes()
    np.testing.assert_array_equal(EmbeddingChunk.from_bytes(data).vectors, vectors)
    for damaged in (data[:5], data[:-4], struct.pack("<II", 1, 1 << 20)):
        with pytest.raises(JournalError, match=r"^j: a chunk") as error:
            EmbeddingChunk.from_bytes(damaged, "j")
        assert "\n" not in str(error.value)
