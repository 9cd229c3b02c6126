"""What the live preview sends its pages: the frame's poses (and its rules' states),
the dashboard's figures, the skeleton, the experiment's regions and the JPEG, gathered
into one `Snapshot` at a time (`Snapshots`).

The server that sends them is `sleap_live.stream.preview`'s; these are plain values
(JSON-ready dicts and bytes), made in the preview's thread, off the pipeline's.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
from sleap_io import PredictedSegmentationMask

from sleap_live.engines.types import FrameMasks, ModelInfo
from sleap_live.stream.consumers import LatestFrame
from sleap_live.stream.experiment.experiment import Experiment
from sleap_live.stream.experiment.overlay import readers
from sleap_live.stream.ring import RingBuffer
from sleap_live.stream.stats import PipelineStats
from sleap_live.stream.types import PoseRecord

JPEG_QUALITY = 80

# The figures of `PipelineStats` the page shows (those of the terminal dashboard).
STATS_FIELDS = (
    "policy",
    "batch_size",
    "running",
    "elapsed",
    "frames_total",
    "frames_captured",
    "frames_processed",
    "frames_dropped",
    "fps",
    "capture_fps",
    "latency_p50",
    "latency_p99",
    "engine_latency_p50",
    "engine_latency_p99",
    "instances_last_frame",
    "queue_depths",
)


@attrs.frozen(eq=False)
class Snapshot:
    """What the pages are sent at one moment.

    Attributes:
        tick: counts snapshots taken, from 1.
        stats: the `stats_message` of the pipeline's stats.
        frame: the `frame_message` of the newest frame, None before the first.
        jpeg: that frame's image, encoded; None before the first.
        finished: the run had ended (its ring was closed) when this was taken.
    """

    tick: int
    stats: dict[str, Any]
    frame: dict[str, Any] | None
    jpeg: bytes | None
    finished: bool

    def message(self, with_frame: bool = True) -> str:
        """The JSON text message for the pages; `frame` is null without `with_frame`."""
        return json.dumps(
            {
                "finished": self.finished,
                "stats": self.stats,
                "frame": self.frame if with_frame else None,
            },
            allow_nan=False,
        )


class Snapshots:
    """Makes `Snapshot`s from a pipeline's ring, frame slot and stats; one thread only.

    An image is encoded once, the first time it is the newest at a snapshot.

    Args:
        ring: the pipeline's ring buffer, where the poses are read.
        frames: the slot the emit stage fills.
        get_stats: the pipeline's current stats.
        rules: the names of the run's experiment's rules, in the file's order.
    """

    def __init__(
        self,
        ring: RingBuffer,
        frames: LatestFrame,
        get_stats: Callable[[], PipelineStats],
        rules: Sequence[str] = (),
    ) -> None:
        self._ring = ring
        self._rules = tuple(rules)
        self._frames = frames
        self._get_stats = get_stats
        self._tick = 0
        self._frame: dict[str, Any] | None = None
        self._jpeg: bytes | None = None

    def take(self) -> Snapshot:
        """The pipeline now: stats, and the newest frame with its poses."""
        # Read before the frame: a closed ring's last frame is in the slot already.
        finished = self._ring.closed
        stats = stats_message(self._get_stats())
        newest = self._frames.get()
        if newest is not None and (self._frame is None or newest[0] != self._frame["sequence"]):
            sequence, image = newest
            record = self._ring.read(sequence)
            # A record overwritten since (a ring's worth of frames later) waits for the next.
            if record is not None:
                pixels = host_image(image)
                self._jpeg = encode_jpeg(pixels)
                self._frame = frame_message(sequence, record, pixels.shape, self._rules)
        self._tick += 1
        return Snapshot(self._tick, stats, self._frame, self._jpeg, finished)

    @property
    def finished(self) -> bool:
        """Whether the run has ended (its ring is closed)."""
        return self._ring.closed


def host_image(image: Any) -> np.ndarray:
    """A frame's (H, W, C) uint8 image as a numpy array (a device tensor is copied)."""
    if isinstance(image, np.ndarray):
        return image
    return np.asarray(image.cpu().numpy())


