"""What a tracker is asked to do: sleap-nn's tracking options, checked, in one record.

The names and defaults are sleap-nn 0.3.5's (`sleap_nn.tracking.tracker.Tracker.from_config`,
`sleap-nn predict --tracking`), so a command line or a config written for one works
for the other. Options sleap-nn has but this package does not run (optical flow,
Kalman filters, appearance features, the appearance-based MOT trackers) are refused
with one line rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]

# The trackers sleap-nn 0.3.5 offers (`--tracker`); `TRACKERS` are the ones run here.
TRACKERS = ("classic",)
REFUSED_TRACKERS = (
    "sort",
    "bytetrack",
    "ocsort",
    "botsort",
    "deepsort",
    "strongsort",
    "deepocsort",
)
CANDIDATES_METHODS = ("fixed_window", "local_queues")
FEATURES = ("keypoints", "centroids", "bboxes")
SCORING_METHODS = ("oks", "cosine_sim", "iou", "euclidean_dist")
SCORING_REDUCTIONS = ("mean", "max", "robust_quantile")
MATCHING_METHODS = ("hungarian", "greedy")

# sleap-nn's OKS keypoint spread when neither Kalman variant is in use.
DEFAULT_OKS_STDDEV = 0.025

# Scoring methods that read one kind of feature only (sleap-nn fails deep inside
# its scoring loop on any other; here the settings refuse the pair up front).
_FEATURES_OF_SCORING = {"oks": ("keypoints",), "iou": ("bboxes",)}


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
            f"tracking: tracker {value!r} is not built into sleap-live yet; use "
            f"--tracker {' or '.join(TRACKERS)} (or sleap-nn track on the saved poses)"
        )
    _one_of(TRACKERS)(instance, attribute, value)


def _at_least(minimum: float) -> Validator:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value < minimum:
            raise ValueError(
                f"tracking: {attribute.name.replace('_', '-')} must be at least {minimum}, "
                f"got {value!r}"
            )

    return check


@attrs.frozen
class TrackingSettings:
    """Options of the tracker, under sleap-nn's names and with its defaults.

    Attributes:
        tracker: "classic" (sleap-nn's candidate-window tracker, its default).
        window_size: frames (fixed_window) or instances per track (local_queues)
            a new instance is compared with.
        min_new_track_points: an instance starts a new track only with more found
            nodes than this.
        candidates_method: "fixed_window" (the tracks seen in the last
            `window_size` frames) or "local_queues" (every track, its last
            `window_size` instances).
        min_match_points: a past instance is a candidate only with more found
            nodes than this.
        features: what is compared: "keypoints", "centroids" (the nodes' median)
            or "bboxes" (xmin, ymin, xmax, ymax).
        scoring_method: "oks" (keypoints), "cosine_sim", "iou" (bboxes) or
            "euclidean_dist" (negated).
        scoring_reduction: how one track's candidates' scores are combined:
            "mean", "max" or "robust_quantile" (at `robust_best_instance`).
        robust_best_instance: the quantile of "robust_quantile".
        oks_stddev: OKS keypoint spread.
        track_matching_method: "hungarian" (optimal) or "greedy" (best pair first).
        max_tracks: most tracks ever made; instances beyond it stay untracked.
            As in sleap-nn, setting it switches fixed_window to local_queues.
    """

    tracker: str = attrs.field(default="classic", validator=_check_tracker)
    window_size: int = attrs.field(default=5, validator=_at_least(1))
    min_new_track_points: int = attrs.field(default=0, validator=_at_least(0))
    candidates_method: str = attrs.field(
        default="fixed_window", validator=_one_of(CANDIDATES_METHODS)
    )
    min_match_points: int = attrs.field(default=0, validator=_at_least(0))
    features: str = attrs.field(default="keypoints", validator=_one_of(FEATURES))
    scoring_method: str = attrs.field(default="oks", validator=_one_of(SCORING_METHODS))
    scoring_reduction: str = attrs.field(default="mean", validator=_one_of(SCORING_REDUCTIONS))
    robust_best_instance: float = attrs.field(default=1.0)
    oks_stddev: float = attrs.field(default=DEFAULT_OKS_STDDEV)
    track_matching_method: str = attrs.field(
        default="hungarian", validator=_one_of(MATCHING_METHODS)
    )
    max_tracks: int | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        needs = _FEATURES_OF_SCORING.get(self.scoring_method)
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

    @property
    def resolved_candidates_method(self) -> str:
        """The candidate method that runs: sleap-nn honours `max_tracks` only with
        local queues, so asking for a cap switches fixed_window to them."""
        if self.max_tracks is not None:
            return "local_queues"
        return self.candidates_method


def refuse_unbuilt(option: str) -> ValueError:
    """The one-line refusal of a sleap-nn tracking option this package does not run."""
    return ValueError(
        f"tracking: {option} is not built into sleap-live (sleap-nn's optical-flow, "
        "Kalman and appearance trackers need images or models on the host); run "
        "sleap-nn track on the saved poses instead"
    )
