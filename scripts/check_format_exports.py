"""`export --format tflite`, `coreml`, `saved_model` or `tfjs` on every model type.

For each case the model is exported for the video's frame size (`--max-instances 2`
for the slotted types). tflite, saved_model, tfjs: the export verifies itself (the
LiteRT interpreter, TensorFlow, TF.js in Node) against ONNX Runtime on the default
graph (within 1e-3), and the line gives the largest differences recorded. coreml: the
line gives what coremltools checked (Core ML predicts on macOS only). A refused model
type gives its one line. saved_model and tfjs also run the ConvNeXt and Swin fixtures.
tflite, saved_model and tfjs need their extras (docs/contributing.md), which CI does
not install (their installs take minutes), so their tests run here too:

    PYTHONPATH=. python scripts/check_format_exports.py tflite [--frames N] [CASE ...]
    PYTHONPATH=. python scripts/check_format_exports.py coreml
    PYTHONPATH=. python scripts/check_format_exports.py saved_model
    PYTHONPATH=. python scripts/check_format_exports.py tfjs
    python -m pytest -q tests/engines/test_tflite_export.py
    python -m pytest -q tests/engines/test_tensorflow_exports.py
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
# Other networks than the UNet: the TensorFlow formats run these by default too.
NETWORK_CASES = {
    "convnext_single_instance": (("convnext_single_instance",), "single.mkv"),
    "convnext_centroid": (("convnext_centroid",), "multi_gray.mkv"),
    "convnext_topdown": (("convnext_centroid", "convnext_centered_instance"), "multi_gray.mkv"),
    "convnext_bottomup": (("convnext_bottomup",), "multi_gray.mkv"),
    "swint_centroid": (("swint_centroid",), "multi_gray.mkv"),
    "swint_topdown": (("swint_centroid", "swint_centered_instance"), "multi_gray.mkv"),
}
FOLDERS = {"saved_model": "_saved_model", "tfjs": "_tfjs"}
SUFFIXES = {"tflite": ".tflite", "coreml": ".mlpackage", **FOLDERS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("format", choices=tuple(SUFFIXES))
    parser.add_argument("--frames", type=int, default=3, help="verification frames per case")
    every = {**CASES, **NETWORK_CASES}
    parser.add_argument("cases", nargs="*", help=f"of {', '.join(every)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.cases) - set(every)
    if unknown:
        parser.error(f"unknown cases {', '.join(sorted(unknown))}")
    suffix = SUFFIXES[args.format]
    default = every if args.format in FOLDERS else CASES
    for name in args.cases or default:
        models, video = every[name]
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
            metadata_file = (
                path / "sleap_live.json" if args.format in FOLDERS else sidecar_path(path)
            )
            record = json.loads(metadata_file.read_text())
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
