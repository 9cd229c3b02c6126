"""A real second user, and a shared sticky folder, for the tests of links another
user could plant (issues #20, #36). Acting as that user needs root."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def other_user() -> tuple[int, int]:
    """(uid, gid) of a real second user: `nobody`, or one made with useradd."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("planting another user's link needs root (to act as that user)")
    for name in ("nobody", "sleap-live-other"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    made = subprocess.run(["useradd", "-M", "sleap-live-other"], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"no second user and useradd failed: {made.stderr.decode().strip()}")
    entry = pwd.getpwnam("sleap-live-other")
    return entry.pw_uid, entry.pw_gid


def as_user(user: tuple[int, int], action) -> None:
    """Run `action()` in a forked child that has become `user`; only while this process
    runs no other thread (else `shell_as_user`)."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
            action()
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.fixture
def shared_folder():
    """A world-writable sticky folder (like /tmp) that every user can reach."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="sleap-live-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def shell_as_user(user: tuple[int, int], script: str, *args: str) -> None:
    """Run the shell `script` (its arguments `$1`, `$2`...) in a new process that is
    `user`, whatever it exits with.

    Nothing of this process runs in the child (`subprocess` execs the shell at once),
    so it is safe while other threads run, unlike `as_user`: a forked Python child
    frees the other threads' objects, and freeing a PyAV frame converter whose slice
    threads wait on it hangs that child (PyAV 18.1.1).
    """
    subprocess.run(
        ["sh", "-c", script, "sh", *args],
        user=user[0],
        group=user[1],
        extra_groups=[],
        check=False,
        capture_output=True,
    )
