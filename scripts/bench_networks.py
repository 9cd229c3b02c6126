"""A model's network alone in ONNX Runtime against torch, eager and compiled, on the CPU.

    python scripts/bench_networks.py MODEL_DIR [MODEL_DIR ...] [--size 384x384]
        [--batch-size 4] [--repeats 7] [--no-compile] [--json PATH]

Is there a faster fp32 backend for sleap-nn's networks than the ONNX Runtime sessions the
CPU engine runs? For each model directory, its network alone (no pre- or
post-processing) runs on one batch of `--size` frames made by sleap-nn's preprocessing,
in four ways, alternating, in one process:

- ONNX Runtime, exported and run with the CPU engine's session options;
- torch eager;
- torch eager with channels-last tensors (oneDNN's preferred layout);
- `torch.compile` (inductor) with channels-last tensors (`--no-compile` leaves it out).

A top-down model's centered-instance network runs on crops of its crop size, one per
frame. The table gives each backend's median milliseconds per frame and its time over
ONNX Runtime's (under 1: faster). Frames are random: a network's cost does not depend on
what it sees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_prepost import Heads, bare_session, crop_network_input, network_input_of, parse_size
from rich.console import Console
from rich.table import Table

from sleap_live.engines.errors import EngineError
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.load.dirs import read_model_dir

ONNX_RUNTIME = "ONNX Runtime"


def backends(
    model_dir: Path, size: tuple[int, int], batch: int, compile_too: bool
) -> dict[str, Callable[[], Any]]:
    """One call per backend, each running the network once on the same batch."""
    spec = read_model_dir(model_dir)
    height, width = size
    crops = spec.model_type == "centered_instance"
    if crops:
        height = width = spec.preprocess.crop_size
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (batch, height, width, spec.in_channels), dtype=np.uint8)
    image = crop_network_input(spec, frames) if crops else network_input_of(spec, frames)
    session = bare_session(load_model_network(spec), image, None)
    feed = {"x": image.numpy()}
    eager = Heads(load_model_network(spec)).eval()
    last = Heads(load_model_network(spec)).eval().to(memory_format=torch.channels_last)
    image_last = image.contiguous(memory_format=torch.channels_last)

    def inference(module: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Callable[[], Any]:
        def run() -> Any:
            with torch.inference_mode():
                return module(x)

        return run

    runs = {
        ONNX_RUNTIME: lambda: session.run(None, feed),
        "torch eager": inference(eager, image),
        "torch eager, channels-last": inference(last, image_last),
    }
    if compile_too:
        runs["torch.compile, channels-last"] = inference(torch.compile(last), image_last)
    return runs


def measure(
    runs: dict[str, Callable[[], Any]], batch: int, repeats: int
) -> dict[str, dict[str, Any]]:
    """Median ms per frame of each backend, alternating, after two untimed calls each."""
    for run in runs.values():
        run()
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    reference = statistics.median(times[ONNX_RUNTIME])
    return {
        name: {
            "ms_per_frame": statistics.median(values) * 1000 / batch,
            "over_onnx_runtime": statistics.median(values) / reference,
            "runs_ms": [value * 1000 for value in values],
        }
        for name, values in times.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="sleap-nn model directories")
    parser.add_argument("--size", type=parse_size, default=(384, 384), help="WIDTHxHEIGHT")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1:
        parser.error("--batch-size and --repeats take a positive number")
    for model in args.models:  # every one checked before minutes of timing
        if not model.is_dir():
            parser.error(f"{model}: not a model directory")
        try:
            read_model_dir(model)
        except EngineError as error:
            parser.error(str(error))
    results = {}
    for model in args.models:
        runs = backends(model, args.size, args.batch_size, not args.no_compile)
        results[str(model)] = measure(runs, args.batch_size, args.repeats)
    table = Table(
        title=f"networks alone, batch {args.batch_size}, {torch.get_num_threads()} threads"
    )
    for column in ("model", "backend", "ms / frame", "x ONNX Runtime's time"):
        table.add_column(column, justify="left" if column in ("model", "backend") else "right")
    for model, figures in results.items():
        for name, figure in figures.items():
            table.add_row(
                Path(model).name,
                name,
                f"{figure['ms_per_frame']:.1f}",
                f"{figure['over_onnx_runtime']:.2f}",
            )
    Console(width=max(Console().width, 100)).print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
