"""Kill sleap-live runs at random points and check what their outputs hold.

Modes::

    python scripts/fault_soak.py kills [--kills 4] [--seed 0]   # SIGKILL replays and file runs
    python scripts/fault_soak.py soak --minutes 10             # one long replay: save cost, RSS
    python scripts/fault_soak.py real-kills -m DIR [-m DIR] [--size 384] [--kills 5]
                                                               # SIGKILL replays of real models
    python scripts/fault_soak.py child LOGDIR -- ARGS...       # one run, used by the modes above

`kills` replays a generated clip at 30 fps (live policy) and runs a long generated
clip as fast as it goes (recorded policy), SIGKILLs each run at a random point
after it got going, then checks the output: the .slp is readable as it is or
after `sleap-live recover`, its frames are exactly the first frames the engine
finished, and every finished frame it lacks was finished in the last
`--save-interval` seconds before the kill. `real-kills` does the replay kills with
real models (the 384x384 top-down lab pair: ``-m tests/data/lab_models/centroid_384
-m tests/data/lab_models/centered_instance_384``) on demo.mp4 scaled to `--size`
square and looped to 60 s of H.264, logging each pose record as the pipeline writes
it to its ring instead (a real engine cannot read a frame's index from its
pixels). `soak` runs one replay for N minutes
and reports each minute's journal save cost and the process's RSS, then stops it
with Ctrl-C and checks that the .slp holds every finished frame.

The runs use the fake engine of tests/stream/fakes.py (poses decoded from the
frame index each generated frame carries), so what is measured is the pipeline,
the writers and the signal handling, not a model. `child` runs `sleap-live` with
it, logging to LOGDIR: ``ready`` once 4 batches ran, ``finished.log`` (one line
per finished frame: index and CLOCK_MONOTONIC time, written unbuffered so a kill
keeps it), ``saves.log`` (each journal append: time and seconds it took), and
``saving`` when the final .slp write begins (``--slow-save S`` then waits S s
first, ``--slow-start S`` waits S s before the pipeline starts: for the signal tests).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
FAKES = ROOT / "tests" / "stream" / "fakes.py"
SAVE_INTERVAL = 2.0


def load_fakes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sleap_live_fault_soak_fakes", FAKES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_clip(path: Path, n_frames: int, fps: int = 30) -> Path:
    """A lossless gray clip whose frames carry their index (see fakes.frame_image)."""
    import av

    fakes = load_fakes()
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "gray"
        for index in range(n_frames):
            image = fakes.frame_image(index, (24, 32, 1))[..., 0]
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="gray")))
        container.mux(stream.encode())
    return path


# ----------------------------------------------------------------------- child


def write_lab_clip(path: Path, size: int, n_frames: int, fps: int = 30) -> Path:
    """demo.mp4 scaled to `size` x `size` and looped to `n_frames` frames of H.264."""
    import av

    with av.open(str(ROOT / "tests" / "data" / "videos" / "demo.mp4")) as source:
        images = [
            frame.reformat(width=size, height=size, format="rgb24").to_ndarray()
            for frame in source.decode(video=0)
        ]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
        for index in range(n_frames):
            frame = av.VideoFrame.from_ndarray(images[index % len(images)], format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def real_child(log_dir: Path, argv: list[str]) -> int:
    """Run `sleap-live argv` with its real models, logging each pose record the
    pipeline writes to its ring (frame index and time) to `log_dir`/finished.log."""
    from sleap_live import cli
    from sleap_live.stream.ring import RingBuffer

    finished = os.open(log_dir / "finished.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    write = RingBuffer.write
    written = [0]

    def logged_write(self, record):  # type: ignore[no-untyped-def]
        position = write(self, record)
        os.write(finished, f"{record.frame_index} {time.monotonic():.6f}\n".encode())
        written[0] += 1
        if written[0] == 8:
            (log_dir / "ready").touch()
        return position

    RingBuffer.write = logged_write  # type: ignore[method-assign]
    return cli.main(argv)


def child(log_dir: Path, delay: float, slow_save: float, slow_start: float, argv: list[str]) -> int:
    """Run `sleap-live argv` on the fake engine, logging what it finished to `log_dir`."""
    import sleap_io as sio

    from sleap_live import cli
    from sleap_live.engines.runners import load as runners_load
    from sleap_live.stream import pipeline
    from sleap_live.stream.outputs import journal

    fakes = load_fakes()
    finished = os.open(log_dir / "finished.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    saves = os.open(log_dir / "saves.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    class LoggingRunner(fakes.FakeRunner):
        def run(self, frames, *, stream=None):  # type: ignore[no-untyped-def]
            poses = super().run(frames)
            if len(self.batch_sizes) > 1:  # the first call is the warm-up
                now = time.monotonic()
                lines = "".join(f"{fakes.index_of(image)} {now:.6f}\n" for image in frames)
                os.write(finished, lines.encode())
            if len(self.batch_sizes) == 4:
                (log_dir / "ready").touch()
            return poses

    append = journal.JournalWriter.append

    def timed_append(self, *records):  # type: ignore[no-untyped-def]
        started = time.monotonic()
        append(self, *records)
        os.write(saves, f"{started:.6f} {time.monotonic() - started:.6f}\n".encode())

    save_slp = sio.save_slp

    def slow_save_slp(*args, **kwargs):  # type: ignore[no-untyped-def]
        (log_dir / "saving").touch()
        time.sleep(slow_save)
        return save_slp(*args, **kwargs)

    start = pipeline.Pipeline.start

    def slow_start_pipeline(self):  # type: ignore[no-untyped-def]
        (log_dir / "starting").touch()
        time.sleep(slow_start)
        return start(self)

    runners_load.load_runner = lambda models, **options: LoggingRunner(delay=delay)  # type: ignore[assignment]
    journal.JournalWriter.append = timed_append  # type: ignore[method-assign]
    sio.save_slp = slow_save_slp
    pipeline.Pipeline.start = slow_start_pipeline  # type: ignore[method-assign]
    return cli.main(argv)


def start_child(
    log_dir: Path,
    argv: list[str],
    *,
    delay: float = 0.005,
    slow_save: float = 0.0,
    slow_start: float = 0.0,
    real: bool = False,
) -> subprocess.Popen[str]:
    """Start `child` (see the module docstring) in a process of its own; `real`: its
    models are real (`real_child`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "child", str(log_dir)]
    options = [
        "--delay",
        str(delay),
        "--slow-save",
        str(slow_save),
        "--slow-start",
        str(slow_start),
        *(["--real"] if real else []),
    ]
    return subprocess.Popen(
        [*command, *options, "--", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"run ended before {path.name}: {process.stderr.read()}")  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise RuntimeError(f"run never wrote {path.name}")
        time.sleep(0.02)


def finished_frames(log_dir: Path) -> dict[int, float]:
    """Frame index -> CLOCK_MONOTONIC time the engine finished it, from the child's log."""
    frames = {}
    for line in (log_dir / "finished.log").read_text().splitlines():
        index, when = line.split()
        frames[int(index)] = float(when)
    return frames


# ----------------------------------------------------------------------- kills


def kill_at_random(
    process: subprocess.Popen[str], slp: Path, log_dir: Path, rng: random.Random
) -> tuple[str, bool]:
    """SIGKILL `process` 0 to 8 s from now, then `check_killed_output`: the figures as
    a table row, and whether the frames lost fit the save interval."""
    after = rng.uniform(0.0, 8.0)
    time.sleep(after)
    killed_at = time.monotonic()
    process.send_signal(signal.SIGKILL)
    process.wait()
    figures = check_killed_output(slp, log_dir, killed_at)
    good = figures["lost_window_s"] <= SAVE_INTERVAL
    row = (
        f"{after:12.2f} {figures['finished']:9.0f} {figures['saved']:6.0f} "
        f"{figures['lost']:5.0f} {figures['lost_window_s']:14.2f}  "
        f"{'yes' if figures['recovered'] else 'no':9s}{'' if good else '  LOST TOO MUCH'}"
    )
    return row, good


def check_killed_output(slp: Path, log_dir: Path, killed_at: float) -> dict[str, float]:
    """Recover `slp` if needed; check it against the finished frames; return figures."""
    import sleap_io as sio

    from sleap_live.stream.outputs.journal import journal_path

    recovered = False
    if journal_path(slp).exists():
        done = subprocess.run(
            [sys.executable, "-m", "sleap_live", "recover", str(slp)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"recover failed: {done.stderr}")
        recovered = True
    labels = sio.load_slp(str(slp), open_videos=False)
    saved = [lf.frame_idx for lf in labels]
    finished = finished_frames(log_dir)
    order = sorted(finished, key=lambda index: (finished[index], index))
    if saved != order[: len(saved)]:
        raise AssertionError(f"{slp}: saved frames are not the first frames finished")
    lost = order[len(saved) :]
    window = killed_at - min(finished[index] for index in lost) if lost else 0.0
    return {
        "recovered": float(recovered),
        "finished": float(len(finished)),
        "saved": float(len(saved)),
        "lost": float(len(lost)),
        "lost_window_s": window,
    }


def kills(work: Path, n_kills: int, seed: int) -> bool:
    rng = random.Random(seed)
    replay_clip = write_clip(work / "replay.mkv", 30 * 60)
    file_clip = write_clip(work / "long.mkv", 20000)
    runs = [("replay", replay_clip, 0.005), ("run", file_clip, 0.02)]
    ok = True
    print("kind    kill_after_s  finished  saved  lost  lost_window_s  recovered")
    for attempt in range(n_kills):
        for kind, clip, delay in runs:
            log_dir = work / f"{kind}{attempt}"
            slp = work / f"{kind}{attempt}.slp"
            argv = [kind, str(clip), "-m", "fake", "-o", str(slp), "-q", "--no-verify"]
            if kind == "replay":
                argv += ["--fps", "30"]
            process = start_child(log_dir, argv, delay=delay)
            wait_for(log_dir / "ready", process)
            row, good = kill_at_random(process, slp, log_dir, rng)
            ok &= good
            print(f"{kind:7s} {row}")
    return ok


def real_kills(work: Path, models: list[Path], size: int, n_kills: int, seed: int) -> bool:
    rng = random.Random(seed)
    clip = write_lab_clip(work / f"lab{size}.mp4", size, 30 * 60)
    ok = True
    print(f"replay of a {size}x{size} H.264 clip at 30 fps, models {', '.join(map(str, models))}")
    print("kill_after_s  finished  saved  lost  lost_window_s  recovered")
    for attempt in range(n_kills):
        log_dir = work / f"real{attempt}"
        slp = work / f"real{attempt}.slp"
        argv = ["replay", str(clip), "-o", str(slp), "-q", "--fps", "30"]
        for model in models:
            argv += ["-m", str(model)]
        process = start_child(log_dir, argv, real=True)
        wait_for(log_dir / "ready", process, timeout=600.0)  # the first run exports
        row, good = kill_at_random(process, slp, log_dir, rng)
        ok &= good
        print(row)
    return ok


# ------------------------------------------------------------------------ soak


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def soak(work: Path, minutes: float) -> bool:
    import sleap_io as sio

    seconds = minutes * 60
    clip = write_clip(work / "soak.mkv", int(30 * (seconds + 30)))
    log_dir, slp = work / "soak", work / "soak.slp"
    argv = ["replay", str(clip), "--fps", "30", "-m", "fake", "-o", str(slp), "-q", "--no-verify"]
    process = start_child(log_dir, argv)
    wait_for(log_dir / "ready", process)
    started = time.monotonic()
    rss = []
    while (elapsed := time.monotonic() - started) < seconds:
        rss.append((elapsed, rss_mib(process.pid)))
        time.sleep(5.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=600)
    labels = sio.load_slp(str(slp), open_videos=False)
    finished = finished_frames(log_dir)
    saves = [line.split() for line in (log_dir / "saves.log").read_text().splitlines()]
    print(
        f"replay at 30 fps for {minutes:g} min: {len(finished)} frames finished, "
        f"{len(labels)} in the .slp, exit {process.returncode}"
    )
    print("minute  saves  save_ms_mean  save_ms_max  rss_mib")
    per_minute = int(minutes) + 1
    for minute in range(per_minute):
        window = [
            float(cost) * 1e3
            for when, cost in saves
            if minute * 60 <= float(when) - started < (minute + 1) * 60
        ]
        memory = [mib for when, mib in rss if minute * 60 <= when < (minute + 1) * 60]
        if window and memory:
            print(
                f"{minute:6d} {len(window):6d} {sum(window) / len(window):13.2f} "
                f"{max(window):12.2f} {max(memory):8.1f}"
            )
    return len(labels) == len(finished) and process.returncode == 130 and "Traceback" not in err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    run_kills = modes.add_parser("kills", help="SIGKILL replays and file runs at random points")
    run_kills.add_argument("--kills", type=int, default=4, help="kills of each kind of run")
    run_kills.add_argument("--seed", type=int, default=0)
    run_kills.add_argument("--work", type=Path, default=Path("/tmp/sleap-live-fault-soak"))
    run_real = modes.add_parser("real-kills", help="SIGKILL replays with real models")
    run_real.add_argument("-m", "--model", type=Path, action="append", required=True)
    run_real.add_argument("--size", type=int, default=384, help="the clip's width and height")
    run_real.add_argument("--kills", type=int, default=5)
    run_real.add_argument("--seed", type=int, default=0)
    run_real.add_argument("--work", type=Path, default=Path("/tmp/sleap-live-fault-soak"))
    run_soak = modes.add_parser("soak", help="one long replay: save cost and RSS per minute")
    run_soak.add_argument("--minutes", type=float, default=10.0)
    run_soak.add_argument("--work", type=Path, default=Path("/tmp/sleap-live-fault-soak"))
    run_child = modes.add_parser("child", help="one run on the fake engine (used by the others)")
    run_child.add_argument("log_dir", type=Path)
    run_child.add_argument("--delay", type=float, default=0.005, help="seconds per engine call")
    run_child.add_argument("--slow-save", type=float, default=0.0)
    run_child.add_argument("--slow-start", type=float, default=0.0)
    run_child.add_argument("--real", action="store_true", help="real models (`real_child`)")
    # What follows "--" is the sleap-live command line of `child`.
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    if args.mode == "child":
        if args.real:
            return real_child(args.log_dir, argv[split + 1 :])
        return child(args.log_dir, args.delay, args.slow_save, args.slow_start, argv[split + 1 :])
    args.work.mkdir(parents=True, exist_ok=True)
    if args.mode == "kills":
        ok = kills(args.work, args.kills, args.seed)
    elif args.mode == "real-kills":
        ok = real_kills(args.work, args.model, args.size, args.kills, args.seed)
    else:
        ok = soak(args.work, args.minutes)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
