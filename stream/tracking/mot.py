"""sleap-nn's geometric MOT trackers (SORT, ByteTrack, OC-SORT), frame by frame.

Each frame: every live track's Kalman box is predicted to this frame, the
tracker's association stages match tracks to detections on box overlap, matched
tracks are corrected, unmatched ones age (and are dropped after `track_buffer`
missed steps), and confident unmatched detections start tentative tracks. A
tentative track becomes a track, with the next id, once matched `min_hits`
times; its earlier detections are then labelled retroactively (`Tracked.late`),
so live they are untracked and only the saved file carries their id.

It is sleap-nn 0.3.5's `sleap_nn/tracking/mot` (`base.py`, `sort.py`,
`bytetrack.py`, `ocsort.py`) as its trackers run without `prepare()` (online,
uncalibrated: raw scores, running body size, time base inferred from the frame
indices), with sleap-nn's "animal" preset and the geometric similarity it picks
for poses (IoU of padded boxes; a centroid kernel for one-node skeletons): the
same stages, costs, caps, tie-breaks, lifecycle and id order. The Kalman
filters and similarities run on all tracks at once.
"""

from __future__ import annotations

import attrs
import numpy as np

from sleap_live.engines.host.grouping import linear_sum_assignment
from sleap_live.engines.types import FramePoses
from sleap_live.stream.tracking.boxes import (
    MIN_BOX_FRACTION,
    BodySize,
    Detections,
    centroid_similarity,
    detections,
    direction,
    finished,
    iou,
    momentum,
    shared_node_iou,
)
from sleap_live.stream.tracking.classic import UNTRACKED, Tracked
from sleap_live.stream.tracking.kalman import BoxFilter
from sleap_live.stream.tracking.settings import MotParameters
from sleap_live.stream.types import TrackLabel

# Track states.
_TENTATIVE, _CONFIRMED, _LOST = 0, 1, 2

# What a forbidden pair costs just above a cost cap, and below the least score.
_CAP_MARGIN = 1e-5
_INFEASIBLE = 1e5


class _Track:
    """One track's state; `members` are its detections while it is tentative."""

    __slots__ = (
        "centre_at_update",
        "cov",
        "frozen",
        "hits",
        "keypoints",
        "last_frame",
        "last_observation",
        "mean",
        "members",
        "observations",
        "public_id",
        "since_update",
        "start_frame",
        "state",
        "step",
        "streak",
        "tid",
        "velocity",
    )

    def __init__(self, tid: int, mean: np.ndarray, cov: np.ndarray, hits: int) -> None:
        self.tid = tid
        self.state = _TENTATIVE
        self.mean = mean
        self.cov = cov
        self.start_frame = 0
        self.last_frame = 0
        self.step = 0
        self.keypoints = np.zeros((0, 2))
        self.centre_at_update = mean[:2].copy()
        self.hits = hits
        self.streak = hits
        self.since_update = 0
        self.observations: dict[int, np.ndarray] = {}
        self.last_observation: np.ndarray | None = None
        self.velocity: tuple[float, float] | None = None
        self.frozen: tuple[np.ndarray, np.ndarray, int] | None = None
        self.members: list[tuple[int, int, int, float]] = []  # (frame, sequence, row, score)
        self.public_id: int | None = None


@attrs.define
class _Association:
    matches: list[tuple[_Track, int, float]] = attrs.field(factory=list)
    no_spawn: set[int] = attrs.field(factory=set)
    removed: list[_Track] = attrs.field(factory=list)


