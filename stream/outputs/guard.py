"""Guards that keep a run's outputs from destroying data.

- `check_outputs`: before any work, refuse an output that is one of the run's
  inputs (the video, a model file, another output), compared by resolved path and
  by inode, so symlinks and hard links are caught too, and an output whose folder
  cannot be written.
- `OutputLock`: an exclusive advisory lock (filelock's `flock`) on a file for the run's
  lifetime, so a second run writing the same output fails at once with a clear
  error instead of interleaving with the first.
- The rule every writer claims its output by, and the staging it is written
  through: `sleap_live.output_rule`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sleap_live.output_rule import OutputError, claim_output


class OutputBusyError(OutputError):
    """Another process holds the lock of an output."""


def check_outputs(
    outputs: Mapping[str, Path | None],
    inputs: Mapping[str, Iterable[Path | None]],
    *,
    overwrite: bool = False,
) -> None:
    """Refuse outputs that are inputs or each other, or that cannot be written.

    Args:
        outputs: output paths by the option that named them ("-o", "--record").
        inputs: paths read by the run, by the option that named them ("VIDEO", "-m").
            A model directory counts as every file directly in it.
        overwrite: replace existing outputs (`claim_output`).

    Raises:
        OutputError: one line naming both options and the path.
    """
    named: list[tuple[str, Path]] = []
    for option, paths in inputs.items():
        for path in paths:
            if path is not None:
                named.extend((option, member) for member in _members(Path(path)))
    for option, output in outputs.items():
        if output is None:
            continue
        output = Path(output)
        for other, path in named:
            if same_file(output, path):
                what = "" if Path(path) == output else f" ({path})"
                raise OutputError(
                    f"{output}: the output of {option} is the {other} input{what}; "
                    f"writing it would destroy it, so give {option} another path"
                )
        _check_writable(output, option, overwrite)
        named.append((option, output))


def same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one file: equal resolved paths, or one inode."""
    if a.resolve() == b.resolve():
        return True
    try:
        first, second = a.stat(), b.stat()
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


class OutputLock:
    """An exclusive lock on the file `path`, held until `release` (or process exit).

    The file is created if missing, never truncated: taking the lock cannot harm
    what another process is writing. The lock is advisory, so it excludes other
    sleap-live runs, not other programs.

    The lock is filelock's (`filelock.lock_descriptor`: ``flock`` of the whole file,
    one byte's ``LockFileEx`` on Windows) on a descriptor opened here, not a
    `filelock.FileLock`: the file locked is the output itself (a recording) or the
    pose output's journal, which `SlpWriter` writes through `fd` for the whole run,
    so it must be opened without truncation, never through a link, and never
    replaced by a soft lock writing a PID into its first bytes.

    Args:
        what: how the error names the output (e.g. "the pose output x.slp").

    Raises:
        OutputBusyError: another process holds the lock.
        OutputError: the file cannot be created or opened for writing.
    """

    def __init__(self, path: Path, what: str) -> None:
        # filelock takes ~60 ms to import: paid by a run that writes a file only.
        from filelock import lock_descriptor

        self.path = path
        self.created = not path.exists()
        while True:
            try:
                # Never through a link: the lock file is created where it is named.
                flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                fd = os.open(path, flags | getattr(os, "O_BINARY", 0), 0o644)
            except OSError as error:
                raise OutputError(f"{path}: cannot write {what}: {error.strerror}") from None
            if not lock_descriptor(fd, blocking=False):
                os.close(fd)
                raise OutputBusyError(
                    f"{path}: {what} is being written by another sleap-live run; "
                    "wait for it to finish or give another path"
                )
            # The holder before us may have deleted the file after we opened it: a
            # lock on a deleted file guards nothing, so lock the file now there.
            if _same_inode(fd, path):
                break
            os.close(fd)
        self.fd: int | None = fd

    def release(self) -> None:
        """Unlock and close; idempotent."""
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


def _members(path: Path) -> list[Path]:
    if path.is_dir():
        return [path, *(member for member in path.iterdir() if member.is_file())]
    return [path]


def _check_writable(output: Path, option: str, overwrite: bool) -> None:
    if output.is_dir():  # before the claim, which would call a full folder an output
        raise OutputError(f"{output}: {option} names a folder; give a file path")
    claim_output(output, option, overwrite=overwrite)
    folder = output.resolve().parent
    if not folder.is_dir():
        raise OutputError(f"{output}: folder {folder} for {option} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{output}: folder {folder} for {option} is not writable")


def _same_inode(fd: int, path: Path) -> bool:
    try:
        now = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
