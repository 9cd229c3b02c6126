"""`sleap-live export --format openvino`: the verified ONNX export as OpenVINO IR.

The model directories are exported to ONNX in memory and verified against torch
exactly as for `--format onnx`; OpenVINO then reads that graph and saves it as
IR (`model.xml` + `model.bin`) with float32 weights (`ov.save_model` would
otherwise compress them to float16). The sleap-live metadata, with format
"openvino", is embedded as the IR's rt_info `sleap_live` and written beside it as
`<file>.xml.json`, so `load_runner(path.xml)` runs it with `OpenVINORunner`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sleap_live.engines.export.driver import ExportFile, ExportFormat, Job
from sleap_live.engines.load.metadata import METADATA_KEY
from sleap_live.engines.optional import import_openvino


def _convert(job: Job) -> Any:
    return job.extra.Core().read_model(job.onnx_bytes)


def _save(graph: Any, path: Path, job: Job) -> None:
    """Writes the IR: `path` (.xml) and its .bin beside it, float32 weights."""
    graph.set_rt_info(job.metadata.to_json(), [METADATA_KEY])
    job.extra.save_model(graph, str(path), compress_to_fp16=False)


OPENVINO = ExportFormat(
    "openvino",
    ExportFile("model.xml", "an OpenVINO export is an '.xml' file"),
    _convert,
    _save,
    needs=lambda options: import_openvino(),
    indent=2,
)
