"""Which videos a many-videos run processes, and where each one's poses go.

`find_videos` expands what a user gives (video files, folders, glob patterns) into
a sorted list of video files; `plan_jobs` names each one's output from a pattern
and says which are complete already (their output exists: a run writes it under a
temporary name and renames it only once the whole video is done, see `finish`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from sleap_live.stream.errors import StreamError
from sleap_live.stream.outputs.exports import check_suffix

# What a folder is searched for (case-insensitive): the containers FFmpeg reads that
# labs record to. A file given by name is taken whatever its suffix.
VIDEO_SUFFIXES = frozenset(
    {".mp4", ".avi", ".mkv", ".mov", ".m4v", ".webm", ".mpg", ".mpeg", ".ts", ".h264", ".h265"}
)

# Where each video's poses go: `{stem}` the video's name without its suffix, `{name}`
# its whole name, `{parent}` the name of its folder. The suffix picks the format.
DEFAULT_NAME_PATTERN = "{stem}.predictions.slp"
PATTERN_FIELDS = ("stem", "name", "parent")


class VideoListError(StreamError, ValueError):
    """What was given names no video, or two videos would write one output."""


@attrs.frozen
class VideoJob:
    """One video of a many-videos run.

    Attributes:
        index: its place in the run (the order videos were found in).
        video: the video file.
        output: where its poses go once it is done.
        complete: the output exists already (skipped unless overwriting).
    """

    index: int
    video: Path
    output: Path
    complete: bool


def find_videos(inputs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The video files `inputs` name, in order, each once.

    A file is taken as it is; a folder gives the videos directly in it (by
    `VIDEO_SUFFIXES`), sorted by name; anything else holding ``*``, ``?`` or ``[``
    is a glob pattern (``**`` recurses), its matches sorted.

    Raises:
        VideoListError: an input names nothing (a missing file, an empty folder or
            a pattern that matches no file), or nothing at all was given.
    """
    found: list[Path] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            videos = sorted(
                member
                for member in path.iterdir()
                if member.is_file() and member.suffix.lower() in VIDEO_SUFFIXES
            )
            if not videos:
                raise VideoListError(
                    f"{path}: no video in this folder (looked for "
                    f"{', '.join(sorted(VIDEO_SUFFIXES))})"
                )
        elif path.exists():
            videos = [path]
        elif glob.has_magic(os.fspath(path)):
            videos = sorted(
                Path(match)
                for match in glob.glob(os.fspath(path), recursive=True)
                if Path(match).is_file()
            )
            if not videos:
                raise VideoListError(f"{path}: the pattern matches no file")
        else:
            raise VideoListError(f"{path}: no such video file or folder")
        found.extend(videos)
    if not found:
        raise VideoListError("no video given")
    unique: dict[Path, Path] = {}
    for video in found:
        unique.setdefault(video.resolve(), video)
    return list(unique.values())


def check_name_pattern(pattern: str) -> None:
    """Refuse a pattern with unknown fields, a folder in it, or a suffix that is no
    pose format.

    Raises:
        VideoListError: one line naming the pattern and the problem.
    """
    try:
        name = pattern.format(stem="x", name="x.mp4", parent="p")
    except (KeyError, IndexError, ValueError) as error:
        raise VideoListError(
            f"{pattern}: a name pattern takes the fields "
            f"{', '.join('{' + field + '}' for field in PATTERN_FIELDS)} ({error!r})"
        ) from None
    if "/" in pattern or os.sep in pattern:
        raise VideoListError(f"{pattern}: a name pattern names a file; give its folder apart")
    if "{" not in pattern:
        raise VideoListError(
            f"{pattern}: a name pattern needs a field ({{stem}}), or every video writes one file"
        )
    try:
        check_suffix(Path(name))
    except ValueError as error:
        # Its message names the sample file name ("x.txt: ..."): the pattern instead.
        reason = str(error).split(": ", 1)[-1]
        raise VideoListError(f"{pattern}: {reason}") from None


def output_for(video: Path, pattern: str, output_dir: Path) -> Path:
    """Where `video`'s poses go: `pattern` filled in, in `output_dir`."""
    name = pattern.format(stem=video.stem, name=video.name, parent=video.resolve().parent.name)
    return output_dir / name


def plan_jobs(
    videos: Sequence[Path], *, pattern: str = DEFAULT_NAME_PATTERN, output_dir: Path | None = None
) -> list[VideoJob]:
    """A job per video: its output, and whether that output is complete already.

    Args:
        videos: the videos (see `find_videos`).
        pattern: the output's name (`DEFAULT_NAME_PATTERN`'s fields).
        output_dir: the outputs' folder (default: the working directory), made
            with its parents if missing.

    Raises:
        VideoListError: a bad pattern, an output folder that is a file or cannot
            be made, or two videos whose
            outputs would be one file (naming both, and the `{parent}` field).
    """
    check_name_pattern(pattern)
    folder = Path.cwd() if output_dir is None else Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise VideoListError(f"{folder}: the output folder is a file")
    try:
        # Made as `mkdir -p` would: the README's `--output-dir out/poses` as pasted.
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise VideoListError(
            f"{folder}: the output folder cannot be made ({error.strerror})"
        ) from None
    jobs: list[VideoJob] = []
    owners: dict[Path, Path] = {}
    for index, video in enumerate(videos):
        output = output_for(video, pattern, folder)
        key = output.resolve()
        if key in owners:
            raise VideoListError(
                f"{video} and {owners[key]} would both write {output}; put {{parent}} in the "
                "name pattern, or run them apart"
            )
        owners[key] = video
        jobs.append(VideoJob(index, video, output, output.exists()))
    return jobs
