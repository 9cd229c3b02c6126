"""Top-down inference: centroids, crops and centered-instance poses in one graph.

Reproduces sleap-nn predict's checkpoint path for a centroid + centered-instance
pair (plain or multi-class):

1. Centroid stage (`sleap_live.engines.graph.centroid`): each frame's centroids,
   in frame pixels, every one or at most `max_instances` of them, above
   `centroid_peak_threshold`.
2. Crops. Around each centroid, in the size-matched frame (raw channels, not
   input-scaled) and at the centroid times `eff_scale`, sleap-nn's integer
   window is cut (`sleap_live.engines.graph.crops`), zeros outside the frame. Only the
   centroids found are cropped: the second stage's work follows the number of
   animals.
3. Centered-instance stage. Crops get the instance model's input scaling,
   padding, normalisation and channel matching (no channel coercion, no size
   matching); each node's global peak, refined, is mapped to crop pixels, moved
   by sleap-nn's box corner `centroid - crop_size / 2 + 0.5` (not the window's
   integer origin) and divided by `eff_scale`.

With an embedding model (`EmbeddingTopDownModel`), each instance's pose is then
embedded as sleap-nn's fused route embeds it (`sleap_live.engines.graph.embedding`).

Instances come out in centroid order, scored by their centroid's confidence map
value. In the TensorRT profile (which needs `max_instances`) every frame has
`max_instances` slots: its
centroids fill the first ones (in the same order), every slot is cropped and run
through the instance network, and `instance_valid` says which slots hold a
centroid, so the graph has no data-dependent shape. The multi-class model also
outputs each instance's class probabilities; identities are assigned per frame
on the host (`sleap_live.engines.host.postprocess`). The centroid stage, and
the centroid model alone, are in `sleap_live.engines.graph.centroid`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.centroid import CENTROID_HEAD, CentroidStage
from sleap_live.engines.graph.crops import box_top_left, crop_centered
from sleap_live.engines.graph.embedding import EmbeddingStage
from sleap_live.engines.graph.legacy_network import OFFSETS_HEAD
from sleap_live.engines.graph.legacy_peaks import (
    learned_offsets,
    sleap1_crops,
    sleap1_grid_to_image,
)
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import (
    DEFAULT_PATCH_SIZE,
    DEFAULT_PEAK_THRESHOLD,
    global_peaks,
    grid_to_image,
)
from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    frame_values,
    frames_to_nchw,
    network_input,
    network_input_values,
    sizematch,
)
from sleap_live.engines.graph.resize import static_size
from sleap_live.engines.host.outputs import KEEP_UNCLASSIFIED
from sleap_live.engines.load.spec import ModelSpec, check_model_type
from sleap_live.engines.types import ModelInfo, Skeleton

INSTANCE_HEAD = "CenteredInstanceConfmapsHead"
CLASS_VECTORS_HEAD = "ClassVectorsHead"
# The graph output of `EmbeddingTopDownModel`, kept beside the instance heads.
EMBEDDINGS = "embeddings"


class TopDownModel(InferenceModel):
    """A centroid + centered-instance pair from uint8 frames to `INSTANCE_OUTPUTS`.

    Args:
        centroid_network: module with a `CentroidConfmapsHead` output.
        instance_network: module with a `CenteredInstanceConfmapsHead` output.
        centroid_preprocess: frame preprocessing for the centroid model.
        instance_preprocess: crop preprocessing for the instance model; only its
            `in_channels`, `max_stride` and `scale` apply.
        skeleton: the instance model's skeleton.
        centroid_stride: stride of the centroid confidence map.
        instance_stride: stride of the instance confidence maps.
        crop_size: side of the square crops.
        max_instances: most instances per frame; None keeps every centroid.
        peak_threshold: threshold of the instance stage, and of the centroid
            stage unless `centroid_peak_threshold` is given.
        centroid_peak_threshold: threshold of the centroid stage.
        refine: integral refinement in both stages.
        patch_size: integral refinement window.
        centroid_sleap1: the centroid model is a SLEAP 1.x model run as SLEAP 1.x
            ran it (see `CentroidStage`).
        instance_sleap1: the instance model is a SLEAP 1.x model run as SLEAP 1.x
            ran it: crops cut as SLEAP 1.x cut them (`legacy_peaks.sleap1_crops`),
            its offset-refinement head where it has one, its coordinates (crop
            origin `centroid - crop_size / 2`).
    """

    model_type = "topdown"

    def __init__(
        self,
        centroid_network: torch.nn.Module,
        instance_network: torch.nn.Module,
        centroid_preprocess: PreprocessConfig,
        instance_preprocess: PreprocessConfig,
        skeleton: Skeleton,
        centroid_stride: int,
        instance_stride: int,
        crop_size: int,
        *,
        max_instances: int | None = None,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
        centroid_peak_threshold: float | None = None,
        refine: bool = True,
        patch_size: int = DEFAULT_PATCH_SIZE,
        centroid_sleap1: bool = False,
        instance_sleap1: bool = False,
    ) -> None:
        super().__init__()
        self.frame_preprocess = centroid_preprocess
        self.stage = CentroidStage(
            centroid_network,
            centroid_preprocess,
            centroid_stride,
            max_instances,
            peak_threshold if centroid_peak_threshold is None else centroid_peak_threshold,
            refine,
            patch_size,
            centroid_sleap1,
        )
        self._set_instance_stage(
            instance_network,
            instance_preprocess,
            instance_stride,
            crop_size,
            peak_threshold,
            refine,
            patch_size,
            instance_sleap1,
        )
        self.info = ModelInfo(
            model_type=self.model_type,
            skeleton=skeleton,
            input_channels=centroid_preprocess.in_channels,
            max_instances=max_instances,
            peak_threshold=peak_threshold,
        )

    def _set_instance_stage(
        self,
        instance_network: torch.nn.Module,
        instance_preprocess: PreprocessConfig,
        instance_stride: int,
        crop_size: int,
        peak_threshold: float,
        refine: bool,
        patch_size: int,
        instance_sleap1: bool,
    ) -> None:
        """Keeps what `_instances` needs: the centered-instance stage's settings."""
        if crop_size < 1:
            raise ValueError(f"crop_size must be >= 1, got {crop_size}")
        self.instance_sleap1 = instance_sleap1
        self.instance_network = instance_network
        self.instance_preprocess = instance_preprocess
        self.instance_stride = instance_stride
        self.crop_size = crop_size
        self.peak_threshold = peak_threshold
        self.refine = refine
        self.patch_size = patch_size

    @classmethod
    def from_specs(
        cls,
        centroid: ModelSpec,
        instance: ModelSpec,
        centroid_network: torch.nn.Module | None = None,
        instance_network: torch.nn.Module | None = None,
        **options: Any,
    ) -> TopDownModel:
        """The pair sleap-nn predict builds from a centroid and an instance directory.

        sleap-nn fills each frame-preprocessing setting from the centroid config
        and, where that is unset, from the instance config; each stage keeps its
        own input scale, and the crop size is the instance model's.

        Raises:
            ModelConfigError: the directories are not a centroid model and a model
                of this class's instance type.
        """
        check_model_type(centroid, "centroid")
        check_model_type(instance, cls._instance_type())
        if instance.preprocess.crop_size is None:
            raise ModelConfigError(f"the {instance.model_type} model has no crop size")
        centroid_settings, instance_settings = centroid.preprocess, instance.preprocess
        frame_preprocess = PreprocessConfig(
            in_channels=centroid.in_channels,
            max_stride=centroid.max_stride,
            scale=centroid_settings.scale,
            ensure_rgb=centroid_settings.ensure_rgb,
            ensure_grayscale=centroid_settings.ensure_grayscale,
            max_height=_first_set(centroid_settings.max_height, instance_settings.max_height),
            max_width=_first_set(centroid_settings.max_width, instance_settings.max_width),
            sleap1_resize=centroid.sleap1,
        )
        return cls(
            load_model_network(centroid) if centroid_network is None else centroid_network,
            load_model_network(instance) if instance_network is None else instance_network,
            frame_preprocess,
            PreprocessConfig.from_spec(instance),
            instance.skeleton,
            centroid.head(CENTROID_HEAD).output_stride,
            instance.head(INSTANCE_HEAD).output_stride,
            instance.preprocess.crop_size,
            centroid_sleap1=centroid.sleap1,
            instance_sleap1=instance.sleap1,
            **cls._spec_options(instance),
            **options,
        )

    @staticmethod
    def _instance_type() -> str:
        return "centered_instance"

    @staticmethod
    def _spec_options(instance: ModelSpec) -> dict[str, Any]:
        return {}

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.stage.cell_px, self.instance_stride / self.instance_preprocess.scale)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.tensorrt_profile:
            return self._slots_forward(frames)
        raw = frames_to_nchw(frames)
        sized, eff_scale, instance_frame, centroids, values = self.stage(raw, self.specialised)
        crop_frames = self._crop_source(frames, raw, sized)
        points, scores, heads = self._instances(crop_frames, instance_frame, centroids, eff_scale)
        return (instance_frame, points, scores, values, *self._extra_outputs(heads))

    def _slots_forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The TensorRT profile: every one of the `max_instances` slots is cropped."""
        raw = frame_values(frames)
        sized, eff_scale, valid, centroids, values = self.stage.slots(raw, self.branch_free)
        batch, slots = valid.shape[0], self.stage.slot_count()
        crop_frames = self._crop_source(raw.permute(0, 2, 3, 1), raw, sized)
        instance_frame = torch.arange(batch, device=valid.device).repeat_interleave(slots)
        points, scores, heads = self._instances(
            crop_frames, instance_frame, centroids.reshape(-1, 2), eff_scale
        )
        return self._slotted(valid, values, points, scores, heads)

    def _slotted(
        self,
        valid: torch.Tensor,
        values: torch.Tensor,
        points: torch.Tensor,
        scores: torch.Tensor,
        heads: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        """The TensorRT profile's outputs: every instance output in (B, slots, ...),
        NaN in the slots `valid` (B, slots) says are empty."""
        slots = static_size(valid, 1)
        nan = float("nan")
        slotted = []
        for output in (points, scores, *self._extra_outputs(heads)):
            # Sizes as ints, so that the graph's outputs have every axis but the batch sized.
            trailing = [static_size(output, dim) for dim in range(1, output.ndim)]
            empty = valid.reshape(-1, *(1,) * len(trailing))
            slotted.append(torch.where(empty, output, nan).reshape(-1, slots, *trailing))
        points, scores, *extra = slotted
        return (valid, points, scores, torch.where(valid, values, nan), *extra)

    def _instances(
        self,
        crop_frames: torch.Tensor,
        instance_frame: torch.Tensor,
        centroids: torch.Tensor,
        eff_scale: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Crops around the centroids and the instance network's points and scores.

        Returns:
            `(points, scores, heads)`: (n, nodes, 2) frame-pixel xy, (n, nodes)
            peak values (both NaN where a node is missing) and the network's heads.
        """
        sized_centroids = centroids * eff_scale
        if self.instance_sleap1:
            return self._sleap1_instances(crop_frames, instance_frame, sized_centroids, eff_scale)
        crops = crop_centered(
            crop_frames,
            instance_frame,
            sized_centroids,
            self.crop_size,
            self.crop_size,
            specialised=self.specialised,
        )
        heads = self._instance_heads(crops)
        points, scores = global_peaks(
            heads[INSTANCE_HEAD], self.peak_threshold, self.refine, self.patch_size
        )
        points = grid_to_image(points, self.instance_stride, self.instance_preprocess.scale)
        corner = box_top_left(sized_centroids, self.crop_size, self.crop_size)
        return (points + corner[:, None]) / eff_scale, scores, heads

    def _sleap1_instances(
        self,
        crop_frames: torch.Tensor,
        instance_frame: torch.Tensor,
        sized_centroids: torch.Tensor,
        eff_scale: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """`_instances` as SLEAP 1.x's `FindInstancePeaks` computes them."""
        size = self.crop_size
        heads = self._instance_heads(
            sleap1_crops(crop_frames, instance_frame, sized_centroids, size)
        )
        offsets = heads.get(OFFSETS_HEAD)
        points, scores = global_peaks(
            heads[INSTANCE_HEAD],
            self.peak_threshold,
            self.refine and offsets is None,
            self.patch_size,
        )
        if offsets is not None:
            points = points + learned_offsets(offsets, points)
        scale = self.instance_preprocess.scale
        points = sleap1_grid_to_image(points, self.instance_stride, scale)
        origin = (sized_centroids - size / 2) / scale
        return (points + origin[:, None]) / eff_scale, scores, heads

    def _instance_heads(self, crops: torch.Tensor) -> dict[str, torch.Tensor]:
        """The instance network's heads on (n, h, w, C) crops."""
        crops = crops.permute(0, 3, 1, 2)
        if self.tensorrt_profile:
            image = network_input_values(crops, self.instance_preprocess)
        else:
            image = network_input(crops, self.instance_preprocess, specialised=self.specialised)
        return self.instance_network(image)

    def _extra_outputs(self, heads: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return ()

    def _crop_source(
        self, frames: torch.Tensor, raw: torch.Tensor, sized: torch.Tensor
    ) -> torch.Tensor:
        """The channels-last image sleap-nn crops: size-matched but channel-raw.

        In the TensorRT profile the frames already have the channels the channel
        coercion leaves (`preprocess.frame_channels`): with `ensure_rgb` the same
        image to crop, but with `ensure_grayscale` sleap-nn would crop the RGB
        frames, which that graph never sees.

        Raises:
            ModelConfigError: the TensorRT profile with `ensure_grayscale`.
        """
        preprocess = self.stage.preprocess
        if self.tensorrt_profile and preprocess.ensure_grayscale:
            raise ModelConfigError(
                "a top-down model whose centroid model has ensure_grayscale crops the RGB "
                "frames, which the tensorrt profile does not take; export the default profile"
            )
        if not preprocess.sizematched:
            return frames
        if self.tensorrt_profile or not (preprocess.ensure_rgb or preprocess.ensure_grayscale):
            return sized.permute(0, 2, 3, 1)
        sized = sizematch(
            raw, preprocess.max_height, preprocess.max_width, specialised=self.specialised
        )[0]
        return sized.permute(0, 2, 3, 1)


class MultiClassTopDownModel(TopDownModel):
    """A centroid + multi-class centered-instance pair.

    Outputs `MULTI_CLASS_TOPDOWN_OUTPUTS`: the top-down instances plus each
    instance's class probabilities. Takes `TopDownModel`'s arguments plus
    `class_names`, which names the entries of the `ClassVectorsHead` that
    `instance_network` must also output.
    """

    model_type = "multi_class_topdown"

    def __init__(self, *args: Any, class_names: Sequence[str], **options: Any) -> None:
        if not class_names:
            raise ValueError("a multi-class top-down model needs at least one class name")
        super().__init__(*args, **options)
        # sleap-nn keeps the crops no class was assigned to, with no identity;
        # SLEAP 1.x (`classify_peaks_from_vectors`) reports one instance per class.
        self.info = attrs.evolve(
            self.info,
            class_names=tuple(class_names),
            postprocess={KEEP_UNCLASSIFIED: not self.instance_sleap1},
        )

    @staticmethod
    def _instance_type() -> str:
        return "multi_class_topdown"

    @staticmethod
    def _spec_options(instance: ModelSpec) -> dict[str, Any]:
        return {"class_names": instance.head(CLASS_VECTORS_HEAD).classes}

    def _extra_outputs(self, heads: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return (heads[CLASS_VECTORS_HEAD],)


class EmbeddingTopDownModel(TopDownModel):
    """A centroid + centered-instance pair whose instances are then embedded.

    Outputs `INSTANCE_OUTPUTS` plus `embeddings`, each instance's vector. Takes
    `TopDownModel`'s arguments plus `embedding`, the stage that embeds the poses.
    """

    def __init__(self, *args: Any, embedding: EmbeddingStage, **options: Any) -> None:
        super().__init__(*args, **options)
        self.embedding = embedding
        self.info = attrs.evolve(self.info, embedding_dim=embedding.dim)

    def _instances(
        self, crop_frames: torch.Tensor, instance_frame: torch.Tensor, *rest: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """`TopDownModel._instances`, each instance's vector added to the heads; `rest`
        is its centroids and size-matching factor."""
        points, scores, heads = super()._instances(crop_frames, instance_frame, *rest)
        vectors = self.embedding(crop_frames, instance_frame, points, rest[-1])
        return points, scores, {**heads, EMBEDDINGS: vectors}

    def _extra_outputs(self, heads: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return (heads[EMBEDDINGS],)


def _first_set(first: int | None, second: int | None) -> int | None:
    return first if first is not None else second
