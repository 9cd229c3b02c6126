"""`sleap-live bench`: the front end of `sleap_live.stream.bench`, with a table of the figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sleap_live.cli.bench_plot import check_plot_option, write_plot
from sleap_live.cli.loading import load_runner_for
from sleap_live.cli.options import (
    IN_MEMORY_EXPORT,
    add_cache_options,
    add_command,
    add_decoder_option,
    add_inference_options,
    add_model_options,
    add_overwrite_option,
    add_verify_options,
    check_models,
    count,
    positive_float,
    positive_int,
)
from sleap_live.output_rule import staged_file
from sleap_live.stream.batching import STAGES
from sleap_live.stream.bench import MIN_STEADY_FRAMES, faster_than_engine, run_bench
from sleap_live.stream.outputs.guard import check_outputs


def add_parser(commands: Any) -> None:
    """Adds `bench` to the subcommands of the top-level parser."""
    parser = add_command(
        commands,
        "bench",
        handle,
        description="Measure, with one loaded model: the engine alone on decoded frames; the "
        "recorded pipeline decoding the file (alternating with the engine, medians of "
        "--repeats runs); a live replay's capture-to-pose latency; and resident memory over "
        "a long soak run.",
    )
    parser.add_argument("video", type=Path, metavar="VIDEO", help="video file to measure with")
    add_model_options(
        parser,
        batch_size=8,
        batch_size_help="frames per engine call in the engine, recorded and soak runs",
    )
    add_decoder_option(parser)
    add_verify_options(
        parser, frames_default="frames spread over VIDEO", description=IN_MEMORY_EXPORT
    )
    add_cache_options(parser)
    add_inference_options(parser)
    parser.add_argument(
        "--frames",
        type=positive_int,
        metavar="N",
        help="use the first N frames of VIDEO (default: all of them)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=5,
        metavar="N",
        help="alternating engine and recorded runs; each figure is their median",
    )
    parser.add_argument(
        "--loops",
        type=positive_int,
        metavar="N",
        help="play the frames N times per throughput run "
        f"(default: enough for {MIN_STEADY_FRAMES} frames)",
    )
    parser.add_argument(
        "--live-fps",
        type=positive_float,
        default=30.0,
        metavar="FPS",
        help="replay rate of the live run",
    )
    parser.add_argument(
        "--soak-frames",
        type=count,
        default=20_000,
        metavar="N",
        help="frames of the memory soak run, 0 to skip it",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write every figure to this JSON file (default: none)",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also draw the live latency histogram and the recorded pipeline's time per "
        "stage to this PNG (needs the plot extra: pip install 'sleap-live[plot]') "
        "(default: none)",
    )
    add_overwrite_option(parser, "the --json and --plot files")


def handle(args: argparse.Namespace, console: Console) -> int:
    """Runs the benchmark, prints its table (stdout) and writes --json and --plot."""
    check_models(args)
    if args.plot is not None:
        check_plot_option(args.plot)
    if not args.video.exists():
        raise FileNotFoundError(f"{args.video}: no such file")
    # Before minutes of timing: an existing file is not replaced unasked, nor are
    # the figures lost to a missing folder at the end.
    check_outputs(
        {"--json": args.json, "--plot": args.plot},
        {"VIDEO": [args.video], "-m": [Path(model) for model in args.models]},
        overwrite=args.overwrite,
    )
    runner = load_runner_for(args, console, args.video)
    try:
        figures = run_bench(
            runner,
            args.video,
            frames=args.frames,
            batch_size=args.batch_size,
            repeats=args.repeats,
            loops=args.loops,
            live_fps=args.live_fps,
            soak_frames=args.soak_frames,
            progress=lambda line: console.print(line, highlight=False),
            decoder=args.decoder,
        )
    finally:
        runner.close()
    results = {"models": args.models, **figures}
    Console().print(table(results))
    note = faster_than_engine(results["recorded"])
    if note is not None:
        console.print(note, highlight=False, soft_wrap=True)
    if results["recorded"].get("timeline"):
        Console().print(timeline_table(results["recorded"]["timeline"]))
    if args.json is not None:
        with staged_file(args.json, "--json") as staged:
            staged.write_text(json.dumps(results, indent=2))
    if args.plot is not None:
        with staged_file(args.plot, "--plot") as staged:
            write_plot(results, staged)
    return 0


def table(r: dict[str, Any]) -> Table:
    """The figures of `run_bench` as one two-column table."""
    result = Table(
        title=f"sleap-live bench: {r['runner']} on {r['device']}, frames {tuple(r['frame_shape'])}"
    )
    result.add_column("measure")
    result.add_column("value", justify="right")
    e, rec, live = r["engine"], r["recorded"], r["live"]
    frames = f"{e['frames']} frames ({r['loops']} x {e['frames'] // r['loops']})"
    result.add_row("frames per throughput run", frames)
    result.add_row(f"engine only fps (median of {len(e['fps_runs'])})", f"{e['fps']:.1f}")
    result.add_row(f"recorded pipeline fps (median of {len(rec['fps_runs'])})", f"{rec['fps']:.1f}")
    result.add_row("recorded / engine (median of run pairs)", f"{rec['ratio_to_engine']:.3f}")
    result.add_row("recorded / engine (ratio of medians)", f"{rec['ratio_of_medians']:.3f}")
    result.add_row(
        f"live @ {live['fps']:g} fps: frames / dropped", f"{live['frames']} / {live['dropped']}"
    )
    result.add_row(
        "live latency p50 / p99 (ms)",
        f"{live['latency_ms_p50']:.2f} / {live['latency_ms_p99']:.2f}",
    )
    result.add_row(
        "engine latency p50 / p99 (ms)",
        f"{live['engine_ms_p50']:.2f} / {live['engine_ms_p99']:.2f}",
    )
    result.add_row(
        "added latency p50 / p99 (ms)",
        f"{live['overhead_ms_p50']:.2f} / {live['overhead_ms_p99']:.2f}",
    )
    if "soak" in r:
        s = r["soak"]
        result.add_row("soak frames / fps", f"{s['frames']} / {s['fps']:.1f}")
        result.add_row(
            "soak RSS first / last / growth (MiB)",
            f"{s['rss_mb_first']:.1f} / {s['rss_mb_last']:.1f} / {s['rss_mb_growth']:+.1f}",
        )
    return result


def timeline_table(summary: dict[str, Any]) -> Table:
    """The recorded run's per-stage timeline: the first batches' start-end offsets (ms
    from the first decode) per stage, then each stage's busy share and the overlap."""
    result = Table(
        title="recorded pipeline timeline (ms from the first decode; median run)",
        caption=f"decode ran during {summary['decode_during_engine']:.0%} of the engine's "
        f"busy time; span {summary['span_ms']:.1f} ms",
    )
    result.add_column("batch", justify="right")
    for stage in STAGES:
        result.add_column(stage, justify="right")
    for number, batch in enumerate(summary["batches"]):
        result.add_row(
            str(number), *(f"{batch[stage][0]:.1f}-{batch[stage][1]:.1f}" for stage in STAGES)
        )
    result.add_row("busy", *(f"{summary['busy'][stage]:.0%}" for stage in STAGES))
    return result
