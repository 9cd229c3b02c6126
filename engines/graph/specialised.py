"""Specialised graphs: an inference model traced once for one batch shape, with no host round trip.

CUDA graphs and whole-graph compilers (`torch.compile(fullgraph=True)`,
`torch.export(strict=True)`) need a forward whose every shape is known before it
runs and that never waits for the device: no tensor made from Python values on
each call (a host-to-device copy), no `nonzero`/`item` and no branch on a
computed value (a synchronisation). An inference model's own forward does both:
its default profile sizes its resizes from the frames' shape on every call and
lists as many instances as it finds.

`SpecialisedModel` is the model traced once by `torch.export` for one `BatchShape`,
on the device it will run on, specialised (`set_specialised`: sizes frozen, passes that
change nothing at that size left out) and branch-free (`set_branch_free`). The
trace runs every piece of Python arithmetic (resize tables, crop offsets, padding
sizes) once and keeps the tensors it made as constants of the traced graph,
already on that device (`SpecialisedModel` moves any the trace left on the host,
and the resize makes its tables on the frames' device), with no copy between
devices inside; what is left is a fixed sequence of tensor operations on the
frames. Single-instance and bottom-up models have fixed-size outputs in their
default profile, which is traced (the same outputs, and on the CPU torch's own
uint8 resize kernel); models with a centroid stage list as many instances as they
find there, so their TensorRT profile is traced instead (float32 inside,
`max_instances` slots per frame with a validity mask; see
`sleap_live.engines.graph.base`), whose outputs
`sleap_live.engines.host.postprocess.decode` reads as it reads a TensorRT engine's.

Centroid and top-down models without `max_instances` keep every centroid a frame
has, which no fixed number of slots holds: they get `DEFAULT_SLOTS` slots, and a
frame that fills every one of them may have had more (`may_have_dropped`); the
caller runs that batch on the model itself. A frame with fewer centroids than
slots lists every one of them in raster order, as the model does.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.box_topdown import BoxTopDownModel
from sleap_live.engines.graph.centroid import CentroidModel, CentroidStage
from sleap_live.engines.graph.preprocess import frame_channels
from sleap_live.engines.graph.topdown import TopDownModel
from sleap_live.engines.host.outputs import output_names
from sleap_live.engines.load.metadata import DEFAULT_PROFILE, OUTPUT_LAYOUTS, TENSORRT_PROFILE

# Slots per frame of a centroid or top-down model without `max_instances`.
DEFAULT_SLOTS = 8
# Model types with a centroid stage, whose slots are `max_instances`.
_CENTROID_TYPES = ("centroid", "topdown", "multi_class_topdown")


@attrs.frozen
class BatchShape:
    """The shape of a uint8 frame batch: (batch, height, width, channels)."""

    batch: int
    height: int
    width: int
    channels: int

    @classmethod
    def of(cls, frames: torch.Tensor | np.ndarray) -> BatchShape:
        """The shape of a (B, H, W, C) batch."""
        batch, height, width, channels = (int(size) for size in frames.shape)
        return cls(batch, height, width, channels)

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.batch, self.height, self.width, self.channels)


class SpecialisedModel(torch.fx.GraphModule):
    """An inference model traced for frames of one `BatchShape`, capturable as it is.

    Args:
        model: the inference model, on `device`; its profile and settings are
            restored after the trace.
        shape: the frames' shape.
        device: where the frames and the traced graph's constants live (default:
            the model's parameters' device, else the CPU).

    Attributes:
        shape: the frames' shape.
        slots: instance slots per frame of a centroid-stage model (None for the others).
        output_names: the outputs' names, in order (`specialised_output_names`: the
            "instance_slots" layout for a centroid-stage model, the default
            layout otherwise).

    Raises:
        ModelConfigError: a model `specialised_input_channels` refuses.
    """

    def __init__(
        self,
        model: InferenceModel,
        shape: BatchShape,
        device: torch.device | str | None = None,
    ) -> None:
        target = torch.device(device) if device is not None else _device_of(model)
        specialised_input_channels(model)  # refuses the models it cannot trace
        model_type = model.info.model_type
        slots = _slots(model) if model_type in _CENTROID_TYPES else None
        traced = _traced(model, shape, target, _specialised_profile(model_type), slots)
        # The traced graph itself, not a module that calls it: a trace of this module
        # then finds the graph's constants where the graph keeps them.
        super().__init__(traced, traced.graph, class_name="SpecialisedModel")
        # Every constant on `device`: the trace keeps some where it made them (a table
        # from numpy is made on the host first), and one left on the CPU would be
        # copied to the device on every call, which CUDA graph capture refuses.
        self.to(target)
        self.shape = shape
        self.slots = slots
        self._every_centroid = slots is not None and model.info.max_instances is None
        self.output_names = specialised_output_names(model)

    def may_have_dropped(self, outputs: Mapping[str, np.ndarray]) -> bool:
        """Whether some frame filled every slot of a model that keeps every centroid.

        Such a frame may have had more centroids than slots; its poses from this
        graph may lack some, so the batch is run on the model itself instead.
        """
        if not self._every_centroid:
            return False
        return bool(np.asarray(outputs["instance_valid"]).all(axis=1).any())


def specialised_output_names(model: InferenceModel) -> tuple[str, ...]:
    """The outputs' names of `model`'s specialised graphs, in order."""
    model_type = model.info.model_type
    return output_names(
        model_type,
        OUTPUT_LAYOUTS[_specialised_profile(model_type)],
        boxes=bool(model.info.box_categories),
        embeddings=model.info.embedding_dim is not None,
    )


def _specialised_profile(model_type: str) -> str:
    """The profile traced: the TensorRT profile's slots where a centroid stage lists instances."""
    return TENSORRT_PROFILE if model_type in _CENTROID_TYPES else DEFAULT_PROFILE


