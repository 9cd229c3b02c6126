"""`sleap-live bench --plot`: the figures of one bench run as a PNG chart.

Two panels: the live replay's capture-to-pose latency histogram, with its median,
its 99th percentile and the engine's own median latency marked; and the recorded
pipeline's median time per batch in each stage (decode, stack, engine,
postprocess), with each stage's busy share of the run. matplotlib is an optional
extra (`pip install "sleap-live[plot]"`), imported only here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sleap_live.cli.options import UsageError
from sleap_live.stream.batching import STAGES

EXTRA_HINT = "--plot needs matplotlib, which is not installed (pip install 'sleap-live[plot]')"


def check_plot_option(path: Path) -> None:
    """Refuses a --plot before any measuring: no matplotlib, or not a .png file.

    Raises:
        UsageError: one line saying what is wrong.
    """
    if path.suffix.lower() != ".png":
        raise UsageError(f"--plot {path}: the chart is a PNG; give a file name ending in .png")
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise UsageError(EXTRA_HINT) from error


def write_plot(results: dict[str, Any], path: Path) -> None:
    """Draws `run_bench`'s results (with "live" latencies and a recorded timeline) to `path`."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    live = results["live"]
    timeline = results["recorded"].get("timeline") or {}
    figure, (latency, stages) = plt.subplots(1, 2, figsize=(11, 4))

    latency.hist(live["latencies_ms"], bins=40, color="tab:blue")
    for value, label, style in (
        (live["latency_ms_p50"], "p50", "-"),
        (live["latency_ms_p99"], "p99", "--"),
        (live["engine_ms_p50"], "engine p50", ":"),
    ):
        latency.axvline(value, color="black", linestyle=style, label=f"{label} {value:.1f} ms")
    latency.set_xlabel("capture to pose (ms)")
    latency.set_ylabel("frames")
    latency.set_title(f"live replay at {live['fps']:g} fps, batch 1")
    latency.legend(fontsize=8)

    batch_ms = [timeline.get("batch_ms", {}).get(stage, 0.0) for stage in STAGES]
    bars = stages.barh(list(STAGES), batch_ms, color="tab:orange")
    busy = timeline.get("busy", {})
    stages.bar_label(bars, [f" {busy.get(stage, 0.0):.0%} busy" for stage in STAGES], fontsize=8)
    stages.invert_yaxis()
    stages.set_xlabel("median time per batch (ms)")
    stages.set_title(f"recorded pipeline stages ({results['runner']})")
    stages.margins(x=0.25)

    figure.suptitle(
        f"sleap-live bench: {Path(results['video']).name}, frames {tuple(results['frame_shape'])}",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
