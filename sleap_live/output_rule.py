"""The output rule every writer follows, in both layers (the exporters, the stream's
writers): an output is claimed before the work and written whole into place.

An output (a pose file, a video, an exported model, an export folder) is

1. claimed before the writer's work (`claim_output`, where every rule about
   whether an output may be written lives) and resolved (`resolve_output`): not
   followed through a link another user could have planted (`check_links`);
2. written into a fresh private folder (mode 0700, made with ``mkdir``, which
   never follows a link) beside the file it resolves to, pinned by descriptor
   together with that file's folder: nobody else can plant a link in it, and a
   library that writes by name (HDF5, FFmpeg, torch, TensorFlow) is given the
   folder through its descriptor (``/proc/self/fd/N`` on Linux), so renaming
   folders around it cannot redirect the writes (`StagedOutput`, `staged_file`);
3. renamed into place, by descriptor, from the private folder into the pinned
   folder. A rename replaces a link at the destination instead of following it,
   and the output's path is checked again at that moment: a link planted or
   changed since the claim refuses the rename, nothing written through it.

It imports nothing of the package: the engines (the lower layer) and the stream
both import it.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path


class OutputError(OSError):
    """An output path would destroy data or cannot be written; nothing was written."""


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
    # An empty folder, or a link to nothing yet, holds no output to replace.
    if not overwrite and (any(target.iterdir()) if target.is_dir() else target.exists()):
        raise OutputError(f"{path}: {what} exists; give --overwrite to replace it, or another path")
    return target


def resolve_output(path: Path, what: str) -> Path:
    """The file `path` resolves to, not through a link another user could have
    planted (`check_links`): checked at the claim and again at the moment the
    output's files are renamed into place (`StagedOutput`).

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


# The private folders' names end in this (see `stale_staging`).
STAGING_SUFFIX = ".partial"

