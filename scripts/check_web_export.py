"""The web export in headless Chromium on every model type it holds, on wasm and WebGPU.

For each case (single instance on single.mkv, centroid and top-down on
multi_gray.mkv) the model is exported with `--format web` for the video's frame
size, served as `serve-web` serves it, and the page's own code
(`sleapLive.processRgba`) runs the video's first frames; its poses are compared with
ONNX Runtime's on the default graph (the same frames, converted as the host converts
them). WebGPU is asked for with Chromium's software adapter (SwiftShader); the line
says which backend the page took and, where WebGPU did not start, why.

    PYTHONPATH=. python scripts/check_web_export.py [--frames N]

Needs chromium and npm (onnxruntime-web is installed once into build/web-runtime).
The tests run the single-instance case on wasm (tests/engines/test_web_export.py).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from sleap_live.cli.serve_web import web_server
from sleap_live.engines.export import export_model
from sleap_live.engines.export.web_runtime import RUNTIME_ENV, onnxruntime_web_dist
from sleap_live.engines.host.frames import convert_channels
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import read_onnx_metadata
from sleap_live.stream.runner import first_frames
from tests.browser import Browser
from tests.engines.goldens import DATA
from tests.engines.test_web_export import page_instances

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "single_instance": (("single_instance",), "single.mkv"),
    "centroid": (("centroid",), "multi_gray.mkv"),
    "topdown": (("centroid", "centered_instance"), "multi_gray.mkv"),
}
# Chromium's WebGPU on its software Vulkan (SwiftShader): no GPU needed.
WEBGPU_FLAGS = (
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
    "--use-webgpu-adapter=swiftshader",
    "--use-angle=swiftshader",
)


def reference_poses(folder: Path, frames: np.ndarray) -> list:
    import onnxruntime as ort

    metadata = read_onnx_metadata(folder / "model.onnx")
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    poses = []
    for frame in frames:
        batch = convert_channels(frame[None], metadata.info.input_channels)
        ran = session.run(None, {"frames": batch})
        poses.append(
            decode(metadata.info, dict(zip(metadata.output_names, ran, strict=True)), 1)[0]
        )
    return poses


def run_case(folder: Path, frames: np.ndarray, backend: str, profile: Path) -> str:
    server = web_server(folder, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    flags = WEBGPU_FLAGS if backend == "webgpu" else ("--disable-gpu",)
    browser = Browser(profile, flags)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/?backend={backend}"
        browser.call("Page.navigate", url=url)
        browser.wait(lambda: browser.evaluate("typeof window.sleapLive") == "object", "the page")
        try:
            taken = browser.awaited("window.sleapLive.ready")
        except AssertionError as error:
            return f"did not start: {str(error).splitlines()[0][:300]}"
        worst, instances = 0.0, 0
        for index, (frame, expected) in enumerate(
            zip(frames, reference_poses(folder, frames), strict=True)
        ):
            found = page_instances(browser, frame, index)
            if len(found) != len(expected.points):
                counts = f"{len(found)} instances, ONNX Runtime {len(expected.points)}"
                return f"{taken}: frame {index}: {counts}"
            for instance, points in zip(found, expected.points, strict=True):
                got = np.array([[np.nan, np.nan] if p is None else p for p in instance["points"]])
                if not np.array_equal(np.isnan(got), np.isnan(points)):
                    return f"{taken}: frame {index}: nodes found differ"
                seen = ~np.isnan(points[:, 0])
                if seen.any():
                    worst = max(worst, float(np.abs(got - points)[seen].max()))
                instances += 1
        p50 = browser.text("latency-p50")
        return (
            f"ran on {taken}: {len(frames)} frames, {instances} instances, largest difference "
            f"from ONNX Runtime {worst:.3g} px, model run p50 {p50}"
        )
    finally:
        browser.close()
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=10, help="frames per case")
    args = parser.parse_args()
    os.environ[RUNTIME_ENV] = str(onnxruntime_web_dist(REPO / "build" / "web-runtime"))
    with tempfile.TemporaryDirectory() as work:
        for name, (models, video) in CASES.items():
            gray = first_frames(DATA / "videos" / video, args.frames)
            folder = export_model(
                [DATA / "models" / model for model in models],
                Path(work) / name,
                format="web",
                verify=False,
                frame_sizes=[gray.shape[1:3]],
            )
            frames = convert_channels(gray, 3)
            for backend in ("wasm", "webgpu"):
                line = run_case(folder, frames, backend, Path(work) / f"{name}-{backend}")
                print(f"{name} {backend}: {line}", flush=True)


if __name__ == "__main__":
    main()
