"""Guards that keep a run's outputs from destroying data.

- `check_outputs`: before any work, refuse an output that is one of the run's
  inputs (the video, a model file, another output), compared by resolved path and
  by inode, so symlinks and hard links are caught too, and an output whose folder
  cannot be written.
- `OutputLock`: an exclusive advisory lock (filelock's `flock`) on a file for the run's
  lifetime, so a second run writing the same output fails at once with a clear
  error instead of interleaving with the first.
- Where the files are written before they are renamed into place: `staging`.
- `claim_output`: the rule every writer applies to its output before its work;
  `resolve_output`, the link rule, applied then and again at the rename into
  place (`staging`).
- `check_links`: an output path is not followed through another user's link:
  the rule Linux's ``fs.protected_symlinks`` enforces, applied whatever the
  system's setting (macOS has none), and a followed link must end at the user's
  own file in the user's own folder, where its journal and temporary files go.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from sleap_live.stream.errors import StreamError


class OutputError(StreamError, OSError):
    """An output path would destroy data or cannot be written; nothing was written."""


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


def check_links(path: Path, what: str) -> None:
    """Refuse to write `path` through a link another user could have planted.

    Every symbolic link resolving `path` follows is checked: one in a
    world-writable sticky folder (``/tmp``, a shared drop folder) is followed only
    if this user or the folder's owner owns it (as ``fs.protected_symlinks=1``
    does). Once a link was followed, the file it ends at, if it exists, must be
    this user's, and its folder, where the journal and temporary files are
    written beside it, this user's or root's.

    Args:
        path: the output path as given.
        what: how the error names the output (e.g. "-o").

    Raises:
        OutputError: one line naming `path`, the link and the owner.
    """
    if sys.platform == "win32":
        return  # no owners to compare; creating links there takes a privilege
    links = followed_links(path)
    if not links:
        return
    user = os.geteuid()
    for link in links:
        folder = link.parent.stat()
        shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
        owner = link.lstat().st_uid
        if shared and owner not in (user, folder.st_uid):
            raise OutputError(
                f"{path}: {what} goes through the link {link}, owned by another user "
                f"(uid {owner}) in the shared folder {link.parent}; not followed, "
                "give the file's own path"
            )
    target = Path(os.path.realpath(path))
    # A folder of root's (macOS's /private/tmp, behind /tmp) is no other user's.
    for checked, kind, owners in ((target, "file", {user}), (target.parent, "folder", {user, 0})):
        try:
            owner = checked.stat().st_uid
        except FileNotFoundError:
            continue
        if owner not in owners:
            raise OutputError(
                f"{path}: {what} is a link to the {kind} {checked}, owned by another user "
                f"(uid {owner}); not followed, give the file's own path"
            )


def claim_output(path: Path, what: str, *, overwrite: bool = False) -> Path:
    """Apply the output rule to `path` before any work; the file it resolves to.

    Every writer claims its output here (`check_outputs` for `run`, `render` and
    many videos; the pose writer, `recover`, `track`, every export), so a rule
    about whether an output may be written at all, added here, holds for every
    command. The rules: an existing output is replaced only when asked
    (`overwrite`, the commands' ``--overwrite``), as ffmpeg without ``-y``; and
    the link rule (`resolve_output`), which alone is checked again at the rename.

    Args:
        path: the output as given.
        what: how errors name the output (e.g. "-o").
        overwrite: replace an existing output (an empty folder is no output).

    Raises:
        OutputError: one line naming `path` and why it is not written.
    """
    target = resolve_output(path, what)
    if not overwrite and _holds_output(target):
        raise OutputError(f"{path}: {what} exists; give --overwrite to replace it, or another path")
    return target


def _holds_output(target: Path) -> bool:
    """Whether the resolved output `target` holds something a write would replace:
    a file, or a folder with anything in it (a link to nothing yet holds nothing)."""
    if target.is_dir():
        return any(target.iterdir())
    return target.exists()


def resolve_output(path: Path, what: str) -> Path:
    """The file `path` resolves to, not through a link another user could have
    planted (`check_links`): checked at the claim and again at the moment the
    output's files are renamed into place (`staging.StagedOutput`).

    Raises:
        OutputError: one line naming `path`, the link and its owner.
    """
    check_links(path, what)
    return Path(os.path.realpath(path))


def followed_links(path: Path) -> list[Path]:
    """The symbolic links resolving `path` follows, in order (at most 40, as Linux)."""
    links: list[Path] = []
    start = path if path.is_absolute() else Path.cwd() / path
    current = Path(start.anchor)
    pending = list(reversed(start.parts[1:]))
    while pending and len(links) < 40:
        part = pending.pop()
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        if not candidate.is_symlink():
            current = candidate
            continue
        links.append(candidate)
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current = Path(target.anchor)
        pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
    return links


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
        path: the file to lock.
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
