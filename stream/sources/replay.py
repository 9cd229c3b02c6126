"""A video file delivered at a fixed frame rate, as if a camera were filming it."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path

import attrs

from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources._base import SourceBase, check_read_timeout
from sleap_live.stream.sources.nvdec import open_file
from sleap_live.stream.types import Frame

logger = logging.getLogger(__name__)


class ReplaySource(SourceBase):
    """Paced replay of a video file: a repeatable stand-in for a live camera.

    Frame ``i`` (counting from the first frame replayed) is released at
    ``t0 + i / fps`` on `clock`, where ``t0`` is when the first frame was released;
    waits are on that absolute deadline, so the schedule does not drift while the
    machine keeps up (see below). Each frame is
    stamped with the time it was released. Decoding happens ahead of the deadline.

    Like a camera, the replay does not slow down for its consumer: with
    ``drop_late=True`` (the default) a frame whose successor was already due when the
    consumer asked for it is skipped, counted in `skipped`, and shows up as a gap in
    the frame indices; a pipeline counts these among its dropped frames. The first
    frame sets the schedule, so it is never skipped. With ``drop_late=False`` late
    frames are released at once, so every frame arrives but a slow consumer sees
    bursts as the replay catches up.

    Decoding is the replay's own cost, not the consumer's: a frame that decoding made
    a whole interval late is released at once and the schedule restarts from it, so
    a rate faster than the machine decodes replays at the rate it does decode. A
    replay that skipped frames or slipped its schedule ends with a one-line warning
    (logger ``sleap_live.stream.sources.replay``) giving the figures and the rate it
    held.

    Truncated files behave as in `FileSource`: the frames that decode are replayed,
    then `SourceError` is raised.

    Args:
        path: the video file.
        fps: replay rate; defaults to the rate the video declares.
        start: index of the first frame to replay.
        stop: index one past the last frame to replay; None replays to the end.
        drop_late: skip frames the consumer was too slow to take in time.
        source_id: name stamped on every frame; defaults to the path as given.
        clock: the clock frames are paced and stamped on.
        decoder: ``"pyav"``, ``"nvdec"`` or ``"auto"`` (see `nvdec.choose_decoder`).
        device: the CUDA device NVDEC decodes on (``"cuda:N"``).
        bit_depth: bits per sample the video's data uses (see `FileSource`).
        read_timeout: most seconds a frame may take before a pipeline reports the
            source stalled; default: the replay's frame interval plus 5 s (`math.inf`: never).

    Raises:
        SourceNotFoundError: if the file does not exist.
        SourceError: if it cannot be opened, or declares no rate and ``fps`` is None.
        ValueError: if fps is not positive and finite, or start/stop are not a valid range.
    """

    is_live = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fps: float | None = None,
        start: int = 0,
        stop: int | None = None,
        drop_late: bool = True,
        source_id: str | None = None,
        clock: Clock = MONOTONIC,
        decoder: str = "pyav",
        device: str = "cuda",
        bit_depth: int | None = None,
        read_timeout: float | None = None,
    ) -> None:
        if fps is not None and not fps > 0:
            raise ValueError(f"replay fps must be positive, got {fps}")
        if fps is not None and not math.isfinite(fps):
            raise ValueError(f"replay fps must be finite, got {fps}")
        read_timeout = check_read_timeout(read_timeout)  # before the file is opened
        self._clock = clock
        self._file = open_file(
            path,
            decoder,
            start=start,
            stop=stop,
            source_id=source_id,
            clock=clock,
            bit_depth=bit_depth,
            device=device,
        )
        super().__init__(self._file.source_id, read_timeout)
        self.decoder, self.decoder_notice = self._file.decoder, self._file.decoder_notice
        rate = fps if fps is not None else self._file.fps
        self.path = Path(path)
        if rate is None:
            self._file.close()
            raise SourceError(f"{self.path}: the video declares no frame rate; pass fps=")
        self.fps = self._rate = float(rate)
        self.frame_shape = self._file.frame_shape
        self.bit_depth = self._file.bit_depth
        self.video_file = self._file.video_file
        self.n_frames = self._file.n_frames
        self.drop_late = drop_late
        self.skipped = 0

    def _frames(self) -> Iterator[Frame]:
        period = 1.0 / self._rate
        anchor: float | None = None  # when frame `anchor_index` was due
        anchor_index = released = slipped = 0
        started: float | None = None  # when the first frame was released
        asked = self._clock()  # when the consumer last asked for a frame
        try:
            for frame in self._file:
                now = self._clock()
                if anchor is None:
                    anchor, anchor_index, started = now, frame.index, now
                deadline = anchor + (frame.index - anchor_index) * period
                if deadline > now:
                    if self._clock.sleep_until(deadline, self._stop):
                        return
                elif self.drop_late and released and asked - deadline >= period:
                    # The consumer came back after the next frame was due.
                    self.skipped += 1
                    continue
                elif now - max(deadline, asked) >= period:
                    # Decoding, not the consumer, made it a frame late: the machine
                    # cannot hold the rate, so the schedule restarts from this frame
                    # rather than counting every later frame as late.
                    anchor, anchor_index = now, frame.index
                    slipped += 1
                released += 1
                yield attrs.evolve(frame, timestamp=self._clock())
                asked = self._clock()
                if self._stop.is_set():
                    return
        finally:
            if started is not None and (self.skipped or slipped):
                self._warn_too_fast(released, slipped)

    def _warn_too_fast(self, released: int, slipped: int) -> None:
        """One line with the counts of what went wrong: frames the consumer was too
        slow to take (skipped, at the replay's own pace), or a decoder slower than the
        rate (the schedule slipped, so the replay itself ran slower). The rate the run
        went at is the run's summary and dashboard figure alone (issue 37: this line's
        own estimate, over other seconds, said 25 fps where the dashboard said 19.6)."""
        replayed = released + self.skipped
        parts = []
        if self.skipped:
            parts.append(
                f"the pipeline took {released} of {replayed} frames and "
                f"{self.skipped} were skipped (counted as dropped)"
            )
        if slipped:
            parts.append(f"decoding fell behind {slipped} times, so the video went by slower")
        logger.warning(
            "%s: this machine could not keep up with the replay rate of %g fps: %s; the "
            "run's fps is the rate it held",
            self.source_id,
            self._rate,
            "; ".join(parts),
        )

    def _release(self) -> None:
        self._file.close()