def specialised_input_channels(model: InferenceModel) -> tuple[int, ...]:
    """The frames' channel counts `model`'s specialised graphs take; others are converted first.

    Raises:
        ModelConfigError: a centroid-stage model whose TensorRT profile it cannot
            trace: one whose frames it cannot take
            (`sleap_live.engines.graph.preprocess.frame_channels`), or a top-down
            model whose centroid model has `ensure_grayscale` (it crops the RGB
            frames, see `TopDownModel`), or one seeded by a box detector with
            channel coercion.
    """
    if model.info.model_type not in _CENTROID_TYPES:
        return (1, 3)
    if isinstance(model, BoxTopDownModel) and (
        model.frame_preprocess.ensure_rgb or model.frame_preprocess.ensure_grayscale
    ):
        raise ModelConfigError(
            "a top-down model whose box detector has ensure_rgb or ensure_grayscale crops "
            "the frames as decoded, which its fixed-shape graph does not take"
        )
    if isinstance(model, TopDownModel) and model.frame_preprocess.ensure_grayscale:
        raise ModelConfigError(
            "a top-down model whose centroid model has ensure_grayscale crops the RGB "
            "frames, which its specialised graph does not take"
        )
    return (frame_channels(model.frame_preprocess),)


def _device_of(model: torch.nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def _slots(model: InferenceModel) -> int:
    max_instances = model.info.max_instances
    return DEFAULT_SLOTS if max_instances is None else max_instances


def _traced(
    model: InferenceModel,
    shape: BatchShape,
    device: torch.device,
    profile: str,
    slots: int | None,
) -> torch.fx.GraphModule:
    """`model`'s branch-free `profile`, specialised, traced on zero frames of `shape`
    on `device`."""
    # What holds the slot count: a box-seeded model itself, a centroid stage's stage.
    stage: CentroidStage | BoxTopDownModel | None = None
    if isinstance(model, BoxTopDownModel):
        stage = model
    elif isinstance(model, (CentroidModel, TopDownModel)):
        stage = model.stage
    max_instances = None if stage is None else stage.max_instances
    example = torch.zeros(shape.as_tuple(), dtype=torch.uint8, device=device)
    try:
        if stage is not None:
            stage.max_instances = slots
        with model.whole_graph(profile), torch.no_grad():
            exported = torch.export.export(model, (example,), strict=False)
    finally:
        if stage is not None:
            stage.max_instances = max_instances
    return _with_constants_as_buffers(exported.module())


def _with_constants_as_buffers(graph: torch.nn.Module) -> torch.fx.GraphModule:
    """`graph` with the tensors its trace made kept as buffers.

    `ExportedProgram.module()` keeps them as plain attributes, which neither
    `Module.to` moves nor a trace of a module that holds the graph finds.
    """
    assert isinstance(graph, torch.fx.GraphModule)
    for node in graph.graph.nodes:
        if node.op != "get_attr":
            continue
        owner_path, _, name = str(node.target).rpartition(".")
        owner = graph.get_submodule(owner_path) if owner_path else graph
        value = getattr(owner, name)
        registered = name in owner._buffers or name in owner._parameters
        if isinstance(value, torch.Tensor) and not registered:
            delattr(owner, name)
            owner.register_buffer(name, value)
    return graph
