"""A box detector alone: frames to each frame's boxes, as sleap-nn predict gives them.

sleap-nn 0.3.5 runs a `bbox_centernet` or `bbox_ssd` directory given alone with
`BBoxLayer` (`inference/layers/bbox.py`): the detector's preprocessing, network and
decoding (CenterNet's peaks, or SSD's anchors and NMS), the boxes mapped back to
frame pixels and clipped to the frame. That is a
`sleap_live.engines.graph.boxes.BoxStage` (`CenterNetStage`, which also seeds a
box top-down model, or `sleap_live.engines.graph.ssd.SSDStage`); this model hands
its slots out as they are (`BOX_OUTPUTS`, the same in both profiles), the empty
ones NaN (category -1) as sleap-nn pads them, and the host reads each frame's
filled slots in order (`sleap_live.engines.host.postprocess.decode_boxes`).

Its threshold is sleap-nn's `peak_threshold` (the detector is the only stage) and
its slots sleap-nn's `max_instances` (100 when unset). The model's type is "bbox"
whatever the detector's style, since the outputs are the same.
"""

from __future__ import annotations

import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.boxes import CENTER_HEAD, BoxStage, CenterNetStage
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import DEFAULT_PEAK_THRESHOLD
from sleap_live.engines.graph.preprocess import PreprocessConfig, frame_values, frames_to_nchw
from sleap_live.engines.graph.ssd import SSD_HEAD, SSDStage
from sleap_live.engines.load.spec import ModelSpec
from sleap_live.engines.types import ModelInfo, Skeleton


class BoxDetectorModel(InferenceModel):
    """A box detector alone, uint8 frames to `BOX_OUTPUTS`.

    Args:
        detector: the detector's stage (network, preprocessing, decoding).
        skeleton: the training skeleton, recorded for the files written (a
            detector's frames hold no instances).
        categories: the detector's categories, in class-index order.
    """

    def __init__(self, detector: BoxStage, skeleton: Skeleton, categories: tuple[str, ...]) -> None:
        super().__init__()
        self.frame_preprocess = detector.preprocess
        self.detector = detector
        self.info = ModelInfo(
            model_type="bbox",
            skeleton=skeleton,
            input_channels=detector.preprocess.in_channels,
            max_instances=detector.max_detections,
            class_names=categories,
            peak_threshold=detector.threshold,
        )

    @classmethod
    def from_spec(
        cls,
        spec: ModelSpec,
        network: torch.nn.Module | None = None,
        *,
        max_instances: int | None = None,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
    ) -> BoxDetectorModel:
        """The detector sleap-nn predict runs from a `bbox_centernet` or `bbox_ssd`
        directory alone, with `max_instances` slots per frame (None: sleap-nn's 100)
        and `peak_threshold` the least score of a box.

        Raises:
            ModelConfigError: `spec` is not a box detector.
        """
        network = load_model_network(spec) if network is None else network
        preprocess = PreprocessConfig.from_spec(spec)
        detector: BoxStage
        if spec.model_type == "bbox_centernet":
            head = spec.head(CENTER_HEAD)
            detector = CenterNetStage(
                network, preprocess, head.output_stride, max_instances, peak_threshold
            )
        elif spec.model_type == "bbox_ssd":
            head = spec.head(SSD_HEAD)
            assert head.anchors is not None  # the config reader sets an SSD head's
            detector = SSDStage(network, preprocess, head.anchors, max_instances, peak_threshold)
        else:
            raise ModelConfigError(
                f"{spec.config_path}: a {spec.model_type} model, not a box detector"
            )
        return cls(detector, spec.skeleton, head.classes)

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
