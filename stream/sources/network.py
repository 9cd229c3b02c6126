"""Live streams read from a URL with PyAV: RTSP cameras, HTTP(S) streams, UDP, RTP, SRT.

A network stream is read like a camera (`CameraSource`): frames are stamped when
they arrive, the live policy drops what inference cannot keep up with, and it has
no end of its own. Only these URL schemes are read as streams; any other
``scheme://`` is refused, so a URL is never mistaken for a file name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import av
import av.error

from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import SourceError
from sleap_live.stream.sources import _av
from sleap_live.stream.sources._base import SourceBase
from sleap_live.stream.sources.camera import CameraSource

URL_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "rtp", "srt")
# Seconds to wait for a stream to answer when it is opened, and for each read.
DEFAULT_TIMEOUT = 10.0


def url_scheme(spec: Any) -> str | None:
    """The scheme of `spec` if it is a str of the form ``scheme://...``, else None."""
    if not isinstance(spec, str):
        return None
    scheme, separator, _ = spec.partition("://")
    # One letter is a Windows drive ("C://videos"), not a scheme.
    if not separator or len(scheme) < 2 or not scheme.isascii():
        return None
    if not scheme.replace("+", "").isalnum():
        return None
    return scheme.lower()


def is_url(spec: Any) -> bool:
    """Whether `spec` is a str URL of a scheme read as a stream (`URL_SCHEMES`).

    Raises:
        ValueError: `spec` is a URL of another scheme.
    """
    scheme = url_scheme(spec)
    if scheme is None:
        return False
    if scheme not in URL_SCHEMES:
        raise ValueError(
            f"{spec}: {scheme}:// is not a stream sleap-live reads "
            f"(streams: {', '.join(f'{name}://' for name in URL_SCHEMES)}; files: a path)"
        )
    return True


class NetworkSource(CameraSource):
    """Frames of a live stream at a URL (see the module docstring).

    Args:
        url: the stream, e.g. ``"rtsp://192.168.1.20:554/stream1"``.
        options: FFmpeg options for the protocol or demuxer, e.g.
            ``{"rtsp_transport": "tcp"}``.
        timeout: seconds to wait for the stream to answer when it is opened and on
            each read; a stream silent that long ends with `SourceError`.
        source_id: name stamped on every frame; defaults to the URL.
        clock: what frames are stamped with.
        bit_depth: bits per sample the stream's data uses (see `CameraSource`).
        read_timeout: most seconds a frame may take before a pipeline reports the
            stream stalled (see `CameraSource`).

    Raises:
        ValueError: `url` is not a URL of one of `URL_SCHEMES`.
        SourceError: the stream cannot be opened (refused, timed out, no video).
    """

    def __init__(
        self,
        url: str,
        *,
        options: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        source_id: str | None = None,
        clock: Clock = MONOTONIC,
        bit_depth: int | None = None,
        read_timeout: float | None = None,
    ) -> None:
        if not is_url(url):
            raise ValueError(f"{url!r} is not a stream URL ({', '.join(URL_SCHEMES)})")
        self._clock = clock
        self.backend = url_scheme(url) or ""
        self.device = os.fspath(url)
        SourceBase.__init__(self, source_id if source_id is not None else url, read_timeout)
        try:
            self._container = _av.open_input(url, options=options, timeout=timeout)
        except av.error.FFmpegError as error:
            raise SourceError(f"{url}: cannot open stream: {_av.reason(error)}") from error
        self._adopt_stream(None, bit_depth)
