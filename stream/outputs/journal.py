"""The pose journal: an append-only file beside a .slp that a kill cannot corrupt.

`SlpWriter` appends every few seconds one chunk of finished frames to
``NAME.slp.journal`` and writes ``NAME.slp`` from it once, at the end. A save
therefore costs the same at frame 100 and at frame 1,000,000 and memory holds
only the frames since the last save. After a crash (SIGKILL, power loss) the
journal holds every frame up to its last complete chunk, and
`sleap-live recover NAME.slp` (`recovery.recover_slp`) writes the .slp from it.

Layout: the 8-byte `MAGIC`, then records, each ``kind (1 byte) | payload length
(uint32) | CRC-32 of the payload (uint32) | payload``, little-endian. The first
record is the header (kind ``H``, UTF-8 JSON: skeleton, video, frame shape, ...);
every later one a chunk of frames (kind ``F``, see `FrameChunk.to_bytes`), the
boxes of the chunk just before (kind ``B``, see `BoxChunk`: a box detector's), its
masks (kind ``M``, see `MaskChunk`: a segmentation model's), its instances'
re-identification vectors (kind ``E``, see `EmbeddingChunk`), or
track labels for instances of earlier chunks (kind ``L``, see `TrackLabels`: a MOT
tracker's detections labelled once their track was confirmed). A record cut short
or failing its CRC ends the journal: a kill mid-write costs that record only,
never an earlier one.
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

from sleap_live.engines.load.metadata import json_depth
from sleap_live.engines.types import Skeleton
from sleap_live.stream.errors import StreamError

MAGIC = b"SLJRNL01"
JOURNAL_SUFFIX = ".journal"
_RECORD = struct.Struct("<cII")
_CHUNK = struct.Struct("<III")  # frames, instances, nodes
_BOX_CHUNK = struct.Struct("<II")  # frames, boxes
_MASK_CHUNK = struct.Struct("<II")  # frames, masks
_EMBEDDING_CHUNK = struct.Struct("<II")  # instances, dimensions
_HEADER, _FRAMES, _BOXES, _MASKS, _LABELS, _EMBEDDINGS = b"H", b"F", b"B", b"M", b"L", b"E"
# Most dimensions of a journal's vectors, far above any model's.
MAX_EMBEDDING_DIM = 1 << 16
_LABEL_COUNT = struct.Struct("<I")

# Bounds a journal's values must keep, far above any run's, so a crafted or
# damaged journal is refused in one line (its file and field) instead of
# exhausting memory or failing deep inside numpy or sleap-io.
MAX_NODES = 10_000
MAX_CLASSES = 10_000
MAX_FRAME_SIDE = 1 << 16
MAX_FRAME_INDEX = 1 << 40
MAX_HEADER_DEPTH = 32


class JournalError(StreamError, OSError):
    """A journal is missing, is not a sleap-live journal, or has no readable header."""


class JournalTornError(JournalError):
    """A journal's header is cut short: its run was killed before saving any frame."""


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
        box_categories: a box detector's categories (`ModelInfo.detector_categories`), which
            its boxes' `BoxChunk.categories` index; empty for a model that finds none.
    """

    skeleton: Skeleton
    class_names: tuple[str, ...]
    video: str
    frame_shape: tuple[int, int, int]
    fps: float | None
    n_frames: int | None
    provenance: dict[str, Any]
    pid: int
    box_categories: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        return json.dumps(attrs.asdict(self)).encode()

    @classmethod
    def from_bytes(cls, data: bytes, origin: str = "journal") -> JournalHeader:
        """Parses `to_bytes`, checking every field.

        Raises:
            JournalError: one line naming `origin` and the field that is wrong.
        """
        if json_depth(data) > MAX_HEADER_DEPTH:
            raise JournalError(f"{origin}: the journal's header nests too deeply")
        try:
            fields = json.loads(data)
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            raise JournalError(f"{origin}: the journal's header is not JSON ({error})") from None
        fields = _field(origin, "header", fields, dict)
        skeleton = _field(origin, "skeleton", fields.get("skeleton"), dict)
        node_names = _strings(origin, "skeleton.node_names", skeleton.get("node_names"), MAX_NODES)
        if not node_names or len(set(node_names)) != len(node_names):
            raise JournalError(f"{origin}: skeleton.node_names are empty or repeat")
        edges = _field(origin, "skeleton.edges", skeleton.get("edges"), list)
        if len(edges) > len(node_names) ** 2 or not all(
            isinstance(edge, list)
            and len(edge) == 2
            and all(_is_int(node) and 0 <= node < len(node_names) for node in edge)
            for edge in edges
        ):
            raise JournalError(f"{origin}: skeleton.edges must join nodes of the skeleton")
        shape = _field(origin, "frame_shape", fields.get("frame_shape"), list)
        if len(shape) != 3 or not all(
            _is_int(side) and 0 < side <= MAX_FRAME_SIDE for side in shape
        ):
            raise JournalError(f"{origin}: frame_shape must be 3 positive sizes, got {shape[:4]}")
        fps = fields.get("fps")
        # Any number a source reported (a camera may say 0) is kept as it was written.
        if fps is not None and not (isinstance(fps, (int, float)) and not isinstance(fps, bool)):
            raise JournalError(f"{origin}: fps must be a number or null, got {fps!r}")
        n_frames = fields.get("n_frames")
        if n_frames is not None and not (_is_int(n_frames) and 0 <= n_frames <= MAX_FRAME_INDEX):
            raise JournalError(f"{origin}: n_frames must be a frame count or null")
        return cls(
            skeleton=Skeleton(
                node_names=node_names,
                edges=tuple((int(a), int(b)) for a, b in edges),
                name=_field(origin, "skeleton.name", skeleton.get("name"), str),
            ),
            class_names=_strings(origin, "class_names", fields.get("class_names"), MAX_CLASSES),
            video=_field(origin, "video", fields.get("video"), str),
            frame_shape=(int(shape[0]), int(shape[1]), int(shape[2])),
            fps=None if fps is None else float(fps),
            n_frames=n_frames,
            provenance=dict(_field(origin, "provenance", fields.get("provenance"), dict)),
            pid=_field(origin, "pid", fields.get("pid"), int),
            box_categories=_strings(
                origin, "box_categories", fields.get("box_categories", []), MAX_CLASSES
            ),
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
    def from_bytes(
        cls, data: bytes, header: JournalHeader | None = None, origin: str = "journal"
    ) -> FrameChunk:
        """Parses `to_bytes`; with `header`, checks the chunk against it.

        Raises:
            JournalError: one line naming `origin`: the sizes the chunk gives do
                not match its bytes or the skeleton, or a frame index or
                instance count is out of range (frame indices: 0 to 2**40).
        """
        if len(data) < _CHUNK.size:
            raise JournalError(f"{origin}: a chunk of frames is cut short ({len(data)} bytes)")
        n_frames, n_instances, n_nodes = _CHUNK.unpack_from(data)
        size = _CHUNK.size + n_frames * 12 + n_instances * (n_nodes * 12 + 8)
        if size != len(data):
            raise JournalError(
                f"{origin}: a chunk says {n_frames} frames, {n_instances} instances of "
                f"{n_nodes} nodes ({size} bytes) but holds {len(data)} bytes"
            )
        if header is not None and n_nodes != header.skeleton.n_nodes:
            raise JournalError(
                f"{origin}: a chunk has poses of {n_nodes} nodes; the skeleton has "
                f"{header.skeleton.n_nodes}"
            )
        chunk = cls._arrays(data, n_frames, n_instances, n_nodes)
        # Not bounded by the header's n_frames: that may be estimated from the
        # video's duration, and counts a --start/--stop range, not its indices.
        limit = MAX_FRAME_INDEX
        indices = chunk.frame_indices
        if n_frames and (indices.min() < 0 or indices.max() >= limit):
            wrong = int(indices.min() if indices.min() < 0 else indices.max())
            raise JournalError(f"{origin}: frame index {wrong} is outside 0 to {limit - 1}")
        if (chunk.counts < 0).any() or int(chunk.counts.sum(dtype=np.int64)) != n_instances:
            raise JournalError(
                f"{origin}: a chunk's instance counts do not add up to its {n_instances} instances"
            )
        return chunk

    @classmethod
    def _arrays(cls, data: bytes, n_frames: int, n_instances: int, n_nodes: int) -> FrameChunk:
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


@attrs.frozen(eq=False)
class BoxChunk:
    """A box detector's boxes of the frames of the `FrameChunk` written just before.

    Attributes:
        counts: (F,) int32 boxes in each of that chunk's frames; they sum to N.
        boxes: (N, 4) float32 x1, y1, x2, y2 in frame pixels, each frame's highest
            score first.
        scores: (N,) float32.
        categories: (N,) int32 index into `JournalHeader.box_categories`.
    """

    counts: np.ndarray
    boxes: np.ndarray
    scores: np.ndarray
    categories: np.ndarray

    def frames(self) -> Iterator[slice]:
        """The slice of each frame's boxes, in order."""
        return _frame_slices(self.counts)

    def to_bytes(self) -> bytes:
        return b"".join(
            (
                _BOX_CHUNK.pack(self.counts.shape[0], self.boxes.shape[0]),
                self.counts.astype("<i4").tobytes(),
                self.boxes.astype("<f4").tobytes(),
                self.scores.astype("<f4").tobytes(),
                self.categories.astype("<i4").tobytes(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes, header: JournalHeader, origin: str = "journal") -> BoxChunk:
        """Parses `to_bytes`, checking it against `header`.

        Raises:
            JournalError: one line naming `origin`: the sizes do not match the bytes,
                the counts do not add up, or a category is not one of the header's.
        """
        if len(data) < _BOX_CHUNK.size:
            raise JournalError(f"{origin}: a chunk of boxes is cut short ({len(data)} bytes)")
        n_frames, n_boxes = _BOX_CHUNK.unpack_from(data)
        if len(data) != _BOX_CHUNK.size + n_frames * 4 + n_boxes * 24:
            raise JournalError(
                f"{origin}: a chunk says {n_frames} frames and {n_boxes} boxes but holds "
                f"{len(data)} bytes"
            )
        offset = _BOX_CHUNK.size
        counts = np.frombuffer(data, "<i4", n_frames, offset)
        offset += n_frames * 4
        boxes = np.frombuffer(data, "<f4", n_boxes * 4, offset).reshape(n_boxes, 4)
        scores = np.frombuffer(data, "<f4", n_boxes, offset + n_boxes * 16)
        categories = np.frombuffer(data, "<i4", n_boxes, offset + n_boxes * 20)
        if (counts < 0).any() or int(counts.sum(dtype=np.int64)) != n_boxes:
            raise JournalError(f"{origin}: a chunk's box counts do not add up to {n_boxes}")
        if n_boxes and (categories.min() < 0 or categories.max() >= len(header.box_categories)):
            raise JournalError(
                f"{origin}: a box's category is not one of the journal's "
                f"{len(header.box_categories)}"
            )
        return cls(counts, boxes, scores, categories)


@attrs.frozen(eq=False)
class MaskChunk:
    """A segmentation model's masks of the frames of the `FrameChunk` written just before.

    Attributes:
        counts: (F,) int32 masks in each of that chunk's frames; they sum to N.
        masks: the N masks, each (rows, columns) bool at the model's output stride.
        scores: (N,) float32.
        scales: (N, 2) float64 sio `scale` (x, y) of each mask.
    """

    counts: np.ndarray
    masks: tuple[np.ndarray, ...]
    scores: np.ndarray
    scales: np.ndarray

    def frames(self) -> Iterator[slice]:
        """The slice of each frame's masks, in order."""
        return _frame_slices(self.counts)

    def to_bytes(self) -> bytes:
        """Sizes, then each mask's (rows, columns), scores, scales, then every mask's
        pixels bit-packed row after row (`np.packbits`), one after the other."""
        shapes = np.array([m.shape for m in self.masks], "<i4").reshape(-1, 2)
        return b"".join(
            (
                _MASK_CHUNK.pack(self.counts.shape[0], len(self.masks)),
                self.counts.astype("<i4").tobytes(),
                shapes.tobytes(),
                self.scores.astype("<f4").tobytes(),
                self.scales.astype("<f8").tobytes(),
                *(np.packbits(m, axis=None).tobytes() for m in self.masks),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes, origin: str = "journal") -> MaskChunk:
        """Parses `to_bytes`.

        Raises:
            JournalError: one line naming `origin`: the sizes do not match the bytes,
                a mask is larger than a frame may be, or the counts do not add up.
        """
        if len(data) < _MASK_CHUNK.size:
            raise JournalError(f"{origin}: a chunk of masks is cut short ({len(data)} bytes)")
        n_frames, n_masks = _MASK_CHUNK.unpack_from(data)
        offset = _MASK_CHUNK.size + n_frames * 4 + n_masks * 28
        if len(data) < offset:
            raise JournalError(f"{origin}: a chunk of masks is cut short ({len(data)} bytes)")
        counts = np.frombuffer(data, "<i4", n_frames, _MASK_CHUNK.size)
        shapes = np.frombuffer(data, "<i4", n_masks * 2, _MASK_CHUNK.size + n_frames * 4)
        shapes = shapes.reshape(n_masks, 2)
        scores = np.frombuffer(data, "<f4", n_masks, offset - n_masks * 20)
        scales = np.frombuffer(data, "<f8", n_masks * 2, offset - n_masks * 16)
        if (counts < 0).any() or int(counts.sum(dtype=np.int64)) != n_masks:
            raise JournalError(f"{origin}: a chunk's mask counts do not add up to {n_masks}")
        if n_masks and (shapes.min() < 1 or shapes.max() > MAX_FRAME_SIDE):
            raise JournalError(f"{origin}: a mask's size is not 1 to {MAX_FRAME_SIDE} pixels")
        sizes = [int(rows) * int(cols) for rows, cols in shapes.tolist()]
        if len(data) != offset + sum((size + 7) // 8 for size in sizes):
            raise JournalError(
                f"{origin}: a chunk says {n_masks} masks of {sum(sizes)} pixels but holds "
                f"{len(data)} bytes"
            )
        masks = []
        for (rows, cols), size in zip(shapes.tolist(), sizes, strict=True):
            bits = np.frombuffer(data, np.uint8, (size + 7) // 8, offset)
            masks.append(np.unpackbits(bits, count=size).astype(bool).reshape(rows, cols))
            offset += (size + 7) // 8
        return cls(counts, tuple(masks), scores, scales.reshape(n_masks, 2))


@attrs.frozen(eq=False)
class EmbeddingChunk:
    """The re-identification vectors of the instances of the `FrameChunk` written just
    before (an embedding model's), in its order.

    Attributes:
        vectors: (N, D) float32, one row per instance of that chunk; NaN for none.
    """

    vectors: np.ndarray

    def to_bytes(self) -> bytes:
        return _EMBEDDING_CHUNK.pack(*self.vectors.shape) + self.vectors.astype("<f4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, origin: str = "journal") -> EmbeddingChunk:
        """Parses `to_bytes`.

        Raises:
            JournalError: one line naming `origin`: the sizes do not match the bytes.
        """
        if len(data) < _EMBEDDING_CHUNK.size:
            raise JournalError(f"{origin}: a chunk of vectors is cut short ({len(data)} bytes)")
        n, dim = _EMBEDDING_CHUNK.unpack_from(data)
        if dim > MAX_EMBEDDING_DIM or len(data) != _EMBEDDING_CHUNK.size + n * dim * 4:
            raise JournalError(
                f"{origin}: a chunk says {n} vectors of {dim} but holds {len(data)} bytes"
            )
        return cls(np.frombuffer(data, "<f4", n * dim, _EMBEDDING_CHUNK.size).reshape(n, dim))


@attrs.frozen(eq=False)
class TrackLabels:
    """Tracks given late to instances of frames already in the journal.

    Attributes:
        frame_indices: (K,) int64 frame index (in the .slp) of each instance.
        rows: (K,) int32 the instance's position among its frame's instances.
        track_ids: (K,) int32 its track.
    """

    frame_indices: np.ndarray
    rows: np.ndarray
    track_ids: np.ndarray

    def to_bytes(self) -> bytes:
        return b"".join(
            (
                _LABEL_COUNT.pack(self.frame_indices.shape[0]),
                self.frame_indices.astype("<i8").tobytes(),
                self.rows.astype("<i4").tobytes(),
                self.track_ids.astype("<i4").tobytes(),
            )
        )

    @classmethod
    def from_bytes(cls, data: bytes, origin: str = "journal") -> TrackLabels:
        """Parses `to_bytes`.

        Raises:
            JournalError: one line naming `origin`: the count does not match the
                bytes, or a row or track is negative.
        """
        if len(data) < _LABEL_COUNT.size:
            raise JournalError(f"{origin}: a record of track labels is cut short")
        (count,) = _LABEL_COUNT.unpack_from(data)
        if len(data) != _LABEL_COUNT.size + count * 16:
            raise JournalError(
                f"{origin}: a record says {count} track labels but holds {len(data)} bytes"
            )
        offset = _LABEL_COUNT.size
        frames = np.frombuffer(data, "<i8", count, offset)
        rows = np.frombuffer(data, "<i4", count, offset + count * 8)
        tracks = np.frombuffer(data, "<i4", count, offset + count * 12)
        if count and (rows.min() < 0 or tracks.min() < 0):
            raise JournalError(f"{origin}: a track label has a negative row or track")
        return cls(frames, rows, tracks)


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

    def append(
        self,
        chunk: FrameChunk | None,
        labels: TrackLabels | None = None,
        boxes: BoxChunk | None = None,
        masks: MaskChunk | None = None,
        embeddings: EmbeddingChunk | None = None,
    ) -> None:
        """Write one chunk of frames, its frames' boxes and masks and its instances'
        vectors, and labels for earlier chunks' instances (any may be None; boxes,
        masks and vectors only with a chunk) and wait until they are on disk."""
        data = b"" if chunk is None else _frame(_FRAMES, chunk.to_bytes())
        if boxes is not None:
            data += _frame(_BOXES, boxes.to_bytes())
        if masks is not None:
            data += _frame(_MASKS, masks.to_bytes())
        if embeddings is not None:
            data += _frame(_EMBEDDINGS, embeddings.to_bytes())
        if labels is not None:
            data += _frame(_LABELS, labels.to_bytes())
        _write_all(self._fd, data)
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


def read_journal(
    path: Path,
) -> tuple[
    JournalHeader, Iterator[FrameChunk | BoxChunk | MaskChunk | EmbeddingChunk | TrackLabels]
]:
    """The header of the journal at `path` and an iterator over its complete records:
    chunks of frames, the boxes, masks and vectors of the chunk just before, and track
    labels for instances of the chunks before them.

    Records are read one at a time, so memory holds one chunk, not the journal.

    Raises:
        JournalError: `path` is missing, not a journal, or its header is unreadable.
    """
    handle, header = _open(path)
    return header, _chunks(handle, header, str(path))


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
                n_frames += FrameChunk.from_bytes(record[1], header, str(path)).n_frames
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
            raise JournalTornError(f"{path}: the journal's header is incomplete (killed at once?)")
        return handle, JournalHeader.from_bytes(record[1], str(path))
    except BaseException:
        handle.close()
        raise


def _chunks(
    handle: BinaryIO, header: JournalHeader, origin: str
) -> Iterator[FrameChunk | BoxChunk | MaskChunk | EmbeddingChunk | TrackLabels]:
    with handle:
        while (record := _read_record(handle)) is not None:
            if record[0] == _FRAMES:
                yield FrameChunk.from_bytes(record[1], header, origin)
            elif record[0] == _BOXES:
                yield BoxChunk.from_bytes(record[1], header, origin)
            elif record[0] == _MASKS:
                yield MaskChunk.from_bytes(record[1], origin)
            elif record[0] == _LABELS:
                yield TrackLabels.from_bytes(record[1], origin)
            elif record[0] == _EMBEDDINGS:
                yield EmbeddingChunk.from_bytes(record[1], origin)


def _frame_slices(counts: np.ndarray) -> Iterator[slice]:
    """The slice of each frame's items in a chunk holding `counts` items a frame."""
    ends = np.cumsum(counts)
    for end, count in zip(ends.tolist(), counts.tolist(), strict=True):
        yield slice(end - count, end)


def _field(origin: str, name: str, value: Any, kind: type) -> Any:
    """`value`, unless it is not a `kind` (bool is no int here): then a one-line error."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise JournalError(
            f"{origin}: the journal's {name} must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _strings(origin: str, name: str, value: Any, most: int) -> tuple[str, ...]:
    values = _field(origin, name, value, list)
    if len(values) > most or not all(isinstance(item, str) for item in values):
        raise JournalError(f"{origin}: the journal's {name} must be at most {most} names")
    return tuple(values)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_record(handle: BinaryIO) -> tuple[bytes, bytes] | None:
    """The next complete, intact record, or None at the end or at a torn record."""
    head = handle.read(_RECORD.size)
    if len(head) < _RECORD.size:
        return None
    kind, length, crc = _RECORD.unpack(head)
    payload = handle.read(length)
    known = (_HEADER, _FRAMES, _BOXES, _MASKS, _LABELS, _EMBEDDINGS)
    if len(payload) < length or zlib.crc32(payload) != crc or kind not in known:
        return None
    return kind, payload


def _frame(kind: bytes, payload: bytes) -> bytes:
    return _RECORD.pack(kind, len(payload), zlib.crc32(payload)) + payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
