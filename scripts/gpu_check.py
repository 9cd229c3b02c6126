#!/usr/bin/env python
"""Every GPU check of the GPU path in one run, within a time budget (issues #9 and #19),
made for the GPU machine a session is lent now and then (docs/gpu_check.md).

Parts, in order, each with its share of `--budget`. The design card's path comes
first (NVDEC, then the engines on frames on the device, TensorRT and CUDA graphs
first, at 384 and 1024, then the pipeline that joins them), then parity against the
CPU goldens, then the rest; the JSON is written after each, so a run cut short still
leaves the figures of the parts before:

- environment: GPU, driver, CUDA, TF32 flags, and the versions of torch, ONNX
  Runtime (and its providers), TensorRT, PyNvVideoCodec and PyAV.
- clip: a `--large-size` (1024x1024) H.264 yuv420p clip written with PyAV's libx264:
  the test video multi_gray.mkv, edge-padded (two animals).
- decode: NVDEC's frames of the clip against PyAV's, bit for bit; the decode rate
  alone, PyAV (CPU) and NVDEC (into device memory, NV12 converted on the GPU).
- speed: per GPU runner and model type, the engine alone on frames already on the
  device: fps at batch 8 and latency p50/p99 at batch 1, at each of `--sizes`
  (384x384 and 1024x1024). These rows run the fixture weights with their size matcher
  set to that size, so the network sees the whole frame rather than the 168x200
  letterbox the fixture configs ask for.
- pipeline: the recorded pipeline on the clip, batch 8, NVDEC when it can decode it
  (else PyAV, labelled so), with the fastest runner of the speed part, per model
  type with a target; and the live capture-to-pose latency at batch 1 (single instance).
- overlap: the pipeline's per-stage timeline (`stream.bench.timeline_summary`): how
  much of the engine's busy time decoding ran beside it.
- parity: each runner on each model type's test video, against the CPU goldens in
  tests/data/goldens (instance counts, median/max point distance, score differences,
  identities). The runners are `load_runner`'s `ENGINES` on CUDA (`gpu_runners`:
  torch eager and with CUDA graphs, ONNX Runtime's CUDA and TensorRT providers,
  TensorRT, and any engine added there, such as torch-compile); without a GPU, the
  CPU self-checks (ONNX Runtime and torch on the CPU) instead.
- graphs: torch eager against torch with CUDA graphs per model type and size: equal
  poses, and a lower batch-1 time (equal times mean the graphs ran eagerly).

A part whose packages or GPU are missing is skipped, and one line says which and
why. On a machine with a GPU a skip is a failure, unless the machine does not offer
what it needs (`runner_not_offered`: an engine whose runtime has no CUDA build there):
every GPU part must run there. A part that runs out of its budget reports "timeout"
and the run goes on; results are written to `--json` after every part, and a watchdog
ends the process (printing where it was) if anything hangs past the budget.

Run it from a checkout with whatever is installed: without an installed sleap-live
it puts the repository's package layout on sys.path; `--wheel-dir` unpacks the wheels
scripts/gpu_payload.py downloads (PyAV, PyNvVideoCodec, platformdirs, sleap-io) into
a folder of the work directory and imports from there first.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import faulthandler
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import logging
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
GOLDENS_HELPERS = ROOT / "tests" / "engines" / "goldens.py"
CLIP_SOURCE = DATA / "videos" / "multi_gray.mkv"

# Targets of issue #9 on an H100/H200-class GPU: recorded 1024x1024 video, batch >= 8,
# NVDEC included; batch-1 capture-to-pose latency; GPU poses against the CPU path.
TARGET_SIZE = 1024
# Lab sizes the speed part measures at (tests/data/lab_models has models of both).
SPEED_SIZES = (384, TARGET_SIZE)
FPS_TARGETS = {"single_instance": 3000.0, "topdown": 1000.0, "bottomup": 700.0}
LATENCY_TARGET_MS = 2.0
PARITY_MEDIAN_PX = 0.1

# The CPU self-checks: ONNX Runtime (where `onnx` can export; the GPU machine's image
# lacks it) and torch, which also stands in for the GPU runners in `--rehearse`.
CPU_RUNNERS: dict[str, dict[str, Any]] = {
    # The in-memory ONNX exports are not verified: parity against the goldens is the check.
    "onnx-cpu": {"engine": "onnx", "device": "cpu", "verify": False},
    "torch-cpu": {"engine": "torch", "device": "cpu"},
}
REHEARSAL_RUNNER = "torch-cpu"
# Engines of `load_runner` that never run on a GPU.
CPU_ONLY_ENGINES = ("auto", "openvino")
# Engines run on CUDA in more than one way; any other engine is one runner of its own name.
ENGINE_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "torch": {
        "torch-cuda": {"engine": "torch", "device": "cuda"},
        "torch-cuda-graphs": {"engine": "torch", "device": "cuda", "cuda_graphs": True},
    },
    "onnx": {
        "ort-cuda": {"engine": "onnx", "device": "cuda", "verify": False},
        "ort-tensorrt": {
            "engine": "onnx",
            "device": "cuda",
            "verify": False,
            "execution_provider": "tensorrt",
        },
    },
    "tensorrt": {"tensorrt": {"engine": "tensorrt", "device": "cuda", "verify": False}},
}
# Instance slots per frame of the TensorRT runs' top-down graphs.
TENSORRT_SLOTS = 20
# Which runner the pipeline uses when the speed part measured none: most specialised first.
RUNNER_PREFERENCE = ("tensorrt", "ort-tensorrt", "ort-cuda", "torch-cuda-graphs", "torch-cuda")
# The pair whose poses must be equal and whose times must differ (issue #19, defect 2).
EAGER, GRAPHS = "torch-cuda", "torch-cuda-graphs"
# CUDA graphs replay the eager kernels: poses equal to float32 rounding, and at least
# this much faster at batch 1, where launching kernels dominates.
GRAPHS_MAX_PX = 1e-3
GRAPHS_MAX_TIME_RATIO = 0.95


def gpu_runners(engines: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The GPU runners (name -> `load_runner` options) of `load_runner`'s engines: an
    engine added there (`torch-compile`) is checked without editing this script."""
    table: dict[str, dict[str, Any]] = {}
    for engine in engines:
        if engine not in CPU_ONLY_ENGINES:
            table.update(
                ENGINE_VARIANTS.get(engine, {engine: {"engine": engine, "device": "cuda"}})
            )
    return table