class MotTracker:
    """Assigns track ids frame by frame, as sleap-nn's SORT, ByteTrack or OC-SORT.

    Args:
        parameters: the resolved options (`TrackingSettings.mot_parameters`).
    """

    def __init__(self, parameters: MotParameters) -> None:
        self.parameters = parameters
        self._filter = BoxFilter(parameters.kalman)
        self._tracks: list[_Track] = []
        self._body = BodySize()
        self._next_tid = 0
        self._next_public_id = 0
        self._step = -1
        self._sequence = -1
        self._last_frame: int | None = None
        self._deltas: dict[int, int] = {}
        self._frame_step = 1
        self._time_base = "frames"
        name = parameters.tracker
        # Lifecycle of each family: SORT and OC-SORT count from 0, confirm on a
        # streak and let tentative tracks coast; ByteTrack counts from 1, confirms
        # on hits, drops a tentative track at its first miss and stops a missed
        # track's height velocity.
        self._sort_family = name in ("sort", "ocsort")
        self._hits_start = 0 if self._sort_family else 1
        self._zero_when_missed = np.array(
            [] if self._sort_family else [6 if parameters.kalman == "xysr" else 7], np.intp
        )
        self._oc = name == "ocsort"

    @property
    def n_tracks(self) -> int:
        """Tracks confirmed so far (their ids are 0 .. n_tracks - 1)."""
        return self._next_public_id

    def track_poses(self, poses: FramePoses, frame_index: int) -> Tracked:
        """Tracks of a frame's poses (`FramePoses`), frame `frame_index` of its source."""
        return self.track(poses.points, poses.point_scores, poses.instance_scores, frame_index)

    def track(
        self,
        points: np.ndarray,
        point_scores: np.ndarray,
        instance_scores: np.ndarray,
        frame_index: int,
    ) -> Tracked:
        """Tracks of the next frame's instances `points` (instances, nodes, 2)."""
        self._sequence += 1
        dets = detections(
            points, point_scores, instance_scores, self.parameters.box_padding, self._body.value
        )
        steps, moved_on = self._advance(int(frame_index))
        self._body.observe(dets, steps, moved_on)
        result = self._associate(dets) if len(dets) else _Association()
        n = len(dets)
        ids = np.full(n, UNTRACKED, np.int32)
        scores = np.full(n, np.nan, np.float32)
        late: list[TrackLabel] = []

        pool = list(self._tracks)
        removed = {track.tid for track in result.removed}
        matched = {track.tid for track, _, _ in result.matches}
        used = {row for _, row, _ in result.matches}
        applied = [(track, row, min(max(s, 0.0), 1.0)) for track, row, s in result.matches]
        self._apply(applied, dets, int(frame_index))
        for track in pool:
            if track.tid not in matched and track.tid not in removed:
                self._missed(track)
        for track in result.removed:
            self._remove(track)
        for row in range(n):
            if (
                row not in used
                and row not in result.no_spawn
                and dets.valid[row]
                and dets.scores[row] >= self.parameters.new_track_threshold
            ):
                self._spawn(dets, row, int(frame_index))
        for track in self._tracks:
            if track.state == _TENTATIVE and track.since_update == 0:
                count = track.streak if self._sort_family else track.hits
                if count >= self.parameters.min_hits:
                    self._confirm(track, ids, scores, late)
        self._tracks = [
            track for track in self._tracks if track.since_update <= self.parameters.track_buffer
        ]
        for track, row, similarity in applied:
            if track.state == _CONFIRMED and track.public_id is not None:
                ids[row] = track.public_id
                scores[row] = similarity
        return Tracked(track_ids=ids, scores=scores, late=tuple(late))

    # ------------------------------------------------------------------ time

    def _advance(self, frame_index: int) -> tuple[int, bool]:
        """Moves the clock to `frame_index` and predicts every track there.

        Returns the steps advanced, and False for a repeated or backwards index.
        """
        if self._step < 0:
            self._step = 0
            self._last_frame = frame_index
            return 0, True
        assert self._last_frame is not None
        delta = frame_index - self._last_frame
        moved_on = delta > 0
        if moved_on:
            self._infer_stride(delta)
        steps = 1
        if self._time_base == "frames":
            steps = max(1, int(np.rint(delta / self._frame_step)))
        first_step = self._step + 1
        self._step += steps
        self._last_frame = frame_index
        if not self._tracks:
            return steps, moved_on
        buffer = self.parameters.track_buffer
        self._tracks = [
            track
            for track in self._tracks
            if not (
                track.since_update + steps - 1 > buffer
                or (steps > 1 and not self._sort_family and track.state == _TENTATIVE)
            )
        ]
        if not self._tracks:
            return steps, moved_on
        means = np.array([track.mean for track in self._tracks])
        covs = np.array([track.cov for track in self._tracks])
        since = np.array([track.since_update for track in self._tracks])
        for k in range(steps):
            if self._zero_when_missed.size:
                missed = since + k > 0
                if missed.any():
                    means[np.ix_(missed, self._zero_when_missed)] = 0.0
            means, covs = self._filter.predict(means, covs)
            if k == 0 and steps > 1 and self._oc:
                # The gap's first empty step is these tracks' first miss.
                for i, track in enumerate(self._tracks):
                    if (
                        since[i] == 0
                        and track.frozen is None
                        and track.last_observation is not None
                    ):
                        track.frozen = (means[i].copy(), covs[i].copy(), first_step)
        for i, track in enumerate(self._tracks):
            track.mean = means[i]
            track.cov = covs[i]
            track.since_update += steps
            if track.since_update > 1:
                track.streak = 0
            if steps > 1 and track.state == _CONFIRMED:
                track.state = _LOST
        return steps, moved_on

    def _infer_stride(self, delta: int) -> None:
        # The stride is the commonest positive step between frame indices (ties:
        # the smaller); frames count in strides while it covers half of the steps.
        self._deltas[delta] = self._deltas.get(delta, 0) + 1
        if self._time_base == "frames" and delta == self._frame_step:
            return  # one more of the commonest step: the stride stays, still regular
        stride = min(self._deltas, key=lambda d: (-self._deltas[d], d))
        regular = self._deltas[stride] >= 0.5 * sum(self._deltas.values())
        self._time_base = "frames" if regular else "steps"
        self._frame_step = stride if regular else 1

    # ------------------------------------------------------------- lifecycle

    def _apply(
        self, applied: list[tuple[_Track, int, float]], dets: Detections, frame: int
    ) -> None:
        if not applied:
            return
        tracks = [track for track, _, _ in applied]
        rows = [row for _, row, _ in applied]
        boxes = dets.boxes[rows]
        means = np.array([track.mean for track in tracks])
        covs = np.array([track.cov for track in tracks])
        for i, track in enumerate(tracks):
            if self._oc and track.frozen is not None and track.last_observation is not None:
                frozen_mean, frozen_cov, frozen_step = track.frozen
                means[i], covs[i] = self._filter.replay(
                    frozen_mean,
                    frozen_cov,
                    track.last_observation,
                    boxes[i],
                    gap=self._step - track.step,
                    frozen_steps=frozen_step - track.step,
                )
        means, covs = self._filter.update(means, covs, boxes)
        step = self._step
        for i, (track, row, similarity) in enumerate(applied):
            box = boxes[i]
            track.frozen = None
            track.mean = mean = means[i]
            track.cov = covs[i]
            track.hits += 1
            track.streak += 1
            track.since_update = 0
            track.step = step
            track.last_frame = frame
            track.keypoints = dets.keypoints[row]
            track.centre_at_update = mean[:2]
            if track.state == _LOST:
                track.state = _CONFIRMED
            if self._oc:
                if track.last_observation is not None:
                    earlier = self._observation_before(track)
                    track.velocity = direction(earlier, box)
                track.observations[self._step] = box
                while len(track.observations) > 2 * self.parameters.delta_t + 1:
                    del track.observations[min(track.observations)]
            track.last_observation = box
            if track.public_id is None:
                track.members.append((frame, self._sequence, row, similarity))

    def _observation_before(self, track: _Track) -> np.ndarray:
        """The track's observation `delta_t` steps back (the oldest within those
        steps), else its latest (OC-SORT's direction runs from it)."""
        for dt in range(self.parameters.delta_t, 0, -1):
            observation = track.observations.get(self._step - dt)
            if observation is not None:
                return observation
        assert track.last_observation is not None
        return track.last_observation

    def _missed(self, track: _Track) -> None:
        if (
            self._oc
            and track.frozen is None
            and track.last_observation is not None
            and track.since_update > 0
        ):
            track.frozen = (track.mean.copy(), track.cov.copy(), self._step)
        if track.state == _CONFIRMED:
            track.state = _LOST
        elif track.state == _TENTATIVE and not self._sort_family:
            self._remove(track)

    def _spawn(self, dets: Detections, row: int, frame: int) -> None:
        means, covs = self._filter.initiate(dets.boxes[row : row + 1])
        track = _Track(self._next_tid, means[0], covs[0], self._hits_start)
        self._next_tid += 1
        track.start_frame = track.last_frame = frame
        track.step = self._step
        track.keypoints = dets.keypoints[row]
        track.members.append((frame, self._sequence, row, 1.0))
        self._tracks.append(track)

    def _confirm(
        self, track: _Track, ids: np.ndarray, scores: np.ndarray, late: list[TrackLabel]
    ) -> None:
        track.state = _CONFIRMED
        track.public_id = self._next_public_id
        self._next_public_id += 1
        for frame, sequence, row, score in track.members:
            if sequence == self._sequence:
                ids[row] = track.public_id
                scores[row] = score
            else:
                late.append(TrackLabel(frame, row, track.public_id, score))
        track.members.clear()

    def _remove(self, track: _Track) -> None:
        self._tracks = [other for other in self._tracks if other is not track]

    # ------------------------------------------------------------ similarity

    def _similarity(self, tracks: list[_Track], dets: Detections) -> np.ndarray:
        """(tracks, detections) similarity of the tracks' predictions."""
        means = np.array([track.mean for track in tracks])
        if dets.keypoints.shape[1] == 1:
            similarity = centroid_similarity(
                means[:, :2], _centres(dets.raw_boxes), 0.5 * self._body.value
            )
        else:
            similarity = iou(self._filter.boxes(means), dets.boxes)
        similarity = finished(similarity, dets.valid)
        if self.parameters.tracker == "bytetrack" and dets.keypoints.shape[1] > 1:
            # Also the overlap of the nodes both sides have, so an occluded
            # detection is compared with the same part of the track.
            predicted = (
                np.array([track.keypoints for track in tracks])
                + (means[:, :2] - np.array([track.centre_at_update for track in tracks]))[
                    :, None, :
                ]
            )
            shared = shared_node_iou(
                predicted,
                dets.keypoints,
                self.parameters.box_padding,
                MIN_BOX_FRACTION * self._body.value,
            )
            similarity = finished(np.fmax(similarity, shared), dets.valid)
        return similarity

    def _observed_similarity(self, tracks: list[_Track], dets: Detections) -> np.ndarray:
        """(tracks, detections) similarity of the tracks' last observations."""
        boxes = np.full((len(tracks), 4), np.nan)
        for i, track in enumerate(tracks):
            if track.last_observation is not None:
                boxes[i] = track.last_observation
        if dets.keypoints.shape[1] == 1:
            centres = 0.5 * (boxes[:, :2] + boxes[:, 2:])
            similarity = centroid_similarity(
                centres, _centres(dets.raw_boxes), 0.5 * self._body.value
            )
        else:
            similarity = iou(boxes, dets.boxes)
        return finished(similarity, dets.valid)

    # ----------------------------------------------------------- association

    def _associate(self, dets: Detections) -> _Association:
        if self.parameters.tracker == "sort":
            return self._sort(dets)
        if self.parameters.tracker == "bytetrack":
            return self._bytetrack(dets)
        return self._ocsort(dets)

    def _sort(self, dets: Detections) -> _Association:
        # One pool, one assignment; low-score detections are not seen at all.
        p = self.parameters
        ignored = dets.scores <= p.track_low_threshold
        result = _Association(no_spawn=set(np.flatnonzero(ignored).tolist()))
        columns = np.flatnonzero(dets.valid & ~ignored)
        if not self._tracks or len(columns) == 0:
            return result
        tracks = list(self._tracks)
        similarity = self._similarity(tracks, dets)[:, columns]
        admissible = similarity >= p.min_match_similarity
        pairs = _one_to_one(admissible)
        if pairs is None:
            cost = np.where(admissible, 1.0 - similarity, np.inf)
            pairs, _, _ = _capped_assignment(cost, 1.0 - p.min_match_similarity)
        for row, column in pairs:
            result.matches.append(
                (tracks[row], int(columns[column]), float(similarity[row, column]))
            )
        return result

    def _bytetrack(self, dets: Detections) -> _Association:
        p = self.parameters
        scores = dets.scores
        high = dets.valid & (scores > p.track_high_threshold)
        low = dets.valid & (scores > p.track_low_threshold) & (scores < p.track_high_threshold)
        spawnable = high & (scores >= p.new_track_threshold)
        result = _Association(no_spawn=set(np.flatnonzero(~spawnable).tolist()))
        if not self._tracks:
            return result
        tracks = list(self._tracks)
        similarity = self._similarity(tracks, dets)
        row_of = {track.tid: i for i, track in enumerate(tracks)}

        def stage(
            pool: list[_Track], columns: np.ndarray, cap: float, fused: bool
        ) -> tuple[list[_Track], np.ndarray]:
            if not pool or len(columns) == 0:
                return pool, columns
            pool_rows = np.array([row_of[track.tid] for track in pool], np.intp)
            sub = similarity[np.ix_(pool_rows, columns)]
            fused_sub = sub * scores[columns][None, :] if fused and p.fuse_score else sub
            pairs, left_rows, left_columns = _capped_assignment(1.0 - fused_sub, cap)
            for row, column in pairs:
                result.matches.append((pool[row], int(columns[column]), float(sub[row, column])))
            return [pool[row] for row in left_rows], columns[left_columns]

        # High-score detections to confirmed and lost tracks, then low-score ones
        # to the tracks matched last step, then what is left to tentative tracks.
        pool = [track for track in tracks if track.state != _TENTATIVE]
        left_pool, left_high = stage(pool, np.flatnonzero(high), 1.0 - p.min_match_similarity, True)
        tracked = [track for track in left_pool if track.state == _CONFIRMED]
        stage(tracked, np.flatnonzero(low), 1.0 - p.low_stage_min_similarity, False)
        tentative = [track for track in tracks if track.state == _TENTATIVE]
        _, left_high = stage(tentative, left_high, 1.0 - p.unconfirmed_min_similarity, True)
        self._remove_duplicates(tracks, dets, left_high, spawnable, result)
        return result

    def _remove_duplicates(
        self,
        tracks: list[_Track],
        dets: Detections,
        left_high: np.ndarray,
        spawnable: np.ndarray,
        result: _Association,
    ) -> None:
        # A lost track overlapping a matched (or about to start) detection is a
        # duplicate of it: the one with the shorter history goes (ties: the matched).
        p = self.parameters
        matched = {track.tid for track, _, _ in result.matches}
        lost = [
            track
            for track in tracks
            if track.state != _TENTATIVE
            and track.tid not in matched
            and track.since_update <= p.track_buffer
        ]
        if not lost:
            return
        sides: list[tuple[_Track | None, int, int]] = [
            (track, row, self._last_frame_index() - track.start_frame)
            for track, row, _ in result.matches
        ]
        sides += [(None, int(row), 0) for row in left_high if spawnable[row]]
        if not sides:
            return
        overlap = iou(
            self._filter.boxes(np.array([track.mean for track in lost])),
            dets.boxes[[row for _, row, _ in sides]],
        )
        drop_side: set[int] = set()
        drop_lost: set[int] = set()
        for q, k in np.argwhere(overlap > p.duplicate_similarity).tolist():
            if sides[k][2] > lost[q].last_frame - lost[q].start_frame:
                drop_lost.add(q)
            else:
                drop_side.add(k)
        if not drop_side and not drop_lost:
            return
        removed: dict[int, _Track] = {track.tid: track for track in result.removed}
        for k in sorted(drop_side):
            track, row, _ = sides[k]
            result.no_spawn.add(row)
            if track is not None:
                removed.setdefault(track.tid, track)
        for q in sorted(drop_lost):
            removed.setdefault(lost[q].tid, lost[q])
        result.matches = [match for match in result.matches if match[0].tid not in removed]
        result.removed = list(removed.values())

    def _last_frame_index(self) -> int:
        assert self._last_frame is not None
        return self._last_frame

    def _ocsort(self, dets: Detections) -> _Association:
        p = self.parameters
        scores = dets.scores
        high = dets.valid & np.isfinite(scores) & (scores > p.track_high_threshold)
        result = _Association(no_spawn=set(np.flatnonzero(~high).tolist()))
        high_columns = np.flatnonzero(high)
        if not self._tracks or len(high_columns) == 0:
            return result
        tracks = list(self._tracks)
        similarity = self._similarity(tracks, dets)[:, high_columns]
        # Admissible on overlap alone; ordered by overlap plus the direction term.
        admissible = similarity >= p.min_match_similarity
        pairs = _one_to_one(admissible)
        if pairs is None:
            objective = similarity + self._momentum(tracks, dets, high_columns)
            pairs = _masked_assignment(objective, admissible)
        free_rows, free_columns = self._record(
            result, tracks, np.arange(len(tracks)), high_columns, pairs, similarity
        )
        # Recovery: what is left, against the tracks' last observations.
        if len(free_rows) and len(free_columns):
            remaining = [tracks[row] for row in free_rows]
            observed = self._observed_similarity(remaining, dets)[:, free_columns]
            pairs = _masked_assignment(observed, observed >= p.min_match_similarity)
            self._record(result, tracks, free_rows, free_columns, pairs, observed)
        return result

    def _momentum(self, tracks: list[_Track], dets: Detections, columns: np.ndarray) -> np.ndarray:
        n = len(tracks)
        velocities = np.zeros((n, 2))
        earlier = np.full((n, 4), np.nan)
        has_velocity = np.zeros(n, bool)
        for i, track in enumerate(tracks):
            if track.velocity is None or track.last_observation is None:
                continue
            velocities[i] = track.velocity
            earlier[i] = self._observation_before(track)
            has_velocity[i] = True
        return momentum(
            velocities,
            earlier,
            has_velocity,
            dets.boxes[columns],
            dets.scores[columns],
            self.parameters.inertia,
        )

    @staticmethod
    def _record(
        result: _Association,
        tracks: list[_Track],
        rows: np.ndarray,
        columns: np.ndarray,
        pairs: list[tuple[int, int]],
        similarity: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        for row, column in pairs:
            result.matches.append(
                (tracks[int(rows[row])], int(columns[column]), float(similarity[row, column]))
            )
        matched_rows = {row for row, _ in pairs}
        matched_columns = {column for _, column in pairs}
        free_rows = [i for i in range(len(rows)) if i not in matched_rows]
        free_columns = [i for i in range(len(columns)) if i not in matched_columns]
        return np.asarray(rows)[free_rows], np.asarray(columns)[free_columns]


def _centres(boxes: np.ndarray) -> np.ndarray:
    return 0.5 * (boxes[:, :2] + boxes[:, 2:])


def _one_to_one(admissible: np.ndarray) -> list[tuple[int, int]] | None:
    """The admissible pairs when no row or column has two (and there is one)."""
    if admissible.size == 0 or not admissible.any():
        return None
    if admissible.sum(axis=1).max() > 1 or admissible.sum(axis=0).max() > 1:
        return None
    return [(int(r), int(c)) for r, c in np.argwhere(admissible)]


def _capped_assignment(
    cost: np.ndarray, cap: float
) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Least-cost pairs with cost at most `cap`; a forbidden pair costs just over
    the cap, so leaving a row and a column unmatched costs about the cap.

    Returns the pairs (by row) and the unmatched rows and columns.
    """
    n, m = cost.shape
    feasible = np.isfinite(cost) & (cost <= cap)
    if n == 0 or m == 0 or not feasible.any():
        return [], np.arange(n), np.arange(m)
    rows, columns = linear_sum_assignment(np.where(feasible, cost, cap + _CAP_MARGIN))
    keep = feasible[rows, columns]
    rows, columns = rows[keep], columns[keep]
    pairs = sorted(zip(rows.tolist(), columns.tolist(), strict=True))
    matched_rows, matched_columns = set(rows.tolist()), set(columns.tolist())
    return (
        pairs,
        np.array([i for i in range(n) if i not in matched_rows], np.int64),
        np.array([i for i in range(m) if i not in matched_columns], np.int64),
    )


def _masked_assignment(score: np.ndarray, admissible: np.ndarray) -> list[tuple[int, int]]:
    """The pairs of greatest total score over the whole matrix, then only the
    admissible ones kept (OC-SORT: an inadmissible pair's score stands for
    leaving its row and column unmatched)."""
    admissible = admissible & np.isfinite(score)
    if score.size == 0 or not admissible.any():
        return []
    finite = np.isfinite(score)
    floor = float(score[finite].min()) - _INFEASIBLE
    rows, columns = linear_sum_assignment(-np.where(finite, score, floor))
    keep = admissible[rows, columns]
    return sorted(zip(rows[keep].tolist(), columns[keep].tolist(), strict=True))
