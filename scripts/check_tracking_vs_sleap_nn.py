"""`sleap-live run --tracking` against `sleap-nn predict --tracking`: same model, same video.

Runs both programs on the two-animal test clip with each model given (default: the
top-down and bottom-up test models; a lab-size model of `scripts/fixtures/lab.py`,
`bottomup_384` say, on `--frames` frames of its H.264 clip rendered from its seed),
each with its tracker's defaults, matches their
instances frame by frame (Hungarian on the mean node distance, within 2 px), and
reports the share of matched instances whose track ids agree up to a renaming of
ids (the issue's bar: 99.5 %). sleap-nn runs in its own venv::

    .venv/bin/python scripts/check_tracking_vs_sleap_nn.py \\
        [--snn /work/venvs/snn/bin/sleap-nn] [--keep build/tracking_check] \\
        [--models topdown bottomup bottomup_384 topdown_384] [--frames 1100]

With ``--keep`` the two .slp files stay in that folder.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import sleap_io as sio
from fixtures.lab import LAB_MODELS, write_clip
from scipy.optimize import linear_sum_assignment

ROOT = Path(__file__).resolve().parents[1]
VIDEO = ROOT / "tests" / "data" / "videos" / "multi_gray.mkv"
MODELS = {
    "topdown": [ROOT / "tests/data/models/centroid", ROOT / "tests/data/models/centered_instance"],
    "bottomup": [ROOT / "tests/data/models/bottomup"],
}
LAB = {
    model.name: model
    for model in LAB_MODELS
    if model.model_type != "single_instance" and all(path.is_dir() for path in model.paths)
}
MATCH_PX = 2.0


def tracks_by_frame(path: Path) -> dict[int, list[tuple[np.ndarray, str | None]]]:
    labels = sio.load_slp(str(path))
    return {
        frame.frame_idx: [
            (instance.numpy(), None if instance.track is None else instance.track.name)
            for instance in frame.instances
        ]
        for frame in labels.labeled_frames
    }


def compare(ours: Path, theirs: Path) -> tuple[int, int, int, float]:
    """(instances matched, sleap-nn's instances, ours, share of matched with agreeing ids)."""
    mine, reference = tracks_by_frame(ours), tracks_by_frame(theirs)
    pairs: list[tuple[str | None, str | None]] = []
    for frame, theirs_here in reference.items():
        ours_here = mine.get(frame, [])
        if not ours_here or not theirs_here:
            continue
        with np.errstate(invalid="ignore"):
            cost = np.array(
                [
                    [np.nanmean(np.linalg.norm(a - b, axis=-1)) for b, _ in theirs_here]
                    for a, _ in ours_here
                ]
            )
        cost = np.where(np.isnan(cost), 1e9, cost)
        for row, column in zip(*linear_sum_assignment(cost), strict=True):
            if cost[row, column] <= MATCH_PX:
                pairs.append((ours_here[row][1], theirs_here[column][1]))
    our_names = sorted({str(a) for a, _ in pairs})
    their_names = sorted({str(b) for _, b in pairs})
    overlap = np.zeros((len(our_names), len(their_names)))
    for a, b in pairs:
        if (a is None) == (b is None):
            overlap[our_names.index(str(a)), their_names.index(str(b))] += 1
    rows, columns = linear_sum_assignment(-overlap)
    n_theirs = sum(len(v) for v in reference.values())
    n_ours = sum(len(v) for v in mine.values())
    return len(pairs), n_theirs, n_ours, float(overlap[rows, columns].sum() / max(len(pairs), 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snn", default="/work/venvs/snn/bin/sleap-nn", help="sleap-nn's CLI")
    parser.add_argument(
        "--models", nargs="+", default=sorted(MODELS), choices=sorted(MODELS) + sorted(LAB)
    )
    parser.add_argument("--frames", type=int, default=1100, help="a lab model's clip length")
    parser.add_argument("--keep", type=Path, help="folder for the two .slp files")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="tracking-check-"))
    folder.mkdir(parents=True, exist_ok=True)
    worst = 1.0
    for name in args.models:
        theirs, ours = folder / f"{name}.sleap-nn.slp", folder / f"{name}.sleap-live.slp"
        if name in LAB:
            model_dirs, video = LAB[name].paths, folder / f"{LAB[name].scene}.mp4"
            if not video.exists():
                write_clip(video, LAB[name].scene, args.frames)
        else:
            model_dirs, video = MODELS[name], VIDEO
        models = [arg for path in model_dirs for arg in ("--model_paths", str(path))]
        snn = [args.snn, "predict", "--data_path", str(video), *models]
        snn += ["--output_path", str(theirs), "--device", "cpu", "--tracking"]
        live = [sys.executable, "-m", "sleap_live", "run", str(video)]
        live += [arg for path in model_dirs for arg in ("-m", str(path))]
        live += ["-o", str(ours), "--tracking", "--quiet"]
        for command in (snn, live):
            print("$", " ".join(command), flush=True)
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        matched, n_theirs, n_ours, share = compare(ours, theirs)
        worst = min(worst, share)
        print(
            f"{name}: {matched} instances matched within {MATCH_PX} px "
            f"(sleap-nn {n_theirs}, sleap-live {n_ours}); track ids agree on {share:.2%}",
            flush=True,
        )
    return 0 if worst >= 0.995 else 1


if __name__ == "__main__":
    sys.exit(main())
