"""The preview page in a real headless browser (Debian's chromium, driven over the
DevTools protocol through aiohttp's websocket client): it loads, its image updates,
the skeleton is drawn where the poses are, its figures are the pipeline's, and a
browser that goes away mid-run costs the run nothing.

The runs are stepped: a `SteppedSource` releases one frame at a time on a
`FakeClock`, so what the page must show at each step, and the run's figures, do not
depend on the machine's load. Skipped where chromium is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import sleap_io as sio

from sleap_live.engines.types import FramePoses
from sleap_live.stream import OutputOptions, Pipeline
from sleap_live.stream.experiment.overlay import OFF_REGION, ON
from sleap_live.stream.preview import PreviewServer
from tests.browser import CHROMIUM, PATIENCE, Browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs chromium for the browser test (apt-get install chromium)"
    ),
]

SHAPE = (96, 128, 1)
# Two instances, head and tail, of tracks 0 and 1 ("left", "right" in fakes.INFO).
POINTS = np.array([[[24.0, 20.0], [56.0, 40.0]], [[80.0, 60.0], [110.0, 80.0]]], np.float32)
# The page's colours of tracks 0 and 1: sleap-io's palette, as render and overlays draw.
TRACK_COLOURS = [(0, 114, 189), (217, 83, 25)]


@pytest.fixture
def browser(tmp_path):
    opened = Browser(tmp_path / "profile")
    yield opened
    opened.close()


class PosedRunner:
    """The fake runner's checks, with the same two instances on every frame."""

    def __init__(self, fakes) -> None:
        self._runner = fakes.FakeRunner()
        self.info = self._runner.info
        self.device = "cpu"
        self.metadata = None

    def run(self, frames: np.ndarray, *, stream: object = None) -> list[FramePoses]:
        self._runner.run(frames)
        return [
            FramePoses(
                points=POINTS.copy(),
                point_scores=np.full((2, 2), 0.9, np.float32),
                instance_scores=np.full((2,), 0.8, np.float32),
                identities=np.array([0, 1], np.int32),
            )
            for _ in frames
        ]

    def close(self) -> None:
        self._runner.close()


def stepped_run(fakes, tmp_path):
    clock = fakes.FakeClock()
    source = fakes.SteppedSource(clock, shape=SHAPE)
    server = PreviewServer(port=0)
    pipeline = Pipeline(
        source,
        PosedRunner(fakes),
        clock=clock,
        outputs=OutputOptions(output=tmp_path / "poses.slp"),
        warmup=False,
    )
    pipeline.attach(server)
    return clock, source, server, pipeline


def step(fakes, clock, source, pipeline) -> None:
    """Release one frame, let it through, and move the clock one frame interval on."""
    done = pipeline.stats.frames_processed
    source.push()
    fakes.wait_for(lambda: pipeline.stats.frames_processed == done + 1, "the frame")
    clock.advance(1 / 30)


