"""Graphs specialised to one frame shape, and the check that lets a runner use them.

A sleap-live graph takes any frame size, so the sizes of its resizes and paddings
are computed while it runs, and the passes that would not change the image at
the size it is given (the size matcher at the training frame size, a scale of 1,
a size already a multiple of the stride, a channel conversion the frames do not
need) run anyway. A specialised graph
(`sleap_live.engines.export.exporter.export_graph` with a `frame_shape`)
is made for one (height, width, channels) and leaves them out.

`SpecialisedSessions` runs each frame shape on its own specialised graph, where one is to
be had (`SpecialisedGraphs`, e.g. made from the model directories and kept in the
export cache, see `sleap_live.engines.export.on_demand`), and on the dynamic graph
otherwise. A specialised graph is trusted only after it gave the same outputs as the
dynamic graph, bit for bit, on the first batch of its shape; otherwise that
shape keeps the dynamic graph, with a one-line notice, and the graph is
rejected (a cached one is removed).

Torch-free: the graphs come as bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from sleap_live.engines.errors import EngineError
from sleap_live.engines.notify import Notify

# (height, width, channels) of the frames a graph is specialised to.
FrameShape = tuple[int, int, int]
Outputs = dict[str, np.ndarray]
# Frame shapes that get a specialised graph of their own; later ones run the dynamic graph.
DEFAULT_MAX_SHAPES = 4


class SpecialisedGraphs(Protocol):
    """Where specialised graphs come from (`sleap_live.engines.export.on_demand`)."""

    def graph(self, shape: FrameShape) -> bytes | None:
        """The graph specialised to frames of `shape`, or None when there is none to be had.

        Raises:
            EngineError: making it failed (the shape then runs the dynamic graph).
        """

    def reject(self, shape: FrameShape, reason: str) -> None:
        """Told that the graph `graph(shape)` gave did not check out, and why."""


def differing_output(
    expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]
) -> str | None:
    """The first output whose dtype, shape or any bit differs (NaNs equal), or None."""
    for name, value in expected.items():
        other = got.get(name)
        if other is None:
            return name
        if other.dtype != value.dtype or other.shape != value.shape:
            return name
        if not np.array_equal(value, other, equal_nan=value.dtype.kind == "f"):
            return name
    return None


class SpecialisedSessions:
    """Runs each frame shape on its checked specialised graph, else on the dynamic graph.

    Args:
        dynamic: the ONNX Runtime session of the dynamic graph.
        graphs: where the specialised graphs come from.
        make_session: a session of a graph's bytes (the runner's options).
        notify: told, in one line, when a shape keeps the dynamic graph and why.
        max_shapes: frame shapes that get a specialised graph.
    """

    def __init__(
        self,
        dynamic: Any,
        graphs: SpecialisedGraphs,
        make_session: Callable[[bytes], Any],
        notify: Notify,
        max_shapes: int = DEFAULT_MAX_SHAPES,
    ) -> None:
        self._dynamic = dynamic
        self._graphs = graphs
        self._make_session = make_session
        self._notify = notify
        self._max_shapes = max_shapes
        self._chosen: dict[FrameShape, Any] = {}

    def session_for(self, shape: FrameShape) -> Any:
        """The session for frames of `shape`: the dynamic one until a specialised one checks out."""
        return self._chosen.get(shape, self._dynamic)

    def run(self, frames: np.ndarray) -> Outputs:
        """The graph's outputs for a uint8 (B, H, W, C) batch, by name."""
        shape: FrameShape = (int(frames.shape[1]), int(frames.shape[2]), int(frames.shape[3]))
        chosen = self._chosen.get(shape)
        if chosen is not None:
            return _run(chosen, frames)
        outputs = _run(self._dynamic, frames)
        self._chosen[shape] = self._dynamic
        if len(self._chosen) <= self._max_shapes:
            specialised = self._checked_specialised(shape, frames, outputs)
            if specialised is not None:
                self._chosen[shape] = specialised
        return outputs

    def _checked_specialised(self, shape: FrameShape, frames: np.ndarray, expected: Outputs) -> Any:
        """The specialised graph's session for `shape` if it has one that matches `expected`."""
        size = f"{shape[1]}x{shape[0]}x{shape[2]} frames"
        try:
            graph = self._graphs.graph(shape)
            if graph is None:
                return None
            session = self._make_session(graph)
            got = _run(session, frames)
        except EngineError as error:
            self._notify(f"no graph specialised to {size} ({error}); running the dynamic graph")
            return None
        difference = differing_output(expected, got)
        if difference is None:
            return session
        reason = f"its output {difference!r} differs from the dynamic graph's"
        self._graphs.reject(shape, reason)
        self._notify(f"the graph specialised to {size} is not used: {reason}")
        return None


def _run(session: Any, frames: np.ndarray) -> Outputs:
    names = [output.name for output in session.get_outputs()]
    (graph_input,) = session.get_inputs()
    return dict(zip(names, session.run(None, {graph_input.name: frames}), strict=True))
