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

Leaves of one kind are evaluated together (one numpy call for the lengths of every
region and within-animal distance, a few for every angle, speed, pair or polygon),
which keeps 10 rules on 10 animals to about 40 microseconds a frame
(scripts/bench_experiment.py). A frame with few numbers to compute (a rule or two on
one or two animals) is decided by the same operations on Python floats instead:
there numpy's cost per call is most of the time, the more so on a thread that has
just woken.
"""

from __future__ import annotations

import itertools
import math
from typing import TypeAlias

import attrs
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
    Posture,
    Rectangle,
    Speed,
)

TRUE, FALSE, UNKNOWN = 1, 0, -1
# A compiled condition: a leaf's number, or ("all" | "any" | "not", its parts).
Tree: TypeAlias = "int | tuple[str, list[Tree]]"
# A selector for any animal; named animals select their identity (>= 0).
ANY_ANIMAL = -2
# The most differences and feature values a frame may have for its rules to be
# decided on Python floats rather than by numpy calls (a rectangle on one animal: 2
# and 2; ten rules on ten animals: 440). Measured on a 2-core AMD EPYC (AVX2), the
# two cost about the same at 30 to 40, a thread that has just woken included
# (scripts/bench_experiment.py); below, Python is faster.
SCALAR_NUMBERS = 32


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


# A table column a difference reads: an int is a node's column (this frame's nodes
# first, then the frame before's), a complex a column holding that constant (a
# region's centre, a point, zero) in every row.
Place: TypeAlias = "int | complex"
# table[:, plus] - table[:, minus]: one difference a feature is made from.
Difference: TypeAlias = tuple[Place, Place]
_NOTHING: Difference = (0j, 0j)


@attrs.frozen
class _Column:
    """One vectorised leaf: its number in compile order, the animal it selects, the
    bounds on its feature, the two differences its feature is made from (a pair's:
    its two nodes, each minus zero), and its kind's parameters (a region's rotation
    and scale, a pair's partner, a polygon's vertices)."""

    leaf: int
    selector: int
    low: float
    high: float
    first: Difference
    second: Difference = _NOTHING
    turn: complex = 1 + 0j
    scale: tuple[float, float] = (1.0, 1.0)
    partner: int = ANY_ANIMAL
    vertices: np.ndarray | None = attrs.field(default=None, eq=False)


class _Animals:
    """What depends only on a frame's identities (made again only when they change):
    the tables a frame's points are written to, the positions each difference reads,
    the bounds, and every array a frame's numpy calls write to, with their views taken
    once, so that a frame is a fixed run of numpy calls on preallocated arrays (at ten
    animals a numpy call costs about a microsecond, and a slice or a new array a
    good part of one: scripts/bench_experiment.py).

    Attributes:
        key: the identities' bytes.
        ids: the identities (a copy, of their dtype).
        tracked: every animal has an identity (>= 0).
        table: (slots, animals, table columns) complex: each animal's nodes, the
            constants and a NaN. With speeds there are two slots that swap each
            frame: a frame's nodes are written to one and the frame before's read
            from the other.
        nodes: per slot, its nodes as an (animals, nodes, 2) float view.
        index: per slot, (2, differences, animals) positions in the flattened table
            of each difference's two ends for each animal: the static differences,
            then a pair's (partner, animal) rows, whose partner end is the NaN where
            that animal is no partner (itself, another identity).
        differences: (differences, animals) complex, and views of its blocks.
        feature: (rows, animals) float: each box's second axis (`CompiledRules`),
            then each column's feature; views of its blocks.
        low, high: (rows, animals) each row's bounds; low NaN for an animal the
            row's column does not select.
        margin, spare: (rows, animals) how far inside its bounds each row is.
        turns, scales: each turned row's rotation and each scaled row's x and y
            scale (as its float view), repeated for every animal.
        slope, x0: (polygon edges, animals) each edge's dx/dy and x0.

    The per-row constants are repeated for every animal: numpy broadcasting a
    (rows, 1) array costs 2-3x a call on two arrays of the same shape at this size.
    """

    def __init__(self, rules: CompiledRules, ids: np.ndarray) -> None:
        n, width, nodes = ids.shape[0], rules._width, rules._n_nodes
        slots = 2 if rules._has_speeds else 1
        self.key = ids.tobytes()
        self.ids = ids.copy()
        self.tracked = bool(n and ids.min() >= 0)
        self.table = np.empty((slots, n, width), np.complex128)
        self.table[:, :, nodes:] = rules._constants
        self.flat = self.table.reshape(-1)
        self.nodes = [
            self.table[slot, :, :nodes].view(np.float64).reshape(n, nodes, 2)
            for slot in range(slots)
        ]
        row = np.arange(n) * width
        # [pair, partner, animal]: another animal, of the pair's partner's identity.
        partner = ~np.eye(n, dtype=bool)[None] & (
            (ids[None, :, None] == rules._partners) | rules._any_partner
        )
        pair_ends = [
            np.stack(
                (
                    np.broadcast_to(row + start, (n, n)),
                    np.where(partner[p], (row + end)[:, None], rules._nan),
                )
            )
            for p, (start, end) in enumerate(rules._pair_nodes)
        ]
        self.index = []
        for slot in range(slots):
            # A column of the frame before reads the other slot.
            at = np.where(rules._other, 1 - slot, slot) * (n * width) + rules._static
            ends = [at[:, :, None] + row, *(slot * n * width + e for e in pair_ends)]
            self.index.append(np.concatenate(ends, axis=1).astype(np.intp))
        layout = rules._layout
        d = self.differences = np.empty((self.index[0].shape[1], n), np.complex128)
        self.turned = d[: layout.turned]
        self.scaled = self.turned.view(np.float64)
        self.lengths = d[: layout.lengths]
        self.headings, self.seconds = d[layout.headings], d[layout.seconds]
        self.edges = d[layout.below_start.start : layout.below_end.stop].imag
        self.below_start = d[layout.below_start].imag
        self.node_x = d[layout.below_end].real
        self.pair_differences = d[layout.n_static :]
        rows = rules._n_boxes + rules._n_columns
        f = self.feature = np.empty((rows, n))
        self.feature_lengths = f[: layout.lengths]
        offset = rules._n_boxes
        self.speeds, self.angles, self.pairs, self.polygons = (
            f[offset + s.start : offset + s.stop]
            for s in (rules._speeds, rules._angles, rules._pairs, rules._polygons)
        )
        self.turn = np.empty((rules._angles.stop - rules._angles.start, n), np.complex128)
        pairs = len(rules._pair_nodes)
        self.pair_distances = np.empty((pairs * n, n))
        self.pair_distances3 = self.pair_distances.reshape(pairs, n, n)
        edges = layout.below_start.stop - layout.below_start.start
        self.above = np.empty((2 * edges, n))
        self.above_start, self.above_end = self.above[:edges], self.above[edges:]
        self.crossed = np.empty((edges, n))
        polygons = rules._polygons.stop - rules._polygons.start
        self.crossed3 = self.crossed.reshape(rules._n_edges, polygons, n)
        self.gap = np.empty((edges, n))
        self.slope = np.repeat(rules._slope, n, axis=1)
        self.x0 = np.repeat(rules._x0, n, axis=1)
        self.turns = np.repeat(rules._turns, n, axis=1)
        # [row, animal, x | y]: each animal's u and v scaled.
        self.scales = np.repeat(rules._scales, n, axis=1).reshape(len(rules._scales), 2 * n)
        selected = (ids[None, :] == rules._selectors) | rules._any_animal
        self.low = np.where(selected, rules._low, np.nan)
        self.high = np.repeat(rules._high, n, axis=1)
        self.margin = np.empty((rows, n))
        self.spare = np.empty((rows, n))
        self.first_axis = self.margin[offset : 2 * offset]
        self.second_axis = self.margin[:offset]
        self.columns = self.margin[offset:]
        # Few enough numbers that Python floats beat numpy's cost per call
        # (`CompiledRules._scalar_decisions`), and the same as Python numbers for it.
        self.scalar = self.differences.size + rows * n <= SCALAR_NUMBERS
        self.n = n
        self.ends = [(ends[0].ravel().tolist(), ends[1].ravel().tolist()) for ends in self.index]
        self.bounds = list(zip(self.low.ravel().tolist(), self.high.ravel().tolist(), strict=True))


@attrs.frozen
class _Layout:
    """Where each block of the differences lies: the rows turned and scaled (every
    box's second axis, every box's first, every ellipse and within-animal distance),
    those whose lengths are features (those and the speeds), each angle's heading and
    second direction, each polygon edge's node minus its start and minus i y1, and
    the number of static rows (a pair's rows follow)."""

    turned: int
    lengths: int
    headings: slice
    seconds: slice
    below_start: slice
    below_end: slice
    n_static: int


class CompiledRules:
    """An experiment's conditions, compiled against a model, evaluated frame by frame.

    Each leaf of a vectorised kind is a row of one (rows, animals) feature array: a
    region's normalised radius (1 at its edge; a rectangle's is two rows, one per
    axis), a polygon's crossing parity, a distance, an angle, a speed; NaN where the
    animal cannot be judged. Every feature is made from differences of a frame's
    table (each animal's points as complex numbers x + iy, the frame before's in a
    second slot for speeds, and constants), all gathered by one `take` of
    precomputed positions and one subtraction: a region's is the node minus its
    centre, a distance's its two ends, an angle's its heading and second direction,
    a polygon edge's the node minus the edge's ends, a pair's one animal's node minus
    each partner's. Regions and distances are then turned and scaled (a rectangle's
    second axis turned by -i, so that every region is one length) and their lengths
    taken in one call; each other kind is a few calls on its block. One comparison
    with the bounds and one reduction over the animals then give every leaf's value.
    Every array a frame writes is preallocated per set of identities, so a frame is a
    fixed run of numpy calls (numpy's cost here is its calls, about a microsecond
    each, not their arithmetic on a few hundred numbers: scripts/bench_experiment.py).
    Postures are fitted leaf by leaf.

    It keeps the previous frame's poses (for `Speed`), so give it every frame of one
    source, in order.

    Args:
        experiment: the experiment (checked against `info` with `check_experiment`).
        info: the model the poses come from.
    """

    def __init__(self, experiment: Experiment, info: ModelInfo) -> None:
        nodes = {name: i for i, name in enumerate(info.skeleton.node_names)}
        self._n_nodes = len(nodes)
        leaves: list[Leaf] = []
        roots = [_compile(rule.when, leaves) for rule in experiment.rules]
        # Columns by kind, in the order their blocks take.
        kinds: dict[str, list[_Column]] = {
            kind: [] for kind in ("box", "round", "speed", "angle", "pair", "polygon")
        }
        postures: list[tuple[int, Posture]] = []
        for number, leaf in enumerate(leaves):
            if isinstance(leaf, Posture):
                postures.append((number, leaf))
            else:
                kind, column = _column(number, leaf, experiment, info, nodes)
                kinds[kind].append(column)
        columns = [column for kind in kinds.values() for column in kind]
        # Leaves renumbered: columns first, in block order, then postures, so that
        # the reduction's values are the first leaves' values as they come.
        order = [column.leaf for column in columns] + [number for number, _ in postures]
        renumber = {old: new for new, old in enumerate(order)}
        self._roots = [_renumbered(root, renumber) for root in roots]
        self._n_columns = len(columns)
        ends = np.cumsum([len(kind) for kind in kinds.values()]).tolist()
        _, self._rounds, self._speeds, self._angles, self._pairs, self._polygons = (
            slice(start, end) for start, end in zip([0, *ends[:-1]], ends, strict=True)
        )
        boxes, angles, polygons = kinds["box"], kinds["angle"], kinds["polygon"]
        self._n_boxes = len(boxes)
        # The feature rows: each box's second axis (its v), then the columns.
        rows = boxes + columns
        turned = rows[: self._rounds.stop + len(boxes)]

        # The static differences, in blocks: the turned rows', each speed's; each
        # angle's heading, then its second direction; each polygon edge's node minus
        # its start (x0 + i y0), then minus i y1 (edge-major: edge e of every polygon,
        # then edge e + 1).
        x0, y0, y1, slope = _edges([c.vertices for c in polygons])
        edge_rows: list[Difference] = []
        for y in (y0, y1):
            for e in range(x0.shape[1]):
                for q, column in enumerate(polygons):
                    corner = complex(x0[q, e], y0[q, e]) if y is y0 else complex(0, y1[q, e])
                    edge_rows.append((column.first[0], corner))
        differences = (
            [c.first for c in turned]
            + [c.first for c in kinds["speed"]]
            + [c.first for c in angles]
            + [c.second for c in angles]
            + edge_rows
        )
        edges = len(edge_rows) // 2
        lengths = len(turned) + len(kinds["speed"])
        blocks = np.cumsum([lengths, len(angles), len(angles), edges, edges]).tolist()
        headings, seconds, below_start, below_end = (
            slice(start, end) for start, end in itertools.pairwise(blocks)
        )
        self._layout = _Layout(
            len(turned), lengths, headings, seconds, below_start, below_end, blocks[-1]
        )
        self._slope = slope.T.reshape(-1, 1)
        self._x0 = x0.T.reshape(-1, 1)
        self._n_edges = x0.shape[1]

        # The table's columns: the frame's nodes, the constants, a NaN; a column of the
        # frame before (a node's number + nodes) reads the other slot.
        self._has_speeds = bool(kinds["speed"])
        constants = sorted(
            {p for d in differences for p in d if isinstance(p, complex)} | {0j},
            key=lambda c: (c.real, c.imag),
        )
        places = {c: self._n_nodes + i for i, c in enumerate(constants)}
        self._constants = np.asarray([*constants, complex(math.nan, math.nan)], np.complex128)
        self._nan = self._n_nodes + len(constants)
        self._width = self._n_nodes + self._constants.size

        def place(at: Place) -> int:
            return places[at] if isinstance(at, complex) else at % self._n_nodes

        # (2, static differences): [plus | minus] table columns, and whether each
        # reads the frame before.
        ends_of = [[d[end] for d in differences] for end in (0, 1)]
        self._static = np.asarray([[place(p) for p in end] for end in ends_of], np.intp)
        self._other = np.asarray(
            [[isinstance(p, int) and p >= self._n_nodes for p in end] for end in ends_of]
        ).reshape(2, -1)
        pairs = columns[self._pairs]
        # Each pair's two nodes (a pair's differences are its nodes minus zero).
        self._pair_nodes = [(c.first[0], c.second[0]) for c in pairs]
        partners = np.asarray([c.partner for c in pairs], np.int64)
        self._partners = partners[:, None, None]
        self._any_partner = (partners == ANY_ANIMAL)[:, None, None]
        # A box's second axis (v) is its difference turned by -i, its first (u) not;
        # each keeps one scale and drops the other axis (times 0), so that its length
        # is |u| or |v| exactly.
        n_boxes = len(boxes)
        self._turns = np.asarray(
            [-1j] * n_boxes + [c.turn for c in turned[n_boxes:]], np.complex128
        )[:, None]
        self._scales = np.asarray(
            [(c.scale[1], 0.0) for c in boxes]
            + [(c.scale[0], 0.0) for c in boxes]
            + [c.scale for c in turned[2 * n_boxes :]],
            np.float64,
        ).reshape(-1, 1, 2)
        # Multiplications by 1 skipped.
        self._turned = bool((self._turns != 1).any())
        self._scaled = bool((self._scales != 1).any())
        self._turn_list: list[complex] = self._turns.ravel().tolist()
        self._scale_list: list[tuple[float, float]] = [
            (x, y) for x, y in self._scales.reshape(-1, 2).tolist()
        ]
        self._edge_list: list[tuple[float, float]] = list(
            zip(self._slope.ravel().tolist(), self._x0.ravel().tolist(), strict=True)
        )
        selectors = np.asarray([c.selector for c in rows], np.int64)
        self._selectors = selectors[:, None]
        self._any_animal = (selectors == ANY_ANIMAL)[:, None]
        self._low = np.asarray([c.low for c in rows], np.float64)[:, None]
        self._high = np.asarray([c.high for c in rows], np.float64)[:, None]
        self._postures = [
            (
                animal_identity(leaf.animal, info),
                np.asarray([nodes[node] for node, _ in leaf.template]),
                _centred([xy for _, xy in leaf.template]),
                leaf.tolerance,
            )
            for _, leaf in postures
        ]
        self._animals: _Animals | None = None
        # The last identities (as bytes) taken in another order than they came, and
        # that order (`_animals_of`).
        self._order_key: bytes | None = None
        self._order: np.ndarray | None = None
        # The frame before: its animals, time and the slot of their table holding its
        # nodes (until the frame after next of the same animals is written).
        self._previous: tuple[_Animals, float, int] | None = None

    def leaf_values(self, poses: FramePoses, time: float) -> list[int]:
        """Each leaf's value on this frame (`TRUE`, `FALSE`, `UNKNOWN`), leaves numbered
        columns first (as the compiled rules refer to them).

        Args:
            time: the frame's time in seconds (for `Speed`).
        """
        points = poses.points
        ids = np.asarray(poses.identities)
        animals, order = self._animals_of(ids)
        slot, elapsed = self._before(animals, time) if self._has_speeds else (0, None)
        # Points as complex numbers x + iy: differences, lengths, rotations and angles
        # each take one numpy call. float32 points are exact in float64.
        if order is None:
            np.copyto(animals.nodes[slot], points)
        else:
            np.copyto(animals.nodes[slot], points[order])
        self._previous = (animals, time, slot)
        if points.shape[0] and self._n_columns:
            if animals.scalar:
                best = self._scalar_decisions(animals, slot, elapsed)
            else:
                best = self._decisions(animals, slot, elapsed)
            # The best margin over the animals: >= 0 some animal satisfies it, < 0 some
            # can be judged, NaN none can.
            values = [TRUE if v >= 0 else FALSE if v == v else UNKNOWN for v in best]
        else:
            values = [UNKNOWN] * self._n_columns
        if self._postures:
            points64 = np.asarray(points, np.float64)
            for selector, nodes, template, tolerance in self._postures:
                values.append(_posture(points64, ids, selector, nodes, template, tolerance))
        return values

    def evaluate(self, poses: FramePoses, time: float) -> list[int]:
        """Each rule's condition on this frame: `TRUE`, `FALSE` or `UNKNOWN`."""
        values = self.leaf_values(poses, time)
        return [
            values[root] if isinstance(root, int) else _combine(root, values)
            for root in self._roots
        ]

    def _decisions(self, an: _Animals, slot: int, elapsed: float | None) -> list[float]:
        """Each column's best margin over the animals: how far inside its bounds its
        feature is (>= 0 inside; NaN where no selected animal can be judged)."""
        ends = an.flat.take(an.index[slot])
        np.subtract(ends[0], ends[1], out=an.differences)
        if self._turned:
            # Into each region's own axes (turns 1: distances).
            np.multiply(an.turned, an.turns, out=an.turned)
        if self._scaled:
            # Scaled so that a region's edge is at 1.
            np.multiply(an.scaled, an.scales, out=an.scaled)
        if self._layout.lengths:
            np.abs(an.lengths, out=an.feature_lengths)
            if elapsed is not None:
                np.divide(an.speeds, elapsed, out=an.speeds)
        if self._angles.stop > self._angles.start:
            # The angle of second / heading, as the angle of second * conj(heading)
            # (arctan2 itself: np.angle's Python wrapper costs 3 us a call).
            turn = an.turn
            np.conjugate(an.headings, out=turn)
            np.multiply(an.seconds, turn, out=turn)
            np.arctan2(turn.imag, turn.real, out=an.angles)
            np.abs(an.angles, out=an.angles)
        if self._pairs.stop > self._pairs.start:
            # (pair, partner, animal) distances, NaN where the partner is not one; the
            # nearest partner that can be judged (fmin skips NaN; none: NaN).
            np.abs(an.pair_differences, out=an.pair_distances)
            np.fmin.reduce(an.pair_distances3, axis=1, out=an.pairs)
        if self._polygons.stop > self._polygons.start:
            # Even-odd rule: the edges crossed by a ray from the node towards +x, in
            # floats so that a node not found (NaN) makes the count NaN. An edge has
            # one end above the node and one not: heaviside(y - y0, 1) is 0 exactly
            # when y < y0, so their difference is +-1, else 0...
            np.heaviside(an.edges, 1.0, out=an.above)
            np.subtract(an.above_start, an.above_end, out=an.crossed)
            # ... and the node left of it: x < x0 + (y - y0) dx/dy, 1 where the gap is
            # above 0 (heaviside(gap, 0)), 0 where not.
            gap = an.gap
            np.multiply(an.below_start, an.slope, out=gap)
            np.add(gap, an.x0, out=gap)
            np.subtract(gap, an.node_x, out=gap)
            np.heaviside(gap, 0.0, out=gap)
            np.multiply(an.crossed, gap, out=an.crossed)
            # The count's parity (-1 counts as 1).
            np.add.reduce(an.crossed3, axis=0, out=an.polygons)
            np.remainder(an.polygons, 2.0, out=an.polygons)
        # NaN (cannot be judged, or an animal not selected) propagates through both.
        np.subtract(an.feature, an.low, out=an.margin)
        np.subtract(an.high, an.feature, out=an.spare)
        np.minimum(an.margin, an.spare, out=an.margin)
        if self._n_boxes:
            # A box holds a node inside on both axes.
            np.minimum(an.first_axis, an.second_axis, out=an.first_axis)
        result: list[float] = np.fmax.reduce(an.columns, axis=1).tolist()
        return result

    def _scalar_decisions(self, an: _Animals, slot: int, elapsed: float | None) -> list[float]:
        """`_decisions` in Python numbers, the same operations in the same order (the
        same margins; tests/stream/test_experiment_rules.py holds both paths to the
        recorded decisions)."""
        n, layout = an.n, self._layout
        flat = an.flat.tolist()
        plus, minus = an.ends[slot]
        d = [flat[i] - flat[j] for i, j in zip(plus, minus, strict=True)]
        feature: list[float] = []
        for row in range(layout.turned):
            turn, (sx, sy) = self._turn_list[row], self._scale_list[row]
            for z in d[row * n : (row + 1) * n]:
                if self._turned:
                    z = z * turn
                if self._scaled:
                    z = complex(z.real * sx, z.imag * sy)
                feature.append(abs(z))
        speeds = d[layout.turned * n : layout.lengths * n]
        if elapsed is None:
            feature += [abs(z) for z in speeds]
        else:
            feature += [abs(z) / elapsed for z in speeds]
        headings = d[layout.headings.start * n : layout.headings.stop * n]
        seconds = d[layout.seconds.start * n : layout.seconds.stop * n]
        for heading, second in zip(headings, seconds, strict=True):
            turned = second * heading.conjugate()
            feature.append(abs(math.atan2(turned.imag, turned.real)))
        pairs = d[layout.n_static * n :]
        for pair in range(len(self._pair_nodes)):
            rows = pairs[pair * n * n : (pair + 1) * n * n]
            for animal in range(n):
                # The nearest partner that can be judged (numpy's fmin skips NaN).
                found = [abs(z) for z in rows[animal::n]]
                judged = [distance for distance in found if distance == distance]
                feature.append(min(judged) if judged else math.nan)
        n_polygons = self._polygons.stop - self._polygons.start
        if n_polygons:
            # As `_decisions`: the even-odd count of the edges crossed towards +x.
            starts = d[layout.below_start.start * n : layout.below_start.stop * n]
            ends = d[layout.below_end.start * n : layout.below_end.stop * n]
            counts = [0.0] * (n_polygons * n)
            for k, (start, end) in enumerate(zip(starts, ends, strict=True)):
                slope, x0 = self._edge_list[k // n]
                crossed = _heaviside(start.imag, 1.0) - _heaviside(end.imag, 1.0)
                gap = _heaviside(start.imag * slope + x0 - end.real, 0.0)
                counts[k % (n_polygons * n)] += crossed * gap
            feature += [count % 2.0 for count in counts]
        margins = []
        for value, (low, high) in zip(feature, an.bounds, strict=True):
            margin, spare = value - low, high - value
            # numpy's minimum: NaN if either is.
            margins.append(margin if margin <= spare or margin != margin else spare)
        boxes = self._n_boxes * n
        for k in range(boxes):
            first, second = margins[boxes + k], margins[k]
            if not first <= second and first == first:
                margins[boxes + k] = second
        result = []
        for column in range(self._n_columns):
            # numpy's fmax over the animals: NaN only if every one is.
            judged = [m for m in margins[boxes + column * n : boxes + (column + 1) * n] if m == m]
            result.append(max(judged) if judged else math.nan)
        return result

    def _animals_of(self, ids: np.ndarray) -> tuple[_Animals, np.ndarray | None]:
        """The identities' `_Animals`, made again only when they change, and the order
        their rows are taken in (None: as they come).

        Distinct identities (tracks, classes) are taken in increasing order, so that
        a frame listing the same animals in another order reuses its tables (a new
        order costs an argsort; decisions do not depend on the rows' order).
        """
        kept = self._animals
        key = ids.tobytes()
        if kept is not None and kept.ids.dtype == ids.dtype:
            if key == kept.key:
                return kept, None
            if key == self._order_key:
                return kept, self._order
        order: np.ndarray | None = None
        if ids.shape[0] > 1 and ids.min() >= 0:
            order = np.argsort(ids, kind="stable")
            ordered = ids[order]
            if (ordered[1:] == ordered[:-1]).any():
                order = None  # an identity twice: the rows as they come
            else:
                ids = ordered
        if kept is None or kept.key != ids.tobytes() or kept.ids.dtype != ids.dtype:
            kept = self._animals = _Animals(self, ids)
        self._order_key, self._order = (None, None) if order is None else (key, order)
        return kept, order

    def _before(self, animals: _Animals, time: float) -> tuple[int, float | None]:
        """The slot of the table this frame's nodes go to, its other slot holding the
        frame before's nodes in this frame's rows (NaN where it has no such animal),
        and the seconds since it (None without one, the other slot all NaN)."""
        nodes = self._n_nodes
        previous = self._previous
        if previous is None:
            animals.table[1, :, :nodes] = np.nan
            return 0, None
        before_animals, before_time, before_slot = previous
        slot = 1 - before_slot if before_animals is animals else 0
        elapsed = time - before_time
        ids, before_ids = animals.ids, before_animals.ids
        if elapsed > 0 and before_animals is animals and (animals.tracked or ids.shape[0] == 1):
            # The same tracks in the same rows as the frame before (a tracker's usual
            # order), or the one animal: its nodes are already in the other slot.
            return slot, elapsed
        before = animals.table[1 - slot, :, :nodes]
        if not elapsed > 0 or before_ids.shape[0] == 0:
            before[...] = np.nan
            return slot, None
        last = before_animals.table[before_slot, :, :nodes]
        if ids.shape[0] == 1 and before_ids.shape[0] == 1 and ids[0] == before_ids[0]:
            before[...] = last
            return slot, elapsed
        same = (ids[:, None] == before_ids[None, :]) & (ids[:, None] >= 0)
        match, found = same.argmax(axis=1), same.any(axis=1)
        # A copy first: `last` may be the slot being written.
        taken = last[match]
        taken[~found] = np.nan
        before[...] = taken
        return slot, elapsed


def _column(
    number: int, leaf: Leaf, experiment: Experiment, info: ModelInfo, nodes: dict[str, int]
) -> tuple[str, _Column]:
    """A vectorised leaf's kind (its slice) and column."""
    animal = leaf.start.animal if isinstance(leaf, Distance) else leaf.animal
    selector = animal_identity(animal, info)
    if isinstance(leaf, InRegion):
        region = experiment.regions[leaf.region]
        # The node minus the region's centre.
        node = nodes[leaf.node]
        if isinstance(region, Rectangle):
            half_w, half_h = (region.x1 - region.x0) / 2, (region.y1 - region.y0) / 2
            centre = complex(region.x0 + half_w, region.y0 + half_h)
            scale = (1 / half_w, 1 / half_h)
            return "box", _Column(number, selector, -math.inf, 1.0, (node, centre), scale=scale)
        if isinstance(region, Ellipse):
            turn = math.radians(region.angle)
            return "round", _Column(
                number,
                selector,
                -math.inf,
                1.0,
                (node, complex(region.cx, region.cy)),
                turn=complex(math.cos(turn), math.sin(turn)),
                scale=(1 / region.rx, 1 / region.ry),
            )
        assert isinstance(region, Polygon)
        vertices = np.asarray(region.vertices, np.float64)
        return "polygon", _Column(number, selector, 0.5, math.inf, (node, 0j), vertices=vertices)
    if isinstance(leaf, Distance):
        start, end = nodes[leaf.start.node], nodes[leaf.end.node]
        if leaf.end.animal == "same":
            return "round", _Column(number, selector, leaf.above, leaf.below, (start, end))
        partner = (
            ANY_ANIMAL if leaf.end.animal == "other" else animal_identity(leaf.end.animal, info)
        )
        return "pair", _Column(
            number, selector, leaf.above, leaf.below, (start, 0j), (end, 0j), partner=partner
        )
    if isinstance(leaf, Angle):
        start, end = nodes[leaf.start], nodes[leaf.end]
        if leaf.point is not None:
            # From the start node to the point.
            second: Difference = (complex(*leaf.point), start)
        else:
            assert leaf.reference is not None
            second = (nodes[leaf.reference[1]], nodes[leaf.reference[0]])
        return "angle", _Column(
            number,
            selector,
            math.radians(leaf.above),
            math.radians(leaf.below),
            (end, start),
            second,
        )
    assert isinstance(leaf, Speed)
    node = nodes[leaf.node]
    # The node minus the frame before's (the table's second block).
    return "speed", _Column(number, selector, leaf.above, leaf.below, (node, len(nodes) + node))


def _compile(condition: Condition, leaves: list[Leaf]) -> Tree:
    """The condition as a tree of leaf numbers (int) and (kind, children) tuples."""
    if isinstance(condition, All | AnyOf):
        kind = "all" if isinstance(condition, All) else "any"
        return (kind, [_compile(child, leaves) for child in condition.conditions])
    if isinstance(condition, Not):
        return ("not", [_compile(condition.condition, leaves)])
    leaves.append(condition)
    return len(leaves) - 1


def _renumbered(tree: Tree, numbers: dict[int, int]) -> Tree:
    if isinstance(tree, int):
        return numbers[tree]
    kind, children = tree
    return (kind, [_renumbered(child, numbers) for child in children])


def _centred(template: list[tuple[float, float]]) -> np.ndarray:
    points = np.asarray(template, np.float64)
    return points - points.mean(axis=0)


def _edges(
    polygons: list[np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(polygons, edges) x0, y0, y1 and dx/dy of every edge, padded with edges that no
    ray crosses (both ends the first vertex); (0, 0) arrays without polygons."""
    width = max((len(p) for p in polygons if p is not None), default=0)
    shape = (len(polygons), width)
    x0, y0, y1, slope = (np.zeros(shape) for _ in range(4))
    for i, vertices in enumerate(polygons):
        assert vertices is not None
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


def _posture(
    points: np.ndarray,
    ids: np.ndarray,
    selector: int,
    nodes: np.ndarray,
    template: np.ndarray,
    tolerance: float,
) -> int:
    """Root-mean-square distance to the template after the best rigid fit (2-D Kabsch)."""
    xy = (points if selector == ANY_ANIMAL else points[ids == selector])[:, nodes]
    centred = xy - xy.mean(axis=1, keepdims=True)
    # The rotation taking each pose onto the template: angle of sum(conj(p) * t).
    dot = (centred * template).sum(axis=(1, 2))
    cross = (centred[..., 0] * template[:, 1] - centred[..., 1] * template[:, 0]).sum(axis=1)
    turn = np.arctan2(cross, dot)
    cos, sin = np.cos(turn)[:, None], np.sin(turn)[:, None]
    x = centred[..., 0] * cos - centred[..., 1] * sin
    y = centred[..., 0] * sin + centred[..., 1] * cos
    rms = np.sqrt(((x - template[:, 0]) ** 2 + (y - template[:, 1]) ** 2).mean(axis=1))
    known = ~np.isnan(rms)
    if ((rms <= tolerance) & known).any():
        return TRUE
    return FALSE if known.any() else UNKNOWN


def _heaviside(x: float, at_zero: float) -> float:
    """numpy's heaviside: 0 below 0, `at_zero` at 0, 1 above, NaN for NaN."""
    return 1.0 if x > 0 else at_zero if x == 0 else 0.0 if x < 0 else math.nan