def test_the_page_shows_the_frames_with_the_skeleton_and_the_runs_figures(browser, fakes, tmp_path):
    clock, source, server, pipeline = stepped_run(fakes, tmp_path)
    with pipeline:
        browser.call("Page.navigate", url=server.url)
        # Connected, the page says what it waits for rather than showing an empty canvas.
        waiting = "waiting for the first frame"
        browser.wait(lambda: browser.text("status") == waiting, "the page to connect")
        step(fakes, clock, source, pipeline)
        browser.wait(lambda: browser.text("frame-index") == "0", "frame 0 on the page")
        assert browser.text("status") == "live"
        first = browser.screenshot()

        # The skeleton is drawn where the poses are, in each track's colour.
        for points, colour in zip(POINTS.astype(int), TRACK_COLOURS, strict=True):
            for x, y in points:
                assert browser.canvas_pixel(x, y) == colour
        # Without tracks, instances take the colours in turn.
        assert browser.evaluate("skeletonColour({track: -1}, 1, skeleton.palette)") == "#d95319"
        background = browser.canvas_pixel(100, 10)
        assert max(abs(c - fakes.fill_of(0)) for c in background) <= 3

        step(fakes, clock, source, pipeline)
        browser.wait(lambda: browser.text("frame-index") == "1", "frame 1 on the page")
        assert browser.screenshot() != first
        assert max(abs(c - fakes.fill_of(1)) for c in browser.canvas_pixel(100, 10)) <= 3

        for _ in range(10):
            step(fakes, clock, source, pipeline)
        source.end()
        assert pipeline.join(PATIENCE)
        browser.wait(lambda: browser.text("status") == "run finished", "the run's end")

    stats = pipeline.stats
    assert browser.text("processed") == str(stats.frames_processed) == "12"
    assert browser.text("captured") == str(stats.frames_captured)
    assert browser.text("dropped") == str(stats.frames_dropped)
    assert browser.text("fps") == f"{stats.fps:.1f}"
    assert browser.text("capture-fps") == f"{stats.capture_fps:.1f}"
    assert stats.latency_p50 is not None and stats.latency_p99 is not None
    assert browser.text("latency-p50") == f"{stats.latency_p50 * 1000:.1f} ms"
    assert browser.text("latency-p99") == f"{stats.latency_p99 * 1000:.1f} ms"
    assert browser.text("instances") == "2"
    assert browser.text("frame-index") == "11"
    assert browser.text("legend") == "left right "

    # A run with an experiment: its regions' outlines on the frame, in render's colours
    # (green: a rule reading it is on), and each rule's state beside it.
    browser.evaluate(
        "experiment = {rules: ['r', 's'], regions: ["
        "{name: 'a', shape: 'rectangle', x0: 10, y0: 10, x1: 40, y1: 30, rules: ['r']},"
        "{name: 'b', shape: 'polygon', vertices: [[60, 10], [90, 10], [60, 40]], rules: ['s']}]};"
        "drawRegions(context, experiment.regions, {r: true, s: false});"
        "showRules({r: true, s: false})"
    )
    assert browser.canvas_pixel(10, 20) == ON and browser.canvas_pixel(75, 10) == OFF_REGION
    assert browser.text("rules") == "r s "
    assert browser.evaluate("document.getElementById('rules').children[0].dataset.on") == "true"

    # A segmentation model's mask: its pixels (runs of background and mask, row by row)
    # scaled to the frame's, 4 x 4 each here, filled translucent in its colour.
    before = [browser.canvas_pixel(x, y) for x, y in ((2, 2), (6, 2), (10, 2), (6, 6))]
    browser.evaluate(
        "drawMasks(context, [{rows: 2, columns: 3, scale: [0.25, 0.25], score: 0.9,"
        " runs: [1, 2, 3]}], ['#ff0000'])"
    )
    after = [browser.canvas_pixel(x, y) for x, y in ((2, 2), (6, 2), (10, 2), (6, 6))]
    assert after[0] == before[0] and after[3] == before[3]
    for was, now in zip(before[1:3], after[1:3], strict=True):
        tinted = [0.6 * c + 0.4 * v for c, v in zip(was, (255, 0, 0), strict=True)]
        assert max(abs(c - t) for c, t in zip(now, tinted, strict=True)) <= 2, (was, now)


def test_closing_the_browser_mid_run_costs_the_run_nothing(browser, fakes, tmp_path):
    clock, source, server, pipeline = stepped_run(fakes, tmp_path)
    with pipeline:
        browser.call("Page.navigate", url=server.url)
        for _ in range(5):
            step(fakes, clock, source, pipeline)
        browser.wait(lambda: browser.text("frame-index") == "4", "frame 4 on the page")
        browser.close()
        for _ in range(25):
            step(fakes, clock, source, pipeline)
        source.end()
        assert pipeline.join(PATIENCE)
    stats = pipeline.stats
    assert (stats.frames_processed, stats.frames_dropped) == (30, 0)
    labels = sio.load_slp(str(tmp_path / "poses.slp"), open_videos=False)
    assert [frame.frame_idx for frame in labels] == list(range(30))
