"""`export --format tflite` or `coreml` on every model type.

For each case the model is exported for the video's frame size (`--max-instances 2`
for the slotted types). tflite: the export verifies the `.tflite` file in the LiteRT
interpreter against ONNX Runtime on the default graph (within 1e-3), and the line
gives the largest differences recorded. coreml: the line gives what coremltools
checked (Core ML predicts on macOS only). A refused model type gives its one line.
tflite needs `pip install "sleap-live[tflite]"`, which CI does not install (its
install takes minutes), so its tests run here too:

    PYTHONPATH=. python scripts/check_format_exports.py tflite [--frames N] [CASE ...]
    PYTHONPATH=. python scripts/check_format_exports.py coreml
    python -m pytest -q tests/engines/test_tflite_export.py
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export import export_model
from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream.runner import first_frames
from tests.engines.goldens import DATA

CASES = {
    "single_instance": (("single_instance",), "single.mkv"),
    "centroid": (("centroid",), "multi_gray.mkv"),
    "topdown": (("centroid", "centered_instance"), "multi_gray.mkv"),
    "multi_class_topdown": (("centroid_rgb", "multi_class_topdown"), "multi_rgb.mp4"),
    "bottomup": (("bottomup",), "multi_gray.mkv"),
    "multi_class_bottomup": (("multi_class_bottomup",), "multi_rgb.mp4"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("format", choices=("tflite", "coreml"))
    parser.add_argument("--frames", type=int, default=3, help="verification frames per case")
    parser.add_argument("cases", nargs="*", help=f"of {', '.join(CASES)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {', '.join(sorted(unknown))}")
    suffix = {"tflite": ".tflite", "coreml": ".mlpackage"}[args.format]
    for name in args.cases or CASES:
        models, video = CASES[name]
        frames = first_frames(DATA / "videos" / video, args.frames)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            try:
                path = export_model(
                    [DATA / "models" / model for model in models],
                    Path(folder) / f"model{suffix}",
                    format=args.format,
                    verify_frames=frames,
                    settings=InferenceSettings(max_instances=2),
                )
            except ModelConfigError as error:
                print(f"{name} ({video}): refused: {error}")
                continue
            record = json.loads(sidecar_path(path).read_text())
        seconds = time.perf_counter() - started
        if args.format == "coreml":
            check = record["coreml_check"]
            print(
                f"{name} ({video}): converted; coremltools loads back input "
                f"{check['input']} and outputs {', '.join(check['outputs'])}; prediction "
                f"{check['prediction']} (export {seconds:.0f} s)"
            )
            continue
        metadata = ExportMetadata.from_dict(record)
        (check,) = metadata.verification or ({},)
        diffs = ", ".join(f"{key} {value:.2g}" for key, value in check["max_abs_diff"].items())
        instances = "" if check["instances"] is None else f"{check['instances']} instances, "
        print(
            f"{name} ({video}, {'x'.join(map(str, check['frames']))}): {instances}"
            f"largest differences from ONNX Runtime: {diffs} "
            f"(export and check {seconds:.0f} s)"
        )


if __name__ == "__main__":
    main()
