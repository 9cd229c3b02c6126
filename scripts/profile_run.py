"""Where a whole `sleap-live run` goes: stage by stage, and thread by thread on the CPU.

    .venv/bin/python scripts/profile_run.py --lab topdown_384 [--frames 1100]
    .venv/bin/python scripts/profile_run.py VIDEO -m MODEL [-m MODEL2] [-o OUT.slp]

One process does what `sleap-live run VIDEO -m MODEL -o OUT.slp` does (the model
loaded as `run` loads it, `load_for_source`; the recorded pipeline; the pose file
written), and reports, in seconds of wall-clock time:

- **start-up**: from the interpreter's start to the pipeline's first engine call:
  imports, the model load (export cache or export, verification, the CPU engine
  choice), opening the video, the pipeline's warm-up batch;
- **run**: from the first engine call to the last pose record emitted, and inside
  it each stage's busy time (`Pipeline.timeline`): the batcher's stack, the engine
  call, split into the **graph** (the runtime's session) and the **host
  postprocessing** (decoding its outputs into poses: bottom-up's PAF grouping) by
  timing the runner's host decoding, and the **emit** stage (pose records, the
  ring, the pose file's journal);
- **writing**: the pose file written when the pipeline stops;
- **decode**: the capture reader thread's CPU time and FFmpeg's own threads'
  (decoding runs beside the engine, so its cost is CPU time, not a span).

and the **CPU time of every thread** (user + system, sampled from /proc every
`SAMPLE_S` while the run goes; threads sleap-live names by their names, native
threads, ONNX Runtime's intra-op pool and FFmpeg's decoders, by their kernel
names) against the wall-clock time: how the threads share the cores.

`--lab NAME` takes a model of `fixtures.lab.LAB_MODELS` and renders its clip (H.264)
into a temporary folder, first. The run uses the export cache as `sleap-live run`
does: run it twice and report the second for a warm start (`--cold` clears a
private cache first to report a cold one). `--json FILE` writes the figures too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

# The interpreter's start: start-up counts from here, imports included.
LAUNCHED = psutil.Process().create_time()

from fixtures import lab  # noqa: E402

from sleap_live.engines.runners import onnx as onnx_runner_module  # noqa: E402
from sleap_live.engines.runners import openvino as openvino_runner_module  # noqa: E402
from sleap_live.stream import OutputOptions, Pipeline, open_source  # noqa: E402
from sleap_live.stream.runner import load_for_source  # noqa: E402

# The imports done: the rest of start-up counts from when the run begins (after a
# `--lab` clip is rendered).
IMPORTED = time.time()

FFMPEG = "FFmpeg's threads"
UNNAMED = "native, unnamed (ONNX Runtime's intra-op pool, OpenMP)"
# Seconds between samples of the threads' CPU times. The pipeline's threads live
# the whole run; a shorter interval only costs the sampler's own CPU (at 0.05 s it
# took 8% of the process's CPU in a 300-frame top-down run on a busy machine).
SAMPLE_S = 0.25
# The runner modules whose host decoding is timed (each calls its module's `decode`).
RUNNER_MODULES = (onnx_runner_module, openvino_runner_module)


class ThreadCpu:
    """Samples every thread's CPU time in the background, keeping the last seen value
    per thread (a thread that ends keeps what it had at its last sample), less what
    each had used when sampling began (the main thread's imports and a `--lab`
    clip's rendering are not the run's)."""

    def __init__(self, interval: float = SAMPLE_S) -> None:
        self._interval = interval
        self._process = psutil.Process()
        self._seen: dict[int, tuple[str, float]] = {}
        self._before: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, name="profile sampler")

    def __enter__(self) -> ThreadCpu:
        self.sample()
        self._before = {thread: seconds for thread, (_, seconds) in self._seen.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> None:
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        for thread in self._process.threads():
            name = names.get(thread.id) or _kernel_name(thread.id)
            self._seen[thread.id] = (name, thread.user_time + thread.system_time)

    def by_name(self) -> dict[str, float]:
        """CPU seconds per thread name (threads of one name summed), largest first."""
        totals: dict[str, float] = {}
        for thread, (name, seconds) in self._seen.items():
            totals[name] = totals.get(name, 0.0) + seconds - self._before.get(thread, 0.0)
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def _sample_loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()


def _kernel_name(thread_id: int) -> str:
    """A native thread's kernel name; one that never named itself carries the
    process's (ONNX Runtime's intra-op pool, OpenMP's workers)."""
    try:
        name = Path(f"/proc/self/task/{thread_id}/comm").read_text().strip()
    except OSError:
        return "native: (ended)"
    if name == Path("/proc/self/comm").read_text().strip():
        return UNNAMED
    return f"native: {name}"


