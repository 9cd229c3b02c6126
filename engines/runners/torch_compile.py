"""The torch.compile engine: each batch shape's specialised graph compiled by inductor.

`TorchCompileRunner` runs an inference model as specialised graphs
(`sleap_live.engines.graph.specialised`), one per frame shape and batch size, each
compiled whole by `torch.compile` (inductor, `fullgraph=True`, static shapes)
the first time a batch of its shape comes, with a one-line status while it
compiles. A batch smaller than one compiled for its frame shape (the last batch of
a video) runs on that graph, padded with black frames whose outputs are dropped,
rather than waiting for another compilation. On a CUDA device the default mode
is "reduce-overhead": inductor's kernels are replayed as CUDA graphs (its CUDA
graph trees, captured in thread-local mode, like the torch runner's).

Compiled kernels and inductor's FX graph cache go to `torch-compile/` under
sleap-live's cache root (`sleap_live.engines.cache`; inductor reads its
`TORCHINDUCTOR_CACHE_DIR` variable, set to that folder while it compiles), so a
later run of the same model and shape loads them in seconds. Without a cache
they go to a temporary folder removed with the runner.

A centroid or top-down model that keeps every centroid (no `max_instances`) has
`DEFAULT_SLOTS` slots per frame in its graph; a batch in which a frame fills every
slot runs on the model itself, eagerly, so that no centroid is lost (a one-line
notice the first time).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.specialised import (
    BatchShape,
    SpecialisedModel,
    specialised_input_channels,
)
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.load.metadata import ExportMetadata
from sleap_live.engines.notify import Notify, notice, quiet
from sleap_live.engines.runners.base import begin_run, refuse_stream
from sleap_live.engines.runners.compile_modes import COMPILE_MODES, CUDA_GRAPH_MODES
from sleap_live.engines.runners.cuda import order_after_caller, torch_device
from sleap_live.engines.types import FramePoses, ModelInfo

# The folder under the cache root that inductor's caches go to.
COMPILE_FOLDER = "torch-compile"
DEFAULT_CUDA_MODE = "reduce-overhead"
DEFAULT_CPU_MODE = "default"
# Compiled graphs kept; the least recently used batch shape's is dropped beyond it.
DEFAULT_MAX_COMPILED = 4
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@attrs.frozen(eq=False)
class CompiledGraph:
    """One batch shape's specialised graph and its compiled forward."""

    specialised: SpecialisedModel
    forward: Any


