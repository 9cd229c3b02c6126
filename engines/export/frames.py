"""The frames an export is verified on, and where they come from.

A check means most on frames where the model finds animals, so the candidate
frames are taken, in this order, from:

1. the caller (`verify_frames=`: frames spread over the whole video about to be
   run, or over `sleap-live export --verify-video`'s; see
   `sleap_live.stream.runner.spread_frames`);
2. the model directories' own training labels, the `labels_gt.train.N.slp` /
   `labels_gt.val.N.slp` files `sleap-nn train` writes (`labels_train_gt_N.slp`
   in older versions), then the labels files its `training_config.yaml` names
   (`data_config.train_labels_path`, `val_labels_path`; as written, else relative
   to the model directory): user-labelled frames of the first labelled video that
   is still on disk, where it was recorded or, moved with its labels, beside them;
3. synthetic frames (`sample_frames`), which only toy models tend to find
   anything in.

and the torch model then looks for animals in them, a few frames at a time and
in their order (the spread samples cover the whole video first, then fill in the
gaps), until it has `FRAMES_WANTED` frames with animals or `SEARCH_SECONDS` have
passed (`with_animals`). The check runs on the frames with animals it found; where
it found none, it runs on the first candidates all the same: the graph must still
agree with torch there, and the run goes on with a one-line note
(`VerificationFrames.note`) that its detections were not exercised. A valid model
is never refused because the frames at hand show no animals.

The frames are checked as two batches: up to two frames at their own size, and
three frames grown to a larger, odd-sized canvas by reflecting their own pixels
about the bottom and right edges. Different batch sizes and an odd size that is a
multiple of no stride make values that tracing froze from a shape show up. The
margin is image, not a flat fill: a flat margin makes a briefly trained model's
maps flat there too, and on a plateau two runtimes pick different cells of equal
value (float rounding), which says nothing about the export.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np

from sleap_live.engines.errors import ExportError, ModelConfigError
from sleap_live.engines.host.frames import (
    DeferredFrames,
    VideoFrames,
    convert_channels,
    given_frames,
)
from sleap_live.engines.load.training_config import read_yaml

# Frames read from training labels, and the size of the synthetic ones.
FRAMES_WANTED = 5
SYNTHETIC_SIZE = (240, 320)
# The search for frames with animals: frames per torch batch, and the time after
# which it stops looking (it always looks at one batch). A few seconds: the search
# runs once, before a model's first export is cached.
SEARCH_BATCH = 4
SEARCH_SECONDS = 3.0
# Rows and columns added for the second check size (one more where needed to make
# the size odd).
GROWTH = (23, 37)
TRAINING_CONFIG = "training_config.yaml"
TRAINING_LABELS = (
    "labels_gt.train.*.slp",
    "labels_gt.val.*.slp",
    "labels_train_gt_*.slp",
    "labels_val_gt_*.slp",
)
# What to do instead, in Python and on the `sleap-live export` command line.
GIVE_HINT = "give frames that show animals (verify_frames=, --verify-video VIDEO)"
SKIP_HINT = "skip verification (verify=False, --no-verify)"

# Animals found per frame of a uint8 (B, H, W, C) batch (the torch model's).
Detect = Callable[[np.ndarray], Sequence[int]]


@attrs.frozen
class VerificationFrames:
    """Frames to verify an export on.

    Attributes:
        frames: uint8 (N, H, W, C) frames with the model's channel count.
        source: where they came from, for the metadata and the note.
        searched: how many candidate frames the model looked for animals in
            (`with_animals`); 0 before the search.
        animals: whether the model found animals in the frames (all of them, after
            `with_animals`); None before the search.
    """

    frames: np.ndarray
    source: str
    searched: int = 0
    animals: bool | None = None

    def note(self, label: str) -> str | None:
        """What the check could and could not prove, in one line, where the search
        found no animals; None otherwise."""
        if self.animals is not False:
            return None
        return (
            f"verified the export of {label} on {len(self.frames)} frames without animals "
            f"(none in the {self.searched} looked at, from {self.source}): the graph agrees "
            "with torch on them, but its detections were not exercised; to check them, "
            f"{GIVE_HINT}"
        )


def verification_frames(
    channels: int,
    given: np.ndarray | Sequence[np.ndarray] | DeferredFrames | None = None,
    model_dirs: Sequence[str | Path] = (),
) -> VerificationFrames:
    """The frames to verify on, from the first source that has any (module docstring).

    Args:
        channels: the model's input channel count; frames are converted to it.
        given: uint8 (N, H, W, C) frames (`VideoFrames` name their video, and the
            note and the metadata then name it too), a sequence of such batches of
            one frame size, `DeferredFrames` (read now), or None.
        model_dirs: the model directories whose training labels to look in.

    Raises:
        ValueError: `given` frames are not uint8 (N, H, W, C) with 1 or 3 channels,
            or not all of one size.
        ExportError: a training labels file exists but cannot be read.
    """
    given = given_frames(given)
    if given is not None:
        frames = convert_channels(_stacked(given), channels)
        video = given.video if isinstance(given, VideoFrames) else None
        source = "the given frames" if video is None else f"the video {video}"
        return VerificationFrames(frames, source)
    for model_dir in model_dirs:
        found = _training_label_frames(Path(model_dir))
        if found is not None:
            frames, path = found
            return VerificationFrames(
                convert_channels(frames, channels), f"the training labels {path}"
            )
    where = f" in {', '.join(map(str, model_dirs))}" if model_dirs else ""
    return VerificationFrames(
        sample_frames(FRAMES_WANTED, *SYNTHETIC_SIZE, channels, seed=0),
        f"synthetic frames, as there are no training labels with their video on disk{where}",
    )


def with_animals(
    candidates: VerificationFrames,
    detect: Detect,
    *,
    budget_s: float = SEARCH_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> VerificationFrames:
    """Up to `FRAMES_WANTED` of the candidates in which `detect` finds animals.

    The candidates are looked at in order, `SEARCH_BATCH` at a time, until enough
    frames with animals are found or `budget_s` seconds have passed (after the
    first batch). Where none shows animals, the first `FRAMES_WANTED` candidates,
    marked `animals=False`.
    """
    frames = candidates.frames
    found: list[np.ndarray] = []
    searched = 0
    deadline = clock() + budget_s
    while searched < len(frames) and len(found) < FRAMES_WANTED:
        if searched and clock() > deadline:
            break
        batch = frames[searched : searched + SEARCH_BATCH]
        found.extend(frame for frame, count in zip(batch, detect(batch), strict=True) if count)
        searched += len(batch)
    if found:
        picked = np.stack(found[:FRAMES_WANTED])
        return attrs.evolve(candidates, frames=picked, searched=searched, animals=True)
    return attrs.evolve(
        candidates,
        frames=np.ascontiguousarray(frames[:FRAMES_WANTED]),
        searched=searched,
        animals=False,
    )


def check_batches(frames: np.ndarray) -> list[np.ndarray]:
    """The two check batches made from (N, H, W, C) frames (see the module docstring)."""
    count, height, width, _ = frames.shape
    first = frames[: min(count, 2)]
    picked = frames[[(2 + index) % count for index in range(3)]]
    grown = [
        size + growth + (size + growth + 1) % 2
        for size, growth in zip((height, width), GROWTH, strict=True)
    ]
    margins = ((0, 0), (0, grown[0] - height), (0, grown[1] - width), (0, 0))
    canvas = np.pad(picked, margins, mode="reflect" if min(height, width) > 1 else "edge")
    return [np.ascontiguousarray(first), canvas]


def sample_frames(batch: int, height: int, width: int, channels: int, seed: int = 0) -> np.ndarray:
    """Deterministic synthetic frames: a smooth background with a few bright blobs.

    Returns:
        uint8 array of shape (batch, height, width, channels).
    """
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    frames = np.empty((batch, height, width, channels), np.uint8)
    for index in range(batch):
        image = 50 + 25 * np.sin(cols / 17 + index) * np.cos(rows / 23)
        for _ in range(int(rng.integers(2, 6))):
            centre_row, centre_col = rng.uniform(0.15, 0.85, 2) * (height, width)
            sigma_row, sigma_col = rng.uniform(3, 12, 2)
            image = image + rng.uniform(120, 200) * np.exp(
                -((rows - centre_row) ** 2) / (2 * sigma_row**2)
                - (cols - centre_col) ** 2 / (2 * sigma_col**2)
            )
        tint = rng.uniform(0.8, 1.0, channels)
        noisy = image[..., None] * tint + rng.normal(0, 3, (height, width, channels))
        frames[index] = np.clip(noisy, 0, 255).astype(np.uint8)
    return frames


def _stacked(given: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    batches = [given] if isinstance(given, np.ndarray) else [np.asarray(b) for b in given]
    for batch in batches:
        if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[-1] not in (1, 3):
            raise ValueError(
                "verify_frames: expected uint8 (N, H, W, C) frames with 1 or 3 channels, "
                f"got {batch.dtype} {batch.shape}"
            )
    if not sum(len(batch) for batch in batches):
        raise ValueError("verify_frames: no frames given")
    shapes = sorted({batch.shape[1:] for batch in batches})
    if len(shapes) != 1:
        raise ValueError(
            f"verify_frames: expected frames of one size and channel count, got {shapes}"
        )
    return np.concatenate(batches)


def _configured_labels(model_dir: Path) -> list[Path]:
    """The labels files the model directory's training config names, where they exist."""
    try:
        config = read_yaml(model_dir / TRAINING_CONFIG)
    except ModelConfigError:
        return []  # no config here, or one the model loader reports on
    data = config.get("data_config") if isinstance(config, dict) else None
    if not isinstance(data, dict):
        return []
    named: list[str] = []
    for key in ("train_labels_path", "val_labels_path"):
        value = data.get(key)
        named.extend([value] if isinstance(value, str) else value or [])
    found = []
    for name in named:
        if not isinstance(name, str):
            continue
        for candidate in (Path(name), model_dir / name, model_dir / Path(name).name):
            if candidate.is_file():
                found.append(candidate.resolve())
                break
    return found


def _training_label_frames(model_dir: Path) -> tuple[np.ndarray, Path] | None:
    """Up to `FRAMES_WANTED` user-labelled frames of the first video still on disk."""
    paths = [path for pattern in TRAINING_LABELS for path in sorted(model_dir.glob(pattern))]
    paths += [path for path in _configured_labels(model_dir) if path not in paths]
    if not paths:
        return None
    import sleap_io as sio

    for path in paths:
        try:
            labels = sio.load_slp(str(path))
        except (OSError, KeyError, ValueError) as error:
            raise ExportError(
                f"{path}: cannot read these training labels for verification ({error}); "
                f"{GIVE_HINT}, or {SKIP_HINT}"
            ) from error
        for video in labels.videos:
            if not video.exists():
                # Moved with its labels: a video of that name beside them.
                beside = path.parent / Path(str(video.filename)).name
                if not beside.is_file():
                    continue
                video.replace_filename(str(beside))
            labelled = [frame for frame in labels.find(video) if frame.has_user_instances]
            labelled = labelled[:FRAMES_WANTED]
            if labelled:
                images = [np.asarray(frame.image, np.uint8) for frame in labelled]
                return np.stack([image.reshape(*image.shape[:2], -1) for image in images]), path
    return None
