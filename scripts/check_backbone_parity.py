"""The ConvNeXt and Swin fixtures against `sleap-nn predict` on their whole test videos.

Run from the repository root with sleap-live's environment:

    PYTHONPATH=. python scripts/check_backbone_parity.py [--engine onnx|torch] [--cases NAME...]

For each case of tests/engines/goldens.py `BACKBONE_CASES` it runs the models on every
frame of the case's video and prints: the share of frames with the same instances as
the golden (same count, no point found by one side only), and the point distances'
median, 99th percentile and maximum; then exports the case's models with the
"tensorrt" profile at the video's frame size and lints the graph with `check_tensorrt`.
Exits non-zero unless every case has the same instances on at least 99.9 % of frames,
a median within 1e-3 px, a 99th percentile within 0.05 px (issue #21's targets), agrees
with the golden by the comparison rule (`sleap_live.engines.host.agreement`: float noise
within the model graph's float32 bound, near-ties counted) and has a lint-clean
TensorRT-profile graph.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from sleap_live.engines import export_model
from sleap_live.engines.export.check_tensorrt import check_tensorrt
from sleap_live.engines.settings import InferenceSettings
from tests.engines import goldens
from tests.engines.test_parity import BATCH, run_engine, video_frames

# The TensorRT profile's instance slots per frame (any number serves the lint).
SLOTS = InferenceSettings(max_instances=4)
SAME_FRAMES = 0.999
MEDIAN_PX = 1e-3
P99_PX = 0.05


def tensorrt_lint(models: list[Path], frame_size: tuple[int, int]) -> list[str]:
    """`check_tensorrt`'s findings on the models' "tensorrt" profile ONNX export."""
    with tempfile.TemporaryDirectory() as folder:
        path = export_model(
            models,
            Path(folder),
            verify=False,
            settings=SLOTS,
            profile="tensorrt",
            frame_size=frame_size,
        )
        return [f"{f.node} ({f.op}): {f.reason}" for f in check_tensorrt(path)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="onnx", choices=("onnx", "torch"))
    parser.add_argument(
        "--cases", nargs="+", choices=list(goldens.BACKBONE_CASES), help="default: all"
    )
    args = parser.parse_args()
    failures = 0
    for name in args.cases or goldens.BACKBONE_CASES:
        models, video, golden_path, _ = goldens.case_paths(name)
        frames = video_frames(video)
        options = {"verify_frames": frames[:5]} if args.engine == "onnx" else {}
        run = run_engine(models, args.engine, frames, BATCH, **options)
        golden = dict(np.load(golden_path))
        result = goldens.compare(run.poses, golden, run.info.class_names)
        differing = set(result.count_mismatches)
        for i in range(result.frames):  # frames where a point is found by one side only
            one = goldens.compare(run.poses, golden, run.info.class_names, [i])
            if one.presence_mismatches:
                differing.add(i)
        same = 1 - len(differing) / result.frames
        points = result.point_errors
        if points.size == 0:
            # Same (no) instances everywhere, but nothing to measure: not a pass.
            failures += 1
            print(f"FAIL {name} ({args.engine}): no instance on either side, nothing compared")
            continue
        median, p99 = float(np.median(points)), float(np.percentile(points, 99))
        lint = tensorrt_lint(models, frames.shape[1:3])
        bound = goldens.bound_of(tuple(models))
        rule = goldens.agreement(run.poses, golden, bound, run.info.class_names)
        ok = same >= SAME_FRAMES and median <= MEDIAN_PX and p99 <= P99_PX and not lint
        ok = ok and rule.agrees
        failures += not ok
        print(
            f"{'ok  ' if ok else 'FAIL'} {name} ({args.engine}): same instances on "
            f"{same:.2%} of {result.frames} frames; points median {median:.3g} px, "
            f"p99 {p99:.3g} px, max {points.max():.3g} px over {points.size} points; "
            f"tensorrt-profile lint: {'; '.join(lint) if lint else 'clean'}; {rule.summary()}"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
