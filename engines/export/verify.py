"""Numerical comparison of an export with the torch module it was traced from.

Tracing freezes any Python value computed from a shape, so an export is only
trusted after it has run on frames of more than one size and batch size and
agreed with the torch module's outputs as float32 allows: by the comparison rule
of `sleap_live.engines.host.agreement` (`compare`), which tells float noise (within
the bound `sleap_live.engines.graph.fp32` derives from the graph) and near-ties
(close calls decided the other way, counted) from real disagreements. A
comparison of empty instance lists proves little, so the frames are chosen to
show the model animals where any can be found
(`sleap_live.engines.export.frames.with_animals`); each check records how many
the model found in every frame (`detections_per_frame`), and a frame without any
is compared all the same: a valid export is never refused for lack of animals.

Two kinds of check:

- `verify_batch`: the export must agree. A runtime error or a real disagreement
  is an `ExportError` that says what it saw.
- `takes_channels`: whether the export also converts the other channel count
  (1 vs 3) itself, against torch's outputs on such frames
  (`other_channels_reference`, which torch must find animals in). Disagreement
  is an answer here, not an error, and so is the runtime refusing the input
  (`Exported.refusals`) once the same export has verified on the native channel
  count; anything else raised propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import ExportError
from sleap_live.engines.export._quiet import first_line
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.fp32 import graph_bound, measured_bound
from sleap_live.engines.host.agreement import Agreement, compare_outputs
from sleap_live.engines.host.postprocess import instance_list

Outputs = dict[str, np.ndarray]


@attrs.frozen
class Exported:
    """An export ready to be checked.

    Attributes:
        run: runs the export on uint8 (B, H, W, C) frames; outputs by name.
        refusals: exception types by which its runtime refuses an input the graph
            was not traced for (ONNX Runtime's `Fail`, TorchScript's `RuntimeError`).
        tracer_notes: what the tracer warned about the model, quoted in errors.
    """

    run: Callable[[np.ndarray], Outputs]
    refusals: tuple[type[Exception], ...]
    tracer_notes: tuple[str, ...] = ()


def torch_outputs(model: InferenceModel, frames: np.ndarray) -> Outputs:
    """The torch module's outputs on uint8 (B, H, W, C) frames, as numpy arrays."""
    with torch.inference_mode():
        outputs = model(torch.from_numpy(frames))
    return {name: output.numpy() for name, output in zip(model.output_names, outputs, strict=True)}


def detections_per_frame(outputs: Mapping[str, np.ndarray], batch: int) -> list[int]:
    """How many animals the model found in each frame of a batch.

    Instance outputs (either layout): instances with at least one node found. Bottom-up
    outputs: valid peaks (of any node), since grouping happens on the host. A box
    detector's alone: its boxes (a box top-down model's: its instances). A segmentation
    model's: its masks (a frame with foreground has one).
    """
    if "masks" in outputs:
        return [int(mask.any()) for mask in outputs["masks"][:batch]]
    if "points" not in outputs:
        slots = outputs["peak_valid" if "peak_valid" in outputs else "box_valid"]
        return [int(count) for count in slots.reshape(batch, -1).sum(axis=1)]
    outputs = instance_list(outputs)
    found = ~np.isnan(outputs["points"][..., 0]).all(axis=-1)
    frames = outputs["instance_frame"][found]
    return [int(count) for count in np.bincount(frames, minlength=batch)[:batch]]


def compare(
    model: InferenceModel,
    frames: np.ndarray,
    reference: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
) -> Agreement:
    """The comparison rule for two runs of `model`'s graph on `frames`: the bound from
    the graph first; where that is exceeded, the bound grown by the model's own float32
    error on these frames (`graph.fp32`), so an ill-conditioned graph is not refused
    for its rounding."""
    info, batch = model.info, len(frames)
    agreement = compare_outputs(reference, actual, graph_bound(model), info, batch)
    if agreement.agrees:
        return agreement
    return compare_outputs(reference, actual, measured_bound(model, frames), info, batch)


