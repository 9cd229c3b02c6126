"""Forward prediction: each tracked node's position at the moment an output fires.

A constant-velocity Kalman filter per animal and node (x and y alike, independent),
as DeepLabCut-Live's `KalmanFilterPredictor` does for one animal, here for every
tracked animal at once (numpy over animals and nodes). The state is position and
velocity; between two frames ``dt`` apart the position moves by velocity x ``dt``,
and the velocity by a random acceleration of spectral density `acceleration`
(px^2/s^3, the continuous white-noise acceleration model: process noise
``q [[dt^3/3, dt^2/2], [dt^2/2, dt]]``); each observed point has noise of standard
deviation `noise` px. A node not found in a frame (NaN) is carried on by its
prediction. Animals are followed by identity (a track or a multi-class model's
identity); the one animal of an untracked single-animal frame is followed as itself;
untracked animals of a multi-animal frame are not predicted (their poses are used as
they are).

`stream/tracking/kalman.py` filters boxes (centre and size, sleap-nn's MOT trackers'
parameterisations); this filters points, so it is its own.

The defaults are measured by ``scripts/bench_experiment.py --only predict``: the
settings with the smallest error one frame ahead on the bundled clips' poses
(docs/closed-loop.md).
"""

from __future__ import annotations

import attrs
import numpy as np

from sleap_live.engines.types import FramePoses

# px^2/s^3 and px: chosen by scripts/bench_experiment.py --only predict (see above).
DEFAULT_ACCELERATION = 3.0e5
DEFAULT_NOISE = 1.0
# Variance (px^2/s^2) of a new track's unknown velocity.
_VELOCITY_PRIOR = 1.0e6


@attrs.frozen
class PredictionError:
    """How far, on average, the filter's prediction of each frame (from the frames
    before it) was from the points then found, against the unpredicted pose (the
    frame before's points), in px, over `points` points."""

    predicted: float
    unpredicted: float
    points: int