@contextmanager
def timed_host_decoding() -> Iterator[list[float]]:
    """Times every host decoding of graph outputs into poses (the runners' `decode`),
    appending each call's seconds to the list it yields.

    The runners call their module's `decode` by name, so wrapping that name times
    exactly the host postprocessing inside `runner.run` without changing it.
    """
    seconds: list[float] = []
    originals = [(module, module.decode) for module in RUNNER_MODULES]

    def timing(decode: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return decode(*args, **kwargs)
            finally:
                seconds.append(time.perf_counter() - start)

        return timed

    for module, decode in originals:
        module.decode = timing(decode)  # type: ignore[attr-defined]
    try:
        yield seconds
    finally:
        for module, decode in originals:
            module.decode = decode  # type: ignore[attr-defined]


def profile(
    models: list[Path],
    video: Path,
    output: Path,
    *,
    engine: str = "auto",
    batch_size: int | None = None,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """Runs the model on the video as `sleap-live run` does, measuring (module docstring)."""
    load_options: dict[str, Any] = {"engine": engine}
    if cache_dir is not None:
        load_options["cache_dir"] = cache_dir
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    with ThreadCpu() as threads, timed_host_decoding() as host_decoding:
        began = time.time()
        source = open_source(str(video))
        loading = time.perf_counter()
        runner = load_for_source([str(m) for m in models], source, **load_options)
        load_s = time.perf_counter() - loading
        pipeline = Pipeline(
            source, runner, batch_size=batch_size, outputs=OutputOptions(output=output)
        )
        pipeline.start()
        pipeline.join()
        joined = time.perf_counter()
        pipeline.stop()
        write_s = time.perf_counter() - joined
        ended = time.time()
        timeline = pipeline.timeline
        stats = pipeline.stats
        runner_name = type(runner).__name__
        runner.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # The pipeline's clock is monotonic: place its stage times on the wall clock.
    offset = time.time() - time.monotonic()
    first_engine = min(t.engine[0] for t in timeline) + offset
    last_emit = max(t.postprocess[1] for t in timeline) + offset
    busy = {
        stage: sum(getattr(t, stage)[1] - getattr(t, stage)[0] for t in timeline)
        for stage in ("stack", "engine", "postprocess")
    }
    # The warm-up batch is decoded too; the run's batches are the timeline's.
    host_s = sum(host_decoding[-len(timeline) :]) if host_decoding else 0.0
    cpu = threads.by_name()
    decode_cpu = sum(s for name, s in cpu.items() if "capture reader" in name)
    imports = IMPORTED - LAUNCHED
    wall = imports + ended - began
    return {
        "video": str(video),
        "models": [str(m) for m in models],
        "runner": runner_name,
        "frames": int(stats.frames_processed),
        "batches": len(timeline),
        "wall_s": wall,
        "startup_s": imports + first_engine - began,
        "startup_split_s": {
            "imports": imports,
            "model load (export/cache, verification, engine choice)": load_s,
            "video open, pipeline start, warm-up batch": first_engine - began - load_s,
        },
        "run_s": last_emit - first_engine,
        "busy_s": {
            "stack": busy["stack"],
            "engine: graph": busy["engine"] - host_s,
            "engine: host postprocessing": host_s,
            "emit (records, ring, journal)": busy["postprocess"],
        },
        "writing_s": write_s,
        "decode_cpu_s": {
            "capture reader thread": decode_cpu,
            FFMPEG: sum(s for n, s in cpu.items() if n.startswith("native: av:")),
        },
        "fps_run": stats.frames_processed / max(last_emit - first_engine, 1e-9),
        "fps_whole_process": stats.frames_processed / wall,
        "cpu_s_per_thread": cpu,
        "process_cpu_s": (usage.ru_utime + usage.ru_stime)
        - (usage_before.ru_utime + usage_before.ru_stime),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def report(results: dict[str, Any]) -> str:
    """The figures as plain text."""
    wall = results["wall_s"]

    def row(seconds: float, name: str, indent: int = 2) -> str:
        return f"{' ' * indent}{seconds:8.2f} s {100 * seconds / wall:5.1f}%  {name}"

    lines = [
        f"{results['video']}: {results['frames']} frames in {results['batches']} batches, "
        f"{results['runner']}; whole process {wall:.2f} s ({results['fps_whole_process']:.1f} "
        f"fps), the run alone {results['fps_run']:.1f} fps",
        "wall-clock split (share of the whole process):",
        row(results["startup_s"], "start-up (launch to the first engine call)"),
    ]
    lines += [row(s, name, 6) for name, s in results["startup_split_s"].items()]
    lines.append(row(results["run_s"], "run (first engine call to last record emitted)"))
    lines += [row(s, f"{name} (busy)", 6) for name, s in results["busy_s"].items()]
    lines.append(row(results["writing_s"], "writing the pose file at the end"))
    decode = results["decode_cpu_s"]
    lines.append(
        f"decode CPU: capture reader {decode['capture reader thread']:.2f} s, FFmpeg's "
        f"threads {decode[FFMPEG]:.2f} s"
    )
    lines.append(
        f"CPU time per thread ({results['process_cpu_s']:.2f} s in all over {wall:.2f} s of "
        f"wall clock on {results['cores']} cores; load average "
        f"{results['load_average'][0]:.1f}):"
    )
    lines += [f"  {s:8.2f} s  {name}" for name, s in results["cpu_s_per_thread"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, profile, print (and write --json)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("video", type=Path, nargs="?", help="the clip (omit with --lab)")
    parser.add_argument("-m", "--model", type=Path, action="append", dest="models", default=[])
    parser.add_argument("--lab", choices=[m.name for m in lab.LAB_MODELS])
    parser.add_argument("--frames", type=int, default=1100, help="--lab clip length")
    parser.add_argument("-o", "--output", type=Path, help="the pose file (default: a temporary)")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--batch-size", type=int, help="(default: the pipeline's)")
    parser.add_argument("--cold", action="store_true", help="start with an empty cache")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if (args.lab is None) == (args.video is None):
        parser.error("give either VIDEO with -m MODEL, or --lab NAME")
    with tempfile.TemporaryDirectory() as workdir:
        if args.lab is not None:
            entry = lab.lab_model(args.lab)
            paths, video = entry.paths, Path(workdir) / f"{entry.scene}.mp4"
            lab.write_clip(video, entry.scene, args.frames)
        else:
            paths, video = args.models, args.video
            if not paths:
                parser.error("VIDEO needs -m MODEL")
            if not video.is_file():
                parser.error(f"{video}: no such file")
        output = args.output or Path(workdir) / "poses.slp"
        cache = Path(workdir) / "cache" if args.cold else None
        results = profile(
            paths, video, output, engine=args.engine, batch_size=args.batch_size, cache_dir=cache
        )
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
