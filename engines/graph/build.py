"""Builds the torch inference model of one to three trained sleap-nn model directories."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.bottomup import BottomUpModel, MultiClassBottomUpModel
from sleap_live.engines.graph.box_topdown import BoxMultiClassTopDownModel, BoxTopDownModel
from sleap_live.engines.graph.centroid import CentroidModel
from sleap_live.engines.graph.detector import BoxDetectorModel
from sleap_live.engines.graph.embedding import EmbeddingStage
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.segmentation import SemanticSegmentationModel
from sleap_live.engines.graph.single_instance import SingleInstanceModel
from sleap_live.engines.graph.topdown import (
    EmbeddingTopDownModel,
    MultiClassTopDownModel,
    TopDownModel,
)
from sleap_live.engines.load.dirs import read_model_dir
from sleap_live.engines.load.spec import BOX_MODEL_TYPES, ModelSpec
from sleap_live.engines.settings import LEGACY_SLEAP1, InferenceSettings


def load_inference_model(
    paths: str | Path | Sequence[str | Path], settings: InferenceSettings | None = None
) -> InferenceModel:
    """The torch inference model of one to three trained sleap-nn model directories.

    Args:
        paths: a single-instance, centroid, bottom-up, multi-class bottom-up,
            semantic segmentation or box detector (`bbox_centernet` or `bbox_ssd`)
            directory; or a centroid directory and a
            centered-instance or multi-class top-down directory, or a
            `bbox_centernet` detector and one of those two, in any order; or a
            centroid, a centered-instance and an `embedding` directory, in any
            order (sleap-nn's fused route: the poses, then a vector for each).
        settings: the inference settings (default: sleap-nn predict's); they are
            recorded in the model's `info.settings`.

    Raises:
        ModelNotFoundError: a directory, config or checkpoint is missing.
        ModelConfigError: the directories do not form a runnable model (a
            centered-instance model without its centroid model, two frame models).
        CheckpointError: a checkpoint does not load.
    """

    settings = InferenceSettings() if settings is None else settings
    model = _built(paths, settings)
    model.info = attrs.evolve(model.info, settings=settings)
    return model


def _built(paths: str | Path | Sequence[str | Path], settings: InferenceSettings) -> InferenceModel:
    dirs = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    specs = [_with_conventions(read_model_dir(path), settings) for path in dirs]
    types = [spec.model_type for spec in specs]
    if "embedding" in types:
        return _embedding_topdown(dirs, specs, settings)
    if len(specs) == 1:
        (spec,) = specs
        single: dict[str, type[SingleInstanceModel | CentroidModel | BottomUpModel]] = {
            "single_instance": SingleInstanceModel,
            "centroid": CentroidModel,
            "bottomup": BottomUpModel,
            "multi_class_bottomup": MultiClassBottomUpModel,
        }
        if spec.model_type in single:
            return single[spec.model_type].from_spec(spec, **_options(spec.model_type, settings))
        if spec.model_type in BOX_MODEL_TYPES:
            return BoxDetectorModel.from_spec(spec, **_options("bbox", settings))
        if spec.model_type == "semantic_segmentation":
            return SemanticSegmentationModel.from_spec(spec)
        raise ModelConfigError(
            f"{dirs[0]}: a {spec.model_type} model runs on crops around centroids; "
            "give its centroid model directory too"
        )
    if len(specs) == 2 and any(kind in BOX_MODEL_TYPES for kind in types):
        return _box_topdown(dirs, specs, settings)
    pairs: dict[str, type[TopDownModel]] = {
        "centered_instance": TopDownModel,
        "multi_class_topdown": MultiClassTopDownModel,
    }
    if len(specs) == 2 and "centroid" in types:
        centroid = specs[types.index("centroid")]
        instance = specs[1 - types.index("centroid")]
        if instance.model_type in pairs:
            return pairs[instance.model_type].from_specs(
                centroid, instance, **_options("topdown", settings)
            )
    listed = ", ".join(f"{path} ({kind})" for path, kind in zip(dirs, types, strict=True))
    raise ModelConfigError(
        f"{listed}: two directories must be a centroid model and a centered-instance "
        "or multi-class top-down model"
    )


def _embedding_topdown(
    dirs: list[Path], specs: list[ModelSpec], settings: InferenceSettings
) -> InferenceModel:
    """A centroid, a centered-instance and an embedding model, in any order.

    Raises:
        ModelConfigError: the directories are not those three, or the embedding
            model size-matches frames other than the pose models do.
    """
    types = [spec.model_type for spec in specs]
    embedding = specs[types.index("embedding")]
    if sorted(types) != ["centered_instance", "centroid", "embedding"]:
        listed = ", ".join(f"{path} ({kind})" for path, kind in zip(dirs, types, strict=True))
        raise ModelConfigError(
            f"{listed}: an embedding model ({embedding.path}) runs after a centroid and a "
            "centered-instance model; give all three directories"
        )
    centroid = specs[types.index("centroid")]
    instance = specs[types.index("centered_instance")]
    stage = EmbeddingStage(load_model_network(embedding), embedding)
    model = EmbeddingTopDownModel.from_specs(
        centroid, instance, embedding=stage, **_options("topdown", settings)
    )
    preprocess = embedding.preprocess
    frame = model.frame_preprocess
    if (preprocess.max_height, preprocess.max_width) != (frame.max_height, frame.max_width):
        # sleap-nn crops the embedding's own size-matched frames; sleap-live the pair's.
        raise ModelConfigError(
            f"{embedding.config_path}: max_height/max_width {preprocess.max_height}/"
            f"{preprocess.max_width} differ from the pose models' {frame.max_height}/"
            f"{frame.max_width}; sleap-live crops the frames the pose models size-match"
        )
    return model


def _box_topdown(
    dirs: list[Path], specs: list[ModelSpec], settings: InferenceSettings
) -> InferenceModel:
    """A box detector and a centered-instance or multi-class top-down model, in
    either order.

    Raises:
        ModelConfigError: the other directory is neither.
    """
    types = [spec.model_type for spec in specs]
    detector = next(i for i, kind in enumerate(types) if kind in BOX_MODEL_TYPES)
    instance = specs[1 - detector]
    pairs: dict[str, type[BoxTopDownModel]] = {
        "centered_instance": BoxTopDownModel,
        "multi_class_topdown": BoxMultiClassTopDownModel,
    }
    if instance.model_type not in pairs:
        raise ModelConfigError(
            f"{dirs[1 - detector]}: a {instance.model_type} model; a box detector "
            f"({dirs[detector]}) runs as the first stage of a centered-instance or "
            "multi-class top-down model"
        )
    return pairs[instance.model_type].from_box_specs(
        specs[detector], instance, **_options("topdown", settings)
    )


def _with_conventions(spec: ModelSpec, settings: InferenceSettings) -> ModelSpec:
    """A SLEAP 1.x model's spec set to run as `settings.legacy_postprocess` says."""
    if spec.legacy is None:
        return spec
    sleap1 = settings.legacy_postprocess == LEGACY_SLEAP1
    return attrs.evolve(spec, legacy=attrs.evolve(spec.legacy, sleap1_conventions=sleap1))


def _options(model_type: str, settings: InferenceSettings) -> dict[str, Any]:
    """The model class's keyword options for `settings`."""
    peaks = {
        "refine": settings.integral_refinement,
        "patch_size": settings.integral_patch_size,
    }
    if model_type == "single_instance":
        return {**peaks, "peak_threshold": settings.peak_threshold}
    if model_type == "bbox":
        return {"peak_threshold": settings.peak_threshold, "max_instances": settings.max_instances}
    if model_type == "centroid":
        return {
            **peaks,
            "peak_threshold": settings.centroid_threshold,
            "max_instances": settings.max_instances,
        }
    if model_type == "topdown":
        return {
            **peaks,
            "peak_threshold": settings.peak_threshold,
            "centroid_peak_threshold": settings.centroid_peak_threshold,
            "max_instances": settings.max_instances,
        }
    grouping = {"peak_threshold": settings.peak_threshold, "max_instances": settings.max_instances}
    if model_type == "multi_class_bottomup":
        return {**peaks, **grouping}
    return {
        **peaks,
        **grouping,
        "n_points": settings.n_points,
        "max_edge_length_ratio": settings.max_edge_length_ratio,
        "dist_penalty_weight": settings.dist_penalty_weight,
        "min_line_scores": settings.min_line_scores,
        "min_instance_peaks": settings.min_instance_peaks,
    }
