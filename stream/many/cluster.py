"""Many videos on a Ray cluster (the `cluster` extra): one actor per worker slot.

Each actor is a `VideoWorker` (the model loaded once, on its first video) taking
one task per video, `streams` of them in flight at once (a threaded actor). Ray's
own fault tolerance does the retrying: an actor whose process dies is restarted
(`max_restarts`) and the tasks it had in flight run again on it
(`max_task_retries`); the new attempt discards the half-written output before it
starts. Outputs are written by the actor, to the output folder, which every
machine must then see at the same path (a shared file system); or, with
``outputs_to="driver"``, on the actor's own disk, their bytes returned to the driver,
which places them in the output folder (`finish.place`: the same hidden name, lock
and atomic rename, so the same resume rules). The driver hands each actor its next
video as one finishes (`ray.wait`), reports progress, and gathers the results.

``address="local"`` starts Ray on this machine for the run (and stops it after,
`local_ray`): its servers listen on the loopback address only, its dashboard is
off and its session files are in a private folder. ``"ray://HOST:PORT"`` (or
``"auto"``, a cluster this machine belongs to) joins one, set up by its owner
(docs/many-videos.md says how to run one safely).
Where Ray is already initialised in this process, that session is used as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.errors import RuntimeUnavailableError
from sleap_live.stream.errors import first_line
from sleap_live.stream.loopback import is_loopback
from sleap_live.stream.many.finish import OutputBytes, OutputsTo, collect, place
from sleap_live.stream.many.local import (
    POLL_SECONDS,
    Interrupted,
    NoReport,
    Reporter,
    left_behind,
    past,
)
from sleap_live.stream.many.videos import VideoJob
from sleap_live.stream.many.worker import VideoResult, VideoWorker, WorkOptions, failed

RAY_INSTALL_HINT = 'pip install "sleap-live[cluster]"'

# Ray's switch for clusters of several machines (ray._private.ray_constants,
# ENABLE_RAY_CLUSTERS_ENV_VAR, Ray 2.60), read when Ray is imported: "0", as Ray
# has by default on macOS and Windows, makes a node's address the loopback one, and
# then the GCS, raylets, workers and runtime-env agent listen on 127.0.0.1 only
# (Ray binds all interfaces otherwise).
RAY_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RayVideoWorker:
    """The body of a Ray actor: a `VideoWorker`, and its process id (for tests and
    logs: the process a kill would hit)."""

    def __init__(self, options: WorkOptions) -> None:
        self.worker = VideoWorker(options)

    def process(self, job: VideoJob) -> VideoResult:
        return self.worker.process(job)

    def process_returning(self, job: VideoJob) -> tuple[VideoResult, OutputBytes | None]:
        """Process `job` into a folder on this machine and return the finished output's
        bytes (None unless done) for the driver to place at `job.output`.

        The folder is named after the output, so a retry on this machine discards
        what a lost attempt left there, as it would in the output folder.
        """
        scratch = scratch_folder(job.output)
        scratch.mkdir(parents=True, exist_ok=True)
        here = attrs.evolve(job, output=scratch / job.output.name)
        result = attrs.evolve(self.worker.process(here), output=str(job.output))
        files = None
        if result.status == "done":
            try:
                files = collect(here.output)
            except OSError as error:
                result = attrs.evolve(result, status="failed", error=f"{here.output}: {error}")
        shutil.rmtree(scratch, ignore_errors=True)
        return result, files

    def stop(self) -> None:
        """Stop the videos in flight at their next frame (Ctrl-C in the driver)."""
        self.worker.stop()

    def pid(self) -> int:
        return os.getpid()


def scratch_folder(output: Path) -> Path:
    """Where an actor writes `output` when the driver places it: this machine's
    temporary folder, a subfolder per output path."""
    key = hashlib.sha256(os.fsencode(output)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "sleap-live-outputs" / key


def import_ray(local: bool = False) -> Any:
    """The `ray` module, or a one-line error saying how to install it.

    For a `local` cluster, Ray imported here takes this machine's loopback address
    as its node's (`RAY_LOOPBACK_ENV`), unless the environment says otherwise.
    """
    if local and "ray" not in sys.modules:
        os.environ.setdefault(RAY_LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise RuntimeUnavailableError(
            f"--cluster needs Ray, which is not installed; {RAY_INSTALL_HINT}"
        ) from None
    return ray


def run_on_ray(
    jobs: Sequence[VideoJob],
    options: WorkOptions,
    *,
    address: str = "local",
    workers: int | None = None,
    streams: int = 1,
    retries: int = 2,
    gpus_per_worker: float = 0.0,
    outputs_to: OutputsTo = "worker",
    deadline: float | None = None,
    report: Reporter | None = None,
) -> list[VideoResult]:
    """Process `jobs` on Ray; results in job order.

    Args:
        options: how each actor loads the model and runs a video (its `threads` is
            the actor's CPU share).
        address: "local", "auto" or "ray://HOST:PORT" (see the module docstring).
        workers: actors (default: as many as the cluster's CPUs, or GPUs with
            `gpus_per_worker`, hold).
        streams: videos in flight per actor.
        retries: restarts of a lost actor, and re-runs of each task it had in flight.
        gpus_per_worker: GPUs Ray reserves for each actor (1: an actor per GPU).
        outputs_to: "worker": each actor writes its outputs to the output folder
            (which its machine must see at the same path); "driver": each actor
            returns them and this process writes them.
        deadline: no video starts after it (`time.monotonic` seconds); those in
            flight then finish, the rest are left for the next run.
        report: told when each video starts and finishes.

    Raises:
        RuntimeUnavailableError: Ray is not installed.
        ValueError: the cluster has no room for one actor.
    """
    ray = import_ray(local=address == "local")
    report = report or NoReport()
    cpus = float(options.load.threads or 1)
    with contextlib.ExitStack() as session:
        if not ray.is_initialized():
            if address == "local":
                warning = session.enter_context(local_ray(ray))
                if warning is not None:
                    print(warning, file=sys.stderr)
            else:
                with _signal_handlers_kept():
                    ray.init(address=address, log_to_driver=False)
                session.callback(ray.shutdown)
        if workers is None:
            resources = ray.cluster_resources()
            room = (
                resources.get("GPU", 0) / gpus_per_worker
                if gpus_per_worker
                else resources.get("CPU", 0) / cpus
            )
            workers = int(room)
        if workers < 1:
            raise ValueError(
                f"the Ray cluster has room for no worker of {cpus:g} CPUs and "
                f"{gpus_per_worker:g} GPUs (it has {ray.cluster_resources()})"
            )
        actor_class = ray.remote(
            num_cpus=cpus,
            num_gpus=gpus_per_worker,
            max_restarts=retries,
            max_task_retries=retries,
            # One thread more than the videos it is handed: `stop` runs beside them.
            max_concurrency=streams + 1,
        )(RayVideoWorker)
        actors: list[Any] = []
        try:
            return _dispatch(
                ray, actor_class, actors, jobs, options, workers, streams, outputs_to, deadline,
                report,
            )  # fmt: skip
        finally:
            for actor in actors:
                ray.kill(actor, no_restart=True)


@contextlib.contextmanager
def local_ray(ray: Any, **options: Any) -> Iterator[str | None]:
    """Ray started on this machine, stopped on leaving; yields a warning line where
    its servers can be reached from other machines, else None.

    Its servers listen on the loopback address (`RAY_LOOPBACK_ENV`, where Ray is
    imported by `import_ray`), its dashboard is off, and its session files (logs,
    sockets, the objects spilled) are in a new 0700 folder, removed after, not in
    the shared ``/tmp/ray``.

    Args:
        **options: more `ray.init` arguments (``num_cpus``).
    """
    folder = tempfile.mkdtemp(prefix="sleap-live-ray-")
    try:
        with _signal_handlers_kept():
            ray.init(include_dashboard=False, log_to_driver=False, _temp_dir=folder, **options)
        try:
            address = ray.util.get_node_ip_address()
            yield None if is_loopback(address) else ray_exposure_warning(address)
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Put back the SIGTERM handler `ray.init` replaces in the driver (with one that
    calls ``sys.exit``, Ray 2.x ``ray._private.worker.init``), so SIGTERM stops a
    run as Ctrl-C does: the videos in flight stopped, the table printed."""
    kept = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if kept is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, kept)