def verdict(
    agreement: Agreement, reference: Outputs, actual: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    """What a verification record says of one comparison: the outcome, the near-ties
    it counted, the bound, and the largest absolute difference of each output whose
    shape both runs share."""
    return {
        "agreement": agreement.outcome,
        "ties": len(agreement.ties),
        "bound": agreement.bound.describe(),
        "max_abs_diff": max_abs_diffs(reference, actual),
    }


def max_abs_diffs(reference: Outputs, actual: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The largest absolute difference of each output (NaNs excluded) that both runs
    give in one shape."""
    diffs: dict[str, float] = {}
    for name, expected in reference.items():
        got = np.asarray(actual[name])
        if got.shape != expected.shape:
            continue
        delta = np.abs(expected.astype(np.float64) - got.astype(np.float64))
        diffs[name] = float(np.nanmax(delta, initial=0.0)) if delta.size else 0.0
    return diffs


def check_against_onnx_runtime(
    model: InferenceModel,
    actual: Outputs,
    reference: Outputs,
    frames: np.ndarray,
    source: str,
    *,
    export: str,
    runtime: str | None = None,
) -> dict[str, object]:
    """A converted export's outputs (either layout) against ONNX Runtime's on the
    default graph, on `frames`; returns the verification record.

    Args:
        model: the torch inference model both were made from (its bound, its decoding).
        actual: the converted export's outputs, by name.
        reference: ONNX Runtime's outputs of the default graph on the same frames.
        frames: the uint8 (B, H, W, C) frames both ran.
        source: where the frames came from, for the record.
        export: names the export in the error ("the .pt2 program").
        runtime: what ran `actual`, for the record, where it is not torch.

    Raises:
        ExportError: the two disagree (`compare`).
    """
    shape = "×".join(str(n) for n in frames.shape)
    listed = dict(instance_list(actual))
    agreement = compare(model, frames, reference, listed)
    if not agreement.agrees:
        raise ExportError(
            f"{export} differs from ONNX Runtime on {shape} frames: {agreement.summary()}"
        )
    instances = reference.get("instance_frame")
    record: dict[str, object] = {
        "frames": list(frames.shape),
        "instances": None if instances is None else len(instances),
        "against": "ONNX Runtime",
    }
    if runtime is not None:
        record["runtime"] = runtime
    return {**record, "frame_source": source, **verdict(agreement, reference, listed)}


def verify_batch(
    model: InferenceModel,
    exported: Exported,
    frames: np.ndarray,
    *,
    label: str,
    source: str,
) -> dict[str, Any]:
    """Checks the export against the torch module on one batch of frames.

    Args:
        model: the torch inference model.
        exported: the export.
        frames: uint8 (B, H, W, C) frames with the model's native channel count.
        label: names the model in errors ("the topdown model (centroid, ...)").
        source: where the frames came from, recorded in the verification record.

    Returns:
        The verification record: frame shape, instances, detections per frame,
        frame source, the comparison's outcome, near-ties and bound, and the largest
        absolute difference per output.

    Raises:
        ExportError: the export raises on the frames, or its outputs disagree with
            torch's (`compare`); the message says what the comparison met.
    """
    shape = "×".join(str(n) for n in frames.shape)
    reference = torch_outputs(model, frames)
    detections = detections_per_frame(reference, len(frames))
    notes = exported.tracer_notes
    hint = f"; the tracer warned: {' | '.join(notes)}" if notes else ""
    try:
        actual = exported.run(frames)
    except Exception as error:  # every runtime error here is a failed export
        raise ExportError(
            f"the export of {label} fails on {shape} frames that the torch model accepts: "
            f"{first_line(error)}{hint}"
        ) from error
    agreement = compare(model, frames, reference, actual)
    if not agreement.agrees:
        raise ExportError(
            f"the export of {label} differs from the torch model on {shape} frames: "
            f"{agreement.summary()}{hint}"
        )
    instances = instance_list(reference).get("instance_frame")
    return {
        "frames": list(frames.shape),
        "instances": None if instances is None else int(instances.shape[0]),
        "detections": detections,
        "frame_source": source,
        **verdict(agreement, reference, actual),
    }


def other_channels_reference(model: InferenceModel, frames: np.ndarray) -> Outputs | None:
    """The torch model's outputs on `frames` of the other channel count, which
    `takes_channels` compares an export with; None where they show no animals on
    any frame, as no export can then show that it converts them (so the exporter
    traces a graph of one channel count from the start, not twice)."""
    reference = torch_outputs(model, frames)
    return reference if any(detections_per_frame(reference, len(frames))) else None


def takes_channels(
    model: InferenceModel, exported: Exported, frames: np.ndarray, reference: Outputs
) -> bool:
    """Whether the export agrees with torch (`reference`, from
    `other_channels_reference`) on `frames` of the other channel count.

    Call it only after the export verified on the same frames with the native
    channel count, so a refusal can only be about the channel count. The export must
    agree on every frame. Frames without animals are part of ordinary batches (a
    check batch's grown canvas may leave a top-down model none), so they are
    compared rather than refused.

    Raises:
        ExportError: the export raised something other than one of its refusals.
    """
    try:
        actual = exported.run(frames)
    except exported.refusals:
        return False
    except Exception as error:
        raise ExportError(
            f"the export raised on {frames.shape[3]}-channel frames: {first_line(error)}"
        ) from error
    return compare(model, frames, reference, actual).agrees
