"""The conditions of an experiment evaluated on one frame's poses, vectorised with numpy.

Every leaf condition (`InRegion`, `Distance`, `Angle`, `Speed`, `Posture`) gives each
frame one of three values: ``TRUE`` (some animal it selects satisfies it), ``FALSE``
(some animal it selects can be judged and none satisfies it) or ``UNKNOWN`` (no
animal it selects can be judged). An animal can be judged when every point the
condition reads is found (not NaN); a named animal absent from the frame cannot.
`Speed` also needs the same animal in the frame before: a track or identity, or the
one animal of a single-animal model (untracked animals of a multi-animal model have
no speed). A `Distance` between two animals is judged on pairs of them.

`Not`, `All` and `AnyOf` combine these as Kleene's three-valued logic: ``not
UNKNOWN`` is ``UNKNOWN``; `All` is FALSE if any part is, else UNKNOWN if any part
is, else TRUE; `AnyOf` is TRUE if any part is, else UNKNOWN if any part is, else
FALSE. Each condition is judged over the animals on its own: ``all: [A, B]`` is true
when some animal satisfies A and some (maybe another) satisfies B; name the animal
in both to require the same one. What a rule does with UNKNOWN is its `missing`
setting (see `timing`).

Leaves of one kind are evaluated together (one numpy expression for every region of
a shape, every within-animal distance, every angle and every speed), which keeps 10
rules on 10 animals to tens of microseconds a frame (scripts/bench_experiment.py).
"""

from __future__ import annotations

import math
from typing import TypeAlias

import numpy as np

from sleap_live.engines.types import FramePoses, ModelInfo
from sleap_live.stream.experiment.experiment import (
    TRACK_NAME,
    All,
    Angle,
    AnyOf,
    Condition,
    Distance,
    Ellipse,
    Experiment,
    InRegion,
    Leaf,
    Not,
    Polygon,
    Rectangle,
    Speed,
)

TRUE, FALSE, UNKNOWN = 1, 0, -1
# A compiled condition: a leaf's number, or ("all" | "any" | "not", its parts).
Tree: TypeAlias = "int | tuple[str, list[Tree]]"
# A selector for any animal; named animals select their identity (>= 0).
ANY_ANIMAL = -2


def animal_identity(name: str | None, info: ModelInfo) -> int:
    """The `FramePoses.identities` value of an animal name (`ANY_ANIMAL` for None)."""
    if name is None:
        return ANY_ANIMAL
    if name in info.class_names:
        return info.class_names.index(name)
    match = TRACK_NAME.match(name)
    if match is None:
        raise ValueError(f"unknown animal {name!r}")
    return int(match.group(1))


class _Columns:
    """Leaves of one kind evaluated per animal: their leaf numbers, animal selectors,
    bounds on the kind's feature, and the kind's own parameters (one row per leaf)."""

    def __init__(self) -> None:
        self.numbers: list[int] = []
        self.selectors: list[int] = []
        self.bounds: list[tuple[float, float]] = []
        self.rows: list[tuple[float, ...]] = []

    def add(self, number: int, selector: int, low: float, high: float, *row: float) -> None:
        self.numbers.append(number)
        self.selectors.append(selector)
        self.bounds.append((low, high))
        self.rows.append(row)

    def table(self, width: int) -> np.ndarray:
        """The parameters as a (width, leaves) array."""
        return np.asarray(self.rows, np.float64).reshape(-1, width).T


