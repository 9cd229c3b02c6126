"""Bottom-up inference models: frames to peaks and PAF line scores (or class maps).

`BottomUpModel` and `MultiClassBottomUpModel` are single graphs from uint8 frames
to fixed-size per-frame tensors (`BOTTOMUP_OUTPUTS`,
`MULTI_CLASS_BOTTOMUP_OUTPUTS`): preprocessing, the network, local peak finding
with integral refinement, and either PAF line scores for every candidate
connection or class probabilities at every peak. Grouping peaks into instances
is sequential, data-dependent work and happens on the host
(`sleap_live.engines.host.grouping`), from the settings the models put in
`ModelInfo.postprocess`.

Peaks are sleap-nn's local peaks with integral refinement (predict's default,
patch 5; see `sleap_live.engines.graph.peaks`). Their grid positions times the
confidence map stride are the scaled-input pixels PAFs are scored in; divided by
the input scale and then the size matcher's scale they are frame pixels, in
sleap-nn's float32 operation order.

sleap-nn's checkpoint path keeps every peak; a graph needs a fixed count, so each
node keeps at most `max_peaks_per_node` (K, default 20, sleap-nn's export
default), the highest ones. Frames where a node has more than K peaks above the
threshold can differ from sleap-nn (which would then consider the extra, weaker
peaks too). Kept peaks are put back in raster order, which is the order sleap-nn's
grouping sees them in and decides ties and instance order by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.crops import clip_index
from sleap_live.engines.graph.legacy_network import OFFSETS_HEAD
from sleap_live.engines.graph.legacy_peaks import SCALED_INPUT_SHIFT, channel_offsets
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.paf import PafLineScorer
from sleap_live.engines.graph.peaks import (
    DEFAULT_PATCH_SIZE,
    DEFAULT_PEAK_THRESHOLD,
    local_peak_map,
    refine_peaks,
    top_peaks,
)
from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    Preprocessor,
    frame_values,
    frame_values_input,
    frames_to_nchw,
)
from sleap_live.engines.graph.resize import size_of
from sleap_live.engines.host.grouping import (
    ClassMapGrouper,
    PafGrouper,
)
from sleap_live.engines.load.spec import ModelSpec, check_model_type
from sleap_live.engines.types import ModelInfo, Skeleton

CONFMAPS_HEAD = "MultiInstanceConfmapsHead"
PAFS_HEAD = "PartAffinityFieldsHead"
CLASS_MAPS_HEAD = "ClassMapsHead"

DEFAULT_MAX_PEAKS_PER_NODE = 20


def top_peaks_per_channel(
    cms: torch.Tensor,
    max_peaks: int,
    threshold: float = DEFAULT_PEAK_THRESHOLD,
    refine: bool = True,
    patch_size: int = DEFAULT_PATCH_SIZE,
    raster_unless_more: bool = False,
    *,
    branch_free: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The highest `max_peaks` local peaks of every channel, in raster order.

    Args:
        cms: (B, N, H, W) confidence maps.
        max_peaks: K, peaks kept per channel.
        threshold: peaks must be above this.
        refine: apply integral refinement.
        patch_size: refinement window side.
        raster_unless_more: a channel with more than K peaks lists its kept
            ones highest first (sleap-nn's centroid layer; see `top_peaks`).
        branch_free: see `local_peak_map`.

    Returns:
        `(points, values, valid)`: (B, N, K, 2) float32 grid xy, (B, N, K) float32
        map values and (B, N, K) bool. A channel's peaks fill its first slots in
        raster order; empty slots hold zeros.
    """
    cms = cms.float()
    batch, channels = cms.shape[0], cms.shape[1]
    width = size_of(cms, 3)
    is_peak, offsets = local_peak_map(cms, threshold, branch_free=branch_free)

    values, flat, valid = top_peaks(cms, is_peak, max_peaks, raster_unless_more)
    flat = torch.where(valid, flat, 0)
    values = torch.where(valid, values, 0.0)

    rows = torch.div(flat, width, rounding_mode="floor")
    cols = flat - rows * width
    flat_offsets = offsets.flatten(2, 3)  # (B, N, H * W, 2)
    points = torch.stack([cols, rows], dim=-1).float()
    points = points + flat_offsets.gather(2, flat.unsqueeze(-1).expand(-1, -1, -1, 2))
    if refine:
        map_inds = torch.arange(batch * channels, device=cms.device).repeat_interleave(max_peaks)
        points = refine_peaks(cms, map_inds, points.reshape(-1, 2), patch_size)
        points = points.reshape(batch, channels, max_peaks, 2)
    return torch.where(valid.unsqueeze(-1), points, 0.0), values, valid


