"""The constant-velocity box filters of sleap-nn's MOT trackers, over many tracks at once.

Two parameterisations, as sleap-nn 0.3.5 (`sleap_nn/tracking/mot/kalman.py`) runs
them for the trackers offered here: ``xysr`` (SORT, OC-SORT: centre, area, aspect
ratio; 7-D state; SORT's fixed noise) and ``xywh`` (ByteTrack in sleap-nn's
"animal" preset: centre, width, height; 8-D state; noise a fraction of the box
size, DeepSORT's weights). The same equations, the same constants and the same
order of operations (Joseph-form covariance update, sizes clamped to 1 px, a
size velocity stopped before it would shrink a size through zero), but each
prediction and update runs on a stack of tracks in one call instead of one
track at a time. Boxes are (x0, y0, x1, y1).
"""

from __future__ import annotations

import numpy as np

# Smallest box side (px) and aspect ratio the conversions use.
_MIN_SIZE = 1.0
_MIN_RATIO = 1e-6

# DeepSORT's noise weights: standard deviations as fractions of the box size.
_POSITION = 1.0 / 20
_VELOCITY = 1.0 / 160


def _symmetric(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.transpose(0, 2, 1))


def _centre_size(boxes: np.ndarray) -> np.ndarray:
    """(..., 4) boxes as (cx, cy, w, h), sides at least 1 px (NaN stays NaN)."""
    out = np.empty(boxes.shape)
    out[..., :2] = 0.5 * (boxes[..., :2] + boxes[..., 2:])
    out[..., 2:] = np.maximum(boxes[..., 2:] - boxes[..., :2], _MIN_SIZE)
    return out


def _corners(centre_size: np.ndarray) -> np.ndarray:
    half_w = 0.5 * centre_size[..., 2]
    half_h = 0.5 * centre_size[..., 3]
    cx, cy = centre_size[..., 0], centre_size[..., 1]
    return np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=-1)


