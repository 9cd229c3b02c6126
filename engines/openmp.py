"""How idle threads of torch's CPU thread pool wait: asleep, not spinning.

torch's CPU build runs each operator on a GNU OpenMP team of one thread per core
and, by default, a thread that finishes its share spins for a while before it
sleeps. On a machine whose cores are all free that saves a wake-up per operator;
on one where another process holds a core, the spinning threads take the CPU time
the thread still working needs, every operator waits for the slowest of them, and
throughput falls by 3 to 10 times from one run to the next (ONNX Runtime, told not
to spin in `sleap_live.engines.ort_options`, stays steady). `OMP_WAIT_POLICY=PASSIVE`
makes idle threads sleep at once: steady under load, at the price of a wake-up per
operator on an idle machine (see scripts/bench_engines.py `--busy-core`).

OpenMP reads the policy once, when torch's library loads, so it must be in the
environment before the first `import torch`: sleap-live sets it where it is about
to load torch, in `load_runner`, `export_model` and on first use of
`sleap_live.engines.load_inference_model` (a value already set, by the user or in
the shell, is kept); importing sleap-live itself changes nothing. A program that
imports torch before that sets `OMP_WAIT_POLICY=PASSIVE` itself, or keeps torch's
spinning.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

WAIT_POLICY = "OMP_WAIT_POLICY"
PASSIVE = "PASSIVE"


def prefer_passive_wait(
    environ: MutableMapping[str, str] = os.environ,
    modules: Mapping[str, object] = sys.modules,
) -> bool:
    """Sets `OMP_WAIT_POLICY=PASSIVE` unless it is set or torch is already loaded.

    Args:
        environ: the process environment (a dict in tests).
        modules: the loaded modules (a dict in tests).

    Returns:
        Whether this call set it.
    """
    if WAIT_POLICY in environ or "torch" in modules:
        return False
    environ[WAIT_POLICY] = PASSIVE
    return True
