"""`render_slp`: the poses of a .slp drawn on the video it points to, written as a new video.

Frames are decoded in order with `FileSource` (a start frame is reached by seeking),
drawn on by `overlay.draw_poses` (and `draw_boxes`, `draw_masks`) and encoded by
`OverlayWriter`. Every frame of the range is written, with or without poses, so frame
k of the output is frame ``start + k`` of the video.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.stream.errors import SourceError, SourceNotFoundError
from sleap_live.stream.outputs.guard import check_outputs
from sleap_live.stream.outputs.overlay import (
    OverlayStyle,
    SkeletonLayout,
    draw_boxes,
    draw_masks,
    draw_poses,
)
from sleap_live.stream.outputs.overlay_writer import DEFAULT_CODEC, OverlayWriter
from sleap_live.stream.outputs.slp_tables import PoseTableError, check_slp_tables
from sleap_live.stream.sources import FileSource

# Called after each frame with (frames written, frames in the range or None).
Progress = Callable[[int, int | None], None]


@attrs.frozen
class Rendered:
    """What `render_slp` wrote.

    Attributes:
        output: the video written.
        video: the video the poses were drawn on.
        n_frames: frames written.
        n_posed: of those, frames that had poses.
        start: video index of the output's first frame.
    """

    output: Path
    video: Path
    n_frames: int
    n_posed: int
    start: int


def render_slp(
    slp: Path,
    output: Path,
    *,
    style: OverlayStyle | None = None,
    start: int = 0,
    stop: int | None = None,
    video: Path | None = None,
    codec: str = DEFAULT_CODEC,
    progress: Progress | None = None,
    overwrite: bool = False,
    decorate: Callable[[np.ndarray, int], np.ndarray] | None = None,
) -> Rendered:
    """Draw the poses of `slp` on its video, frames `start` to `stop`, into `output`.

    Args:
        slp: the poses (a .slp file with one video).
        output: the video to write (.mp4, .mkv, .avi); written only once complete.
        style: how poses are drawn; None: `OverlayStyle()`'s defaults.
        start: first video frame to write.
        stop: one past the last frame to write; None: to the end of the video.
        video: the video to draw on; None: the one `slp` names, looked for as written
            and then relative to the folder of `slp`.
        codec: a key of `overlay_writer.CODECS`.
        progress: told after each frame how many are written, of how many, and once
            more when the output is closed, with how many it holds (0: not written).
        overwrite: replace an existing `output` (`output_rule.claim_output`).
        decorate: draws more on each frame (an RGB frame and its index in; the frame to
            write out): an experiment's regions and rules (`ExperimentOverlay`).

    Raises:
        SourceNotFoundError: `slp` or its video is missing (naming each path tried).
        SourceError: `slp` is not readable as poses, or holds several videos.
        OutputError: `output` is an input, exists (not `overwrite`) or cannot be written.
        ValueError: a bad range, codec or output suffix.
    """
    labels = _load(slp)
    if len(labels.videos) != 1:
        raise SourceError(
            f"{slp}: holds {len(labels.videos)} videos; render draws on one, "
            "so give a .slp of a single video"
        )
    (labelled_video,) = labels.videos
    video = video if video is not None else _find_video(slp, str(labelled_video.filename))
    check_outputs({"-o": output}, {"POSES.slp": [slp], "VIDEO": [video]}, overwrite=overwrite)
    frames = {frame.frame_idx: frame for frame in labels.labeled_frames}
    tracks = {id(track): index for index, track in enumerate(labels.tracks)}
    skeleton = SkeletonLayout(
        tuple(labels.skeleton.node_names),
        tuple((int(a), int(b)) for a, b in labels.skeleton.edge_inds),
    )
    style = (style or OverlayStyle()).resolved(has_tracks=bool(labels.tracks))
    n_posed = 0
    with FileSource(video, start=start, stop=stop) as source:
        height, width, _ = source.frame_shape
        total = source.n_frames
        writer = OverlayWriter(
            output, source.fps or 30.0, (height, width), codec=codec, overwrite=overwrite
        )
        try:
            with writer:
                for frame in source:
                    labelled = frames.get(frame.index)
                    posed = labelled is not None and bool(
                        labelled.instances or labelled.bboxes or labelled.masks
                    )
                    image = _drawn(np.asarray(frame.image), labelled, skeleton, style, tracks)
                    if decorate is not None:
                        image = decorate(image, frame.index)
                    writer.write(image)
                    n_posed += posed
                    if progress is not None:
                        progress(writer.n_frames_written, total)
        finally:
            # Once more with what the closed file holds (a Ctrl-C keeps the frames
            # drawn so far; an error leaves no file).
            if progress is not None:
                progress(writer.n_frames_written if writer.written else 0, total)
    return Rendered(output, video, writer.n_frames_written, n_posed, start)


def _drawn(
    image: np.ndarray,
    labelled: Any,
    skeleton: SkeletonLayout,
    style: OverlayStyle,
    tracks: dict[int, int],
) -> np.ndarray:
    """`image` as RGB with the instances of `labelled` (a LabeledFrame or None) drawn,
    its boxes (a box detector's, alone or seeding a top-down model's crops) and, under
    both, its masks (a segmentation model's)."""
    if labelled is not None and labelled.masks:
        image = draw_masks(image, labelled.masks, style)
    if labelled is not None and labelled.bboxes:
        image = draw_boxes(image, labelled.bboxes, style)
    if labelled is None or not labelled.instances:
        return np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image
    instances = labelled.instances
    return draw_poses(
        image,
        [instance.numpy()[:, :2] for instance in instances],
        skeleton,
        style,
        # Untracked instances share the colour after the last track's.
        track_indices=[tracks.get(id(instance.track), len(tracks)) for instance in instances],
        n_tracks=len(tracks) + 1,
    )


def _load(slp: Path) -> Any:
    import sleap_io

    if not slp.is_file():
        raise SourceNotFoundError(
            f"{slp}: {'is a folder, not a .slp file' if slp.is_dir() else 'no such file'}"
        )
    try:
        # Its instance and point ranges, before sleap-io cuts one that leaves its
        # table and draws other frames' instances (`slp_tables`).
        check_slp_tables(slp)
    except PoseTableError as error:
        raise SourceError(str(error)) from None
    try:
        return sleap_io.load_slp(os.fspath(slp), open_videos=False)
    except Exception as error:  # h5py and sleap-io raise many kinds for a bad file
        reason = " ".join(str(error).split()) or type(error).__name__
        raise SourceError(f"{slp}: cannot read poses from it: {reason}") from error


def _find_video(slp: Path, filename: str) -> Path:
    """The video `slp` names: as written (absolute, or relative to the working
    directory), else relative to the folder of `slp`, else by its name in that folder."""
    named = Path(filename)
    candidates = [named]
    if not named.is_absolute():
        candidates.append(slp.parent / named)
    candidates.append(slp.parent / named.name)
    tried = list(dict.fromkeys(candidates))
    for path in tried:
        if path.is_file():
            return path
    raise SourceNotFoundError(
        f"{slp}: its video {filename} is missing (looked for "
        f"{', '.join(str(path) for path in tried)}); give the video's path with --video"
    )
