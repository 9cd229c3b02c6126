"""`sleap-live export --format web`: a static folder that runs the model in a browser.

onnxruntime-web's wasm build has no float64 kernels, and the default graph computes
its frame-size arithmetic and resize weights in float64 (for any frame size). The
graph of one frame size (`export_graph` with a `frame_shape`: the shape frozen, the
passes that leave the image unchanged at it left out) has no float64 left when it
takes the model's own channel count, and computes the default graph's numbers. So
the page runs one such graph per frame size the export is made for, and converts
the browser's RGB frames to the model's channels itself, as sleap-live's host does.

The folder holds:

- `graphs/HxW.onnx`: the graph of each frame size, each checked against the
  default graph in ONNX Runtime at export time (`verify.compare`);
- `model.onnx`: the default graph (any frame size), verified against torch as for
  `--format onnx`, for other runtimes and as the reference; its metadata, with the
  checks of the size graphs, in `model.onnx.json`;
- `model.json`: what the page needs (skeleton, palette, frame sizes, input, the
  luma weights the host converts colour frames with);
- `index.html`, `app.js` and `skeleton.js`: the page (webcam or video file, skeleton
  drawn over the frames by `skeleton.js`, which the live preview inlines too, fps and
  latency, poses as JSON or CSV);
- `ort/`: onnxruntime-web, copied in (`sleap_live.engines.export.web_runtime`), so
  the page works offline. `sleap-live serve-web FOLDER` serves it on 127.0.0.1.

A frame of a size the export has no graph for is refused on the page, in one line
naming the `--frame-size` to export with. The page decodes instance lists only:
single-instance, centroid and top-down models. Bottom-up grouping and multi-class
identity matching run on the host in sleap-live (`sleap_live.engines.host`), not in
the page, so those model types are refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.errors import ExportError
from sleap_live.engines.export.driver import ExportFolder, ExportFormat, Job
from sleap_live.engines.export.exporter import export_graph, fitted_frames
from sleap_live.engines.export.formats import ExportOptions
from sleap_live.engines.export.frames import verification_frames
from sleap_live.engines.export.onnx import onnx_exported
from sleap_live.engines.export.verify import compare, verdict
from sleap_live.engines.export.web_runtime import (
    ONNXRUNTIME_WEB_VERSION,
    copy_runtime,
    onnxruntime_web_dist,
)
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.host.frames import GRAY_WEIGHTS
from sleap_live.engines.load.metadata import ExportMetadata, sidecar_path

MODEL_FILE = "model.onnx"
GRAPHS_FOLDER = "graphs"
# Without --frame-size: the webcam sizes most often met (VGA, HD), and the size of the
# verification video's frames when one is given.
DEFAULT_FRAME_SIZES = ((480, 640), (720, 1280))
PAGE_FILES = ("index.html", "app.js", "skeleton.js")
# The files every web export holds: the page, the model and what the page reads of it.
WEB_EXPORT_FILES = (*PAGE_FILES, MODEL_FILE, "model.json")
RUNTIME_FOLDER = "ort"
# Model types whose outputs the page decodes (instance lists, no identities).
WEB_MODEL_TYPES = ("single_instance", "centroid", "topdown")


@attrs.frozen
class _Graphs:
    """The graph of each frame size, and the record of its check."""

    sizes: list[tuple[int, int]]
    graphs: dict[tuple[int, int], bytes]
    checks: list[dict[str, Any]]


def _refuse(model: InferenceModel) -> str | None:
    model_type = model.info.model_type
    if model_type in WEB_MODEL_TYPES:
        return None
    drawn = {"bbox": "boxes", "semantic_segmentation": "masks"}
    why = (
        f"the page draws no {drawn[model_type]}"
        if model_type in drawn
        else "its grouping runs on the host"
    )
    return (
        f"a {model_type} model cannot run in the web page, which decodes instance lists "
        f"only ({', '.join(WEB_MODEL_TYPES)}); {why} (use --format onnx)"
    )


def _needs(options: ExportOptions) -> Path:
    options.progress(f"getting onnxruntime-web {ONNXRUNTIME_WEB_VERSION}")
    return onnxruntime_web_dist(notify=options.progress)


def _convert(job: Job) -> _Graphs:
    """The graph of each frame size (`--frame-size`, repeatable; default
    `DEFAULT_FRAME_SIZES` and the size of the verification frames), each checked
    against the reference graph."""
    model, options = job.model, job.options
    channels = model.info.input_channels
    candidates = verification_frames(channels, options.verify_frames, job.paths).frames[:2]
    given_size = None if options.verify_frames is None else candidates.shape[1:3]
    sizes = _frame_sizes(options.frame_sizes, given_size)
    reference = onnx_exported(job.onnx_bytes)
    graphs: dict[tuple[int, int], bytes] = {}
    checks = []
    for height, width in sizes:
        options.progress(f"exporting the graph of {height}x{width} frames")
        graph = export_graph(model, frame_shape=(height, width, channels), opset=options.opset)
        frames = fitted_frames(candidates, (height, width))
        options.progress(f"checking the {height}x{width} graph against the default graph")
        expected, got = reference.run(frames), onnx_exported(graph).run(frames)
        agreement = compare(model, frames, expected, got)
        if not agreement.agrees:
            raise ExportError(
                f"the {height}x{width} graph differs from the default graph: {agreement.summary()}"
            )
        checks.append({"frames": list(frames.shape), **verdict(agreement, expected, got)})
        graphs[(height, width)] = graph
    return _Graphs(sizes, graphs, checks)


def _save(made: _Graphs, folder: Path, job: Job) -> Mapping[str, Any]:
    """Writes the folder (see the module's notes) but the reference graph's metadata,
    whose file gets the size graphs' checks."""
    folder.mkdir()
    (folder / MODEL_FILE).write_bytes(job.onnx_bytes)
    (folder / GRAPHS_FOLDER).mkdir(exist_ok=True)
    for (height, width), graph in made.graphs.items():
        (folder / GRAPHS_FOLDER / f"{height}x{width}.onnx").write_bytes(graph)
    page_document = page_model(job.metadata, made.sizes)
    (folder / "model.json").write_text(json.dumps(page_document, indent=1) + "\n")
    page = resources.files("sleap_live.engines.export") / "web_page"
    for name in PAGE_FILES:
        (folder / name).write_bytes((page / name).read_bytes())
    copy_runtime(job.extra, folder / RUNTIME_FOLDER)
    return {"web_graphs": made.checks}


WEB = ExportFormat(
    "web",
    ExportFolder("a web export", lambda folder: is_web_export(folder)),
    _convert,
    _save,
    needs=_needs,
    refuse=_refuse,
    metadata_file=lambda folder: sidecar_path(folder / MODEL_FILE),
)


def page_model(metadata: ExportMetadata, sizes: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """What the page reads from `model.json`: names, skeleton, colours and the input."""
    from sleap_live.engines.palette import palette_hex

    info = metadata.info
    names = [Path(str(source["path"])).name for source in metadata.sources]
    return {
        "name": "+".join(names) or info.model_type,
        "model_type": info.model_type,
        "nodes": list(info.skeleton.node_names),
        "edges": [list(edge) for edge in info.skeleton.edges],
        "palette": palette_hex(),
        "input_name": metadata.input_name,
        # The size graphs take the model's own channel count; the page converts to it.
        "input_channels": info.input_channels,
        "graphs": {
            f"{height}x{width}": f"{GRAPHS_FOLDER}/{height}x{width}.onnx" for height, width in sizes
        },
        # float32 values as the host's conversion rounds them (exact in a JS double).
        "gray_weights": [float(np.float32(weight)) for weight in GRAY_WEIGHTS],
        "onnxruntime_web": ONNXRUNTIME_WEB_VERSION,
    }


def _frame_sizes(
    given: Sequence[tuple[int, int]], video_size: tuple[int, ...] | None
) -> list[tuple[int, int]]:
    """The frame sizes to make graphs for, each once, in order."""
    sizes = [(int(height), int(width)) for height, width in given]
    if not sizes:
        sizes = list(DEFAULT_FRAME_SIZES)
        if video_size is not None:
            sizes.insert(0, (int(video_size[0]), int(video_size[1])))
    for height, width in sizes:
        if height < 1 or width < 1:
            raise ValueError(f"frame sizes must be at least 1x1, got {height}x{width}")
    return list(dict.fromkeys(sizes))


def is_web_export(folder: Path) -> bool:
    """Whether `folder` holds a web export (`WEB_EXPORT_FILES`)."""
    return all((folder / name).is_file() for name in WEB_EXPORT_FILES)