Model = TypeVar("Model", bound=InferenceModel)


class _BottomUpBase(InferenceModel):
    """Preprocessing, network and peaks shared by both bottom-up models."""

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        confmap_stride: int,
        peak_threshold: float,
        max_peaks_per_node: int,
        refine: bool,
        patch_size: int,
        sleap1: bool = False,
    ) -> None:
        super().__init__()
        if max_peaks_per_node < 1:
            raise ValueError(f"max_peaks_per_node must be at least 1, got {max_peaks_per_node}")
        self.network = network
        self.preprocess = Preprocessor(preprocess)
        self.frame_preprocess = preprocess
        self.input_scale = preprocess.scale
        self.confmap_stride = confmap_stride
        self.peak_threshold = peak_threshold
        self.max_peaks_per_node = max_peaks_per_node
        self.refine = refine
        self.patch_size = patch_size
        # A SLEAP 1.x model run as SLEAP 1.x ran it (`legacy_peaks`): peaks refined
        # by its offset-refinement head where it has one, SLEAP 1.x's coordinates.
        self.sleap1 = sleap1

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.confmap_stride / self.input_scale,)

    def _peak_settings(self) -> dict[str, Any]:
        return {
            "max_peaks_per_node": self.max_peaks_per_node,
            "integral_refinement": "integral" if self.refine else None,
            "integral_patch_size": self.patch_size,
        }

    def _heads_and_peaks(
        self, frames: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Network outputs, peaks in scaled-input pixels, values, validity, eff. scale."""
        if self.tensorrt_profile:
            image, eff_scale = frame_values_input(frame_values(frames), self.preprocess.config)
        else:
            image, eff_scale = self.preprocess(frames_to_nchw(frames), self.specialised)
        heads = self.network(image)
        offsets = heads.get(OFFSETS_HEAD) if self.sleap1 else None
        points, values, valid = top_peaks_per_channel(
            heads[CONFMAPS_HEAD],
            self.max_peaks_per_node,
            self.peak_threshold,
            self.refine and offsets is None,
            self.patch_size,
            branch_free=self.branch_free,
        )
        if offsets is not None:
            refined = points + channel_offsets(offsets, points)
            points = torch.where(valid.unsqueeze(-1), refined, 0.0)
        return heads, points * self.confmap_stride, values, valid, eff_scale

    def _to_frame(self, points: torch.Tensor, eff_scale: torch.Tensor) -> torch.Tensor:
        """Scaled-input pixels to frame pixels, dividing as sleap-nn does (SLEAP 1.x
        adds `SCALED_INPUT_SHIFT` after the division)."""
        if self.input_scale != 1.0:
            points = points / self.input_scale
            if self.sleap1:
                points = points + SCALED_INPUT_SHIFT
        return points / eff_scale


class BottomUpModel(_BottomUpBase):
    """A bottom-up (confidence maps + PAFs) model from frames to `BOTTOMUP_OUTPUTS`.

    Args:
        network: module mapping the normalised, padded input to a dict with
            `MultiInstanceConfmapsHead` and `PartAffinityFieldsHead` tensors.
        preprocess: how frames become the network input.
        skeleton: the model's skeleton (node names; its edges are reported).
        paf_edges: (source, destination) node indices of the PAF channels.
        confmap_stride: output stride of the confidence maps.
        paf_stride: output stride of the PAFs.
        peak_threshold: confidence map threshold for peaks.
        max_peaks_per_node: K, peak slots per node.
        refine: integral refinement of peaks.
        patch_size: integral refinement window.
        n_points: samples along each candidate line.
        max_edge_length_ratio: see `PafLineScorer`.
        dist_penalty_weight: see `PafLineScorer`.
        min_line_scores: host grouping threshold on matched lines.
        min_instance_peaks: host grouping minimum instance size (int count or
            float fraction of the nodes).
        max_instances: most instances per frame, or None for no limit.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        skeleton: Skeleton,
        paf_edges: Sequence[tuple[int, int]],
        confmap_stride: int,
        paf_stride: int,
        *,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
        max_peaks_per_node: int = DEFAULT_MAX_PEAKS_PER_NODE,
        refine: bool = True,
        patch_size: int = DEFAULT_PATCH_SIZE,
        n_points: int = 10,
        max_edge_length_ratio: float = 0.25,
        dist_penalty_weight: float = 1.0,
        min_line_scores: float = 0.25,
        min_instance_peaks: int | float = 0,
        max_instances: int | None = None,
        sleap1: bool = False,
    ) -> None:
        super().__init__(
            network,
            preprocess,
            confmap_stride,
            peak_threshold,
            max_peaks_per_node,
            refine,
            patch_size,
            sleap1,
        )
        self.scorer = PafLineScorer(
            paf_edges, paf_stride, n_points, max_edge_length_ratio, dist_penalty_weight
        )
        grouper = PafGrouper(
            skeleton.n_nodes,
            paf_edges,
            min_line_scores=min_line_scores,
            min_instance_peaks=min_instance_peaks,
        )
        self.info = ModelInfo(
            model_type="bottomup",
            skeleton=skeleton,
            input_channels=preprocess.in_channels,
            max_instances=max_instances,
            peak_threshold=peak_threshold,
            postprocess={
                **grouper.postprocess_settings(),
                **self._peak_settings(),
                "n_points": n_points,
                "max_edge_length_ratio": max_edge_length_ratio,
                "dist_penalty_weight": dist_penalty_weight,
            },
        )

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, network: torch.nn.Module | None = None, **options: Any
    ) -> BottomUpModel:
        """The model a sleap-nn bottom-up model directory describes.

        Args:
            spec: the parsed training config.
            network: the network; by default loaded from the checkpoint.
            **options: keyword options of the constructor (sleap-nn predict's
                defaults otherwise).

        Raises:
            ModelConfigError: `spec` is not a bottom-up model.
        """
        check_model_type(spec, "bottomup")
        pafs = spec.head(PAFS_HEAD)
        return _from_spec(cls, spec, network, pafs.edge_indices, pafs.output_stride, options)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        heads, points, values, valid, eff_scale = self._heads_and_peaks(frames)
        line_scores = self.scorer(heads[PAFS_HEAD], points)
        pair_valid = valid[:, self.scorer.edge_src].unsqueeze(3) & valid[
            :, self.scorer.edge_dst
        ].unsqueeze(2)
        nan = torch.full((), float("nan"))
        return (
            torch.where(valid.unsqueeze(-1), self._to_frame(points, eff_scale), nan),
            torch.where(valid, values, nan),
            valid,
            torch.where(pair_valid, line_scores, nan),
        )


