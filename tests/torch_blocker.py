"""Run a module or code as on a host where torch is not installed.

    python tests/torch_blocker.py -m MODULE [ARG ...]   # like `python -m MODULE ARG ...`
    python tests/torch_blocker.py -c CODE [ARG ...]     # like `python -c CODE ARG ...`

A finder first on `sys.meta_path` makes every import of `torch` or `torch.*` raise
`ModuleNotFoundError`, exactly what such an import raises where torch is missing,
so code that probes for torch behaves as it would there. Each attempt writes
`BLOCKED` and the stack that reached it to stderr: tests count the attempts, and a
failing run shows which import chain asked for torch.
"""

from __future__ import annotations

import importlib.abc
import runpy
import sys
import traceback

BLOCKED = "torch_blocker: blocked import of"


class TorchBlocker(importlib.abc.MetaPathFinder):
    """Refuses torch and its submodules; leaves every other import to the next finder."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            stack = "".join(traceback.format_stack()[:-1])
            sys.stderr.write(f"{BLOCKED} {name!r} from:\n{stack}")
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in ("-m", "-c"):
        raise SystemExit(f"usage: {__file__} -m MODULE [ARG ...] | -c CODE [ARG ...]")
    mode, target, *args = argv
    # This file's folder (tests/) would otherwise be first on sys.path, where
    # `python -m` or `python -c` would have the current directory.
    sys.path[0] = ""
    sys.meta_path.insert(0, TorchBlocker())
    if mode == "-m":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *args]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main(sys.argv[1:])
