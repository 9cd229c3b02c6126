"""`export_model`: model directories to a file of any format `sleap-live export` offers.

One function for every format, so that the command line, scripts and the Python
API export the same way:

- "onnx": a verified ONNX graph (`.onnx`), any frame size (or, with
  `profile="tensorrt"`, one `frame_size`); see `sleap_live.engines.export.exporter`;
- "torchscript": a verified TorchScript module (`.pt`);
- "openvino": the verified ONNX graph as OpenVINO IR (`.xml` + `.bin`);
  see `sleap_live.engines.export.openvino`;
- "tensorrt": a directory with the "tensorrt" profile ONNX graph for one
  `frame_size` and its engine built on this machine's GPU; see
  `sleap_live.engines.export.tensorrt`;
- "web": a static folder (page, ONNX graph, onnxruntime-web) that runs the model
  in a browser; see `sleap_live.engines.export.web`;
- "pt2": a `torch.export` program (`.pt2`, `torch.export.load`); see
  `sleap_live.engines.export.pt2`;
- "tflite": a LiteRT (TFLite) flatbuffer (`.tflite`) converted by litert-torch; see
  `sleap_live.engines.export.tflite`;
- "coreml": a Core ML program (`.mlpackage`) converted by coremltools; see
  `sleap_live.engines.export.coreml`;
- "saved_model": a TensorFlow SavedModel folder of plain TensorFlow operations; see
  `sleap_live.engines.export.saved_model`;
- "tfjs": a TF.js graph model folder (`model.json` and weights) converted from that
  SavedModel by tensorflowjs; see `sleap_live.engines.export.tfjs`.

Each writes the export's metadata beside it (`<file>.json`). This module imports
neither torch nor the format's library until an export runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.export.tensorrt import DEFAULT_BATCH_SIZE
from sleap_live.engines.host.frames import Frames
from sleap_live.engines.load.metadata import DEFAULT_OPSET, DEFAULT_PROFILE
from sleap_live.engines.notify import Notify, notice
from sleap_live.engines.openmp import prefer_passive_wait
from sleap_live.engines.settings import InferenceSettings

EXPORT_FORMATS = (
    "onnx", "torchscript", "openvino", "tensorrt", "web", "pt2", "tflite", "coreml",
    "saved_model", "tfjs",
)  # fmt: skip


@attrs.frozen
class FormatRow:
    """One format in the table `sleap-live export --help` and the docs print.

    Attributes:
        argument: the `--format` value.
        writes: what the export writes, NAME being the model directories' names.
        cpu: the runtime that runs it on a CPU ("-": none).
        gpu: the runtime that runs it on a GPU ("-": none).
        inside: what of the inference is inside the exported graph.
        verified: what it is checked against, when, and how closely.
    """

    argument: str
    writes: str
    cpu: str
    gpu: str
    inside: str
    verified: str


# What `export --help` and docs/export-formats.md print, with FORMAT_NOTE under it.
FORMAT_TABLE = (
    FormatRow("onnx", "NAME.onnx", "ONNX Runtime", "ORT CUDA, TensorRT", "any frame size",
              "torch, fp32 rule"),
    FormatRow("torchscript", "NAME.pt", "torch", "torch", "any frame size", "torch, fp32 rule"),
    FormatRow("openvino", "NAME.xml", "OpenVINO", "-", "any frame size",
              "torch (as ONNX), fp32 rule"),
    FormatRow("tensorrt", "NAME_tensorrt/", "-", "TensorRT", "one size, slots",
              "on its GPU"),
    FormatRow("web", "NAME_web/", "browser wasm", "WebGPU, opt-in*", "a graph per size, no BU/MC",
              "ORT, fp32 rule"),
    FormatRow("pt2", "NAME.pt2", "torch", "torch", "one size, any batch, slots",
              "ORT, fp32 rule"),
    FormatRow("tflite", "NAME.tflite", "LiteRT", "-", "one size, batch 1, slots, no TC",
              "LiteRT vs ORT, fp32 rule"),
    FormatRow("coreml", "NAME.mlpackage", "-", "Core ML (macOS)",
              "one size, batch 1, float in, slots, no PAF", "coremltools checks; not run"),
    FormatRow("saved_model", "NAME_saved_model/", "TensorFlow", "TensorFlow",
              "one size, batch 1, slots", "TensorFlow vs ORT, fp32 rule"),
    FormatRow("tfjs", "NAME_tfjs/", "TF.js (Node, browser)", "TF.js WebGL/WebGPU",
              "one size, batch 1, slots", "TF.js cpu (Node) vs ORT, fp32 rule"),
)  # fmt: skip
FORMAT_NOTE = (
    "Every graph holds preprocessing, network, peaks and crops; bottom-up grouping and "
    "multi-class identities run on the host. slots: centroid and top-down models give "
    "--max-instances fixed instance slots per frame. BU/MC: bottom-up and multi-class "
    "models, refused. ORT: ONNX Runtime on the onnx graph (web: in headless Chromium, by "
    "the tests). *WebGPU (?backend=webgpu) starts on Chromium's software adapter but differed "
    "from ONNX Runtime there: not verified. TC: networks with transposed convolutions, "
    "refused. PAF: bottom-up models with part affinity fields, refused. float in: uint8 "
    "values as float32. coreml: its prediction needs macOS and was not run. saved_model, "
    "tfjs: plain TensorFlow operations, every model type; a graph with an operation they "
    "have no form for would be refused, named. tfjs: verified on TF.js's cpu backend in Node "
    "(from npm); its WebGL/WebGPU backends are not verified. Every check is at export time "
    "unless said. fp32 rule: float32 noise within the bound derived from the graph passes, "
    "near-ties pass and are counted, anything else fails (docs/accuracy.md)."
)


def export_model(
    models: str | Path | Sequence[str | Path],
    output: str | Path,
    *,
    format: str = "onnx",
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    verify_frames: Frames | None = None,
    settings: InferenceSettings | None = None,
    progress: Notify | None = None,
    profile: str = DEFAULT_PROFILE,
    frame_size: tuple[int, ...] | None = None,
    frame_sizes: Sequence[tuple[int, int]] = (),
    batch_size: int = DEFAULT_BATCH_SIZE,
    precision: str = "fp32",
    device: str = "cuda:0",
    notify: Notify = notice,
    overwrite: bool = False,
) -> Path:
    """Exports one or two sleap-nn model directories to `format`, verified against torch.

    Args:
        models: a model directory, or a centroid and a centered-instance directory
            (in any order) for a top-down model.
        output: the file to write (`.onnx`, `.pt`, `.xml`, `.pt2`, `.tflite`,
            `.mlpackage`), or a directory to write `model.<suffix>` into; for
            "tensorrt", "web", "saved_model" and "tfjs", the export folder.
        format: one of `EXPORT_FORMATS`.
        opset: ONNX opset version.
        verify: compare the export with the torch model on frames with animals.
        verify_frames: uint8 (N, H, W, C) candidate frames, searched for animals;
            without them the model directories' training labels are used, then
            synthetic frames (see `sleap_live.engines.export.frames`).
        settings: the inference settings built into the graph and recorded in
            its metadata (default: sleap-nn predict's).
        progress: told, in one line, what each step is doing (a status display).
        profile: "onnx" and "torchscript": "default" (any frame size, instance
            lists) or "tensorrt" (ONNX only: one frame size, fixed instance slots).
        frame_size: (height, width) of a "tensorrt" profile graph, or of the frames
            "pt2", "tflite", "coreml", "saved_model" and "tfjs" run (default: the
            verification frames');
            for "tensorrt", (height, width) or (height,
            width, channels) of the stream's frames (required).
        frame_sizes: "web": (height, width) of each frame size the page runs
            (default: 480x640, 720x1280 and the verification frames' size).
        batch_size: "tensorrt": the engine's largest batch.
        precision: "tensorrt": "fp32" or "fp16".
        device: "tensorrt": the GPU to build on.
        notify: "tensorrt": told about engines rebuilt and files not written.
        overwrite: replace an existing export at `output` (a "tensorrt" export
            folder, to add another GPU's engine, too); without it an existing
            one is refused before any work (`guard.claim_output`).

    Returns:
        The path of the export (for "tensorrt", of the engine file).

    Raises:
        ValueError: an unknown format, an output whose suffix does not fit it,
            malformed `verify_frames`, or "tensorrt" without a `frame_size`.
        ModelNotFoundError, ModelConfigError, CheckpointError: the model
            directories cannot be loaded.
        ExportError: the export failed or does not match the torch model (frames
            without animals are a one-line note, not an error).
        RuntimeUnavailableError: "openvino" or "tensorrt" without its library
            (or, for "tensorrt", without a CUDA GPU); "web" without onnxruntime-web
            (no npm to fetch it); "tflite", "coreml", "saved_model" or "tfjs"
            without its converter ("tfjs", verifying: without Node.js or TF.js).
        ModelConfigError: a model type the format cannot hold ("web": bottom-up
            and multi-class models; "tflite": networks with transposed
            convolutions; "coreml": bottom-up models with part affinity fields;
            "saved_model" and "tfjs": a graph with an operation they have no
            TensorFlow form for).
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r} (expected one of {EXPORT_FORMATS})")
    prefer_passive_wait()  # before the exporter loads torch (see `sleap_live.engines.openmp`)
    paths = [models] if isinstance(models, (str, Path)) else list(models)
    common: dict[str, Any] = {
        "opset": opset,
        "verify": verify,
        "verify_frames": verify_frames,
        "settings": settings,
        "progress": progress,
        "overwrite": overwrite,
    }
    if format == "tensorrt":
        if frame_size is None:
            raise ValueError("a TensorRT export needs frame_size (height, width[, channels])")
        from sleap_live.engines.export.tensorrt import export_tensorrt

        frame = tuple(frame_size)
        return export_tensorrt(
            paths, output, frame=frame, batch_size=batch_size, precision=precision,
            device=device, notify=notify, **common,
        )  # fmt: skip
    if format == "web":
        from sleap_live.engines.export.web import export_web

        return export_web(paths, output, frame_sizes=frame_sizes, **common)
    if format == "pt2":
        from sleap_live.engines.export.pt2 import export_pt2

        size = None if frame_size is None else (int(frame_size[0]), int(frame_size[1]))
        return export_pt2(paths, output, frame_size=size, **common)
    if format in ("saved_model", "tfjs"):
        size = None if frame_size is None else (int(frame_size[0]), int(frame_size[1]))
        if format == "saved_model":
            from sleap_live.engines.export.saved_model import export_saved_model

            return export_saved_model(paths, output, frame_size=size, **common)
        from sleap_live.engines.export.tfjs import export_tfjs

        return export_tfjs(paths, output, frame_size=size, **common)
    if format in ("tflite", "coreml"):
        size = None if frame_size is None else (int(frame_size[0]), int(frame_size[1]))
        if format == "tflite":
            from sleap_live.engines.export.tflite import export_tflite

            return export_tflite(paths, output, frame_size=size, **common)
        from sleap_live.engines.export.coreml import export_coreml

        return export_coreml(paths, output, frame_size=size, **common)
    if format == "openvino":
        from sleap_live.engines.export.openvino import export_openvino

        return export_openvino(paths, output, **common)
    from sleap_live.engines.export.exporter import export_model_dirs

    size = None if frame_size is None else (int(frame_size[0]), int(frame_size[1]))
    return export_model_dirs(
        paths, output, format=format, profile=profile, frame_size=size, **common
    )
