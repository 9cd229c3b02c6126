"""Build sleap-live's test fixtures: synthetic videos, tiny sleap-nn models and goldens.

Run with the sleap-nn venv from the repository root:

    /work/venvs/snn/bin/python scripts/make_fixtures.py --out tests/data

Stages (all by default, or pick with --stages): ``data`` renders the datasets and test
videos and checks PyAV and sleap-io decode them identically; ``train`` trains the seven
UNet models and the ConvNeXt and Swin models with ``sleap-nn train``; ``predict``
records goldens with ``sleap-nn predict``;
``export`` runs ``sleap-nn export --format onnx`` per golden and records
``sleap-nn predict --runtime onnx`` on each export; ``score`` compares goldens with ground
truth. Training inputs and full training run folders go to --work (not committed).
Everything is seeded; results are deterministic up to PyTorch's CPU kernels.

The benchmark models at lab frame sizes (`fixtures.lab`) are made by two more stages,
not run by default: ``lab_data`` renders their training sets and ``lab_train`` trains
them into tests/data/lab_models, keeping only the weights of each checkpoint:

    /work/venvs/snn/bin/python scripts/make_fixtures.py --stages lab_data lab_train
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import sleap_io as sio
import torch
import yaml
from fixtures import configs, goldens, lab, media, synth

SNN_BIN = Path(sys.executable).parent
TRAIN_FRAMES = {"single": 240, "multi_gray": 300, "multi_rgb": 300}
TEST_FRAMES = 200
DEMO_FRAMES = 150
TRAIN_STRIDE = 4
TRAIN_SEED = {"single": 101, "multi_gray": 102, "multi_rgb": 103}
TEST_SEED = {"single": 201, "multi_gray": 202, "multi_rgb": 203}
DEMO_SEED = 301
STAGES = ("data", "train", "predict", "settings", "export", "score")
LAB_STAGES = ("lab_data", "lab_train")
# What sleap-nn's predict and sleap-live need from a Lightning checkpoint; the optimizer
# state, loops and callbacks (two thirds of the file) are dropped from lab models.
CHECKPOINT_KEYS = ("epoch", "global_step", "pytorch-lightning_version", "state_dict")
# sleap-nn's module name for each model type's first head (node confidence maps), the
# name its weights carry in a checkpoint's state dict.
FIRST_HEAD = {
    "single_instance": "SingleInstanceConfmapsHead",
    "centroid": "CentroidConfmapsHead",
    "centered_instance": "CenteredInstanceConfmapsHead",
    "bottomup": "MultiInstanceConfmapsHead",
}


def video_name(variant: synth.Variant) -> str:
    """Test video file name: FFV1 gray .mkv, or lossless RGB H.264 .mp4."""
    return f"{variant.name}.mkv" if variant.grayscale else f"{variant.name}.mp4"


# Goldens: name -> (model dirs in order, dataset, nodes to score or None for all).
GOLDENS = {
    "single_instance": (["single_instance"], "single", None),
    "centroid": (["centroid"], "multi_gray", [synth.NODE_NAMES.index("body")]),
    "topdown": (["centroid", "centered_instance"], "multi_gray", None),
    "bottomup": (["bottomup"], "multi_gray", None),
    "multi_class_topdown": (["centroid_rgb", "multi_class_topdown"], "multi_rgb", None),
    "multi_class_bottomup": (["multi_class_bottomup"], "multi_rgb", None),
    "convnext_single_instance": (["convnext_single_instance"], "single", None),
    "convnext_topdown": (
        ["convnext_centroid", "convnext_centered_instance"],
        "multi_gray",
        None,
    ),
    "convnext_bottomup": (["convnext_bottomup"], "multi_gray", None),
    "swint_single_instance": (["swint_single_instance"], "single", None),
    "swint_topdown": (["swint_centroid", "swint_centered_instance"], "multi_gray", None),
    "swint_bottomup": (["swint_bottomup"], "multi_gray", None),
    # 64 px tiles: the 168 x 200 frames are more than twice the model's input each way.
    "tiled_single_instance": (["tiled_single_instance"], "single", None),
    # A box detector in place of the centroid model (`configs.BBOX_MODELS`).
    "bbox_topdown": (["bbox_centernet", "centered_instance"], "multi_gray", None),
    "bbox_centernet": (["bbox_centernet"], "multi_gray", None),
    "bbox_ssd": (["bbox_ssd"], "multi_gray", None),
    "bbox_ssd_topdown": (["bbox_ssd", "centered_instance"], "multi_gray", None),
    "bbox_multi_class_topdown": (
        ["bbox_centernet_rgb", "multi_class_topdown"],
        "multi_rgb",
        None,
    ),
    # sleap-nn's fused route: the pose pair, then the embedding model on each predicted
    # instance, then tracking on the vectors (`PREDICT_OPTIONS`).
    "topdown_embedding": (
        ["centroid_rgb", "centered_instance_rgb", "embedding_rgb"],
        "multi_rgb",
        None,
    ),
}
# More `sleap-nn predict` options of some goldens. With an embedding model and
# --tracking, sleap-nn tracks on the vectors (features embeddings, cosine similarity,
# local queues); --save_embeddings slp keeps the vectors in the .slp.
PREDICT_OPTIONS = {"topdown_embedding": ("--tracking", "--save_embeddings", "slp")}
# The ConvNeXt and Swin goldens have no sleap-nn export golden; nor has the tiled one:
# sleap-nn 0.3.5 refuses tiled predict on an export (`_build_tiled_layer`: "tiled
# export deferred").
BACKBONE_GOLDENS = {name for name in GOLDENS if name.startswith(("convnext_", "swint_"))}
# Nor has the embedding one: sleap-nn exports an embedding model alone, without its crops.
UNEXPORTED_GOLDENS = BACKBONE_GOLDENS | {"tiled_single_instance", "topdown_embedding"}
# The goldens whose .slp the tests read (tracking from sleap-nn's predictions, the
# renderer); the others keep only their .npz (the GPU machine's payload).
SLP_KEPT = {"topdown", "bottomup", "multi_class_topdown"}
# Goldens with boxes: a detector alone (`DETECTOR_GOLDENS`, boxes only) and seeding a
# top-down pair. No export golden: sleap-nn exports no detector-seeded pair.
DETECTOR_GOLDENS = {"bbox_centernet", "bbox_ssd"}
BOX_GOLDENS = {"bbox_topdown", "bbox_ssd_topdown", "bbox_multi_class_topdown"} | DETECTOR_GOLDENS
# Exports: one per golden, of the same model dirs. Input size = the test frames padded to
# max_stride 16: the exported graphs do not pad, and their traced resizes and crop grids
# are frozen at this size.
EXPORTS = {
    name: models
    for name, (models, _, _) in GOLDENS.items()
    if name not in UNEXPORTED_GOLDENS | BOX_GOLDENS
}
EXPORT_HEIGHT, EXPORT_WIDTH = 176, 208


def skeleton() -> sio.Skeleton:
    """The five-node chain skeleton shared by every dataset."""
    names = list(synth.NODE_NAMES)
    return sio.Skeleton(
        nodes=names,
        edges=[(names[a], names[b]) for a, b in synth.EDGES],
        name="chain5",
    )


def write_labels(path: Path, video_path: Path, points: np.ndarray, variant: synth.Variant) -> None:
    """Save user-labelled training frames that reference video_path."""
    skel = skeleton()
    video = sio.Video.from_filename(str(video_path))
    tracks = [sio.Track(name=look.name) for look in variant.animals] if variant.with_tracks else []
    frames = []
    for f in range(points.shape[0]):
        instances = [
            sio.Instance.from_numpy(
                points[f, a].astype(np.float64),
                skeleton=skel,
                track=tracks[a] if tracks else None,
            )
            for a in range(points.shape[1])
        ]
        frames.append(sio.LabeledFrame(video=video, frame_idx=f, instances=instances))
    labels = sio.Labels(labeled_frames=frames, videos=[video], skeletons=[skel], tracks=tracks)
    sio.save_slp(labels, str(path))


def make_data(out: Path, work: Path) -> dict:
    """Render training sets, test videos with ground truth, and the lossy demo clip."""
    videos_dir, truth_dir, train_dir = out / "videos", out / "ground_truth", work / "train_data"
    for folder in (videos_dir, truth_dir, train_dir):
        folder.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, variant in synth.VARIANTS.items():
        frames, points = synth.render_sequence(
            variant, TRAIN_SEED[name], TRAIN_FRAMES[name], stride=TRAIN_STRIDE
        )
        train_video = train_dir / video_name(variant)
        media.write_lossless(train_video, frames, variant.grayscale)
        media.verify_identical(train_video, frames, variant.grayscale)
        write_labels(train_dir / f"{name}.slp", train_video.resolve(), points, variant)

        frames, points = synth.render_sequence(variant, TEST_SEED[name], TEST_FRAMES)
        test_video = videos_dir / video_name(variant)
        media.write_lossless(test_video, frames, variant.grayscale)
        report[name] = media.verify_identical(test_video, frames, variant.grayscale)
        names = np.array([look.name for look in variant.animals], dtype=np.str_)
        np.savez_compressed(
            truth_dir / f"{name}.npz",
            points=points.astype(np.float32),
            identities=np.broadcast_to(
                np.arange(len(variant.animals), dtype=np.int32), points.shape[:2]
            ).copy(),
            identity_names=names,
            node_names=np.array(synth.NODE_NAMES, dtype=np.str_),
            edges=np.array(synth.EDGES, dtype=np.int32),
            frame_indices=np.arange(TEST_FRAMES, dtype=np.int64),
            video=np.array(test_video.name),
        )
        print(f"[data] {name}: {report[name]}", flush=True)
    frames, _ = synth.render_sequence(synth.VARIANTS["multi_gray"], DEMO_SEED, DEMO_FRAMES)
    media.write_lossy_demo(videos_dir / "demo.mp4", frames)
    return report


def run_logged(cmd: list[str], log_path: Path, cwd: Path) -> float:
    """Run a command, send its output to log_path, fail loudly; return seconds taken."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        tail = log_path.read_text().splitlines()[-30:]
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n" + "\n".join(tail))
    return elapsed


