"""Stand-in networks and synthetic frames for the inference-model tests.

`SampledNetwork` returns the grey input sampled every `stride` pixels as every
confidence map (map k scaled by `1 - 0.1 k`), so a bright blob in a frame is a
peak at a known place. With `classes`, it also returns class probabilities
chosen by the brightest pixel. `blob_frames` draws Gaussian blobs ("animals") at
given positions.

Test modules load this file through the `fake_networks` fixture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from sleap_live.engines.ort_options import session_options


class SampledNetwork(torch.nn.Module):
    """Confidence maps that are the input sampled on the output grid; see the module docstring."""

    def __init__(self, heads: Mapping[str, int], stride: int, classes: int = 0) -> None:
        super().__init__()
        self.heads = dict(heads)
        self.stride = stride
        self.classes = classes

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        grey = x.mean(1, keepdim=True)[..., :: self.stride, :: self.stride]
        outputs = {}
        for name, channels in self.heads.items():
            factors = 1.0 - 0.1 * torch.arange(channels, dtype=torch.float32, device=x.device)
            outputs[name] = grey * factors[None, :, None, None]
        if self.classes:
            brightest = grey.amax(dim=(1, 2, 3))[:, None]
            levels = torch.linspace(0.3, 1.0, self.classes, device=x.device)[None]
            outputs["ClassVectorsHead"] = torch.softmax(-((brightest - levels) ** 2) * 200, dim=1)
        return outputs


def blob_frames(
    blobs: Sequence[Sequence[tuple[float, float, float]]],
    height: int = 120,
    width: int = 160,
    channels: int = 1,
    sigma: float = 4.0,
) -> torch.Tensor:
    """uint8 (B, H, W, C) frames with Gaussian blobs.

    Args:
        blobs: per frame, (x, y, brightness in [0, 1]) of each blob.
        height: frame height.
        width: frame width.
        channels: 1, or 3 for the same grey image in every channel.
        sigma: blob radius in pixels.
    """
    rows, cols = np.mgrid[:height, :width].astype(np.float32)
    frames = np.zeros((len(blobs), height, width, channels), np.uint8)
    for i, frame_blobs in enumerate(blobs):
        image = np.zeros((height, width), np.float32)
        for x, y, brightness in frame_blobs:
            image += brightness * np.exp(-((cols - x) ** 2 + (rows - y) ** 2) / (2 * sigma**2))
        frames[i] = np.clip(np.round(image * 255), 0, 255).astype(np.uint8)[..., None]
    return torch.from_numpy(frames)


def export_and_run(
    model: torch.nn.Module,
    example: torch.Tensor,
    inputs: Sequence[torch.Tensor],
    path: str,
) -> list[list[np.ndarray]]:
    """Exports `model` traced on `example` to ONNX and runs each input with ONNX Runtime."""
    import onnxruntime as ort

    names = list(model.output_names)
    torch.onnx.export(
        model,
        (example,),
        path,
        dynamo=False,
        input_names=["frames"],
        output_names=names,
        dynamic_axes={
            "frames": {0: "batch", 1: "height", 2: "width", 3: "channels"},
            **{name: {0: "instances"} for name in names},
        },
        opset_version=17,
    )
    session = ort.InferenceSession(path, session_options(), providers=["CPUExecutionProvider"])
    return [session.run(names, {"frames": frames.numpy()}) for frames in inputs]


def model_spec(
    model_type: str,
    heads: Mapping[str, Mapping],
    nodes: Sequence[str] = ("head", "thorax", "tail"),
    in_channels: int = 1,
    max_stride: int = 16,
    preprocessing: Mapping | None = None,
):
    """A `ModelSpec` parsed from a minimal training config of one model type."""
    from pathlib import Path

    from sleap_live.engines.load.training_config import parse_training_config

    unet = {
        "in_channels": in_channels,
        "kernel_size": 3,
        "filters": 8,
        "filters_rate": 2.0,
        "max_stride": max_stride,
        "stem_stride": None,
        "middle_block": True,
        "up_interpolate": True,
        "stacks": 1,
        "convs_per_block": 2,
        "output_stride": 1,
    }
    config = {
        "data_config": {
            "skeletons": [{"name": "fake", "nodes": [{"name": n} for n in nodes], "edges": []}],
            "preprocessing": dict(preprocessing or {}),
        },
        "model_config": {
            "backbone_config": {"unet": unet},
            "head_configs": {model_type: dict(heads)},
        },
    }
    return parse_training_config(config, Path("/fake") / model_type)