class MultiClassBottomUpModel(_BottomUpBase):
    """A multi-class bottom-up (confidence maps + class maps) model.

    Maps frames to `MULTI_CLASS_BOTTOMUP_OUTPUTS`. Class maps are read at each peak
    as sleap-nn does: the nearest class-map pixel (half-to-even rounding of the
    peak position over the class-map stride, clipped into the map).

    Args:
        network: module mapping the normalised, padded input to a dict with
            `MultiInstanceConfmapsHead` and `ClassMapsHead` tensors.
        preprocess: how frames become the network input.
        skeleton: the model's skeleton.
        class_names: identity classes, in class-map channel order.
        confmap_stride: output stride of the confidence maps.
        class_map_stride: output stride of the class maps.
        peak_threshold: confidence map threshold for peaks.
        max_peaks_per_node: K, peak slots per node.
        refine: integral refinement of peaks.
        patch_size: integral refinement window.
        max_instances: most instances per frame, or None for one per class.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        skeleton: Skeleton,
        class_names: Sequence[str],
        confmap_stride: int,
        class_map_stride: int,
        *,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
        max_peaks_per_node: int = DEFAULT_MAX_PEAKS_PER_NODE,
        refine: bool = True,
        patch_size: int = DEFAULT_PATCH_SIZE,
        max_instances: int | None = None,
        sleap1: bool = False,
    ) -> None:
        super().__init__(
            network,
            preprocess,
            confmap_stride,
            peak_threshold,
            max_peaks_per_node,
            refine,
            patch_size,
            sleap1,
        )
        if not class_names:
            raise ModelConfigError("A multi-class bottom-up model needs at least one class.")
        self.class_map_stride = class_map_stride
        grouper = ClassMapGrouper(skeleton.n_nodes, len(class_names))
        self.info = ModelInfo(
            model_type="multi_class_bottomup",
            skeleton=skeleton,
            input_channels=preprocess.in_channels,
            # One instance per class at most: no limit.
            max_instances=len(class_names) if max_instances is None else max_instances,
            class_names=tuple(class_names),
            peak_threshold=peak_threshold,
            postprocess={**grouper.postprocess_settings(), **self._peak_settings()},
        )

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, network: torch.nn.Module | None = None, **options: Any
    ) -> MultiClassBottomUpModel:
        """The model a sleap-nn multi-class bottom-up model directory describes.

        Raises:
            ModelConfigError: `spec` is not a multi-class bottom-up model.
        """
        check_model_type(spec, "multi_class_bottomup")
        class_maps = spec.head(CLASS_MAPS_HEAD)
        return _from_spec(cls, spec, network, class_maps.classes, class_maps.output_stride, options)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        heads, points, values, valid, eff_scale = self._heads_and_peaks(frames)
        class_maps = heads[CLASS_MAPS_HEAD].float()
        batch, n_classes = class_maps.shape[0], class_maps.shape[1]
        on_class_grid = points / self.class_map_stride
        cells = torch.round(on_class_grid).long()
        cols = clip_index(cells[..., 0], class_maps.shape[3])
        rows = clip_index(cells[..., 1], class_maps.shape[2])
        flat = (rows * class_maps.shape[3] + cols).reshape(batch, 1, -1)
        probs = class_maps.flatten(2).gather(2, flat.expand(-1, n_classes, -1))
        probs = probs.reshape(batch, n_classes, *valid.shape[1:]).permute(0, 2, 3, 1)

        # sleap-nn lifts the class-grid positions back by the class-map stride.
        points = self._to_frame(on_class_grid * self.class_map_stride, eff_scale)
        nan = torch.full((), float("nan"))
        return (
            torch.where(valid.unsqueeze(-1), points, nan),
            torch.where(valid, values, nan),
            valid,
            torch.where(valid.unsqueeze(-1), probs, nan),
        )


def _from_spec(
    model: Callable[..., Model],
    spec: ModelSpec,
    network: torch.nn.Module | None,
    head: Any,
    head_stride: int,
    options: dict[str, Any],
) -> Model:
    """A bottom-up model of `spec`: its network (by default loaded from the
    checkpoint), preprocessing, skeleton, what its second head gives (`head`: the
    PAF edges or the classes), the confidence maps' and that head's strides."""
    return model(
        load_model_network(spec) if network is None else network,
        PreprocessConfig.from_spec(spec),
        spec.skeleton,
        head,
        spec.head(CONFMAPS_HEAD).output_stride,
        head_stride,
        sleap1=spec.sleap1,
        **options,
    )
