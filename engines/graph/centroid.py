"""Centroid models: frames to centroids, the first stage of top-down inference.

Frames are preprocessed with the centroid model's settings
(`sleap_live.engines.graph.preprocess`); centroids are the local peaks of its
confidence map above the threshold, integral-refined, mapped to frame pixels
(`grid * stride / scale / eff_scale`). A frame keeps every centroid in raster
order if it has at most `max_instances`, else its `max_instances` highest,
highest first (sleap-nn with `--max_instances`); without `max_instances` (None,
sleap-nn's default) every centroid, in raster order. In the TensorRT profile every
frame has `max_instances` slots, its centroids filling the first ones in the same
order, and `instance_valid` says which slots hold one; that profile needs a number.

`CentroidStage` is that stage, shared by the top-down models
(`sleap_live.engines.graph.topdown`). `CentroidModel` is a centroid model alone:
it reports each centroid as a one-node instance, on a one-node "centroid"
skeleton when its training skeleton has more nodes.
"""

from __future__ import annotations

from typing import Any

import torch

from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.bottomup import top_peaks_per_channel
from sleap_live.engines.graph.legacy_network import OFFSETS_HEAD
from sleap_live.engines.graph.legacy_peaks import (
    learned_offsets_at,
    sleap1_grid_to_image,
    slot_offsets,
)
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import (
    DEFAULT_PATCH_SIZE,
    DEFAULT_PEAK_THRESHOLD,
    grid_to_image,
    top_local_peaks,
)
from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    frame_values,
    frames_to_nchw,
    network_input,
    network_input_values,
    size_matched_frames,
    size_matched_values,
)
from sleap_live.engines.load.spec import ModelSpec, check_model_type
from sleap_live.engines.settings import check_slots
from sleap_live.engines.types import CENTROID_SKELETON, ModelInfo, Skeleton

CENTROID_HEAD = "CentroidConfmapsHead"


class CentroidStage(torch.nn.Module):
    """Frames to centroids: preprocessing, centroid network, local peaks.

    `forward` takes uint8 (B, C, H, W) frames (and whether their shape is
    frozen into the graph, see `InferenceModel.set_specialised`) and returns `(sized, eff_scale,
    instance_frame, centroids, values)`: the channel-coerced, size-matched uint8
    frames, the size matcher's scale ((1,) float32), and per centroid its
    frame (M,) int64, frame-pixel xy (M, 2) float32 and confidence (M,) float32.

    Args:
        network: module with a `CentroidConfmapsHead` output.
        preprocess: the centroid model's preprocessing.
        output_stride: stride of the centroid confidence map.
        max_instances: most centroids kept per frame; None keeps every one.
        peak_threshold: centroids must be above this.
        refine: integral refinement.
        patch_size: integral refinement window.
        sleap1: a SLEAP 1.x model run as SLEAP 1.x ran it (`legacy_peaks`): its
            offset-refinement head instead of integral refinement where it has
            one, and SLEAP 1.x's coordinate ladder.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        output_stride: int,
        max_instances: int | None,
        peak_threshold: float,
        refine: bool,
        patch_size: int,
        sleap1: bool = False,
    ) -> None:
        super().__init__()
        if max_instances is not None and max_instances < 1:
            raise ValueError(f"max_instances must be >= 1, got {max_instances}")
        self.network = network
        self.preprocess = preprocess
        self.output_stride = output_stride
        self.max_instances = max_instances
        self.peak_threshold = peak_threshold
        self.refine = refine
        self.patch_size = patch_size
        self.sleap1 = sleap1

    def _heads(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The confidence maps, and the offset maps SLEAP 1.x refines with (or None)."""
        heads = self.network(image)
        return heads[CENTROID_HEAD], heads.get(OFFSETS_HEAD) if self.sleap1 else None

    def _to_image(self, points: torch.Tensor) -> torch.Tensor:
        ladder = sleap1_grid_to_image if self.sleap1 else grid_to_image
        return ladder(points, self.output_stride, self.preprocess.scale)

    @property
    def cell_px(self) -> float:
        """The frame pixels one cell of the centroid confidence map spans."""
        return self.output_stride / self.preprocess.scale

    def forward(self, frames: torch.Tensor, specialised: bool = False) -> tuple[torch.Tensor, ...]:
        sized, eff_scale = size_matched_frames(frames, self.preprocess, specialised=specialised)
        image = network_input(sized, self.preprocess, specialised=specialised)
        confmaps, offsets = self._heads(image)
        refine = self.refine and offsets is None
        instance_frame, points, values = top_local_peaks(
            confmaps, self.max_instances, self.peak_threshold, refine, self.patch_size
        )
        if offsets is not None:
            points = points + learned_offsets_at(offsets, instance_frame, points)
        centroids = self._to_image(points) / eff_scale
        return sized, eff_scale, instance_frame, centroids, values

    def slots(self, frames: torch.Tensor, branch_free: bool = False) -> tuple[torch.Tensor, ...]:
        """`forward` for the TensorRT profile: float32 (B, C, H, W) frame values in.

        `branch_free`: see `sleap_live.engines.graph.peaks.local_peak_map`.

        Returns:
            `(sized, eff_scale, valid, centroids, values)`: the size-matched
            float32 frames, the size matcher's scale, and per slot (B, K) whether
            it holds a centroid, its frame-pixel xy (B, K, 2) (0 in empty slots)
            and its confidence (B, K) (0 in empty slots).

        Raises:
            ModelConfigError: no `max_instances`, so no number of slots.
        """
        slots = self.slot_count()
        sized, eff_scale = size_matched_values(frames, self.preprocess)
        confmaps, offsets = self._heads(network_input_values(sized, self.preprocess))
        points, values, valid = top_peaks_per_channel(
            confmaps,
            slots,
            self.peak_threshold,
            self.refine and offsets is None,
            self.patch_size,
            raster_unless_more=True,
            branch_free=branch_free,
        )
        points = points[:, 0]
        if offsets is not None:
            points = points + slot_offsets(offsets, points)
        centroids = self._to_image(points)
        centroids = torch.where(valid[:, 0, :, None], centroids / eff_scale, 0.0)
        return sized, eff_scale, valid[:, 0], centroids, values[:, 0]

    def slot_count(self) -> int:
        """The TensorRT profile's instance slots per frame: `max_instances`.

        Raises:
            ModelConfigError: `max_instances` is None (every centroid kept), which
                no fixed number of slots holds.
        """
        check_slots("centroid", self.max_instances)
        assert self.max_instances is not None
        return self.max_instances


