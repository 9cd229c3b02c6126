"""The public surface of `sleap_live.engines`, and which of it imports without torch."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCKER = REPO / "tests" / "torch_blocker.py"
BLOCKED = "torch_blocker: blocked import of"  # what the blocker writes per attempt
# Folders of the torch-free side (host code, model files, ONNX runners, streaming,
# the command line) and the modules in them that are allowed to need torch.
TORCH_FREE_FOLDERS = {
    "sleap_live.engines": REPO / "engines",
    "sleap_live.engines.host": REPO / "engines" / "host",
    "sleap_live.engines.load": REPO / "engines" / "load",
    "sleap_live.engines.runners": REPO / "engines" / "runners",
    "sleap_live.stream": REPO / "stream",
    "sleap_live.stream.outputs": REPO / "stream" / "outputs",
    "sleap_live.stream.sources": REPO / "stream" / "sources",
    "sleap_live.cli": REPO / "sleap_live" / "cli",
}
NEEDS_TORCH = {
    "sleap_live.engines.load.checkpoint",  # reads torch checkpoints
    "sleap_live.engines.runners.torch",  # runs torch modules
    "sleap_live.engines.runners.torch_compile",  # compiles them
    # The GPU path's torch code, imported only once frames or buffers are on a GPU:
    "sleap_live.engines.runners.cuda",  # uploads, pinned copies, CUDA graphs
    "sleap_live.engines.runners.onnx_binding",  # binds torch CUDA tensors to ONNX Runtime
    "sleap_live.stream.sources.nv12",  # NV12 to gray/RGB on the device
}


def test_engines_import_does_not_load_torch_until_needed():
    code = (
        "import sys, sleap_live.engines as e, sleap_live.stream;"
        "assert 'torch' not in sys.modules, 'torch loaded on import';"
        "e.load_runner; assert 'torch' not in sys.modules, 'torch loaded by load_runner';"
        "e.load_inference_model; assert 'torch' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attribute_is_an_attribute_error():
    import sleap_live.engines as engines

    try:
        engines.no_such_thing  # noqa: B018
    except AttributeError as error:
        assert "no_such_thing" in str(error)
    else:
        raise AssertionError("expected AttributeError")


# Imports each module named on the command line; exits with the failures' tracebacks.
IMPORT_EACH = """
import importlib
import sys
import traceback

failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(f"{name}:\\n{traceback.format_exc()}")
sys.exit("\\n".join(failed) or None)
"""


def _torch_free_modules() -> list[str]:
    modules = []
    for package, folder in TORCH_FREE_FOLDERS.items():
        modules.append(package)
        modules += [
            f"{package}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__"
        ]
    return [module for module in modules if module not in NEEDS_TORCH]


def test_host_side_modules_import_with_torch_unimportable(tmp_path):
    modules = _torch_free_modules()
    for expected in ("host.grouping", "load.spec", "runners.onnx", "runners.sleap_nn_export"):
        assert f"sleap_live.engines.{expected}" in modules
    assert "sleap_live.stream.sources.file" in modules
    assert "sleap_live.cli.run" in modules
    result = subprocess.run(
        [sys.executable, str(BLOCKER), "-c", IMPORT_EACH, *modules],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # Not even an attempt that fails quietly: where torch is installed, it would load.
    assert BLOCKED not in result.stderr, result.stderr
