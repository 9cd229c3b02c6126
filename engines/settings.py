"""Inference settings: the `sleap-nn predict` options that change what a model finds.

`InferenceSettings` holds them, named and defaulted as `sleap-nn predict` names and
defaults them. Some shape the inference graph (peak finding, the centroid cap of
top-down models, PAF line scoring) and are fixed when a model is exported; the
others are applied on the host when a graph's outputs are grouped into instances
(`HOST_FIELDS`, `GROUPING_FIELDS`). `check_exported_settings` compares a record
with the one an export was built with, refusing a graph-side difference with an
error saying to re-export; `with_settings` applies the host-side fields.

`max_instances` is None by default, as in sleap-nn: every centroid and every
grouped instance is kept. A top-down graph then lists as many instances as it
finds; only the TensorRT profile, which has a fixed number of instance slots per
frame, needs a number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from sleap_live.engines.errors import ModelConfigError

if TYPE_CHECKING:
    from sleap_live.engines.types import ModelInfo

# Upper bounds far beyond any use (a refinement window wider than a peak, more PAF
# samples than pixels along a line), below what would exhaust memory.
MAX_PATCH_SIZE = 31
MAX_N_POINTS = 1000
# How a SLEAP 1.x model's outputs become points (`InferenceSettings.legacy_postprocess`).
LEGACY_SLEAP1 = "sleap1"
LEGACY_SLEAP_NN = "sleap-nn"
LEGACY_POSTPROCESSES = (LEGACY_SLEAP1, LEGACY_SLEAP_NN)


def _check_threshold(instance: Any, attribute: Any, value: float | None) -> None:
    if value is None and attribute.name == "centroid_peak_threshold":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be a number from 0 to 1, got {value!r}")


def _check_max_instances(instance: Any, attribute: Any, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_instances must be a whole number of at least 1, got {value!r}")


def _check_patch_size(instance: Any, attribute: Any, value: int) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_PATCH_SIZE
        or value % 2 == 0
    ):
        raise ValueError(
            f"integral_patch_size must be an odd whole number from 1 to {MAX_PATCH_SIZE}, "
            f"got {value!r}"
        )


def _check_n_points(instance: Any, attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N_POINTS:
        raise ValueError(f"n_points must be a whole number from 1 to {MAX_N_POINTS}, got {value!r}")


def _check_positive(instance: Any, attribute: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a number above 0, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be finite, got {value!r}")


def _check_non_negative(instance: Any, attribute: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{attribute.name} must be a number of at least 0, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be finite, got {value!r}")


def _check_min_instance_peaks(instance: Any, attribute: Any, value: int | float) -> None:
    _check_non_negative(instance, attribute, value)
    if isinstance(value, float) and value > 1:
        raise ValueError(
            f"min_instance_peaks as a fraction of the nodes must be at most 1, got {value!r} "
            "(give a whole number for a count of peaks)"
        )


def _check_finite(instance: Any, attribute: Any, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be a finite number, got {value!r}")


@attrs.frozen(kw_only=True)
class InferenceSettings:
    """How a model's outputs become instances; sleap-nn predict's options and defaults.

    Attributes:
        peak_threshold: confidence map peaks must be above this (0 to 1).
        centroid_peak_threshold: the top-down centroid stage's threshold; None
            uses `peak_threshold`.
        max_instances: most instances per frame (the highest centroids of a
            top-down model, the best scoring grouped instances of a bottom-up
            one); None keeps every one.
        integral_refinement: sub-pixel integral refinement of peaks.
        integral_patch_size: its window side (odd, so that the peak is its centre).
        max_edge_length_ratio: bottom-up: PAF lines longer than this fraction of
            the larger image side are penalised.
        dist_penalty_weight: bottom-up: the weight of that penalty.
        n_points: bottom-up: samples along each candidate PAF line.
        min_instance_peaks: bottom-up: instances with fewer peaks are dropped; a
            whole number is a count, a decimal a fraction of the nodes.
        min_line_scores: bottom-up: matched PAF lines scoring below this are dropped.
        legacy_postprocess: SLEAP 1.x models only: "sleap1" finds and places peaks
            as SLEAP 1.x did (its offset-refinement head where the model has one,
            its coordinate conventions); "sleap-nn" as sleap-nn predicts (integral
            refinement, sleap-nn's conventions). sleap-nn models ignore it.
    """

    peak_threshold: float = attrs.field(default=0.2, validator=_check_threshold)
    centroid_peak_threshold: float | None = attrs.field(default=None, validator=_check_threshold)
    max_instances: int | None = attrs.field(default=None, validator=_check_max_instances)
    integral_refinement: bool = attrs.field(
        default=True, validator=attrs.validators.instance_of(bool)
    )
    integral_patch_size: int = attrs.field(default=5, validator=_check_patch_size)
    max_edge_length_ratio: float = attrs.field(default=0.25, validator=_check_positive)
    dist_penalty_weight: float = attrs.field(default=1.0, validator=_check_non_negative)
    n_points: int = attrs.field(default=10, validator=_check_n_points)
    min_instance_peaks: int | float = attrs.field(default=0, validator=_check_min_instance_peaks)
    min_line_scores: float = attrs.field(default=0.25, validator=_check_finite)
    legacy_postprocess: str = attrs.field(
        default=LEGACY_SLEAP1, validator=attrs.validators.in_(LEGACY_POSTPROCESSES)
    )

    @property
    def centroid_threshold(self) -> float:
        """The centroid stage's threshold (`centroid_peak_threshold`, else `peak_threshold`)."""
        if self.centroid_peak_threshold is None:
            return self.peak_threshold
        return self.centroid_peak_threshold

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON types, by field name."""
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], origin: str = "settings") -> InferenceSettings:
        """Inverse of `to_dict`; fields absent from `document` take their defaults.

        Raises:
            ModelConfigError: an unknown field or a value out of range, naming `origin`.
        """
        unknown = sorted(set(document) - set(FIELDS))
        if unknown:
            raise ModelConfigError(f"{origin}: unknown inference settings {unknown}")
        try:
            return cls(**document)
        except (TypeError, ValueError) as error:
            raise ModelConfigError(f"{origin}: {error}") from error

    def graph_key(self) -> dict[str, Any]:
        """The fields a graph can depend on (for the export cache's key)."""
        return {name: value for name, value in self.to_dict().items() if name not in HOST_FIELDS}


FIELDS = tuple(field.name for field in attrs.fields(InferenceSettings))
DEFAULT_SETTINGS = InferenceSettings()

# Applied when outputs are grouped, whatever the graph; `max_instances` too for
# bottom-up models (`GROUPING_FIELDS`).
HOST_FIELDS = ("min_line_scores", "min_instance_peaks")
_PEAKS = ("peak_threshold", "integral_refinement", "integral_patch_size", "legacy_postprocess")
_CENTROIDS = ("centroid_peak_threshold", "max_instances")
_PAF_GRAPH = ("max_edge_length_ratio", "dist_penalty_weight", "n_points")
# The fields each model type's graph is built with.
GRAPH_FIELDS: Mapping[str, tuple[str, ...]] = {
    "single_instance": _PEAKS,
    "centroid": (*_PEAKS, *_CENTROIDS),
    "topdown": (*_PEAKS, *_CENTROIDS),
    "multi_class_topdown": (*_PEAKS, *_CENTROIDS),
    "bottomup": (*_PEAKS, *_PAF_GRAPH),
    "multi_class_bottomup": _PEAKS,
}
# The fields each model type's host-side grouping applies.
GROUPING_FIELDS: Mapping[str, tuple[str, ...]] = {
    "bottomup": (*HOST_FIELDS, "max_instances"),
    "multi_class_bottomup": ("max_instances",),
}


def graph_differences(
    model_type: str, exported: InferenceSettings, requested: InferenceSettings
) -> list[str]:
    """The graph-side fields of `model_type` whose values differ, as "name X, exported with Y"."""
    differ = []
    for name in GRAPH_FIELDS.get(model_type, ()):
        asked, made = getattr(requested, name), getattr(exported, name)
        if name == "centroid_peak_threshold":
            if asked is None and made is None:
                continue  # both follow peak_threshold, compared on its own
            asked, made = requested.centroid_threshold, exported.centroid_threshold
        if asked != made:
            differ.append(f"{name} {asked}, exported with {made}")
    return differ


def check_exported_settings(
    model_type: str,
    exported: InferenceSettings | None,
    requested: InferenceSettings,
    origin: str,
) -> None:
    """Refuses `requested` where the graph of `origin` was built with other values.

    Raises:
        ModelConfigError: one line naming `origin`, the differing settings, and
            to re-export (or to run with the export's settings).
    """
    if exported is None:
        raise ModelConfigError(
            f"{origin}: the export records no inference settings (made by an older "
            "sleap-live); re-export it to choose them"
        )
    differ = graph_differences(model_type, exported, requested)
    if differ:
        raise ModelConfigError(
            f"{origin}: the exported graph was built with other settings ({'; '.join(differ)}); "
            "re-export the model with these, or run it with the ones it was exported with"
        )


def with_settings(info: ModelInfo, settings: InferenceSettings) -> ModelInfo:
    """`info` run with `settings`: recorded in it, and its grouping's fields applied.

    The graph-side fields must be those the graph was built with
    (`check_exported_settings`); the host-side ones replace what `info` carried.
    """
    grouping = GROUPING_FIELDS.get(info.model_type, ())
    postprocess = dict(info.postprocess)
    for name in grouping:
        if name in HOST_FIELDS:
            postprocess[name] = getattr(settings, name)
    max_instances = info.max_instances
    if "max_instances" in grouping:
        max_instances = settings.max_instances
        if max_instances is None and info.class_names:
            # One instance per class at most: no limit.
            max_instances = len(info.class_names)
    return attrs.evolve(
        info, settings=settings, max_instances=max_instances, postprocess=postprocess
    )


# Model types whose TensorRT-profile graph has `max_instances` instance slots per frame.
SLOTTED_TYPES = ("centroid", "topdown", "multi_class_topdown")


def check_slots(model_type: str, max_instances: int | None) -> None:
    """Refuses a TensorRT-profile graph of `model_type` without a number of slots.

    Raises:
        ModelConfigError: a centroid or top-down model without `max_instances`.
    """
    if model_type in SLOTTED_TYPES and max_instances is None:
        raise ModelConfigError(
            f"the tensorrt profile of a {model_type} model has a fixed number of instance "
            "slots per frame: give max_instances (--max-instances N, the most animals a "
            "frame can hold)"
        )
