"""Part affinity field line scores for every candidate connection, inside the graph.

For each skeleton edge, every detected source peak is paired with every detected
destination peak, and each pair is scored by how well the PAF along the straight
line between them agrees with the line's direction. The arithmetic follows
sleap-nn's checkpoint predict path (`make_line_subs` + `score_paf_lines`), not its
ONNX export (which samples bilinearly):

- `n_points` samples from the source to the destination peak, interpolated as
  `src + (dst - src) / (1 + eps) * t` with `t = linspace(0, 1, n_points)` and
  `eps` the float32 machine epsilon (sleap-nn's `interp1d` adds it to the divisor);
- each sample is divided by the PAF stride, rounded half-to-even to the nearest
  PAF pixel and clipped into the PAF grid (nearest-neighbour, no interpolation);
- the score is the mean dot product of the PAF vectors with the unit vector from
  source to destination, plus a distance penalty
  `min(max_edge_length / length - 1, 0) * dist_penalty_weight`;
- `max_edge_length = max_edge_length_ratio * max(2 * n_edges, paf_height,
  paf_width) * paf_stride`. sleap-nn takes the max over all three dimensions of
  the channels-last PAF tensor, so the channel count takes part; reproduced.

Peaks are given in scaled-input pixels (confidence-map grid coordinates times the
confidence-map stride), the space sleap-nn scores in. A candidate whose two peaks
coincide gets a NaN score, as in sleap-nn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sleap_live.engines.graph.crops import clip_index

# sleap-nn interpolates line points with a slope of (dst - src) / (eps + 1).
_ONE_PLUS_EPS = float(np.float32(1.0) + np.finfo(np.float32).eps)


class PafLineScorer(torch.nn.Module):
    """Scores all source x destination peak pairs of every edge from the PAFs.

    Args:
        edges: (source node, destination node) index pairs, in the PAF head's
            channel order (edge `e` owns channels `2e` (x) and `2e + 1` (y)).
        paf_stride: output stride of the PAF head relative to the scaled input.
        n_points: samples along each candidate line.
        max_edge_length_ratio: longest expected edge as a fraction of the largest
            PAF dimension (times the stride); longer lines are penalised.
        dist_penalty_weight: multiplier of the distance penalty.
    """

    def __init__(
        self,
        edges: Sequence[tuple[int, int]],
        paf_stride: int,
        n_points: int = 10,
        max_edge_length_ratio: float = 0.25,
        dist_penalty_weight: float = 1.0,
    ) -> None:
        super().__init__()
        if not edges:
            raise ValueError("PafLineScorer needs at least one skeleton edge.")
        if n_points < 1:
            raise ValueError(f"n_points must be at least 1, got {n_points}.")
        self.n_edges = len(edges)
        self.paf_stride = float(paf_stride)
        self.max_edge_length_ratio = float(max_edge_length_ratio)
        self.dist_penalty_weight = float(dist_penalty_weight)
        self.register_buffer(
            "edge_src", torch.tensor([s for s, _ in edges], dtype=torch.long), persistent=False
        )
        self.register_buffer(
            "edge_dst", torch.tensor([d for _, d in edges], dtype=torch.long), persistent=False
        )
        self.register_buffer(
            "line_steps", torch.linspace(0, 1, n_points, dtype=torch.float32), persistent=False
        )
        self.register_buffer(
            "one_plus_eps", torch.tensor(_ONE_PLUS_EPS, dtype=torch.float32), persistent=False
        )

    def forward(self, pafs: torch.Tensor, peaks: torch.Tensor) -> torch.Tensor:
        """Line scores of every candidate pair.

        Args:
            pafs: (B, 2 * edges, paf_height, paf_width) PAF head output.
            peaks: (B, nodes, K, 2) float32 xy peaks in scaled-input pixels. Slots
                without a peak may hold any finite value; their scores are
                meaningless and the host ignores them.

        Returns:
            (B, edges, K, K) float32: entry `[b, e, i, j]` scores source peak `i`
            of edge `e`'s source node against destination peak `j` of its
            destination node.
        """
        batch, _, paf_height, paf_width = pafs.shape
        n_peaks = peaks.shape[2]
        n_points = self.line_steps.shape[0]
        peaks = peaks.float()

        src = peaks[:, self.edge_src].unsqueeze(3)  # (B, E, K, 1, 2)
        dst = peaks[:, self.edge_dst].unsqueeze(2)  # (B, E, 1, K, 2)
        offsets = dst - src  # (B, E, K, K, 2)

        slope = (offsets / self.one_plus_eps).unsqueeze(-2)  # (B, E, K, K, 1, 2)
        steps = self.line_steps.view(n_points, 1)
        points = src.unsqueeze(-2) + slope * steps  # (B, E, K, K, P, 2)
        cells = torch.round(points / self.paf_stride).long()
        cols = clip_index(cells[..., 0], paf_width)
        rows = clip_index(cells[..., 1], paf_height)

        flat_index = (rows * paf_width + cols).reshape(batch, self.n_edges, 1, -1)
        pafs_flat = pafs.reshape(batch, self.n_edges, 2, paf_height * paf_width)
        samples = torch.gather(pafs_flat, 3, flat_index.expand(-1, -1, 2, -1)).float()
        samples = samples.reshape(batch, self.n_edges, 2, n_peaks, n_peaks, n_points)

        lengths = torch.linalg.vector_norm(offsets, dim=-1)  # (B, E, K, K)
        unit_x = offsets[..., 0] / lengths
        unit_y = offsets[..., 1] / lengths
        dots = samples[:, :, 0] * unit_x.unsqueeze(-1) + samples[:, :, 1] * unit_y.unsqueeze(-1)

        # Tensor maximum rather than Python max(): comparing sizes would freeze them
        # into a traced graph.
        # On the PAFs' device: a CPU tensor would be a host constant in a traced graph.
        device = pafs.device
        longest_side = torch.maximum(
            torch.maximum(
                torch.as_tensor(paf_height, device=device),
                torch.as_tensor(paf_width, device=device),
            ),
            torch.as_tensor(2 * self.n_edges, device=device),
        )
        max_edge_length = self.max_edge_length_ratio * longest_side * self.paf_stride
        # sleap-nn divides a Python float by a tensor, which torch evaluates as
        # reciprocal-then-multiply; doing the same keeps the rounding identical.
        ratio_to_max = lengths.reciprocal() * max_edge_length
        penalty = torch.clamp(ratio_to_max - 1, max=0) * self.dist_penalty_weight
        return dots.mean(dim=-1) + penalty
