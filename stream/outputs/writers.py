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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sleap_live.engines.runners.base import Runner
from sleap_live.engines.types import POSELESS_FINDINGS
from sleap_live.stream.channel import Channel
from sleap_live.stream.clock import MONOTONIC, Clock
from sleap_live.stream.errors import ChannelClosed, ChannelEmpty
from sleap_live.stream.experiment.experiment import Experiment
from sleap_live.stream.outputs.base import Output
from sleap_live.stream.outputs.guard import check_outputs
from sleap_live.stream.outputs.options import OutputOptions
from sleap_live.stream.outputs.overlay_recorder import OverlayRecorder
from sleap_live.stream.outputs.provenance import run_provenance
from sleap_live.stream.outputs.recorder import RECORD_CODECS, VideoRecorder, timestamps_path
from sleap_live.stream.outputs.recovery import JournalClaim
from sleap_live.stream.outputs.slp import SlpWriter
from sleap_live.stream.sources import Source
from sleap_live.stream.sources.group import SourceGroup, as_group
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
    """Open outputs, each behind its own bounded queue; with several sources, each
    source's outputs take that source's records only.

    The owner runs every loop of `loops` in a thread of its own, feeds records and
    frames with `write`, and calls `close` once nothing more comes: each loop then
    drains its queue, closes its output and returns.

    Args:
        outputs: each output with its queue, by name ("slp", "record", "overlay"; with
            several sources "slp camera:0", ...).
        sources: the source whose records each output takes, by output name; an
            output not named there takes every record.
    """

    def __init__(
        self,
        outputs: Mapping[str, tuple[Channel[QueuedItem], Output]],
        sources: Mapping[str, str] | None = None,
    ) -> None:
        self._outputs = dict(outputs)
        self._sources = dict(sources or {})

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
        """Queue a pose record, with its frame for the outputs that take frames, for the
        outputs of the record's source.

        Waits while a queue is full. An output that already failed is skipped: its
        loop's error reaches the owner through that loop's thread.
        """
        for name, (queue, output) in self._outputs.items():
            if self._sources.get(name, record.source_id) != record.source_id:
                continue  # another source's output
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


def check_poseless_output(output: Path | None, kind: str) -> None:
    """Raises `ValueError` unless the `output` of a model of `kind` (a `POSELESS_FINDINGS`
    key: boxes or masks, no poses) is a .slp (or none)."""
    if output is not None and output.suffix.lower() != ".slp":
        # The analysis HDF5, CSV and NWB files are pose tables with no place for boxes
        # or masks (a box top-down model's poses are written there, its boxes to .slp only).
        what, sio_type = POSELESS_FINDINGS[kind]
        raise ValueError(f"{output}: {what} are written to .slp only ({sio_type})")


def open_outputs(
    options: OutputOptions,
    source: Source | SourceGroup,
    runner: Runner,
    *,
    settings: Mapping[str, Any] | None = None,
    clock: Clock = MONOTONIC,
    tracked: bool = False,
    claim: JournalClaim | None = None,
    experiment: Experiment | None = None,
) -> OpenWriters:
    """Open the writers `options` ask for, for poses of `runner`'s model on `source`.

    Each output is checked first (see `check_outputs`): not the source's file,
    not the other output, in a writable folder. Each is locked while it is open.
    The pose file's provenance is `provenance.run_provenance` of the run, with
    `settings` (the pipeline's) and `options.provenance`. `tracked`: the poses
    carry a tracker's track ids (the overlay colours by track). Each source of a
    group of several (`SourceGroup.per_source`) has files of its own, named after
    it (`OutputOptions.for_source`), and writers named "WRITER SOURCE" ("slp
    camera:0"); the provenance then names every source of the run. `claim`: the
    pose output's journal, claimed before the run (`JournalClaim`), which its
    writer takes; None: the writer opens it (as each source of several does).
    `experiment`: the run's, drawn on the overlay recording's frames.

    Raises:
        ValueError, FileNotFoundError, OutputError: an output path is unusable
            (nothing is left open, nothing is overwritten).
    """
    group = as_group(source)
    if group.per_source:
        settings = {**(settings or {}), "sources": list(group.source_ids)}
    outputs: dict[str, tuple[Channel[QueuedItem], Output]] = {}
    sources: dict[str, str] = {}
    try:
        for member in group.sources:
            own = options.for_source(member.source_id) if group.per_source else options
            # Each source's file of several has a journal of its own, opened by its writer.
            own_claim = None if group.per_source else claim
            for name, opened in _opened(
                own, member, runner, settings or {}, clock, tracked, own_claim, experiment
            ):
                if group.per_source:
                    name = f"{name} {member.source_id}"
                    sources[name] = member.source_id
                outputs[name] = opened
    except BaseException:
        OpenWriters(outputs).abandon()  # those opened before the one that failed
        raise
    return OpenWriters(outputs, sources)


def _opened(
    options: OutputOptions,
    source: Source,
    runner: Runner,
    settings: Mapping[str, Any],
    clock: Clock,
    tracked: bool,
    claim: JournalClaim | None,
    experiment: Experiment | None,
) -> Iterator[tuple[str, tuple[Channel[QueuedItem], Output]]]:
    """`open_outputs` of one source: each output with its queue, by name, as it opens."""
    source_file = Path(source.source_id)
    source_is_file = source_file.is_file()
    check_outputs(
        options.paths(),
        {"source": [source_file] if source_is_file else []},
        overwrite=options.overwrite,
    )
    info = runner.info
    boxes_only = info.model_type == "bbox"
    if info.model_type in POSELESS_FINDINGS:
        check_poseless_output(options.output, info.model_type)
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
            # A detector's class names are its box categories, not identities.
            class_names=() if boxes_only else info.class_names,
            box_categories=info.detector_categories,
            renumber=links_recording,
            save_interval=options.save_interval,
            provenance=run_provenance(
                runner, source_id=source.source_id, settings=settings, extra=extra
            ),
            clock=clock,
            claim=claim,
            tracked=tracked,
            overwrite=options.overwrite,
        )
        yield "slp", (Channel(SLP_QUEUE_CAPACITY), slp)
    if options.record is not None:
        recorder = VideoRecorder(
            options.record,
            source.fps or 30.0,
            source.frame_shape,
            codec=options.record_codec,
            crf=options.record_quality,
            overwrite=options.overwrite,
        )
        yield "record", (Channel(RECORD_QUEUE_CAPACITY), recorder)
    if options.record_overlay is not None:
        overlay = OverlayRecorder(
            options.record_overlay,
            source.fps or 30.0,
            source.frame_shape,
            info.skeleton,
            info.class_names,
            tracked=tracked,
            overwrite=options.overwrite,
            experiment=experiment,
        )
        yield "overlay", (Channel(RECORD_QUEUE_CAPACITY), overlay)


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
