"""torch's OpenMP threads sleep when idle: `OMP_WAIT_POLICY=PASSIVE` is set before torch loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sleap_live.engines.openmp import PASSIVE, WAIT_POLICY, prefer_passive_wait

MODEL = Path(__file__).parents[1] / "data" / "models" / "single_instance"
# Generous upper bound for one interpreter, only so that a hang fails the test.
HANG_TIMEOUT_S = 300

# A fresh interpreter loading a torch runner the way a user would: the policy in
# force when torch loaded, and whether sleap-live's import left torch unloaded.
LOAD_TORCH_RUNNER = """
import os, sys
import sleap_live.engines
light = "torch" not in sys.modules
from sleap_live.engines.runners.load import load_runner
runner = load_runner(sys.argv[1], engine="torch", device="cpu")
print(type(runner).__name__, os.environ.get("OMP_WAIT_POLICY"), light)
"""


def test_sets_passive_before_torch_loads():
    environ: dict[str, str] = {}
    assert prefer_passive_wait(environ, modules={})
    assert environ == {WAIT_POLICY: PASSIVE}


def test_keeps_a_policy_already_set():
    environ = {WAIT_POLICY: "ACTIVE"}
    assert not prefer_passive_wait(environ, modules={})
    assert environ == {WAIT_POLICY: "ACTIVE"}


def test_leaves_the_environment_once_torch_is_loaded():
    # OpenMP read its settings when torch loaded: setting one now would only mislead.
    environ: dict[str, str] = {}
    assert not prefer_passive_wait(environ, modules={"torch": object()})
    assert environ == {}


def _load_torch_runner(environ: dict[str, str]) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOAD_TORCH_RUNNER, str(MODEL)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_torch_runner_loads_with_passive_threads():
    environ = {k: v for k, v in os.environ.items() if k != WAIT_POLICY}
    assert _load_torch_runner(environ) == ["TorchRunner", PASSIVE, "True"]


def test_torch_runner_keeps_the_users_policy():
    environ = {**os.environ, WAIT_POLICY: "ACTIVE"}
    assert _load_torch_runner(environ) == ["TorchRunner", "ACTIVE", "True"]
