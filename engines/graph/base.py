"""The contract between the torch inference models, the exporters and the runners.

An inference model is one `torch.nn.Module` that takes uint8 frames exactly as
decoders hand them, (batch, height, width, channels) with any frame size and 1 or 3
channels, and does all preprocessing, the network and peak finding inside, so the
same graph exports to ONNX and runs anywhere. Its outputs are named tensors whose
layout depends on the model type (`sleap_live.engines.host.outputs`); turning them into
`FramePoses` (PAF grouping, identity assignment) happens on the host in
`sleap_live.engines.host.postprocess`.

Each model computes its graph in one of two profiles (`PROFILES`). "default":
uint8 images and sizes from tensor shapes, so the graph takes any frame size, and
instance lists as long as the animals found. "tensorrt": what TensorRT's ONNX
importer takes as it is; the frames cast to float32 at once and float32 after
that (no float64, no uint8 inside), sizes fixed by the frames it is traced on, and
`max_instances` slots per frame with a validity mask (`INSTANCE_SLOTS` layout).
Both give the same poses.

A default-profile model can also be traced specialised (`set_specialised`): the frame
size and channel count of the trace are frozen into the graph, so that every
pass that would not change the image at that size is left out (see
`sleap_live.engines.graph.preprocess.frame_input`). Such a graph takes frames
of that one shape (any batch size) and gives the same numbers as the dynamic one.

A TensorRT-profile model can also compute `branch_free` (`set_branch_free`): no
branch of the graph reads a value the device computed, so the graph runs without
waiting for the device, as CUDA graphs and `torch.export`/`torch.compile`'s whole
graphs need (`sleap_live.engines.graph.specialised`); same numbers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.host.outputs import output_names
from sleap_live.engines.load.metadata import (
    DEFAULT_PROFILE,
    OUTPUT_LAYOUTS,
    PROFILES,
    TENSORRT_PROFILE,
)
from sleap_live.engines.types import ModelInfo


class InferenceModel(torch.nn.Module):
    """Base class of every sleap-live inference model.

    Subclasses set `info` and `frame_preprocess` and implement `forward`, which
    maps a uint8 (B, H, W, C) tensor to a tuple of tensors in `output_names` order.
    """

    info: ModelInfo
    # How the model's first stage preprocesses frames.
    frame_preprocess: PreprocessConfig
    profile: str = DEFAULT_PROFILE
    # Trace specialised: the frame shape frozen (see the module docstring).
    specialised: bool = False
    # Select on the device where the graph would branch on a value (see the module docstring).
    branch_free: bool = False

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in order, for the model type and profile."""
        return output_names(
            self.info.model_type,
            OUTPUT_LAYOUTS[self.profile],
            boxes=bool(self.info.box_categories),
            embeddings=self.info.embedding_dim is not None,
        )

    @property
    def tensorrt_profile(self) -> bool:
        """Whether the graph is the TensorRT profile's (fixed slots, float32 inside)."""
        return self.profile == TENSORRT_PROFILE

    def set_profile(self, profile: str) -> InferenceModel:
        """Computes the graph in `profile` from now on; returns the model.

        Raises:
            ValueError: unknown profile.
        """
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} (expected one of {PROFILES})")
        self.profile = profile
        return self

    def set_specialised(self, specialised: bool) -> InferenceModel:
        """Traces with the frame shape frozen (True) or dynamic from now on; returns the model."""
        self.specialised = specialised
        return self

    def set_branch_free(self, branch_free: bool) -> InferenceModel:
        """Computes the graph branch-free (True) or with its branches from now on.

        Returns the model.
        """
        self.branch_free = branch_free
        return self

    @contextlib.contextmanager
    def whole_graph(self, profile: str) -> Iterator[InferenceModel]:
        """The model computing `profile`, specialised and branch-free inside the block: one
        whole graph, as `torch.export` and the converters built on tracing take it.
        Its profile, specialised and branch-free settings are put back afterwards."""
        previous = self.profile, self.specialised, self.branch_free
        try:
            yield self.set_profile(profile).set_specialised(True).set_branch_free(True)
        finally:
            self.set_profile(previous[0]).set_specialised(previous[1]).set_branch_free(previous[2])

    def peak_cells_px(self) -> tuple[float, ...]:
        """The frame pixels one confidence-map cell spans, for each stage whose peaks
        place the points (a top-down model's centroids place its crops): how far
        float32 rounding of the maps can move a refined point (`graph.fp32`)."""
        raise NotImplementedError

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError
