"""npm packages installed into the sleap-live cache: the browser runtime a web export
carries (`web_runtime`) and the TF.js packages a TF.js export is verified with (`tfjs`).

Each set is installed once into a folder of its own, `--ignore-scripts` (the files
are copied or loaded, never built: nothing of a package runs at install).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from sleap_live.engines.errors import RuntimeUnavailableError

# Long enough for a slow registry; an install normally takes well under a minute.
NPM_TIMEOUT_S = 600


def npm_install(prefix: Path, packages: Sequence[str], *, needed_for: str, instead: str) -> None:
    """Installs `packages` ("name@version") from npm into `prefix`/node_modules.

    Args:
        prefix: the folder to install into (made if missing).
        packages: what to install, each pinned to a version.
        needed_for: what needs them, for the error when npm is missing ("the web
            export carries onnxruntime-web 1.31.1").
        instead: what the user can do instead, for every error ("set X to ...").

    Raises:
        RuntimeUnavailableError: npm is missing, took over `NPM_TIMEOUT_S`, or failed
            (one line, naming what, and what to do instead).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeUnavailableError(
            f"{needed_for} from npm, and npm is not installed: install Node.js (npm), or {instead}"
        )
    prefix.mkdir(parents=True, exist_ok=True)
    command = [
        npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--ignore-scripts",
        "--no-save", "--loglevel=error", *packages,
    ]  # fmt: skip
    what = f"npm install {' '.join(packages)}"
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeUnavailableError(f"{what} took over {NPM_TIMEOUT_S} s; {instead}") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeUnavailableError(f"{what} failed ({reason}); {instead}")
