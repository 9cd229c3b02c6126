"""`sleap-live run --experiment` (rehearsal on a file, with the fake runner) and
`sleap-live experiment check`: exit statuses, one line per mistake, the event CSV and
the .slp's events."""

from __future__ import annotations

import csv
from pathlib import Path

import av
import sleap_io as sio

from sleap_live import cli
from sleap_live.stream.experiment.overlay import OFF_RULE, ON

EXPORT = Path(__file__).parents[1] / "data" / "exports" / "single_instance"
MULTI_CLASS = Path(__file__).parents[1] / "data" / "exports" / "multi_class_bottomup"

# The fake runner's animals ("left", "right") have their head at x = frame index, and
# frame i holds i % 3 of them: frames 12, 15, 18, 21 are empty.
ZONE = """
regions:
  zone: {rectangle: [10, -1, 20, 100]}
devices:
  laser: {serial: {port: /dev/does-not-exist}}
rules:
  head_in_zone:
    when: {in_region: {region: zone, node: head}}
    missing: keep
    outputs: [{device: laser, onset: "1\\n", offset: "0\\n"}]
"""


def test_a_rehearsal_logs_events_to_a_csv_and_the_slp(tmp_path, fake_loads, clip, capsys):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(ZONE)
    out = tmp_path / "poses.slp"
    argv = ["run", str(clip), "-m", "m", "-q", "-o", str(out), "--experiment", str(experiment)]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "experiment: 2 onsets and offsets over 40 frames (devices simulated)" in err
    # Empty frames keep the rule on (missing: keep): one bout, frames 10 to 21.
    with open(tmp_path / "poses.events.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(r["kind"], r["frame_index"], r["device"], r["error"]) for r in rows] == [
        ("onset", "10", "laser", ""),
        ("offset", "22", "laser", ""),
    ]
    assert all(float(r["sent_time"]) >= float(r["decision_time"]) for r in rows)
    events = sio.load_slp(str(out), open_videos=False).events
    assert [(e.type.name, e.start_frame, e.end_frame) for e in events] == [("head_in_zone", 10, 21)]
    # The overlay drawn from the .slp's events: the rule's square green in its bout.
    overlay = tmp_path / "overlay.mkv"
    render = ["render", str(out), "-o", str(overlay), "--codec", "ffv1", "--experiment"]
    assert cli.main([*render, str(experiment)]) == 0
    with av.open(str(overlay)) as container:
        images = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert tuple(images[15][6, 6]) == ON and tuple(images[5][6, 6]) == OFF_RULE
    # The log exists: a second run is refused before any work, unless --overwrite.
    out.unlink()
    assert cli.main(argv) != 0
    assert "--experiment events" in capsys.readouterr().err and not out.exists()
    assert cli.main([*argv, "--overwrite"]) == 0


def test_the_live_overlay_draws_the_experiment_as_render_does(
    tmp_path, fake_loads, clip, monkeypatch
):
    """`--record-overlay` with `--experiment`: each frame the same as `render
    --experiment` draws it from the run's .slp (both lossless here, so equal)."""
    from sleap_live.stream.outputs import overlay_writer

    monkeypatch.setitem(overlay_writer.CODECS, "h264", overlay_writer.CODECS["ffv1"])
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(ZONE)
    out, live, after = tmp_path / "poses.slp", tmp_path / "live.mkv", tmp_path / "after.mkv"
    run = ["run", str(clip), "-m", "m", "-q", "-o", str(out), "--record-overlay", str(live)]
    assert cli.main([*run, "--experiment", str(experiment)]) == 0
    assert cli.main(["render", str(out), "-o", str(after), "--experiment", str(experiment)]) == 0
    with av.open(str(live)) as a, av.open(str(after)) as b:
        pairs = [
            (x.to_ndarray(format="rgb24"), y.to_ndarray(format="rgb24"))
            for x, y in zip(a.decode(video=0), b.decode(video=0), strict=True)
        ]
    assert len(pairs) == 40 and all((x == y).all() for x, y in pairs)
    # The rule's square: on over its bout (frames 10 to 21) only.
    assert [tuple(x[6, 6]) == ON for x, _ in pairs] == [10 <= i <= 21 for i in range(40)]


