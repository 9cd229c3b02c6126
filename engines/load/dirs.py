"""Find and read a sleap-nn model directory.

Two kinds of directory come out of sleap-nn:

- a trained model directory (`sleap-nn train`): `TRAINING_CONFIG`
  (training_config.yaml) and `CHECKPOINT` (best.ckpt), read by `read_model_dir`
  into a `ModelSpec`;
- an exported model directory (`sleap-nn export`): `export_metadata.json` and
  `model.onnx` and/or `model.trt`. `read_model_dir` refuses it with
  `ExportedModelDirError` so callers can route it to the exported-model runner;
  `is_sleap_nn_export_dir` and `read_export_metadata` tell and read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sleap_live.engines.errors import (
    ExportedModelDirError,
    ModelConfigError,
    ModelNotFoundError,
)
from sleap_live.engines.load.legacy_config import is_legacy_model_dir, read_legacy_config
from sleap_live.engines.load.metadata import ExportMetadata, read_onnx_info, sidecar_path
from sleap_live.engines.load.model_kind import head_type, refuse_unrun_kind
from sleap_live.engines.load.spec import (
    BOX_MODEL_TYPES,
    CHECKPOINT,
    LEGACY_TRAINING_CONFIG,
    TRAINING_CONFIG,
    ModelSpec,
)
from sleap_live.engines.load.training_config import parse_training_config, read_yaml
from sleap_live.engines.types import POSELESS_FINDINGS

EXPORT_METADATA = "export_metadata.json"
EXPORTED_MODELS = ("model.onnx", "model.trt")


def model_dir_of(path: Path) -> Path:
    """The model directory `path` names: itself, or the folder of a file in one.

    Like sleap-nn, accepts the directory, its `training_config.yaml` or a `.ckpt`.

    Raises:
        ModelNotFoundError: `path` does not exist.
    """
    path = Path(path)
    if path.is_dir():
        return path
    if path.is_file() and (
        path.name in (TRAINING_CONFIG, LEGACY_TRAINING_CONFIG) or path.suffix in (".ckpt", ".h5")
    ):
        return path.parent
    if path.exists():
        raise ModelNotFoundError(f"{path}: not a model directory, {TRAINING_CONFIG} or .ckpt")
    raise ModelNotFoundError(f"{path}: model directory not found")


def read_model_dir(path: Path) -> ModelSpec:
    """Read a trained sleap-nn model directory into a `ModelSpec`.

    Args:
        path: the directory `sleap-nn train` wrote, or its config or checkpoint.

    Raises:
        ModelNotFoundError: the directory, its `training_config.yaml` or its
            `best.ckpt` is missing.
        ExportedModelDirError: the directory is a `sleap-nn export` output.
        ModelConfigError: the config is invalid or describes an unsupported model.
        UnsupportedModelError: the model is of a kind sleap-live does not run,
            told before the checkpoint is looked at.

    A SLEAP 1.x model folder (`training_config.json` + `best_model.h5`) is read by
    `sleap_live.engines.load.legacy_config`.
    """
    model_dir = model_dir_of(path)
    if is_sleap_nn_export_dir(model_dir):
        raise ExportedModelDirError(
            f"{model_dir}: this is a sleap-nn export ({EXPORT_METADATA}), not a trained "
            "model directory; run it with the exported-model runner"
        )
    if not (model_dir / TRAINING_CONFIG).is_file():
        if is_legacy_model_dir(model_dir):
            return read_legacy_config(model_dir)
        raise ModelNotFoundError(f"{model_dir / TRAINING_CONFIG}: not found")
    config = read_yaml(model_dir / TRAINING_CONFIG)
    refuse_unrun_kind(config, model_dir)
    if not (model_dir / CHECKPOINT).is_file():
        raise ModelNotFoundError(
            f"{model_dir / CHECKPOINT}: not found (training unfinished or directory incomplete)"
        )
    return parse_training_config(config, model_dir)


def refuse_unrun_models(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Refuses a model of a kind sleap-live does not run before any other work.

    Reads only the training config of each trained model directory among `paths`
    (the directory, its config or its checkpoint); other paths (exports, graph
    files, missing ones) are left to the loader, which names their problems.

    Raises:
        UnsupportedModelError: one line naming the folder and what the model is.
        ModelConfigError: a training config is not valid YAML, or a SLEAP 1.x
            folder's config is refused (`read_legacy_config`).
        CheckpointError: a SLEAP 1.x folder's `best_model.h5` is refused.
    """
    for path in map(Path, paths):
        folder = path if path.is_dir() else None
        if path.is_file() and (path.name == TRAINING_CONFIG or path.suffix == ".ckpt"):
            folder = path.parent
        if folder is None or is_sleap_nn_export_dir(folder):
            continue
        if (folder / TRAINING_CONFIG).is_file():
            refuse_unrun_kind(read_yaml(folder / TRAINING_CONFIG), folder)
        elif is_legacy_model_dir(folder):
            # Its whole config, bounds included: nothing is hashed or built first.
            read_legacy_config(folder)


