"""The network of a model, whatever its backbone: UNet, ConvNeXt or Swin, or SLEAP 1.x's.

`build_model_network(spec)` picks the module for `spec.backbone`'s kind;
`load_model_network(spec)` also loads the weights of `spec.checkpoint_path`.
Every network takes float32 (batch, channels, height, width) images in [0, 1],
padded as sleap-nn pads them, and returns its head outputs keyed by sleap-nn head
class name.
"""

from __future__ import annotations

from torch import nn

from sleap_live.engines.graph.convnext import build_convnext_network
from sleap_live.engines.graph.decoder_heads import DecoderHeadsNetwork
from sleap_live.engines.graph.legacy_network import load_legacy_network
from sleap_live.engines.graph.network import build_network
from sleap_live.engines.graph.swin import build_swin_network
from sleap_live.engines.load.backbone_specs import ConvNextSpec, SwinTSpec
from sleap_live.engines.load.checkpoint import check_weights_fit, read_state_dict
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
    # A checkpoint stores each weight in at least 2 bytes (bfloat16 or float16
    # training; float32 otherwise).
    check_weights_fit(
        lambda: build_model_network(spec),
        spec.checkpoint_path,
        2,
        f"{spec.config_path}: the backbone and heads it describes",
    )
    if spec.model_type == "embedding":
        # The projection head an embedding model trains through is discarded at inference.
        state_dict = {k: v for k, v in state_dict.items() if not k.startswith("projection.")}
    network = build_model_network(spec)
    network.load_sleap_nn_state_dict(state_dict, spec.checkpoint_path)
    return network