def make_lab_data(work: Path) -> dict:
    """Render the lab scenes' training sets (lossless video + labels) into work/lab_train_data."""
    train_dir = work / "lab_train_data"
    train_dir.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, variant in lab.SCENES.items():
        frames, points = synth.render_sequence(
            variant, lab.TRAIN_SEED[name], lab.TRAIN_FRAMES, stride=lab.TRAIN_STRIDE
        )
        video = train_dir / video_name(variant)
        media.write_lossless(video, frames, variant.grayscale)
        report[name] = media.verify_identical(video, frames, variant.grayscale)
        write_labels(train_dir / f"{name}.slp", video.resolve(), points, variant)
        print(f"[lab_data] {name}: {report[name]}", flush=True)
    return report


def strip_checkpoint(path: Path) -> None:
    """Keep only `CHECKPOINT_KEYS` of a Lightning checkpoint, in place."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    torch.save({key: checkpoint[key] for key in CHECKPOINT_KEYS}, path)


def init_checkpoint(source: Path, spec: configs.ModelSpec, runs: Path) -> Path:
    """The checkpoint `spec`'s model starts from: `source` itself, or when that is
    another model type, a copy in `runs` whose first head carries this type's head name.

    sleap-nn loads pretrained head weights by name and skips names it does not know, so
    a centered-instance model's node maps would not reach a single-instance or bottom-up
    model's head of the same shape without the rename. A centroid model's one-channel
    head starts from the source's channel of its anchor node (a body detector already;
    from scratch, the ConvNeXt and Swin centroid maps stayed flat in a brief training).
    Heads the source lacks (bottom-up PAFs) start from sleap-nn's default initialisation.
    """
    checkpoint = torch.load(source, map_location="cpu", weights_only=False)
    prefix = "model.head_layers.0."
    renamed = {}
    for key, value in checkpoint["state_dict"].items():
        if key.startswith(prefix):
            head_name, rest = key.removeprefix(prefix).split(".", 1)
            if spec.head_type == "centroid" and head_name != FIRST_HEAD["centroid"]:
                anchor = synth.NODE_NAMES.index(spec.heads["confmaps"]["anchor_part"])
                value = value[anchor : anchor + 1]  # the output channel: weight's dim 0, bias
            key = f"{prefix}{FIRST_HEAD[spec.head_type]}.{rest}"
        renamed[key] = value
    if all(
        key == old and value is checkpoint["state_dict"][old]
        for (key, value), old in zip(renamed.items(), checkpoint["state_dict"], strict=True)
    ):
        return source
    path = runs / f"{spec.name}.init.ckpt"
    torch.save({**checkpoint, "state_dict": renamed}, path)
    return path


def train_models(
    specs: tuple[configs.ModelSpec, ...],
    data_dir: Path,
    runs: Path,
    models_dir: Path,
    only: list[str] | None,
) -> dict:
    """Train each spec with sleap-nn (seed: `spec.seed`, else its index), then keep only
    training_config.yaml and best.ckpt in models_dir/<name>, the checkpoint stripped to its
    weights (`CHECKPOINT_KEYS`: predict reads nothing else, and it keeps the tree small
    enough for the GPU machine's payload)."""
    runs.mkdir(parents=True, exist_ok=True)
    report = {}
    for index, spec in enumerate(specs):
        if only and spec.name not in only:
            continue
        seed = index if spec.seed is None else spec.seed
        run_dir = runs / spec.name
        shutil.rmtree(run_dir, ignore_errors=True)
        labels_path = (data_dir / f"{spec.dataset}.slp").resolve()
        init = None
        if spec.init_from is not None:
            source = models_dir / spec.init_from / "best.ckpt"
            init = init_checkpoint(source, spec, runs)
        cfg = configs.training_config(spec, labels_path, run_dir.resolve(), seed, init)
        cfg_path = runs / f"{spec.name}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        cmd = [str(SNN_BIN / "sleap-nn"), "train", "--config", str(cfg_path.resolve())]
        if spec.backbone == "swint":
            unvalidated = Path(__file__).parent / "fixtures" / "train_unvalidated.py"
            cmd[:1] = [sys.executable, str(unvalidated)]
        print(f"[train] {spec.name} ...", flush=True)
        seconds = run_logged(cmd, runs / f"{spec.name}.log", cwd=runs.parent)
        model_dir = keep_model(run_dir, models_dir / spec.name)
        report[spec.name] = {
            "train_seconds": round(seconds, 1),
            "best_ckpt_bytes": (model_dir / "best.ckpt").stat().st_size,
        }
        print(f"[train] {spec.name}: {report[spec.name]}", flush=True)
    return report


def keep_model(run_dir: Path, model_dir: Path) -> Path:
    """Replace `model_dir` with a sleap-nn run's training_config.yaml and best.ckpt, the
    checkpoint stripped to its weights and the config's warm start forgotten."""
    shutil.rmtree(model_dir, ignore_errors=True)
    model_dir.mkdir(parents=True)
    for keep in ("training_config.yaml", "best.ckpt"):
        shutil.copy2(run_dir / keep, model_dir / keep)
    forget_warm_start(model_dir / "training_config.yaml")
    strip_checkpoint(model_dir / "best.ckpt")
    return model_dir


WARM_START_KEYS = ("pretrained_backbone_weights", "pretrained_head_weights")


def forget_warm_start(config_path: Path) -> None:
    """Set a kept config's warm-start checkpoints to null: best.ckpt holds every
    trained weight, and the checkpoint trained from was a build file that `sleap-nn
    export` (which reads these keys) would look for and fail without."""
    pattern = re.compile(rf"^(\s*(?:{'|'.join(WARM_START_KEYS)}):).*$", re.M)
    config_path.write_text(pattern.sub(r"\1 null", config_path.read_text()))


def predict_command(
    model_paths: list[str], video: str, output: str, options: tuple[str, ...] = ()
) -> list[str]:
    """The sleap-nn predict call recorded for a golden (paths relative to the repo)."""
    cmd = ["sleap-nn", "predict", "--data_path", video]
    for model in model_paths:
        cmd += ["--model_paths", model]
    return [*cmd, "--output_path", output, "--device", "cpu", *options]


def repo_relative(path: Path, repo: Path) -> str:
    """`path` relative to the repository when it is inside it, else as it is."""
    return str(path.relative_to(repo)) if path.is_relative_to(repo) else str(path)


def make_goldens(out: Path, repo: Path, only: list[str] | None) -> dict:
    """Run sleap-nn predict per golden and flatten each .slp into an .npz."""
    goldens_dir = out / "goldens"
    goldens_dir.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, (models, dataset, _) in GOLDENS.items():
        if only and name not in only:
            continue
        variant = synth.VARIANTS[dataset]
        video = f"tests/data/videos/{video_name(variant)}"
        slp = f"tests/data/goldens/{name}.slp"
        cmd = predict_command(
            [f"tests/data/models/{m}" for m in models], video, slp, PREDICT_OPTIONS.get(name, ())
        )
        run = [str(SNN_BIN / cmd[0]), *cmd[1:]]
        seconds = run_logged(run, goldens_dir / f"{name}.log", cwd=repo)
        (goldens_dir / f"{name}.log").unlink()
        if name in BOX_GOLDENS:
            # A detector's boxes, and for a detector-seeded top-down pair its poses too.
            arrays = goldens.boxes_to_arrays(repo / slp, TEST_FRAMES)
            if name not in DETECTOR_GOLDENS:
                arrays |= goldens.predictions_to_arrays(repo / slp, TEST_FRAMES)
        else:
            arrays = goldens.predictions_to_arrays(repo / slp, TEST_FRAMES)
        np.savez_compressed(goldens_dir / f"{name}.npz", **arrays)
        if name not in SLP_KEPT:
            (repo / slp).unlink()
        report[name] = {
            "command": " ".join(cmd),
            "seconds": round(seconds, 1),
            "instances_per_frame": np.bincount(
                arrays["n_boxes" if name in DETECTOR_GOLDENS else "n_instances"]
            ).tolist(),
        }
        print(f"[predict] {name}: {report[name]}", flush=True)
    return report


def make_settings_goldens(out: Path, repo: Path, only: list[str] | None) -> dict:
    """Run sleap-nn predict with non-default settings on the first frames; keep the .npz."""
    goldens_dir = out / "goldens"
    goldens_dir.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, (models, video_file, options, n_frames) in goldens.SETTINGS_CASES.items():
        if only and name not in only:
            continue
        video = f"tests/data/videos/{video_file}"
        slp = goldens_dir / f"{name}.slp"
        cmd = predict_command(
            [f"tests/data/models/{m}" for m in models], video, repo_relative(slp, repo)
        )
        cmd += ["--frames", f"0-{n_frames - 1}"]
        for option, value in options.items():
            cmd += [f"--{option}", goldens.predict_option(value)]
        seconds = run_logged([str(SNN_BIN / cmd[0]), *cmd[1:]], goldens_dir / f"{name}.log", repo)
        (goldens_dir / f"{name}.log").unlink()
        arrays = goldens.predictions_to_arrays(slp, n_frames)
        slp.unlink()
        np.savez_compressed(goldens_dir / f"{name}.npz", **arrays)
        report[name] = {
            "command": " ".join(cmd),
            "seconds": round(seconds, 1),
            "instances_per_frame": np.bincount(arrays["n_instances"]).tolist(),
        }
        print(f"[settings] {name}: {report[name]}", flush=True)
    return report


def export_command(name: str, models: list[str]) -> list[str]:
    """The sleap-nn export call recorded for an export (paths relative to the repo)."""
    cmd = ["sleap-nn", "export", *(f"tests/data/models/{m}" for m in models)]
    cmd += ["--output", f"tests/data/exports/{name}", "--format", "onnx"]
    return [*cmd, "--input-height", str(EXPORT_HEIGHT), "--input-width", str(EXPORT_WIDTH)]


def padded_video(out: Path, work: Path, dataset: str) -> Path:
    """The test video of `dataset` zero-padded bottom/right to the export input size.

    sleap-nn's exported-model predict feeds frames to the graph as they are, and the
    graphs only run at stride multiples, so their goldens are made on this copy. It is
    written losslessly and checked to decode to exactly the padded pixels.
    """
    variant = synth.VARIANTS[dataset]
    source = out / "videos" / video_name(variant)
    target = work / "export_videos" / f"{Path(video_name(variant)).stem}_padded{source.suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    frames, _ = media.decode_pyav(source)
    height, width = frames.shape[1:3]
    padding = ((0, 0), (0, EXPORT_HEIGHT - height), (0, EXPORT_WIDTH - width), (0, 0))
    padded = np.pad(np.broadcast_to(frames, (*frames.shape[:3], 3)), padding)
    media.write_lossless(target, padded, variant.grayscale)
    media.verify_identical(target, padded, variant.grayscale)
    return target


def make_exports(out: Path, repo: Path, work: Path, only: list[str] | None) -> dict:
    """Export each golden's model dirs to ONNX and record `predict --runtime onnx` on it.

    The export goldens (goldens/export_<name>.npz) are sleap-nn's exported-model
    predict on the padded test video (see `padded_video`); only the .npz is kept.
    """
    report = {}
    videos: dict[str, Path] = {}
    for name, models in EXPORTS.items():
        if only and name not in only:
            continue
        target = out / "exports" / name
        shutil.rmtree(target, ignore_errors=True)
        cmd = export_command(name, models)
        log = work / f"export_{name}.log"
        seconds = run_logged([str(SNN_BIN / cmd[0]), *cmd[1:]], log, cwd=repo)
        files = {p.name: p.stat().st_size for p in sorted(target.iterdir())}
        report[name] = {"command": " ".join(cmd), "seconds": round(seconds, 1), "files": files}

        dataset = GOLDENS[name][1]
        if dataset not in videos:
            videos[dataset] = padded_video(out, work, dataset)
        slp = work / "export_goldens" / f"{name}.slp"
        slp.parent.mkdir(parents=True, exist_ok=True)
        predict = predict_command(
            [f"tests/data/exports/{name}"],
            repo_relative(videos[dataset], repo),
            repo_relative(slp, repo),
        )
        predict += ["--runtime", "onnx"]
        seconds = run_logged(
            [str(SNN_BIN / predict[0]), *predict[1:]], work / f"predict_{name}.log", cwd=repo
        )
        arrays = goldens.predictions_to_arrays(slp, TEST_FRAMES)
        np.savez_compressed(out / "goldens" / f"export_{name}.npz", **arrays)
        report[name]["predict"] = {
            "command": " ".join(predict),
            "seconds": round(seconds, 1),
            "instances_per_frame": np.bincount(arrays["n_instances"]).tolist(),
        }
        print(f"[export] {name}: {report[name]}", flush=True)
    return report


def score_goldens(out: Path) -> dict:
    """Compare each golden with the ground truth of its test video."""
    report = {}
    for name, (_, dataset, nodes) in GOLDENS.items():
        path = out / "goldens" / f"{name}.npz"
        if not path.exists() or name in DETECTOR_GOLDENS:
            continue  # a detector's boxes have no points to score
        with np.load(path) as pred_file, np.load(out / "ground_truth" / f"{dataset}.npz") as gt:
            pred = dict(pred_file)
            report[name] = goldens.score_against_truth(
                pred, gt["points"], gt["identity_names"], nodes
            )
        print(f"[score] {name}: {report[name]}", flush=True)
    return report


def main() -> None:
    """Parse arguments and run the requested stages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/data"))
    parser.add_argument("--work", type=Path, default=Path("build/fixtures"))
    parser.add_argument("--stages", nargs="+", choices=STAGES + LAB_STAGES, default=list(STAGES))
    parser.add_argument("--only", nargs="+", help="limit train/predict/export to these names")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    repo = Path(__file__).resolve().parent.parent
    out, work = args.out.resolve(), args.work.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    import sleap_nn

    handlers = {
        "data": lambda: make_data(out, work),
        "train": lambda: {
            **train_models(
                configs.MODELS, work / "train_data", work / "runs", out / "models", args.only
            ),
            **train_models(
                configs.BACKBONE_MODELS,
                work / "train_data",
                work / "runs",
                out / "models",
                args.only,
            ),
            **train_models(
                configs.BBOX_MODELS, work / "train_data", work / "runs", out / "models", args.only
            ),
        },
        "predict": lambda: make_goldens(out, repo, args.only),
        "settings": lambda: make_settings_goldens(out, repo, args.only),
        "export": lambda: make_exports(out, repo, work, args.only),
        "score": lambda: score_goldens(out),
        "lab_data": lambda: make_lab_data(work),
        "lab_train": lambda: train_models(
            configs.LAB_SPECS,
            work / "lab_train_data",
            work / "lab_runs",
            out / "lab_models",
            args.only,
        ),
    }
    for stage in STAGES + LAB_STAGES:
        if stage not in args.stages:
            continue
        start = time.perf_counter()
        result = handlers[stage]()
        # Read again: another run (say, lab models trained in parallel) may have written it.
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        manifest["sleap_nn_version"] = sleap_nn.__version__
        manifest["sleap_io_version"] = sio.__version__
        manifest.setdefault("stage_seconds", {})
        manifest.setdefault(stage, {}).update(result)
        manifest["stage_seconds"][stage] = round(time.perf_counter() - start, 1)
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
