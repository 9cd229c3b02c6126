"""The one clock every timing decision of a stream is made on.

Capture timestamps, replay pacing, the live batcher's deadline, ready times,
rates, elapsed time and the .slp save schedule all read a `Clock`, so a test can
drive a whole pipeline on a fake clock instead of sleeping and measuring wall time.

Timeouts that only bound how long a call may block (`Pipeline.join(timeout)`,
`RingReader.wait_next(timeout)`, `Channel.get(timeout)`) stay in real seconds: on a
fake clock that nobody advances they would otherwise never expire. Waits that are
timing decisions (a source's read timeout, a recorded batch's wait) read the clock
again every `CLOCK_POLL` real seconds, so a clock another thread moves is noticed.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

# Most real seconds a wait on the clock's time goes without reading the clock again.
CLOCK_POLL = 0.05


@runtime_checkable
class Clock(Protocol):
    """Monotonic seconds, and a way to wait until the clock shows a given time.

    A plain callable returning seconds is enough wherever the clock is only read
    (stats meters, the .slp writer); sources that pace frames also call `sleep_until`.
    """

    def __call__(self) -> float:
        """The current time in seconds."""
        ...

    def sleep_until(self, deadline: float, wake: threading.Event) -> bool:
        """Wait until the clock reaches `deadline` or `wake` is set.

        Returns:
            True if `wake` was set (the caller should stop), False once `deadline` passed.
        """
        ...


class MonotonicClock:
    """`time.monotonic`, the default clock."""

    def __call__(self) -> float:
        return time.monotonic()

    def sleep_until(self, deadline: float, wake: threading.Event) -> bool:
        return wake.wait(max(0.0, deadline - time.monotonic()))

    def __repr__(self) -> str:
        return "MonotonicClock()"


MONOTONIC = MonotonicClock()
