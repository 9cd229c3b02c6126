"""A run's outputs opened together: `open_outputs` opens what a pipeline's
`OutputOptions` (`options`) ask for, each output (`SlpWriter` in `slp`,
`VideoRecorder` in `recorder`, `OverlayRecorder`) behind a queue of its own that one
sink thread drains (`OpenWriters.loops`), so a slow save or encode never holds up
the stage that feeds them.

Every output is an `Output` (see `base`), used from one thread, and a context
manager; `close()` is idempotent and leaves a complete, readable file behind, and
each output locks its file while it is open.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.runners.base import Runner
from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty
from sleap_live.stream.outputs.base import Output
from sleap_live.stream.outputs.guard import check_outputs
from sleap_live.stream.outputs.options import OutputOptions
from sleap_live.stream.outputs.overlay_recorder import OverlayRecorder
from sleap_live.stream.outputs.provenance import run_provenance
from sleap_live.stream.outputs.recorder import RECORD_CODECS, VideoRecorder, timestamps_path
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.sources import Source
from sleap_live.stream.sources.group import SourceGroup
from sleap_live.stream.types import PoseRecord

# Pose records are small, so the .slp writer's queue is deep: a journal append
# or the final save does not hold up the stage feeding it.
SLP_QUEUE_CAPACITY = 4096

# Frames waiting for the video recorder; images are large, so keep ~1 s at 30 fps.
RECORD_QUEUE_CAPACITY = 32

# What an output's queue holds: a pose record and its frame (None for an output that
# takes no frames).
QueuedItem = tuple[PoseRecord, "np.ndarray | None"]


class OpenWriters:
    """Open outputs, each behind its own bounded queue.

    The owner runs every loop of `loops` in a thread of its own, feeds records and
    frames with `write`, and calls `close` once nothing more comes: each loop then
    drains its queue, closes its output and returns.

    Args:
        outputs: each output with its queue, by name ("slp", "record", "overlay").
    """

    def __init__(self, outputs: Mapping[str, tuple[Channel[QueuedItem], Output]]):
        self._outputs = dict(outputs)

    @property
    def loops(self) -> dict[str, Callable[[], None]]:
        """One loop per output, by name ("slp", "record"), for the owner's threads."""
        return {
            name: functools.partial(_drain, queue, output)
            for name, (queue, output) in self._outputs.items()
        }

    @property
    def takes_frames(self) -> bool:
        """Whether any output uses the frames (else `write` may be given None)."""
        return any(output.takes_frames for _, output in self._outputs.values())

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Queue a pose record, with its frame for the outputs that take frames.

        Waits while a queue is full. An output that already failed is skipped: its
        loop's error reaches the owner through that loop's thread.
        """
        for queue, output in self._outputs.values():
            try:
                queue.put((record, image if output.takes_frames else None))
            except ChannelClosed:
                pass

    def close(self) -> None:
        """Let every loop finish what is queued and close its output. Idempotent."""
        for queue, _ in self._outputs.values():
            queue.close()

    def depths(self) -> dict[str, int]:
        """Items waiting in each output's queue, by output name."""
        return {name: queue.stats().depth for name, (queue, _) in self._outputs.items()}

    def describe(self) -> list[str]:
        """One line per output saying what it holds now (never more than is on disk)."""
        return [output.describe() for _, output in self._outputs.values()]

    def abandon(self) -> None:
        """Discard outputs whose loops never ran: nothing is written."""
        for _, output in self._outputs.values():
            output.discard()


class SourceWriters:
    """The open writers of several sources: each source's records and frames go to
    that source's own files; otherwise the same as `OpenWriters`.

    Args:
        by_source: each source's writers, by source id.
    """

    def __init__(self, by_source: Mapping[str, OpenWriters]) -> None:
        self._by_source = dict(by_source)

    @property
    def loops(self) -> dict[str, Callable[[], None]]:
        """One loop per writer, named "WRITER SOURCE" ("slp camera:0")."""
        return {
            f"{name} {source}": loop
            for source, writers in self._by_source.items()
            for name, loop in writers.loops.items()
        }

    @property
    def takes_frames(self) -> bool:
        """Whether any output uses the frames (else `write` may be given None)."""
        return any(writers.takes_frames for writers in self._by_source.values())

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Queue a record and its frame for the outputs of the record's source."""
        self._by_source[record.source_id].write(record, image)

    def close(self) -> None:
        for writers in self._by_source.values():
            writers.close()

    def depths(self) -> dict[str, int]:
        return {
            f"{name} {source}": depth
            for source, writers in self._by_source.items()
            for name, depth in writers.depths().items()
        }

    def describe(self) -> list[str]:
        return [line for writers in self._by_source.values() for line in writers.describe()]


