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
    """Run `action()` in a forked child that has become `user`."""
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
