"""Many videos on this machine: in this process, or in worker processes.

`run_here` runs a `VideoWorker` in this process, `streams` videos in flight at
once. `run_in_processes` starts `workers` processes, each a `VideoWorker` with the
model loaded once and `streams` videos in flight, and hands each the next video
as one finishes. A worker process that dies (killed, out of memory) is replaced,
and each video it had in flight is started again, up to `retries` more times,
its half-written output discarded by the new attempt; a video failing inside a
worker is a result like any other and is not retried.

Each worker process talks to this one over a pipe of its own, and its death is
seen through its sentinel, so a killed worker cannot leave a shared queue's lock
held.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sleap_live.stream.many.videos import VideoJob
from sleap_live.stream.many.worker import VideoResult, VideoWorker, WorkOptions, failed, left

if TYPE_CHECKING:
    # Not at run time: Windows has no fork server context.
    from multiprocessing.context import ForkServerContext, SpawnContext

# How often (seconds) the driver looks at its workers when none has reported.
POLL_SECONDS = 0.2


class Reporter(Protocol):
    """What a run tells its display (`display.ManyProgress`, or nothing)."""

    def started(self, job: VideoJob) -> None: ...

    def finished(self, result: VideoResult) -> None: ...

    def progress(self, index: int, frames: int, total: int | None) -> None:
        """Job `index`'s frames so far, of `total` (None: unknown); told from the
        thread that runs it, where the run is in this process."""

    def stopping(self, jobs: Sequence[VideoJob]) -> None:
        """The run was interrupted: `jobs` (those in flight) are being stopped."""


class Interrupted(Exception):
    """A run over many videos stopped by Ctrl-C (or another stopping signal): what it
    did until then, and the interrupt, which the caller raises again once it has
    said so (`run.ManyResult.interrupted`).

    Attributes:
        results: a result per video: done, failed, stopped (in flight) or left.
        interrupt: the `KeyboardInterrupt` (or its subclass) that stopped it.
    """

    def __init__(self, results: list[VideoResult], interrupt: KeyboardInterrupt) -> None:
        super().__init__("interrupted")
        self.results = results
        self.interrupt = interrupt


def past(deadline: float | None) -> bool:
    """Whether the run's time is up (`deadline` in `time.monotonic` seconds; None: never)."""
    return deadline is not None and time.monotonic() >= deadline


def left_behind(jobs: Iterable[VideoJob], report: Reporter) -> list[VideoResult]:
    """`jobs` left unstarted because the run's time was up: a `left` result each,
    reported."""
    results = [left(job) for job in jobs]
    for result in results:
        report.finished(result)
    return results


class NoReport:
    """A `Reporter` that shows nothing."""

    def started(self, job: VideoJob) -> None:
        pass

    def finished(self, result: VideoResult) -> None:
        pass

    def progress(self, index: int, frames: int, total: int | None) -> None:
        pass

    def stopping(self, jobs: Sequence[VideoJob]) -> None:
        pass


def run_here(
    jobs: Sequence[VideoJob],
    options: WorkOptions,
    *,
    streams: int = 1,
    deadline: float | None = None,
    report: Reporter | None = None,
) -> list[VideoResult]:
    """Process `jobs` in this process, `streams` at once; results in job order.

    No video starts after `deadline` (`time.monotonic` seconds); those in flight
    then finish, and the rest are left (`left`) for the next run.

    Ctrl-C is told to `report` at once (`Reporter.stopping`) and stops every video
    in flight at its next frame, its output not written (the next run redoes it):
    `Interrupted` is raised with every video's result, those in flight "stopped"
    and those not started "left".
    """
    report = report or NoReport()
    worker = VideoWorker(options, on_frames=report.progress)
    results: list[VideoResult] = []
    pending = iter(jobs)
    interrupt: KeyboardInterrupt | None = None
    try:
        with ThreadPoolExecutor(streams, thread_name_prefix="video") as pool:
            in_flight: dict[Future[VideoResult], VideoJob] = {}
            done = threading.Event()

            def submit_next() -> bool:
                if past(deadline) or interrupt is not None:
                    return False
                job = next(pending, None)
                if job is None:
                    return False
                report.started(job)
                future = pool.submit(worker.process, job)
                future.add_done_callback(lambda _: done.set())
                in_flight[future] = job
                return True

            def collect() -> None:
                for future in [f for f in in_flight if f.done()]:
                    del in_flight[future]
                    result = future.result()
                    results.append(result)
                    report.finished(result)
                    submit_next()

            try:
                for _ in range(streams):
                    submit_next()
                while in_flight:
                    done.wait(POLL_SECONDS)
                    done.clear()
                    collect()
            except KeyboardInterrupt as caught:
                # Before the pool waits for its threads: the videos in flight stop
                # at their next frame instead of running to their end.
                interrupt = caught
                report.stopping(sorted(in_flight.values(), key=lambda job: job.index))
                worker.stop()
                while in_flight:
                    done.wait(POLL_SECONDS)
                    done.clear()
                    collect()
        results.extend(left_behind(pending, report))
    finally:
        worker.close()
    results.sort(key=lambda result: result.index)
    if interrupt is not None:
        raise Interrupted(results, interrupt)
    return results


