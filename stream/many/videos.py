"""Which videos a many-videos run processes, and where each one's poses go.

`find_videos` expands what a user gives (video files, folders, glob patterns) into
a sorted list of video files; `plan_jobs` names each one's output from a pattern
and says which are complete already (a run writes it under a temporary name and
renames it only once the whole video is done, see `finish`; what is found at that
name is checked to be a pose file of that video, `output_problem`, before the video
is skipped).

What is not a regular file is never opened to find out what it is (opening a FIFO
blocks until someone writes it): each entry is `lstat`ed first, and FIFOs,
sockets, devices, links that loop or lead nowhere, and links to folders out of the
folder searched are left out with one line each (`notify`), their names escaped
(`escaped`). Patterns are expanded without following links into folders, so a link
loop cannot make the walk endless.
"""

from __future__ import annotations

import glob
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from sleap_live.engines.notify import Notify
from sleap_live.stream.errors import StreamError
from sleap_live.stream.outputs.exports import (
    CSV_COLUMNS,
    PROVENANCE_SIDECAR_SUFFIX,
    check_suffix,
)

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
        complete: the output exists already and is a pose file of this video
            (skipped unless overwriting).
        problem: why something at the output's name is not that (it is refused,
            not replaced, unless overwriting); None when absent or complete.
    """

    index: int
    video: Path
    output: Path
    complete: bool
    problem: str | None = None


def escaped(path: str | os.PathLike[str]) -> str:
    """A path as one printable line: control characters (a newline in a name) and
    bytes that are no text in the file system's encoding written as escapes."""
    text = os.fspath(path)
    out = []
    for char in text:
        if 0xDC80 <= ord(char) <= 0xDCFF:  # an undecodable byte (surrogateescape)
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def find_videos(
    inputs: Iterable[str | os.PathLike[str]], notify: Notify = _print_to_stderr
) -> list[Path]:
    """The video files `inputs` name, in order, each once.

    A file is taken as it is; a folder gives the videos directly in it (by
    `VIDEO_SUFFIXES`), sorted by name; anything else holding ``*``, ``?`` or ``[``
    is a glob pattern (``**`` recurses, not into linked folders), its matches sorted.
    A FIFO, socket or device (given, in a folder or matched), a link that loops, or
    one in a folder or match that points out of that folder, is left out with a
    line to `notify` (see the module's notes).

    Raises:
        VideoListError: an input names nothing (a missing file, an empty folder or
            a pattern that matches no file), or nothing at all was given.
    """
    found: list[Path] = []
    for given in inputs:
        path = Path(given)
        kind = _kind(path, follow=True)
        if kind == "folder":
            videos = [
                member
                for member in sorted(path.iterdir())
                if _is_video_in(member, path, notify, by_suffix=True)
            ]
            if not videos:
                raise VideoListError(
                    f"{escaped(path)}: no video in this folder (looked for "
                    f"{', '.join(sorted(VIDEO_SUFFIXES))})"
                )
        elif kind == "file":
            videos = [path]
        elif kind not in ("missing", "loop"):
            notify(f"{escaped(path)}: {kind}, not a video file: skipped")
            continue
        elif glob.has_magic(os.fspath(path)):
            root, pattern = _split_pattern(path)
            matches = _matches(root, pattern)
            videos = sorted(
                match for match in matches if _is_video_in(match, root, notify, by_suffix=False)
            )
            if not videos:
                what = "no video file (what it matches is skipped)" if matches else "no file"
                raise VideoListError(f"{escaped(path)}: the pattern matches {what}")
        elif kind == "loop":
            raise VideoListError(f"{escaped(path)}: a link that loops, no video file")
        else:
            raise VideoListError(f"{escaped(path)}: no such video file or folder")
        found.extend(videos)
    if not found:
        raise VideoListError("no video given")
    unique: dict[Path, Path] = {}
    for video in found:
        unique.setdefault(video.resolve(), video)
    return list(unique.values())


