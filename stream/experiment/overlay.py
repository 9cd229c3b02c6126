"""An experiment drawn on frames: its regions' outlines and each rule's state.

`ExperimentOverlay` draws, on an RGB frame, the outline of every region (green while a
rule reading it is on, amber otherwise) and one square per rule along the top-left
corner, in the order of the file (green: on, grey: off). After a run a rule's state
on a frame comes from the run's events (`Labels.events` of its .slp: a rule is on over
each of its events' spans), so an overlay drawn after a rehearsal shows exactly what it
decided (`sleap-live render POSES.slp -o overlay.mp4 --experiment exp.yaml`); during
a run, from each record's `PoseRecord.rules_on` (`draw`: the live overlay recording).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from sleap_live.stream.experiment.experiment import (
    Ellipse,
    Experiment,
    InRegion,
    Polygon,
    Rectangle,
    Region,
    leaves,
)

ON = (40, 220, 60)
OFF_REGION = (255, 190, 0)
OFF_RULE = (90, 90, 90)
# Side and spacing (px) of the rules' state squares.
SQUARE, GAP = 8, 4


def outline(region: Region) -> np.ndarray:
    """(points, 2) xy points along the region's edge, about half a pixel apart."""
    if isinstance(region, Rectangle):
        x0, y0, x1, y1 = region.x0, region.y0, region.x1, region.y1
        return _along(np.asarray([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], np.float64))
    if isinstance(region, Polygon):
        return _along(np.asarray(region.vertices, np.float64))
    assert isinstance(region, Ellipse)
    steps = max(16, int(4 * math.pi * max(region.rx, region.ry)))
    t = np.linspace(0, 2 * math.pi, steps, endpoint=False)
    u, v = region.rx * np.cos(t), region.ry * np.sin(t)
    turn = math.radians(region.angle)
    # Back from the ellipse's axes to the frame's (the inverse of rules' rotation).
    x = region.cx + u * math.cos(turn) + v * math.sin(turn)
    y = region.cy - u * math.sin(turn) + v * math.cos(turn)
    return np.stack([x, y], axis=1)


def _along(vertices: np.ndarray) -> np.ndarray:
    """Points every half pixel along the closed path through `vertices`."""
    ends = np.roll(vertices, -1, axis=0)
    parts = []
    for start, end in zip(vertices, ends, strict=True):
        steps = max(2, int(2 * np.hypot(*(end - start))) + 1)
        parts.append(start + np.linspace(0, 1, steps)[:, None] * (end - start))
    return np.concatenate(parts)


class ExperimentOverlay:
    """Draws an experiment's regions and its rules' states on frames.

    Args:
        spans: each rule's spans of frames it was on (inclusive), by rule name.
    """

    def __init__(
        self, experiment: Experiment, spans: Mapping[str, Iterable[tuple[int, int]]]
    ) -> None:
        self._rules = [rule.name for rule in experiment.rules]
        self._spans = {name: list(spans.get(name, ())) for name in self._rules}
        self._regions = {name: outline(region) for name, region in experiment.regions.items()}
        self._readers = readers(experiment)

    def on(self, frame_index: int) -> dict[str, bool]:
        """Each rule's state on the frame."""
        return {
            name: any(start <= frame_index <= end for start, end in spans)
            for name, spans in self._spans.items()
        }

    def __call__(self, image: np.ndarray, frame_index: int) -> np.ndarray:
        """A copy of `image` (H, W, 3 uint8) with the regions and the frame's states drawn."""
        states = self.on(frame_index)
        return self.draw(image, [states[name] for name in self._rules])

    def draw(self, image: np.ndarray, rules_on: Sequence[bool]) -> np.ndarray:
        """A copy of `image` (H, W, 1 or 3 uint8) as RGB with the regions drawn and each
        rule's state given in the file's order (`PoseRecord.rules_on`)."""
        out = np.array(image)
        if out.shape[2] == 1:
            out = np.repeat(out, 3, axis=2)
        on = dict(zip(self._rules, rules_on, strict=True))
        height, width = out.shape[:2]
        for name, points in self._regions.items():
            colour = ON if any(on[rule] for rule in self._readers[name]) else OFF_REGION
            xy = np.rint(points).astype(np.int64)
            inside = (xy[:, 0] >= 0) & (xy[:, 0] < width) & (xy[:, 1] >= 0) & (xy[:, 1] < height)
            out[xy[inside, 1], xy[inside, 0]] = colour
        for i, name in enumerate(self._rules):
            left = GAP + i * (SQUARE + GAP)
            out[GAP : GAP + SQUARE, left : left + SQUARE] = ON if on[name] else OFF_RULE
        return out


def readers(experiment: Experiment) -> dict[str, list[str]]:
    """The names of the rules reading each region, by region."""
    return {
        name: [
            rule.name
            for rule in experiment.rules
            if any(isinstance(leaf, InRegion) and leaf.region == name for leaf in leaves(rule.when))
        ]
        for name in experiment.regions
    }


def spans_of(events: Iterable[object]) -> dict[str, list[tuple[int, int]]]:
    """Each rule's spans from sleap-io events (`Labels.events`)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for event in events:
        name = event.type.name  # type: ignore[attr-defined]
        spans.setdefault(name, []).append((int(event.start_frame), int(event.end_frame)))  # type: ignore[attr-defined]
    return spans