@attrs.define
class _Worker:
    """A worker process, its end of the pipe, and the videos it has in flight."""

    process: Any  # multiprocessing's SpawnProcess
    connection: Connection
    in_flight: dict[int, tuple[VideoJob, int]] = attrs.field(factory=dict)


def run_in_processes(
    jobs: Sequence[VideoJob],
    options: WorkOptions,
    *,
    workers: int,
    streams: int = 1,
    retries: int = 2,
    deadline: float | None = None,
    report: Reporter | None = None,
) -> list[VideoResult]:
    """Process `jobs` in `workers` worker processes, `streams` videos in flight in
    each; results in job order.

    The first worker loads the model (exporting it into the cache if need be)
    before the others start, so they load it from the cache rather than each
    exporting it, and an `--engine auto` choice measured by the first is theirs.

    Args:
        options: how each worker loads the model and runs a video.
        workers: worker processes (at least 1).
        streams: videos in flight per worker.
        retries: how many more times a video is started after its worker was lost.
        deadline: no video starts after it (`time.monotonic` seconds); those in
            flight then finish, the rest are left for the next run.
        report: told when each video starts and finishes.

    Raises:
        Interrupted: Ctrl-C (or another stopping signal): told to `report` at once,
            each worker told to stop its videos at their next frame ("stopped"),
            the videos not started "left", as `run_here`.
    """
    report = report or NoReport()
    context = _worker_context()
    queue: list[tuple[VideoJob, int]] = [(job, 1) for job in jobs]
    queue.reverse()  # popped from the end: the first job first
    results: dict[int, VideoResult] = {}
    pool: list[_Worker] = []

    def start_worker() -> _Worker:
        ours, theirs = context.Pipe()
        process = context.Process(
            target=serve, args=(options, streams, theirs), name="sleap-live video worker"
        )
        process.start()
        theirs.close()
        worker = _Worker(process, ours)
        pool.append(worker)
        return worker

    def hand_out(worker: _Worker, most: int = streams) -> None:
        while queue and len(worker.in_flight) < most and not past(deadline):
            job, attempt = queue.pop()
            worker.in_flight[job.index] = (job, attempt)
            report.started(job)
            worker.connection.send(("job", job, attempt))

    def lost(worker: _Worker) -> None:
        pool.remove(worker)
        worker.connection.close()
        worker.process.join()
        code = worker.process.exitcode
        for job, attempt in worker.in_flight.values():
            if attempt <= retries:
                queue.append((job, attempt + 1))
            else:
                result = failed(
                    job, f"its worker was lost on each of {attempt} attempts (exit {code})", attempt
                )
                results[job.index] = result
                report.finished(result)

    # Until a worker has sent a result, the model may still be loading (exporting
    # into the cache, measuring an `auto` engine): one worker, one video.
    ready = False
    try:
        while len(results) < len(jobs):
            if past(deadline):
                # Retries of videos whose worker was lost count as not started too.
                unstarted = [job for job, _ in reversed(queue)]
                results.update((r.index, r) for r in left_behind(unstarted, report))
                queue.clear()
                if len(results) == len(jobs):
                    break
            if ready:
                while queue and len(pool) < workers:
                    hand_out(start_worker())
                for worker in pool:
                    hand_out(worker)
            elif queue and not pool:
                hand_out(start_worker(), most=1)
            for worker, message in _messages(pool, POLL_SECONDS):
                if message is None:
                    lost(worker)
                    continue
                ready = True
                worker.in_flight.pop(message.index, None)
                results[message.index] = message
                report.finished(message)
    except KeyboardInterrupt as interrupt:
        stopping = [job for worker in pool for job, _ in worker.in_flight.values()]
        report.stopping(sorted(stopping, key=lambda job: job.index))
        _stop_workers(pool)  # each stops its videos in flight at their next frame
        while pool:
            for worker, message in _messages(pool, POLL_SECONDS):
                if message is None:  # done and gone: what it never answered was stopped
                    pool.remove(worker)
                    worker.process.join()
                    worker.connection.close()
                    for job, attempt in worker.in_flight.values():
                        result = attrs.evolve(
                            failed(job, f"{job.video}: stopped before its first frame", attempt),
                            status="stopped",
                        )
                        results[job.index] = result
                        report.finished(result)
                    continue
                worker.in_flight.pop(message.index, None)
                results[message.index] = message
                report.finished(message)
        unstarted = [job for job, _ in reversed(queue)]
        results.update((r.index, r) for r in left_behind(unstarted, report))
        raise Interrupted([results[i] for i in sorted(results)], interrupt) from None
    finally:
        _stop_workers(pool)
        for worker in pool:
            worker.process.join(timeout=30)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()
    return [results[index] for index in sorted(results)]


