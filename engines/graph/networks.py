"""The network of a model, whatever its backbone: UNet, ConvNeXt or Swin, or SLEAP 1.x's.

`build_model_network(spec)` picks the module for `spec.backbone`'s kind;
`load_model_network(spec)` also loads the weights of `spec.checkpoint_path`.
Every network takes float32 (batch, channels, height, width) images in [0, 1],
padded as sleap-nn pads them, and returns its head outputs keyed by sleap-nn head
class name.
"""

from __future__ import annotations

import torch
from torch import nn

from sleap_live.engines.errors import CheckpointError, ModelNotFoundError
from sleap_live.engines.graph.convnext import build_convnext_network
from sleap_live.engines.graph.decoder_heads import DecoderHeadsNetwork
from sleap_live.engines.graph.legacy_network import load_legacy_network
from sleap_live.engines.graph.network import build_network
from sleap_live.engines.graph.swin import build_swin_network
from sleap_live.engines.load.backbone_specs import ConvNextSpec, SwinTSpec
from sleap_live.engines.load.checkpoint import read_state_dict
from sleap_live.engines.load.spec import ModelSpec


def build_model_network(spec: ModelSpec) -> DecoderHeadsNetwork:
    """A randomly initialised network for `spec`, in eval mode.

    Raises:
        ModelConfigError: the backbone options form a network sleap-nn cannot run.
    """
    if isinstance(spec.backbone, ConvNextSpec):
        return build_convnext_network(spec)
    if isinstance(spec.backbone, SwinTSpec):
        return build_swin_network(spec)
    return build_network(spec)


def load_model_network(spec: ModelSpec) -> nn.Module:
    """The network for `spec` with the weights of `spec.checkpoint_path`, in eval mode.

    Raises:
        ModelConfigError: the backbone options form a network sleap-nn cannot run.
        ModelNotFoundError: the checkpoint does not exist.
        CheckpointError: the checkpoint is unreadable or does not match the config.
    """
    if spec.legacy is not None:
        # A SLEAP 1.x folder: the network SLEAP 1.x built, its weights from the .h5.
        return load_legacy_network(spec)
    state_dict = read_state_dict(spec.checkpoint_path)
    check_network_fits(spec)
    network = build_model_network(spec)
    network.load_sleap_nn_state_dict(state_dict, spec.checkpoint_path)
    return network


def check_network_fits(spec: ModelSpec) -> None:
    """Refuses a config whose network the checkpoint cannot hold, before torch
    allocates it (a crafted config's 60,000-channel UNet asks for 130 GB): the network
    is sized on the meta device, and a checkpoint stores each weight in at least 2
    bytes (bfloat16 or float16 training; float32 otherwise).

    Raises:
        ModelNotFoundError: the checkpoint does not exist.
        CheckpointError: the network has more weights than the checkpoint can hold.
    """
    path = spec.checkpoint_path
    try:
        file_bytes = path.stat().st_size
    except FileNotFoundError:
        raise ModelNotFoundError(f"{path}: checkpoint not found") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
    with torch.device("meta"):
        weights = sum(p.numel() for p in build_model_network(spec).parameters())
    if 2 * weights > file_bytes:
        raise CheckpointError(
            f"{spec.config_path}: the network its backbone and heads describe has {weights} "
            f"weights, more than the {file_bytes} bytes of {path.name} can hold"
        )
