"""sleap-nn's classic tracker, frame by frame: candidate windows, scores, matching.

Each frame's instances are compared with the candidates the tracker keeps (the
tracked instances of the last `window_size` frames, or each track's last
`window_size` instances), scored per pair, the scores reduced to one per track,
and matched to tracks; instances left over start new tracks. It is sleap-nn
0.3.5's `Tracker` (`sleap_nn/tracking/tracker.py`, its candidates and utils) with
the same candidate windows, scores, tie-breaks, new-track rules and track
numbering, computed as array operations over all pairs at once instead of a
Python call per (instance, candidate) pair.

Where sleap-nn removes an instance from its output (no track left under
`max_tracks` in local queues, or too few nodes to start a track), the instance
is kept here with track -1: a live pipeline never loses an animal's pose. An
instance sleap-nn matches to its fixed window's untracked instances (one more
candidate column without an id) is untracked here too.

Appearance (sleap-nn's `features="embeddings"` and `appearance_weight`) reads each
instance's embedding vector (`FramePoses.embeddings`): it is the feature itself, or
rides beside the geometric feature in the candidates so that both are scored over
the same candidates and blended (`blend_appearance`).
"""

from __future__ import annotations

from collections import deque

import attrs
import numpy as np

from sleap_live.engines.types import FramePoses
from sleap_live.stream.tracking.matching import match
from sleap_live.stream.tracking.scoring import (
    blend_appearance,
    found_nodes,
    instance_features,
    pair_scores,
    reduce_scores,
)
from sleap_live.stream.tracking.settings import TrackingSettings
from sleap_live.stream.types import TrackLabel

UNTRACKED = -1
# Elements of the candidates' features scored against one block of new instances
# (`ClassicTracker._track_scores`): a few arrays of this many float64s, 32 MiB each.
_SCORE_ELEMENTS = 1 << 22
NO_EMBEDDINGS = (
    "tracking: features=embeddings and appearance-weight compare each instance's embedding "
    "vector, and these poses carry none (no model sleap-live runs makes them yet)"
)


@attrs.frozen(eq=False)
class Tracked:
    """One frame's tracks.

    Attributes:
        track_ids: (instances,) int32 track of each instance; -1 for none.
        scores: (instances,) float32 score of the match (1 for a new track, NaN
            for none), sleap-nn's ``tracking_score``.
        late: earlier frames' instances labelled with this frame (a MOT tracker's
            newly confirmed tracks); the classic tracker labels at once.
    """

    track_ids: np.ndarray
    scores: np.ndarray
    late: tuple[TrackLabel, ...] = ()


@attrs.frozen(eq=False)
class _Candidates:
    """The past instances a frame is compared with, as a (tracks, window) grid."""

    track_ids: list[int]  # the grid's rows, in sleap-nn's column order
    features: np.ndarray  # (tracks, window, *F), NaN where no candidate
    usable: np.ndarray  # (tracks, window): a candidate with enough nodes found


class _FixedWindow:
    """The tracked instances of the last `window_size` frames (sleap-nn's fixed_window)."""

    def __init__(self, window_size: int, min_match_points: int) -> None:
        self._frames: deque[tuple[list[int], np.ndarray, np.ndarray]] = deque(maxlen=window_size)
        self._min_match_points = min_match_points
        self.n_tracks = 0

    def candidates(self) -> _Candidates | None:
        if not self._frames:
            return None
        # sleap-nn's tracks are `list(set(...))` of the window's track ids, in the
        # order they were added: the column order that breaks matching ties.
        seen: set[int] = set()
        for ids, _, _ in self._frames:
            seen.update(track for track in ids if track != UNTRACKED)
        order = list(seen)
        # sleap-nn keeps the window's untracked instances (too few nodes to start a
        # track) as one more candidate "track" without an id: an instance matched to
        # it stays untracked. Its place among the columns follows the hash of None,
        # which differs between processes; it is put last here.
        if any(UNTRACKED in ids for ids, _, _ in self._frames):
            order.append(UNTRACKED)
        # An empty frame's features may have no width (no vectors): not the shape.
        feature_shape = max((f for _, f, _ in self._frames), key=len).shape[1:]
        features = np.full((len(order), len(self._frames), *feature_shape), np.nan)
        usable = np.zeros((len(order), len(self._frames)), bool)
        filled = np.zeros_like(usable)
        row_of = {track: row for row, track in enumerate(order)}
        for column, (ids, frame_features, found) in enumerate(self._frames):
            for instance, track in enumerate(ids):
                row = row_of[track]
                if filled[row, column]:
                    continue  # the first untracked instance of a frame is its candidate
                filled[row, column] = True
                features[row, column] = frame_features[instance]
                usable[row, column] = found[instance] > self._min_match_points
        return _Candidates(order, features, usable)

    def spare_tracks(self) -> int | None:
        return None

    def new_track(self) -> int | None:
        self.n_tracks += 1
        return self.n_tracks - 1

    def record(self, ids: list[int], features: np.ndarray, found: np.ndarray, first: bool) -> None:
        # The first frame enters the window only if it started a track (sleap-nn's
        # `add_new_tracks`); every later frame does, empty or not.
        if not first or any(track != UNTRACKED for track in ids):
            self._frames.append((ids, features, found))


