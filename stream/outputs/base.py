"""The `Output` protocol: what a pipeline's writer sink needs of every output.

An output is fed, in emission order, each pose record with its frame; between items
it may have a save falling due; when the run ends it is closed (its file saved) or,
when the run never got to feed it, discarded (nothing written, nothing overwritten).
`SlpWriter`, `VideoRecorder` and `OverlayRecorder` are outputs; so is any object a
user writes with these methods.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import numpy as np

from sleap_live.stream.types import PoseRecord


class Output(Protocol):
    """A writer of a run's results; used from one thread (its sink's).

    Attributes:
        takes_frames: whether `write` uses the frame; outputs that do not are given
            None, so no frame is copied to the host or held in their queue for them.
    """

    takes_frames: bool

    def write(self, record: PoseRecord, image: np.ndarray | None) -> None:
        """Take one pose record and its (H, W, C) uint8 frame (None unless
        `takes_frames`); the record's arrays may be ring views, so copy what is kept."""
        ...

    def seconds_until_due(self) -> float | None:
        """Seconds until what is held must be saved (0: now); None: nothing is due."""
        ...

    def flush(self) -> None:
        """Save what is held now (called once `seconds_until_due` reaches 0)."""
        ...

    def close(self) -> None:
        """Finish and save the output; idempotent."""
        ...

    def discard(self) -> None:
        """Stop without writing the output (for a run that never fed it); idempotent."""
        ...

    def describe(self) -> str:
        """What the output holds now, in one line (never more than is on disk)."""
        ...


_EncodedT = TypeVar("_EncodedT", bound="EncodedOutput")


class EncodedOutput:
    """What the recorders (`VideoRecorder`, `OverlayRecorder`) share as outputs: they
    take frames and encode each as it comes, so nothing waits to be saved; leaving
    ``with`` closes them."""

    takes_frames = True

    def seconds_until_due(self) -> float | None:
        """None: every frame is encoded as it comes, nothing waits to be saved."""
        return None

    def flush(self) -> None:
        """Nothing to do: frames are encoded as they come."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _EncodedT) -> _EncodedT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
