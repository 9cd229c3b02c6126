"""Single-instance inference: frames to one pose per frame, in one graph.

Reproduces sleap-nn predict on a single-instance model: preprocessing
(`sleap_live.engines.graph.preprocess`), the network, the global peak of each node's
confidence map with integral refinement, and the coordinate ladder
`grid * output_stride / input_scale / eff_scale`. The instance score is the sum
of the found nodes' peak values, as sleap-nn reports it (`np.nansum`).

A model trained for tiled inference (`TilingSpec`) runs as sleap-nn's `TiledLayer`
does: the frame at its own size (no size matcher), scaled and padded to the output
stride, run as overlapping tiles whose maps are stitched (`graph.tiling`), then the
same peaks and ladder with an `eff_scale` of 1.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.legacy_network import OFFSETS_HEAD
from sleap_live.engines.graph.legacy_peaks import learned_offsets, sleap1_grid_to_image
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import (
    DEFAULT_PATCH_SIZE,
    DEFAULT_PEAK_THRESHOLD,
    global_peaks,
    grid_to_image,
)
from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    frame_input,
    frame_values,
    frame_values_input,
    frames_to_nchw,
)
from sleap_live.engines.graph.tiling import TileGeometry, importance_window, tiled_confmaps
from sleap_live.engines.load.metadata import TENSORRT_PROFILE
from sleap_live.engines.load.spec import ModelSpec, check_model_type
from sleap_live.engines.types import ModelInfo, Skeleton

SINGLE_INSTANCE_HEAD = "SingleInstanceConfmapsHead"


class SingleInstanceModel(InferenceModel):
    """A single-instance model from uint8 frames to `INSTANCE_OUTPUTS`.

    Every frame yields one instance (`instance_frame` is `arange(B)`; in the
    TensorRT profile, one valid slot per frame); nodes without a peak above the
    threshold are NaN, and a frame without any is dropped when decoded.

    Args:
        network: module mapping the normalised, padded input to a dict with a
            `SingleInstanceConfmapsHead` tensor.
        preprocess: how frames become the network input.
        skeleton: the model's skeleton (one confidence map per node).
        output_stride: stride of the confidence maps.
        peak_threshold: peaks below this are missing nodes.
        refine: integral refinement of peaks.
        patch_size: integral refinement window.
        sleap1: place peaks as SLEAP 1.x did (`legacy_peaks`): with the network's
            `OffsetRefinementHead` output where it has one, and SLEAP 1.x's
            coordinate ladder.
        tiling: run frames as tiles of this geometry (`preprocess` then has no
            size matcher and pads to the output stride), or None.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        skeleton: Skeleton,
        output_stride: int,
        *,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
        refine: bool = True,
        patch_size: int = DEFAULT_PATCH_SIZE,
        sleap1: bool = False,
        tiling: TileGeometry | None = None,
    ) -> None:
        super().__init__()
        self.sleap1 = sleap1
        self.tiling = tiling
        if tiling is not None:
            self.register_buffer("window", importance_window(tiling), persistent=False)
        self.network = network
        self.preprocess = preprocess
        self.frame_preprocess = preprocess
        self.output_stride = output_stride
        self.peak_threshold = peak_threshold
        self.refine = refine
        self.patch_size = patch_size
        self.info = ModelInfo(
            "single_instance", skeleton, preprocess.in_channels, 1, peak_threshold=peak_threshold
        )

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, network: torch.nn.Module | None = None, **options: Any
    ) -> SingleInstanceModel:
        """The model a sleap-nn single-instance model directory describes.

        Args:
            spec: the parsed training config.
            network: the network; by default loaded from the checkpoint.
            **options: keyword options of the constructor.

        Raises:
            ModelConfigError: `spec` is not a single-instance model.
        """
        check_model_type(spec, "single_instance")
        preprocess = PreprocessConfig.from_spec(spec)
        output_stride = spec.head(SINGLE_INSTANCE_HEAD).output_stride
        tiling = spec.preprocess.tiling
        geometry = None
        if tiling is not None:
            geometry = TileGeometry(
                tile_size=tiling.tile_size,
                overlap=tiling.overlap,
                min_overlap_fraction=tiling.min_overlap_fraction,
                output_stride=output_stride,
                max_stride=spec.max_stride,
                blend=tiling.blend,
                sigma_scale=tiling.sigma_scale,
            )
            # sleap-nn's tiled predict skips the size matcher and pads the whole frame
            # only to the output stride; each tile is a multiple of max_stride.
            preprocess = attrs.evolve(
                preprocess, max_height=None, max_width=None, max_stride=output_stride
            )
        return cls(
            load_model_network(spec) if network is None else network,
            preprocess,
            spec.skeleton,
            output_stride,
            sleap1=spec.sleap1,
            tiling=geometry,
            **options,
        )

    def set_profile(self, profile: str) -> SingleInstanceModel:
        if self.tiling is not None and profile == TENSORRT_PROFILE:
            raise ModelConfigError(
                "a tiled model has no tensorrt profile: its tile count follows the frame "
                "size, which that profile fixes; export the default profile"
            )
        super().set_profile(profile)
        return self

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.output_stride / self.preprocess.scale,)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.tensorrt_profile:
            image, eff_scale = frame_values_input(frame_values(frames), self.preprocess)
        else:
            image, eff_scale = frame_input(
                frames_to_nchw(frames), self.preprocess, specialised=self.specialised
            )
        if self.tiling is not None:
            confmaps = tiled_confmaps(
                image, self.network, SINGLE_INSTANCE_HEAD, self.tiling, self.window
            )
            heads = {SINGLE_INSTANCE_HEAD: confmaps}
        else:
            heads = self.network(image)
            confmaps = heads[SINGLE_INSTANCE_HEAD]
        if self.sleap1:
            offsets = heads.get(OFFSETS_HEAD)
            refine = self.refine and offsets is None
            points, scores = global_peaks(confmaps, self.peak_threshold, refine, self.patch_size)
            if offsets is not None:
                points = points + learned_offsets(offsets, points)
            points = sleap1_grid_to_image(points, self.output_stride, self.preprocess.scale)
            points = points / eff_scale
        else:
            points, scores = global_peaks(
                confmaps, self.peak_threshold, self.refine, self.patch_size
            )
            points = grid_to_image(points, self.output_stride, self.preprocess.scale) / eff_scale
        found = ~torch.isnan(scores)
        instance_scores = torch.where(found, scores, 0.0).sum(1)
        if self.tensorrt_profile:
            valid = torch.ones_like(instance_scores, dtype=torch.bool)[:, None]
            return valid, points[:, None], scores[:, None], instance_scores[:, None]
        instance_frame = torch.arange(confmaps.shape[0], device=confmaps.device)
        return instance_frame, points, scores, instance_scores
