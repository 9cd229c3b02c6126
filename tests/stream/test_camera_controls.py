"""V4L2 camera controls (--camera-control, `CameraSource(controls=...)`), with linuxpy's
device faked: no camera is attached."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from sleap_live import cli
from sleap_live.cli import camera_options
from sleap_live.stream.errors import SourceError, SourceNotFoundError
from sleap_live.stream.sources import CameraSource
from sleap_live.stream.sources.controls import set_v4l2_controls


class FakeControl:
    """A numeric control that refuses values out of range when not clipping, as linuxpy's."""

    def __init__(self, name: str, minimum: int, maximum: int, log: list) -> None:
        self.config_name, self.minimum, self.maximum = name, minimum, maximum
        self.clipping = True
        self._log = log

    @property
    def value(self):
        raise AssertionError("not read")

    @value.setter
    def value(self, value):
        number = int(value)
        if not self.clipping:
            if number > self.maximum:
                raise ValueError(f"Control {self.config_name}: {number} exceeds allowed maximum")
        self._log.append((self.config_name, number))


class FakeControls(dict):
    def __missing__(self, key):
        for control in self.values():
            if control.config_name == key:
                return control
        raise KeyError(key)


def fake_opener(log: list, opened: list):
    @contextlib.contextmanager
    def open_device(path: str):
        opened.append(path)
        yield SimpleNamespace(
            controls=FakeControls(
                {
                    1: FakeControl("auto_exposure", 0, 3, log),
                    2: FakeControl("exposure_time_absolute", 3, 2047, log),
                    3: FakeControl("gain", 0, 100, log),
                }
            )
        )

    return open_device


def test_controls_are_set_in_the_order_given():
    log, opened = [], []
    controls = {"auto_exposure": "1", "exposure_time_absolute": "100", "gain": "10"}
    set_v4l2_controls("/dev/video0", controls, open_device=fake_opener(log, opened))
    assert opened == ["/dev/video0"]
    assert log == [("auto_exposure", 1), ("exposure_time_absolute", 100), ("gain", 10)]


def test_a_missing_control_names_the_device_and_what_it_has():
    with pytest.raises(SourceError) as info:
        set_v4l2_controls("/dev/video0", {"exposure": "5"}, open_device=fake_opener([], []))
    assert str(info.value) == (
        "/dev/video0: no V4L2 control 'exposure' (it has: auto_exposure, "
        "exposure_time_absolute, gain)"
    )


def test_a_value_out_of_range_is_refused_not_clamped():
    log = []
    with pytest.raises(SourceError, match=r"^/dev/video0: cannot set V4L2 control gain=500: "):
        set_v4l2_controls("/dev/video0", {"gain": "500"}, open_device=fake_opener(log, []))
    assert log == []


def test_a_device_that_cannot_be_opened_is_one_line():
    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    with pytest.raises(SourceError, match=r"^/dev/video0: cannot open it to set controls: Perm"):
        set_v4l2_controls("/dev/video0", {"gain": "1"}, open_device=refuse)


def test_controls_need_a_v4l2_device_node(tmp_path):
    with pytest.raises(ValueError, match="camera controls are set through V4L2"):
        CameraSource("testsrc", backend="lavfi", controls={"gain": "1"})
    with pytest.raises(SourceNotFoundError, match="/dev/video99: no such camera device"):
        CameraSource(99, backend="v4l2", controls={"gain": "1"})


def test_cli_passes_each_cameras_controls_in_order(monkeypatch, fakes, fake_loads):
    given = {}

    def open_source(device, **options):
        given[device] = options.get("controls")
        return fakes.FakeSource(3, source_id=f"camera:{device}", is_live=True)

    monkeypatch.setattr(camera_options, "open_source", open_source)
    argv = ["run", "--camera", "0", "--camera", "1", "-m", "m", "-q", "--no-verify"]
    argv += ["--camera-control", "auto_exposure=1", "--camera-control", "1:gain=20"]
    argv += ["--camera-control", "gain=10"]
    assert cli.main(argv) == 0
    assert given == {
        0: {"auto_exposure": "1", "gain": "10"},
        1: {"auto_exposure": "1", "gain": "20"},
    }


def test_cli_control_mistakes_are_usage_errors(capsys, fake_loads):
    assert cli.main(["run", "v.mp4", "-m", "m", "--camera-control", "gain=1"]) == 2
    assert "--camera-control only apply with --camera" in capsys.readouterr().err
    argv = ["run", "--camera", "0", "-m", "m", "--camera-control", "3:gain=1"]
    assert cli.main(argv) == 2
    assert "--camera-control 3:gain=1: 3 is not a --camera of this run (0)" in (
        capsys.readouterr().err
    )
    assert fake_loads == []
