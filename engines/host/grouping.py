"""Host-side grouping of bottom-up peaks into instances.

The inference graph hands over fixed-size tensors per frame: up to K peaks per
node (in raster order, valid ones flagged), and either PAF line scores for every
candidate connection (`PafGrouper`) or class probabilities per peak
(`ClassMapGrouper`). Grouping them is sequential, data-dependent work, so it runs
here in numpy + scipy, reproducing sleap-nn's predict path decision for decision:

PAF grouping (`sleap_nn.inference.ops.paf`):

1. Per edge, Hungarian matching (`scipy.optimize.linear_sum_assignment`) of the
   edge's source against destination peaks on the negated line scores; NaN scores
   are forbidden pairs. Matches scoring below `min_line_scores` are dropped.
2. Greedy assembly over the edges in `edge_assembly_order`, each edge's matches in
   source-peak order: a match adds its destination peak to its source peak's
   instance, or starts a new instance when the source has none. (sleap-nn also
   has branches for destinations that already belong to an instance; along its
   breadth-first tree order they cannot be reached.)
3. Instances with fewer than `min_instance_peaks` peaks are dropped (a float is a
   fraction of the node count, truncated). Instances keep their order of
   creation; an instance's score is the float32 sum of its matches' scores.
4. With `max_instances` set and exceeded, instances are ordered by
   `np.argsort(scores)[::-1]` and cut; otherwise assembly order is kept.

Class-map grouping (`sleap_nn.inference.ops.identity.classify_peaks_from_maps`):
per node, Hungarian matching of peaks to classes on the negated probabilities,
keeping a match only when the class is also the peak's most probable one. The
instance of class c holds the peaks matched to c; its score is the mean of its
peak values. Classes without peaks are not reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.host.outputs import BOTTOMUP_OUTPUTS, MULTI_CLASS_BOTTOMUP_OUTPUTS
from sleap_live.engines.types import FramePoses, ModelInfo


def edge_assembly_order(edges: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """The order in which sleap-nn assembles instances from matched edges.

    sleap-nn builds a directed graph from the edges, takes the first node (in order
    of first appearance in the edge list) that no edge points to as the root, and
    walks the graph breadth-first from it, visiting each node's outgoing edges in
    edge-list order. Edges that the walk does not use (ones closing a cycle,
    second parents, other connected components, duplicates) are left out, so their
    matches never join instances.

    Args:
        edges: (source node, destination node) index pairs.

    Returns:
        Indices into `edges` in assembly order.

    Raises:
        ModelConfigError: every node has an incoming edge, so there is no root
            (sleap-nn cannot run such a skeleton either).
    """
    nodes: dict[int, None] = {}
    children: dict[int, list[int]] = {}
    has_parent: set[int] = set()
    for src, dst in edges:
        nodes.setdefault(src)
        nodes.setdefault(dst)
        successors = children.setdefault(src, [])
        if dst not in successors:
            successors.append(dst)
        has_parent.add(dst)
    roots = [node for node in nodes if node not in has_parent]
    if not roots:
        raise ModelConfigError(
            f"Skeleton edges {list(edges)} have no root node (every node has an incoming "
            "edge), so PAF instances cannot be assembled."
        )

    edge_index: dict[tuple[int, ...], int] = {}
    for index, edge in enumerate(edges):
        edge_index.setdefault(tuple(edge), index)
    order = []
    seen = {roots[0]}
    frontier = [roots[0]]
    while frontier:
        next_frontier = []
        for parent in frontier:
            for child in children.get(parent, ()):
                if child not in seen:
                    seen.add(child)
                    next_frontier.append(child)
                    order.append(edge_index[(parent, child)])
        frontier = next_frontier
    return tuple(order)


def _edge_pairs(edges: Iterable[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(source), int(destination)) for source, destination in edges)


@attrs.frozen
class PafGrouper:
    """Groups one frame's peaks into instances with PAF line scores, as sleap-nn does.

    Attributes:
        n_nodes: nodes in the skeleton.
        edges: (source, destination) node pairs in PAF channel order.
        min_line_scores: matches scoring below this are discarded.
        min_instance_peaks: instances with fewer peaks are discarded; an `int` is
            a count, a `float` a fraction of `n_nodes` (sleap-nn's rule).
        max_instances: most instances kept per frame (the best scoring); `None`
            keeps all, as does any value of at least nodes x K.
        edge_order: assembly order of the edges (derived from `edges`).
    """

    n_nodes: int
    edges: tuple[tuple[int, int], ...] = attrs.field(converter=_edge_pairs)
    min_line_scores: float = 0.25
    min_instance_peaks: int | float = 0
    max_instances: int | None = None
    edge_order: tuple[int, ...] = attrs.field(init=False)

    @edge_order.default
    def _edge_order(self) -> tuple[int, ...]:
        return edge_assembly_order(self.edges)

    def postprocess_settings(self) -> dict[str, Any]:
        """The `ModelInfo.postprocess` entries `from_info` reads back.

        `max_instances` is not among them: it is `ModelInfo.max_instances`.
        """
        return {
            "grouping": "paf",
            "edges": [list(edge) for edge in self.edges],
            "min_line_scores": self.min_line_scores,
            "min_instance_peaks": self.min_instance_peaks,
        }

    @classmethod
    def from_info(cls, info: ModelInfo) -> PafGrouper:
        """The grouper a bottom-up model's `ModelInfo` describes.

        Raises:
            ModelConfigError: `info.postprocess` lacks the PAF grouping settings.
        """
        settings = _settings(info, "paf", ("edges", "min_line_scores", "min_instance_peaks"))
        return cls(
            n_nodes=info.skeleton.n_nodes,
            edges=settings["edges"],
            min_line_scores=float(settings["min_line_scores"]),
            min_instance_peaks=settings["min_instance_peaks"],
            max_instances=info.max_instances,
        )

    def group_batch(self, outputs: Mapping[str, np.ndarray]) -> list[FramePoses]:
        """Instances of every frame of a batch of `BOTTOMUP_OUTPUTS`."""
        arrays = (np.asarray(outputs[name]) for name in BOTTOMUP_OUTPUTS)
        return [self.group(*frame) for frame in zip(*arrays, strict=True)]

    def group(
        self,
        peaks: np.ndarray,
        peak_scores: np.ndarray,
        peak_valid: np.ndarray,
        line_scores: np.ndarray,
    ) -> FramePoses:
        """Instances of one frame.

        Args:
            peaks: (nodes, K, 2) float32 xy of each peak in frame pixels.
            peak_scores: (nodes, K) float32 confidence map values.
            peak_valid: (nodes, K) bool, which slots hold a peak. Peaks of a node
                must be in sleap-nn's order (raster order of their pixels).
            line_scores: (edges, K, K) float32 scores of source peak i against
                destination peak j for each edge.

        Returns:
            The frame's instances, identities all -1.
        """
        peak_valid = np.asarray(peak_valid, dtype=bool)
        line_scores = np.asarray(line_scores)
        assignment = np.full(peak_valid.shape, -1, np.int64)
        match_ids, match_scores = [], []
        n_created = 0
        for edge in self.edge_order:
            src_node, dst_node = self.edges[edge]
            src_slots = np.flatnonzero(peak_valid[src_node])
            dst_slots = np.flatnonzero(peak_valid[dst_node])
            if src_slots.size == 0 or dst_slots.size == 0:
                continue
            cost = -line_scores[edge][np.ix_(src_slots, dst_slots)]
            cost[np.isnan(cost)] = np.inf
            src_rank, dst_rank = _hungarian(cost)
            scores = -cost[src_rank, dst_rank]
            keep = scores >= self.min_line_scores
            src_kept, dst_kept = src_slots[src_rank[keep]], dst_slots[dst_rank[keep]]

            # The walk is breadth-first along a tree, so a destination peak is
            # always unassigned when its edge comes up and sleap-nn's merge
            # branches never fire: a match extends its source's instance, or
            # starts a new one (ids in match order) if the source has none.
            ids = assignment[src_node, src_kept]
            fresh = ids < 0
            ids[fresh] = n_created + np.arange(int(fresh.sum()))
            n_created += int(fresh.sum())
            assignment[src_node, src_kept] = ids
            assignment[dst_node, dst_kept] = ids
            match_ids.append(ids)
            match_scores.append(scores[keep])
        if n_created == 0:
            return FramePoses.empty(self.n_nodes)
        return self._instances(
            np.asarray(peaks),
            np.asarray(peak_scores),
            assignment,
            n_created,
            np.concatenate(match_ids),
            np.concatenate(match_scores).astype(np.float32),
        )

    def _instances(
        self,
        peaks: np.ndarray,
        peak_scores: np.ndarray,
        assignment: np.ndarray,
        n_created: int,
        match_ids: np.ndarray,
        match_scores: np.ndarray,
    ) -> FramePoses:
        sizes = np.bincount(assignment[assignment >= 0], minlength=n_created)
        kept = np.ones(n_created, bool)
        if self.min_instance_peaks > 0:
            threshold = self.min_instance_peaks
            if isinstance(threshold, float):
                threshold = int(threshold * self.n_nodes)
            kept = sizes >= threshold
        n_instances = int(kept.sum())
        if n_instances == 0:
            return FramePoses.empty(self.n_nodes)
        renumbered = np.where(kept, np.cumsum(kept) - 1, -1)

        node_inds, slot_inds = np.nonzero(assignment >= 0)
        instance_inds = renumbered[assignment[node_inds, slot_inds]]
        owned = instance_inds >= 0
        node_inds, slot_inds, instance_inds = (
            node_inds[owned],
            slot_inds[owned],
            instance_inds[owned],
        )
        points = np.full((n_instances, self.n_nodes, 2), np.nan, np.float32)
        point_scores = np.full((n_instances, self.n_nodes), np.nan, np.float32)
        points[instance_inds, node_inds] = peaks[node_inds, slot_inds]
        point_scores[instance_inds, node_inds] = peak_scores[node_inds, slot_inds]

        # Summed in match order, in float32, as sleap-nn accumulates them.
        instance_scores = np.zeros((n_instances,), np.float32)
        match_instances = renumbered[match_ids]
        counted = match_instances >= 0
        np.add.at(instance_scores, match_instances[counted], match_scores[counted])

        if self.max_instances is not None and n_instances > self.max_instances:
            best = np.argsort(instance_scores)[::-1][: self.max_instances]
            points, point_scores, instance_scores = (
                points[best],
                point_scores[best],
                instance_scores[best],
            )
        return FramePoses(
            points=points,
            point_scores=point_scores,
            instance_scores=instance_scores,
            identities=np.full((instance_scores.shape[0],), -1, np.int32),
        )


def _settings(info: ModelInfo, grouping: str, keys: Sequence[str]) -> Mapping[str, Any]:
    settings = info.postprocess
    if settings.get("grouping") != grouping:
        raise ModelConfigError(
            f"{info.model_type} model metadata has postprocess grouping="
            f"{settings.get('grouping')!r}, expected {grouping!r}; re-export the model"
        )
    missing = [key for key in keys if key not in settings]
    if missing:
        raise ModelConfigError(
            f"{info.model_type} model metadata lacks postprocess settings {missing}; "
            "re-export the model"
        )
    return settings


def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`scipy.optimize.linear_sum_assignment`, imported at its first use.

    scipy.optimize takes about 0.5 s to import, a third of a warm start, and only
    bottom-up and multi-class models, tracking and pose comparisons need it.
    """
    from scipy.optimize import linear_sum_assignment as assign

    return assign(cost)


def _hungarian(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`linear_sum_assignment`, tolerating matrices whose forbidden pairs block it.

    sleap-nn passes forbidden (NaN-scored) pairs as infinite costs and crashes when
    they make a full matching impossible; here they become a cost no real score
    reaches, and such a pair, if chosen, keeps its infinite cost and is later
    dropped by the score threshold.
    """
    try:
        return linear_sum_assignment(cost)
    except ValueError:
        finite = np.where(np.isinf(cost), 1e9, cost)
        return linear_sum_assignment(finite)


@attrs.frozen
class ClassMapGrouper:
    """Groups one frame's peaks into one instance per identity class, as sleap-nn does.

    Attributes:
        n_nodes: nodes in the skeleton.
        n_classes: identity classes.
        max_instances: most instances kept per frame; `None` keeps all. When
            exceeded, sleap-nn's selection is reproduced: classes are ranked with
            `np.argsort(scores)[::-1]` over all classes, where absent classes (NaN
            score) rank first, and only present classes among the first
            `max_instances` survive.
    """

    n_nodes: int
    n_classes: int
    max_instances: int | None = None

    def postprocess_settings(self) -> dict[str, Any]:
        """The `ModelInfo.postprocess` entries `from_info` reads back."""
        return {"grouping": "class_maps"}

    @classmethod
    def from_info(cls, info: ModelInfo) -> ClassMapGrouper:
        """The grouper a multi-class bottom-up model's `ModelInfo` describes.

        Raises:
            ModelConfigError: `info.postprocess` is not for class-map grouping.
        """
        _settings(info, "class_maps", ())
        return cls(
            n_nodes=info.skeleton.n_nodes,
            n_classes=len(info.class_names),
            max_instances=info.max_instances,
        )

    def group_batch(self, outputs: Mapping[str, np.ndarray]) -> list[FramePoses]:
        """Instances of every frame of a batch of `MULTI_CLASS_BOTTOMUP_OUTPUTS`."""
        arrays = (np.asarray(outputs[name]) for name in MULTI_CLASS_BOTTOMUP_OUTPUTS)
        return [self.group(*frame) for frame in zip(*arrays, strict=True)]

    def group(
        self,
        peaks: np.ndarray,
        peak_scores: np.ndarray,
        peak_valid: np.ndarray,
        class_probs: np.ndarray,
    ) -> FramePoses:
        """Instances of one frame.

        Args:
            peaks: (nodes, K, 2) float32 xy of each peak in frame pixels.
            peak_scores: (nodes, K) float32 confidence map values.
            peak_valid: (nodes, K) bool, which slots hold a peak, in raster order.
            class_probs: (nodes, K, classes) float32 class map values at each peak.

        Returns:
            One instance per class that received a peak, in class order, with
            `identities` the class index.
        """
        points = np.full((self.n_classes, self.n_nodes, 2), np.nan, np.float32)
        point_scores = np.full((self.n_classes, self.n_nodes), np.nan, np.float32)
        for node in range(self.n_nodes):
            slots = np.flatnonzero(peak_valid[node])
            if slots.size == 0:
                continue
            probs = np.asarray(class_probs[node, slots], np.float32)
            peak_rank, class_inds = linear_sum_assignment(-probs)
            is_best = probs[peak_rank, class_inds] == probs[peak_rank].max(axis=1)
            chosen = slots[peak_rank[is_best]]
            points[class_inds[is_best], node] = peaks[node, chosen]
            point_scores[class_inds[is_best], node] = peak_scores[node, chosen]

        present = ~np.all(np.isnan(point_scores), axis=1)
        instance_scores = np.full((self.n_classes,), np.nan, np.float32)
        if present.any():
            counts = (~np.isnan(point_scores[present])).sum(axis=1)
            instance_scores[present] = (np.nansum(point_scores[present], axis=1) / counts).astype(
                np.float32
            )
        if self.max_instances is not None and int(present.sum()) > self.max_instances:
            kept = np.zeros_like(present)
            kept[np.argsort(instance_scores)[::-1][: self.max_instances]] = True
            present &= kept
        identities = np.flatnonzero(present).astype(np.int32)
        return FramePoses(
            points=points[present],
            point_scores=point_scores[present],
            instance_scores=instance_scores[present],
            identities=identities,
        )
