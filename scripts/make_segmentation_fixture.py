"""The semantic segmentation fixture: a tiny sleap-nn model and its predict golden.

Run with the sleap-nn venv from the repository root:

    /work/venvs/snn/bin/python scripts/make_segmentation_fixture.py

Stages (all by default, `--stages` picks some):

- `data`: the `multi_gray` training clip (same seed and stride as `make_fixtures.py`'s,
  fewer frames) with each animal's mask (`synth.animal_mask`) in `LabeledFrame.masks`,
  into build/fixtures/segmentation/.
- `train`: `sleap-nn train` of `SEGMENTATION_MODEL`; tests/data/models/semantic_segmentation
  keeps its training_config.yaml and best.ckpt (weights only).
- `predict`: `sleap-nn predict` on the whole `multi_gray` test video, flattened by
  `goldens.masks_to_arrays` into tests/data/goldens/semantic_segmentation.npz.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import sleap_io as sio
import yaml
from fixtures import configs, goldens, media, synth
from make_fixtures import (
    SNN_BIN,
    TEST_FRAMES,
    TRAIN_SEED,
    TRAIN_STRIDE,
    keep_model,
    predict_command,
    run_logged,
    skeleton,
    video_name,
)

NAME = "semantic_segmentation"
DATASET = "multi_gray"
TRAIN_FRAMES = 120
SEGMENTATION_MODEL = configs.ModelSpec(
    name=NAME,
    dataset=DATASET,
    head_type=NAME,
    heads={"segmentation": {"output_stride": 2, "loss_weight": 1.0}},
    # max_stride 8 divides the 168 x 200 frames, which sleap-nn's mask targets need
    # (they are resized to the preprocessed image, not padded with it).
    unet={"filters": 8, "filters_rate": 1.5, "max_stride": 8, "output_stride": 2},
    batch_size=4,
    steps_per_epoch=20,
    max_epochs=6,
)
STAGES = ("data", "train", "predict")


def make_data(work: Path) -> Path:
    """Render the training clip and write its labels with instances and masks."""
    work.mkdir(parents=True, exist_ok=True)
    variant = synth.VARIANTS[DATASET]
    frames, points = synth.render_sequence(
        variant, TRAIN_SEED[DATASET], TRAIN_FRAMES, stride=TRAIN_STRIDE
    )
    video_path = work / video_name(variant)
    media.write_lossless(video_path, frames, variant.grayscale)
    media.verify_identical(video_path, frames, variant.grayscale)
    skel = skeleton()
    video = sio.Video.from_filename(str(video_path.resolve()))
    shape = (variant.height, variant.width)
    labeled = []
    for f in range(TRAIN_FRAMES):
        instances = [sio.Instance.from_numpy(p, skeleton=skel) for p in points[f]]
        masks = [
            sio.UserSegmentationMask.from_numpy(synth.animal_mask(p, look, shape), instance=inst)
            for p, look, inst in zip(points[f], variant.animals, instances, strict=True)
        ]
        labeled.append(sio.LabeledFrame(video, f, instances=instances, masks=masks))
    labels_path = work / f"{DATASET}.slp"
    sio.save_slp(sio.Labels(labeled, videos=[video], skeletons=[skel]), str(labels_path))
    return labels_path


def train(work: Path, models: Path) -> None:
    """Train the model and keep its config and stripped checkpoint in `models`."""
    run_dir = (work / "runs" / NAME).resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    labels_path = (work / f"{DATASET}.slp").resolve()
    config = configs.training_config(SEGMENTATION_MODEL, labels_path, run_dir, seed=0)
    config_path = run_dir.parent / f"{NAME}.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [str(SNN_BIN / "sleap-nn"), "train", "--config", str(config_path)]
    seconds = run_logged(cmd, run_dir.parent / f"{NAME}.log", cwd=work)
    keep_model(run_dir, models / NAME)
    print(f"[train] {NAME}: {seconds:.0f} s", flush=True)


def predict(repo: Path) -> None:
    """sleap-nn predict on the whole test video, flattened into the golden .npz."""
    video = f"tests/data/videos/{video_name(synth.VARIANTS[DATASET])}"
    slp = repo / "build" / "fixtures" / "segmentation" / f"{NAME}.slp"
    cmd = predict_command([f"tests/data/models/{NAME}"], video, str(slp))
    seconds = run_logged([str(SNN_BIN / cmd[0]), *cmd[1:]], slp.with_suffix(".log"), cwd=repo)
    arrays = goldens.masks_to_arrays(slp, TEST_FRAMES)
    shown = [*cmd[:-4], "--output_path", f"{NAME}.slp", *cmd[-2:]]
    arrays["command"] = np.array(" ".join(shown))
    np.savez_compressed(repo / "tests" / "data" / "goldens" / f"{NAME}.npz", **arrays)
    masks = int(arrays["n_masks"].sum())
    print(f"[predict] {NAME}: {seconds:.0f} s, {masks} masks", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    args = parser.parse_args()
    repo = Path.cwd()
    work = repo / "build" / "fixtures" / "segmentation"
    if "data" in args.stages:
        make_data(work)
    if "train" in args.stages:
        train(work, repo / "tests" / "data" / "models")
    if "predict" in args.stages:
        predict(repo)


if __name__ == "__main__":
    main()
