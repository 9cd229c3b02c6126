"""`sleap-live bench`: what the pipeline costs on top of the engine, on this machine.

Every figure comes from one run, side by side, with one loaded runner:

1. **engine**: `runner.run` alone on frames already decoded into memory.
2. **recorded**: the whole pipeline decoding the video file (decode, batching,
   inference, pose records), lossless. Its fps over the engine's is the share of
   the engine's speed the pipeline keeps; decode and pre/post-processing run in
   other threads, so it should be close to 1.

   Engine and recorded runs alternate `--repeats` times, so that a noisy
   neighbour on a shared machine hits both alike: each fps is the median run,
   and the ratio the median over pairs (a recorded run over the engine run
   just before it), with the ratio of the two medians beside it. Both
   see the same frames: the first `--frames` of VIDEO, played `--loops` times
   (each loop decodes the file again; by default enough loops for
   `MIN_STEADY_FRAMES`), so a short clip still measures the steady state rather
   than the pipeline's start-up: filling the first batch and decoding ahead
   while the engine starts cost a 200-frame clip about 6% of its run. The runner
   is warm before the first timed run of either, so neither pays one-time
   initialisation.
3. **live**: the file replayed at `--live-fps` as if it were a camera, batch 1.
   Capture-to-pose latency percentiles against the engine's own latency show what
   queueing and hand-offs add.
4. **soak** (`--soak-frames`, 0 to skip): the decoded frames cycled through the
   recorded pipeline for many frames while resident memory is sampled, to show
   memory stays flat.

The recorded run also keeps each batch's stage times (`Pipeline.timeline`):
`timeline_summary` turns them into start/end offsets of the first batches per
stage (decode, stack, engine, postprocess), each stage's median time per batch
and busy fraction, and how much of the engine's busy time decoding ran beside it
(the overlap). The live run keeps every frame's latency, for a histogram
(`sleap-live bench --plot`).

`run_bench` runs all four on one runner; the command line is `sleap-live bench`
(`sleap_live.cli.bench`).
"""

from __future__ import annotations

import itertools
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.notify import Notify, quiet
from sleap_live.stream.batching import STAGES, StageTimes
from sleap_live.stream.errors import SourceError
from sleap_live.stream.pipeline import Pipeline
from sleap_live.stream.sources import FileSource, IteratorSource, ReplaySource, Source
from sleap_live.stream.sources.nvdec import open_file
from sleap_live.stream.types import PoseRecord

# Frames per timed run when --loops is not given: about 4 s at 250 fps.
MIN_STEADY_FRAMES = 1000