def poseless_kind(paths: Sequence[str | os.PathLike[str]]) -> str | None:
    """The model type (a `POSELESS_FINDINGS` key) of a model that finds no poses (a box
    detector alone, a segmentation model), told before it loads: from a trained
    directory's config, or a sleap-live export's metadata (in the `.onnx`, or the JSON
    beside another format's file). None for anything else or anything unreadable,
    which the loader then names."""
    if len(paths) != 1:
        return None
    path = Path(paths[0])
    folder = path if path.is_dir() else path.parent
    kind: str | None
    try:
        if path.suffix == ".onnx" and path.is_file():
            kind = read_onnx_info(path).model_type
        elif sidecar_path(path).is_file():
            text = sidecar_path(path).read_text()
            kind = ExportMetadata.from_json(text, str(path)).info.model_type
        elif (folder / TRAINING_CONFIG).is_file() and not is_sleap_nn_export_dir(folder):
            kind = head_type(read_yaml(folder / TRAINING_CONFIG))
            kind = "bbox" if kind in BOX_MODEL_TYPES else kind
        else:
            return None
    except (OSError, ValueError):  # the loader names the problem
        return None
    return kind if kind in POSELESS_FINDINGS else None


def gives_embeddings(paths: Sequence[str | os.PathLike[str]]) -> bool:
    """Whether `paths` give each instance a re-identification vector, told before
    anything loads: an embedding model directory among them (sleap-nn's `embedding`
    type), or a sleap-live export of such a model (its metadata's `embedding_dim`).
    False for anything unreadable, which the loader then names."""
    for path in map(Path, paths):
        try:
            if path.suffix == ".onnx" and path.is_file():
                if read_onnx_info(path).embedding_dim is not None:
                    return True
            elif sidecar_path(path).is_file():
                metadata = ExportMetadata.from_json(sidecar_path(path).read_text(), str(path))
                if metadata.info.embedding_dim is not None:
                    return True
            elif (path / TRAINING_CONFIG).is_file() and not is_sleap_nn_export_dir(path):
                if head_type(read_yaml(path / TRAINING_CONFIG)) == "embedding":
                    return True
        except (OSError, ValueError):  # the loader names the problem
            continue
    return False


def is_sleap_nn_export_dir(path: Path) -> bool:
    """Whether `path` is a directory written by `sleap-nn export`."""
    path = Path(path)
    return (path / EXPORT_METADATA).is_file() and any(
        (path / name).is_file() for name in EXPORTED_MODELS
    )


def read_export_metadata(path: Path) -> dict[str, Any]:
    """The `export_metadata.json` of a `sleap-nn export` directory.

    Args:
        path: the export directory or its metadata file.

    Raises:
        ModelNotFoundError: the directory or its metadata file does not exist.
        ModelConfigError: the file is not a JSON object with a `model_type`.
    """
    path = Path(path)
    metadata_path = path if path.name == EXPORT_METADATA else path / EXPORT_METADATA
    if not metadata_path.parent.is_dir():
        raise ModelNotFoundError(f"{metadata_path.parent}: export directory not found")
    try:
        text = metadata_path.read_text()
    except FileNotFoundError as e:
        raise ModelNotFoundError(f"{metadata_path}: not found") from e
    except OSError as e:
        raise ModelConfigError(f"{metadata_path}: cannot read: {e.strerror or e}") from e
    try:
        metadata = json.loads(text)
    except RecursionError:  # json decodes nested arrays and objects recursively
        raise ModelConfigError(f"{metadata_path}: nests too deeply to be export metadata") from None
    except json.JSONDecodeError as e:
        problem = f"{e.msg} at line {e.lineno}"
        raise ModelConfigError(f"{metadata_path}: not valid JSON ({problem})") from e
    if not isinstance(metadata, dict):
        raise ModelConfigError(f"{metadata_path}: not a JSON object")
    if not isinstance(metadata.get("model_type"), str) or not metadata["model_type"]:
        raise ModelConfigError(f"{metadata_path}: no model_type")
    return metadata
