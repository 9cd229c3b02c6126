"""The kinds of sleap-nn model sleap-live does not run, told apart before any work.

sleap-nn 0.3.5 trains kinds beside its pose models (`config/model_config.py`'s
`HeadConfig` and `BackboneConfig`): box detectors (`bbox_centernet` and
`bbox_ssd`) and an `embedding` (re-identification) type, which sleap-live runs from
their training directories but not from sleap-nn exports; segmentation models
(`bottomup_segmentation`, `centered_instance_segmentation`,
`semantic_segmentation`), and `pretrained` backbones, image encoders from the
Hugging Face Hub (hierarchical ones and plain ViTs such as DINOv2, CLIP or SigLIP;
`timm/...` ids through transformers). sleap-live does not run these: instance
masks have no place in its outputs, a pretrained encoder's code and weights come
from the internet, and sleap-nn exports an embedding model without its crop step.
Of the segmentation models it runs `semantic_segmentation` (whole-frame
foreground), from training directories only.

`refuse_unrun_kind` reads only the config's head and backbone keys and refuses such
a model, or one of a type it does not know, with one line naming the folder, what
the model is and that sleap-live does not run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sleap_live.engines.errors import UnsupportedModelError
from sleap_live.engines.load.spec import MODEL_HEADS

# sleap-nn 0.3.5's model types sleap-live does not run: what each one is.
UNRUN_MODEL_TYPES: Mapping[str, str] = {
    "bottomup_segmentation": "a segmentation model (bottomup_segmentation)",
    "centered_instance_segmentation": "a segmentation model (centered_instance_segmentation)",
}
# sleap-nn exports of the models sleap-live runs from training directories only.
UNRUN_EXPORT_TYPES: Mapping[str, str] = {
    **UNRUN_MODEL_TYPES,
    "semantic_segmentation": "a segmentation model (semantic_segmentation)",
    "embedding": "an embedding (re-identification) model",
    "bbox_centernet": "a box detector (bbox_centernet)",
    "bbox_ssd": "a box detector (bbox_ssd)",
}
RUN_BACKBONES = ("unet", "convnext", "swint")
# sleap-nn reads `timm/...` model ids through transformers' timm wrapper.
TIMM_PREFIX = "timm/"


def unrun_kind(config: Any) -> str | None:
    """What the model of a loaded training config is, if sleap-live does not run it.

    Returns None for a pose model on a backbone sleap-live runs, and for a config
    too malformed to tell (the full parse then names its problem).
    """
    model_config = config.get("model_config") if isinstance(config, Mapping) else None
    if not isinstance(model_config, Mapping):
        return None
    model_type = head_type(config)
    if model_type is not None:
        if model_type in UNRUN_MODEL_TYPES:
            return UNRUN_MODEL_TYPES[model_type]
        if model_type not in MODEL_HEADS:
            return f"a model of a type sleap-live does not know ({model_type!r})"
    backbones = model_config.get("backbone_config")
    if isinstance(backbones, Mapping):
        backbone = next((k for k, v in backbones.items() if v is not None), None)
        if backbone == "pretrained":
            return f"a model on {_pretrained(backbones['pretrained'])}"
        if backbone is not None and backbone not in RUN_BACKBONES:
            return f"a model on a backbone sleap-live does not know ({backbone!r})"
    return None


def head_type(config: Any) -> str | None:
    """The model type of a loaded training config: its first head's key in
    `model_config.head_configs`; None for a config too malformed to tell."""
    model_config = config.get("model_config") if isinstance(config, Mapping) else None
    heads = model_config.get("head_configs") if isinstance(model_config, Mapping) else None
    if not isinstance(heads, Mapping):
        return None
    return next((str(k) for k, v in heads.items() if v is not None), None)


def refuse_unrun_kind(config: Any, model_dir: Path) -> None:
    """Raises UnsupportedModelError when `unrun_kind(config)` names a kind.

    Raises:
        UnsupportedModelError: "<model_dir>: <what it is>; sleap-live does not run it".
    """
    kind = unrun_kind(config)
    if kind is not None:
        raise UnsupportedModelError(f"{model_dir}: {kind}; sleap-live does not run it")


def _pretrained(section: Any) -> str:
    name = section.get("model_name") if isinstance(section, Mapping) else None
    if not isinstance(name, str) or not name:
        return "a pretrained Hugging Face backbone"
    source = "timm, through Hugging Face" if name.startswith(TIMM_PREFIX) else "Hugging Face"
    return f"a pretrained backbone from {source} ({name!r})"
