"""Guards that keep a run's outputs from destroying data.

- `check_outputs`: before any work, refuse an output that is one of the run's
  inputs (the video, a model file, another output), compared by resolved path and
  by inode, so symlinks and hard links are caught too, and an output whose folder
  cannot be written.
- `OutputLock`: an exclusive advisory lock (`flock`) on a file for the run's
  lifetime, so a second run writing the same output fails at once with a clear
  error instead of interleaving with the first.
- `temporary_path`: temporary files named per process, so two processes never
  share one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from sleap_live.stream.errors import StreamError


class OutputError(StreamError, OSError):
    """An output path would destroy data or cannot be written; nothing was written."""


class OutputBusyError(OutputError):
    """Another process holds the lock of an output."""


def check_outputs(
    outputs: Mapping[str, Path | None], inputs: Mapping[str, Iterable[Path | None]]
) -> None:
    """Refuse outputs that are inputs or each other, or that cannot be written.

    Args:
        outputs: output paths by the option that named them ("-o", "--record").
        inputs: paths read by the run, by the option that named them ("VIDEO", "-m").
            A model directory counts as every file directly in it.

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
        _check_writable(output, option)
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


def temporary_path(path: Path) -> Path:
    """A hidden temporary file beside `path`, named after this process.

    It keeps `path`'s suffix (sleap-io picks the format by it).
    """
    return path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")


def stale_temporaries(path: Path) -> list[Path]:
    """Temporary files of `path` left by any process (see `temporary_path`).

    Only the holder of `path`'s lock writes them, so the holder may delete them.
    """
    return sorted(path.parent.glob(f".{path.stem}.*.partial{path.suffix}"))


class OutputLock:
    """An exclusive lock on the file `path`, held until `release` (or process exit).

    The file is created if missing, never truncated: taking the lock cannot harm
    what another process is writing. The lock is advisory, so it excludes other
    sleap-live runs, not other programs.

    Args:
        path: the file to lock.
        what: how the error names the output (e.g. "the pose output x.slp").

    Raises:
        OutputBusyError: another process holds the lock.
        OutputError: the file cannot be created or opened for writing.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.created = not path.exists()
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
            except OSError as error:
                raise OutputError(f"{path}: cannot write {what}: {error.strerror}") from None
            if not _try_lock(fd):
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


def _check_writable(output: Path, option: str) -> None:
    folder = output.resolve().parent
    if not folder.is_dir():
        raise OutputError(f"{output}: folder {folder} for {option} does not exist")
    if output.is_dir():
        raise OutputError(f"{output}: {option} names a folder; give a file path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{output}: folder {folder} for {option} is not writable")


def _same_inode(fd: int, path: Path) -> bool:
    try:
        now = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _try_lock(fd: int) -> bool:
    """Take an exclusive lock on `fd` without waiting; False if another process holds one."""
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
