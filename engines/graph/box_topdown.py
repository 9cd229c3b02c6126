"""Top-down inference seeded by a box detector instead of a centroid model.

Reproduces sleap-nn 0.3.5's detector-seeded top-down predictor
(`inference/predictor.py` `_attach_bbox_stage`, `inference/layers/bbox.py`
`BBoxStageLayer`, `inference/layers/topdown.py` `TopDownLayer.predict`) for a
`bbox_centernet` or `bbox_ssd` detector and a centered-instance or multi-class
top-down model trained on fixed crops:

1. The detector (`sleap_live.engines.graph.boxes`, `sleap_live.engines.graph.ssd`)
   finds each frame's boxes in
   frame pixels; each box's centre stands in for a centroid and its score for
   the centroid's confidence.
2. The frames, with their own channels, are size-matched to the centered-instance
   model's `max_height` and `max_width` (sleap-nn's `crop_max_hw`, from that
   model's training config alone), and crops of its crop size are cut around the
   centres times that size matcher's scale, as for a centroid
   (`sleap_live.engines.graph.crops`).
3. The centered-instance stage is `TopDownModel`'s (`MultiClassTopDownModel`'s,
   with its class vectors, for `BoxMultiClassTopDownModel`).

Instances come out frame by frame, highest box score first, scored by their box's
score; their outputs are those of the top-down model of the same instance model. Models trained
on box-scaled crops (`crop_mode: bbox`) are refused when their config is read.
The TensorRT profile (`max_instances` slots per frame) crops every slot: the
frame's first `max_instances` valid boxes, highest score first.

The graph also outputs the boxes that seeded the crops (`BOX_OUTPUTS`, after the
instance outputs): sleap-nn 0.3.5 writes every detection that seeded a crop
(`TopDownLayer.predict` keeps `pred_bboxes` where the centroid was valid) beside
the instances in `LabeledFrame.bboxes`, whether or not its instance found a
node, with its detector score and category, in frame pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.boxes import box_centres, box_outputs
from sleap_live.engines.graph.detector import box_stage
from sleap_live.engines.graph.networks import load_model_network
from sleap_live.engines.graph.peaks import DEFAULT_PATCH_SIZE, DEFAULT_PEAK_THRESHOLD
from sleap_live.engines.graph.preprocess import (
    PreprocessConfig,
    frame_values,
    frames_to_nchw,
    size_matched_values,
    sizematch,
)
from sleap_live.engines.graph.resize import static_size
from sleap_live.engines.graph.topdown import INSTANCE_HEAD, MultiClassTopDownModel, TopDownModel
from sleap_live.engines.load.spec import (
    HeadSpec,
    ModelSpec,
    check_box_detector,
    check_model_type,
)
from sleap_live.engines.settings import check_slots
from sleap_live.engines.types import ModelInfo, Skeleton


class BoxTopDownModel(TopDownModel):
    """A box detector + centered-instance pair, uint8 frames to `INSTANCE_OUTPUTS`
    (`BoxMultiClassTopDownModel`: a multi-class top-down model's) and the detector's
    `BOX_OUTPUTS`.

    Args:
        detector_network: the detector's network.
        instance_network: module with a `CenteredInstanceConfmapsHead` output.
        detector_preprocess: frame preprocessing for the detector.
        instance_preprocess: crop preprocessing for the instance model; only its
            `in_channels`, `max_stride` and `scale` apply.
        skeleton: the instance model's skeleton.
        detector_head: the detector's first head (its centre head, or its SSD head).
        instance_stride: stride of the instance confidence maps.
        crop_size: side of the square crops.
        box_categories: the detector's categories, in channel order.
        crop_max_height, crop_max_width: the size matcher the crops are cut after
            (the instance model's `max_height` and `max_width`).
        max_instances: most boxes per frame; None: sleap-nn's 100.
        peak_threshold: threshold of the instance stage, and of the detector's
            scores unless `centroid_peak_threshold` is given (sleap-nn's first
            stage threshold).
        centroid_peak_threshold: threshold of the detector's scores.
        refine: integral refinement of the instance stage.
        patch_size: integral refinement window.
    """

    model_type = "topdown"

    def __init__(
        self,
        detector_network: torch.nn.Module,
        instance_network: torch.nn.Module,
        detector_preprocess: PreprocessConfig,
        instance_preprocess: PreprocessConfig,
        skeleton: Skeleton,
        detector_head: HeadSpec,
        instance_stride: int,
        crop_size: int,
        box_categories: Sequence[str],
        *,
        crop_max_height: int | None = None,
        crop_max_width: int | None = None,
        max_instances: int | None = None,
        peak_threshold: float = DEFAULT_PEAK_THRESHOLD,
        centroid_peak_threshold: float | None = None,
        refine: bool = True,
        patch_size: int = DEFAULT_PATCH_SIZE,
    ) -> None:
        # `TopDownModel.__init__` builds a centroid stage; this model has a detector.
        InferenceModel.__init__(self)
        self.frame_preprocess = detector_preprocess
        self.detector = box_stage(
            detector_network,
            detector_preprocess,
            detector_head,
            max_instances,
            peak_threshold if centroid_peak_threshold is None else centroid_peak_threshold,
        )
        self.crop_max_height = crop_max_height
        self.crop_max_width = crop_max_width
        # The TensorRT profile's slots per frame (`specialised.SpecialisedModel` sets it
        # for its trace); the detector keeps its own `max_detections`.
        self.max_instances = max_instances
        self._set_instance_stage(
            instance_network,
            instance_preprocess,
            instance_stride,
            crop_size,
            peak_threshold,
            refine,
            patch_size,
            instance_sleap1=False,
        )
        self.info = ModelInfo(
            model_type=self.model_type,
            skeleton=skeleton,
            input_channels=detector_preprocess.in_channels,
            max_instances=max_instances,
            peak_threshold=peak_threshold,
            box_categories=tuple(box_categories),
        )

    @classmethod
    def from_box_specs(
        cls,
        detector: ModelSpec,
        instance: ModelSpec,
        detector_network: torch.nn.Module | None = None,
        instance_network: torch.nn.Module | None = None,
        **options: Any,
    ) -> BoxTopDownModel:
        """The pair sleap-nn predict builds from a detector and an instance directory.

        Each model keeps its own preprocessing; the crops' size matcher is the
        instance model's.

        Raises:
            ModelConfigError: the directories are not a box detector and a
                centered-instance model, or the instance model is a SLEAP 1.x model.
        """
        check_box_detector(detector)
        check_model_type(instance, cls._instance_type())
        if instance.legacy is not None:
            raise ModelConfigError(
                f"{instance.path}: a SLEAP 1.x {instance.model_type} model does not pair with "
                "a sleap-nn box detector"
            )
        if instance.preprocess.crop_size is None:
            raise ModelConfigError(f"{instance.config_path}: the model has no crop size")
        return cls(
            load_model_network(detector) if detector_network is None else detector_network,
            load_model_network(instance) if instance_network is None else instance_network,
            PreprocessConfig.from_spec(detector),
            PreprocessConfig.from_spec(instance),
            instance.skeleton,
            detector.heads[0],
            instance.head(INSTANCE_HEAD).output_stride,
            instance.preprocess.crop_size,
            detector.heads[0].classes,
            crop_max_height=instance.preprocess.max_height,
            crop_max_width=instance.preprocess.max_width,
            **cls._spec_options(instance),
            **options,
        )

    def peak_cells_px(self) -> tuple[float, ...]:
        return (self.detector.cell_px, self.instance_stride / self.instance_preprocess.scale)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.tensorrt_profile:
            return self._slots_forward(frames)
        raw = frames_to_nchw(frames)
        boxes, scores, classes, valid = self.detector(raw, self.specialised)
        instance_frame, slot = torch.nonzero(valid).unbind(1)
        centres = box_centres(boxes[instance_frame, slot])
        values = scores[instance_frame, slot]
        sized, eff_scale = self._crop_frames(raw)
        points, point_scores, heads = self._instances(
            sized.permute(0, 2, 3, 1), instance_frame, centres, eff_scale
        )
        return (
            instance_frame,
            points,
            point_scores,
            values,
            *self._extra_outputs(heads),
            *box_outputs(boxes, scores, classes, valid),
        )

    def _slots_forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The TensorRT profile: the first `max_instances` boxes' slots are all cropped.

        Raises:
            ModelConfigError: no `max_instances`, or a detector with channel
                coercion (sleap-nn crops the frames as decoded, which this graph
                does not take).
        """
        check_slots(self.model_type, self.max_instances)
        assert self.max_instances is not None
        preprocess = self.detector.preprocess
        if preprocess.ensure_rgb or preprocess.ensure_grayscale:
            raise ModelConfigError(
                "a top-down model whose box detector has ensure_rgb or ensure_grayscale "
                "crops the frames as decoded, which the tensorrt profile does not take; "
                "export the default profile"
            )
        raw = frame_values(frames)
        boxes, values, classes, valid = self.detector.slots(raw, self.max_instances)
        centres = torch.where(valid[..., None], box_centres(boxes), 0.0)
        sized, eff_scale = self._crop_frames(raw)
        instance_frame = torch.arange(valid.shape[0], device=valid.device)
        instance_frame = instance_frame.repeat_interleave(self.max_instances)
        points, scores, heads = self._instances(
            sized.permute(0, 2, 3, 1), instance_frame, centres.reshape(-1, 2), eff_scale
        )
        slotted = self._slotted(valid, values, points, scores, heads)
        return (*slotted, *box_outputs(boxes, values, classes, valid))

    def _crop_frames(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The frames the crops are cut from, size-matched to the instance model's
        `max_height` and `max_width`, and that size matcher's scale."""
        if self.crop_max_height is None and self.crop_max_width is None:
            return raw, torch.ones(1, dtype=torch.float32, device=raw.device)
        if not self.tensorrt_profile:
            return sizematch(
                raw, self.crop_max_height, self.crop_max_width, specialised=self.specialised
            )
        crop_frames = PreprocessConfig(
            in_channels=static_size(raw, 1),
            max_height=self.crop_max_height,
            max_width=self.crop_max_width,
        )
        return size_matched_values(raw, crop_frames)


class BoxMultiClassTopDownModel(MultiClassTopDownModel, BoxTopDownModel):
    """A box detector + multi-class top-down pair.

    Outputs `MULTI_CLASS_TOPDOWN_OUTPUTS` as `MultiClassTopDownModel` does (its
    class vectors, identities assigned per frame on the host, the crops no class
    was assigned to kept, as sleap-nn keeps them), then the detector's
    `BOX_OUTPUTS`; takes `BoxTopDownModel`'s
    arguments plus `class_names`.
    """
