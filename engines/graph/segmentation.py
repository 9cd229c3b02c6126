"""Semantic segmentation: frames to each frame's foreground mask, in one graph.

Reproduces sleap-nn 0.3.5's `SemanticSegmentationLayer` (`inference/layers/segmentation.py`)
with its defaults: the frame preprocessed as for a pose model, the network's
`SegmentationHead` ending in a sigmoid (`SemanticSegmentationLightningModule.forward`),
the probabilities above `FG_THRESHOLD` the frame's one mask (the union of all foreground,
no components, no instances), its score the mean probability over the mask.

The mask stays at the head's output stride, as sleap-nn stores it. The graph outputs the
whole padded map (`MASK_OUTPUTS`) with the extent of it that covers the frame, which
sleap-nn computes as `ceil(round(frame size * eff_scale * input_scale) / output_stride)`
cells (`SegmentationLayer._mask_to_stride`); the host crops the map to it and records
the sio scale `extent / frame size` (`sleap_live.engines.host.postprocess.decode_masks`).
"""

from __future__ import annotations

import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.preprocess import PreprocessConfig, frame_input, frames_to_nchw
from sleap_live.engines.graph.resize import size_of
from sleap_live.engines.load.metadata import TENSORRT_PROFILE
from sleap_live.engines.load.spec import ModelSpec, check_model_type
from sleap_live.engines.types import ModelInfo, Skeleton

SEGMENTATION_HEAD = "SegmentationHead"
# sleap-nn predict's `--fg_threshold` default (cli.py).
FG_THRESHOLD = 0.5


class SemanticSegmentationModel(InferenceModel):
    """A semantic segmentation model, uint8 frames to `MASK_OUTPUTS`.

    Args:
        network: module mapping the normalised, padded input to a dict with a
            `SegmentationHead` probability map (sigmoid applied).
        preprocess: how frames become the network input.
        skeleton: the training skeleton, recorded for the files written (the
            frames hold no instances).
        output_stride: stride of the probability map.
        fg_threshold: probabilities above this are foreground.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        skeleton: Skeleton,
        output_stride: int,
        fg_threshold: float = FG_THRESHOLD,
    ) -> None:
        super().__init__()
        self.network = network
        self.frame_preprocess = preprocess
        self.output_stride = output_stride
        self.fg_threshold = fg_threshold
        self.info = ModelInfo("semantic_segmentation", skeleton, preprocess.in_channels, 1)

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, network: torch.nn.Module | None = None
    ) -> SemanticSegmentationModel:
        """The model a sleap-nn `semantic_segmentation` directory describes.

        Raises:
            ModelConfigError: `spec` is not a semantic segmentation model.
        """
        check_model_type(spec, "semantic_segmentation")
        return cls(
            load_model_network(spec) if network is None else network,
            PreprocessConfig.from_spec(spec),
            spec.skeleton,
            spec.head(SEGMENTATION_HEAD).output_stride,
        )

    def set_profile(self, profile: str) -> SemanticSegmentationModel:
        if profile == TENSORRT_PROFILE:
            raise ModelConfigError(
                "a semantic segmentation model has no tensorrt profile yet: its mask "
                "extent is int64 arithmetic on the frame size; export the default profile"
            )
        super().set_profile(profile)
        return self

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.output_stride / self.frame_preprocess.scale,)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        nchw = frames_to_nchw(frames)
        image, eff_scale = frame_input(nchw, self.frame_preprocess, specialised=self.specialised)
        probability = self.network(image)[SEGMENTATION_HEAD][:, 0]
        masks = probability > self.fg_threshold
        area = masks.sum((1, 2))
        scores = torch.where(masks, probability, 0.0).sum((1, 2)) / area
        scores = torch.where(area > 0, scores, torch.nan)
        # sleap-nn's extent, in float64 as Python computes it.
        scale = eff_scale.double() * self.frame_preprocess.scale
        stride = self.output_stride
        sizes = [size_of(nchw, 2), size_of(nchw, 3)]
        cells = [
            torch.clamp((torch.round(size.double() * scale).long() + stride - 1) // stride, 1)
            for size in sizes
        ]
        cells = [torch.minimum(n, size_of(masks, d)) for n, d in zip(cells, (1, 2), strict=True)]
        extent = torch.cat([*cells, *sizes]).to(torch.int32)
        return masks, extent.expand(masks.shape[0], 4), scores