def runner_table(engines: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Every runner of the check, CPU self-checks first."""
    return {**CPU_RUNNERS, **gpu_runners(engines)}


# ----------------------------------------------------------------------------- the plan

# Runners whose runtimes the lent machine lacks (its image has onnxruntime's CPU build
# and no TensorRT, and neither fits in the 64 MiB that travels to it): not offered
# there (`runner_not_offered`), so not in its plan.
NOT_ON_LENT_MACHINE = ("ort-cuda", "ort-tensorrt", "tensorrt")


@attrs.frozen
class Scope:
    """Where a runner is measured, when not on every model type and size.

    Attributes:
        parity_cases: model types of its parity rows.
        speed_cases: model types of its speed rows, at the large size alone.
    """

    parity_cases: tuple[str, ...]
    speed_cases: tuple[str, ...]


# torch-compile compiles once per batch shape: over every model type's parity and
# both speed sizes that is 18 compilations, past one command on the lent machine by
# themselves. It is measured where the targets are (the model types with fps targets,
# at the large size) and checked for parity on one model type.
RUNNER_SCOPES = {
    "torch-compile": Scope(parity_cases=("single_instance",), speed_cases=tuple(FPS_TARGETS)),
}

# Estimated seconds on the lent machine, until a lent run's JSON (each row's
# `extra["item_s"]`) measures them: what loading a runner for one model type and frame
# size costs before its first batch (torch-compile: one inductor compilation; the
# TensorRT runners: an engine build; torch with CUDA graphs: the captures), and the
# least one measured figure takes (the windows of fps and latency grow into the time
# the plan leaves).
LOAD_S = {
    "torch-cuda": 2.0,
    "torch-cuda-graphs": 3.0,
    "torch-compile": 30.0,
    "ort-cuda": 4.0,
    "ort-tensorrt": 60.0,
    "tensorrt": 45.0,
}
UNKNOWN_LOAD_S = 30.0  # an engine added to `load_runner` since
FIGURE_S = 1.0
# Parts whose cost is not per runner: the environment (CUDA's start), the 1024x1024
# clip's encoding with libx264, NVDEC's frames against PyAV's and the decode rates.
FIXED_S = {"environment": 5.0, "clip": 10.0, "decode": 6.0}
# What `--wheel-dir` and the imports take before the first part.
SETUP_S = 10.0


@attrs.frozen
class PlanItem:
    """One item of the run and its estimated seconds on the lent machine."""

    part: str
    runner: str
    model: str
    size: str
    seconds: float


def design_first(runners: Sequence[str]) -> list[str]:
    """`runners`, the design card's engines first (`RUNNER_PREFERENCE`'s order)."""
    rank = {name: index for index, name in enumerate(RUNNER_PREFERENCE)}
    return sorted(runners, key=lambda name: rank.get(name, len(rank)))


def in_scope(runner: str, part: str, case: str, size: str, large: str) -> bool:
    """Whether `runner` is measured on `case` at `size` in `part` (`RUNNER_SCOPES`)."""
    scope = RUNNER_SCOPES.get(runner)
    if scope is None:
        return True
    if part == "parity":
        return case in scope.parity_cases
    return case in scope.speed_cases and size == large


def plan(
    runners: Sequence[str], cases: Sequence[str], sizes: Sequence[int], large: int
) -> list[PlanItem]:
    """The items a run takes on a GPU machine with `runners`, in order, with estimates."""
    large_label = f"{large}x{large}"
    items = [
        PlanItem("environment", "-", "-", "-", FIXED_S["environment"]),
        PlanItem("clip", "-", "-", large_label, FIXED_S["clip"]),
        PlanItem("decode", "nvdec", "-", large_label, FIXED_S["decode"]),
    ]
    loaded: set[tuple[str, str, str]] = set()

    def item(part: str, runner: str, case: str, size: str, figures: int) -> PlanItem:
        key = (runner, case, size)
        load = 0.0 if key in loaded else LOAD_S.get(runner, UNKNOWN_LOAD_S)
        loaded.add(key)
        return PlanItem(part, runner, case, size, load + figures * FIGURE_S)

    labels = [f"{side}x{side}" for side in sizes]
    for runner in runners:
        for case in cases:
            for size in labels:
                if in_scope(runner, "speed", case, size, large_label):
                    items.append(item("speed", runner, case, size, 2))
    for case in [case for case in cases if case in FPS_TARGETS]:
        items.append(PlanItem("pipeline", "fastest", case, large_label, 2 * FIGURE_S))
    for runner in runners:
        for case in cases:
            if in_scope(runner, "parity", case, "video", large_label):
                items.append(item("parity", runner, case, "video", 1))
    if EAGER in runners and GRAPHS in runners:
        items += [PlanItem("graphs", GRAPHS, c, size, FIGURE_S) for c in cases for size in labels]
    return items


def plan_line(items: Sequence[PlanItem], budget_s: float) -> tuple[bool, str]:
    """Whether the plan fits `budget_s`, and one line saying so."""
    total = SETUP_S + sum(item.seconds for item in items)
    fits = total <= budget_s
    runners = sorted({item.runner for item in items if item.part == "speed"})
    line = (
        f"plan for the lent GPU machine: {len(items)} items, about {total:.0f} s of device "
        f"time ({', '.join(runners) or 'no GPU runner'}): "
        f"{'fits' if fits else 'OVER'} the {budget_s:.0f} s budget of one 8-minute command"
    )
    return fits, line


PARTS = ("environment", "clip", "decode", "speed", "pipeline", "overlap", "parity", "graphs")
# Shares of the budget; a part's budget is its share of what is left when it starts,
# so time a part does not use goes to the parts after it.
PART_SHARES = {
    "environment": 15,
    "clip": 25,
    "parity": 110,
    "speed": 165,
    "graphs": 10,
    "decode": 35,
    "pipeline": 95,
    "overlap": 5,
}
DEFAULT_BUDGET_S = 420.0  # the whole run, --wheel-dir included: 8 minutes with room to spare
WATCHDOG_GRACE_S = 45.0
MIN_ITEM_S = 3.0  # what each later item of a part is left when an earlier one overruns
WINDOW_SHARE = 0.25  # of an item's fair share, per measurement window (fps, latency)
MAX_WINDOW_S = 4.0
MIN_CALLS = 5
MAX_CALLS = 400
WARMUP_CALLS = 3
BATCH = 8
SPEED_FRAMES = 16
LIVE_FPS = 100.0
MAX_LOOPS = 20
CLIP_FPS = 30
DEFAULT_CLIP_FRAMES = 600
# Without a GPU only the CPU self-checks run: fewer frames keep the run short there.
CPU_ONLY_FRAMES = 48
CPU_ONLY_CLIP_FRAMES = 120

PASS, FAIL, BELOW, SKIP, TIMEOUT, MEASURED = (
    "pass",
    "fail",
    "below target",
    "skip",
    "timeout",
    "measured",
)
FAILING = (FAIL, TIMEOUT)
FPS_FIGURE = "engine fps b8"
LATENCY_FIGURE = "engine latency b1 p50"
SAME_FRAMES_FIGURE = "frames equal to PyAV's"
COMPARED_FRAMES = 120  # of the clip, NVDEC's against PyAV's
TARGETS_NOTE = (
    "speed targets are for an H100/H200, recorded 1024x1024 video, batch >= 8, NVDEC "
    "included; they are reported, not exit failures. Parity (median distance to the CPU "
    "goldens, every frame's instance count and identities) is binding."
)


# ----------------------------------------------------------------------------- records


@attrs.frozen
class Target:
    """A figure's target: `bound` in `unit`, at least (default) or at most.

    `binding` targets (parity) fail the run when missed; the others are reported
    as "below target", since the machine may not be the one the target is for.
    """

    bound: float
    unit: str
    at_most: bool = False
    binding: bool = False

    def met(self, value: float) -> bool:
        if math.isnan(value):
            return False
        return value <= self.bound if self.at_most else value >= self.bound

    def label(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.bound:g} {self.unit}".strip()


@attrs.frozen
class Row:
    """One line of the table (and of the JSON's "rows")."""

    part: str
    runner: str = "-"
    model: str = "-"
    size: str = "-"
    figure: str = "-"
    value: float | str | None = None
    unit: str = ""
    target: Target | None = None
    status: str = MEASURED
    note: str = ""
    extra: dict[str, Any] = attrs.field(factory=dict, eq=False)

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["target"] = None if self.target is None else self.target.label()
        data["binding"] = bool(self.target and self.target.binding)
        return _jsonable(data)


@attrs.frozen
class Skip:
    """A part (or one runner of it) that did not run, and why.

    `excused`: the machine does not offer what it needs (an engine whose runtime has no
    CUDA build there, a CPU self-check whose exporter is missing), so that it did not
    run is no failure even on a GPU machine. Any other skip on a GPU machine is one.
    """

    part: str
    runner: str
    reason: str
    excused: bool = False


def judge(value: float, target: Target | None) -> str:
    """A measured figure's status against its target."""
    if target is None:
        return MEASURED
    if target.met(value):
        return PASS
    return FAIL if target.binding else BELOW


def exit_code(rows: Sequence[Row], missing: Sequence[Skip] = ()) -> int:
    """0 when every part that ran passed (no failure, parity included, and no timeout)
    and nothing that had to run was skipped (`must_have_run`)."""
    return 1 if missing or any(row.status in FAILING for row in rows) else 0


def must_have_run(
    skips: Sequence[Skip], *, gpu: bool, rehearsal: bool, cuda_reason: str | None
) -> list[Skip]:
    """The skips that fail the run. On a machine with a GPU, every one: a GPU part that
    did not run failed, unless the machine does not offer what it needs
    (`Skip.excused`). In a rehearsal on the CPU, every one but those for want of a GPU.
    Elsewhere none: a skip says what this machine cannot check."""
    if not gpu and not rehearsal:
        return []
    needed = [skip for skip in skips if not skip.excused]
    return needed if gpu else [skip for skip in needed if skip.reason != cuda_reason]


def gpu_missing(env: Environment, expected: bool) -> str | None:
    """Why the run must stop at once: a GPU was expected (`--expect-gpu`) and torch sees
    none; None otherwise."""
    if not expected or env.cuda:
        return None
    return f"--expect-gpu: {env.cuda_reason}; no part ran"


# ----------------------------------------------------------------------------- budget


def part_budget(remaining_s: float, part: str, parts_left: Sequence[str]) -> float:
    """`part`'s seconds: its share of what is left, among the parts still to run."""
    total = sum(PART_SHARES[name] for name in parts_left)
    if remaining_s <= 0 or total <= 0:
        return 0.0
    return remaining_s * PART_SHARES[part] / total


def item_budget(
    part_left_s: float, items_left: int, floor_s: float = MIN_ITEM_S
) -> tuple[float, float]:
    """(fair share, hard limit) in seconds for the next of `items_left` items.

    Measurements size their windows from the fair share; the hard limit lets an item
    overrun it (one-time start-up: CUDA, exports, engine builds) while leaving each
    later item `floor_s`.
    """
    if items_left < 1 or part_left_s <= 0:
        return 0.0, 0.0
    fair = part_left_s / items_left
    limit = max(part_left_s - (items_left - 1) * floor_s, min(fair, part_left_s))
    return fair, min(limit, part_left_s)


def window(fair_s: float, most_s: float = MAX_WINDOW_S) -> float:
    """Seconds of one measurement window (fps or latency) within an item's fair share."""
    return max(0.0, min(WINDOW_SHARE * fair_s, most_s))


class BudgetExceeded(KeyboardInterrupt):
    """An item ran past its budget.

    A KeyboardInterrupt so that `Pipeline.run` stops its stages cleanly (it does so on
    Ctrl-C) and no `except Exception` in the code under test swallows it.
    """


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raises `BudgetExceeded` in the main thread once `seconds` have passed.

    Where SIGALRM is missing (Windows) only the measurements' own windows bound the time.
    """
    if seconds <= 0:
        raise BudgetExceeded("no time left in the part's budget")
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise BudgetExceeded(f"over its {seconds:.0f} s budget")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- output


def format_value(row: Row) -> str:
    value = row.value
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if math.isnan(value):
        text = "nan"
    elif value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e6):
        text = f"{value:.2e}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    else:
        text = f"{value:.3g}"
    text = f"{text} {row.unit}".strip()
    if "p99_ms" in row.extra:
        text += f" (p99 {row.extra['p99_ms']:.3g})"
    return text


COLUMNS = ("part", "runner", "model", "size", "figure", "measured", "target", "status", "note")


def table_cells(row: Row) -> tuple[str, ...]:
    target = "-" if row.target is None else row.target.label()
    return (
        row.part,
        row.runner,
        row.model,
        row.size,
        row.figure,
        format_value(row),
        target,
        row.status,
        row.note,
    )


def plain_table(rows: Sequence[Row]) -> str:
    """The table as fixed-width text (when rich is missing)."""
    cells = [COLUMNS, *(table_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS) - 1)]
    lines = []
    for line in cells:
        head = "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=False))
        lines.append(f"{head}  {line[-1]}".rstrip())
    return "\n".join(lines)


def print_table(rows: Sequence[Row], title: str) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print(plain_table(rows))
        return
    table = Table(title=title, show_lines=False)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    styles = {PASS: "green", FAIL: "bold red", TIMEOUT: "red", BELOW: "yellow", SKIP: "dim"}
    for row in rows:
        table.add_row(*table_cells(row), style=styles.get(row.status))
    Console(width=max(160, _terminal_width())).print(table)


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 0


def skip_line(skips: Sequence[Skip], runners_of: Mapping[str, Sequence[str]]) -> str:
    """One line naming every skipped part (or part/runner) and why, grouped by reason.

    A part all of whose runners were skipped for one reason is named alone.
    """
    if not skips:
        return "skipped: nothing"
    names: dict[str, list[str]] = {}
    by_part: dict[str, list[Skip]] = {}
    for skip in skips:
        by_part.setdefault(skip.part, []).append(skip)
    for part, part_skips in by_part.items():
        reasons = {skip.reason for skip in part_skips}
        expected = set(runners_of.get(part, ()))
        skipped = {skip.runner for skip in part_skips}
        whole = len(reasons) == 1 and bool(expected) and skipped >= expected
        for skip in part_skips:
            label = part if whole or skip.runner == "-" else f"{part}/{skip.runner}"
            entry = names.setdefault(skip.reason, [])
            if label not in entry:
                entry.append(label)
    return "skipped: " + "; ".join(f"{', '.join(labels)} ({why})" for why, labels in names.items())


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, (np.floating, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


# ----------------------------------------------------------------------------- set-up


def install_wheels(directory: Path, target: Path) -> dict[str, Any]:
    """Unpacks every wheel in `directory` into `target` (emptied first) and puts it first
    on sys.path and PYTHONPATH, before anything else is imported.

    No pip and no network: the GPU machine has neither for this, and its environment is
    left as it was. A wheel is a zip of what installs into site-packages (binary wheels
    find their libraries relative to themselves), which is all these need.
    """
    wheels = sorted(directory.glob("*.whl"))
    report: dict[str, Any] = {"directory": str(directory), "wheels": [w.name for w in wheels]}
    if not wheels:
        report["result"] = "no .whl files there"
        return report
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
    sys.path.insert(0, str(target))
    # Child processes (torch.compile's workers) see the same packages.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(target), os.environ.get("PYTHONPATH")])
    )
    importlib.invalidate_caches()
    report["result"] = f"unpacked into {target} (on sys.path)"
    return report


def package_tree(directory: Path) -> Path:
    """The package laid out as installed, with links into the repository (as
    scripts/typecheck.py lays it out); put `directory` on sys.path to import it."""
    package = directory / "sleap_live"
    package.mkdir(parents=True, exist_ok=True)
    for entry in (ROOT / "sleap_live").iterdir():
        if entry.name != "__pycache__" and not (package / entry.name).exists():
            (package / entry.name).symlink_to(entry)
    for name in ("engines", "stream"):
        if not (package / name).exists():
            (package / name).symlink_to(ROOT / name)
    return directory


def bootstrap() -> str:
    """Makes `sleap_live` importable; says how."""
    try:
        if importlib.util.find_spec("sleap_live.engines") is not None:
            return "installed"
    except ModuleNotFoundError:
        pass
    tree = package_tree(Path(tempfile.mkdtemp(prefix="gpu_check_pkg_")))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    sys.path.insert(0, str(tree))
    importlib.invalidate_caches()
    return f"repository checkout via {tree} on sys.path"


def known_engines() -> tuple[str, ...]:
    """`load_runner`'s engines (`ENGINES`), or torch's alone where it cannot be imported
    (then every part that loads a runner is skipped with the import error anyway)."""
    try:
        from sleap_live.engines.runners.load import ENGINES
    except Exception:  # an ImportError, or what a broken install raises
        return ("torch",)
    return tuple(ENGINES)


def load_goldens_helpers() -> Any:
    """tests/engines/goldens.py (cases, paths and the comparison), loaded by path."""
    name = "sleap_live_gpu_check_goldens"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, GOLDENS_HELPERS)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# ----------------------------------------------------------------------------- environment


@attrs.frozen
class Environment:
    """What this machine has, and what each part needs that is missing."""

    cuda: bool
    cuda_reason: str | None
    versions: dict[str, str | None]
    providers: tuple[str, ...]
    gpu: dict[str, Any]
    import_errors: dict[str, str]
    libx264: bool
    nvdec_module: bool
    tensorrt_module: bool

    def to_json(self) -> dict[str, Any]:
        return _jsonable(attrs.asdict(self))


DISTRIBUTIONS = {
    "torch": ("torch",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt_cu12", "tensorrt_cu13"),
    "PyNvVideoCodec": ("PyNvVideoCodec", "pynvvideocodec"),
    "av": ("av",),
    "onnx": ("onnx",),
    "numpy": ("numpy",),
    "sleap-io": ("sleap-io",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "triton": ("triton",),
}
# Modules a part imports, and the parts that need them. The engines run without
# sleap_live.stream (which needs PyAV and sleap-io): parity and speed decode the test
# videos with PyAV alone.
MODULES = {
    "av": ("clip", "parity", "speed", "graphs"),
    "sleap_live.engines.runners.load": ("parity", "speed", "graphs", "pipeline"),
    "sleap_live.stream.bench": ("decode", "pipeline"),
}


def distribution_version(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def probe_environment() -> Environment:
    versions = {key: distribution_version(names) for key, names in DISTRIBUTIONS.items()}
    versions["python"] = platform.python_version()
    import_errors: dict[str, str] = {}
    for module in MODULES:
        try:
            importlib.import_module(module)
        except Exception as error:  # an ImportError, or what a broken install raises
            import_errors[module] = one_line(error)
    providers: tuple[str, ...] = ()
    try:
        import onnxruntime

        providers = tuple(onnxruntime.get_available_providers())
    except ImportError:
        pass
    cuda, reason, gpu = _cuda_info(versions["torch"])
    libx264 = False
    with contextlib.suppress(Exception):
        import av

        av.codec.Codec("libx264", "w")
        libx264 = True
    return Environment(
        cuda=cuda,
        cuda_reason=reason,
        versions=versions,
        providers=providers,
        gpu=gpu,
        import_errors=import_errors,
        libx264=libx264,
        nvdec_module=importlib.util.find_spec("PyNvVideoCodec") is not None,
        tensorrt_module=importlib.util.find_spec("tensorrt") is not None,
    )


def _cuda_info(torch_version: str | None) -> tuple[bool, str | None, dict[str, Any]]:
    if torch_version is None:
        return False, "torch is not installed", {}
    import torch

    if not torch.cuda.is_available():
        return False, f"no CUDA GPU: torch {torch.__version__} sees none", {}
    properties = torch.cuda.get_device_properties(0)
    gpu: dict[str, Any] = {
        "name": properties.name,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "memory_gib": round(properties.total_memory / 2**30, 1),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        # TF32 changes convolution results; recorded because parity depends on it.
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "devices": torch.cuda.device_count(),
    }
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = "--query-gpu=driver_version,name"
        smi = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if smi.returncode == 0:
            gpu["driver"] = smi.stdout.splitlines()[0].split(",")[0].strip()
    return True, None, gpu


def runner_unavailable(runner: str, env: Environment) -> str | None:
    """Why `runner` cannot run here, or None."""
    return runner_not_offered(runner, env) or (
        None if runner in CPU_RUNNERS or env.cuda else env.cuda_reason
    )


def runner_not_offered(runner: str, env: Environment) -> str | None:
    """Why this machine's packages cannot run `runner` at all, or None: an engine whose
    runtime has no CUDA build here, or a CPU self-check whose exporter is missing. Such
    a runner not running is no failure, on a GPU machine either (`Skip.excused`)."""
    onnxruntime = env.versions["onnxruntime"]
    if runner == "onnx-cpu":
        if not onnxruntime:
            return "onnxruntime is not installed"
        return None if env.versions["onnx"] else "onnx is not installed (the export needs it)"
    if runner == "torch-cpu":
        return None if env.versions["torch"] else "torch is not installed"
    if runner == "ort-cuda" and "CUDAExecutionProvider" not in env.providers:
        return f"onnxruntime {onnxruntime} has no CUDA provider (pip install onnxruntime-gpu)"
    if runner == "ort-tensorrt" and "TensorrtExecutionProvider" not in env.providers:
        return (
            f"onnxruntime {onnxruntime} has no TensorRT provider "
            "(pip install onnxruntime-gpu tensorrt)"
        )
    if runner == "tensorrt" and not env.tensorrt_module:
        return "TensorRT is not installed (pip install tensorrt)"
    return None


def part_unavailable(part: str, env: Environment) -> str | None:
    """What a part needs that the environment lacks (its runners aside), or None."""
    for module, parts in MODULES.items():
        if part in parts and module in env.import_errors:
            return f"cannot import {module}: {env.import_errors[module]}"
    if part == "clip" and not env.libx264:
        return "PyAV has no libx264 encoder"
    return None


def device_summary(env: Environment) -> str:
    gpu = env.gpu
    if not env.cuda:
        return f"no GPU ({env.cuda_reason})"
    return (
        f"{gpu['name']} (sm {gpu['capability']}, {gpu['memory_gib']} GiB), driver "
        f"{gpu.get('driver', '?')}, CUDA {gpu['cuda_runtime']}, TF32 conv {gpu['tf32_cudnn']}"
    )


def versions_summary(env: Environment) -> str:
    names = ("python", "torch", "onnxruntime", "tensorrt", "PyNvVideoCodec", "av", "sleap-io")
    versions = ", ".join(f"{name} {env.versions[name] or '-'}" for name in names)
    return f"{versions}; ORT providers {', '.join(env.providers) or '-'}"


# ----------------------------------------------------------------------------- frames, models


def graph_trees_thread_row() -> Row:
    """inductor's CUDA graph trees looked up from a thread that did not import them, as
    a pipeline's engine thread does, with this machine's torch: torch 2.11 (the GPU
    image's) fails that lookup (`cudagraph_trees.get_obj`'s TLS assert), and a
    torch-compile runner's `ready_cuda_graph_trees` must make it work. No GPU is needed:
    a tree manager's container is made without touching CUDA."""
    from torch._inductor import cudagraph_trees

    from sleap_live.engines.runners.torch_compile import ready_cuda_graph_trees

    found: dict[str, bool] = {}

    def look_up(key: str) -> None:
        try:
            cudagraph_trees.get_container(0)
            found[key] = True
        except AssertionError:
            found[key] = False

    def engine_thread() -> None:
        look_up("bare")
        ready_cuda_graph_trees()
        look_up("ready")

    thread = threading.Thread(target=engine_thread, name="graph-trees-check")
    thread.start()
    thread.join()
    bare = "works" if found.get("bare") else "fails"
    note = (
        f"torch {distribution_version(['torch'])}: a bare lookup {bare} in a new thread; "
        f"after ready_cuda_graph_trees it {'works' if found.get('ready') else 'fails'}"
    )
    status = PASS if found.get("ready") else FAIL
    return Row(
        "environment", figure="graph trees, new thread", value=bare, status=status, note=note
    )


def size_label(shape: Sequence[int]) -> str:
    return f"{shape[0]}x{shape[1]}"


def pad_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Frames (F, H, W, C) centred in (height, width), edges repeated outwards
    (the animals stay as many as they were; no borders for a model to find)."""
    _, h, w, _ = frames.shape
    if height < h or width < w:
        raise ValueError(f"cannot pad {h}x{w} frames to {height}x{width}")
    top, left = (height - h) // 2, (width - w) // 2
    pad = ((0, 0), (top, height - h - top), (left, width - w - left), (0, 0))
    return np.pad(frames, pad, mode="edge")


def sized_config(text: str, height: int, width: int) -> str:
    """A training_config.yaml's text with its size matcher set to (height, width)."""
    for key, value in (("max_height", height), ("max_width", width)):
        text, count = re.subn(rf"(?m)^(\s+{key}:)\s*\S+\s*$", rf"\g<1> {value}", text)
        if count != 1:
            raise ValueError(f"expected one {key} in the training config, found {count}")
    return text


def sized_model_dir(model: Path, height: int, width: int, work_dir: Path) -> Path:
    """A copy of a model directory whose size matcher targets (height, width)
    (the checkpoint linked, not copied)."""
    target = work_dir / f"models_{height}x{width}" / model.name
    target.mkdir(parents=True, exist_ok=True)
    config = (model / "training_config.yaml").read_text()
    (target / "training_config.yaml").write_text(sized_config(config, height, width))
    checkpoint = target / "best.ckpt"
    if not checkpoint.exists():
        try:
            checkpoint.symlink_to((model / "best.ckpt").resolve())
        except OSError:
            checkpoint.write_bytes((model / "best.ckpt").read_bytes())
    return target


def decode_video(path: Path, limit: int | None = None) -> np.ndarray:
    """The first `limit` frames (all if None) as (F, H, W, C) uint8, decoded as the
    pipeline's file source decodes them: gray formats to one channel, others to rgb24."""
    import av

    images: list[np.ndarray] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        gray = (stream.codec_context.pix_fmt or "").startswith("gray")
        for frame in container.decode(stream):
            if limit is not None and len(images) >= limit:
                break
            image = frame.to_ndarray(format="gray" if gray else "rgb24")
            images.append(image[:, :, None] if gray else image)
    if not images:
        raise ValueError(f"{path}: no frames")
    return np.stack(images)


def on_device(frames: np.ndarray, device: str) -> Any:
    """The frames where a runner reads them in place: a CUDA tensor for GPU runners."""
    if device == "cpu":
        return frames
    import torch

    return torch.from_numpy(np.ascontiguousarray(frames)).to(device)


def write_clip(path: Path, frames: Iterable[np.ndarray], fps: int = CLIP_FPS) -> int:
    """Encodes (H, W, C) uint8 frames as H.264 yuv420p (libx264, crf 20); returns the count."""
    import av

    written = 0
    with av.open(str(path), "w") as container:
        stream: Any = None
        for image in frames:
            if stream is None:
                stream = container.add_stream("libx264", rate=fps)
                stream.pix_fmt = "yuv420p"
                stream.height, stream.width = image.shape[:2]
                stream.options = {"crf": "20", "preset": "veryfast"}
            gray = image.shape[-1] == 1
            frame = av.VideoFrame.from_ndarray(
                np.ascontiguousarray(image[..., 0] if gray else image), "gray" if gray else "rgb24"
            )
            for packet in stream.encode(frame):
                container.mux(packet)
            written += 1
        if stream is not None:
            for packet in stream.encode():
                container.mux(packet)
    return written


# ----------------------------------------------------------------------------- measuring


@attrs.frozen
class Timing:
    frames: int
    seconds: float
    per_call: tuple[float, ...]

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else float("nan")

    def percentile_ms(self, q: float) -> float:
        return 1e3 * float(np.percentile(self.per_call, q)) if self.per_call else float("nan")


def time_calls(
    run: Callable[[Any], object],
    batches: Sequence[Any],
    seconds: float,
    *,
    max_calls: int = MAX_CALLS,
    min_calls: int = MIN_CALLS,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Calls `run` on the batches in turn for `seconds` (at least `min_calls`, at most
    `max_calls` calls); frames per second and the time of each call."""
    per_call: list[float] = []
    frames = 0
    start = clock()
    while len(per_call) < max_calls:
        batch = batches[len(per_call) % len(batches)]
        before = clock()
        run(batch)
        after = clock()
        per_call.append(after - before)
        frames += len(batch)
        if after - start >= seconds and len(per_call) >= min_calls:
            break
    return Timing(frames, clock() - start, tuple(per_call))


def batches_of(frames: Any, size: int, keep_tail: bool = False) -> list[Any]:
    """Consecutive batches of `size` frames; the last, shorter one too with `keep_tail`."""
    stop = len(frames) if keep_tail else max(len(frames) - len(frames) % size, 1)
    return [frames[start : start + size] for start in range(0, stop, size)]


def pose_arrays(poses: Any) -> dict[str, np.ndarray]:
    return {
        "points": poses.points,
        "point_scores": poses.point_scores,
        "instance_scores": poses.instance_scores,
        "identities": poses.identities,
    }


def parity_row(runner: str, model: str, size: str, comparison: Any) -> Row:
    """A parity comparison as a row: the median point distance against its bound;
    every compared frame must have the golden's instance count and identities."""
    errors = np.asarray(comparison.point_errors, float)
    median = float(np.median(errors)) if errors.size else float("nan")
    target = Target(PARITY_MEDIAN_PX, "px", at_most=True, binding=True)
    status = judge(median, target)
    problems = []
    if comparison.count_mismatches:
        problems.append(f"counts differ on {len(comparison.count_mismatches)} frames")
    if comparison.identity_agreement < 1.0:
        problems.append(f"identity agreement {comparison.identity_agreement:.4f}")
    if not errors.size:
        problems.append("no points compared")
    if problems:
        status = FAIL
    extra = {
        "frames": comparison.frames,
        "median_px": median,
        "max_px": float(errors.max()) if errors.size else None,
        "p99_px": float(np.percentile(errors, 99)) if errors.size else None,
        "point_score_max_diff": _max_or_none(comparison.score_errors),
        "instance_score_max_diff": _max_or_none(comparison.instance_score_errors),
        "count_mismatch_frames": list(comparison.count_mismatches),
        "presence_mismatches": comparison.presence_mismatches,
        "identity_agreement": comparison.identity_agreement,
    }
    note = (
        f"{comparison.frames} frames, max {extra['max_px'] or float('nan'):.2g} px, score max "
        f"{extra['point_score_max_diff'] or float('nan'):.2g}, presence mismatches "
        f"{comparison.presence_mismatches}"
    )
    if problems:
        note = "; ".join(problems) + "; " + note
    return Row(
        "parity", runner, model, size, "median px", median, "px", target, status, note, extra
    )


@attrs.frozen
class PoseDifference:
    """How two runners' poses on the same frames differ (same code, so same order)."""

    frames: int
    count_mismatches: int  # frames whose instance counts differ
    presence_mismatches: int  # points found by one side only
    max_px: float  # over points both found
    identical: bool  # every array equal bit for bit (NaN equal to NaN)


def pose_difference(
    first: Sequence[Mapping[str, np.ndarray]], second: Sequence[Mapping[str, np.ndarray]]
) -> PoseDifference:
    if len(first) != len(second):
        raise ValueError(f"{len(first)} frames of poses against {len(second)}")
    counts = presence = 0
    max_px, identical = 0.0, True
    for ours, theirs in zip(first, second, strict=True):
        a, b = np.asarray(ours["points"], float), np.asarray(theirs["points"], float)
        if a.shape != b.shape:
            counts, identical = counts + 1, False
            continue
        identical = identical and all(
            np.array_equal(np.asarray(ours[key]), np.asarray(theirs[key]), equal_nan=True)
            for key in ours
        )
        missing_a, missing_b = np.isnan(a[..., 0]), np.isnan(b[..., 0])
        presence += int(np.sum(missing_a != missing_b))
        both = ~(missing_a | missing_b)
        if both.any():
            max_px = max(max_px, float(np.linalg.norm(a - b, axis=-1)[both].max()))
    return PoseDifference(len(first), counts, presence, max_px, identical)


def graphs_rows(
    case: str,
    size: str,
    difference: PoseDifference,
    eager_ms: float | None,
    graphs_ms: float | None,
) -> list[Row]:
    """CUDA graphs against eager: poses equal (binding), batch-1 time lower (binding:
    equal times mean the graphs were never captured and ran eagerly)."""
    base = Row("graphs", GRAPHS, case, size)
    poses_target = Target(GRAPHS_MAX_PX, "px", at_most=True, binding=True)
    poses = measured(base, "poses vs eager, max px", difference.max_px, "px", poses_target, {})
    problems = []
    if difference.count_mismatches:
        problems.append(f"counts differ on {difference.count_mismatches} frames")
    if difference.presence_mismatches:
        problems.append(f"{difference.presence_mismatches} points found by one side only")
    note = "; ".join(problems) or ("bit for bit" if difference.identical else "within bound")
    poses = attrs.evolve(
        poses,
        status=FAIL if problems else poses.status,
        note=f"{note}, {difference.frames} frames",
        extra=attrs.asdict(difference),
    )
    time_target = Target(GRAPHS_MAX_TIME_RATIO, "", at_most=True, binding=True)
    time_template = attrs.evolve(base, figure="b1 p50 graphs / eager")
    if eager_ms is None or graphs_ms is None:
        missing = EAGER if eager_ms is None else GRAPHS
        timing = attrs.evolve(
            time_template, status=FAIL, note=f"the speed part measured no b1 latency of {missing}"
        )
    else:
        extra = {"eager_ms": eager_ms, "graphs_ms": graphs_ms}
        note = f"eager {eager_ms:.3g} ms, graphs {graphs_ms:.3g} ms"
        ratio = graphs_ms / eager_ms if eager_ms > 0 else float("nan")
        timing = measured(time_template, time_template.figure, ratio, "", time_target, extra, note)
    return [poses, timing]


def _max_or_none(values: Any) -> float | None:
    array = np.asarray(values, float)
    return float(array.max()) if array.size else None


def fastest_runner(
    rows: Sequence[Row], model: str, size: str, candidates: Sequence[str]
) -> str | None:
    """The candidate with the best engine fps for `model` at `size`, else the preferred one."""
    measured = [
        row
        for row in rows
        if row.part == "speed"
        and row.model == model
        and row.size == size
        and row.figure == FPS_FIGURE
        and row.runner in candidates
        and isinstance(row.value, float)
        and math.isfinite(row.value)
    ]
    if measured:
        return max(measured, key=lambda row: float(row.value or 0)).runner
    ranked = [name for name in RUNNER_PREFERENCE if name in candidates]
    return ranked[0] if ranked else (candidates[0] if candidates else None)


def pipeline_loops(fps_estimate: float | None, clip_frames: int, seconds: float) -> int:
    """Plays of the clip for a recorded run of about `seconds`."""
    if not fps_estimate or not math.isfinite(fps_estimate) or clip_frames < 1:
        return 1
    return max(1, min(MAX_LOOPS, math.ceil(seconds * fps_estimate / clip_frames)))


class _Notices(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())
        if message not in self.messages:
            self.messages.append(message)


@contextlib.contextmanager
def captured_notices() -> Iterator[list[str]]:
    """sleap-live's one-line notices (fallbacks, CUDA graphs off, ...) during a block."""
    logger = logging.getLogger("sleap_live")
    handler = _Notices()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


# ----------------------------------------------------------------------------- the run

Item = tuple[Row, Callable[[float], list[Row]]]


class Check:
    """One run of the parts; rows, skips and details accumulate as parts finish."""

    def __init__(
        self,
        args: argparse.Namespace,
        env: Environment,
        setup: dict[str, Any],
        started: float | None = None,
    ) -> None:
        self.args = args
        self.env = env
        self.setup = setup
        self.rows: list[Row] = []
        self.skips: list[Skip] = []
        self.details: dict[str, Any] = {}
        self.parts: dict[str, dict[str, Any]] = {}
        self.runners_of: dict[str, list[str]] = {}
        self.started = time.perf_counter() if started is None else started
        self.goldens = load_goldens_helpers()
        self.cases = [name for name in self.goldens.CASES if name in args.cases]
        self.large = (args.large_size, args.large_size)
        self.large_label = size_label(self.large)
        self.sizes = [(side, side) for side in args.sizes]
        self.table = runner_table(known_engines())
        self.at_target = self.large == (TARGET_SIZE, TARGET_SIZE)
        self.clip: Path | None = None
        self.clip_frames = 0
        self._open: dict[tuple[str, str, tuple[int, int]], Any] = {}
        self._videos: dict[tuple[Path, int | None], np.ndarray] = {}

    # -- bookkeeping

    def remaining(self) -> float:
        return self.args.budget - (time.perf_counter() - self.started)

    def skip(self, part: str, runner: str, reason: str, excused: bool = False) -> None:
        self.skips.append(Skip(part, runner, reason, excused))
        self.rows.append(Row(part, runner, status=SKIP, note=reason))

    @property
    def gpu_runner_names(self) -> list[str]:
        return [name for name in self.table if name not in CPU_RUNNERS]

    @property
    def parity_runner_names(self) -> list[str]:
        """Every runner; on a GPU machine the GPU ones alone (the goldens are the CPU
        path's poses already, and the budget there goes to compiling and measuring)."""
        return self.gpu_runner_names if self.env.cuda else list(self.table)

    def runners_for(self, part: str, runners: Sequence[str]) -> list[str]:
        """The runners that can run here (`--rehearse`: the CPU stand-in in place of the
        GPU ones), with a skip for each of the others."""
        if self.args.rehearse and part != "parity":
            runners = [REHEARSAL_RUNNER]
        self.runners_of[part] = list(runners)
        usable = []
        for runner in runners:
            reason = runner_unavailable(runner, self.env)
            if reason is None:
                usable.append(runner)
            else:
                excused = runner_not_offered(runner, self.env) is not None
                self.skip(part, runner, reason, excused)
        return usable

    def items(self, budget: float, items: Sequence[Item]) -> None:
        """Runs a part's items in turn, each within its limit; an item's template row
        carries its timeout or failure."""
        end = time.perf_counter() + budget
        for index, (template, measure) in enumerate(items):
            fair, limit = item_budget(end - time.perf_counter(), len(items) - index)
            if limit <= 0:
                self.rows.append(attrs.evolve(template, status=TIMEOUT, note="part budget spent"))
                continue
            started = time.perf_counter()
            with captured_notices() as notices:
                try:
                    with time_limit(limit):
                        rows = measure(fair)
                except BudgetExceeded:
                    rows = [attrs.evolve(template, status=TIMEOUT, note=f"over {limit:.0f} s")]
                except Exception as error:  # the item's failure; the run goes on
                    rows = [attrs.evolve(template, status=FAIL, note=one_line(error))]
            # What the item took: the plan's estimates (`LOAD_S`) are checked against it.
            spent = {"item_s": round(time.perf_counter() - started, 2)}
            rows = [attrs.evolve(row, extra={**row.extra, **spent}) for row in rows]
            self.rows.extend(with_notices(row, notices) for row in rows)

    def video(self, case: str, limit: int | None) -> np.ndarray:
        _, path, _, _ = self.goldens.case_paths(case)
        return self.frames_of(path, limit)

    def frames_of(self, path: Path, limit: int | None) -> np.ndarray:
        if (path, limit) not in self._videos:
            self._videos[path, limit] = decode_video(path, limit)
        return self._videos[path, limit]

    def runner(self, name: str, case: str, frame_shape: Sequence[int]) -> Any:
        """A loaded runner for one case at one frame size, kept for the later parts."""
        size = (int(frame_shape[0]), int(frame_shape[1]))
        key = (name, case, size)
        if key not in self._open:
            from sleap_live.engines.runners.load import load_runner

            models, _, _, _ = self.goldens.case_paths(case)
            if size == self.large or size in self.sizes:
                models = [sized_model_dir(m, *size, self.args.work_dir) for m in models]
            options = dict(self.table[name])
            if name == "tensorrt":
                from sleap_live.engines.settings import InferenceSettings

                cache = str(self.args.work_dir / "engines")
                options.update(frame_size=tuple(frame_shape), batch_size=BATCH, engine_cache=cache)
                # TensorRT's top-down graphs have fixed instance slots per frame: far
                # more than the fixtures' two animals, so sleap-nn's uncapped poses.
                options["settings"] = InferenceSettings(max_instances=TENSORRT_SLOTS)
            self._open[key] = load_runner([str(m) for m in models], **options)
        return self._open[key]

    def close(self) -> None:
        for runner in self._open.values():
            with contextlib.suppress(Exception):
                runner.close()
        self._open.clear()

    def window(self, fair: float) -> float:
        return window(fair, self.args.max_window)

    def decode_fps(self, decoder: str) -> float | None:
        """The decode part's rate for `decoder`, if it measured one."""
        for row in self.rows:
            if (row.part, row.runner) == ("decode", decoder) and isinstance(row.value, float):
                return row.value
        return None

    def speed_fps(self, runner: str, case: str) -> float | None:
        for row in self.rows:
            if (row.part, row.runner, row.model, row.size, row.figure) == (
                "speed",
                runner,
                case,
                self.large_label,
                FPS_FIGURE,
            ) and isinstance(row.value, float):
                return row.value
        return None

    # -- parts

    def run_part(self, part: str, parts_left: Sequence[str]) -> None:
        budget = part_budget(self.remaining(), part, parts_left)
        print(f"{part} (budget {budget:.0f} s) ...", flush=True)
        start = time.perf_counter()
        reason = part_unavailable(part, self.env)
        if reason is not None:
            self.skip(part, "-", reason)
        else:
            getattr(self, f"part_{part}")(budget)
        self.parts[part] = {"budget_s": budget, "seconds": time.perf_counter() - start}

    def part_environment(self, budget: float) -> None:
        name = self.env.gpu.get("name", "none") if self.env.cuda else "none"
        note = versions_summary(self.env)
        self.rows.append(Row("environment", figure="GPU", value=name, note=note))
        if self.env.cuda or self.args.rehearse:  # where torch-compile's CUDA graphs may run
            self.rows.append(graph_trees_thread_row())

    def part_clip(self, budget: float) -> None:
        height, width = self.large
        path = self.args.work_dir / f"clip_{height}x{width}.mp4"
        template = Row("clip", size=self.large_label, figure="frames written")

        def measure(fair: float) -> list[Row]:
            source = self.frames_of(CLIP_SOURCE, None)
            # Padded one at a time: 200 padded 1024x1024 frames would hold 200 MB.
            frames = (
                pad_frames(source[i % len(source)][None], height, width)[0]
                for i in range(self.args.clip_frames)
            )
            started = time.perf_counter()
            written = write_clip(path, frames)
            seconds = time.perf_counter() - started
            info = clip_info(path)
            ok = info == {
                "codec": "h264",
                "pix_fmt": "yuv420p",
                "height": height,
                "width": width,
                "frames": written,
            }
            self.clip, self.clip_frames = path, written
            note = (
                f"H.264 yuv420p, {path.stat().st_size / 2**20:.1f} MB, encoded at "
                f"{written / seconds:.0f} fps"
            )
            value, status = float(written), PASS if ok else FAIL
            extra = {"path": str(path), "probe": info}
            return [attrs.evolve(template, value=value, status=status, note=note, extra=extra)]

        self.items(budget, [(template, measure)])

    def part_parity(self, budget: float) -> None:
        work = [
            (Row("parity", runner, case, figure="median px"), self._parity(runner, case))
            for runner in self.runners_for("parity", self.parity_runner_names)
            for case in self.cases
            if in_scope(runner, "parity", case, "video", self.large_label)
        ]
        self.items(budget, work)

    def _parity(self, name: str, case: str) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            _, _, golden_path, _ = self.goldens.case_paths(case)
            frames = self.video(case, self.args.frames)
            runner = self.runner(name, case, frames.shape[1:])
            device_frames = on_device(frames, runner.device)
            ours = [
                pose_arrays(poses)
                for batch in batches_of(device_frames, BATCH, keep_tail=True)
                for poses in runner.run(batch)
            ]
            golden = dict(np.load(golden_path))
            compared = self.goldens.compared_frames(case, len(ours))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of unmatched nodes
                comparison = self.goldens.compare(ours, golden, runner.info.class_names, compared)
            return [parity_row(name, case, size_label(frames.shape[1:]), comparison)]

        return measure

    def part_speed(self, budget: float) -> None:
        work = []
        for runner in self.runners_for("speed", design_first(self.gpu_runner_names)):
            for case in sorted(self.cases, key=lambda case: case not in FPS_TARGETS):
                for size in self.sizes:
                    if not in_scope(runner, "speed", case, size_label(size), self.large_label):
                        continue
                    template = Row("speed", runner, case, size_label(size), FPS_FIGURE)
                    work.append((template, self._speed(runner, case, tuple(size))))
        self.items(budget, work)

    def _speed(self, name: str, case: str, size: tuple[int, ...]) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            frames = self.video(case, self.args.frames)[:SPEED_FRAMES]
            frames = pad_frames(frames, *size[:2])
            runner = self.runner(name, case, frames.shape[1:])
            device_frames = on_device(frames, runner.device)
            eight, single = batches_of(device_frames, BATCH), batches_of(device_frames, 1)
            for batch in [eight[0], single[0]] * WARMUP_CALLS:
                runner.run(batch)
            throughput = time_calls(runner.run, eight, self.window(fair))
            latency = time_calls(runner.run, single, self.window(fair))
            at_target = size == (TARGET_SIZE, TARGET_SIZE)
            fps_target = (
                Target(FPS_TARGETS[case], "fps") if at_target and case in FPS_TARGETS else None
            )
            latency_bound = at_target and case == "single_instance"
            ms_target = Target(LATENCY_TARGET_MS, "ms", at_most=True) if latency_bound else None
            note = "engine alone" + (", frames on the device" if runner.device != "cpu" else "")
            note += "; rehearsal on the CPU" if self.args.rehearse else ""
            p50 = latency.percentile_ms(50)
            fps_extra = {"calls": len(throughput.per_call), "seconds": throughput.seconds}
            ms_extra = {"p99_ms": latency.percentile_ms(99), "calls": len(latency.per_call)}
            base = Row("speed", name, case, size_label(size), note=note)
            return [
                measured(base, FPS_FIGURE, throughput.fps, "fps", fps_target, fps_extra),
                measured(base, LATENCY_FIGURE, p50, "ms", ms_target, ms_extra),
            ]

        return measure

    def part_graphs(self, budget: float) -> None:
        """torch eager against torch with CUDA graphs: equal poses, different times."""
        self.runners_of["graphs"] = [GRAPHS]
        reason = runner_unavailable(GRAPHS, self.env) or runner_unavailable(EAGER, self.env)
        if self.args.rehearse or reason is not None:
            self.skip("graphs", GRAPHS, reason or "CUDA graphs need a GPU (rehearsal)")
            return
        work = [
            (Row("graphs", GRAPHS, case, size_label(size)), self._graphs(case, size))
            for case in self.cases
            for size in self.sizes
        ]
        self.items(budget, work)

    def _graphs(self, case: str, size: tuple[int, int]) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            frames = pad_frames(self.video(case, self.args.frames)[:SPEED_FRAMES], *size)
            poses = {}
            for name in (EAGER, GRAPHS):
                runner = self.runner(name, case, frames.shape[1:])
                device_frames = on_device(frames, runner.device)
                poses[name] = [
                    pose_arrays(pose)
                    for batch in batches_of(device_frames, BATCH)
                    for pose in runner.run(batch)
                ]
            difference = pose_difference(poses[EAGER], poses[GRAPHS])
            eager_ms = self.speed_ms(EAGER, case, size_label(size))
            graphs_ms = self.speed_ms(GRAPHS, case, size_label(size))
            return graphs_rows(case, size_label(size), difference, eager_ms, graphs_ms)

        return measure

    def speed_ms(self, runner: str, case: str, size: str) -> float | None:
        """The speed part's batch-1 latency p50 for one runner, model type and size."""
        for row in self.rows:
            if (row.part, row.runner, row.model, row.size, row.figure) == (
                "speed",
                runner,
                case,
                size,
                LATENCY_FIGURE,
            ) and isinstance(row.value, float):
                return row.value
        return None

    def part_decode(self, budget: float) -> None:
        from sleap_live.stream.sources.file import FileSource
        from sleap_live.stream.sources.nvdec import NvdecSource, nvdec_unavailable, probe

        self.runners_of["decode"] = ["pyav", "nvdec"]
        clip = self.clip
        if clip is None:
            self.skip("decode", "-", "no clip (the clip part did not write one)")
            return
        openers: dict[str, Callable[[], Any]] = {"pyav": lambda: FileSource(clip)}
        # Without a GPU, for want of it (NVDEC's own reason would say the same otherwise).
        reason = nvdec_unavailable(probe(clip)) if self.env.cuda else self.env.cuda_reason
        if reason is None:
            openers["nvdec"] = lambda: NvdecSource(clip)
        else:
            self.skip("decode", "nvdec", reason)
        work: list[Item] = []
        if reason is None:
            template = Row("decode", "nvdec", size=self.large_label, figure=SAME_FRAMES_FIGURE)
            stop = min(self.clip_frames, COMPARED_FRAMES)
            work.append((template, self._same_frames(template, clip, stop)))
        for decoder, opener in openers.items():
            template = Row("decode", decoder, size=self.large_label, figure="decode fps")
            work.append((template, self._decode(template, opener)))
        self.items(budget, work)

    def _same_frames(self, template: Row, clip: Path, stop: int) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            from sleap_live.stream.sources.file import FileSource
            from sleap_live.stream.sources.nvdec import NvdecSource

            with NvdecSource(clip, stop=stop) as nvdec, FileSource(clip, stop=stop) as pyav:
                ours = (frame.image.cpu().numpy() for frame in nvdec)
                theirs = (frame.image for frame in pyav)
                comparison = frame_comparison(ours, theirs)
            return [same_frames_row(template, comparison)]

        return measure

    def _decode(self, template: Row, opener: Callable[[], Any]) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            frames, seconds = decode_rate(opener, self.window(fair))
            note = "NV12 -> RGB on the GPU included" if template.runner == "nvdec" else "on the CPU"
            extra = {"frames": frames, "seconds": seconds}
            return [measured(template, template.figure, frames / seconds, "fps", None, extra, note)]

        return measure

    def part_pipeline(self, budget: float) -> None:
        from sleap_live.stream.sources.nvdec import nvdec_unavailable, probe

        if self.clip is None:
            self.skip("pipeline", "-", "no clip (the clip part did not write one)")
            return
        candidates = [REHEARSAL_RUNNER] if self.args.rehearse else self.gpu_runner_names
        runners = [name for name in candidates if runner_unavailable(name, self.env) is None]
        if not runners:
            self.skip("pipeline", "-", runner_unavailable(candidates[0], self.env) or "")
            return
        decoder = "nvdec" if nvdec_unavailable(probe(self.clip)) is None else "pyav"
        work: list[Item] = []
        for case in [case for case in self.cases if case in FPS_TARGETS]:
            runner = fastest_runner(self.rows, case, self.large_label, runners)
            assert runner is not None
            recorded = Row(
                "pipeline", runner, case, self.large_label, f"pipeline fps b8 ({decoder})"
            )
            work.append((recorded, self._recorded(recorded, decoder)))
            if case == "single_instance":
                live = attrs.evolve(recorded, figure="capture-to-pose b1 p50 (pyav replay)")
                work.append((live, self._live(live)))
        self.items(budget, work)

    def _warm_runner(self, name: str, case: str) -> Any:
        """The large-size runner of the speed part, warmed on the clip's own frames."""
        assert self.clip is not None
        frames = self.frames_of(self.clip, 2 * BATCH)
        runner = self.runner(name, case, frames.shape[1:])
        for batch in [*batches_of(frames, BATCH), frames[:1]]:
            runner.run(batch)
        return runner

    def _recorded(self, template: Row, decoder: str) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            from sleap_live.stream.bench import bench_recorded

            assert self.clip is not None
            runner = self._warm_runner(template.runner, template.model)
            estimates = [self.speed_fps(template.runner, template.model), self.decode_fps(decoder)]
            known = [fps for fps in estimates if fps is not None]
            estimate = min(known) if known else None
            loops = pipeline_loops(estimate, self.clip_frames, 2 * self.window(fair))
            result = bench_recorded(runner, self.clip, BATCH, self.clip_frames, loops, decoder)
            timeline = {"runner": template.runner, "decoder": decoder, **result.pop("timeline")}
            self.details.setdefault("timelines", {})[template.model] = timeline
            target = Target(FPS_TARGETS[template.model], "fps") if self.at_target else None
            note = f"recorded, {result['frames']} frames ({loops} loops)"
            note += "" if decoder == "nvdec" else "; PyAV decode: NVDEC unavailable"
            fps = float(result["fps"])
            return [measured(template, template.figure, fps, "fps", target, result, note)]

        return measure

    def _live(self, template: Row) -> Callable[[float], list[Row]]:
        def measure(fair: float) -> list[Row]:
            from sleap_live.stream.bench import bench_live

            assert self.clip is not None
            runner = self._warm_runner(template.runner, template.model)
            limit = max(MIN_CALLS, min(self.clip_frames, int(2 * self.window(fair) * LIVE_FPS)))
            result = bench_live(runner, self.clip, LIVE_FPS, limit)
            target = Target(LATENCY_TARGET_MS, "ms", at_most=True) if self.at_target else None
            note = (
                f"live, PyAV replay at {LIVE_FPS:g} fps, {result['frames']} frames, engine p50 "
                f"{result['engine_ms_p50']:.3g} ms, dropped {result['dropped']}"
            )
            extra = {**result, "p99_ms": result["latency_ms_p99"]}
            p50 = float(result["latency_ms_p50"])
            return [measured(template, template.figure, p50, "ms", target, extra, note)]

        return measure

    def part_overlap(self, budget: float) -> None:
        timelines = self.details.get("timelines", {})
        if not timelines:
            self.skip("overlap", "-", "no pipeline run to take the timeline of")
            return
        case = "single_instance" if "single_instance" in timelines else next(iter(timelines))
        timeline = timelines[case]
        base = Row("overlap", timeline["runner"], case, self.large_label)
        note = f"{timeline['decoder']} decode; share of the engine's busy time"
        self.rows.append(
            measured(
                base, "decode during engine", timeline["decode_during_engine"], "", None, {}, note
            )
        )
        for stage, share in timeline["busy"].items():
            note = f"share of the {timeline['span_ms']:.0f} ms run"
            self.rows.append(measured(base, f"busy {stage}", share, "", None, {}, note))

    # -- report

    def report(self, code: int | None = None) -> dict[str, Any]:
        args = self.args
        settings = {
            "cases": self.cases,
            "frames": args.frames,
            "large_size": args.large_size,
            "sizes": args.sizes,
            "clip_frames": args.clip_frames,
            "rehearse": args.rehearse,
        }
        report = {
            "script": "scripts/gpu_check.py",
            "seconds": time.perf_counter() - self.started,
            "budget_s": args.budget,
            "settings": settings,
            "setup": self.setup,
            "environment": self.env.to_json(),
            "targets": {
                "note": TARGETS_NOTE,
                "fps_b8_1024_nvdec": FPS_TARGETS,
                "latency_ms_p50_single_instance": LATENCY_TARGET_MS,
                "parity_median_px": PARITY_MEDIAN_PX,
            },
            "parts": self.parts,
            "rows": [row.to_json() for row in self.rows],
            "skipped": [attrs.asdict(skip) for skip in self.skips],
            "skip_line": skip_line(self.skips, self.runners_of),
            "runners": self.table,
            "details": self.details,
            "exit_code": code,
        }
        return _jsonable(report)


def measured(
    template: Row,
    figure: str,
    value: float,
    unit: str,
    target: Target | None,
    extra: dict[str, Any],
    note: str | None = None,
) -> Row:
    """`template` with a measured figure, judged against its target."""
    value = float(value)
    return attrs.evolve(
        template,
        figure=figure,
        value=value,
        unit=unit,
        target=target,
        status=judge(value, target),
        extra=extra,
        note=template.note if note is None else note,
    )


def with_notices(row: Row, notices: Sequence[str]) -> Row:
    """The row with sleap-live's notices during its item (the first in its note)."""
    if not notices:
        return row
    note = "; ".join(filter(None, [row.note, notices[0][:160]]))
    return attrs.evolve(row, note=note, extra={**row.extra, "notices": list(notices)})


def clip_info(path: Path) -> dict[str, Any]:
    """Codec, pixel format, size and frame count of a clip, as PyAV reads them."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        context = stream.codec_context
        frames = stream.frames or sum(1 for _ in container.decode(stream))
        return {
            "codec": context.name,
            "pix_fmt": context.pix_fmt,
            "height": context.height,
            "width": context.width,
            "frames": frames,
        }


@attrs.frozen
class FrameComparison:
    """Two decoders' frames of one clip, compared bit for bit."""

    frames: int  # compared: as many as the shorter side gave
    lengths: tuple[int, int]
    different: tuple[int, ...]  # indices of frames not equal bit for bit
    max_difference: int  # largest absolute pixel difference
    shapes_differ: bool


def frame_comparison(ours: Iterable[Any], theirs: Iterable[Any]) -> FrameComparison:
    """Compares frames (uint8 arrays) pairwise and bit for bit."""
    different: list[int] = []
    mine_count = their_count = 0
    largest, shapes_differ = 0, False
    sentinel = object()
    for index, (mine, other) in enumerate(itertools.zip_longest(ours, theirs, fillvalue=sentinel)):
        if mine is sentinel or other is sentinel:
            their_count += other is not sentinel
            mine_count += mine is not sentinel
            continue
        mine_count, their_count = mine_count + 1, their_count + 1
        a, b = np.asarray(mine), np.asarray(other)
        if a.shape != b.shape:
            shapes_differ = True
            different.append(index)
        elif not np.array_equal(a, b):
            different.append(index)
            largest = max(largest, int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max()))
    compared = min(mine_count, their_count)
    return FrameComparison(
        compared, (mine_count, their_count), tuple(different), largest, shapes_differ
    )


def same_frames_row(template: Row, comparison: FrameComparison) -> Row:
    """NVDEC's frames against PyAV's: every one equal bit for bit, as many on each side."""
    equal = comparison.frames - len(comparison.different)
    problems = []
    if comparison.lengths[0] != comparison.lengths[1]:
        problems.append(f"NVDEC gave {comparison.lengths[0]} frames, PyAV {comparison.lengths[1]}")
    if comparison.shapes_differ:
        problems.append("frame shapes differ")
    if comparison.different:
        first = ", ".join(map(str, comparison.different[:5]))
        problems.append(
            f"{len(comparison.different)} frames differ (first {first}; "
            f"max difference {comparison.max_difference})"
        )
    if not comparison.frames:
        problems.append("no frames compared")
    target = Target(comparison.frames, "frames", binding=True)
    note = "; ".join(problems) or f"all {comparison.frames} equal bit for bit"
    return attrs.evolve(
        template,
        value=float(equal),
        unit="frames",
        target=target,
        status=FAIL if problems else PASS,
        note=note,
        extra=attrs.asdict(comparison),
    )


def decode_rate(opener: Callable[[], Any], seconds: float) -> tuple[int, float]:
    """Frames a source yields in about `seconds` (reopened at its end), and the time taken."""
    frames, start = 0, time.perf_counter()
    while True:
        before = frames
        with opener() as source:
            for _ in source:
                frames += 1
                if time.perf_counter() - start >= seconds and frames >= MIN_CALLS:
                    break
        elapsed = time.perf_counter() - start
        if frames == before:
            raise ValueError("the source yielded no frames")
        if elapsed >= seconds and frames >= MIN_CALLS:
            return frames, elapsed


# ----------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_check.py",
        description=(__doc__ or "").split("\n\n")[0],
        epilog=(
            "Targets (H100/H200, recorded 1024x1024 video, batch >= 8, NVDEC included): "
            "single-instance >= 3000 fps, top-down (2 animals) >= 1000 fps, bottom-up >= 700 "
            "fps; batch-1 capture-to-pose latency <= 2 ms p50 (single instance); GPU poses "
            "within 0.1 px median of the CPU path. Every figure is printed beside its target. "
            "Speed below target is reported as 'below target' and does not fail the run (the "
            "machine may not be the one the targets are for); parity out of bounds does. "
            "Exit status: 0 when every part that could run passed, 1 when a part failed or "
            "ran out of its budget."
        ),
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("gpu_check.json"),
        metavar="PATH",
        help="where to write every result (default: gpu_check.json)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help=f"seconds for the whole run, --wheel-dir included (default {DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument(
        "--wheel-dir",
        type=Path,
        metavar="DIR",
        help="unpack the wheels in DIR (scripts/gpu_payload.py's build/gpu_payload) into "
        "WORK_DIR/payload and import from there first; no pip, no network",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=ROOT / "build" / "gpu_check",
        metavar="DIR",
        help="clip, resized model configs, engine caches",
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        metavar="LIST",
        help=f"comma-separated parts to run (default all: {','.join(PARTS)})",
    )
    parser.add_argument(
        "--cases",
        default=None,
        metavar="LIST",
        help="comma-separated model types (default: all the goldens')",
    )
    parser.add_argument(
        "--frames",
        type=int,
        default=None,
        metavar="N",
        help=f"first N frames of each test video (default: all, {CPU_ONLY_FRAMES} without a GPU)",
    )
    parser.add_argument(
        "--clip-frames",
        type=int,
        default=None,
        metavar="N",
        help=f"frames of the generated clip (default {DEFAULT_CLIP_FRAMES}, "
        f"{CPU_ONLY_CLIP_FRAMES} without a GPU)",
    )
    parser.add_argument(
        "--large-size",
        type=int,
        default=TARGET_SIZE,
        metavar="N",
        help=f"side of the large frames and the clip (default {TARGET_SIZE})",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, SPEED_SIZES)),
        metavar="LIST",
        help="comma-separated sides of the square frames the speed and graphs parts "
        f"measure at (default {','.join(map(str, SPEED_SIZES))})",
    )
    parser.add_argument(
        "--max-window",
        type=float,
        default=MAX_WINDOW_S,
        metavar="SECONDS",
        help=f"longest measurement window (fps, latency, decode; default {MAX_WINDOW_S:g})",
    )
    parser.add_argument(
        "--expect-gpu",
        action="store_true",
        help="this machine was lent for its GPU: exit 1 at once, before any part, when "
        "torch sees no CUDA device (a driver or torch mismatch would otherwise turn every "
        "GPU part into a skip that does not count)",
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run the GPU parts with ONNX Runtime on the CPU instead, to check "
        "this script end to end before spending GPU time (CPU figures)",
    )
    args = parser.parse_args(argv)
    args.parts = [part for part in args.parts.split(",") if part]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)} (known: {', '.join(PARTS)})")
    if args.cases is not None:
        args.cases = [case for case in args.cases.split(",") if case]
    try:
        args.sizes = [int(side) for side in args.sizes.split(",") if side]
    except ValueError:
        parser.error(f"--sizes must be whole numbers separated by commas; got {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 64:
        parser.error("--sizes needs at least one side, each at least 64")
    if args.frames is not None and args.frames < BATCH:
        parser.error(f"--frames must be at least {BATCH}")
    if args.clip_frames is not None and args.clip_frames < BATCH:
        parser.error(f"--clip-frames must be at least {BATCH}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    faulthandler.dump_traceback_later(args.budget + WATCHDOG_GRACE_S, exit=True)
    setup: dict[str, Any] = {}
    if args.wheel_dir is not None:
        setup["wheels"] = install_wheels(args.wheel_dir, args.work_dir / "payload")
    setup["sleap_live"] = bootstrap()
    env = probe_environment()
    missing_gpu = gpu_missing(env, args.expect_gpu)
    if missing_gpu is not None:
        print(f"device: {device_summary(env)}\nversions: {versions_summary(env)}")
        print(f"FAILED: {missing_gpu}", flush=True)
        report = {"script": "scripts/gpu_check.py", "setup": setup, "exit_code": 1}
        _write_json(args.json, {**report, "environment": env.to_json(), "failed": missing_gpu})
        faulthandler.cancel_dump_traceback_later()
        return 1
    goldens = load_goldens_helpers()
    known = list(goldens.CASES)
    args.cases = known if args.cases is None else args.cases
    if set(args.cases) - set(known):
        print(f"unknown cases {sorted(set(args.cases) - set(known))} (known: {known})")
        return 2
    if args.frames is None and not env.cuda:
        args.frames = CPU_ONLY_FRAMES
    if args.clip_frames is None:
        args.clip_frames = DEFAULT_CLIP_FRAMES if env.cuda else CPU_ONLY_CLIP_FRAMES
    args.work_dir.mkdir(parents=True, exist_ok=True)
    check = Check(args, env, setup, started)
    print(f"device: {device_summary(env)}\nversions: {versions_summary(env)}", flush=True)
    items = lent_plan(args, env, known)
    fits, line = plan_line(items, args.budget if env.cuda else DEFAULT_BUDGET_S)
    setup["plan"] = {"items": len(items), "line": line, "fits": fits}
    print(line, flush=True)
    try:
        selected = [part for part in PARTS if part in args.parts]
        for index, part in enumerate(selected):
            check.run_part(part, selected[index:])
            _write_json(args.json, check.report())
    finally:
        check.close()
    missing = must_have_run(
        check.skips, gpu=env.cuda, rehearsal=args.rehearse, cuda_reason=env.cuda_reason
    )
    code = exit_code(check.rows, missing)
    if not fits and (env.cuda or args.rehearse):
        code = 1
        print(f"FAILED: {line}")
    title = f"gpu_check on {device_summary(env)}"
    print_table(check.rows, title)
    print(skip_line(check.skips, check.runners_of))
    if missing:
        names = ", ".join(f"{skip.part}/{skip.runner}" for skip in missing)
        where = "on a GPU machine every GPU part" if env.cuda else "in a rehearsal every CPU part"
        print(f"FAILED: {where} must run; these did not: {names}")
    _write_json(args.json, check.report(code))
    faulthandler.cancel_dump_traceback_later()
    return code


def lent_plan(args: argparse.Namespace, env: Environment, cases: Sequence[str]) -> list[PlanItem]:
    """The plan of this run where it has a GPU; elsewhere that of the lent machine's
    command (every model type, the default sizes, the runners offered there)."""
    runners = gpu_runners(known_engines())
    if env.cuda and not args.rehearse:
        usable = [name for name in runners if runner_unavailable(name, env) is None]
        return plan(usable, args.cases, args.sizes, args.large_size)
    offered = [name for name in runners if name not in NOT_ON_LENT_MACHINE]
    return plan(offered, cases, SPEED_SIZES, TARGET_SIZE)


def _write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".partial")
    temporary.write_text(json.dumps(report, indent=1))
    temporary.replace(path)


if __name__ == "__main__":
    sys.exit(main())