def test_a_run_with_mistakes_in_its_experiment_says_each_and_writes_nothing(
    tmp_path, fake_loads, clip, capsys
):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        ZONE.replace("node: head", "node: nose").replace("device: laser", "device: lamp")
    )
    out = tmp_path / "poses.slp"
    argv = ["run", str(clip), "-m", "m", "-q", "-o", str(out), "--experiment", str(experiment)]
    assert cli.main(argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"sleap-live: error: {experiment}: rules.head_in_zone.outputs: unknown device 'lamp' "
        "(defined: laser)",
        f"sleap-live: error: {experiment}: rules.head_in_zone: unknown node 'nose' "
        "(the model's nodes: head, tail)",
    ]
    assert not out.exists() and not (tmp_path / "poses.events.csv").exists()
    experiment.write_text("rules: {a: {when: {speed: {node: head}}}}\n")
    assert cli.main(argv) == 1
    assert "give below, above or both" in capsys.readouterr().err


def test_experiment_check_exit_statuses(tmp_path, capsys):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "rules:\n  near:\n    when: {distance: {from: {node: nose, animal: red}, "
        "to: {node: tail_base, animal: blue}, below: 30}}\n"
    )
    assert cli.main(["experiment", "check", str(experiment), "-m", str(MULTI_CLASS)]) == 0
    assert "1 rules, sound for this model" in capsys.readouterr().out
    assert cli.main(["experiment", "check", str(experiment), "-m", str(EXPORT)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{experiment}: rules.near: unknown animal 'red': this model has no identities; name "
        "tracks track_0, track_1, ... (with --tracking)",
        f"{experiment}: rules.near: unknown animal 'blue': this model has no identities; name "
        "tracks track_0, track_1, ... (with --tracking)",
    ]
    assert cli.main(["experiment", "check", str(tmp_path / "none.yaml"), "-m", str(EXPORT)]) == 1
    assert "No such file" in capsys.readouterr().out
    assert cli.main(["experiment", "check", str(experiment), "-m", str(tmp_path)]) == 2


def test_a_rehearsal_decides_as_a_replay_at_the_videos_rate(tmp_path, fake_loads, clip):
    """The same file on a recorded run (every frame, as fast as it goes) and on a replay
    paced at 30 fps (a camera's live run): the same events, frame for frame, both
    timed on the video's clock."""
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "regions: {zone: {rectangle: [10, -1, 20, 100]}}\n"
        "rules:\n"
        "  held: {when: {in_region: {region: zone, node: head}}, hold: 0.03}\n"
        "  moving: {when: {speed: {node: tail, above: 20, animal: left}}}\n"
    )

    def events(command: str) -> tuple[list, int]:
        """The command's events and how many frames its .slp holds."""
        out = tmp_path / f"{command}.slp"
        argv = [command, str(clip), "-m", "m", "-q", "-o", str(out), "--overwrite"]
        assert cli.main([*argv, "--experiment", str(experiment)]) == 0
        with open(tmp_path / f"{command}.events.csv") as file:
            log = [(r["rule"], r["kind"], r["frame_index"]) for r in csv.DictReader(file)]
        return log, len(sio.load_slp(str(out), open_videos=False))

    rehearsal, frames = events("run")
    assert frames == 40 and len(rehearsal) >= 4
    # A live run drops the frames it cannot keep up with (the live policy): on a machine
    # too loaded to keep 30 fps the replay is tried again, up to three times in all.
    for _ in range(3):
        live, frames = events("replay")
        if frames == 40:
            break
    assert frames == 40, "the replay never kept up with 30 fps on this machine"
    assert live == rehearsal
