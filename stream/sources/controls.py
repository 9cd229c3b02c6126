"""V4L2 camera controls (exposure, gain, white balance...), set through linuxpy.

FFmpeg's v4l2 device negotiates the capture format only; the camera's controls are
separate V4L2 settings that stay on the device between opens. `set_v4l2_controls`
sets them, in the order given (``auto_exposure=1`` before ``exposure_time_absolute``),
before FFmpeg opens the camera. Names are linuxpy's, which are v4l2-ctl's
(``v4l2-ctl -d /dev/video0 -L`` lists them, and so does `sleap-live cameras`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from sleap_live.stream.errors import SourceError


def set_v4l2_controls(
    device: str,
    controls: Mapping[str, str],
    *,
    open_device: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None,
) -> None:
    """Set `controls` ({name: value}) on the V4L2 `device`, in order.

    A value out of the control's range is refused rather than clamped.

    Args:
        device: the device node (``/dev/video0``).
        controls: control names and values as text (``"100"``, ``"true"``, a menu index).
        open_device: opens the device as a linuxpy ``Device`` (injectable for tests).

    Raises:
        SourceError: the device cannot be opened, has no such control, or refuses a
            value; naming the device and the control.
    """
    opener = open_device or _linuxpy_device
    try:
        with opener(device) as handle:
            for name, value in controls.items():
                _set(handle.controls, device, name, value)
    except SourceError:
        raise
    except OSError as error:
        raise SourceError(
            f"{device}: cannot open it to set controls: {error.strerror or error}"
        ) from error


def _set(available: Any, device: str, name: str, value: str) -> None:
    try:
        control = available[name]
    except KeyError:
        names = sorted(
            str(control.config_name)
            for control in available.values()
            if hasattr(control, "config_name")
        )
        raise SourceError(
            f"{device}: no V4L2 control {name!r} (it has: {', '.join(names) or 'none'})"
        ) from None
    if hasattr(control, "clipping"):
        control.clipping = False
    try:
        control.value = value
    except (ValueError, TypeError, AttributeError, OSError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise SourceError(f"{device}: cannot set V4L2 control {name}={value}: {reason}") from None


def _linuxpy_device(device: str) -> contextlib.AbstractContextManager[Any]:
    from linuxpy.video.device import Device

    return Device(device)
