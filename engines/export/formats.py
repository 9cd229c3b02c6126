"""`export_model`: model directories to a file of any format `sleap-live export` offers.

One function for every format, so that the command line, scripts and the Python
API export the same way. `FORMAT_TABLE` is the one list of formats: `export_model`
looks the format's exporter up in it, and the command line's choices and default
outputs and the docs' table come from it. A format is one module (most of them an
`ExportFormat` the export driver runs, see `sleap_live.engines.export.driver`; its
docstring says what it writes and how it is checked) and one row here. This module
imports neither torch nor the format's library until an export runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from sleap_live.engines.export.tensorrt import DEFAULT_BATCH_SIZE
from sleap_live.engines.host.frames import Frames
from sleap_live.engines.load.metadata import DEFAULT_OPSET, DEFAULT_PROFILE
from sleap_live.engines.notify import Notify, notice, quiet
from sleap_live.engines.openmp import prefer_passive_wait
from sleap_live.engines.settings import InferenceSettings


@attrs.frozen
class ExportOptions:
    """What `export_model` was asked (see it for each), handed whole to the format's
    exporter, which takes what it needs.

    Attributes:
        format: the `--format` value.
        frame_size: as given, each side an int (tensorrt: with the channels, if given).
    """

    format: str
    opset: int = DEFAULT_OPSET
    verify: bool = True
    verify_frames: Frames | None = None
    settings: InferenceSettings | None = None
    progress: Notify = quiet
    overwrite: bool = False
    profile: str = DEFAULT_PROFILE
    frame_size: tuple[int, ...] | None = None
    frame_sizes: Sequence[tuple[int, int]] = ()
    batch_size: int = DEFAULT_BATCH_SIZE
    precision: str = "fp32"
    device: str = "cuda:0"
    notify: Notify = notice

    @property
    def size(self) -> tuple[int, int] | None:
        """(height, width) of `frame_size`."""
        return None if self.frame_size is None else (self.frame_size[0], self.frame_size[1])

    def trace(self) -> dict[str, Any]:
        """How the ONNX or TorchScript export (`exporter.export_graph`) traces and
        verifies, of these."""
        return {
            "opset": self.opset,
            "verify": self.verify,
            "verify_frames": self.verify_frames,
            "profile": self.profile,
            "frame_size": self.size,
        }


# A format's exporter: the model directories, the output, the options; the export's path.
Exporter = Callable[[Sequence[str | Path], str | Path, ExportOptions], Path]


@attrs.frozen
class FormatRow:
    """One format: its exporter, and its row in the table `sleap-live export --help`
    and the docs print.

    Attributes:
        argument: the `--format` value.
        exporter: "module:name" of its `Exporter` in this package (imported when an
            export runs).
        frame_sizes: how many `--frame-size`s it takes: "none" (a graph of any frame
            size), "one" (the size of its graph) or "many" (a graph each).
        writes: what the export writes, NAME being the model directories' names (a
            folder ends in "/").
        cpu: the runtime that runs it on a CPU ("-": none).
        gpu: the runtime that runs it on a GPU ("-": none).
        inside: what of the inference is inside the exported graph.
        verified: what it is checked against, when, and how closely.
    """

    argument: str
    exporter: str
    frame_sizes: str
    writes: str
    cpu: str
    gpu: str
    inside: str
    verified: str

    @property
    def ending(self) -> str:
        """The default output's ending after NAME (".onnx", "_web")."""
        return self.writes.removeprefix("NAME").rstrip("/")

    def export(self) -> Exporter:
        """The format's exporter (imports its module)."""
        module, _, name = self.exporter.partition(":")
        exporter: Exporter = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        return exporter


def _rows(table: str) -> tuple[FormatRow, ...]:
    """The rows of a table written a line a row, its cells `FormatRow`'s fields in
    order, between " | "."""
    lines = table.strip().splitlines()
    return tuple(FormatRow(*(cell.strip() for cell in line.split(" | "))) for line in lines)


# What `export --help` and docs/export-formats.md print, with FORMAT_NOTE under it.
FORMAT_TABLE = _rows("""
onnx        | exporter:export_traced   | none | NAME.onnx         | ONNX Runtime          | ORT CUDA, TensorRT | any frame size                             | torch, fp32 rule
torchscript | exporter:export_traced   | none | NAME.pt           | torch                 | torch              | any frame size                             | torch, fp32 rule
openvino    | openvino:OPENVINO        | none | NAME.xml          | OpenVINO              | -                  | any frame size                             | torch (as ONNX), fp32 rule
tensorrt    | tensorrt:export_tensorrt | one  | NAME_tensorrt/    | -                     | TensorRT           | one size, slots                            | on its GPU
web         | web:WEB                  | many | NAME_web/         | browser wasm          | WebGPU, opt-in*    | a graph per size, no BU/MC                 | ORT, fp32 rule
pt2         | pt2:PT2                  | one  | NAME.pt2          | torch                 | torch              | one size, any batch, slots                 | ORT, fp32 rule
tflite      | tflite:TFLITE            | one  | NAME.tflite       | LiteRT                | -                  | one size, batch 1, slots, no TC            | LiteRT vs ORT, fp32 rule
coreml      | coreml:COREML            | one  | NAME.mlpackage    | -                     | Core ML (macOS)    | one size, batch 1, float in, slots, no PAF | coremltools checks; not run
saved_model | saved_model:SAVED_MODEL  | one  | NAME_saved_model/ | TensorFlow            | TensorFlow         | one size, batch 1, slots                   | TensorFlow vs ORT, fp32 rule
tfjs        | tfjs:TFJS                | one  | NAME_tfjs/        | TF.js (Node, browser) | TF.js WebGL/WebGPU | one size, batch 1, slots                   | TF.js cpu (Node) vs ORT, fp32 rule
""")  # noqa: E501
FORMATS = {row.argument: row for row in FORMAT_TABLE}
EXPORT_FORMATS = tuple(FORMATS)
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
    progress: Notify = quiet,
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
            one is refused before any work (`output_rule.claim_output`).

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
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r} (expected one of {EXPORT_FORMATS})")
    prefer_passive_wait()  # before the exporter loads torch (see `sleap_live.engines.openmp`)
    paths = [models] if isinstance(models, (str, Path)) else list(models)
    options = ExportOptions(
        format, opset, verify, verify_frames, settings, progress, overwrite, profile,
        None if frame_size is None else tuple(int(n) for n in frame_size),
        frame_sizes, batch_size, precision, device, notify,
    )  # fmt: skip
    return FORMATS[format].export()(paths, output, options)
