"""The tracking options of `run`, `replay` and `track`: sleap-nn's, with dashes.

``--tracking`` turns the tracker on; every other option is sleap-nn 0.3.5's
``sleap-nn predict`` option of the same name (``--tracking_window_size`` is
``--tracking-window-size`` here), with its default (for the MOT trackers, their
sleap-nn preset's). Options sleap-nn has but sleap-live does not run are accepted
by name and refused in one line. The appearance options (``--features embeddings``,
``--appearance-weight``) need poses that carry embedding vectors: a top-down pair
with an embedding model (a third ``-m``), with which, as in sleap-nn, the classic
tracker compares the vectors (``embeddings``, ``cosine_sim``) unless
``--features``, ``--scoring-method`` or ``--appearance-weight`` say otherwise.
"""

from __future__ import annotations

import argparse

import attrs

from sleap_live.cli.options import UsageError, count, flag, positive_float, positive_int
from sleap_live.stream.tracking.settings import (
    CANDIDATES_METHODS,
    FEATURES,
    MATCHING_METHODS,
    MOT_PRESETS,
    MOT_TRACKERS,
    REFUSED_TRACKERS,
    SCORING_METHODS,
    SCORING_REDUCTIONS,
    TRACKERS,
    TrackingSettings,
    refuse_unbuilt,
)

# Option (dest) -> `TrackingSettings` field: the same name, but for sleap-nn's
# --tracking-window-size.
_FIELDS = {
    "tracking_window_size" if field == "window_size" else field: field
    for field in attrs.fields_dict(TrackingSettings)
}
_UNBUILT = ("use_flow", "use_kalman")


def add_tracking_options(parser: argparse.ArgumentParser, *, always: bool = False) -> None:
    """Adds the tracking options; with `always` (the `track` command) there is no
    ``--tracking`` switch, the tracker always runs."""
    group = parser.add_argument_group(
        "tracking", "sleap-nn's tracker and its options (see docs/tracking.md)"
    )
    if not always:
        group.add_argument(
            "--tracking",
            action="store_true",
            help="give each animal a track id that follows it from frame to frame "
            "(sleap-nn's tracker, host-side as poses leave the engine)",
        )
    defaults = TrackingSettings()
    group.add_argument(
        "--tracker",
        choices=TRACKERS + REFUSED_TRACKERS,
        metavar="NAME",
        help="the tracker: classic (sleap-nn's candidate-window tracker) or its MOT "
        f"trackers {', '.join(MOT_TRACKERS)} (Kalman boxes; a track's first frames are "
        f"labelled once it is confirmed); {', '.join(REFUSED_TRACKERS)} need an embedding "
        f"model and are refused (default: {defaults.tracker})",
    )
    group.add_argument(
        "--tracking-window-size",
        type=positive_int,
        metavar="N",
        help="past frames (fixed_window) or instances per track (local_queues) a new "
        f"instance is compared with (default: {defaults.window_size})",
    )
    group.add_argument(
        "--min-new-track-points",
        type=count,
        metavar="N",
        help="an instance starts a track only with more nodes found than this "
        f"(default: {defaults.min_new_track_points})",
    )
    group.add_argument(
        "--candidates-method",
        choices=CANDIDATES_METHODS,
        help="the tracks of the last frames, or every track's last instances "
        f"(default: {defaults.candidates_method}; local_queues with --max-tracks or "
        "--features embeddings)",
    )
    group.add_argument(
        "--min-match-points",
        type=count,
        metavar="N",
        help="a past instance is compared only with more nodes found than this "
        f"(default: {defaults.min_match_points})",
    )
    group.add_argument(
        "--features",
        choices=FEATURES,
        help="what is compared: keypoints, centroids, bboxes, or embeddings (appearance "
        "vectors, which no model sleap-live runs makes yet) "
        f"(default: {defaults.features})",
    )
    group.add_argument(
        "--scoring-method",
        choices=SCORING_METHODS,
        help="how alike two instances are: oks (keypoints), cosine_sim, iou (bboxes), "
        f"euclidean_dist (default: {defaults.scoring_method}; cosine_sim with --features "
        "embeddings)",
    )
    group.add_argument(
        "--scoring-reduction",
        choices=SCORING_REDUCTIONS,
        help="one score per track from its past instances' scores "
        f"(default: {defaults.scoring_reduction})",
    )
    group.add_argument(
        "--robust-best-instance",
        type=positive_float,
        metavar="Q",
        help="the quantile of --scoring-reduction robust_quantile, in (0, 1] "
        f"(default: {defaults.robust_best_instance})",
    )
    group.add_argument(
        "--oks-stddev",
        type=positive_float,
        metavar="S",
        help=f"OKS keypoint spread (default: {defaults.oks_stddev})",
    )
    group.add_argument(
        "--track-matching-method",
        choices=MATCHING_METHODS,
        help=f"hungarian (optimal) or greedy (default: {defaults.track_matching_method})",
    )
    group.add_argument(
        "--max-tracks",
        type=positive_int,
        metavar="N",
        help="most tracks ever started; later instances stay untracked (default: no limit)",
    )
    group.add_argument(
        "--appearance-weight",
        type=_unit,
        metavar="W",
        help="blend appearance (the cosine of embedding vectors, which no model "
        "sleap-live runs makes yet) into the geometric score: (1 - W) x geometry + W x "
        f"appearance (default: {defaults.appearance_weight}, geometry only)",
    )
    group.add_argument(
        "--euclidean-scale",
        type=positive_float,
        metavar="PX",
        help="with --appearance-weight and --scoring-method euclidean_dist: the distance "
        "(pixels) at which geometry's similarity falls to 1/e, about one animal's step "
        "between frames (default: none)",
    )

    def preset(option: str) -> str:
        return ", ".join(f"{name} {getattr(MOT_PRESETS[name], option)}" for name in MOT_TRACKERS)

    group.add_argument(
        "--track-buffer",
        type=count,
        metavar="N",
        help=f"MOT: missed frames a track survives (default: {preset('track_buffer')})",
    )
    group.add_argument(
        "--min-hits",
        type=positive_int,
        metavar="N",
        help="MOT: matches that confirm a track; until then its instances are untracked "
        f"live and labelled in the saved file (default: {preset('min_hits')})",
    )
    group.add_argument(
        "--track-high-threshold",
        type=_unit,
        metavar="S",
        help="MOT: detections scoring above this are confident; only they start tracks "
        f"in bytetrack and ocsort (default: {preset('track_high_threshold')})",
    )
    group.add_argument(
        "--track-low-threshold",
        type=_unit,
        metavar="S",
        help="MOT: detections scoring at or below this are ignored "
        f"(default: {preset('track_low_threshold')})",
    )
    group.add_argument(
        "--new-track-threshold",
        type=_unit,
        metavar="S",
        help="MOT: least score of a detection that starts a track "
        f"(default: {preset('new_track_threshold')})",
    )
    group.add_argument(
        "--min-match-similarity",
        type=_unit,
        metavar="S",
        help=f"MOT: least box overlap (IoU) of a match (default: {preset('min_match_similarity')})",
    )
    for unbuilt in _UNBUILT:
        group.add_argument(
            flag(unbuilt),
            action="store_true",
            help="sleap-nn's option; not built into sleap-live (refused)",
        )


