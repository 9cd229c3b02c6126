"""Read the weights out of a sleap-nn `best.ckpt` without sleap-nn installed.

A sleap-nn checkpoint is a Lightning checkpoint written by `torch.save`: a zip
holding a pickle of a dict whose `state_dict` entry has the weights, next to
training state that pickles objects from omegaconf, lightning and sleap_nn. None
of those packages exists in the runtime environment, so the pickle is read with an
unpickler that replaces every class it does not need with an inert placeholder and
never imports anything outside a short list of torch and standard-library names.
That also means a checkpoint cannot run code when it is loaded.
"""

from __future__ import annotations

import collections
import copyreg
import pickle
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sleap_live.engines.errors import CheckpointError, ModelNotFoundError

# Globals a state_dict of plain tensors needs, and harmless builtins other entries
# use. Everything else becomes an `_Inert` placeholder.
_REAL_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("copyreg", "_reconstructor"): copyreg._reconstructor,  # type: ignore[attr-defined]
    ("torch._utils", "_rebuild_tensor"): torch._utils._rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): torch._utils._rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): torch._utils._rebuild_parameter_with_state,
    ("torch._tensor", "_rebuild_from_type_v2"): torch._tensor._rebuild_from_type_v2,
    ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    ("torch", "Size"): torch.Size,
    ("torch", "Tensor"): torch.Tensor,
    ("torch", "device"): torch.device,
    **{
        ("builtins", kind.__name__): kind
        for kind in (
            object,
            dict,
            list,
            tuple,
            set,
            frozenset,
            int,
            float,
            complex,
            str,
            bytes,
            bytearray,
            bool,
            slice,
        )
    },
}


class _Inert(dict):
    """Stand-in for any class the checkpoint references but we do not load.

    It accepts every way pickle builds objects (calls, `__new__`, `__setstate__`,
    item and list appends) and runs no code of the class it replaces.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> _Inert:
        return dict.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self)

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


class _CheckpointUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        real = _REAL_GLOBALS.get((module, name))
        if real is not None:
            return real
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        return type(name, (_Inert,), {"__module__": f"inert.{module}"})


# `torch.load` subclasses `pickle_module.Unpickler`, so this is all it needs.
_PICKLE_MODULE = types.ModuleType("sleap_live_checkpoint_pickle")
_PICKLE_MODULE.Unpickler = _CheckpointUnpickler  # type: ignore[attr-defined]


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The `state_dict` of a Lightning checkpoint, on the CPU, keys as stored.

    Raises:
        ModelNotFoundError: the file does not exist.
        CheckpointError: the file is not a readable torch zip checkpoint or holds no
            `state_dict` of tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: checkpoint not found")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a torch checkpoint (not a zip archive)")
    try:
        checkpoint = torch.load(
            path, map_location="cpu", pickle_module=_PICKLE_MODULE, weights_only=False
        )
    except Exception as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: cannot read checkpoint ({problem})") from e
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path}: checkpoint has no state_dict")
    state_dict = checkpoint["state_dict"]
    if not isinstance(state_dict, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state_dict.items()
    ):
        raise CheckpointError(f"{path}: state_dict is not a mapping of names to tensors")
    return dict(state_dict)


def check_weights_fit(
    build: Callable[[], torch.nn.Module],
    weights_file: Path,
    bytes_per_weight: int,
    described_by: str,
    weight_name: str = "weights",
) -> None:
    """Refuses a config whose network `weights_file` cannot hold, before torch
    allocates it (a crafted config's 60,000-channel UNet asks for 130 GB): `build`
    makes the network on the meta device, which allocates nothing, and the file must
    hold `bytes_per_weight` for each of its weights.

    Args:
        build: makes the network the config describes.
        weights_file: the checkpoint or weights file.
        bytes_per_weight: the fewest bytes the file stores a weight in.
        described_by: what describes the network, for the message (the config's
            path and section).
        weight_name: what the message calls the weights (e.g. "float32 weights").

    Raises:
        ModelNotFoundError: `weights_file` does not exist.
        CheckpointError: it cannot be read, or holds fewer bytes than the weights need.
    """
    try:
        file_bytes = weights_file.stat().st_size
    except FileNotFoundError:
        raise ModelNotFoundError(f"{weights_file}: not found") from None
    except OSError as e:
        raise CheckpointError(f"{weights_file}: cannot read ({e.strerror or e})") from None
    with torch.device("meta"):
        weights = sum(p.numel() for p in build().parameters())
    if bytes_per_weight * weights > file_bytes:
        raise CheckpointError(
            f"{described_by} make {weights} {weight_name}, more than the {file_bytes} bytes of "
            f"{weights_file.name} hold"
        )
