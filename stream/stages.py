"""The threads a pipeline's stages run in, and the first error any of them raises.

Each stage runs in a named daemon thread under a guard that stores the stage's
first failure and calls the owner's `on_failure`, so one failing stage halts the
rest. The owner waits for the stages with `wait` and re-raises the stored error
in its own thread with `raise_error`; it may `abandon` a stage it will not wait
for (a callback that never returns), whose daemon thread then runs on uncounted.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Any

from sleap_live.engines.errors import EngineError
from sleap_live.stream.errors import PipelineError, StreamError

# The signals that stop a run as Ctrl-C does, outputs saved (the CLI's handlers
# raise KeyboardInterrupt for each): SIGHUP (the terminal closed), SIGQUIT
# (Ctrl-\\), and SIGUSR1, SIGUSR2 and SIGALRM (whose default action is to terminate)
# would otherwise kill the run with its poses left in the journal. Windows has none.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
if sys.platform != "win32":
    STOP_SIGNALS += (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stopping signals in this thread for the block; any that came run
    their handler (a Ctrl-C raises KeyboardInterrupt) as the block ends.

    Starting a pipeline's stages is then all or nothing against a Ctrl-C: one that
    lands while they start is raised with every stage running, so `stop` finds a
    whole pipeline to stop and save. Threads started in the block inherit the mask
    and never take these signals (Python runs handlers in the main thread anyway).
    Without `pthread_sigmask` (Windows) signals are not held.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        # Restoring runs the handler of a held signal at once, here.
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StageThreads:
    """Named stage threads, how many still run, and the first error.

    Args:
        before: called first in every stage thread with the stage's name (e.g. to
            set its priority).
        on_failure: called in a stage's thread after its failure is stored.
    """

    def __init__(self, *, before: Callable[[str], None], on_failure: Callable[[], None]) -> None:
        self._before = before
        self._on_failure = on_failure
        # Names of the stages whose threads are running. Waiting on this condition,
        # not on Thread.join, keeps a Ctrl-C during a wait harmless: an interrupted
        # Thread.join can leave a live thread marked as finished (CPython < 3.13).
        self._running: list[str] = []
        self._changed = threading.Condition()
        self._error: BaseException | None = None
        self._error_raised = False

    @property
    def running(self) -> tuple[str, ...]:
        """Names of the stages still running."""
        with self._changed:
            return tuple(self._running)

    def spawn(self, stage: str, target: Callable[..., None], *args: Any) -> None:
        """Run `target(*args)` in a new thread named after `stage`."""
        thread = threading.Thread(
            target=self._guard, args=(stage, target, *args), name=f"sleap-live {stage}", daemon=True
        )
        with self._changed:
            self._running.append(stage)
        thread.start()

    def wait(self, timeout: float | None = None, *, but: Collection[str] = ()) -> bool:
        """Wait for every stage (but those in `but`) to finish; False if `timeout`
        (real seconds) passed first."""
        with self._changed:
            return self._changed.wait_for(
                lambda: all(stage in but for stage in self._running), timeout
            )

    def abandon(self, stages: Collection[str]) -> None:
        """Stop waiting for `stages`: their daemon threads run on, no longer counted."""
        with self._changed:
            self._running = [stage for stage in self._running if stage not in stages]
            self._changed.notify_all()

    def store_error(self, stage: str, exc: BaseException) -> None:
        """Keep `exc` as the error to raise, unless an earlier one is kept already."""
        with self._changed:
            if self._error is None:
                self._error = _as_reported(stage, exc)

    def raise_error(self) -> None:
        """Raise the stored error, once: later calls return quietly."""
        with self._changed:
            error, already = self._error, self._error_raised
            self._error_raised = True
        if error is not None and not already:
            raise error

    def _guard(self, stage: str, target: Callable[..., None], *args: Any) -> None:
        self._before(stage)
        try:
            target(*args)
        except BaseException as exc:
            self.store_error(stage, exc)
            self._on_failure()
        finally:
            with self._changed:
                if stage in self._running:  # not if abandoned
                    self._running.remove(stage)
                self._changed.notify_all()


def _as_reported(stage: str, exc: BaseException) -> BaseException:
    """Source and engine errors travel as they are (the CLI prints them); others are wrapped."""
    if isinstance(exc, (StreamError, EngineError)):
        return exc
    wrapped = PipelineError(f"{stage} stage failed: {type(exc).__name__}: {exc}")
    wrapped.__cause__ = exc
    return wrapped
