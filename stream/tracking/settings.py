"""What a tracker is asked to do: sleap-nn's tracking options, checked, in one record.

The names and defaults are sleap-nn 0.3.5's (`sleap_nn.tracking.tracker.Tracker.from_config`,
`sleap-nn predict --tracking`, and for the MOT trackers `MOTParams.for_tracker` with
its "animal" preset), so a command line or a config written for one works for the
other. Options sleap-nn has but this package does not run (optical flow, Kalman
filters, the appearance-based MOT trackers) are refused with one line rather than
silently ignored, as are options of the other tracker family. The classic tracker's
appearance options (`features="embeddings"`, `appearance_weight`) read each
instance's embedding vector (`FramePoses.embeddings`), which no model sleap-live
runs makes yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]

# The trackers sleap-nn 0.3.5 offers (`--tracker`); `TRACKERS` are the ones run here.
MOT_TRACKERS = ("sort", "bytetrack", "ocsort")
TRACKERS = ("classic", *MOT_TRACKERS)
# sleap-nn's appearance-based MOT trackers need an embedding model on the host.
REFUSED_TRACKERS = ("botsort", "deepsort", "strongsort", "deepocsort")
CANDIDATES_METHODS = ("fixed_window", "local_queues")
FEATURES = ("keypoints", "centroids", "bboxes", "embeddings")
SCORING_METHODS = ("oks", "cosine_sim", "iou", "euclidean_dist")
SCORING_REDUCTIONS = ("mean", "max", "robust_quantile")
MATCHING_METHODS = ("hungarian", "greedy")

# sleap-nn's OKS keypoint spread when neither Kalman variant is in use.
DEFAULT_OKS_STDDEV = 0.025

# Scoring methods that read one kind of feature only (sleap-nn fails deep inside
# its scoring loop on any other; here the settings refuse the pair up front).
_FEATURES_OF_SCORING = {"oks": ("keypoints",), "iou": ("bboxes",)}
# sleap-nn's vector metrics (embeddings), and the geometric scores appearance can be
# blended into as they are (`sleap_nn.tracking.tracker`'s VECTOR_/BOUNDED_SCORING_METHODS).
_VECTOR_SCORING = ("cosine_sim", "euclidean_dist")
_BOUNDED_SCORING = ("oks", "iou")


def _one_of(choices: tuple[str, ...]) -> Validator:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in choices:
            raise ValueError(
                f"tracking: {attribute.name.replace('_', '-')} must be one of "
                f"{', '.join(choices)}, got {value!r}"
            )

    return check


def _check_tracker(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value in REFUSED_TRACKERS:
        raise ValueError(
            f"tracking: tracker {value!r} matches on appearance and needs an embedding "
            f"model, which sleap-live does not run; use --tracker {', '.join(TRACKERS)} "
            "(or sleap-nn track on the saved poses)"
        )
    _one_of(TRACKERS)(instance, attribute, value)


def _unit_or_none(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(
            f"tracking: {attribute.name.replace('_', '-')} must be in [0, 1], got {value!r}"
        )


@attrs.frozen
class MotParameters:
    """A MOT tracker's options, resolved: sleap-nn's "animal" preset for it with
    the options given on top (`TrackingSettings.mot_parameters`).

    Attributes:
        tracker: "sort", "bytetrack" or "ocsort".
        kalman: the box filter: "xysr" (SORT, OC-SORT) or "xywh" (ByteTrack).
        track_buffer: missed steps a track survives.
        min_hits: matches that confirm a tentative track.
        track_high_threshold: ByteTrack and OC-SORT: detections scoring above
            it are high-confidence (the only ones that start tracks).
        track_low_threshold: detections scoring at or below it are ignored.
        new_track_threshold: least score of a detection that starts a track.
        min_match_similarity: least similarity of a first-stage match.
        low_stage_min_similarity: ByteTrack's low-score stage's least similarity.
        unconfirmed_min_similarity: ByteTrack's tentative-track stage's.
        duplicate_similarity: ByteTrack: a lost track overlapping a matched
            detection more than this is a duplicate.
        fuse_score: ByteTrack: similarities are weighed by detection scores.
        box_padding: each side of a box is padded by this fraction of its length.
        delta_t: OC-SORT: steps back its direction term looks.
        inertia: OC-SORT: weight of its direction term.
    """

    tracker: str
    kalman: str
    track_buffer: int
    min_hits: int
    track_high_threshold: float
    track_low_threshold: float
    new_track_threshold: float
    min_match_similarity: float
    low_stage_min_similarity: float = 0.5
    unconfirmed_min_similarity: float = 0.3
    duplicate_similarity: float = 0.85
    fuse_score: bool = False
    box_padding: float = 0.1
    delta_t: int = 3
    inertia: float = 0.2


# sleap-nn 0.3.5's "animal" preset (`sleap_nn/tracking/mot/params.py`): each
# tracker's published constants with sleap-nn's changes for animals.
MOT_PRESETS = {
    "sort": MotParameters(
        tracker="sort",
        kalman="xysr",
        track_buffer=30,
        min_hits=3,
        track_high_threshold=0.1,
        track_low_threshold=0.1,
        new_track_threshold=0.1,
        min_match_similarity=0.3,
    ),
    "bytetrack": MotParameters(
        tracker="bytetrack",
        kalman="xywh",
        track_buffer=30,
        min_hits=2,
        track_high_threshold=0.5,
        track_low_threshold=0.1,
        new_track_threshold=0.6,
        min_match_similarity=0.2,
        fuse_score=True,
    ),
    "ocsort": MotParameters(
        tracker="ocsort",
        kalman="xysr",
        track_buffer=30,
        min_hits=3,
        track_high_threshold=0.6,
        track_low_threshold=0.1,
        new_track_threshold=0.6,
        min_match_similarity=0.3,
    ),
}

# Options of the MOT trackers only, and of the classic tracker only (names of
# `TrackingSettings` fields).
MOT_OPTIONS = (
    "track_buffer",
    "min_hits",
    "track_high_threshold",
    "track_low_threshold",
    "new_track_threshold",
    "min_match_similarity",
)
CLASSIC_OPTIONS = (
    "window_size",
    "min_new_track_points",
    "candidates_method",
    "min_match_points",
    "features",
    "scoring_method",
    "scoring_reduction",
    "robust_best_instance",
    "oks_stddev",
    "track_matching_method",
    "max_tracks",
    "appearance_weight",
    "euclidean_scale",
)


def _at_least(minimum: float, *, or_none: bool = False) -> Validator:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if or_none and value is None:
            return
        if value < minimum:
            raise ValueError(
                f"tracking: {attribute.name.replace('_', '-')} must be at least {minimum}, "
                f"got {value!r}"
            )

    return check


@attrs.frozen
class TrackingSettings:
    """Options of the tracker, under sleap-nn's names and with its defaults.

    The classic tracker reads the options from `window_size` to `max_tracks`; a
    MOT tracker reads those from `track_buffer` on (None: its sleap-nn preset,
    see `MOT_PRESETS`). An option of the other family away from its default is
    refused, as sleap-nn refuses it.

    Attributes:
        tracker: "classic" (sleap-nn's candidate-window tracker, its default), or
            the MOT trackers "sort", "bytetrack", "ocsort".
        window_size: frames (fixed_window) or instances per track (local_queues)
            a new instance is compared with.
        min_new_track_points: an instance starts a new track only with more found
            nodes than this.
        min_match_points: a past instance is a candidate only with more found
            nodes than this.
        features: what is compared: "keypoints", "centroids" (the nodes' median),
            "bboxes" (xmin, ymin, xmax, ymax) or "embeddings" (each instance's
            appearance vector, `FramePoses.embeddings`).
        candidates_method: "fixed_window" (the tracks seen in the last
            `window_size` frames) or "local_queues" (every track, its last
            `window_size` instances); when not given, local_queues for
            embeddings (as sleap-nn's `apply_tracking`: an animal back after an
            occlusion keeps its track), else fixed_window.
        scoring_method: "oks" (keypoints), "cosine_sim", "iou" (bboxes) or
            "euclidean_dist" (negated); embeddings score oks as cosine_sim
            (`resolved_scoring_method`).
        scoring_reduction: how one track's candidates' scores are combined:
            "mean", "max" or "robust_quantile" (at `robust_best_instance`).
        robust_best_instance: the quantile of "robust_quantile".
        oks_stddev: OKS keypoint spread.
        track_matching_method: "hungarian" (optimal) or "greedy" (best pair first).
        max_tracks: most tracks ever made; instances beyond it stay untracked.
            As in sleap-nn, setting it switches fixed_window to local_queues.
        appearance_weight: weight w of appearance (the cosine of the instances'
            embedding vectors) blended into the geometric score as
            (1 - w) x geometry + w x appearance where both exist; 0: geometry only.
        euclidean_scale: pixels; with `appearance_weight` and euclidean_dist, the
            distance d is first mapped to the similarity exp(-d / scale).
        track_buffer: MOT: missed steps (frames) a track survives.
        min_hits: MOT: matches that confirm a track; its detections until then
            are untracked live and labelled in the saved file.
        track_high_threshold: MOT (ByteTrack, OC-SORT): detections scoring above
            it are high-confidence; only they start tracks.
        track_low_threshold: MOT: detections scoring at or below it are ignored.
        new_track_threshold: MOT: least score of a detection that starts a track.
        min_match_similarity: MOT: least box similarity (IoU) of a match.
    """

    tracker: str = attrs.field(default="classic", validator=_check_tracker)
    window_size: int = attrs.field(default=5, validator=_at_least(1))
    min_new_track_points: int = attrs.field(default=0, validator=_at_least(0))
    min_match_points: int = attrs.field(default=0, validator=_at_least(0))
    features: str = attrs.field(default="keypoints", validator=_one_of(FEATURES))
    candidates_method: str = attrs.field(
        default=attrs.Factory(
            lambda self: "local_queues" if self.features == "embeddings" else "fixed_window",
            takes_self=True,
        ),
        validator=_one_of(CANDIDATES_METHODS),
    )
    scoring_method: str = attrs.field(default="oks", validator=_one_of(SCORING_METHODS))
    scoring_reduction: str = attrs.field(default="mean", validator=_one_of(SCORING_REDUCTIONS))
    robust_best_instance: float = attrs.field(default=1.0)
    oks_stddev: float = attrs.field(default=DEFAULT_OKS_STDDEV)
    track_matching_method: str = attrs.field(
        default="hungarian", validator=_one_of(MATCHING_METHODS)
    )
    max_tracks: int | None = attrs.field(default=None)
    appearance_weight: float = attrs.field(default=0.0)
    euclidean_scale: float | None = attrs.field(default=None)
    track_buffer: int | None = attrs.field(default=None, validator=_at_least(0, or_none=True))
    min_hits: int | None = attrs.field(default=None, validator=_at_least(1, or_none=True))
    track_high_threshold: float | None = attrs.field(default=None, validator=_unit_or_none)
    track_low_threshold: float | None = attrs.field(default=None, validator=_unit_or_none)
    new_track_threshold: float | None = attrs.field(default=None, validator=_unit_or_none)
    min_match_similarity: float | None = attrs.field(default=None, validator=_unit_or_none)

    def __attrs_post_init__(self) -> None:
        self._check_family()
        self._check_appearance()
        needs = _FEATURES_OF_SCORING.get(self.resolved_scoring_method)
        if needs is not None and self.features not in needs:
            raise ValueError(
                f"tracking: scoring-method {self.scoring_method} compares "
                f"{' or '.join(needs)}, not features={self.features}"
            )
        if not 0.0 < self.robust_best_instance <= 1.0:
            raise ValueError(
                "tracking: robust-best-instance must be in (0, 1], got "
                f"{self.robust_best_instance!r}"
            )
        if not self.oks_stddev > 0.0:
            raise ValueError(f"tracking: oks-stddev must be positive, got {self.oks_stddev!r}")
        if self.max_tracks is not None and self.max_tracks < 1:
            raise ValueError(f"tracking: max-tracks must be at least 1, got {self.max_tracks!r}")

    def _check_family(self) -> None:
        if self.tracker == "classic":
            given = [name for name in MOT_OPTIONS if getattr(self, name) is not None]
            if given:
                raise ValueError(
                    f"tracking: {_flags(given)} only apply to the MOT trackers "
                    f"(--tracker {', '.join(MOT_TRACKERS)}), not to classic"
                )
            return
        defaults = TrackingSettings()
        changed = [
            name for name in CLASSIC_OPTIONS if getattr(self, name) != getattr(defaults, name)
        ]
        if changed:
            raise ValueError(
                f"tracking: {_flags(changed)} only apply to the classic tracker, not to "
                f"{self.tracker} (which compares boxes: IoU, or centroids for one-node "
                "skeletons)"
            )
        self.mot_parameters  # noqa: B018 (resolving checks the thresholds together)

    def _check_appearance(self) -> None:
        # sleap-nn's `validate_appearance_config` on the resolved values (flow and
        # Kalman, which it also refuses here, are not built into sleap-live).
        weight, scoring = self.appearance_weight, self.resolved_scoring_method
        if not 0.0 <= weight <= 1.0:
            raise ValueError(
                f"tracking: appearance-weight must be in [0, 1] (0: geometry only, 1: "
                f"appearance only), got {weight!r}"
            )
        if weight > 0.0 and self.features == "embeddings":
            raise ValueError(
                "tracking: appearance-weight blends appearance into a geometric score, but "
                "features=embeddings is appearance only; pair it with a geometric feature "
                "(e.g. keypoints), or drop it"
            )
        if self.features == "embeddings" and scoring not in _VECTOR_SCORING:
            raise ValueError(
                "tracking: features=embeddings requires scoring-method cosine_sim (or "
                f"euclidean_dist), got {scoring!r}; leave it unset to use cosine_sim"
            )
        if weight == 0.0:
            return
        if scoring == "euclidean_dist":
            if self.euclidean_scale is None:
                raise ValueError(
                    "tracking: appearance-weight with scoring-method euclidean_dist requires "
                    "--euclidean-scale (pixels: the typical step of one animal between "
                    "frames), to map distances to similarities before blending"
                )
            if not self.euclidean_scale > 0:
                raise ValueError(
                    "tracking: euclidean-scale must be a positive number of pixels, got "
                    f"{self.euclidean_scale!r}"
                )
        elif scoring not in _BOUNDED_SCORING:
            reason = (
                "cosine_sim is the appearance metric (the cosine of raw coordinates is "
                "near 1 for any two poses)"
                if scoring == "cosine_sim"
                else f"scoring-method {scoring} is neither"
            )
            raise ValueError(
                "tracking: appearance-weight requires a geometric score that is bounded, "
                f"or mappable to one; {reason}. Use oks (poses), iou (boxes), or "
                "euclidean_dist with --euclidean-scale"
            )

    @property
    def mot_parameters(self) -> MotParameters:
        """The MOT tracker's resolved options: its preset with the ones given.

        Raises:
            ValueError: the tracker is "classic", or track-low-threshold is above
                track-high-threshold.
        """
        if self.tracker not in MOT_PRESETS:
            raise ValueError(f"tracking: {self.tracker} is not a MOT tracker")
        given = {name: getattr(self, name) for name in MOT_OPTIONS}
        resolved = attrs.evolve(
            MOT_PRESETS[self.tracker], **{k: v for k, v in given.items() if v is not None}
        )
        if resolved.track_low_threshold > resolved.track_high_threshold:
            raise ValueError(
                "tracking: track-low-threshold must be at most track-high-threshold, got "
                f"{resolved.track_low_threshold} > {resolved.track_high_threshold}"
            )
        return resolved

    @property
    def resolved_candidates_method(self) -> str:
        """The candidate method that runs: sleap-nn honours `max_tracks` only with
        local queues, so asking for a cap switches fixed_window to them."""
        if self.max_tracks is not None:
            return "local_queues"
        return self.candidates_method

    @property
    def resolved_scoring_method(self) -> str:
        """The scoring method that runs: embeddings score oks (the default, which
        does not apply to a vector) as cosine_sim, as sleap-nn's `apply_tracking`."""
        if self.features == "embeddings" and self.scoring_method == "oks":
            return "cosine_sim"
        return self.scoring_method


def _flags(names: list[str]) -> str:
    return ", ".join(
        "--" + ("tracking-window-size" if n == "window_size" else n.replace("_", "-"))
        for n in names
    )


def refuse_unbuilt(option: str) -> ValueError:
    """The one-line refusal of a sleap-nn tracking option this package does not run."""
    return ValueError(
        f"tracking: {option} is not built into sleap-live (sleap-nn's optical-flow "
        "and Kalman trackers need images or models on the host); run "
        "sleap-nn track on the saved poses instead"
    )
