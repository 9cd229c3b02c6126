"""Tests for sleap_live.engines.host.postprocess."""

from __future__ import annotations

import numpy as np
import pytest

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.host.postprocess import assign_classes, decode
from sleap_live.engines.types import ModelInfo, Skeleton

NAN = np.nan


def _info(model_type: str, classes: tuple[str, ...] = ()) -> ModelInfo:
    return ModelInfo(
        model_type=model_type,
        skeleton=Skeleton(("a", "b")),
        input_channels=1,
        max_instances=5,
        class_names=classes,
    )


def _outputs(**extra):
    return {
        "instance_frame": np.array([0, 2, 2, 2], np.int64),
        "points": np.array(
            [
                [[1, 2], [3, 4]],
                [[NAN, NAN], [NAN, NAN]],  # no node found: dropped
                [[5, 6], [NAN, NAN]],
                [[7, 8], [9, 10]],
            ],
            np.float32,
        ),
        "point_scores": np.array([[0.9, 0.8], [NAN, NAN], [0.7, NAN], [0.6, 0.5]], np.float32),
        "instance_scores": np.array([0.95, 0.3, 0.85, 0.75], np.float32),
        **extra,
    }


@pytest.mark.parametrize("model_type", ["single_instance", "centroid", "topdown"])
def test_groups_instances_by_frame_and_drops_empty_ones(model_type):
    poses = decode(_info(model_type), _outputs(), batch_size=3)
    assert [p.n_instances for p in poses] == [1, 0, 2]
    np.testing.assert_array_equal(poses[2].points, [[[5, 6], [NAN, NAN]], [[7, 8], [9, 10]]])
    np.testing.assert_allclose(poses[2].point_scores, [[0.7, NAN], [0.6, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(poses[2].instance_scores, [0.85, 0.75], rtol=1e-6)
    assert poses[0].identities.tolist() == [-1]
    assert poses[1].points.shape == (0, 2, 2)
    assert poses[2].points.dtype == np.float32 and poses[2].identities.dtype == np.int32


def test_multi_class_assigns_identities_per_frame_before_dropping():
    class_scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]], np.float32)
    poses = decode(_info("multi_class_topdown", ("x", "y")), _outputs(class_scores=class_scores), 3)
    assert poses[0].identities.tolist() == [0]
    # Frame 2 matches its three instances to two classes; the empty one takes
    # class 1 (0.8) and is dropped, leaving the third with class 0 and the
    # second unmatched.
    assert poses[2].identities.tolist() == [-1, 0]


def test_assign_classes_maximises_total_probability():
    scores = np.array([[0.6, 0.5], [0.55, 0.1]], np.float32)
    assert assign_classes(scores).tolist() == [1, 0]
    assert assign_classes(np.zeros((0, 3), np.float32)).tolist() == []
    assert assign_classes(np.array([[0.2, 0.8]], np.float32)).tolist() == [1]


def test_unknown_model_type_and_missing_outputs_are_errors():
    with pytest.raises(ModelConfigError, match="cannot decode outputs of a 'mystery' model"):
        decode(_info("mystery"), _outputs(), 1)
    with pytest.raises(ModelConfigError, match="lack class_scores"):
        decode(_info("multi_class_topdown", ("x",)), _outputs(), 1)
