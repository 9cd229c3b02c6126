"""A video's output is complete or absent: written under a hidden name, renamed when done.

While a video is processed its poses go to ``.NAME.unfinished.SUFFIX`` (journaled
like any pose output) beside the output ``NAME.SUFFIX``; only once the whole video
is done is it renamed, atomically, to its name. So an output that exists is
complete (a later run skips it), and a run killed halfway leaves only hidden
files, which the next attempt at that video discards (`discard_unfinished`) before
starting over: a retry never mixes two attempts' frames.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sleap_live.stream.outputs.exports import sidecars
from sleap_live.stream.outputs.guard import OutputLock, stale_temporaries
from sleap_live.stream.outputs.journal import journal_path


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
        *stale_temporaries(unfinished),
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
    unfinished = unfinished_path(output)
    journal = journal_path(unfinished)
    left = [path for path in unfinished_files(output) if path != journal]
    had_journal = journal.exists()
    lock = OutputLock(journal, f"the pose output {output}")
    try:
        # Removed while locked: no other attempt writes it meanwhile.
        journal.unlink(missing_ok=True)
        for path in left:
            path.unlink(missing_ok=True)
    finally:
        lock.release()
    return had_journal or bool(left)


def finish(output: Path) -> None:
    """Move the unfinished output (and its sidecars) to `output`, atomically.

    The sidecars go first and the pose file last, so an output that exists has
    its sidecars.

    Raises:
        OSError: the rename failed (the unfinished files are left for a retry).
    """
    unfinished = unfinished_path(output)
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