class TorchCompileRunner:
    """Runs an inference model as specialised graphs compiled by `torch.compile`.

    Args:
        model: the inference model; moved to `device` and put in eval mode.
        device: "cpu", "cuda" or "cuda:N".
        num_threads: intra-op threads on the CPU (process-wide, see `TorchRunner`).
        mode: the `torch.compile` mode (`COMPILE_MODES`; default "reduce-overhead"
            on CUDA, "default" on the CPU).
        cache_dir: where inductor's caches go (None: a temporary folder).
        progress: told, in one line, when a graph starts compiling.
        notify: told, in one line, the first time a batch runs eagerly (see the
            module docstring).
        stream: CUDA only: the stream runs queue their work on (None: a stream of
            the runner's own on its device).
        max_compiled: compiled graphs kept.

    Attributes:
        info: the model's `ModelInfo`.
        device: the torch device it runs on.
        eager_batches: batches run on the model itself because a frame filled
            every centroid slot.

    Raises:
        RuntimeUnavailableError: a CUDA device without a CUDA GPU, or an unknown device.
        ValueError: an unknown mode, a CUDA-graph mode or a stream on the CPU.
        ModelConfigError: a model with no specialised graph (see `specialised_input_channels`).
    """

    def __init__(
        self,
        model: InferenceModel,
        device: str = "cpu",
        *,
        num_threads: int | None = None,
        mode: str | None = None,
        cache_dir: Path | None = None,
        progress: Notify = quiet,
        notify: Notify = notice,
        stream: Any = None,
        max_compiled: int = DEFAULT_MAX_COMPILED,
    ) -> None:
        target = torch_device(device)
        cuda = target.type == "cuda"
        mode = mode or (DEFAULT_CUDA_MODE if cuda else DEFAULT_CPU_MODE)
        if mode not in COMPILE_MODES:
            raise ValueError(
                f"unknown torch.compile mode {mode!r} (expected one of {COMPILE_MODES})"
            )
        if not cuda and (mode in CUDA_GRAPH_MODES or stream is not None):
            raise ValueError(
                f"mode {mode!r} and stream need a CUDA device; on the CPU use 'default' or "
                "'max-autotune-no-cudagraphs'"
            )
        if max_compiled < 1:
            raise ValueError(f"max_compiled must be at least 1, got {max_compiled}")
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.info: ModelInfo = model.info
        self.metadata: ExportMetadata | None = None  # a torch module, not an ONNX graph
        self.device = str(target)
        self.mode = mode
        self.eager_batches = 0
        self._target = target
        self._channels = specialised_input_channels(model)
        self._model: InferenceModel | None = model.to(target).eval()
        self._progress = progress
        self._notify = notify
        # Never the legacy default stream: a stream of the runner's own when none is given.
        self._stream = torch.cuda.Stream(target) if cuda and stream is None else stream
        self._max_compiled = max_compiled
        self._compiled: OrderedDict[BatchShape, CompiledGraph] = OrderedDict()
        self._temporary: tempfile.TemporaryDirectory[str] | None = None
        self._kept = cache_dir is not None
        if cache_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="sleap-live-compile-")
            cache_dir = Path(self._temporary.name)
        self._cache_dir = cache_dir

    @property
    def compiled_shapes(self) -> list[BatchShape]:
        """Batch shapes with a compiled graph, least recently used first."""
        return list(self._compiled)

    def run(self, frames: Any, *, stream: Any = None) -> list[FramePoses]:
        """Poses for each frame of a uint8 (B, H, W, C) numpy array or torch tensor.

        Raises:
            InputMismatchError: frames are not uint8 (B, H, W, 1 or 3).
            EngineError: the runner is closed.
            ValueError: a stream on the CPU.
        """
        frames, batch = begin_run(self, self._model, frames, self._channels)
        if self._target.type == "cpu":
            refuse_stream(self, stream)
        tensor = torch.as_tensor(frames)
        graph = self._graph_for(BatchShape.of(tensor))
        padding = graph.specialised.shape.batch - batch
        if self._target.type == "cuda":
            arrays = self._run_on_cuda(graph, tensor, padding, stream)
        else:
            arrays = _host_arrays(graph, _padded(tensor.cpu(), padding), batch)
        if graph.specialised.may_have_dropped(arrays):
            arrays = self._run_eagerly(tensor)
        return decode(self.info, arrays, batch)

    def close(self) -> None:
        """Drops the model and its compiled graphs, and a temporary cache folder; idempotent."""
        self._model = None
        self._compiled.clear()
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None

    def _graph_for(self, shape: BatchShape) -> CompiledGraph:
        """The smallest compiled graph for the frame shape that holds the batch, else a new one."""
        fits = [
            held
            for held in self._compiled
            if attrs.evolve(held, batch=shape.batch) == shape and held.batch >= shape.batch
        ]
        chosen = min(fits, key=lambda held: held.batch, default=shape)
        graph = self._compiled.get(chosen)
        if graph is None:
            graph = self._compile(chosen)
            self._compiled[chosen] = graph
            while len(self._compiled) > self._max_compiled:
                self._compiled.popitem(last=False)
        self._compiled.move_to_end(chosen)
        return graph

    def _compile(self, shape: BatchShape) -> CompiledGraph:
        assert self._model is not None
        kept = "; kept in the cache for later runs" if self._kept else ""
        self._progress(
            f"compiling the {self.info.model_type} model for batches of {shape.batch} "
            f"{shape.width}x{shape.height}x{shape.channels} frames (torch.compile, "
            f"{self.mode}{kept})"
        )
        if self.mode in CUDA_GRAPH_MODES:
            ready_cuda_graph_trees()
        with inductor_cache(self._cache_dir):
            specialised = SpecialisedModel(self._model, shape, self._target)
            forward = torch.compile(specialised, mode=self.mode, fullgraph=True, dynamic=False)
            example = torch.zeros(shape.as_tuple(), dtype=torch.uint8, device=self._target)
            with torch.inference_mode():
                forward(example)  # compiles now, while the status says so
        return CompiledGraph(specialised, forward)

    def _run_on_cuda(
        self, graph: CompiledGraph, tensor: torch.Tensor, padding: int, stream: Any
    ) -> dict[str, np.ndarray]:
        stream = stream if stream is not None else self._stream
        if self.mode in CUDA_GRAPH_MODES:
            ready_cuda_graph_trees()  # the pipeline runs batches in a thread of its own
        order_after_caller(stream, self._target)
        with torch.cuda.stream(stream):
            device_frames = _padded(tensor.to(self._target, non_blocking=True), padding)
            # Each replay of a CUDA graph tree reuses its output memory: copied out below.
            torch.compiler.cudagraph_mark_step_begin()
            return _host_arrays(graph, device_frames, int(tensor.shape[0]))

    def _run_eagerly(self, tensor: torch.Tensor) -> dict[str, np.ndarray]:
        assert self._model is not None
        if self.eager_batches == 0:
            self._notify(
                "a frame has as many centroids as the compiled graph has slots "
                f"({self.info.model_type} model without max_instances); such batches run "
                "eagerly so that none is lost (give --max-instances to compile for more)"
            )
        self.eager_batches += 1
        with torch.inference_mode():
            outputs = self._model(tensor.to(self._target))
        return {
            name: output.cpu().numpy()
            for name, output in zip(self._model.output_names, outputs, strict=True)
        }


