"""int8's quantisation forms side by side on this CPU: each one's error and speed-up.

    .venv/bin/python scripts/bench_int8_forms.py --case topdown --video tests/data/videos/demo.mp4
    .venv/bin/python scripts/bench_int8_forms.py --lab topdown_384 [--frames 200]
        [--held-out 32] [--rounds 5] [--batch-size 8] [--threads N] [--no-verify]
        [--workdir DIR]

What `--precision int8` would do on a CPU of another family, measured on this one:
the float32 export (`load_runner(..., engine="onnx")`, cached in `--workdir`) is
quantised in each form (`sleap_live.engines.export.quantise`: U8S8, U8S8 with 7-bit
weights, U8U8), calibrated on the frames a run calibrates on (frames spread over the
video in which the float32 graph finds animals, at most 16); then

1. each form's poses are matched to float32's (`pose_difference`: median, p99 and max
   px of the points both found, frames whose instance count changed) on those
   calibration frames and on `--held-out` consecutive frames from the middle of the
   video, which the calibration did not see;
2. float32 and every form are timed in alternation in one `cpu_choice.measure` call
   per batch of the held-out frames (`--rounds` rounds, median ms per frame, whole
   `runner.run`), so the speed-ups are side by side on the same machine state.

`--case` is a fixture case of tests/engines/goldens.py (its models, any `--video`);
`--lab` a lab model of scripts/fixtures/lab.py (a clip of its scene is rendered).
The form this CPU gets (`this_cpu_form`) and its /proc/cpuinfo flags are printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
from bench_int8 import held_out_frames
from fixtures.lab import lab_model, write_clip

from sleap_live.engines.export.on_demand import general_graph_key
from sleap_live.engines.export.quantise import (
    QuantForm,
    cpu_flags,
    quantise_networks,
    this_cpu_form,
)
from sleap_live.engines.host.compare import pose_difference
from sleap_live.engines.load.export_cache import ExportCache
from sleap_live.engines.notify import quiet
from sleap_live.engines.runners.cpu_choice import measure
from sleap_live.engines.runners.int8 import with_animals
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream.runner import spread_frames

REPO = Path(__file__).resolve().parents[1]
HERE = "measured by scripts/bench_int8_forms.py"
FORMS = (
    QuantForm("U8S8", HERE, reduce_range=False),
    QuantForm("U8S8 reduce_range", HERE, reduce_range=True),
    QuantForm("U8U8", HERE, reduce_range=False, weights="uint8"),
)


def models_and_video(args: argparse.Namespace, workdir: Path) -> tuple[list[Path], Path]:
    if args.lab is not None:
        entry = lab_model(args.lab)
        video = workdir / f"{entry.scene}-{args.frames}.mp4"
        if not video.is_file():
            write_clip(video.with_suffix(".partial.mp4"), entry.scene, args.frames).replace(video)
        return list(entry.paths), video
    sys.path.insert(0, str(REPO))
    from tests.engines import goldens

    models, fixture_video, _, _ = goldens.case_paths(args.case)
    return models, Path(args.video) if args.video else fixture_video


def float32_export(models: list[Path], cache: Path, frames: np.ndarray, verify: bool) -> bytes:
    """The models' general float32 graph, exported (and verified on `frames`) as
    `sleap-live run` does it, or read from `cache`."""
    options = {"engine": "onnx", "device": "cpu", "cache_dir": cache, "verify": verify}
    load_runner(models, verify_frames=frames, **options).close()
    key = general_graph_key(models, {"verify": verify}, InferenceSettings())
    onnx_bytes = None if key is None else ExportCache(cache, quiet).read(key)
    if onnx_bytes is None:
        raise SystemExit(f"{cache}: the export of {', '.join(map(str, models))} is not in it")
    return onnx_bytes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--case")
    which.add_argument("--lab")
    parser.add_argument("--video", help="--case: the video (default: the case's)")
    parser.add_argument("--frames", type=int, default=200, help="--lab: the clip's length")
    parser.add_argument("--held-out", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-verify", action="store_true", help="export without verifying")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sleap-live-int8-forms-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        models, video = models_and_video(args, workdir)
        flags = cpu_flags()
        simd = sorted(f for f in flags if f.startswith(("avx", "amx", "sse4", "fma")))
        print(
            f"{platform.machine()}, flags {' '.join(simd)}; this CPU's form: "
            f"{this_cpu_form().describe()}"
        )
        onnx_bytes = float32_export(
            models, workdir / "cache", spread_frames(video), not args.no_verify
        )
        full = OnnxRunner(onnx_bytes, intra_op_threads=args.threads)
        calibration = with_animals(full, spread_frames(video))
        held_out = held_out_frames(video, args.held_out)
        runners: dict[str, OnnxRunner] = {"fp32": full}
        for form in FORMS:
            graph = quantise_networks(onnx_bytes, calibration, form)
            runners[form.name] = OnnxRunner(graph, intra_op_threads=args.threads)
        print(
            f"{video.name}: {len(calibration)} calibration frames, {len(held_out)} held out, "
            f"{held_out.shape[1]}x{held_out.shape[2]}; load {os.getloadavg()[0]:.1f}"
        )
        for label, frames in (("calibration", calibration), ("held-out", held_out)):
            reference = full.run(frames)
            for form in FORMS:
                d = pose_difference(runners[form.name].run(frames), reference)
                print(
                    f"  {label:11} {form.name:17}: points median {d.quantile_px(0.5):.3g} / "
                    f"p99 {d.quantile_px(0.99):.3g} / max {d.max_px():.3g} px, count changes "
                    f"{d.count_changes}/{d.frames}"
                )
        totals = dict.fromkeys(runners, 0.0)
        for start in range(0, len(held_out), args.batch_size):
            batch = held_out[start : start + args.batch_size]
            for name, ms in measure(runners, batch, args.rounds).items():
                totals[name] += ms * len(batch)
        per_frame = {name: total / len(held_out) for name, total in totals.items()}
        print("  ms/frame: " + ", ".join(f"{n} {ms:.1f}" for n, ms in per_frame.items()))
        print(
            "  speed-up over fp32: "
            + ", ".join(
                f"{form.name} {per_frame['fp32'] / per_frame[form.name]:.2f}x" for form in FORMS
            )
            + f"; load {os.getloadavg()[0]:.1f}"
        )
        for runner in runners.values():
            runner.close()


if __name__ == "__main__":
    main()