class CentroidModel(InferenceModel):
    """A centroid model alone, from uint8 frames to `INSTANCE_OUTPUTS`.

    Each centroid is an instance with one node; its point score and instance
    score are the centroid's confidence.

    Args:
        network: module with a `CentroidConfmapsHead` output.
        preprocess: how frames become the network input.
        skeleton: the training skeleton; reported as `CENTROID_SKELETON` unless
            it has a single node.
        output_stride: stride of the confidence map.
        max_instances: most centroids per frame; None keeps every one.
        peak_threshold: centroids must be above this.
        refine: integral refinement.
        patch_size: integral refinement window.
        sleap1: see `CentroidStage`.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        skeleton: Skeleton,
        output_stride: int,
        *,
        max_instances: int | None = None,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
        refine: bool = True,
        patch_size: int = DEFAULT_PATCH_SIZE,
        sleap1: bool = False,
    ) -> None:
        super().__init__()
        self.frame_preprocess = preprocess
        self.stage = CentroidStage(
            network,
            preprocess,
            output_stride,
            max_instances,
            peak_threshold,
            refine,
            patch_size,
            sleap1,
        )
        self.info = ModelInfo(
            model_type="centroid",
            skeleton=skeleton if skeleton.n_nodes == 1 else CENTROID_SKELETON,
            input_channels=preprocess.in_channels,
            max_instances=max_instances,
            peak_threshold=peak_threshold,
        )

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, network: torch.nn.Module | None = None, **options: Any
    ) -> CentroidModel:
        """The model a sleap-nn centroid model directory describes.

        Raises:
            ModelConfigError: `spec` is not a centroid model.
        """
        check_model_type(spec, "centroid")
        return cls(
            load_model_network(spec) if network is None else network,
            PreprocessConfig.from_spec(spec),
            spec.skeleton,
            spec.head(CENTROID_HEAD).output_stride,
            sleap1=spec.sleap1,
            **options,
        )

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.stage.cell_px,)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.tensorrt_profile:
            _, _, valid, centroids, values = self.stage.slots(
                frame_values(frames), self.branch_free
            )
            centroids = torch.where(valid[..., None], centroids, float("nan"))
            values = torch.where(valid, values, float("nan"))
            return valid, centroids[:, :, None], values[..., None], values
        _, _, instance_frame, centroids, values = self.stage(
            frames_to_nchw(frames), self.specialised
        )
        return instance_frame, centroids[:, None], values[:, None], values
