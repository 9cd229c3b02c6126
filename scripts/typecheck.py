"""Type-checks the package with mypy, as CI does: `python scripts/typecheck.py`.

`sleap_live` is a namespace package whose parts live in engines/, stream/ and
sleap_live/ (see `package-dir` in pyproject.toml). mypy cannot follow that mapping,
so this script lays the package out as it is installed, with symlinks in a
temporary folder, and checks it there; findings name the repository's own files.
Extra arguments go to mypy.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = {"engines": ROOT / "engines", "stream": ROOT / "stream"}


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="sleap-live-typecheck-") as tree:
        package = Path(tree) / "sleap_live"
        package.mkdir()
        for entry in (ROOT / "sleap_live").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for name, folder in PARTS.items():
            (package / name).symlink_to(folder)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "-p",
                "sleap_live",
                *argv,
            ],
            cwd=tree,
            capture_output=True,
            text=True,
            env={"MYPYPATH": tree, **_environment()},
        )
    output = result.stdout.replace("sleap_live/engines/", "engines/").replace(
        "sleap_live/stream/", "stream/"
    )
    sys.stdout.write(output)
    sys.stderr.write(result.stderr)
    return result.returncode


def _environment() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "MYPYPATH"}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