def _kind(path: Path, *, follow: bool) -> str:
    """What `path` is, from its status alone (nothing is opened): "file", "folder",
    "missing", "loop", "a link", or a few words for a FIFO, socket or device."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except FileNotFoundError:
        return "loop" if follow and os.path.islink(path) and _loops(path) else "missing"
    except OSError:  # ELOOP, a name too long, a folder we may not enter
        return "loop" if os.path.islink(path) else "missing"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def _loops(path: Path) -> bool:
    """Whether the link `path` is part of a loop (rather than dangling)."""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # pathlib's "Symlink loop" on Python 3.11
        return True
    except OSError as error:
        return error.errno == 40  # ELOOP
    return False


def _is_video_in(member: Path, folder: Path, notify: Notify, *, by_suffix: bool) -> bool:
    """Whether `member` (found in `folder`) is a video to take. Says why not, in one
    line, for a FIFO, socket or device, and for a link that loops, dangles or leads
    to a folder out of `folder`, whatever their names; a link to a file is taken as
    the file; other files without a video suffix (`by_suffix`) and folders are passed
    over without a word."""
    own = _kind(member, follow=False)
    if own == "a link":
        target = _kind(member, follow=True)
        if target == "loop":
            notify(f"{escaped(member)}: a link that loops: skipped")
            return False
        if target == "missing":
            notify(f"{escaped(member)}: a link to nothing: skipped")
            return False
        # A link to a video kept elsewhere is taken (labs link recordings into a
        # session's folder); a link to a folder elsewhere is not walked, and said.
        resolved = Path(os.path.realpath(member))
        if target == "folder" and not resolved.is_relative_to(os.path.realpath(folder)):
            notify(
                f"{escaped(member)}: a link to a folder out of {escaped(folder)} "
                f"(to {escaped(resolved)}): not searched; give that folder to search it"
            )
            return False
        own = target
    if own == "folder":
        return False
    if own != "file":
        notify(f"{escaped(member)}: {own}, not a video file: skipped")
        return False
    return not by_suffix or member.suffix.lower() in VIDEO_SUFFIXES


def _split_pattern(pattern: Path) -> tuple[Path, str]:
    """A glob pattern as the folder before its first wildcard and the rest."""
    parts = pattern.parts
    first = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return Path(*parts[:first]) if first else Path("."), "/".join(parts[first:])


def _matches(root: Path, pattern: str) -> list[Path]:
    """`pattern`'s matches under `root`: pathlib's glob, whose ``**`` does not enter
    linked folders (the `glob` module's does, endlessly through a link loop); names
    starting with a dot are left out unless the pattern names them, as `glob` does."""
    if not root.is_dir():
        return []
    shown_hidden = any(part.startswith(".") for part in pattern.split("/"))
    matches = []
    for match in root.glob(pattern):
        relative = match.relative_to(root).parts
        if shown_hidden or not any(part.startswith(".") for part in relative):
            matches.append(match)
    return matches


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
        problem = output_problem(video, output)
        jobs.append(VideoJob(index, video, output, problem is None, problem or None))
    return jobs


def output_problem(video: Path, output: Path) -> str | None:
    """Why what is at `output`'s name is not a finished pose file of `video`: "" when
    nothing is there, None when it is one.

    A finished output was renamed into place only once its video was done
    (`finish`), so a readable pose file whose provenance names the video is one
    (``source``: the video's path, or a file of its name when the folders moved).
    Anything else (an empty or foreign file, a folder, a link, another video's
    poses) is not: the caller refuses it rather than skipping the video, and never
    replaces it unasked. Nothing is opened but a regular file's own bytes.
    """
    try:
        info = os.lstat(output)
    except FileNotFoundError:
        return ""
    except OSError as error:
        return f"cannot be looked at ({error.strerror})"
    if not stat.S_ISREG(info.st_mode):
        kind = _kind(output, follow=False)
        return f"is {'a folder' if kind == 'folder' else kind}, not a pose file"
    if info.st_size == 0:
        return "is empty, not a pose file"
    try:
        provenance = _provenance(output)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"is no readable pose file ({type(error).__name__})"
    source = provenance.get("source") if isinstance(provenance, dict) else None
    if not isinstance(source, str):
        return "is a pose file that names no video"
    same = Path(source).name == video.name or Path(source).absolute() == video.absolute()
    if not same:
        return f"holds the poses of another video ({escaped(source)})"
    return None


def _provenance(output: Path) -> object:
    """The provenance a pose file of sleap-live's carries, by its format (see
    `sleap_live.stream.outputs.exports`)."""
    suffix = output.suffix.lower()
    if suffix == ".csv":
        sidecar = output.with_name(output.name + PROVENANCE_SIDECAR_SUFFIX)
        with open(output, "rb") as handle:
            header = handle.readline().decode("utf-8")
        if not header.startswith(",".join(CSV_COLUMNS)):
            raise ValueError("not a pose CSV")
        return json.loads(sidecar.read_text())
    import h5py

    with h5py.File(output, "r") as handle:
        if suffix == ".slp":  # sleap-io keeps it in the metadata's JSON
            return json.loads(handle["metadata"].attrs["json"])["provenance"]
        if suffix == ".h5":
            return json.loads(_text(handle["provenance"][()]))
        return json.loads(_text(handle["general"]["notes"][()]))  # .nwb: the file's notes


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    raise TypeError(f"a {type(value).__name__}, not text")
