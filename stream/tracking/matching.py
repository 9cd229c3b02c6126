"""Which new instance continues which track: sleap-nn's two matchers on a cost matrix.

Costs are negated scores, infinite where a pair has no score. Both matchers
return (row, column) pairs exactly as sleap-nn 0.3.5's `hungarian_matching` and
`greedy_matching` do, ties included, so the same costs give the same tracks.
"""

from __future__ import annotations

import numpy as np

from sleap_live.engines.host.grouping import linear_sum_assignment


def match(cost: np.ndarray, method: str) -> list[tuple[int, int]]:
    """(row, column) pairs of `cost` (new instances x tracks) by `method`.

    "hungarian": the assignment of least total cost (scipy's solver, infinite
    costs replaced by ten times the largest finite one plus one, as sleap-nn, so
    every row still gets a column when there are enough). "greedy": repeatedly the
    cheapest pair whose row and column are both free, in the order of numpy's
    default argsort of the flattened costs (the order sleap-nn's loop takes).
    """
    if cost.size == 0:
        return []
    if method == "hungarian":
        invalid = ~np.isfinite(cost)
        if invalid.any():
            finite = cost[~invalid]
            fill = (np.abs(finite).max() * 10 + 1) if finite.size > 0 else 1e6
            cost = np.where(invalid, fill, cost)
        rows, cols = linear_sum_assignment(cost)
        return list(zip(rows.tolist(), cols.tolist(), strict=True))
    n_pairs = min(cost.shape)
    rows, cols = np.unravel_index(np.argsort(cost, axis=None), cost.shape)
    used_rows: set[int] = set()
    used_cols: set[int] = set()
    pairs = []
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        if row in used_rows or col in used_cols:
            continue
        pairs.append((row, col))
        used_rows.add(row)
        used_cols.add(col)
        if len(pairs) == n_pairs:
            break
    return pairs
