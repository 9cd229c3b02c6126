"""`export --format web` in a real headless browser (Debian's chromium, as the preview's
browser test): the exported folder, served by `serve-web`'s server, runs the model on
onnxruntime-web's wasm through the page's own code (`sleapLive.processRgba`, the step
every video and webcam frame takes), and its poses match ONNX Runtime's on the same
frames of the fixture video within 1e-3 px. The skeleton is drawn where the animal
is, and a screenshot is kept (`build/test-artifacts/web_export.png`).

One export and one browser, in one test (a second would start its own on another xdist
worker). The page also plays a chosen video file (demo.mp4, H.264) to its end. Skipped
where chromium or npm (the source of onnxruntime-web) is not installed; the runtime
is installed once into `build/web-runtime` (git ignores build/) and reused.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sleap_live.engines.export import export_model
from sleap_live.engines.export.web_runtime import RUNTIME_ENV, onnxruntime_web_dist
from sleap_live.engines.host.frames import convert_channels
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import read_onnx_metadata
from sleap_live.engines.ort_options import session_options
from sleap_live.stream.runner import first_frames
from tests.browser import CHROMIUM, Browser
from tests.engines.goldens import DATA

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "test-artifacts"
MODEL = DATA / "models" / "single_instance"
VIDEO = DATA / "videos" / "single.mkv"
FRAMES = 3  # a few frames: the page's code is the same on every one
TOLERANCE_PX = 1e-3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs chromium for the browser test (apt-get install chromium)"
    ),
    pytest.mark.skipif(
        shutil.which("npm") is None, reason="needs npm for onnxruntime-web (apt-get install npm)"
    ),
]


@pytest.fixture(scope="module")
def web_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single-instance model's web export, made once."""
    from filelock import FileLock

    runtime = REPO / "build" / "web-runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    with FileLock(runtime / "install.lock"):  # xdist workers share the one install
        dist = onnxruntime_web_dist(runtime)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RUNTIME_ENV, str(dist))
        return export_model(
            MODEL,
            tmp_path_factory.mktemp("web") / "site",
            format="web",
            verify=False,
            frame_sizes=[first_frames(VIDEO, 1).shape[1:3]],
        )


