"""The sources a pipeline runs: a group, of one source usually, or of several cameras
filming one arena from several sides.

A pipeline runs every source as a `SourceGroup` (`as_group`). The group only holds
them: the pipeline reads each in a reader thread of its own (see `source_reader`).
A group of several (`per_source`) keeps the newest frame of each (see `slots`), runs
the newest frame of every source in one engine call, and writes each source's poses
to files of its own (`per_source_path`); a single source taken as a group of one is
batched in order and keeps its outputs' names. Every record keeps its source's id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from sleap_live.stream.sources import Source


def source_tag(source_id: str) -> str:
    """A source id as a file name part: a path's last part, with each run of other
    characters than letters and digits made one "-" (``"camera:0"`` -> ``"camera-0"``,
    ``"/dev/video2"`` -> ``"video2"``, ``"video=Logitech BRIO"`` -> ``"video-Logitech-BRIO"``)."""
    name = source_id.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-") or "source"


def per_source_path(path: Path, source_id: str) -> Path:
    """Where one source's part of an output goes: ``STEM.TAG.SUFFIX`` beside `path`
    (``session.slp`` -> ``session.camera-0.slp``)."""
    return path.with_name(f"{path.stem}.{source_tag(source_id)}{path.suffix}")


def as_group(source: Source | SourceGroup) -> SourceGroup:
    """What a pipeline runs: a group as it is; one source as a group of one, read and
    written as that source alone (`per_source` False)."""
    if isinstance(source, SourceGroup):
        return source
    group = SourceGroup([source])
    group.per_source = False
    return group


class SourceGroup:
    """Several open sources whose frames go through one pipeline, a batch holding the
    newest frame of each.

    Every source must give frames of one shape (an engine call stacks them) and have
    an id of its own (each output file is named after it).

    Args:
        sources: the open sources, in the order batches hold their frames; the group
            closes them.

    Attributes:
        sources: the sources.
        source_id: the sources' ids joined with ``+``.
        fps: the highest of the sources' rates, None if none says.
        frame_shape: the sources' frame shape.
        n_frames: the frames of all sources together, None if any is unbounded.
        is_live: whether any source is live (then every frame slot keeps only the newest).
        per_source: each source has a slot of its own in every batch, a batch holding
            one frame of each, and files of its own; False only for one source taken
            as a group of one (`as_group`).

    Raises:
        ValueError: no source, two with one id (or one file name tag), or two frame shapes.
    """

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = tuple(sources)
        if not self.sources:
            raise ValueError("a source group needs at least one source")
        tags: dict[str, str] = {}
        for source in self.sources:
            tag = source_tag(source.source_id)
            if tag in tags:
                raise ValueError(
                    f"sources {tags[tag]!r} and {source.source_id!r} need distinct ids: each "
                    "one's outputs are named after its id"
                )
            tags[tag] = source.source_id
        first = self.sources[0]
        for source in self.sources[1:]:
            if tuple(source.frame_shape) != tuple(first.frame_shape):
                raise ValueError(
                    f"{source.source_id} gives {_shape(source.frame_shape)} frames but "
                    f"{first.source_id} gives {_shape(first.frame_shape)}; the sources of one "
                    "run share each engine call, so they must give one frame size and channel "
                    "count (request it with --width/--height, or --camera-option)"
                )
        self.source_id = "+".join(source.source_id for source in self.sources)
        rates = [source.fps for source in self.sources if source.fps]
        self.fps: float | None = max(rates) if rates else None
        self.frame_shape: tuple[int, int, int] = first.frame_shape
        counts = [source.n_frames for source in self.sources]
        self.n_frames = None if None in counts else sum(n for n in counts if n is not None)
        self.is_live = any(source.is_live for source in self.sources)
        self.per_source = True

    @property
    def source_ids(self) -> tuple[str, ...]:
        """The sources' ids, in order."""
        return tuple(source.source_id for source in self.sources)

    def close(self) -> None:
        """Close every source (each closes once, from any thread)."""
        for source in self.sources:
            source.close()

    def __enter__(self) -> SourceGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _shape(shape: Sequence[int]) -> str:
    height, width, channels = shape
    return f"{width}x{height}, {channels}-channel"
