"""Tracing an inference model to ONNX, and embedding sleap-live metadata in the graph.

The graph has one uint8 (batch, height, width, channels) input named "frames"
whose batch, height, width and (unless `dynamic_channels` is off) channel axes are
dynamic, and its instance-list outputs have a dynamic instance axis. A
TensorRT-profile graph has only its batch axis dynamic: it is made for the frame
size and channel count it is traced on.

It uses torch's TorchScript-based exporter (`dynamo=False`): under torch 2.13 it
keeps every shape computed from the input (padding to the stride, `scale_factor`
resizes, `nonzero` instance counts) symbolic, and exports in well under a second.
The torch.export-based exporter specialises the channel axis, needs tens of
seconds, mistranslates `%` on symbolic sizes, and its antialiased `Resize`
disagrees with torch on odd frame sizes. Neither exporter can express torch's
antialiased bilinear downscale with the same numbers, so inference models
implement it with operations that export (see `sleap_live.engines.graph.preprocess`).
"""

from __future__ import annotations

import io

import attrs
import numpy as np
import torch

from sleap_live.engines.errors import ExportError, RuntimeUnavailableError
from sleap_live.engines.export._quiet import first_line, native_stdout_silenced, tracer_notes
from sleap_live.engines.export.verify import Exported, Outputs
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.host.outputs import BATCH_AXIS, INSTANCE_AXIS, output_names, output_spec
from sleap_live.engines.load.metadata import (
    INPUT_NAME,
    METADATA_KEY,
    OUTPUT_LAYOUTS,
    ExportMetadata,
)
from sleap_live.engines.optional import ORT_INSTALL_HINT
from sleap_live.engines.ort_options import session_options


def trace_to_onnx(
    model: InferenceModel, example: np.ndarray, opset: int, *, dynamic_channels: bool
) -> tuple[bytes, tuple[str, ...]]:
    """Traces `model` on `example` frames to an ONNX graph.

    A specialised model (`InferenceModel.set_specialised`) gives a graph for the
    example's height, width and channel count, with only the batch axis dynamic.

    Returns:
        The serialised graph and what the tracer warned about the model.

    Raises:
        ExportError: the exporter failed (an unsupported operator says to try
            TorchScript instead).
    """
    input_axes = {0: BATCH_AXIS}
    if not (model.tensorrt_profile or model.specialised):
        input_axes |= {1: "height", 2: "width"}
        if dynamic_channels:
            input_axes[3] = "channels"
    dynamic_axes: dict[str, dict[int, str]] = {INPUT_NAME: input_axes}
    layout = OUTPUT_LAYOUTS[model.profile]
    for name in model.output_names:
        # The batch axis of a fixed-shape graph's outputs is named so that nothing
        # but the batch is left symbolic; the default graph leaves it to the exporter.
        first = output_spec(name, layout).axes[0]
        if first == INSTANCE_AXIS or (model.tensorrt_profile and first == BATCH_AXIS):
            dynamic_axes[name] = {0: first}
    buffer = io.BytesIO()
    with tracer_notes() as notes, torch.no_grad(), native_stdout_silenced():
        try:
            torch.onnx.export(
                model,
                (torch.from_numpy(example),),
                buffer,
                dynamo=False,
                opset_version=opset,
                input_names=[INPUT_NAME],
                output_names=list(model.output_names),
                dynamic_axes=dynamic_axes,
                do_constant_folding=True,
            )
        except torch.onnx.errors.UnsupportedOperatorError as error:
            raise ExportError(
                f"ONNX export of the {model.info.model_type} model failed: "
                f"{first_line(error)} (try --format torchscript)"
            ) from error
        except Exception as error:  # the exporter raises many kinds of RuntimeError
            raise ExportError(
                f"ONNX export of the {model.info.model_type} model failed: {first_line(error)}"
            ) from error
    return buffer.getvalue(), tuple(notes)


def onnx_exported(onnx_bytes: bytes, notes: tuple[str, ...] = ()) -> Exported:
    """The graph in an ONNX Runtime CPU session, ready to verify.

    Raises:
        RuntimeUnavailableError: no ONNX Runtime build is installed.
    """
    try:
        import onnxruntime as ort
    except ImportError as error:
        raise RuntimeUnavailableError(
            f"verifying an export needs ONNX Runtime ({ORT_INSTALL_HINT}); "
            "or export without verifying (--no-verify)"
        ) from error
    from onnxruntime.capi.onnxruntime_pybind11_state import (  # type: ignore[import-untyped]
        Fail,
        InvalidArgument,
    )

    options = session_options()
    # A graph that refuses a probe frame is an expected outcome, not an error to log.
    options.log_severity_level = 4
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]

    def run(frames: np.ndarray) -> Outputs:
        return dict(zip(names, session.run(None, {INPUT_NAME: frames}), strict=True))

    return Exported(run, refusals=(Fail, InvalidArgument), tracer_notes=notes)


def embed_metadata(onnx_bytes: bytes, metadata: ExportMetadata) -> bytes:
    """The graph with `metadata` in its `metadata_props` and sleap-live as producer."""
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    del model.metadata_props[:]
    model.metadata_props.add(key=METADATA_KEY, value=metadata.to_json())
    model.producer_name = "sleap-live"
    model.producer_version = metadata.sleap_live_version
    onnx.checker.check_model(model)
    return model.SerializeToString()


def embedded_metadata(onnx_bytes: bytes) -> ExportMetadata:
    """The sleap-live metadata embedded in an in-memory ONNX export (`embed_metadata`)."""
    import onnx

    props = {prop.key: prop.value for prop in onnx.load_from_string(onnx_bytes).metadata_props}
    return ExportMetadata.from_json(props[METADATA_KEY], "the ONNX export")


def converted_metadata(
    onnx_bytes: bytes, format: str, profile: str, exporter: dict[str, str]
) -> ExportMetadata:
    """The metadata of an export converted from a model whose ONNX export (the reference
    it is checked against) is `onnx_bytes`: that export's, for `format`, with the
    `profile`'s outputs and the model's own channel count, and not yet verified."""
    reference = embedded_metadata(onnx_bytes)
    return attrs.evolve(
        reference,
        format=format,
        input_channels=(reference.info.input_channels,),
        exporter=exporter,
        verification=None,
        profile=profile,
        output_names=output_names(
            reference.info.model_type,
            OUTPUT_LAYOUTS[profile],
            boxes=bool(reference.info.box_categories),
            embeddings=reference.info.embedding_dim is not None,
        ),
        tensorrt=None,
    )
