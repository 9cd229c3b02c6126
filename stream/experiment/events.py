"""The event log of an experiment: each rule's onsets and offsets with their times.

Every transition is an `EventEntry`: its rule, kind, frame, trial, and the frame's
capture time, the time its poses left the engine (ready), the decision's time and,
per device, the time its bytes were written. All times are on the pipeline's clock
(seconds; `time.monotonic` unless another is given).

The log is journaled as a CSV (`EVENT_COLUMNS`, one row per transition and device,
or one row with no device for a rule without outputs), each row written and flushed
as soon as it is complete, so a kill loses at most the rows of the messages still
in flight. When the run ends, the onset/offset pairs go into a .slp pose file as sleap-io events
(`Labels.events`: a `PredictedEvent` per time a rule was on, its `EventType` named
after the rule, the times in its metadata), or into an .nwb pose file as a
`TimeIntervals` table (`NWB_TABLE`).
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import attrs

from sleap_live.stream.experiment.devices import Decision, OutputMessage

logger = logging.getLogger(__name__)

# A `Decision`'s fields, then one device's send.
EVENT_COLUMNS = (
    *(field.name for field in attrs.fields(Decision)),
    "device",
    "sent_time",
    "capture_to_sent_ms",
    "error",
)


# A `Decision`'s times, as the .slp events' metadata and the NWB table name them.
_TIMES = ("capture_time", "ready_time", "decision_time")


@attrs.frozen
class EventEntry(Decision):
    """One transition of one rule (a `Decision`, and):

    Attributes:
        number: its position in the log.
        subject: the animal the rule names, if it names one.
        at_end: an offset because the run ended (the rule was on up to its frame).
        sent: per device, when its bytes were written (None: not sent) and why not.
    """

    number: int
    subject: str | None = None
    at_end: bool = False
    sent: dict[str, tuple[float | None, str | None]] = attrs.field(factory=dict)


class EventLog:
    """The run's transitions, in memory and journaled to a CSV.

    Args:
        csv_path: the CSV to journal to; None: in memory only.
        overwrite: replace an existing CSV (otherwise it is refused, FileExistsError).
    """

    def __init__(self, csv_path: Path | None = None, *, overwrite: bool = False) -> None:
        self.csv_path = csv_path
        self.entries: list[EventEntry] = []
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._writer: Any = None
        if csv_path is not None:
            self._file = open(csv_path, "w" if overwrite else "x", newline="")
            self._writer = csv.writer(self._file)
            self._writer.writerow(EVENT_COLUMNS)
            self._file.flush()

    def add(self, entry: EventEntry, devices: int) -> None:
        """Log a transition; with no devices, its row is complete now."""
        with self._lock:
            self.entries.append(entry)
            if devices == 0:
                self._row(entry, "", None, None)

    def sent(
        self, device: str, message: OutputMessage, time: float | None, error: str | None
    ) -> None:
        """A device sent (or could not send) a transition's message: its row."""
        with self._lock:
            entry = self.entries[message.event]
            entry.sent[device] = (time, error)
            self._row(entry, device, time, error)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _row(self, entry: EventEntry, device: str, time: float | None, error: str | None) -> None:
        if self._writer is None or self._file is None:
            return
        self._writer.writerow(
            (
                entry.rule,
                entry.kind,
                entry.frame_index,
                "" if entry.trial is None else entry.trial,
                *(repr(getattr(entry, name)) for name in _TIMES),
                device,
                "" if time is None else repr(time),
                "" if time is None else f"{(time - entry.capture_time) * 1000:.3f}",
                error or "",
            )
        )
        self._file.flush()


def bouts(entries: list[EventEntry]) -> list[tuple[EventEntry, EventEntry | None]]:
    """Each onset with the offset that ended it (None: still on), in onset order."""
    # Each rule's onset still on, as its position in `found`.
    open_onsets: dict[str, int] = {}
    found: list[tuple[EventEntry, EventEntry | None]] = []
    for entry in entries:
        if entry.kind == "onset":
            open_onsets[entry.rule] = len(found)
            found.append((entry, None))
        elif entry.rule in open_onsets:
            at = open_onsets.pop(entry.rule)
            found[at] = (found[at][0], entry)
    return found


def _end_frame(onset: EventEntry, offset: EventEntry | None) -> int:
    """The last frame a bout was on (inclusive)."""
    if offset is None:
        return onset.frame_index
    if offset.at_end:
        return offset.frame_index
    return max(onset.frame_index, offset.frame_index - 1)


