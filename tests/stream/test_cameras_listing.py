"""`sleap-live cameras` and `devices.list_cameras`, with the system's answers faked.

V4L2 nodes are files in a temporary /dev whose queries an injected function answers;
avfoundation's and dshow's listings are FFmpeg log lines as PyAV captures them.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sleap_live import cli
from sleap_live.stream.sources import devices
from sleap_live.stream.sources.devices import CameraControl, CameraDevice, CameraMode, V4l2Node

WEBCAM = V4l2Node(
    "HD Pro Webcam C920",
    True,
    (
        CameraMode("yuyv422", "640x480", (30.0, 15.0)),
        CameraMode("mjpeg", "1920x1080", (30.0, 24.0, 7.5)),
    ),
)
METADATA_NODE = V4l2Node("HD Pro Webcam C920", False, ())


def fake_dev(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).touch()
    return tmp_path


def test_v4l2_lists_capture_nodes_in_number_order_with_their_modes(tmp_path):
    dev = fake_dev(tmp_path, "video10", "video0", "video1", "video2", "videox", "null")
    answers = {"video0": WEBCAM, "video1": METADATA_NODE, "video2": WEBCAM, "video10": WEBCAM}
    cameras = devices.list_cameras("v4l2", dev_root=dev, query_node=lambda p: answers[p.name])
    assert [camera.device for camera in cameras] == [
        str(dev / "video0"),
        str(dev / "video2"),
        str(dev / "video10"),
    ]
    assert cameras[0] == CameraDevice(str(dev / "video0"), WEBCAM.name, "v4l2", WEBCAM.modes)


def test_a_node_that_cannot_be_queried_is_listed_with_the_reason(tmp_path):
    dev = fake_dev(tmp_path, "video0")

    def refuse(path: Path) -> V4l2Node:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    (camera,) = devices.list_cameras("v4l2", dev_root=dev, query_node=refuse)
    assert camera.problem == "cannot query: Permission denied"
    assert devices.describe_cameras([camera])[1] == "  cannot query: Permission denied"


def test_no_v4l2_nodes_lists_nothing(tmp_path):
    assert devices.list_cameras("v4l2", dev_root=tmp_path, query_node=lambda p: WEBCAM) == []


def test_query_of_a_file_that_is_no_device_is_an_os_error(tmp_path):
    # The real linuxpy query on a plain file: V4L2's ioctl is refused, as for a node
    # that is not a camera, and the listing says so rather than failing.
    dev = fake_dev(tmp_path, "video0")
    (camera,) = devices.list_cameras("v4l2", dev_root=dev)
    assert camera.problem is not None and camera.problem.startswith("cannot query")


def test_modes_merge_rates_per_format_and_size():
    modes = devices.modes_from(
        {("mjpeg", "640x480"): [15.0, 30.0, 30.0], ("yuyv422", "160x120 to 640x480"): []}
    )
    assert modes == (
        CameraMode("mjpeg", "640x480", (30.0, 15.0)),
        CameraMode("yuyv422", "160x120 to 640x480", ()),
    )


def test_describe_shows_a_device_then_its_modes_and_controls():
    controls = (CameraControl("brightness", 0, 255), CameraControl("gain", 0, 100))
    camera = CameraDevice("/dev/video0", WEBCAM.name, "v4l2", WEBCAM.modes, controls=controls)
    assert devices.describe_cameras([camera]) == [
        "/dev/video0: HD Pro Webcam C920 (v4l2)",
        "  yuyv422    640x480     30, 15 fps",
        "  mjpeg      1920x1080   30, 24, 7.5 fps",
        "  controls: brightness 0..255, gain 0..100",
    ]


AVFOUNDATION_LOG = [
    "AVFoundation video devices:",
    "[0] FaceTime HD Camera",
    "[1] Capture screen 0",
    "AVFoundation audio devices:",
    "[0] MacBook Pro Microphone",
    "",
]


def test_avfoundation_listing_gives_its_video_devices_by_index():
    cameras = devices.list_cameras("avfoundation", ffmpeg_listing=lambda backend: AVFOUNDATION_LOG)
    assert cameras == [
        CameraDevice("0", "FaceTime HD Camera", "avfoundation"),
        CameraDevice("1", "Capture screen 0", "avfoundation"),
    ]


@pytest.mark.parametrize(
    "log",
    [
        [
            '"Integrated Camera" (video)',
            '  Alternative name "@device_pnp_\\\\?\\usb#vid_04f2"',
            '"Microphone (Realtek Audio)" (audio)',
            '"OBS Virtual Camera" (video)',
        ],
        [  # FFmpeg before 4.4: headings instead of tags
            "DirectShow video devices (some may be both video and audio devices)",
            ' "Integrated Camera"',
            '"OBS Virtual Camera"',
            "DirectShow audio devices",
            ' "Microphone (Realtek Audio)"',
        ],
    ],
)
def test_dshow_listing_gives_video_devices_as_camera_takes_them(log):
    cameras = devices.list_cameras("dshow", ffmpeg_listing=lambda backend: log)
    assert [camera.device for camera in cameras] == [
        "video=Integrated Camera",
        "video=OBS Virtual Camera",
    ]


def test_ffmpeg_listing_on_a_backend_this_ffmpeg_lacks_is_empty_not_an_error():
    # Linux's FFmpeg has no avfoundation: the open fails, the log has no devices.
    assert devices.avfoundation_cameras(devices.ffmpeg_device_listing("avfoundation")) == []


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="cannot list the cameras of 'lavfi'"):
        devices.list_cameras("lavfi")


def test_cli_says_no_cameras_found_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(devices, "list_cameras", lambda backend=None: [])
    assert cli.main(["cameras"]) == 0
    assert capsys.readouterr().out == "no cameras found\n"


def test_cli_lists_cameras_on_stdout(monkeypatch, capsys):
    camera = CameraDevice("/dev/video0", WEBCAM.name, "v4l2", WEBCAM.modes)
    asked = []

    def listing(backend=None):
        asked.append(backend)
        return [camera]

    monkeypatch.setattr(devices, "list_cameras", listing)
    assert cli.main(["cameras", "--backend", "v4l2"]) == 0
    assert capsys.readouterr().out.splitlines() == devices.describe_cameras([camera])
    assert asked == ["v4l2"]


def test_query_reads_modes_through_linuxpy(monkeypatch, tmp_path):
    """`query_v4l2_node` against linuxpy's records, its device faked: discrete sizes with
    their rates, and a format that takes any size in a range."""
    from fractions import Fraction
    from types import SimpleNamespace

    from linuxpy.video import device as v4l2

    def frame_type(pixel_format, width, height, fps):
        rate = Fraction(fps)
        return v4l2.FrameType(None, pixel_format, width, height, rate, rate, rate)

    stepwise = SimpleNamespace(min_width=16, min_height=16, max_width=1280, max_height=960)

    class FakeInfo:
        card = "Arena Camera"
        device_capabilities = v4l2.Capability.VIDEO_CAPTURE | v4l2.Capability.STREAMING
        frame_types = (
            frame_type(v4l2.PixelFormat.MJPEG, 1280, 720, 60),
            frame_type(v4l2.PixelFormat.MJPEG, 1280, 720, 30),
            frame_type(v4l2.PixelFormat.YUYV, 640, 480, 30),
        )

        def buffer_formats(self, buffer_type):
            assert buffer_type == v4l2.BufferType.VIDEO_CAPTURE
            return [
                v4l2.ImageFormat(buffer_type, "Motion-JPEG", 0, v4l2.PixelFormat.MJPEG),
                v4l2.ImageFormat(buffer_type, "Greyscale", 0, v4l2.PixelFormat.GREY),
            ]

        def format_frame_sizes(self, pixel_format):
            if pixel_format == v4l2.PixelFormat.GREY:
                return [v4l2.FrameSize(0, pixel_format, v4l2.FrameSizeType.STEPWISE, stepwise)]
            return [v4l2.FrameSize(0, pixel_format, v4l2.FrameSizeType.DISCRETE, None)]

    opened = []

    class FakeDevice:
        def __init__(self, path):
            opened.append(path)
            self.info = FakeInfo()
            gain = SimpleNamespace(config_name="gain", minimum=0, maximum=100)
            exposure = SimpleNamespace(
                config_name="exposure_time_absolute", minimum=3, maximum=2047
            )
            self.controls = {1: gain, 2: exposure}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(v4l2, "Device", FakeDevice)
    node = devices.query_v4l2_node(tmp_path / "video0")
    assert opened == [tmp_path / "video0"]
    assert node == V4l2Node(
        "Arena Camera",
        True,
        (
            CameraMode("mjpeg", "1280x720", (60.0, 30.0)),
            CameraMode("yuyv422", "640x480", (30.0,)),
            CameraMode("gray", "16x16 to 1280x960", ()),
        ),
        (CameraControl("gain", 0, 100), CameraControl("exposure_time_absolute", 3, 2047)),
    )