class _LocalQueues:
    """Each track's last `window_size` instances (sleap-nn's local_queues)."""

    def __init__(self, window_size: int, min_match_points: int, max_tracks: int | None) -> None:
        self._window_size = window_size
        self._min_match_points = min_match_points
        self._max_tracks = max_tracks
        self._features: np.ndarray | None = None  # (capacity, window, *F), oldest first
        self._usable = np.zeros((0, window_size), bool)
        self._lengths = np.zeros(0, np.int64)
        self.n_tracks = 0

    def candidates(self) -> _Candidates | None:
        if self.n_tracks == 0 or self._features is None:
            return None
        n = self.n_tracks
        return _Candidates(list(range(n)), self._features[:n], self._usable[:n])

    def spare_tracks(self) -> int | None:
        if self._max_tracks is None:
            return None
        return max(0, self._max_tracks - self.n_tracks)

    def new_track(self) -> int | None:
        if self._max_tracks is not None and self.n_tracks >= self._max_tracks:
            return None
        self.n_tracks += 1
        return self.n_tracks - 1

    def record(self, ids: list[int], features: np.ndarray, found: np.ndarray, first: bool) -> None:
        if self._features is None:
            if not len(features):
                return  # no instance yet: an empty frame's features may have no width
            self._features = np.full((0, self._window_size, *features.shape[1:]), np.nan)
        capacity = self._features.shape[0]
        if self.n_tracks > capacity:
            extra = max(self.n_tracks, 2 * capacity) - capacity
            self._features = np.concatenate(
                [self._features, np.full((extra, *self._features.shape[1:]), np.nan)]
            )
            self._usable = np.concatenate(
                [self._usable, np.zeros((extra, self._window_size), bool)]
            )
            self._lengths = np.concatenate([self._lengths, np.zeros(extra, np.int64)])
        for instance, track in enumerate(ids):
            if track == UNTRACKED:
                continue
            length = int(self._lengths[track])
            if length == self._window_size:
                self._features[track, :-1] = self._features[track, 1:]
                self._usable[track, :-1] = self._usable[track, 1:]
                length -= 1
            self._features[track, length] = features[instance]
            self._usable[track, length] = found[instance] > self._min_match_points
            self._lengths[track] = length + 1