def encode_jpeg(image: np.ndarray) -> bytes:
    """JPEG (`JPEG_QUALITY`) of an (H, W, 1) gray or (H, W, 3) RGB uint8 image."""
    from PIL import Image

    pixels = image[:, :, 0] if image.shape[2] == 1 else image
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, "JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def frame_message(
    sequence: int, record: PoseRecord, shape: tuple[int, ...], rules: Sequence[str] = ()
) -> dict[str, Any]:
    """A frame's poses for the page: per instance its points (null where missing),
    score and track (identity; -1 for none); a box detector's boxes (x1, y1, x2, y2
    and score each); a segmentation model's masks (`mask_messages`); each of `rules`
    (the experiment's) on or off once the frame was decided (`PoseRecord.rules_on`;
    empty without an experiment)."""
    poses = record.poses
    instances = [
        {
            "points": [_point(x, y) for x, y in poses.points[i].tolist()],
            "score": _number(float(poses.instance_scores[i])),
            "track": int(poses.identities[i]),
        }
        for i in range(poses.n_instances)
    ]
    boxes = poses.boxes
    return {
        "sequence": sequence,
        "frame_index": record.frame_index,
        "source_id": record.source_id,
        "height": int(shape[0]),
        "width": int(shape[1]),
        "instances": instances,
        "boxes": []
        if boxes is None
        else [
            {"xyxy": box, "score": score}
            for box, score in zip(boxes.boxes.tolist(), boxes.scores.tolist(), strict=True)
        ],
        "masks": [] if poses.masks is None else mask_messages(poses.masks),
        "rules": dict(zip(rules, record.rules_on, strict=True)),
    }


def mask_messages(masks: FrameMasks) -> list[dict[str, Any]]:
    """A frame's masks for the page, each at the model's output stride (a few thousand
    pixels, so a message stays small): its ``rows`` and ``columns``, its ``scale`` (x,
    y) to frame pixels (frame = mask / scale), its ``score``, and its pixels as
    ``runs``: alternate lengths of background and mask, row by row from the top left,
    starting with background (sleap-io's run-length encoding, as the .slp stores it)."""
    return [
        {
            "rows": int(mask.shape[0]),
            "columns": int(mask.shape[1]),
            "scale": scale,
            "score": score,
            "runs": PredictedSegmentationMask.from_numpy(mask).rle_counts.tolist(),
        }
        for mask, score, scale in zip(
            masks.masks, masks.scores.tolist(), masks.scales.tolist(), strict=True
        )
    ]


def stats_message(stats: PipelineStats) -> dict[str, Any]:
    """The dashboard's figures of `stats`, as JSON values (None stays null)."""
    message = {name: getattr(stats, name) for name in STATS_FIELDS}
    message["queue_depths"] = dict(stats.queue_depths)
    return message


def skeleton_message(info: ModelInfo) -> dict[str, Any]:
    """What the page needs to draw the model's instances, in the colours of `sleap-live
    render` and overlay recordings (their default palette, by track or by instance)."""
    from sleap_live.engines.palette import palette_hex

    return {
        "nodes": list(info.skeleton.node_names),
        "edges": [list(edge) for edge in info.skeleton.edges],
        "tracks": list(info.class_names),
        "palette": palette_hex(),
    }


def experiment_message(experiment: Experiment | None) -> dict[str, Any] | None:
    """What the page needs to draw an experiment as `sleap-live render --experiment`
    does: its rules' names in the file's order, and each region's shape in frame
    pixels (``shape``: ``rectangle`` x0, y0, x1, y1; ``ellipse`` cx, cy, rx, ry and
    angle, degrees counter-clockwise on screen; ``polygon`` vertices) with the rules
    reading it; None without an experiment."""
    if experiment is None:
        return None
    readers_of = readers(experiment)
    return {
        "rules": [rule.name for rule in experiment.rules],
        "regions": [
            {
                "name": name,
                "shape": type(region).__name__.lower(),
                **attrs.asdict(region),
                "rules": readers_of[name],
            }
            for name, region in experiment.regions.items()
        ],
    }


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def _point(x: float, y: float) -> list[float] | None:
    return None if math.isnan(x) or math.isnan(y) else [x, y]
