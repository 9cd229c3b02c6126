"""Poses drawn on frames: the skeleton's edges and nodes, coloured per track, instance or node;
a box detector's boxes as rectangles with their scores; a segmentation model's masks as a
translucent fill under them.

Drawing is sleap-io's (`sleap_io.rendering.core.render_frame`,
`sleap_io.rendering.draw_bboxes` on skia, and `sleap_io.rendering.draw_masks`); this module
holds the style a user picks and turns one frame's poses into the arguments it takes.
Both `sleap-live render` (a .slp on its video) and live overlay recordings use it.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence

import attrs
import numpy as np
from sleap_io import BoundingBox, PredictedBoundingBox, PredictedSegmentationMask, SegmentationMask
from sleap_io.rendering import draw_bboxes
from sleap_io.rendering import draw_masks as fill_masks
from sleap_io.rendering.colors import PaletteName, get_palette
from sleap_io.rendering.core import render_frame
from sleap_io.rendering.shapes import MarkerShape

from sleap_live.engines.palette import DEFAULT_PALETTE
from sleap_live.engines.types import FrameBoxes, FrameMasks

# "auto": by track when the poses have tracks, else by instance.
COLOR_SCHEMES = ("auto", "track", "instance", "node")
PALETTES: tuple[str, ...] = typing.get_args(PaletteName)
MARKER_SHAPES: tuple[str, ...] = typing.get_args(MarkerShape)
# Opacity of a mask's fill: the animal stays visible under it.
MASK_ALPHA = 0.4


@attrs.frozen
class OverlayStyle:
    """How poses are drawn.

    Attributes:
        color_by: "track" (one colour per track, the same in every frame), "instance"
            (by position in the frame), "node" (one colour per body part) or "auto"
            (by track when the poses have tracks, else by instance).
        palette: a sleap-io palette name (`PALETTES`).
        marker_size: radius of the node markers in pixels.
        marker_shape: one of `MARKER_SHAPES`.
        line_width: width of the edges in pixels.
    """

    color_by: str = attrs.field(default="auto", validator=attrs.validators.in_(COLOR_SCHEMES))
    palette: str = attrs.field(default=DEFAULT_PALETTE, validator=attrs.validators.in_(PALETTES))
    marker_size: float = attrs.field(default=4.0, validator=attrs.validators.gt(0))
    marker_shape: str = attrs.field(default="circle", validator=attrs.validators.in_(MARKER_SHAPES))
    line_width: float = attrs.field(default=2.0, validator=attrs.validators.gt(0))

    def resolved(self, has_tracks: bool) -> OverlayStyle:
        """This style with "auto" replaced by what it means for poses with or without tracks."""
        if self.color_by != "auto":
            return self
        return attrs.evolve(self, color_by="track" if has_tracks else "instance")


@attrs.frozen
class SkeletonLayout:
    """What drawing needs of a skeleton: its node names and edges as node index pairs."""

    node_names: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]


def draw_poses(
    image: np.ndarray,
    instances: Sequence[np.ndarray],
    skeleton: SkeletonLayout,
    style: OverlayStyle,
    *,
    track_indices: Sequence[int] | None = None,
    n_tracks: int = 0,
) -> np.ndarray:
    """A copy of `image` with `instances` drawn on it.

    Args:
        image: (H, W, 1 or 3) uint8 frame (grey or RGB).
        instances: one (n_nodes, 2) array of x, y pixel coordinates per instance;
            NaN where a node was not found (nothing is drawn there).
        skeleton: node names and edges.
        style: a resolved style (no "auto", see `OverlayStyle.resolved`).
        track_indices: each instance's track, as an index into the file's tracks;
            used when colouring by track.
        n_tracks: how many tracks the file has, so colours stay fixed across frames.

    Returns:
        (H, W, 3) uint8 RGB frame.
    """
    if style.color_by == "auto":
        raise ValueError("resolve the style's colour scheme first (OverlayStyle.resolved)")
    drawn = render_frame(
        image,
        [np.asarray(points, dtype=np.float64) for points in instances],
        list(skeleton.edges),
        list(skeleton.node_names),
        color_by=style.color_by,
        palette=style.palette,
        marker_shape=style.marker_shape,
        marker_size=style.marker_size,
        line_width=style.line_width,
        track_indices=None if track_indices is None else list(track_indices),
        n_tracks=n_tracks,
    )
    return np.ascontiguousarray(drawn)


def draw_boxes(image: np.ndarray, boxes: Sequence[BoundingBox], style: OverlayStyle) -> np.ndarray:
    """A copy of `image` (H, W, 1 or 3 uint8) as RGB with `boxes` drawn (a predicted
    box with its score), coloured by their place in the frame (a box detector's
    boxes have no tracks)."""
    drawn = _rgb_copy(image)
    if not boxes:
        return drawn
    colors = get_palette(style.palette, len(boxes))
    return np.ascontiguousarray(
        draw_bboxes(drawn, list(boxes), colors=colors, line_width=round(style.line_width))
    )


def predicted_boxes(boxes: FrameBoxes) -> list[PredictedBoundingBox]:
    """A frame's boxes as sleap-io's, with their scores (categories are not drawn)."""
    return [
        PredictedBoundingBox(*(float(v) for v in box), score=float(score))
        for box, score in zip(boxes.boxes, boxes.scores, strict=True)
    ]


def draw_masks(
    image: np.ndarray, masks: Sequence[SegmentationMask], style: OverlayStyle
) -> np.ndarray:
    """A copy of `image` (H, W, 1 or 3 uint8) as RGB with the pixels of `masks` filled
    translucent (`MASK_ALPHA`), each mask scaled to frame pixels by its own scale and
    offset, coloured by its place in the frame as boxes are."""
    drawn = _rgb_copy(image)
    if not masks:
        return drawn
    colors = get_palette(style.palette, len(masks))
    return fill_masks(drawn, list(masks), colors=colors, alpha=MASK_ALPHA)


def predicted_masks(masks: FrameMasks) -> list[PredictedSegmentationMask]:
    """A frame's masks as sleap-io's, as the .slp holds them (at the output stride, with
    their score and scale; `recovery._mask`)."""
    return [
        PredictedSegmentationMask.from_numpy(
            mask, score=float(score), scale=(float(scale[0]), float(scale[1]))
        )
        for mask, score, scale in zip(masks.masks, masks.scores, masks.scales, strict=True)
    ]


def _rgb_copy(image: np.ndarray) -> np.ndarray:
    """`image` (H, W, 1 or 3 uint8) as a new RGB array, to draw on."""
    return np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image.copy()