def ray_exposure_warning(address: str) -> str:
    """The one-line warning when a local Ray cluster listens beyond loopback."""
    return (
        f"warning: the local Ray cluster listens on {address}, which other machines can "
        f"reach (Ray was imported with {RAY_LOOPBACK_ENV} unset or 1); only Ray's token "
        f"authentication guards it; {RAY_LOOPBACK_ENV}=0 keeps it on this machine"
    )


def _dispatch(
    ray: Any,
    actor_class: Any,
    actors: list[Any],
    jobs: Sequence[VideoJob],
    options: WorkOptions,
    workers: int,
    streams: int,
    outputs_to: OutputsTo,
    deadline: float | None,
    report: Reporter,
) -> list[VideoResult]:
    """Hand each actor `streams` videos at a time, until every video has a result.

    Until the first result, one actor and one video (it may be exporting the model
    into its machine's cache); then every actor.

    Raises:
        Interrupted: Ctrl-C (or another stopping signal): told to `report` at once,
            each actor told to stop its videos at their next frame ("stopped"), the
            videos not started "left", as `local.run_here`.
    """
    queue = list(reversed(jobs))  # popped from the end: the first job first
    results: dict[int, VideoResult] = {}
    in_flight: dict[Any, tuple[int, VideoJob]] = {}
    load: list[int] = []
    dead: set[int] = set()

    def hand_out(slot: int, most: int) -> None:
        while queue and load[slot] < most and not past(deadline):
            job = queue.pop()
            actor = actors[slot]
            task = actor.process_returning if outputs_to == "driver" else actor.process
            in_flight[task.remote(job)] = (slot, job)
            load[slot] += 1
            report.started(job)

    def collect_done(timeout: float) -> None:
        done, _ = ray.wait(list(in_flight), num_returns=1, timeout=timeout)
        for ref in done:
            slot, job = in_flight.pop(ref)
            load[slot] -= 1
            try:
                if outputs_to == "driver":
                    result = _placed(job, *ray.get(ref))
                else:
                    result = ray.get(ref)
            except ray.exceptions.RayActorError as error:
                dead.add(slot)
                result = failed(job, f"its Ray worker was lost: {first_line(error)}")
            except ray.exceptions.RayError as error:
                result = failed(job, first_line(error))
            results[job.index] = result
            report.finished(result)

    try:
        actors.append(actor_class.remote(options))
        load.append(0)
        hand_out(0, 1)
        while len(results) < len(jobs):
            if past(deadline):
                results.update((r.index, r) for r in left_behind(reversed(queue), report))
                queue.clear()
                if len(results) == len(jobs):
                    break
            if results:
                while len(actors) < workers:
                    actors.append(actor_class.remote(options))
                    load.append(0)
                for slot in range(len(actors)):
                    if slot not in dead:
                        hand_out(slot, streams)
            if not in_flight:
                # Every actor is gone for good: the rest cannot run.
                for job in reversed(queue):
                    results[job.index] = failed(job, "no Ray worker left to run it")
                    report.finished(results[job.index])
                break
            collect_done(POLL_SECONDS)
    except KeyboardInterrupt as interrupt:
        report.stopping(sorted((job for _, job in in_flight.values()), key=lambda j: j.index))
        for slot, actor in enumerate(actors):
            if slot not in dead:
                actor.stop.remote()  # its videos in flight stop at their next frame
        while in_flight:  # a second Ctrl-C leaves here; the actors are killed after
            collect_done(POLL_SECONDS)
        results.update((r.index, r) for r in left_behind(reversed(queue), report))
        raise Interrupted([results[i] for i in sorted(results)], interrupt) from None
    return [results[index] for index in sorted(results)]


def _placed(job: VideoJob, result: VideoResult, files: OutputBytes | None) -> VideoResult:
    """`result` once its returned output is in place at `job.output` (failed if it
    cannot be written there)."""
    if files is None:
        return result
    try:
        redone = place(job.output, files)
    except OSError as error:
        return attrs.evolve(result, status="failed", error=first_line(error))
    return attrs.evolve(result, redone=result.redone or redone)
