"""Reads a Keras `.h5` model file (SLEAP 1.x's `best_model.h5`) without trusting it.

HDF5 lets a file point outside itself and declare more than it holds, so each
object is checked before it is read:

- Every step of a weight's path must be a hard link inside the file: an external
  link opens another file (any path, e.g. /etc/shadow) and a soft link can loop.
- A weight must be a plain dataset: not virtual (its data mapped from other
  files), without external raw storage (`H5Pset_external`), of a float type, and of
  the shape the caller expects, checked before its data is read (a chunked, gzip
  compressed dataset of zeros can claim 32 GiB in a few kilobytes).
- The model's JSON `model_config` attribute is bounded in size and nesting depth
  before it is parsed.

Keras writes each weight as a plain uncompressed dataset of its own shape and dtype
(`save_weights_to_hdf5_group` in keras/saving/hdf5_format.py:
`g.create_dataset(name, val.shape, dtype=val.dtype)`), so none of this refuses a
file Keras wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from sleap_live.engines.errors import CheckpointError
from sleap_live.engines.load.metadata import bounded_json_object

# The Keras `model_config` of the committed SLEAP 1.x models is 7 to 23 KB and nests
# 8 levels deep (tests/data/legacy_models); a UNet has 2 layers per convolution
# block, so even a 64-block one stays far below these.
MAX_MODEL_CONFIG_BYTES = 16 * 1024 * 1024
MAX_MODEL_CONFIG_DEPTH = 64


def read_model_config(file: h5py.File, path: Path) -> Mapping[str, Any]:
    """The parsed `model_config` attribute of an open Keras `.h5` file.

    Raises:
        CheckpointError: one line naming `path`: missing, too large, too deep, not JSON.
    """
    if "model_config" not in file.attrs:
        raise CheckpointError(f"{path}: no model_config attribute; not a Keras model file")
    # A variable-length string's size is known only once read; the read is bounded
    # by the file's own size, the parse by the checks below.
    text = file.attrs["model_config"]
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise CheckpointError(f"{path}: model_config is not a JSON string")
    return bounded_json_object(
        text,
        f"{path}: model_config",
        MAX_MODEL_CONFIG_BYTES,
        MAX_MODEL_CONFIG_DEPTH,
        CheckpointError,
    )


def hard_member(group: h5py.Group, name: str, path: Path, where: str) -> Any:
    """`group[name]` if it is a hard link inside the file, else None if absent.

    Raises:
        CheckpointError: `name` is an external or soft link, naming `path` and `where`.
    """
    link = group.get(name, getlink=True)
    if link is None:
        return None
    if not isinstance(link, h5py.HardLink):
        kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
        raise CheckpointError(f"{path}: {where} is {kind}; only objects inside the file are read")
    return group[name]


def read_weight(
    group: h5py.Group, name: str, shape: tuple[int, ...], path: Path, where: str
) -> np.ndarray:
    """The float32 values of the dataset `group[name]`, of the expected `shape`.

    Raises:
        CheckpointError: the weight is missing, a link, virtual, stored outside the
            file, not floating point or of another shape; checked before it is read.
    """
    dataset = hard_member(group, name, path, where)
    if dataset is None:
        raise CheckpointError(f"{path}: {where} is missing")
    if not isinstance(dataset, h5py.Dataset):
        raise CheckpointError(f"{path}: {where} is not a dataset")
    if dataset.is_virtual or dataset.id.get_create_plist().get_external_count():
        raise CheckpointError(
            f"{path}: {where} keeps its data outside the file; only data inside it is read"
        )
    if dataset.dtype.kind != "f":
        raise CheckpointError(f"{path}: {where} holds {dataset.dtype}, not floating point")
    if tuple(dataset.shape) != shape:
        raise CheckpointError(
            f"{path}: {where} has shape {tuple(dataset.shape)} where the config implies {shape}"
        )
    return np.asarray(dataset[()], dtype=np.float32)
