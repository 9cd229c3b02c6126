"""A GenICam camera (GigE Vision, USB3 Vision) through harvesters, into a sleap-live pipeline.

UNTESTED WITHOUT THE HARDWARE: no GenICam camera was available when this was written.
The acquisition calls follow harvesters 1.4's documented API; the conversion of its
buffers into frames (`frame_from_component`) and of option values (`node_value`) are
tested on fake buffers (tests/stream/test_genicam_example.py), without harvesters.

This is the adapter for any vendor SDK: sleap-live reads frames from any Python
iterable or zero-argument callable through `IteratorSource` (`open_source(frames,
live=True)`). The SDK's loop yields uint8 arrays of shape (H, W), (H, W, 1) or
(H, W, 3) RGB; the source stamps each on the pipeline's clock when it arrives, and
the pipeline reads it in a thread of its own, so a read that blocks (a camera on
external trigger) neither hangs the run nor stops Ctrl-C, and a camera that sends
nothing for the source's read timeout (`open_source(..., read_timeout=S)`; default
the frame interval plus 5 s) ends the run with an error naming it.

Needs harvesters (``pip install harvesters``, not a dependency of sleap-live) and
the camera vendor's GenTL producer, a ``.cti`` file installed with its SDK.

Usage::

    python scripts/genicam_example.py --cti /opt/mvIMPACT_Acquire/lib/x86_64/mvGenTLProducer.cti \\
        --serial 12345678 --set PixelFormat=Mono8 --set ExposureTime=5000 \\
        -m models/single_instance -o session.slp --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from sleap_live.stream import OutputOptions, Pipeline, open_source
from sleap_live.stream.errors import SourceError

# Pixel formats converted here (GenICam's PFNC names) and their bits per sample.
GRAY_FORMATS = {"Mono8": 8, "Mono10": 10, "Mono12": 12, "Mono14": 14, "Mono16": 16}
COLOR_FORMATS = ("RGB8", "BGR8")

# Seconds one wait for a frame lasts before the loop looks at its stop event again.
FETCH_WAIT = 0.2


def frame_from_component(component: Any) -> np.ndarray:
    """One harvesters buffer component as a uint8 frame: (H, W) gray or (H, W, 3) RGB.

    `component` has harvesters' ``data`` (a flat numpy array, valid only while its
    buffer is held), ``width``, ``height`` and ``data_format``. The result is a
    copy, so the buffer can go back to the camera at once. Gray deeper than 8 bits
    is scaled to 8 (its top 8 bits), as the model takes uint8 frames.

    Raises:
        ValueError: a pixel format not converted here (Bayer, packed, YUV), or data
            whose size does not match the frame size.
    """
    pixel_format = str(component.data_format)
    height, width = int(component.height), int(component.width)
    data = np.asarray(component.data)
    if pixel_format in GRAY_FORMATS:
        channels = 1
    elif pixel_format in COLOR_FORMATS:
        channels = 3
    else:
        raise ValueError(
            f"pixel format {pixel_format} is not converted here; set the camera to one of "
            f"{', '.join([*GRAY_FORMATS, *COLOR_FORMATS])} (--set PixelFormat=Mono8)"
        )
    if data.size != height * width * channels:
        raise ValueError(
            f"a {width}x{height} {pixel_format} frame needs {height * width * channels} "
            f"samples, the buffer holds {data.size}"
        )
    image = data.reshape(height, width, channels)
    bits = GRAY_FORMATS.get(pixel_format, 8)
    if bits > 8:
        image = (image.astype(np.uint16) >> (bits - 8)).astype(np.uint8)
    else:
        image = image.astype(np.uint8, copy=True)
    if pixel_format == "BGR8":
        image = np.ascontiguousarray(image[:, :, ::-1])
    return image if channels == 3 else image[:, :, 0]


def node_value(text: str) -> bool | int | float | str:
    """A ``--set NODE=VALUE`` value as the node takes it: a bool, int, float or the text
    (an enumeration entry such as ``Mono8`` or ``Off``)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_settings(items: Sequence[str]) -> dict[str, bool | int | float | str]:
    """``NODE=VALUE`` texts as {node: value}, in order.

    Raises:
        ValueError: an item without ``=`` or a node name.
    """
    settings: dict[str, bool | int | float | str] = {}
    for item in items:
        node, equals, value = item.partition("=")
        if not equals or not node:
            raise ValueError(f"--set: expected NODE=VALUE, got {item!r}")
        settings[node] = node_value(value)
    return settings


def genicam_frames(
    cti: str,
    serial: str | None,
    settings: Mapping[str, bool | int | float | str],
    stop: threading.Event,
    name: str = "genicam",
) -> Iterator[np.ndarray]:
    """Frames from a GenICam camera until `stop` is set: opens it, applies `settings` to
    its node map, starts acquisition, and yields each frame as it arrives.

    Waiting for a frame is left to sleap-live: a camera that sends nothing (on an
    external trigger never given) yields nothing, and the pipeline reports it stalled
    after its read timeout. Acquisition stops and the camera is released when `stop`
    is set or the generator is closed.

    Raises:
        SourceError: the camera cannot be opened or set up, or fails while acquiring,
            naming it (`name`) and harvesters' reason.
    """
    from harvesters.core import Harvester

    harvester = Harvester()
    try:
        harvester.add_file(cti, check_existence=True, check_validity=True)
        harvester.update()
        if not harvester.device_info_list:
            raise SourceError(f"{name}: the GenTL producer {cti} finds no camera")
        acquirer = harvester.create({"serial_number": serial} if serial else 0)
        try:
            node_map = acquirer.remote_device.node_map
            for node, value in settings.items():
                getattr(node_map, node).value = value
            acquirer.start()
            try:
                while not stop.is_set():
                    # Short waits, so that `stop` is seen while the camera is quiet.
                    buffer = acquirer.try_fetch(timeout=FETCH_WAIT)
                    if buffer is None:
                        continue
                    with buffer:
                        frame = frame_from_component(buffer.payload.components[0])
                    yield frame
            finally:
                with contextlib.suppress(Exception):  # the camera may be gone
                    acquirer.stop()
        finally:
            acquirer.destroy()
    except SourceError:
        raise
    except Exception as error:  # harvesters' and the producer's errors, named
        raise SourceError(f"{name}: {type(error).__name__}: {error}") from error
    finally:
        harvester.reset()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cti", required=True, help="the vendor's GenTL producer (.cti)")
    parser.add_argument("--serial", help="the camera's serial number (default: the first)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE=VALUE",
        help="a GenICam feature to set before acquisition, e.g. ExposureTime=5000, Gain=6, "
        "PixelFormat=Mono8, AcquisitionFrameRate=100; repeatable",
    )
    parser.add_argument("--fps", type=float, help="the camera's frame rate, if known")
    parser.add_argument("-m", "--model", action="append", required=True, help="model path")
    parser.add_argument("-o", "--output", help="pose file (.slp, .h5, .nwb, .csv)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.set)
    except ValueError as error:
        parser.error(str(error))
    name = f"genicam:{args.serial or 0}"
    stop = threading.Event()
    frames = genicam_frames(args.cti, args.serial, settings, stop, name)
    try:
        source = open_source(frames, live=True, fps=args.fps, source_id=name)
        with Pipeline(source, args.model, outputs=OutputOptions(output=args.output)) as pipeline:
            pipeline.join(args.seconds)
    finally:
        stop.set()  # the acquisition loop ends and releases the camera
    stats = pipeline.stats
    print(f"{stats.frames_processed} frames, {stats.frames_dropped} dropped, {stats.fps:.1f} fps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
