"""A video's output is complete or absent: written under a hidden name, renamed when done.

While a video is processed its poses go to ``.NAME.unfinished.SUFFIX`` (journaled
like any pose output) beside the output ``NAME.SUFFIX``; only once the whole video
is done is it renamed, atomically, to its name. So an output that exists is
complete (a later run skips it), and a run killed halfway leaves only hidden
files, which the next attempt at that video discards (`discard_unfinished`) before
starting over: a retry never mixes two attempts' frames.

Where the workers cannot write the output folder (Ray workers on machines that do
not share it), a worker writes the output on its own disk, hands over its bytes
(`collect`) and the driver places them (`place`) under the same rules: hidden name,
journal locked, an earlier half-written attempt discarded, renamed when whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args

import attrs

from sleap_live.output_rule import OutputError, resolve_output, stale_staging
from sleap_live.stream.outputs.exports import sidecars
from sleap_live.stream.outputs.guard import OutputLock
from sleap_live.stream.outputs.journal import journal_path

# Who writes each output into the output folder: "worker", the process that ran the
# video, or "driver", the process that started the run, from bytes the worker returns.
OutputsTo = Literal["worker", "driver"]
OUTPUTS_TO: tuple[OutputsTo, ...] = get_args(OutputsTo)


@attrs.frozen
class OutputBytes:
    """A finished output's files, as bytes, to be placed on another machine.

    Attributes:
        pose: the pose file.
        sidecars: each of `sidecars(output)`'s files, None where none was written.
    """

    pose: bytes
    sidecars: tuple[bytes | None, ...]


def unfinished_path(output: Path) -> Path:
    """Where `output`'s poses are written until its video is done (hidden, same suffix)."""
    return output.with_name(f".{output.stem}.unfinished{output.suffix}")


def unfinished_files(output: Path) -> list[Path]:
    """Every file an unfinished attempt at `output` may have left, that exists."""
    unfinished = unfinished_path(output)
    candidates = [
        unfinished,
        journal_path(unfinished),
        *sidecars(unfinished),
        *stale_staging(unfinished),
    ]
    return [path for path in candidates if path.exists()]


def discard_unfinished(output: Path) -> bool:
    """Delete what an earlier, unfinished attempt at `output` left; whether there was any.

    The unfinished journal is locked first, so an attempt still running elsewhere
    (another run on the same folder) is never touched.

    Raises:
        OutputBusyError: another process is writing `output` now.
        OutputError: the journal cannot be opened.
    """
    with _claimed(output) as discarded:
        return discarded


@contextlib.contextmanager
def _claimed(output: Path) -> Iterator[bool]:
    """Lock `output`'s unfinished journal, delete what an earlier unfinished attempt
    left, and give whether there was any; on leaving, the journal is removed (while
    still locked: no other attempt writes it meanwhile) and unlocked."""
    unfinished = unfinished_path(output)
    journal = journal_path(unfinished)
    left = [path for path in unfinished_files(output) if path != journal]
    had_journal = journal.exists()
    lock = OutputLock(journal, f"the pose output {output}")
    try:
        for path in left:
            _remove(path)
        yield had_journal or bool(left)
    finally:
        journal.unlink(missing_ok=True)
        lock.release()


def finish(output: Path) -> None:
    """Move the unfinished output (and its sidecars) to `output`, atomically.

    The sidecars go first and the pose file last, so an output that exists has
    its sidecars. The output rule (`output_rule.resolve_output`) is applied again at
    the rename: a link planted at `output` meanwhile is not followed.

    Raises:
        OutputError: the rule refuses `output` now, or an unfinished file is not
            this run's own (a link, another user's).
        OSError: the rename failed (the unfinished files are left for a retry).
    """
    resolve_output(output, "the output")
    unfinished = unfinished_path(output)
    for path in (*sidecars(unfinished), unfinished):
        _check_own_file(path)
    for sidecar, final in zip(sidecars(unfinished), sidecars(output), strict=True):
        if sidecar.exists():
            os.replace(sidecar, final)
    os.replace(unfinished, output)
    _fsync_folder(output.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX; Windows cannot open folders)."""
    if sys.platform == "win32":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def collect(output: Path) -> OutputBytes:
    """The finished `output`'s files as bytes, the files then removed (they were
    written to be handed over).

    Raises:
        OSError: a file cannot be read.
    """
    extra = sidecars(output)
    found = OutputBytes(
        output.read_bytes(),
        tuple(path.read_bytes() if path.exists() else None for path in extra),
    )
    for path in [output, *extra]:
        path.unlink(missing_ok=True)
    return found


def place(output: Path, files: OutputBytes) -> bool:
    """Write `files` as `output` the way a worker would: under the unfinished names,
    with the unfinished journal locked, then renamed (`finish`); whether an earlier,
    half-written attempt at `output` was discarded first.

    Raises:
        OutputBusyError: another process is writing `output` now.
        OSError: a file cannot be written (nothing is left at `output`'s name).
    """
    unfinished = unfinished_path(output)
    with _claimed(output) as discarded:
        try:
            for sidecar, data in zip(sidecars(unfinished), files.sidecars, strict=True):
                if data is not None:
                    _write_durably(sidecar, data)
            _write_durably(unfinished, files.pose)
            finish(output)
        except OSError:
            for path in unfinished_files(output):
                if path != journal_path(unfinished):
                    _remove(path)
            raise
    return discarded


def _check_own_file(path: Path) -> None:
    """Refuse to rename `path` into place unless it is this user's own file, not a
    link or a file another user (the owner of the folder) put at its name."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return  # a sidecar not written; the pose file's rename says it is missing
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        raise OutputError(
            f"{path}: not this run's own file (a link, or another user's); not renamed into place"
        )


def _remove(path: Path) -> None:
    """Remove a file, or a killed writer's private folder (`output_rule.stale_staging`)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_durably(path: Path, data: bytes) -> None:
    """Write `data` to `path`, a name just cleared, and to the disk; created here,
    never through a link or into a file planted at `path` since."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_BINARY", 0), 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