def _stop_workers(pool: Sequence[_Worker]) -> None:
    """Tell each worker to stop: its videos in flight stop at their next frame, it
    sends their results and returns."""
    for worker in pool:
        try:
            worker.connection.send(("stop",))
        except OSError:
            pass


def _messages(
    pool: Sequence[_Worker], timeout: float
) -> Iterator[tuple[_Worker, VideoResult | None]]:
    """Each result a worker sent, and (worker, None) for each worker that died."""
    if not pool:
        return
    by_handle: dict[Any, _Worker] = {}
    for worker in pool:
        by_handle[worker.connection] = worker
        by_handle[worker.process.sentinel] = worker
    gone: set[int] = set()
    for ready in wait(list(by_handle), timeout):
        worker = by_handle[ready]
        if id(worker) in gone:
            continue
        if ready is worker.connection:
            try:
                while worker.connection.poll():
                    yield worker, worker.connection.recv()
                continue
            except (EOFError, OSError):
                pass
        elif worker.connection.poll():
            continue  # its last results first; its death is seen on the next round
        gone.add(id(worker))
        yield worker, None


def serve(options: WorkOptions, streams: int, connection: Connection) -> None:
    """A worker process's body: process each video sent, `streams` at once, and
    send back each result; return on ("stop",) or when the driver is gone."""
    worker = VideoWorker(options)
    sending = threading.Lock()

    def send_result(future: Future[VideoResult]) -> None:
        with sending:
            connection.send(future.result())

    try:
        with ThreadPoolExecutor(streams, thread_name_prefix="video") as pool:
            while True:
                try:
                    message = connection.recv()
                except (EOFError, OSError, KeyboardInterrupt):
                    worker.stop()
                    break
                if message[0] != "job":
                    worker.stop()  # the run was interrupted, or is over (nothing in flight)
                    break
                _, job, attempt = message
                pool.submit(worker.process, job, attempt).add_done_callback(send_result)
    finally:
        worker.close()


def _worker_context() -> SpawnContext | ForkServerContext:
    """How worker processes start: forked from a fork server that imported the worker
    code once (a new or replacement worker then starts in a fraction of a second, not
    after importing NumPy, PyAV, sleap-io and ONNX Runtime again), where the platform
    has one; else spawned. Never forked from this process, whose threads (the
    display's, a caller's) a fork would copy mid-step."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["sleap_live.stream.many.worker"])
    return context
