"""`sleap-live export --format openvino`: the verified ONNX export as OpenVINO IR.

The model directories are exported to ONNX in memory and verified against torch
exactly as for `--format onnx`; OpenVINO then reads that graph and saves it as
IR (`model.xml` + `model.bin`) with float32 weights (`ov.save_model` would
otherwise compress them to float16). The sleap-live metadata, with format
"openvino", is embedded as the IR's rt_info `sleap_live` and written beside it as
`<file>.xml.json`, so `load_runner(path.xml)` runs it with `OpenVINORunner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from sleap_live.engines.export.exporter import Frames, export_file, export_onnx_bytes
from sleap_live.engines.export.onnx import embedded_metadata
from sleap_live.engines.load.metadata import (
    DEFAULT_OPSET,
    METADATA_KEY,
    sidecar_path,
)
from sleap_live.engines.notify import Notify
from sleap_live.engines.optional import import_openvino
from sleap_live.engines.settings import InferenceSettings
from sleap_live.stream.outputs.staging import staged_file

FORMAT = "openvino"
SUFFIX = ".xml"
FILE_NAME = "model.xml"


def export_openvino(
    paths: Sequence[str | Path],
    output: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    verify_frames: Frames | None = None,
    progress: Notify | None = None,
    settings: InferenceSettings | None = None,
    overwrite: bool = False,
) -> Path:
    """Exports one or two model directories to OpenVINO IR, verified as ONNX first.

    Args:
        paths: a model directory, or a centroid and a centered-instance directory.
        output: the `.xml` file to write (its `.bin` goes beside it), or a
            directory to write `model.xml` into.
        opset, verify, verify_frames, progress, settings, overwrite: as for `export_model`.

    Returns:
        The path of the `.xml` file.

    Raises:
        RuntimeUnavailableError: OpenVINO is not installed.
        ValueError: `output` is a file whose suffix is not `.xml`.
        ModelNotFoundError, ModelConfigError, CheckpointError, ExportError: as for
            `export_model`.
    """
    from sleap_live.engines.graph.build import load_inference_model

    ov = import_openvino()
    path = export_file(
        output, FILE_NAME, f"an OpenVINO export is an '{SUFFIX}' file", overwrite=overwrite
    )
    notify = progress or (lambda _: None)
    notify("loading model")
    model = load_inference_model(paths, settings)
    onnx_bytes = export_onnx_bytes(
        model,
        opset=opset,
        verify=verify,
        verify_frames=verify_frames,
        sources=paths,
        progress=progress,
    )
    notify(f"writing {path}")
    graph = ov.Core().read_model(onnx_bytes)
    metadata = attrs.evolve(embedded_metadata(onnx_bytes), format=FORMAT)
    graph.set_rt_info(metadata.to_json(), [METADATA_KEY])
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_file(path, "the export") as staged:  # model.xml, model.bin beside it
        ov.save_model(graph, str(staged), compress_to_fp16=False)
        sidecar_path(staged).write_text(metadata.to_json() + "\n")
    return path
