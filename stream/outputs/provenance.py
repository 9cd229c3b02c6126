"""What a run's outputs say about how they were made: `run_provenance`, `model_records`.

Every pose file stores this dictionary (see `exports` for where each format keeps
it): the sleap-live version, each model's path and the sha256 of its files, the
engine and device, the model's inference settings, the run's settings and the
recording, if any.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sleap_live.engines.load.export_cache import package_version
from sleap_live.engines.runners.base import Runner

# Files of a model directory that are the model (weights, configs, exports);
# training labels and logs beside them are left out of the hashes.
MODEL_FILE_SUFFIXES = frozenset(
    {".ckpt", ".pt", ".pth", ".onnx", ".yaml", ".yml", ".json", ".h5", ".xml", ".bin", ".engine"}
)

_HASH_BLOCK = 1 << 20


def model_records(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Each model path, resolved, with the sha256 of its model files.

    A directory lists its model files (`MODEL_FILE_SUFFIXES`) directly inside it;
    a file is hashed itself. A path that does not exist gets no hashes.
    """
    records: list[dict[str, Any]] = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted(
                member
                for member in path.iterdir()
                if member.is_file() and member.suffix.lower() in MODEL_FILE_SUFFIXES
            )
        else:
            files = [path] if path.is_file() else []
        records.append(
            {
                "path": str(path.resolve()),
                "sha256": {member.name: _sha256(member) for member in files},
            }
        )
    return records


def model_provenance(model_or_runner: object) -> dict[str, Any]:
    """``{"models": model_records(...)}`` for model paths, or for a runner whose export
    metadata names the model directories it was built from; else nothing."""
    if isinstance(model_or_runner, Runner):
        metadata = model_or_runner.metadata
        sources = () if metadata is None else metadata.sources
        paths: list[Any] = [source.get("path") for source in sources]
        if paths and all(isinstance(path, str) and Path(path).exists() for path in paths):
            return {"models": model_records(paths)}
        return {}
    if isinstance(model_or_runner, (str, os.PathLike)):
        return {"models": model_records([model_or_runner])}
    if isinstance(model_or_runner, Sequence):
        return {"models": model_records(model_or_runner)}
    return {}


def with_models(model_or_runner: object, provenance: Mapping[str, Any] | None) -> dict[str, Any]:
    """`provenance` with `model_provenance(model_or_runner)` unless it names the models."""
    given = dict(provenance or {})
    if "models" in given:
        return given
    return {**model_provenance(model_or_runner), **given}


def run_provenance(
    runner: Runner,
    *,
    source_id: str,
    settings: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The provenance dictionary of a run (JSON values only).

    Args:
        runner: the runner making the poses (its class is the engine).
        source_id: the video file or live source.
        settings: the pipeline's settings (policy, batch size, ...).
        extra: more entries, added last: ``models`` (`model_records`; None when
            the runner came without its paths), the command line, the recording.
    """
    info = runner.info
    provenance: dict[str, Any] = {
        "sleap_live_version": package_version(),
        "source": source_id,
        "models": None,
        "engine": type(runner).__name__,
        "device": str(runner.device),
        "model_type": info.model_type,
        "inference": {
            "peak_threshold": info.peak_threshold,
            "max_instances": info.max_instances,
            **dict(info.postprocess),
        },
        # What `InferenceSettings` the poses were made with (None: an export from
        # before they were recorded, run as it was made).
        "inference_settings": None if info.settings is None else info.settings.to_dict(),
        "settings": dict(settings),
        "python": sys.version.split()[0],
    }
    provenance.update(extra or {})
    return provenance


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()
