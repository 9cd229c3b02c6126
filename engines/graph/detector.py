"""A box detector alone: frames to each frame's boxes, as sleap-nn predict gives them.

sleap-nn 0.3.5 runs a `bbox_centernet` directory given alone with `BBoxLayer`
(`inference/layers/bbox.py`): the detector's preprocessing, network and CenterNet
decoding, the boxes mapped back to frame pixels and clipped to the frame. That is
`sleap_live.engines.graph.boxes.CenterNetStage`, the stage that also seeds a
box top-down model; this model hands its slots out as they are (`BOX_OUTPUTS`,
the same in both profiles), the empty ones NaN (category -1) as sleap-nn pads
them, and the host reads each frame's filled slots in order
(`sleap_live.engines.host.postprocess.decode_boxes`).

Its threshold is sleap-nn's `peak_threshold` (the detector is the only stage) and
its slots sleap-nn's `max_instances` (100 when unset). The model's type is "bbox"
whatever the detector's style, since the outputs are the same.
"""

from __future__ import annotations

from typing import Any

import torch

from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.boxes import CENTER_HEAD, CenterNetStage
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import DEFAULT_PEAK_THRESHOLD
from sleap_live.engines.graph.preprocess import PreprocessConfig, frame_values, frames_to_nchw
from sleap_live.engines.load.spec import ModelSpec, check_model_type
from sleap_live.engines.types import ModelInfo, Skeleton


class BoxDetectorModel(InferenceModel):
    """A `bbox_centernet` detector alone, uint8 frames to `BOX_OUTPUTS`.

    Args:
        network: module with the detector's three heads.
        preprocess: the detector's preprocessing.
        skeleton: the training skeleton, recorded for the files written (a
            detector's frames hold no instances).
        categories: the centre head's categories, in channel order.
        output_stride: stride of the detector's maps.
        max_instances: box slots per frame; None: sleap-nn's 100.
        peak_threshold: least score of a box.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        preprocess: PreprocessConfig,
        skeleton: Skeleton,
        categories: tuple[str, ...],
        output_stride: int,
        *,
        max_instances: int | None = None,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
    ) -> None:
        super().__init__()
        self.frame_preprocess = preprocess
        self.detector = CenterNetStage(
            network, preprocess, output_stride, max_instances, peak_threshold
        )
        self.info = ModelInfo(
            model_type="bbox",
            skeleton=skeleton,
            input_channels=preprocess.in_channels,
            max_instances=self.detector.max_detections,
            class_names=categories,
            peak_threshold=peak_threshold,
        )

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, network: torch.nn.Module | None = None, **options: Any
    ) -> BoxDetectorModel:
        """The detector sleap-nn predict runs from a `bbox_centernet` directory alone.

        Raises:
            ModelConfigError: `spec` is not a `bbox_centernet` detector.
        """
        check_model_type(spec, "bbox_centernet")
        head = spec.head(CENTER_HEAD)
        return cls(
            load_model_network(spec) if network is None else network,
            PreprocessConfig.from_spec(spec),
            spec.skeleton,
            head.classes,
            head.output_stride,
            **options,
        )

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.detector.cell_px,)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.tensorrt_profile:
            boxes, scores, classes, valid = self.detector.values(frame_values(frames))
        else:
            boxes, scores, classes, valid = self.detector(frames_to_nchw(frames), self.specialised)
        return (
            valid,
            torch.where(valid[..., None], boxes, float("nan")),
            torch.where(valid, scores, float("nan")),
            torch.where(valid, classes, -1).to(torch.int32),
        )
