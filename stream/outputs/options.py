"""`OutputOptions`: what a pipeline writes besides its ring buffer, checked when made."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from sleap_live.stream.outputs.exports import check_suffix, sidecars
from sleap_live.stream.outputs.recorder import (
    DEFAULT_RECORD_CODEC,
    check_record_codec,
    check_recording_path,
    timestamps_path,
)
from sleap_live.stream.outputs.slp import DEFAULT_SAVE_INTERVAL
from sleap_live.stream.sources.group import per_source_path


@attrs.frozen
class OutputOptions:
    """What a pipeline writes besides its ring buffer; checked when made, before any work.

    Attributes:
        output: pose file for every pose record (.slp, .h5, .nwb or .csv, see
            `exports`), or None.
        record: video file for the processed frames, or None. The pose file links
            to it (numbering its frames as the recording does) when it is lossless,
            or when the source is not a file (a camera, a stream: there is no other
            picture); otherwise to the source video, with the recording named in
            the provenance.
        record_codec: a key of `RECORD_CODECS` ("ffv1" is the lossless one).
        record_quality: CRF of a lossy codec; None: the codec's default.
        save_interval: most seconds a finished frame waits before it is saved to
            `output`'s journal (what a crash can cost); None saves on close only.
        provenance: entries added to the outputs' provenance (for example
            ``models``: `provenance.model_records` of the model paths).
        record_overlay: video file for the processed frames with their poses drawn
            (`OverlayRecorder`), or None.
        overwrite: replace outputs that exist (``--overwrite``); without it an
            existing output is refused before any work (`output_rule.claim_output`).

    Raises:
        ValueError: an unknown pose suffix, codec, or a quality the codec cannot
            take; a recording path that is no video format.
    """

    output: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    record: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    save_interval: float | None = DEFAULT_SAVE_INTERVAL
    record_codec: str = DEFAULT_RECORD_CODEC
    record_quality: int | None = None
    provenance: Mapping[str, Any] = attrs.field(factory=dict)
    record_overlay: Path | None = attrs.field(
        default=None, converter=attrs.converters.optional(Path)
    )
    overwrite: bool = False

    def __attrs_post_init__(self) -> None:
        if self.output is not None:
            check_suffix(self.output)
        if self.record is not None:
            check_recording_path(self.record)
            check_record_codec(self.record, self.record_codec, self.record_quality)
        if self.record_overlay is not None:
            check_recording_path(self.record_overlay)

    def for_source(self, source_id: str) -> OutputOptions:
        """These options for one source of several: every file named
        ``STEM.SOURCE.SUFFIX`` (see `per_source_path`)."""

        def own(path: Path | None) -> Path | None:
            return None if path is None else per_source_path(path, source_id)

        return attrs.evolve(
            self,
            output=own(self.output),
            record=own(self.record),
            record_overlay=own(self.record_overlay),
        )

    def paths(self) -> dict[str, Path | None]:
        """Every file the outputs write, by the option that names it (for `check_outputs`)."""
        paths: dict[str, Path | None] = {
            "output": self.output,
            "record": self.record,
            "overlay": self.record_overlay,
        }
        if self.output is not None:
            for sidecar in sidecars(self.output):
                paths[f"output ({sidecar.name})"] = sidecar
        if self.record is not None:
            paths["record (its timestamps)"] = timestamps_path(self.record)
        return paths