def tracking_settings(
    args: argparse.Namespace, embeddings: bool = False
) -> TrackingSettings | None:
    """The tracker's settings `run` or `replay` asks for; None without ``--tracking``.

    `embeddings`: the models give each instance a vector (`gives_embeddings`).

    Raises:
        UsageError: a tracking option without ``--tracking``, the appearance options
            without an embedding model, or see `settings_from`.
    """
    if not args.tracking:
        named = [flag(dest) for dest in _FIELDS if getattr(args, dest) is not None]
        named += [flag(dest) for dest in _UNBUILT if getattr(args, dest)]
        if named:
            raise UsageError(f"{', '.join(named)} only applies with --tracking")
        return None
    if embeddings and (args.tracker or "classic") == "classic" and not args.appearance_weight:
        # sleap-nn's fused route (`cli.py`): appearance alone unless told otherwise.
        args = argparse.Namespace(**vars(args))
        args.features = args.features or "embeddings"
        args.scoring_method = args.scoring_method or "cosine_sim"
    settings = settings_from(args)
    if not embeddings and (settings.features == "embeddings" or settings.appearance_weight > 0.0):
        raise UsageError(
            "--features embeddings and --appearance-weight compare each instance's "
            "embedding vector, which only an embedding model gives (a third -m after "
            "a centroid and a centered-instance model); or use them with sleap-live "
            "track on a .slp that carries sleap-nn's vectors"
        )
    return settings


def settings_from(args: argparse.Namespace) -> TrackingSettings:
    """The tracker's settings of the tracking options in `args`.

    Raises:
        UsageError: an option sleap-live does not run, or values sleap-nn's tracker
            cannot take together.
    """
    unbuilt = [flag(name) for name in _UNBUILT if getattr(args, name)]
    if unbuilt:
        raise UsageError(str(refuse_unbuilt(unbuilt[0])))
    given = {field: getattr(args, dest) for dest, field in _FIELDS.items()}
    try:
        return TrackingSettings(**{k: v for k, v in given.items() if v is not None})
    except ValueError as error:
        raise UsageError(str(error)) from None


def _unit(text: str) -> float:
    """A number in [0, 1] (a score or a similarity)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value