class ForwardPredictor:
    """Constant-velocity Kalman filters for every tracked animal's nodes.

    Args:
        acceleration: the velocity's random acceleration, spectral density in px^2/s^3.
        noise: standard deviation (px) of an observed point.
    """

    def __init__(
        self, acceleration: float = DEFAULT_ACCELERATION, noise: float = DEFAULT_NOISE
    ) -> None:
        if not acceleration > 0 or not noise > 0:
            raise ValueError("acceleration and noise must be positive")
        self._q = acceleration
        self._r2 = noise * noise
        self._slots: dict[int, int] = {}
        self._position = np.zeros((0, 0, 2))
        self._observed = np.zeros((0, 0, 2))
        self._velocity = np.zeros((0, 0, 2))
        # The covariance of each (animal, node) as (p00, p01, p11).
        self._covariance = np.zeros((0, 0, 3))
        self._time = np.zeros(0)
        self._error_sum = [0.0, 0.0]
        self._error_count = 0

    def update(self, poses: FramePoses, time: float) -> None:
        """Take one frame's poses, captured at `time` seconds."""
        keys = self._keys(poses)
        rows = [row for row, key in enumerate(keys) if key is not None]
        if not rows:
            return
        points = np.asarray(poses.points, np.float64)[rows]
        slots = np.asarray([self._slot(keys[row], points.shape[1]) for row in rows])
        new = self._time[slots] == -np.inf
        position, velocity, cov = self._predict(slots, time)
        found = np.logical_not(np.isnan(points).any(axis=-1))
        # The prediction's and the unpredicted pose's (the frame before's) errors.
        before = self._observed[slots]
        old = ~new[:, None] & found & ~np.isnan(before).any(axis=-1)
        if old.any():
            self._error_sum[0] += float(np.linalg.norm(points - position, axis=-1)[old].sum())
            self._error_sum[1] += float(np.linalg.norm(points - before, axis=-1)[old].sum())
            self._error_count += int(old.sum())
        p00, p01, p11 = cov[..., 0], cov[..., 1], cov[..., 2]
        gain = 1.0 / (p00 + self._r2)
        k0, k1 = p00 * gain, p01 * gain
        innovation = np.where(found[..., None], points - position, 0.0)
        # A node seen for the first time starts where it is, still.
        first = found & np.isnan(position).any(axis=-1)
        innovation[first] = 0.0
        position = np.where(first[..., None], points, position + k0[..., None] * innovation)
        velocity = np.where(first[..., None], 0.0, velocity + k1[..., None] * innovation)
        updated = np.stack([(1 - k0) * p00, (1 - k0) * p01, p11 - k1 * p01], axis=-1)
        cov = np.where((found & ~first)[..., None], updated, cov)
        cov[first] = (self._r2, 0.0, _VELOCITY_PRIOR)
        self._position[slots] = position
        self._velocity[slots] = np.where(np.isnan(velocity), 0.0, velocity)
        self._covariance[slots] = cov
        self._observed[slots] = points
        self._time[slots] = time

    def predict(self, poses: FramePoses, time: float) -> FramePoses:
        """`poses` with each followed animal's points moved to where the filter puts
        them at `time` (seconds, on the clock of `update`'s times); nodes never seen
        stay NaN, animals not followed stay as they are."""
        keys = self._keys(poses)
        points = np.array(poses.points, np.float64)
        for row, key in enumerate(keys):
            slot = self._slots.get(key) if key is not None else None
            if slot is None or self._time[slot] == -np.inf:
                continue
            ahead = time - self._time[slot]
            predicted = self._position[slot] + self._velocity[slot] * ahead
            points[row] = np.where(np.isnan(predicted), points[row], predicted)
        return attrs.evolve(poses, points=points.astype(np.float32))

    def error(self) -> PredictionError:
        """Mean errors so far of each frame's prediction from the frames before it."""
        n = self._error_count
        return PredictionError(
            predicted=self._error_sum[0] / n if n else float("nan"),
            unpredicted=self._error_sum[1] / n if n else float("nan"),
            points=n,
        )

    def _keys(self, poses: FramePoses) -> list[int | None]:
        ids = poses.identities.tolist()
        if len(ids) == 1 and ids[0] < 0:
            return [-1]  # the one animal of an untracked single-animal frame
        return [key if key >= 0 else None for key in ids]

    def _slot(self, key: int | None, nodes: int) -> int:
        assert key is not None
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = len(self._slots)
            if len(self._slots) > len(self._time) or self._position.shape[1] != nodes:
                self._grow(len(self._slots), nodes)
        return slot

    def _grow(self, slots: int, nodes: int) -> None:
        def padded(array: np.ndarray, fill: float, width: int) -> np.ndarray:
            out = np.full((slots, nodes, width), fill)
            out[: array.shape[0], : array.shape[1]] = array
            return out

        self._position = padded(self._position, np.nan, 2)
        self._observed = padded(self._observed, np.nan, 2)
        self._velocity = padded(self._velocity, 0.0, 2)
        self._covariance = padded(self._covariance, 0.0, 3)
        time = np.full(slots, -np.inf)
        time[: self._time.size] = self._time
        self._time = time

    def _predict(self, slots: np.ndarray, time: float) -> tuple[np.ndarray, ...]:
        """The filter's state at `time` for `slots`, before this frame's points."""
        dt = np.where(self._time[slots] == -np.inf, 0.0, time - self._time[slots])[:, None]
        position = self._position[slots] + self._velocity[slots] * dt[..., None]
        p00, p01, p11 = np.moveaxis(self._covariance[slots], -1, 0)
        q = self._q
        cov = np.stack(
            [
                p00 + 2 * dt * p01 + dt * dt * p11 + q * dt**3 / 3,
                p01 + dt * p11 + q * dt**2 / 2,
                p11 + q * dt,
            ],
            axis=-1,
        )
        return position, self._velocity[slots], cov