class CompiledRules:
    """An experiment's conditions, compiled against a model, evaluated frame by frame.

    Each leaf of a vectorised kind is a column of one (animals, columns) feature
    array: a region's normalised radius (1 at its edge), a polygon's crossing
    parity, a distance, an angle, a speed; NaN where the animal cannot be judged.
    One comparison with every column's bounds and one reduction over the selected
    animals then give every leaf's value. Postures are fitted leaf by leaf.

    It keeps the previous frame's poses (for `Speed`), so give it every frame of one
    source, in order.

    Args:
        experiment: the experiment (checked against `info` with `check_experiment`).
        info: the model the poses come from.
    """

    def __init__(self, experiment: Experiment, info: ModelInfo) -> None:
        nodes = {name: i for i, name in enumerate(info.skeleton.node_names)}
        self._leaves: list[Leaf] = []
        self._roots: list[Tree] = [self._compile(rule.when) for rule in experiment.rules]
        self.n_leaves = len(self._leaves)
        regions, polygons, within, pairs, angles, speeds = (_Columns() for _ in range(6))
        polygon_edges: list[np.ndarray] = []
        self._postures: list[tuple[int, int, np.ndarray, np.ndarray, float]] = []
        for number, leaf in enumerate(self._leaves):
            if isinstance(leaf, InRegion):
                region = experiment.regions[leaf.region]
                selector = animal_identity(leaf.animal, info)
                node = nodes[leaf.node]
                if isinstance(region, Rectangle | Ellipse):
                    # A region's row: its centre, its axes' rotation, the inverse of
                    # its half sizes, and whether it is a rectangle (an unrotated one).
                    if isinstance(region, Rectangle):
                        half_w, half_h = (region.x1 - region.x0) / 2, (region.y1 - region.y0) / 2
                        axes = (region.x0 + half_w, region.y0 + half_h, 1.0, 0.0)
                        row = (*axes, 1 / half_w, 1 / half_h, 1)
                    else:
                        turn = math.radians(region.angle)
                        axes = (region.cx, region.cy, math.cos(turn), math.sin(turn))
                        row = (*axes, 1 / region.rx, 1 / region.ry, 0)
                    regions.add(number, selector, -math.inf, 1.0, node, *row)
                else:
                    assert isinstance(region, Polygon)
                    polygons.add(number, selector, 0.5, math.inf, node)
                    polygon_edges.append(np.asarray(region.vertices, np.float64))
            elif isinstance(leaf, Distance):
                start, end = nodes[leaf.start.node], nodes[leaf.end.node]
                selector = animal_identity(leaf.start.animal, info)
                if leaf.end.animal == "same":
                    within.add(number, selector, leaf.above, leaf.below, start, end)
                else:
                    partner = (
                        ANY_ANIMAL
                        if leaf.end.animal == "other"
                        else animal_identity(leaf.end.animal, info)
                    )
                    pairs.add(number, selector, leaf.above, leaf.below, start, end, partner)
            elif isinstance(leaf, Angle):
                ref = leaf.reference
                point = leaf.point or (0.0, 0.0)
                angles.add(
                    number,
                    animal_identity(leaf.animal, info),
                    math.radians(leaf.above),
                    math.radians(leaf.below),
                    nodes[leaf.start],
                    nodes[leaf.end],
                    nodes[ref[0]] if ref else 0,
                    nodes[ref[1]] if ref else 0,
                    *point,
                    leaf.point is not None,
                )
            elif isinstance(leaf, Speed):
                speeds.add(
                    number,
                    animal_identity(leaf.animal, info),
                    leaf.above,
                    leaf.below,
                    nodes[leaf.node],
                )
            else:
                template = np.asarray([xy for _, xy in leaf.template], np.float64)
                self._postures.append(
                    (
                        number,
                        animal_identity(leaf.animal, info),
                        np.asarray([nodes[node] for node, _ in leaf.template]),
                        template - template.mean(axis=0),
                        leaf.tolerance,
                    )
                )
        kinds = (regions, polygons, within, pairs, angles, speeds)
        # Every column, in kind order: its leaf, selector and bounds.
        self._columns = np.asarray([n for k in kinds for n in k.numbers], np.intp)
        selectors = np.asarray([s for k in kinds for s in k.selectors], np.int64)
        self._selectors = selectors[None, :]
        self._any_animal = (selectors == ANY_ANIMAL)[None, :]
        self._named = not self._any_animal.all()
        low, high = np.asarray([b for k in kinds for b in k.bounds], np.float64).reshape(-1, 2).T
        self._low, self._high = low[None, :], high[None, :]
        self._has = tuple(bool(k.numbers) for k in kinds)
        table = regions.table(8)
        is_rectangle = table[7].astype(bool)
        self._regions = (
            table[0].astype(np.intp),
            table[1] + 1j * table[2],  # centres
            table[3] + 1j * table[4],  # rotations into the region's axes
            table[5],
            table[6],
            is_rectangle,
            # Which shapes there are: the other's formula is skipped.
            bool(is_rectangle.any()),
            bool((~is_rectangle).any()),
        )
        self._polygons = (polygons.table(1)[0].astype(np.intp), *_edges(polygon_edges))
        table = within.table(2).astype(np.intp)
        self._within = (table[0], table[1])
        table = pairs.table(3)
        self._pairs = (
            table[0].astype(np.intp),
            table[1].astype(np.intp),
            table[2][None, :],
            (table[2] == ANY_ANIMAL)[None, :],
        )
        table = angles.table(7)
        is_point = table[6].astype(bool)
        self._angles = (
            *table[:4].astype(np.intp),
            table[4] + 1j * table[5],  # the points
            is_point,
            # Which second directions there are: the other's is not computed.
            bool(is_point.all()),
            bool((~is_point).all()),
        )
        self._speeds = speeds.table(1)[0].astype(np.intp)
        self._previous: tuple[np.ndarray, np.ndarray, float] | None = None
        # "Not the same animal" masks for pairs, by number of animals.
        self._others: dict[int, np.ndarray] = {}

    def _compile(self, condition: Condition) -> Tree:
        """The condition as a tree of leaf numbers (int) and (kind, children) tuples."""
        if isinstance(condition, All | AnyOf):
            kind = "all" if isinstance(condition, All) else "any"
            return (kind, [self._compile(child) for child in condition.conditions])
        if isinstance(condition, Not):
            return ("not", [self._compile(condition.condition)])
        self._leaves.append(condition)
        return len(self._leaves) - 1

    def leaf_values(self, poses: FramePoses, time: float) -> np.ndarray:
        """Each leaf's value on this frame (`TRUE`, `FALSE`, `UNKNOWN`), as int8.

        Args:
            poses: the frame's poses.
            time: the frame's time in seconds (for `Speed`).
        """
        points = np.asarray(poses.points, np.float64)
        ids = np.asarray(poses.identities)
        values = np.full(self.n_leaves, UNKNOWN, np.int8)
        # Points as complex numbers x + iy (a view of the same memory): differences,
        # lengths, rotations and angles each take one numpy call.
        xy = np.ascontiguousarray(points).view(np.complex128)[..., 0]
        if points.shape[0] and self._columns.size:
            feature = self._features(points, xy, ids, time)
            # NaN (cannot be judged) fails every comparison, itself included.
            truth = (feature >= self._low) & (feature <= self._high)
            known = feature == feature
            if self._named:
                selected = (ids[:, None] == self._selectors) | self._any_animal
                truth &= selected
                known &= selected
            # TRUE (1) where some animal satisfies it, FALSE (0) where some can be
            # judged, UNKNOWN (-1) where none can.
            values[self._columns] = np.add(truth.any(axis=0), known.any(axis=0), dtype=np.int8) - 1
        for number, selector, nodes, template, tolerance in self._postures:
            values[number] = _posture(points, ids, selector, nodes, template, tolerance)
        self._previous = (xy, ids, time)
        return values

    def evaluate(self, poses: FramePoses, time: float) -> list[int]:
        """Each rule's condition on this frame: `TRUE`, `FALSE` or `UNKNOWN`."""
        values = self.leaf_values(poses, time).tolist()
        return [_combine(root, values) for root in self._roots]

    def _features(
        self, points: np.ndarray, xy: np.ndarray, ids: np.ndarray, time: float
    ) -> np.ndarray:
        """(animals, columns): each vectorised leaf's feature for each animal; `xy` is
        `points` as complex numbers."""
        parts: list[np.ndarray] = []
        has_regions, has_polygons, has_within, has_pairs, has_angles, has_speeds = self._has
        if has_regions:
            nodes, centres, turns, scale_x, scale_y, is_rectangle, rectangles, ellipses = (
                self._regions
            )
            # Into each region's own axes, scaled so that its edge is at 1.
            local = (xy[:, nodes] - centres) * turns
            u, v = local.real * scale_x, local.imag * scale_y
            if not ellipses:
                parts.append(np.maximum(np.abs(u), np.abs(v)))
            elif not rectangles:
                parts.append(np.hypot(u, v))
            else:
                parts.append(
                    np.where(is_rectangle, np.maximum(np.abs(u), np.abs(v)), np.hypot(u, v))
                )
        if has_polygons:
            nodes, x0, y0, y1, slope = self._polygons
            at = points[:, nodes]
            x, y = at[..., 0, None], at[..., 1, None]
            # Even-odd rule: edges crossed by a ray from the point towards +x.
            crossed = ((y0 > y) != (y1 > y)) & (x < x0 + (y - y0) * slope)
            # Plus 0 * (x + y): NaN where the node was not found.
            parts.append((crossed.sum(axis=-1) & 1) + 0 * (x + y)[..., 0])
        if has_within:
            start, end = self._within
            parts.append(np.abs(xy[:, start] - xy[:, end]))
        if has_pairs:
            start, end, partners, any_partner = self._pairs
            n = len(ids)
            others = self._others.get(n)
            if others is None:
                others = self._others[n] = ~np.eye(n, dtype=bool)[:, :, None]
            d = np.abs(xy[:, None, start] - xy[None, :, end])
            valid = others & ((ids[:, None] == partners) | any_partner)[None]
            # The nearest partner that can be judged (fmin skips NaN; none: NaN).
            parts.append(np.fmin.reduce(np.where(valid, d, np.nan), axis=1))
        if has_angles:
            start, end, ref0, ref1, targets, is_point, points_only, references_only = self._angles
            origin = xy[:, start]
            if points_only:
                second = targets - origin
            elif references_only:
                second = xy[:, ref1] - xy[:, ref0]
            else:
                second = np.where(is_point, targets - origin, xy[:, ref1] - xy[:, ref0])
            # The angle of second / heading, as the angle of second * conj(heading)
            # (arctan2 itself: np.angle's Python wrapper costs 3 us a call).
            turn = second * np.conj(xy[:, end] - origin)
            parts.append(np.abs(np.arctan2(turn.imag, turn.real)))
        if has_speeds:
            parts.append(self._speed(xy, ids, self._speeds, time))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    def _speed(self, xy: np.ndarray, ids: np.ndarray, nodes: np.ndarray, time: float) -> np.ndarray:
        """(animals, speed leaves) px/s from the previous frame; NaN where unknown."""
        speeds = np.full((xy.shape[0], nodes.size), np.nan)
        if self._previous is None:
            return speeds
        before, before_ids, before_time = self._previous
        elapsed = time - before_time
        if not elapsed > 0 or before.shape[0] == 0:
            return speeds
        if xy.shape[0] == 1 and before.shape[0] == 1 and ids[0] == before_ids[0]:
            return np.abs(xy[:, nodes] - before[:, nodes]) / elapsed
        if (
            ids.shape == before_ids.shape
            and ids.size
            and (ids == before_ids).all()
            and ids.min() >= 0
        ):
            # The same tracks in the same rows as the frame before (a tracker's usual
            # order): no matching needed.
            return np.abs(xy[:, nodes] - before[:, nodes]) / elapsed
        same = (ids[:, None] == before_ids[None, :]) & (ids[:, None] >= 0)
        match, found = same.argmax(axis=1), same.any(axis=1)
        speeds[found] = np.abs(xy[found][:, nodes] - before[match[found]][:, nodes]) / elapsed
        return speeds


