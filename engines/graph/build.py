"""Builds the torch inference model of one or two trained sleap-nn model directories."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.bottomup import BottomUpModel, MultiClassBottomUpModel
from sleap_live.engines.graph.centroid import CentroidModel
from sleap_live.engines.graph.single_instance import SingleInstanceModel
from sleap_live.engines.graph.topdown import MultiClassTopDownModel, TopDownModel
from sleap_live.engines.load.dirs import read_model_dir


def load_inference_model(paths: str | Path | Sequence[str | Path]) -> InferenceModel:
    """The torch inference model of one or two trained sleap-nn model directories.

    Args:
        paths: a single-instance, centroid, bottom-up or multi-class bottom-up
            directory; or a centroid directory and a centered-instance or
            multi-class top-down directory, in any order.

    Raises:
        ModelNotFoundError: a directory, config or checkpoint is missing.
        ModelConfigError: the directories do not form a runnable model (a
            centered-instance model without its centroid model, two frame models).
        CheckpointError: a checkpoint does not load.
    """

    dirs = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    specs = [read_model_dir(path) for path in dirs]
    types = [spec.model_type for spec in specs]
    if len(specs) == 1:
        (spec,) = specs
        single: dict[str, type[SingleInstanceModel | CentroidModel | BottomUpModel]] = {
            "single_instance": SingleInstanceModel,
            "centroid": CentroidModel,
            "bottomup": BottomUpModel,
            "multi_class_bottomup": MultiClassBottomUpModel,
        }
        if spec.model_type in single:
            return single[spec.model_type].from_spec(spec)
        raise ModelConfigError(
            f"{dirs[0]}: a {spec.model_type} model runs on crops around centroids; "
            "give its centroid model directory too"
        )
    pairs: dict[str, type[TopDownModel]] = {
        "centered_instance": TopDownModel,
        "multi_class_topdown": MultiClassTopDownModel,
    }
    if len(specs) == 2 and "centroid" in types:
        centroid = specs[types.index("centroid")]
        instance = specs[1 - types.index("centroid")]
        if instance.model_type in pairs:
            return pairs[instance.model_type].from_specs(centroid, instance)
    listed = ", ".join(f"{path} ({kind})" for path, kind in zip(dirs, types, strict=True))
    raise ModelConfigError(
        f"{listed}: two directories must be a centroid model and a centered-instance "
        "or multi-class top-down model"
    )
