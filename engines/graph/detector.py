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

from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.boxes import BoxStage, CenterNetStage, box_outputs
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import DEFAULT_PEAK_THRESHOLD
from sleap_live.engines.graph.preprocess import PreprocessConfig, frame_values, frames_to_nchw
from sleap_live.engines.graph.ssd import SSDStage
from sleap_live.engines.load.spec import HeadSpec, ModelSpec, check_box_detector
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
        check_box_detector(spec)
        network = load_model_network(spec) if network is None else network
        detector = box_stage(
            network, PreprocessConfig.from_spec(spec), spec.heads[0], max_instances, peak_threshold
        )
        return cls(detector, spec.skeleton, spec.heads[0].classes)

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.detector.cell_px,)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.tensorrt_profile:
            boxes, scores, classes, valid = self.detector.values(frame_values(frames))
        else:
            boxes, scores, classes, valid = self.detector(frames_to_nchw(frames), self.specialised)
        return box_outputs(boxes, scores, classes, valid)


def box_stage(
    network: torch.nn.Module,
    preprocess: PreprocessConfig,
    head: HeadSpec,
    max_detections: int | None,
    threshold: float,
) -> BoxStage:
    """A box detector's stage, from its first head: `SSDStage` for an SSD head,
    else `CenterNetStage` (its centre head).

    Args:
        network: the detector's network.
        preprocess: its preprocessing.
        head: its first head (`spec.heads[0]`).
        max_detections: slots per frame; None: sleap-nn's 100.
        threshold: least score of a box.
    """
    if head.anchors is not None:
        return SSDStage(network, preprocess, head.anchors, max_detections, threshold)
    return CenterNetStage(network, preprocess, head.output_stride, max_detections, threshold)