def _edges(polygons: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(polygons, edges) x0, y0, y1 and dx/dy of every edge, padded with edges that no
    ray crosses (both ends the first vertex)."""
    width = max((len(p) for p in polygons), default=1)
    shape = (len(polygons), width)
    x0, y0, y1, slope = (np.zeros(shape) for _ in range(4))
    for i, vertices in enumerate(polygons):
        start, end = vertices, np.roll(vertices, -1, axis=0)
        n = len(vertices)
        x0[i], y0[i], y1[i] = vertices[0, 0], vertices[0, 1], vertices[0, 1]
        x0[i, :n], y0[i, :n], y1[i, :n] = start[:, 0], start[:, 1], end[:, 1]
        rise = end[:, 1] - start[:, 1]
        # A horizontal edge is never crossed; its slope is never read.
        slope[i, :n] = np.divide(end[:, 0] - start[:, 0], rise, out=np.zeros(n), where=rise != 0)
    return x0, y0, y1, slope


def _combine(node: Tree, values: list[int]) -> int:
    if isinstance(node, int):
        return values[node]
    kind, children = node
    parts = [_combine(child, values) for child in children]
    if kind == "not":
        return parts[0] if parts[0] == UNKNOWN else 1 - parts[0]
    if kind == "all":
        return FALSE if FALSE in parts else UNKNOWN if UNKNOWN in parts else TRUE
    return TRUE if TRUE in parts else UNKNOWN if UNKNOWN in parts else FALSE


def _selected(ids: np.ndarray, selector: int) -> np.ndarray:
    return np.ones(ids.shape, bool) if selector == ANY_ANIMAL else ids == selector


def _verdict(satisfied: np.ndarray, known: np.ndarray) -> int:
    if (satisfied & known).any():
        return TRUE
    return FALSE if known.any() else UNKNOWN


def _posture(
    points: np.ndarray,
    ids: np.ndarray,
    selector: int,
    nodes: np.ndarray,
    template: np.ndarray,
    tolerance: float,
) -> int:
    """Root-mean-square distance to the template after the best rigid fit (2-D Kabsch)."""
    xy = points[_selected(ids, selector)][:, nodes]
    centred = xy - xy.mean(axis=1, keepdims=True)
    # The rotation taking each pose onto the template: angle of sum(conj(p) * t).
    dot = (centred * template).sum(axis=(1, 2))
    cross = (centred[..., 0] * template[:, 1] - centred[..., 1] * template[:, 0]).sum(axis=1)
    turn = np.arctan2(cross, dot)
    cos, sin = np.cos(turn)[:, None], np.sin(turn)[:, None]
    x = centred[..., 0] * cos - centred[..., 1] * sin
    y = centred[..., 0] * sin + centred[..., 1] * cos
    rms = np.sqrt(((x - template[:, 0]) ** 2 + (y - template[:, 1]) ** 2).mean(axis=1))
    return _verdict(rms <= tolerance, ~np.isnan(rms))
