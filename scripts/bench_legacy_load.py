"""How long a SLEAP 1.x model folder takes to load on the CPU (no TensorFlow).

Times `load_inference_model` on each folder (or top-down pair) in
tests/data/legacy_models: reading training_config.json, the Keras .h5 weights with
h5py, and building the torch inference model, after imports; best of `--repeats`.

    python scripts/bench_legacy_load.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from sleap_live.engines.graph.build import load_inference_model

MODELS = Path(__file__).resolve().parents[1] / "tests" / "data" / "legacy_models"
CASES = {
    "single instance": [MODELS / "minimal_robot.UNet.single_instance"],
    "centroid": [MODELS / "minimal_instance.UNet.centroid"],
    "top-down": [
        MODELS / "minimal_instance.UNet.centroid",
        MODELS / "minimal_instance.UNet.centered_instance",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, folders in CASES.items():
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            load_inference_model(folders)
            times.append(time.perf_counter() - start)
        print(f"{name}: best {min(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
