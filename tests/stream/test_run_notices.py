"""What a one-video run says besides its figures (issue #37): a run in which the
model found no animal on any frame is flagged. Runs use the fake engine."""

from __future__ import annotations

import numpy as np

from sleap_live import cli


def test_a_run_that_finds_no_animal_on_any_frame_says_so(
    clip, tmp_path, monkeypatch, capsys, fakes
):
    from sleap_live.engines.runners import load as runners_load

    class FindsNothing(fakes.FakeRunner):
        """A model that does not fit the video: no instance on any frame."""

        def run(self, frames: np.ndarray, *, stream: object = None):
            super().run(frames, stream=stream)
            return [fakes.poses_for(0) for _ in frames]  # frame 0's poses: none

    monkeypatch.setattr(runners_load, "load_runner", lambda models, **options: FindsNothing())
    argv = ["run", str(clip), "-m", "m", "--no-verify", "-q", "-o", str(tmp_path / "out.slp")]
    assert cli.main(argv) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: the model found no animal in any of the 40 frames" in err
    # A run with animals says nothing of the kind.
    monkeypatch.setattr(runners_load, "load_runner", lambda models, **options: fakes.FakeRunner())
    argv[-1] = str(tmp_path / "found.slp")
    assert cli.main(argv) == 0
    assert "found no animal" not in capsys.readouterr().err


def test_a_lossless_run_stopped_early_does_not_call_its_read_ahead_dropped(fakes, capsys):
    """Issue 37: a lossless `run` stopped by Ctrl-C reported "2 dropped"."""
    from types import SimpleNamespace

    from rich.console import Console

    from sleap_live.cli.run import _summarise

    stats = fakes.pipeline_stats(
        running=False, frames_captured=42, frames_dropped=2, frames_with_instances=40
    )
    pipeline = SimpleNamespace(
        stats=stats, outputs=SimpleNamespace(describe=lambda: []), experiment=None
    )
    _summarise(pipeline, None, Console(stderr=True))
    line = " ".join(capsys.readouterr().err.split())
    assert "stopped with 2 frames decoded ahead, not processed" in line
    assert "dropped" not in line
