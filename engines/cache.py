"""sleap-live's cache folder: every artifact kept between runs lives under `cache_root()`.

ONNX exports of model directories and the graphs specialised to frame shapes
(`onnx/`, see `sleap_live.engines.load.export_cache`), OpenVINO's compiled models
(`openvino/`), TensorRT engines and timing caches (`tensorrt/`), ONNX Runtime's
TensorRT provider engines (`onnxruntime-tensorrt/`) and the CPU engine choice
(`cpu_choice/`) all go under one root, so that `--cache-dir`, `SLEAP_LIVE_CACHE_DIR`
and `--no-cache` mean the same for every engine.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "SLEAP_LIVE_CACHE_DIR"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """sleap-live's cache folder: `cache_dir`, else `$SLEAP_LIVE_CACHE_DIR`, else the user's.

    The user's is platformdirs' `user_cache_dir("sleap-live")` (`~/.cache/sleap-live`,
    or `$XDG_CACHE_HOME/sleap-live`, on Linux).
    """
    if cache_dir is not None:
        return Path(cache_dir)
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen:
        return Path(chosen)
    import platformdirs

    return Path(platformdirs.user_cache_dir("sleap-live", appauthor=False))