class ClassicTracker:
    """Assigns track ids to each frame's instances in turn, as sleap-nn's `Tracker`.

    Args:
        settings: the tracker's options; `settings.tracker` must be "classic".
    """

    def __init__(self, settings: TrackingSettings) -> None:
        if settings.tracker != "classic":
            raise ValueError(f"tracking: ClassicTracker runs tracker='classic', not {settings}")
        self.settings = settings
        self._candidates: _FixedWindow | _LocalQueues
        if settings.resolved_candidates_method == "local_queues":
            self._candidates = _LocalQueues(
                settings.window_size, settings.min_match_points, settings.max_tracks
            )
        else:
            self._candidates = _FixedWindow(settings.window_size, settings.min_match_points)

    @property
    def n_tracks(self) -> int:
        """Tracks started so far (their ids are 0 .. n_tracks - 1)."""
        return self._candidates.n_tracks

    def track_poses(self, poses: FramePoses, frame_index: int) -> Tracked:
        """Tracks of a frame's poses (`FramePoses`); the frame index is not used."""
        return self.track(poses.points, poses.embeddings)

    def track(self, points: np.ndarray, embeddings: np.ndarray | None = None) -> Tracked:
        """Tracks of the instances `points` (instances, nodes, 2) of the next frame;
        `embeddings` (instances, D) are their appearance vectors (NaN rows for none),
        read only with features="embeddings" or an appearance weight.

        Raises:
            ValueError: the settings compare vectors and `embeddings` is None (for
                a frame with instances).
        """
        settings = self.settings
        points = np.asarray(points, np.float64)
        n = points.shape[0]
        features = self._features(points, embeddings)
        found = found_nodes(points)
        ids = [UNTRACKED] * n
        scores = np.full(n, np.nan)
        candidates = self._candidates.candidates()
        if candidates is None:
            self._start_tracks(range(n), found, ids, scores)
            self._candidates.record(ids, features, found, first=True)
            return _tracked(ids, scores)
        cost = -self._track_scores(features, candidates, points.shape[1])
        cost[np.isnan(cost)] = np.inf
        pairs = self._feasible(match(cost, settings.track_matching_method), cost, found)
        for row, column in pairs:
            ids[row] = candidates.track_ids[column]
            scores[row] = -cost[row, column]
        matched = {row for row, _ in pairs}
        self._start_tracks([row for row in range(n) if row not in matched], found, ids, scores)
        self._candidates.record(ids, features, found, first=False)
        return _tracked(ids, scores)

    def _features(self, points: np.ndarray, embeddings: np.ndarray | None) -> np.ndarray:
        """Each instance's features as the candidates keep them: the geometric
        feature, the vector (features="embeddings"), or, with an appearance
        weight, the geometric feature flattened and the vector after it."""
        settings = self.settings
        blend = settings.appearance_weight > 0.0
        if settings.features != "embeddings" and not blend:
            return instance_features(points, settings.features)
        if embeddings is None:
            if points.shape[0]:
                raise ValueError(NO_EMBEDDINGS)
            embeddings = np.empty((0, 0))
        vectors = np.asarray(embeddings, np.float64)
        if not blend:
            return vectors
        geometry = instance_features(points, settings.features)
        flat = geometry.reshape(geometry.shape[0], int(np.prod(geometry.shape[1:])))
        return np.concatenate([flat, vectors], axis=1)

    def _track_scores(
        self, features: np.ndarray, candidates: _Candidates, n_nodes: int
    ) -> np.ndarray:
        """One score per (new instance, track), (n, T): the candidates' pair scores
        reduced, a block of new instances at a time. Each row's score is its own, so
        the blocks change no number; they hold the pairwise arrays (n x T x W x
        nodes, several of them) to `_SCORE_ELEMENTS` a block instead of growing with
        the square of the instances (4.9 GB at 5,000 a frame before)."""
        n = features.shape[0]
        rows = max(1, _SCORE_ELEMENTS // max(1, candidates.features.size))
        scores = np.empty((n, candidates.features.shape[0]))
        for first in range(0, n, rows):
            block = features[first : first + rows]
            scores[first : first + rows] = self._block_scores(block, candidates, n_nodes)
        return scores

    def _block_scores(self, new: np.ndarray, candidates: _Candidates, n_nodes: int) -> np.ndarray:
        settings = self.settings
        kept = candidates.features
        if settings.appearance_weight == 0.0:
            return self._reduced(new, kept, candidates)
        # The geometric feature (of this shape, flattened by `_features`), then the vector.
        shape = instance_features(np.empty((0, n_nodes, 2)), settings.features).shape[1:]
        size = int(np.prod(shape))
        return blend_appearance(
            self._reduced(
                new[:, :size].reshape(-1, *shape),
                kept[..., :size].reshape(*kept.shape[:2], *shape),
                candidates,
            ),
            self._reduced(new[:, size:], kept[..., size:], candidates, "cosine_sim"),
            settings.appearance_weight,
            settings.euclidean_scale if settings.scoring_method == "euclidean_dist" else None,
        )

    def _reduced(
        self,
        new: np.ndarray,
        kept: np.ndarray,
        candidates: _Candidates,
        scoring_method: str | None = None,
    ) -> np.ndarray:
        """The reduced scores (n, T) of `new` features against the candidates' `kept`
        (T, W, *F); `scoring_method` None: the settings' (resolved)."""
        settings = self.settings
        pair = pair_scores(
            new,
            kept,
            scoring_method or settings.resolved_scoring_method,
            settings.oks_stddev,
        )
        pair[:, ~candidates.usable] = np.nan
        return reduce_scores(pair, settings.scoring_reduction, settings.robust_best_instance)

    def _start_tracks(
        self, rows: range | list[int], found: np.ndarray, ids: list[int], scores: np.ndarray
    ) -> None:
        for row in rows:
            if found[row] > self.settings.min_new_track_points:
                track = self._candidates.new_track()
                if track is not None:
                    ids[row] = track
                    scores[row] = 1.0

    def _feasible(
        self, pairs: list[tuple[int, int]], cost: np.ndarray, found: np.ndarray
    ) -> list[tuple[int, int]]:
        # sleap-nn drops a pair without a score (infinite cost) so its instance starts
        # a new track, but keeps it where the instance could not start one (no track
        # left under max_tracks, too few nodes): the same rule, in the same order.
        infeasible = [pair for pair in pairs if not np.isfinite(cost[pair])]
        if not infeasible:
            return pairs
        min_new = self.settings.min_new_track_points
        slots = self._candidates.spare_tracks()
        if slots is not None:
            paired = {row for row, _ in pairs}
            unpaired = sum(
                1 for row in range(cost.shape[0]) if row not in paired and found[row] > min_new
            )
            slots = max(0, slots - unpaired)
        spawnable = 0
        forced = set()
        for row, column in infeasible:
            if found[row] > min_new and (slots is None or spawnable < slots):
                spawnable += 1
            else:
                forced.add((row, column))
        return [pair for pair in pairs if np.isfinite(cost[pair]) or pair in forced]


def _tracked(ids: list[int], scores: np.ndarray) -> Tracked:
    return Tracked(track_ids=np.array(ids, np.int32), scores=scores.astype(np.float32))