def open_outputs(
    options: OutputOptions,
    source: Source,
    runner: Runner,
    *,
    settings: Mapping[str, Any] | None = None,
    clock: Clock = MONOTONIC,
    tracked: bool = False,
) -> OpenWriters:
    """Open the writers `options` ask for, for poses of `runner`'s model on `source`.

    Each output is checked first (see `check_outputs`): not the source's file,
    not the other output, in a writable folder. Each is locked while it is open.
    The pose file's provenance is `provenance.run_provenance` of the run, with
    `settings` (the pipeline's) and `options.provenance`. `tracked`: the poses
    carry a tracker's track ids (the overlay colours by track).

    Raises:
        ValueError, FileNotFoundError, OutputError: an output path is unusable
            (nothing is left open, nothing is overwritten).
    """
    source_file = Path(source.source_id)
    source_is_file = source_file.is_file()
    check_outputs(
        options.paths(),
        {"source": [source_file] if source_is_file else []},
        overwrite=options.overwrite,
    )
    info = runner.info
    recording: dict[str, Any] | None = None
    if options.record is not None:
        lossless = RECORD_CODECS[options.record_codec].lossless
        recording = {
            "path": str(options.record.resolve()),
            "codec": options.record_codec,
            "quality": options.record_quality,
            "lossless": lossless,
            "timestamps": str(timestamps_path(options.record).resolve()),
        }
    # The poses link to the recording only where it is the best picture there is.
    links_recording = recording is not None and (recording["lossless"] or not source_is_file)
    outputs: dict[str, tuple[Channel[QueuedItem], Output]] = {}
    try:
        if options.output is not None:
            extra = {**options.provenance, "recording": recording}
            slp = SlpWriter(
                options.output,
                info.skeleton,
                video=options.record.resolve()
                if links_recording and options.record
                else source.source_id,
                frame_shape=source.frame_shape,
                fps=source.fps,
                n_frames=None if links_recording else source.n_frames,
                class_names=info.class_names,
                renumber=links_recording,
                save_interval=options.save_interval,
                provenance=run_provenance(
                    runner, source_id=source.source_id, settings=settings or {}, extra=extra
                ),
                clock=clock,
                claim=options.claim,
                tracked=tracked,
                overwrite=options.overwrite,
            )
            outputs["slp"] = (Channel(SLP_QUEUE_CAPACITY), slp)
        if options.record is not None:
            recorder = VideoRecorder(
                options.record,
                source.fps or 30.0,
                source.frame_shape,
                codec=options.record_codec,
                crf=options.record_quality,
                overwrite=options.overwrite,
            )
            outputs["record"] = (Channel(RECORD_QUEUE_CAPACITY), recorder)
        if options.record_overlay is not None:
            overlay = OverlayRecorder(
                options.record_overlay,
                source.fps or 30.0,
                source.frame_shape,
                info.skeleton,
                info.class_names,
                tracked=tracked,
                overwrite=options.overwrite,
            )
            outputs["overlay"] = (Channel(RECORD_QUEUE_CAPACITY), overlay)
    except BaseException:
        OpenWriters(outputs).abandon()  # those opened before the one that failed
        raise
    return OpenWriters(outputs)


def open_source_outputs(
    options: OutputOptions,
    group: SourceGroup,
    runner: Runner,
    *,
    settings: Mapping[str, Any] | None = None,
    clock: Clock = MONOTONIC,
    tracked: bool = False,
) -> SourceWriters:
    """`open_outputs` for each source of `group`, its files named after it
    (`OutputOptions.for_source`); the provenance names every source of the run.

    Raises:
        ValueError, FileNotFoundError, OutputError: an output path is unusable (the
            outputs opened before it are closed, none written).
    """
    opened: dict[str, OpenWriters] = {}
    run_settings = {**(settings or {}), "sources": list(group.source_ids)}
    try:
        for source in group.sources:
            opened[source.source_id] = open_outputs(
                options.for_source(source.source_id),
                source,
                runner,
                settings=run_settings,
                clock=clock,
                tracked=tracked,
            )
    except BaseException:
        for writers in opened.values():
            writers.abandon()
        raise
    return SourceWriters(opened)


def _drain(queue: Channel[QueuedItem], output: Output) -> None:
    """Feed `output` from `queue` until it is closed and drained; then close the output.

    Between items, the output saves as soon as a save falls due, so a pause in the
    stream (a stalled camera) never holds finished frames back.
    """
    try:
        while True:
            try:
                record, image = queue.get(output.seconds_until_due())
            except ChannelEmpty:
                if output.seconds_until_due() == 0:
                    output.flush()
                continue
            except ChannelClosed:
                break
            output.write(record, image)
    except BaseException:
        queue.close()  # nothing more is accepted, so the feeding stage never waits on it
        raise
    finally:
        output.close()
