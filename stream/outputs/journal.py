"""The pose journal: an append-only file beside a .slp that a kill cannot corrupt.

`SlpWriter` appends every few seconds one chunk of finished frames to
``NAME.slp.journal`` and writes ``NAME.slp`` from it once, at the end. A save
therefore costs the same at frame 100 and at frame 1,000,000 and memory holds
only the frames since the last save. After a crash (SIGKILL, power loss) the
journal holds every frame up to its last complete chunk, and
`sleap-live recover NAME.slp` (`writers.recover_slp`) writes the .slp from it.

Layout: the 8-byte `MAGIC`, then records, each ``kind (1 byte) | payload length
(uint32) | CRC-32 of the payload (uint32) | payload``, little-endian. The first
record is the header (kind ``H``, UTF-8 JSON: skeleton, video, frame shape, ...);
every later one a chunk of frames (kind ``F``, see `FrameChunk.to_bytes`). A record
cut short or failing its CRC ends the journal: a kill mid-write costs that chunk
only, never an earlier one.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import attrs
import numpy as np

from sleap_live.engines.types import Skeleton
from sleap_live.stream.errors import StreamError

MAGIC = b"SLJRNL01"
JOURNAL_SUFFIX = ".journal"
_RECORD = struct.Struct("<cII")
_CHUNK = struct.Struct("<III")  # frames, instances, nodes
_HEADER, _FRAMES = b"H", b"F"


class JournalError(StreamError, OSError):
    """A journal is missing, is not a sleap-live journal, or has no readable header."""


def journal_path(slp: Path) -> Path:
    """Where the journal of the .slp file `slp` lives: ``NAME.slp.journal`` beside it."""
    return slp.with_name(slp.name + JOURNAL_SUFFIX)


@attrs.frozen
class JournalHeader:
    """What a .slp needs besides the frames; written once, before the first frame.

    Attributes:
        skeleton: the model's skeleton.
        class_names: identity names of a multi-class model (one track each).
        video: the video file (resolved) or live source name the poses belong to.
        frame_shape: (height, width, channels) of the frames.
        fps: frame rate of the video, if known.
        n_frames: frames in the video, if known; else the highest index written + 1.
        provenance: extra metadata for the .slp (JSON values).
        pid: the process that wrote the journal.
    """

    skeleton: Skeleton
    class_names: tuple[str, ...]
    video: str
    frame_shape: tuple[int, int, int]
    fps: float | None
    n_frames: int | None
    provenance: dict[str, Any]
    pid: int

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "skeleton": {
                    "node_names": list(self.skeleton.node_names),
                    "edges": [list(edge) for edge in self.skeleton.edges],
                    "name": self.skeleton.name,
                },
                "class_names": list(self.class_names),
                "video": self.video,
                "frame_shape": list(self.frame_shape),
                "fps": self.fps,
                "n_frames": self.n_frames,
                "provenance": self.provenance,
                "pid": self.pid,
            }
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> JournalHeader:
        fields = json.loads(data)
        skeleton = fields["skeleton"]
        return cls(
            skeleton=Skeleton(
                node_names=tuple(skeleton["node_names"]),
                edges=tuple((int(a), int(b)) for a, b in skeleton["edges"]),
                name=skeleton["name"],
            ),
            class_names=tuple(fields["class_names"]),
            video=fields["video"],
            frame_shape=(
                int(fields["frame_shape"][0]),
                int(fields["frame_shape"][1]),
                int(fields["frame_shape"][2]),
            ),
            fps=fields["fps"],
            n_frames=fields["n_frames"],
            provenance=dict(fields["provenance"]),
            pid=int(fields["pid"]),
        )


@attrs.frozen(eq=False)
class FrameChunk:
    """Consecutive frames' poses, instances of all frames stacked.

    Attributes:
        frame_indices: (F,) int64 frame index of each frame in the .slp.
        counts: (F,) int32 instances in each frame; they sum to M.
        points: (M, nodes, 2) float32.
        point_scores: (M, nodes) float32.
        instance_scores: (M,) float32.
        identities: (M,) int32, -1 without identity.
    """

    frame_indices: np.ndarray
    counts: np.ndarray
    points: np.ndarray
    point_scores: np.ndarray
    instance_scores: np.ndarray
    identities: np.ndarray

    @property
    def n_frames(self) -> int:
        return int(self.frame_indices.shape[0])

    def frames(self) -> Iterator[tuple[int, slice]]:
        """(frame index, slice of its instances) for every frame in order."""
        ends = np.cumsum(self.counts)
        for frame_index, end, count in zip(self.frame_indices, ends, self.counts, strict=True):
            yield int(frame_index), slice(int(end - count), int(end))

    def to_bytes(self) -> bytes:
        n_instances, n_nodes = self.points.shape[:2]
        return b"".join(
            (
                _CHUNK.pack(self.n_frames, n_instances, n_nodes),
                self.frame_indices.astype("<i8").tobytes(),
                self.counts.astype("<i4").tobytes(),
                self.points.astype("<f4").tobytes(),
                self.point_scores.astype("<f4").tobytes(),
                self.instance_scores.astype("<f4").tobytes(),
                self.identities.astype("<i4").tobytes(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> FrameChunk:
        n_frames, n_instances, n_nodes = _CHUNK.unpack_from(data)
        offset = _CHUNK.size
        arrays = []
        for dtype, shape in (
            ("<i8", (n_frames,)),
            ("<i4", (n_frames,)),
            ("<f4", (n_instances, n_nodes, 2)),
            ("<f4", (n_instances, n_nodes)),
            ("<f4", (n_instances,)),
            ("<i4", (n_instances,)),
        ):
            count = int(np.prod(shape))
            arrays.append(np.frombuffer(data, dtype, count, offset).reshape(shape))
            offset += count * np.dtype(dtype).itemsize
        return cls(*arrays)


class JournalWriter:
    """Appends records to a journal through a file descriptor the caller opened.

    Every record is one `os.write` (no user-space buffer), so a record is in the
    kernel once `append` returns and survives a kill of the process; `append`
    also fsyncs, so it survives a power cut too.

    Args:
        fd: open for writing at the journal's end (the caller locks and closes it).
        header: written at once, after `MAGIC`, when the journal is empty.
    """

    def __init__(self, fd: int, header: JournalHeader) -> None:
        self._fd = fd
        self.header = header
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        _write_all(fd, MAGIC + _frame(_HEADER, header.to_bytes()))
        os.fsync(fd)

    def append(self, chunk: FrameChunk) -> None:
        """Write one chunk of frames and wait until it is on disk."""
        _write_all(self._fd, _frame(_FRAMES, chunk.to_bytes()))
        os.fsync(self._fd)


@attrs.frozen
class JournalContents:
    """A journal read back: its header and how much of it was readable.

    Attributes:
        header: the journal's header.
        n_chunks: complete chunks after the header.
        n_frames: frames in those chunks.
        torn_bytes: bytes after the last complete chunk (a write cut short by a crash).
    """

    header: JournalHeader
    n_chunks: int
    n_frames: int
    torn_bytes: int


def read_journal(path: Path) -> tuple[JournalHeader, Iterator[FrameChunk]]:
    """The header of the journal at `path` and an iterator over its complete chunks.

    Chunks are read one at a time, so memory holds one chunk, not the journal.

    Raises:
        JournalError: `path` is missing, not a journal, or its header is unreadable.
    """
    handle, header = _open(path)
    return header, _chunks(handle)


def scan_journal(path: Path) -> JournalContents:
    """How many complete chunks and frames the journal at `path` holds, and how many bytes are torn.

    Raises:
        JournalError: as `read_journal`.
    """
    handle, header = _open(path)
    n_chunks, n_frames, readable = 0, 0, handle.tell()
    with handle:
        while (record := _read_record(handle)) is not None:
            if record[0] == _FRAMES:
                n_chunks += 1
                n_frames += _CHUNK.unpack_from(record[1])[0]
            readable += _RECORD.size + len(record[1])
    return JournalContents(header, n_chunks, n_frames, os.path.getsize(path) - readable)


def _open(path: Path) -> tuple[BinaryIO, JournalHeader]:
    """The journal opened just after its header, and the header."""
    try:
        handle = open(path, "rb")  # closed by the caller
    except FileNotFoundError:
        raise JournalError(f"{path}: no such journal") from None
    try:
        if handle.read(len(MAGIC)) != MAGIC:
            raise JournalError(f"{path}: not a sleap-live journal")
        record = _read_record(handle)
        if record is None or record[0] != _HEADER:
            raise JournalError(f"{path}: the journal's header is incomplete (killed at once?)")
        return handle, JournalHeader.from_bytes(record[1])
    except BaseException:
        handle.close()
        raise


def _chunks(handle: BinaryIO) -> Iterator[FrameChunk]:
    with handle:
        while (record := _read_record(handle)) is not None:
            if record[0] == _FRAMES:
                yield FrameChunk.from_bytes(record[1])


def _read_record(handle: BinaryIO) -> tuple[bytes, bytes] | None:
    """The next complete, intact record, or None at the end or at a torn record."""
    head = handle.read(_RECORD.size)
    if len(head) < _RECORD.size:
        return None
    kind, length, crc = _RECORD.unpack(head)
    payload = handle.read(length)
    if len(payload) < length or zlib.crc32(payload) != crc or kind not in (_HEADER, _FRAMES):
        return None
    return kind, payload


def _frame(kind: bytes, payload: bytes) -> bytes:
    return _RECORD.pack(kind, len(payload), zlib.crc32(payload)) + payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