_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class StagedOutput(contextlib.AbstractContextManager["StagedOutput"]):
    """A claimed output and the private folder its files are written in first.

    Use as a context manager: leaving it without `commit` (an error, a kill)
    removes the private folder and leaves the output as it was.

    Args:
        path: the output (a file, or a folder made at `file()`).
        what: how errors name it (e.g. "-o", "the overlay video").

    Raises:
        OutputError: the rule refuses `path`, or its folder cannot be written.
    """

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        self.path = Path(path)
        self.what = what
        self.target = resolve_output(self.path, what)
        self._parent_fd: int | None = None
        self._fd: int | None = None
        try:
            self._parent_fd = _open_folder(self.target.parent)
            self.name = self._make_private_folder()
            # Never through a link: the name was made by this process a moment ago.
            self._fd = os.open(self.name, _DIRECTORY | _NOFOLLOW, dir_fd=self._parent_fd)
        except OSError as error:
            self.discard()
            raise OutputError(
                f"{self.path}: cannot write {what} in {self.target.parent}: {error.strerror}"
            ) from None
        # Named through its descriptor where the system can (Linux).
        linux = sys.platform.startswith("linux")
        self.folder = Path(f"/proc/self/fd/{self._fd}") if linux else self.target.parent / self.name

    def file(self, name: str | None = None) -> Path:
        """Where to write the staged file `name` (default: the output's own name,
        so its suffix, which some writers pick the format by, is kept)."""
        return self.folder / (name or self.target.name)

    def commit(self, *names: str) -> None:
        """Rename the staged files or folders `names` (default: all staged, the
        output's own name last, so a complete output has its sidecars) into the
        output's folder, in order. Each keeps the mode of what it replaces; a
        folder replaces a folder (an earlier export), which is moved into the
        private folder and removed with it.

        Raises:
            OutputError: the output's path leads elsewhere than at the claim (a
                link planted or changed since), or a staged folder would replace
                something that is not a folder; nothing was renamed over it.
            OSError: a rename failed.
        """
        assert self._fd is not None and self._parent_fd is not None
        if resolve_output(self.path, self.what) != self.target:
            raise OutputError(
                f"{self.path}: {self.what} leads to another file than when the run "
                f"started ({self.target}): a link was planted or changed; not written"
            )
        if not names:
            staged = sorted(os.listdir(self._fd))
            names = (*(n for n in staged if n != self.target.name), self.target.name)
        for name in names:
            if stat.S_ISDIR(os.stat(name, dir_fd=self._fd, follow_symlinks=False).st_mode):
                self._replace_folder(name)
                continue
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=self._fd)
            try:
                _keep_mode(fd, name, self._parent_fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(name, name, src_dir_fd=self._fd, dst_dir_fd=self._parent_fd)
        _fsync(self._parent_fd)
        self.discard()

    def _replace_folder(self, name: str) -> None:
        assert self._fd is not None and self._parent_fd is not None
        try:
            before = os.stat(name, dir_fd=self._parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            before = None
        if before is not None:
            if not stat.S_ISDIR(before.st_mode):
                raise OutputError(f"{self.path}: {self.what} is a folder, and {name} is not one")
            folder = os.open(name, _DIRECTORY | _NOFOLLOW, dir_fd=self._fd)
            try:
                os.fchmod(folder, stat.S_IMODE(before.st_mode))
            finally:
                os.close(folder)
            old = f"{name}.replaced"
            os.rename(name, old, src_dir_fd=self._parent_fd, dst_dir_fd=self._fd)
        # Over a name planted meanwhile (a link, a file) a folder's rename fails.
        os.rename(name, name, src_dir_fd=self._fd, dst_dir_fd=self._parent_fd)

    def discard(self) -> None:
        """Remove the private folder and what was staged in it; idempotent."""
        if self._parent_fd is not None and self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                _remove_tree(self.name, self._parent_fd)
        for fd in (self._fd, self._parent_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._parent_fd = None

    def _make_private_folder(self) -> str:
        assert self._parent_fd is not None
        while True:
            name = f".{self.target.name}.{os.getpid()}.{secrets.token_hex(4)}{STAGING_SUFFIX}"
            try:
                os.mkdir(name, 0o700, dir_fd=self._parent_fd)
            except FileExistsError:
                continue  # planted, or another of ours: another name
            return name

    def __exit__(self, *exc_info: object) -> None:
        self.discard()


@contextlib.contextmanager
def staged_file(path: str | os.PathLike[str], what: str) -> Iterator[Path]:
    """Write one output by the output rule: yields where to write it (a file, or a
    folder to make there) and its sidecars (beside it), all renamed into place
    when the block ends without an error."""
    with StagedOutput(path, what) as staged:
        yield staged.file()
        staged.commit()


def stale_staging(target: Path) -> list[Path]:
    """Private folders of `target` left by a process that died (see `StagedOutput`):
    this user's own folders only, never a link."""
    found = []
    for candidate in target.parent.glob(f"{glob.escape('.' + target.name)}.*{STAGING_SUFFIX}"):
        try:
            info = candidate.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            found.append(candidate)
    return sorted(found)


def remove_stale_staging(target: Path) -> None:
    """Remove `stale_staging(target)`: for the holder of `target`'s lock, whose
    earlier writers are gone."""
    for folder in stale_staging(target):
        shutil.rmtree(folder, ignore_errors=True)


def _open_folder(path: Path) -> int:
    """A descriptor of the folder `path`, also one this user may write but not list
    (a 0733 drop folder: Linux's ``O_PATH``, which then cannot be synced)."""
    try:
        return os.open(path, _DIRECTORY)
    except PermissionError:
        if not hasattr(os, "O_PATH"):
            raise
        return os.open(path, os.O_PATH | _DIRECTORY)


def _remove_tree(name: str, parent_fd: int) -> None:
    """Remove the folder `name` of `parent_fd` and all in it, never through a link
    (``shutil.rmtree``'s ``dir_fd`` needs Python 3.11)."""
    fd = os.open(name, _DIRECTORY | _NOFOLLOW, dir_fd=parent_fd)
    try:
        for entry in list(os.scandir(fd)):
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(entry.name, fd)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _keep_mode(fd: int, name: str, parent_fd: int) -> None:
    """A file replacing `name` keeps its mode; a new one has the umask's."""
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode):
        os.fchmod(fd, stat.S_IMODE(info.st_mode))


def _fsync(fd: int) -> None:
    """Make the renames into a folder durable where its descriptor allows (POSIX,
    not an ``O_PATH`` one; Windows cannot open folders)."""
    if sys.platform == "win32":
        return
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EBADF:  # an O_PATH descriptor (`_open_folder`)
            raise
