"""Host-side grouping: PAF matching + assembly, and class-map identity grouping."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.host import grouping
from sleap_live.engines.host.grouping import ClassMapGrouper, PafGrouper, edge_assembly_order
from sleap_live.engines.types import ModelInfo, Skeleton

# ---------------------------------------------------------------- edge order


def test_edge_order_is_breadth_first_from_the_first_root():
    edges = [(1, 2), (0, 1), (0, 3), (3, 4), (1, 5)]
    # Root is node 0 (node 1 appears first but has a parent); BFS from 0 visits
    # 0->1, 0->3, then 1's children (2, 5) in edge-list order, then 3->4.
    assert edge_assembly_order(edges) == (1, 2, 0, 4, 3)


def test_edge_order_drops_edges_the_walk_does_not_use():
    # 0->2 closes a diamond; the second component 3->4 is unreachable from root 0;
    # the duplicate 0->1 is visited once.
    edges = [(0, 1), (1, 2), (0, 2), (3, 4), (0, 1)]
    assert edge_assembly_order(edges) == (0, 2)


def test_edge_order_without_a_root_is_a_config_error():
    with pytest.raises(ModelConfigError, match="no root"):
        edge_assembly_order([(0, 1), (1, 2), (2, 0)])


# ---------------------------------------------------------------- PAF grouping


def _frame(n_nodes, k):
    peaks = np.zeros((n_nodes, k, 2), np.float32)
    peaks[..., 0] = np.arange(k)[None, :] * 10 + np.arange(n_nodes)[:, None]
    peaks[..., 1] = np.arange(n_nodes)[:, None]
    scores = np.full((n_nodes, k), 0.9, np.float32)
    return peaks, scores


def test_chain_of_two_animals_groups_by_best_lines():
    edges = [(0, 1), (1, 2)]
    peaks, scores = _frame(3, 2)
    valid = np.ones((3, 2), bool)
    line_scores = np.full((2, 2, 2), 0.1, np.float32)
    line_scores[0] = [[0.2, 0.9], [0.8, 0.1]]  # node0 peak0 <-> node1 peak1
    line_scores[1] = [[0.9, 0.1], [0.1, 0.7]]

    poses = PafGrouper(3, edges).group(peaks, scores, valid, line_scores)

    assert poses.n_instances == 2
    np.testing.assert_array_equal(poses.points[0], peaks[[0, 1, 2], [0, 1, 1]])
    np.testing.assert_array_equal(poses.points[1], peaks[[0, 1, 2], [1, 0, 0]])
    np.testing.assert_allclose(poses.instance_scores, [0.9 + 0.7, 0.8 + 0.9], rtol=1e-6)
    np.testing.assert_array_equal(poses.identities, [-1, -1])
    assert poses.points.dtype == np.float32


def test_matches_below_min_line_scores_are_dropped_and_nodes_go_missing():
    edges = [(0, 1), (1, 2)]
    peaks, scores = _frame(3, 1)
    valid = np.ones((3, 1), bool)
    line_scores = np.array([[[0.9]], [[0.2]]], np.float32)

    poses = PafGrouper(3, edges, min_line_scores=0.25).group(peaks, scores, valid, line_scores)

    assert poses.n_instances == 1
    assert np.isnan(poses.points[0, 2]).all() and np.isnan(poses.point_scores[0, 2])
    assert poses.instance_scores[0] == pytest.approx(0.9)


def test_a_node_without_peaks_leaves_a_gap():
    edges = [(0, 1), (1, 2)]
    peaks, scores = _frame(3, 2)
    valid = np.array([[True, True], [False, False], [True, True]])
    line_scores = np.ones((2, 2, 2), np.float32)

    poses = PafGrouper(3, edges).group(peaks, scores, valid, line_scores)

    assert poses.n_instances == 0
    assert poses.points.shape == (0, 3, 2)


def test_no_peaks_gives_an_empty_frame():
    peaks, scores = _frame(2, 3)
    poses = PafGrouper(2, [(0, 1)]).group(
        peaks, scores, np.zeros((2, 3), bool), np.zeros((1, 3, 3), np.float32)
    )
    assert poses.n_instances == 0
    assert poses.instance_scores.dtype == np.float32


def test_invalid_slots_are_never_matched():
    edges = [(0, 1)]
    peaks, scores = _frame(2, 3)
    valid = np.array([[True, False, True], [False, True, False]])
    line_scores = np.full((1, 3, 3), 5.0, np.float32)  # invalid slots look great
    line_scores[0, 0, 1] = 0.3
    line_scores[0, 2, 1] = 0.6

    poses = PafGrouper(2, edges).group(peaks, scores, valid, line_scores)

    assert poses.n_instances == 1
    np.testing.assert_array_equal(poses.points[0], peaks[[0, 1], [2, 1]])


def test_nan_scores_are_forbidden_pairs():
    edges = [(0, 1)]
    peaks, scores = _frame(2, 2)
    valid = np.ones((2, 2), bool)
    line_scores = np.array([[[np.nan, 0.5], [0.9, 0.4]]], np.float32)

    poses = PafGrouper(2, edges).group(peaks, scores, valid, line_scores)

    # Without the NaN the best assignment would pair (0,0)+(1,1) or (1,0)+(0,1).
    np.testing.assert_allclose(sorted(poses.instance_scores), [0.5, 0.9])


def test_all_nan_rows_do_not_crash_matching():
    edges = [(0, 1)]
    peaks, scores = _frame(2, 2)
    line_scores = np.array([[[np.nan, np.nan], [np.nan, np.nan]]], np.float32)

    poses = PafGrouper(2, edges).group(peaks, scores, np.ones((2, 2), bool), line_scores)

    assert poses.n_instances == 0


def test_a_source_left_out_by_its_parent_edge_starts_a_new_instance():
    edges = [(0, 1), (1, 2)]
    peaks, scores = _frame(3, 2)
    valid = np.ones((3, 2), bool)
    line_scores = np.zeros((2, 2, 2), np.float32)
    line_scores[0, 0, 0] = 0.9  # instance A: n0p0-n1p0
    line_scores[1, 0, 0] = 0.7  # n1p0 (in A) -> n2p0 joins A
    line_scores[1, 1, 1] = 0.8  # n1p1 (in no instance) -> n2p1 starts B

    poses = PafGrouper(3, edges, min_line_scores=0.5).group(peaks, scores, valid, line_scores)

    assert poses.n_instances == 2
    np.testing.assert_array_equal(poses.points[0], peaks[[0, 1, 2], [0, 0, 0]])
    np.testing.assert_array_equal(poses.points[1, 1:], peaks[[1, 2], [1, 1]])
    assert np.isnan(poses.points[1, 0]).all()
    np.testing.assert_allclose(poses.instance_scores, [0.9 + 0.7, 0.8], rtol=1e-6)


def test_min_instance_peaks_int_is_a_count_and_float_a_fraction():
    edges = [(0, 1), (1, 2), (2, 3)]
    peaks, scores = _frame(4, 2)
    valid = np.ones((4, 2), bool)
    line_scores = np.zeros((3, 2, 2), np.float32)
    line_scores[:, 0, 0] = 0.9  # a 4-peak instance
    line_scores[0, 1, 1] = 0.9  # a 2-peak instance

    def count(min_instance_peaks):
        grouper = PafGrouper(4, edges, min_instance_peaks=min_instance_peaks)
        return grouper.group(peaks, scores, valid, line_scores).n_instances

    assert count(0) == 2
    assert count(3) == 1
    assert count(0.75) == 1  # int(0.75 * 4) = 3 peaks
    assert count(0.5) == 2  # 2 peaks


def test_max_instances_keeps_the_best_scores_only_when_exceeded():
    edges = [(0, 1)]
    peaks, scores = _frame(2, 3)
    valid = np.ones((2, 3), bool)
    line_scores = np.zeros((1, 3, 3), np.float32)
    line_scores[0, [0, 1, 2], [0, 1, 2]] = [0.5, 0.9, 0.7]

    capped = PafGrouper(2, edges, max_instances=2).group(peaks, scores, valid, line_scores)
    uncapped = PafGrouper(2, edges, max_instances=3).group(peaks, scores, valid, line_scores)

    np.testing.assert_allclose(capped.instance_scores, [0.9, 0.7])
    np.testing.assert_allclose(uncapped.instance_scores, [0.5, 0.9, 0.7])  # assembly order


def _info(model_type, postprocess, max_instances, class_names=()):
    skeleton = Skeleton(("a", "b", "c"), ((0, 1), (1, 2)))
    return ModelInfo(
        model_type=model_type,
        skeleton=skeleton,
        input_channels=1,
        max_instances=max_instances,
        class_names=class_names,
        postprocess=postprocess,
    )


def test_grouper_round_trips_through_model_info():
    # PAF edges may differ from the skeleton's; the grouper keeps its own.
    grouper = PafGrouper(
        3, [(1, 2), (1, 0)], min_line_scores=0.3, min_instance_peaks=0.5, max_instances=4
    )
    info = _info("bottomup", grouper.postprocess_settings(), 4)
    assert PafGrouper.from_info(info) == grouper
    assert json.loads(json.dumps(grouper.postprocess_settings())) == grouper.postprocess_settings()


def test_grouper_from_info_rejects_missing_settings():
    with pytest.raises(ModelConfigError, match="expected 'paf'"):
        PafGrouper.from_info(_info("bottomup", {"grouping": "class_maps"}, 4))
    with pytest.raises(ModelConfigError, match="min_line_scores"):
        PafGrouper.from_info(_info("bottomup", {"grouping": "paf", "edges": []}, 4))


def test_many_animals_cost_one_matching_per_edge_over_valid_peaks_only(monkeypatch):
    # The work done is bounded, not timed: one Hungarian matching per edge, each
    # over the valid peaks only (8 x 8 here), never the K x K slots the graph emits.
    rng = np.random.default_rng(0)
    n_nodes, k, n_animals = 20, 20, 8
    edges = [(i, i + 1) for i in range(n_nodes - 1)]
    peaks = rng.uniform(0, 500, (n_nodes, k, 2)).astype(np.float32)
    scores = rng.uniform(0.3, 1, (n_nodes, k)).astype(np.float32)
    valid = np.zeros((n_nodes, k), bool)
    valid[:, :n_animals] = True
    line_scores = rng.uniform(-0.2, 0.3, (len(edges), k, k)).astype(np.float32)
    line_scores[:, np.arange(n_animals), np.arange(n_animals)] = 0.95
    matrices = []

    def counting_assignment(cost):
        matrices.append(cost.shape)
        return linear_sum_assignment(cost)

    monkeypatch.setattr(grouping, "linear_sum_assignment", counting_assignment)
    poses = PafGrouper(n_nodes, edges).group(peaks, scores, valid, line_scores)

    assert matrices == [(n_animals, n_animals)] * len(edges)
    assert poses.n_instances == n_animals
    for animal in range(n_animals):
        np.testing.assert_array_equal(poses.points[animal], peaks[:, animal])
    np.testing.assert_allclose(poses.instance_scores, 0.95 * len(edges), rtol=1e-5)


# ---------------------------------------------------------------- class maps


def test_class_maps_assign_peaks_to_classes_per_node():
    peaks, scores = _frame(2, 3)
    valid = np.array([[True, True, False], [True, True, True]])
    probs = np.zeros((2, 3, 2), np.float32)
    probs[0, 0] = [0.2, 0.9]
    probs[0, 1] = [0.8, 0.1]
    probs[1, 0] = [0.9, 0.3]
    probs[1, 1] = [0.4, 0.3]  # loses class 0 to peak 0; class 1 is not its best
    probs[1, 2] = [0.1, 0.6]

    poses = ClassMapGrouper(2, 2).group(peaks, scores, valid, probs)

    np.testing.assert_array_equal(poses.identities, [0, 1])
    np.testing.assert_array_equal(poses.points[0], peaks[[0, 1], [1, 0]])
    np.testing.assert_array_equal(poses.points[1], peaks[[0, 1], [0, 2]])
    np.testing.assert_allclose(poses.instance_scores, [0.9, 0.9])


def test_hungarian_match_that_is_not_the_argmax_is_dropped():
    peaks, scores = _frame(1, 2)
    probs = np.array([[[0.9, 0.8], [0.95, 0.1]]], np.float32)
    # Optimal: peak0 -> class1 (0.8), peak1 -> class0 (0.95). Peak0's best is class 0,
    # so its match is dropped.
    poses = ClassMapGrouper(1, 2).group(peaks, scores, np.ones((1, 2), bool), probs)

    np.testing.assert_array_equal(poses.identities, [0])
    np.testing.assert_array_equal(poses.points[0, 0], peaks[0, 1])


def test_class_instance_score_is_the_mean_of_its_peak_values():
    peaks, _ = _frame(3, 1)
    scores = np.array([[0.5], [0.7], [0.9]], np.float32)
    valid = np.array([[True], [False], [True]])
    probs = np.ones((3, 1, 1), np.float32)

    poses = ClassMapGrouper(3, 1).group(peaks, scores, valid, probs)

    assert poses.instance_scores[0] == pytest.approx(0.7)
    assert np.isnan(poses.points[0, 1]).all()


def test_class_cap_ranks_absent_classes_first_like_sleap_nn():
    peaks, _ = _frame(1, 3)
    scores = np.array([[0.9, 0.5, 0.7]], np.float32)
    probs = np.zeros((1, 3, 4), np.float32)
    probs[0, [0, 1, 2], [0, 1, 2]] = 1.0  # class 3 gets no peak

    capped = ClassMapGrouper(1, 4, max_instances=2).group(
        peaks, scores, np.ones((1, 3), bool), probs
    )

    # argsort(scores)[::-1] puts the absent (NaN) class first, so only one of the
    # two slots goes to a present class: the best one.
    np.testing.assert_array_equal(capped.identities, [0])


def test_class_settings_round_trip_and_no_peaks():
    grouper = ClassMapGrouper(3, 2, max_instances=1)
    info = _info("multi_class_bottomup", grouper.postprocess_settings(), 1, ("x", "y"))
    assert ClassMapGrouper.from_info(info) == grouper
    with pytest.raises(ModelConfigError, match="expected 'class_maps'"):
        ClassMapGrouper.from_info(_info("multi_class_bottomup", {"grouping": "paf"}, 1, ("x",)))
    peaks, scores = _frame(3, 2)
    poses = grouper.group(peaks, scores, np.zeros((3, 2), bool), np.zeros((3, 2, 2), np.float32))
    assert poses.n_instances == 0 and poses.points.shape == (0, 3, 2)