def sleap_events(entries: list[EventEntry], video: Any, tracks: list[Any]) -> list[Any]:
    """The log as sleap-io `PredictedEvent`s: one per bout of a rule, from its onset's
    frame to the last frame it was on, with an `EventType` per rule and the times in
    the metadata (seconds, as text; ``onset_sent_time_<device>`` per device)."""
    from sleap_io.model.event import EventType, PredictedEvent

    types: dict[str, Any] = {}
    by_name = {track.name: track for track in tracks}
    events = []
    for onset, offset in bouts(entries):
        end = _end_frame(onset, offset)
        metadata: dict[str, str] = {}
        for entry in (onset, offset):
            if entry is None:
                continue
            metadata[f"{entry.kind}_frame"] = str(entry.frame_index)
            for name in _TIMES:
                metadata[f"{entry.kind}_{name}"] = repr(getattr(entry, name))
            for device, (time, _) in entry.sent.items():
                if time is not None:
                    metadata[f"{entry.kind}_sent_time_{device}"] = repr(time)
        if onset.trial is not None:
            metadata["trial"] = str(onset.trial)
        event_type = types.setdefault(onset.rule, EventType(name=onset.rule))
        events.append(
            PredictedEvent(
                type=event_type,
                video=video,
                start_frame=onset.frame_index,
                end_frame=end,
                subject=by_name.get(onset.subject) if onset.subject else None,
                source="sleap-live experiment",
                metadata=metadata,
            )
        )
    return events


def write_slp_events(slp: Path, entries: list[EventEntry]) -> int:
    """Add the log's events to a finished .slp (a copy written and renamed into place,
    so the file is whole whatever happens); returns the events written."""
    import sleap_io as sio
    from sleap_io.io.slp import write_event_types, write_events

    labels = sio.load_slp(str(slp), lazy=True)
    events = sleap_events(entries, labels.videos[0], list(labels.tracks))
    if not events:
        return 0
    types = list({id(event.type): event.type for event in events}.values())
    with _rewritten(slp) as partial:
        write_event_types(str(partial), types)
        write_events(str(partial), events, labels.videos, types, labels.tracks, labels.identities)
    return len(events)


# The NWB table of an experiment's bouts (`write_nwb_events`).
NWB_TABLE = "experiment_events"


def write_nwb_events(nwb: Path, entries: list[EventEntry], fps: float | None) -> int:
    """Add the log's bouts to a finished .nwb pose file as a `TimeIntervals` table,
    `NWB_TABLE` (a copy written and renamed into place); returns the rows written.

    Each row is a time a rule was on: start and stop in seconds on the poses' clock
    (frame index over `fps`, as the pose series are timed; the frame index without
    one), the rule, its frames and trial, and the onset's and offset's capture,
    ready, decision and first device's sent times (NaN where there is none).
    """
    import pynwb
    from pynwb import NWBHDF5IO

    TimeIntervals = pynwb.epoch.TimeIntervals

    found = bouts(entries)
    if not found:
        return 0
    rate = fps or 1.0
    table = TimeIntervals(
        name=NWB_TABLE, description="sleap-live experiment: when each rule was on"
    )
    columns = {
        "rule": "the rule's name",
        "start_frame": "the onset's frame",
        "end_frame": "the last frame it was on",
        "trial": "the trial (-1: none)",
    }
    for kind in ("onset", "offset"):
        for name in (*_TIMES, "sent_time"):
            columns[f"{kind}_{name}"] = f"the {kind}'s {name.replace('_', ' ')} (s, NaN: none)"
    for name, description in columns.items():
        table.add_column(name=name, description=description)
    for onset, offset in found:
        end = _end_frame(onset, offset)
        row: dict[str, Any] = {
            "start_time": onset.frame_index / rate,
            "stop_time": (end + 1) / rate,
            "rule": onset.rule,
            "start_frame": onset.frame_index,
            "end_frame": end,
            "trial": -1 if onset.trial is None else onset.trial,
        }
        for kind, entry in (("onset", onset), ("offset", offset)):
            sent = [] if entry is None else [t for t, _ in entry.sent.values() if t is not None]
            for name in _TIMES:
                row[f"{kind}_{name}"] = math.nan if entry is None else getattr(entry, name)
            row[f"{kind}_sent_time"] = min(sent) if sent else math.nan
        table.add_row(**row)
    with _rewritten(nwb) as partial, NWBHDF5IO(str(partial), "a") as io:
        nwbfile = io.read()
        nwbfile.add_time_intervals(table)
        io.write(nwbfile)
    return len(found)


@contextlib.contextmanager
def _rewritten(path: Path) -> Iterator[Path]:
    """A copy of `path` to change, renamed into its place once changed (so the file is
    whole whatever happens)."""
    partial = path.with_name(path.name + ".events.partial")
    shutil.copyfile(path, partial)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