# inductor's CUDA graph trees' thread-local state (torch/_inductor/cudagraph_trees.py).
_TREE_STATE = ("tree_manager_containers", "tree_manager_locks")


def ready_cuda_graph_trees(trees: Any = None) -> None:
    """Gives the calling thread inductor's CUDA graph trees' state, where it has none.

    torch 2.11 creates that state once, when `torch/_inductor/cudagraph_trees.py` is
    imported, in the importing thread alone; in any other thread (not one the autograd
    engine started) its `get_obj` fails `assert torch._C._is_key_in_tls(attr_name)`,
    so a runner first used in the main thread and then handed to a pipeline's engine
    thread would fail there on its next compilation or replay. torch 2.13 creates the
    state on first use in each thread (`_initialize_tls`); this does the same, for
    either: a fresh set of tree managers for this thread, registered as 2.11 and 2.13
    register theirs. Threads that have it are left as they are.

    Args:
        trees: the module that holds the state in its `local` (default: inductor's
            `cudagraph_trees`, imported here).
    """
    if trees is None:
        from torch._inductor import cudagraph_trees

        trees = cudagraph_trees
    local = trees.local
    if all(hasattr(local, name) or torch._C._is_key_in_tls(name) for name in _TREE_STATE):
        return
    local.tree_manager_containers = {}
    local.tree_manager_locks = defaultdict(threading.Lock)
    for name in _TREE_STATE:
        torch._C._stash_obj_in_tls(name, getattr(local, name))


@contextmanager
def inductor_cache(directory: Path) -> Iterator[None]:
    """inductor's caches in `directory` while the block compiles.

    inductor reads `TORCHINDUCTOR_CACHE_DIR` whenever it looks a cache up or writes
    one; the variable is restored after the block.
    """
    directory.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get(INDUCTOR_CACHE_ENV)
    os.environ[INDUCTOR_CACHE_ENV] = str(directory)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(INDUCTOR_CACHE_ENV, None)
        else:
            os.environ[INDUCTOR_CACHE_ENV] = previous


def _padded(frames: torch.Tensor, padding: int) -> torch.Tensor:
    """`frames` with `padding` black frames after them."""
    if padding == 0:
        return frames
    black = frames.new_zeros((padding, *frames.shape[1:]))
    return torch.cat([frames, black])


def _host_arrays(graph: CompiledGraph, frames: torch.Tensor, batch: int) -> dict[str, np.ndarray]:
    """The compiled graph's outputs for `frames`, the first `batch` frames' only, on the host."""
    with torch.inference_mode():
        outputs = graph.forward(frames)
    return {
        name: output[:batch].cpu().numpy()
        for name, output in zip(graph.specialised.output_names, outputs, strict=True)
    }