class BoxFilter:
    """One of the two box filters; stateless, each track owns its (mean, cov).

    Args:
        kind: "xysr" or "xywh".
    """

    def __init__(self, kind: str) -> None:
        if kind not in ("xysr", "xywh"):
            raise ValueError(f"tracking: no Kalman filter {kind!r}")
        self.kind = kind
        self.ndim = 7 if kind == "xysr" else 8
        pairs = ((0, 4), (1, 5), (2, 6)) if kind == "xysr" else ((0, 4), (1, 5), (2, 6), (3, 7))
        self._motion = np.eye(self.ndim)
        for position, velocity in pairs:
            self._motion[position, velocity] = 1.0
        self._motion_t = np.ascontiguousarray(self._motion.T)
        self._identity = np.eye(self.ndim)
        self._diagonal = np.arange(self.ndim)
        # A size whose velocity would take it through zero stops shrinking.
        self._size_velocity = ((2, 6),) if kind == "xysr" else ((2, 6), (3, 7))

    def measure(self, boxes: np.ndarray) -> np.ndarray:
        """(..., 4) boxes as measurements (..., 4)."""
        z = _centre_size(np.asarray(boxes, np.float64))
        if self.kind == "xysr":
            w, h = z[..., 2].copy(), z[..., 3].copy()
            z[..., 2] = w * h
            z[..., 3] = w / h
        return z

    def boxes(self, means: np.ndarray) -> np.ndarray:
        """(..., ndim) state means as (..., 4) boxes."""
        if self.kind == "xysr":
            area = np.maximum(means[..., 2], _MIN_SIZE)
            ratio = np.maximum(means[..., 3], _MIN_RATIO)
            w = np.maximum(np.sqrt(area * ratio), _MIN_SIZE)
            h = np.maximum(np.sqrt(area / ratio), _MIN_SIZE)
            return _corners(np.stack([means[..., 0], means[..., 1], w, h], axis=-1))
        centre_size = np.array(means[..., :4], np.float64)
        centre_size[..., 2:4] = np.maximum(centre_size[..., 2:4], _MIN_SIZE)
        return _corners(centre_size)

    def initiate(self, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """States (n, ndim), (n, ndim, ndim) of tracks starting at boxes (n, 4)."""
        z = self.measure(boxes)
        means = np.zeros((z.shape[0], self.ndim))
        means[:, :4] = z
        if self.kind == "xysr":
            variance = np.broadcast_to([10.0, 10.0, 10.0, 10.0, 1e4, 1e4, 1e4], means.shape)
        else:
            w = np.maximum(z[:, 2], _MIN_SIZE)
            h = np.maximum(z[:, 3], _MIN_SIZE)
            p, v = 2 * _POSITION, 10 * _VELOCITY
            variance = np.square(
                np.stack([p * w, p * h, p * w, p * h, v * w, v * h, v * w, v * h], 1)
            )
        covs = np.zeros((z.shape[0], self.ndim, self.ndim))
        diagonal = np.arange(self.ndim)
        covs[:, diagonal, diagonal] = variance
        return means, covs

    def predict(self, means: np.ndarray, covs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One step of every state (n, ndim), (n, ndim, ndim)."""
        means = np.array(means, np.float64)
        for size, velocity in self._size_velocity:
            means[means[:, size] + means[:, velocity] <= 0, velocity] = 0.0
        noise = self._process_variance(means)  # from the state before the step
        means = means @ self._motion_t
        covs = self._motion @ covs @ self._motion_t
        covs[:, self._diagonal, self._diagonal] += noise
        return means, _symmetric(covs)

    def update(
        self, means: np.ndarray, covs: np.ndarray, boxes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """States (n, ...) corrected by one observed box (n, 4) each (Joseph form)."""
        z = self.measure(boxes)
        r = self._measurement_variance(means)  # (n, 4)
        s = covs[:, :4, :4].copy()
        s[:, self._diagonal[:4], self._diagonal[:4]] += r
        s = _symmetric(s)
        gain = np.linalg.solve(s, covs[:, :4, :]).transpose(0, 2, 1)  # (n, ndim, 4)
        new_means = means + (gain @ (z - means[:, :4])[:, :, None])[:, :, 0]
        i_kh = np.repeat(self._identity[None], covs.shape[0], axis=0)
        i_kh[:, :, :4] -= gain
        new_covs = _symmetric(
            i_kh @ covs @ i_kh.transpose(0, 2, 1) + (gain * r[:, None, :]) @ gain.transpose(0, 2, 1)
        )
        # A non-finite result keeps the prior, as sleap-nn does.
        finite = np.isfinite(new_means).all(axis=1) & np.isfinite(new_covs).all(axis=(1, 2))
        finite &= np.isfinite(z).all(axis=1)
        return (
            np.where(finite[:, None], new_means, means),
            np.where(finite[:, None, None], new_covs, covs),
        )

    def _process_variance(self, means: np.ndarray) -> np.ndarray:
        if self.kind == "xysr":
            return np.broadcast_to([1.0, 1.0, 1.0, 1.0, 1e-2, 1e-2, 1e-4], means.shape)
        w = np.maximum(means[:, 2], _MIN_SIZE)
        h = np.maximum(means[:, 3], _MIN_SIZE)
        sizes = np.stack([w, h, w, h], axis=1)
        return np.square(np.concatenate([_POSITION * sizes, _VELOCITY * sizes], axis=1))

    def _measurement_variance(self, means: np.ndarray) -> np.ndarray:
        if self.kind == "xysr":
            return np.broadcast_to([1.0, 1.0, 10.0, 10.0], (means.shape[0], 4))
        w = np.maximum(means[:, 2], _MIN_SIZE)
        h = np.maximum(means[:, 3], _MIN_SIZE)
        return np.square(_POSITION * np.stack([w, h, w, h], axis=1))

    def replay(
        self,
        mean: np.ndarray,
        cov: np.ndarray,
        last_box: np.ndarray,
        new_box: np.ndarray,
        gap: int,
        frozen_steps: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """OC-SORT's observation-centric re-update of one re-found track.

        From the state frozen at the track's first miss (`frozen_steps` steps past
        its last observation `last_box`), updates it at each step of the `gap`
        with a virtual box on the straight line (in centre and size) to `new_box`,
        predicting once between steps; the last virtual box is `new_box`.
        """
        gap = max(gap, 1)
        frozen_steps = min(max(frozen_steps, 0), gap)
        means, covs = mean[None].copy(), cov[None].copy()
        start = _centre_size(last_box)
        end = _centre_size(new_box)
        if not (np.isfinite(start).all() and np.isfinite(end).all()):
            for _ in range(gap - frozen_steps):
                means, covs = self.predict(means, covs)
            return means[0], covs[0]
        if frozen_steps == 0:
            means, covs = self.predict(means, covs)
        first = max(frozen_steps, 1)
        for step in range(first, gap + 1):
            if step > first:
                means, covs = self.predict(means, covs)
            if step == gap:
                virtual = new_box
            else:
                fraction = step / gap
                virtual = _corners((1.0 - fraction) * start + fraction * end)
            means, covs = self.update(means, covs, virtual[None])
        return means[0], covs[0]