def resident_mb() -> float:
    """Current resident set size in MiB (peak size where /proc is unavailable)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def decode_all(video: Path, limit: int | None = None) -> np.ndarray:
    """The first `limit` frames of `video` (all if None), stacked.

    Raises:
        SourceError: the video has no frames.
    """
    with FileSource(video) as source:
        images = [frame.image for frame in itertools.islice(source, limit)]
    if not images:
        raise SourceError(f"{video}: no frames to measure")
    return np.stack(images)


def warm_up(runner: Any, frames: np.ndarray, batch_size: int) -> None:
    """One untimed pass over the frames.

    torch's CPU kernels are slow the first time they meet each input shape (top-down
    crop counts vary), and ONNX Runtime allocates its arenas on first use: neither
    is the steady state.
    """
    for i in range(0, len(frames), batch_size):
        runner.run(frames[i : i + batch_size])


def bench_engine(
    runner: Any, frames: np.ndarray, batch_size: int, loops: int = 1
) -> dict[str, float]:
    """`runner.run` alone over `frames` (already in memory), `loops` times."""
    per_call = []
    start = time.perf_counter()
    for _ in range(loops):
        for i in range(0, len(frames), batch_size):
            t0 = time.perf_counter()
            runner.run(frames[i : i + batch_size])
            per_call.append(time.perf_counter() - t0)
    seconds = time.perf_counter() - start
    return {
        "frames": loops * len(frames),
        "seconds": seconds,
        "fps": loops * len(frames) / seconds,
        "call_ms_p50": 1e3 * float(np.median(per_call)),
    }


def bench_recorded(
    runner: Any,
    video: Path,
    batch_size: int,
    limit: int,
    loops: int = 1,
    decoder: str = "pyav",
) -> dict[str, Any]:
    """The lossless pipeline decoding the first `limit` frames of `video`, `loops` times.

    The runner must already be warm: the pipeline's own warm-up is skipped, as the
    engine-only run skips its untimed pass. The result's "timeline" is
    `timeline_summary` of the run's batches.
    """
    if loops == 1:
        source: Source = open_file(video, decoder, stop=limit)
    else:
        # Decoding happens lazily, in the pipeline's capture thread, as for a file.
        source = IteratorSource(_decode_loops(video, limit, loops, decoder), copy=False)
    start = time.perf_counter()
    pipeline = Pipeline(source, runner, batch_size=batch_size, policy="recorded", warmup=False)
    stats = pipeline.run()
    seconds = time.perf_counter() - start
    return {
        "frames": stats.frames_processed,
        "seconds": seconds,
        "fps": stats.frames_processed / seconds,
        "timeline": timeline_summary(pipeline.timeline),
    }


def timeline_summary(times: list[StageTimes], first: int = 8) -> dict[str, Any]:
    """Per-stage timeline of a run's batches, in milliseconds from the first decode.

    Returns:
        "batches": for each of the first `first` batches, each stage's
        ``[start, end]`` offset; "busy": per stage, the share of the run's span
        in which that stage was working on some batch; "decode_during_engine":
        the share of the engine's busy time in which decoding ran too (0 when the
        stages take turns, near 1 when decode fully overlaps inference); "span_ms":
        the run's span; "batch_ms": per stage, the median time one batch spent in
        it. Empty dict for no batches.
    """
    if not times:
        return {}
    origin = min(batch.decode[0] for batch in times)
    end = max(batch.postprocess[1] for batch in times)
    span = max(end - origin, 1e-12)
    intervals = {stage: [getattr(batch, stage) for batch in times] for stage in STAGES}
    engine = _union(intervals["engine"])
    return {
        "span_ms": 1e3 * span,
        "batches": [
            {stage: [1e3 * (t - origin) for t in getattr(batch, stage)] for stage in STAGES}
            for batch in times[:first]
        ],
        "busy": {stage: _length(_union(spans)) / span for stage, spans in intervals.items()},
        "batch_ms": {
            stage: 1e3 * float(np.median([stop - start for start, stop in spans]))
            for stage, spans in intervals.items()
        },
        "decode_during_engine": (
            _length(_intersect(_union(intervals["decode"]), engine)) / _length(engine)
            if _length(engine) > 0
            else 0.0
        ),
    }


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint, sorted intervals covering `spans`."""
    merged: list[tuple[float, float]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _intersect(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Intersection of two disjoint sorted interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, stop = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < stop:
            out.append((start, stop))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(stop - start for start, stop in spans)


def bench_throughput(
    runner: Any,
    video: Path,
    frames: np.ndarray,
    batch_size: int,
    *,
    repeats: int = 1,
    loops: int = 1,
    decoder: str = "pyav",
    warm: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Engine-only and recorded-pipeline runs, alternating; medians of `repeats` each
    (`warm`: the runner has been through `warm_up` on `frames` already)."""
    if not warm:
        warm_up(runner, frames, batch_size)
    engine_runs, recorded_runs = [], []
    for _ in range(repeats):
        engine_runs.append(bench_engine(runner, frames, batch_size, loops))
        recorded_runs.append(bench_recorded(runner, video, batch_size, len(frames), loops, decoder))
    engine, recorded = _median_run(engine_runs), _median_run(recorded_runs)
    # Each recorded run is compared with the engine run just before it, which met
    # the same load from the rest of the machine; the median pair is the figure.
    pairs = [rec["fps"] / eng["fps"] for eng, rec in zip(engine_runs, recorded_runs, strict=True)]
    recorded["ratio_to_engine"] = float(np.median(pairs))
    recorded["ratio_runs"] = pairs
    recorded["ratio_of_medians"] = recorded["fps"] / engine["fps"]
    return engine, recorded


def plan(
    limit: int,
    loops: int,
    repeats: int,
    batch_size: int,
    live_fps: float,
    soak_frames: int,
    first_fps: float,
) -> str:
    """What `run_bench` will run and about how long it takes, said before it starts:
    the runs' frames at `first_fps` (the untimed first pass's rate), and the live
    replay at its own pace."""
    frames = 2 * repeats * loops * limit + soak_frames
    seconds = frames / first_fps + limit / live_fps
    soak = f", a soak of {soak_frames} frames" if soak_frames else ""
    return (
        f"plan: engine only and the recorded pipeline, {repeats} runs each of {loops * limit} "
        f"frames (batch {batch_size}), a live replay of {limit} frames at {live_fps:g} fps"
        f"{soak}: about {_minutes(seconds)} at this machine's {first_fps:.0f} fps "
        "(the first pass); --repeats, --loops, --frames and --soak-frames make it shorter"
    )


def faster_than_engine(recorded: dict[str, Any]) -> str | None:
    """A note where the recorded pipeline read above the engine alone, which it
    cannot be (it makes the same engine calls, and decodes besides): the runs met
    different loads from the rest of the machine. None where it did not."""
    if recorded["ratio_of_medians"] <= 1.0 and recorded["ratio_to_engine"] <= 1.0:
        return None
    runs = recorded["ratio_runs"]
    return (
        f"note: the recorded pipeline read above the engine alone (recorded / engine "
        f"{min(runs):.2f} to {max(runs):.2f} over the run pairs). It makes the same engine "
        "calls and decodes besides, so it is not faster by itself: the runs met different loads "
        "from the rest of the machine (other processes, CPU frequency). Measure on a quiet "
        "machine, or with more --repeats; the median of pairs compares like with like"
    )


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def _median_run(runs: list[dict[str, float]]) -> dict[str, Any]:
    """The run with the median fps, plus every run's fps."""
    ranked = sorted(runs, key=lambda run: run["fps"])
    median: dict[str, Any] = dict(ranked[(len(ranked) - 1) // 2])
    median["fps_runs"] = [run["fps"] for run in runs]
    return median


def _decode_loops(video: Path, limit: int, loops: int, decoder: str) -> Iterator[Any]:
    for _ in range(loops):
        with open_file(video, decoder, stop=limit) as source:
            for frame in source:
                yield frame.image


def bench_live(runner: Any, video: Path, fps: float, limit: int) -> dict[str, Any]:
    latencies: list[float] = []
    pipeline = Pipeline(
        ReplaySource(video, fps=fps, stop=limit), runner, policy="live", batch_size=1
    )
    pipeline.on_poses(lambda record: latencies.append(record.latency), lossless=True)
    stats = pipeline.run()
    lat = np.asarray(latencies) * 1e3
    engine_p50 = 1e3 * (stats.engine_latency_p50 or 0.0)
    engine_p99 = 1e3 * (stats.engine_latency_p99 or 0.0)
    p50, p99 = float(np.percentile(lat, 50)), float(np.percentile(lat, 99))
    return {
        "fps": fps,
        "frames": stats.frames_processed,
        "dropped": stats.frames_dropped,
        "latency_ms_p50": p50,
        "latency_ms_p99": p99,
        "engine_ms_p50": engine_p50,
        "engine_ms_p99": engine_p99,
        "overhead_ms_p50": p50 - engine_p50,
        "overhead_ms_p99": p99 - engine_p99,
        "p99_over_engine_p50_ms": p99 - engine_p50,
        "latencies_ms": lat.tolist(),
    }


def bench_soak(
    runner: Any, frames: np.ndarray, n_frames: int, batch_size: int, every: int = 1000
) -> dict[str, Any]:
    samples: list[tuple[int, float]] = []

    def sample(record: PoseRecord) -> None:
        if record.frame_index % every == 0:
            samples.append((record.frame_index, resident_mb()))

    cycled = itertools.islice(itertools.cycle(frames), n_frames)
    pipeline = Pipeline(
        IteratorSource(cycled, copy=False), runner, batch_size=batch_size, policy="recorded"
    )
    pipeline.on_poses(sample, lossless=True)
    start = time.perf_counter()
    stats = pipeline.run()
    seconds = time.perf_counter() - start
    # The first samples include one-time allocations (arena growth, warm caches):
    # flatness is judged from the second sample on.
    settled = samples[1:] if len(samples) > 2 else samples
    first, last = settled[0][1], settled[-1][1]
    return {
        "frames": stats.frames_processed,
        "fps": stats.frames_processed / seconds,
        "rss_mb_first": first,
        "rss_mb_last": last,
        "rss_mb_growth": last - first,
        "rss_mb_max": max(m for _, m in settled),
        "samples": samples,
    }


def run_bench(
    runner: Any,
    video: Path,
    *,
    frames: int | None = None,
    batch_size: int = 8,
    repeats: int = 5,
    loops: int | None = None,
    live_fps: float = 30.0,
    soak_frames: int = 20_000,
    progress: Notify = quiet,
    decoder: str = "pyav",
) -> dict[str, Any]:
    """Every measurement of the module docstring, with one runner.

    Args:
        runner: a loaded `Runner`; it stays open.
        video: the clip to measure with.
        frames: how many of its first frames to use (None: all).
        batch_size: frames per engine call in the engine, recorded and soak runs.
        repeats: alternating engine and recorded runs (their medians are reported).
        loops: plays of the frames per throughput run (None: enough for
            `MIN_STEADY_FRAMES`).
        live_fps: replay rate of the live run.
        soak_frames: frames of the soak run (0 skips it).
        progress: told, in one line, what is measured next.
        decoder: what decodes the recorded runs (see `open_file`).

    Returns:
        A JSON-ready dict: the run's settings, then "engine", "recorded", "live" and,
        unless skipped, "soak" (see the `bench_*` functions).
    """
    decoded = decode_all(video, frames)
    limit = len(decoded)
    loops = loops or -(-MIN_STEADY_FRAMES // limit)
    results: dict[str, Any] = {
        "video": str(video),
        "runner": type(runner).__name__,
        "device": runner.device,
        "frame_shape": list(decoded.shape[1:]),
        "loops": loops,
        "repeats": repeats,
    }
    # The untimed first pass, timed here for the plan's estimate.
    started = time.perf_counter()
    warm_up(runner, decoded, batch_size)
    first_fps = limit / max(time.perf_counter() - started, 1e-9)
    progress(plan(limit, loops, repeats, batch_size, live_fps, soak_frames, first_fps))
    progress(
        f"engine only and recorded pipeline: {limit} frames x {loops} loops,"
        f" batch {batch_size}, {repeats} runs each ..."
    )
    results["engine"], results["recorded"] = bench_throughput(
        runner, video, decoded, batch_size, repeats=repeats, loops=loops, decoder=decoder, warm=True
    )
    progress(f"live replay at {live_fps:g} fps ...")
    results["live"] = bench_live(runner, video, live_fps, limit)
    if soak_frames:
        progress(f"soak: {soak_frames} frames ...")
        results["soak"] = bench_soak(runner, decoded, soak_frames, batch_size)
    return results