@pytest.fixture(scope="module")
def page(web_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """The export served on 127.0.0.1 and opened on wasm, its model loaded."""
    from sleap_live.cli.serve_web import web_server

    server = web_server(web_folder, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    browser = Browser(tmp_path_factory.mktemp("profile"))
    try:
        port = server.server_address[1]
        browser.call("Page.navigate", url=f"http://127.0.0.1:{port}/?backend=wasm")
        browser.wait(lambda: browser.evaluate("typeof window.sleapLive") == "object", "the page")
        assert browser.awaited("window.sleapLive.ready") == "wasm"
        yield browser
    finally:
        browser.close()
        server.shutdown()
        server.server_close()


def rgb_frames() -> np.ndarray:
    """The fixture video's first frames as RGB, as a browser's canvas holds them."""
    return convert_channels(first_frames(VIDEO, FRAMES), 3)


def page_instances(page: Browser, frame: np.ndarray, index: int) -> list[dict]:
    """One RGB frame through the page; the instances it returns (and draws)."""
    height, width, _ = frame.shape
    rgba = np.concatenate([frame, np.full((height, width, 1), 255, np.uint8)], axis=2)
    encoded = base64.b64encode(rgba.tobytes()).decode()
    return page.awaited(f"window.sleapLive.processRgba('{encoded}', {width}, {height}, {index})")


def test_the_page_matches_onnx_runtime_draws_offers_the_poses_and_plays_files(web_folder, page):
    import onnxruntime as ort

    model_path = web_folder / "model.onnx"
    metadata = read_onnx_metadata(model_path)
    session = ort.InferenceSession(
        str(model_path), session_options(), providers=["CPUExecutionProvider"]
    )
    channels = metadata.info.input_channels
    worst = 0.0
    compared = 0
    for index, frame in enumerate(rgb_frames()):
        # The host's side: the same frame, converted as sleap-live converts it.
        batch = convert_channels(frame[None], channels)
        ran = session.run(None, {"frames": batch})
        outputs = dict(zip(metadata.output_names, ran, strict=True))
        expected = decode(metadata.info, outputs, 1)[0]
        found = page_instances(page, frame, index)
        assert len(found) == len(expected.points) >= 1, f"frame {index}"
        for instance, points, scores in zip(
            found, expected.points, expected.point_scores, strict=True
        ):
            got = np.array(
                [[np.nan, np.nan] if p is None else p for p in instance["points"]], np.float64
            )
            assert np.array_equal(np.isnan(got), np.isnan(points)), f"frame {index}"
            found_nodes = ~np.isnan(points[:, 0])
            worst = max(worst, float(np.abs(got - points)[found_nodes].max()))
            got_scores = np.array([np.nan if s is None else s for s in instance["point_scores"]])
            np.testing.assert_allclose(got_scores[found_nodes], scores[found_nodes], atol=1e-4)
            compared += int(found_nodes.sum())
    assert compared > 0
    assert worst <= TOLERANCE_PX, f"largest difference from ONNX Runtime: {worst:.3g} px"

    # The last frame is on the canvas with its skeleton, in the first palette colour.
    colour = json.loads((web_folder / "model.json").read_text())["palette"][0]
    rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    last = found[0]["points"]
    drawn = [page.canvas_pixel(round(x), round(y)) for x, y in filter(None, last)]
    assert drawn and all(pixel == rgb for pixel in drawn)
    assert page.text("frames-kept") == str(FRAMES)
    assert page.text("backend") == "wasm"

    # The screenshot: kept as an artifact, and the skeleton's colour is where the animal is.
    from PIL import Image

    png = page.screenshot()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "web_export.png").write_bytes(png)
    shot = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    box = page.evaluate(
        "(() => { const r = document.getElementById('view').getBoundingClientRect();"
        " return [r.left, r.top, r.width / view.width, r.height / view.height]; })()"
    )
    left, top, scale_x, scale_y = box
    hits = 0
    for x, y in filter(None, last):
        column, row = int(left + x * scale_x), int(top + y * scale_y)
        if np.abs(shot[row, column] - np.array(rgb)).max() <= 12:
            hits += 1
    assert hits >= 1, "no skeleton pixel where the animal is in the screenshot"

    # A frame of a size the export has no graph for: one line naming the option.
    with pytest.raises(AssertionError, match=r"these frames are 10x12 \(HxW\).*--frame-size 10x12"):
        page_instances(page, np.zeros((10, 12, 3), np.uint8), FRAMES)

    # The downloads hold the frames it kept.
    poses = page.evaluate("JSON.parse(window.sleapLive.posesJson())")
    assert [frame["frame"] for frame in poses["frames"]] == list(range(FRAMES))
    nodes = poses["nodes"]
    csv = page.evaluate("window.sleapLive.posesCsv()").splitlines()
    assert csv[0].split(",")[:4] == ["frame", "time", "instance", "score"]
    assert len(csv[0].split(",")) == 4 + 3 * len(nodes)
    assert len(csv) > 1

    plays_a_chosen_video_file(page)


def plays_a_chosen_video_file(page: Browser) -> None:
    """The page's video path on demo.mp4 (a second test would start a second browser
    on another xdist worker)."""
    # demo.mp4 (H.264, 150 frames at 30 fps, 200x168) as a user would choose it: played
    # in real time, newest frame first, to its end.
    kept = int(page.text("frames-kept"))
    # Stopped at once: its play() is cut short by the pause (an AbortError), which the
    # page expects; nothing is left unhandled (issue 37: an uncaught AbortError).
    page.evaluate(
        "window.rejected = []; window.addEventListener('unhandledrejection',"
        " (event) => window.rejected.push(String(event.reason)))"
    )
    page.choose_file("file", DATA / "videos" / "demo.mp4")
    page.evaluate("document.getElementById('stop').click()")
    page.evaluate("document.getElementById('file').value = ''")  # the same file again
    page.choose_file("file", DATA / "videos" / "demo.mp4")
    page.wait(lambda: page.text("status") == "demo.mp4: ended", "the end of demo.mp4")
    assert page.evaluate("window.rejected") == []
    # Where in the video the last processed frame is (demo.mp4 lasts 5 s), and how many
    # frames the page processed: the frames kept.
    assert float(page.text("video-time")) > 4.0
    assert page.text("frame-index") != "0" and "went by unprocessed" in page.evaluate(
        "document.body.textContent"
    )
    poses = page.evaluate("JSON.parse(window.sleapLive.posesJson())")["frames"][kept:]
    assert len(poses) >= 10, "fewer than 10 of its 150 frames went through the model"
    assert sum(len(frame["instances"]) for frame in poses) >= len(poses) // 2
    assert page.text("backend") == "wasm"
    assert float(page.text("fps")) >= 0
