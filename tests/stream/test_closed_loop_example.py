"""scripts/closed_loop_example.py runs end to end (with the fake runner)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import av
import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "closed_loop_example.py"


@pytest.fixture
def example():
    spec = importlib.util.spec_from_file_location("closed_loop_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_triggers_polls_and_reports(example, fakes, monkeypatch, tmp_path, capsys):
    video = tmp_path / "clip.mkv"
    with av.open(str(video), "w") as container:
        stream = container.add_stream("ffv1", rate=30)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "gray"
        for index in range(30):
            image = fakes.frame_image(index, (24, 32, 1))[..., 0]
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="gray")))
        container.mux(stream.encode())
    runners, options_given = [], []

    def load(models, **options):
        runners.append(fakes.FakeRunner())
        options_given.append(options)
        return runners[-1]

    monkeypatch.setattr(example, "load_runner", load)

    assert example.main([str(video), "-m", "model", "--seconds", "5"]) == 0

    out = capsys.readouterr().out
    # Node 0 sits at x = frame index; the trigger region starts at 0.6 * 32 px.
    assert "trigger: frame 20," in out
    assert "30 frames at" in out and "0 dropped" in out
    assert "the callback skipped 0 records" in out
    assert runners[0].closed
    # A model directory's in-memory export would be verified on the video's first frames.
    assert options_given[0]["verify_frames"].shape == (5, 24, 32, 1)
