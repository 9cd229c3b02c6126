"""`sleap-live export --format tfjs`: the inference model as a TF.js graph model.

The model is converted to TensorFlow operations exactly as for `--format
saved_model` (`sleap_live.engines.export.saved_model`: one frame size, one frame
per call, the "tensorrt" profile, fixed slots for centroid and top-down models),
with int32 outputs where torch's are int64 (TF.js has no int64), saved as a
SavedModel in a temporary folder, and converted by tensorflowjs' converter into the
export folder: `model.json` (the graph and its `serving_default` signature: input
`frames`, (1, H, W, C), whose uint8 values TF.js takes as int32; the outputs by
their sleap-live names) and its weight files, with the metadata in `sleap_live.json`.
TF.js loads it with `tf.loadGraphModel("…/model.json")` in a browser or Node.

Host steps, besides those of every format (bottom-up grouping, multi-class identity
matching): none. Refused in one line: what `--format saved_model` refuses.

Converter: tensorflowjs 4.22 pins `packaging~=23.1`, tensorflow-decision-forests
(which pins its own TensorFlow) and JAX; the SavedModel converter needs none of them,
so it is installed with `pip install --no-deps tensorflowjs==4.22.0` beside the
"tfjs" extra, and the modules only its other converters import are stood in for
while it is imported (`import_tensorflowjs`).

Verification: as for `--format saved_model`, with TF.js running the export:
`tfjs_node/run.js` in Node, on TF.js's cpu backend (@tensorflow/tfjs-core,
-backend-cpu and -converter `TFJS_VERSION` from npm, installed once into the
sleap-live cache, or found through `SLEAP_LIVE_TFJS_NODE_MODULES`), frame by frame.
@tensorflow/tfjs-node, TF.js's native backend, is not used: its install downloads a
TensorFlow library from outside npm. The WebGL and WebGPU backends are not verified.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.cache import cache_root
from sleap_live.engines.errors import ExportError, RuntimeUnavailableError
from sleap_live.engines.export._quiet import first_line
from sleap_live.engines.export.driver import (
    Check,
    ExportFolder,
    ExportFormat,
    Job,
    tensorrt_profile,
)
from sleap_live.engines.export.formats import ExportOptions
from sleap_live.engines.export.npm import npm_install
from sleap_live.engines.export.saved_model import (
    METADATA_FILE,
    SIGNATURE,
    import_tensorflow,
    save,
    tensorflow_function,
    tf_versions,
)
from sleap_live.engines.export.verify import Outputs

MODEL_FILE = "model.json"
TFJS_VERSION = "4.22.0"
TFJS_PACKAGES = (
    "@tensorflow/tfjs-core",
    "@tensorflow/tfjs-backend-cpu",
    "@tensorflow/tfjs-converter",
)
MODULES_ENV = "SLEAP_LIVE_TFJS_NODE_MODULES"
TFJS_INSTALL_HINT = 'pip install "sleap-live[tfjs]" && pip install --no-deps tensorflowjs==4.22.0'
# Long enough for a large model on a slow machine.
NODE_TIMEOUT_S = 1800
# What tensorflowjs' modules import for converters other than the SavedModel one.
_STOOD_IN = (
    "tensorflow_decision_forests",
    "tensorflow_hub",
    "jax",
    "jax.experimental",
    "jax.experimental.jax2tf",
)


@attrs.frozen
class _Needs:
    """TensorFlow, tensorflowjs' converter, and (to verify) the TF.js packages."""

    tf: Any
    convert_tf_saved_model: Any
    node_modules: Path | None


def _needs(options: ExportOptions) -> _Needs:
    tf = import_tensorflow()
    convert_tf_saved_model = import_tensorflowjs()
    return _Needs(tf, convert_tf_saved_model, tfjs_node_modules() if options.verify else None)


def _versions(needs: _Needs) -> dict[str, str]:
    return {**tf_versions(needs.tf), "tensorflowjs": _version("tensorflowjs")}


def _save(function: Any, path: Path, job: Job) -> Mapping[str, Any]:
    """Saves `function` as a SavedModel in a temporary folder and converts that into
    the TF.js folder `path`."""
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "saved_model"
        save(job.extra.tf, function, saved)
        path.mkdir()
        try:
            # The converter prints each weight file it writes.
            with contextlib.redirect_stdout(io.StringIO()):
                job.extra.convert_tf_saved_model(
                    str(saved), str(path), signature_def=SIGNATURE, saved_model_tags="serve"
                )
        except Exception as error:  # the converter raises many kinds of errors
            # Its message names the operations on the lines after the first.
            reason = " ".join(str(error).split()) or type(error).__name__
            raise ExportError(f"tensorflowjs could not convert the SavedModel: {reason}") from error
    name_outputs(path / MODEL_FILE, job.metadata.output_names)
    return {}


def _runtime(needs: _Needs) -> str:
    return f"TF.js {TFJS_VERSION}, cpu backend, Node {_node_version()}"


def _load(path: Path, job: Job) -> Callable[[np.ndarray], Outputs]:
    # Node is another process: the folder by its name, not this process's descriptor.
    folder = Path(os.path.realpath(path))
    names, modules = job.metadata.output_names, job.extra.node_modules
    return lambda frames: run_tfjs(folder, frames, names, modules)


# `--opset` and `--frame-size`: as for `--format saved_model`.
TFJS = ExportFormat(
    "tfjs",
    ExportFolder("a TF.js export", lambda folder: is_tfjs_export(folder)),
    lambda job: tensorflow_function(job, int64_outputs=False),
    _save,
    profile=tensorrt_profile,
    needs=_needs,
    check=Check(_load, "the TF.js model", "TF.js (Node)", _runtime),
    versions=_versions,
    writing="converting to TF.js into",
    metadata_file=lambda folder: folder / METADATA_FILE,
)


def name_outputs(model_file: Path, names: Sequence[str]) -> None:
    """Gives every output in `model_file`'s signature its sleap-live name.

    tensorflowjs names a signature's output by the SavedModel's only output of the same
    dtype and shape, and by its graph tensor (`Identity_2:0`) where two share them (the
    multi-class bottom-up model's peaks and class probabilities). The SavedModel's
    outputs are a dict, which TensorFlow flattens in sorted key order, and its graph
    names them `Identity`, `Identity_1`, ... in that order: the names are put back from
    that, and must agree with every name tensorflowjs did find.

    Raises:
        ExportError: the outputs are not the ones expected.
    """
    model = json.loads(model_file.read_text())
    outputs = model["signature"]["outputs"]
    by_tensor = {
        ("Identity" if index == 0 else f"Identity_{index}") + ":0": name
        for index, name in enumerate(sorted(names))
    }
    named = {}
    for key, info in outputs.items():
        name = by_tensor.get(info["name"])
        if name is None or (key in names and key != name):
            raise ExportError(
                f"tensorflowjs wrote output {key!r} ({info['name']}), not one of {sorted(names)}"
            )
        named[name] = info
    if set(named) != set(names):
        raise ExportError(f"tensorflowjs wrote outputs {sorted(named)}, not {sorted(names)}")
    model["signature"]["outputs"] = {name: named[name] for name in names}
    model_file.write_text(json.dumps(model))


def is_tfjs_export(folder: Path) -> bool:
    """Whether `folder` holds a TF.js export of sleap-live's."""
    return (folder / METADATA_FILE).is_file() and (folder / MODEL_FILE).is_file()


def import_tensorflowjs() -> Any:
    """tensorflowjs' `convert_tf_saved_model`, or a one-line error saying how to install it.

    The modules tensorflowjs imports for its other converters (TF-DF, TF Hub, JAX)
    are stood in for while it is imported, where they are not installed, and taken
    away again (see the module's notes)."""
    import_tensorflow()
    stood_in = []
    for name in _STOOD_IN:
        if name in sys.modules:
            continue
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
            stood_in.append(name)
    if "jax.experimental.jax2tf" in stood_in:
        sys.modules["jax.experimental"].jax2tf = sys.modules["jax.experimental.jax2tf"]  # type: ignore[attr-defined]
    try:
        from tensorflowjs.converters.tf_saved_model_conversion_v2 import (
            convert_tf_saved_model,
        )
    except ImportError as error:
        raise RuntimeUnavailableError(
            f"tensorflowjs is not installed ({first_line(error)}); {TFJS_INSTALL_HINT}"
        ) from None
    finally:
        for name in stood_in:
            del sys.modules[name]
    return convert_tf_saved_model


def tfjs_node_modules(cache_dir: str | Path | None = None) -> Path:
    """The node_modules folder holding `TFJS_PACKAGES`, installed from npm if needed.

    `SLEAP_LIVE_TFJS_NODE_MODULES`, when set, names that folder and nothing is installed.

    Raises:
        RuntimeUnavailableError: Node.js is missing, the named folder lacks a package,
            or npm is missing or its install failed (one line, with what to do).
    """
    if shutil.which("node") is None:
        raise RuntimeUnavailableError(
            "verifying a TF.js export needs Node.js (node): install it, or export with --no-verify"
        )
    chosen = os.environ.get(MODULES_ENV)
    if chosen:
        _check_modules(Path(chosen), f"{MODULES_ENV}={chosen}")
        return Path(chosen)
    prefix = cache_root(cache_dir) / "tfjs" / TFJS_VERSION
    modules = prefix / "node_modules"
    if all((modules / package / "package.json").is_file() for package in TFJS_PACKAGES):
        return modules
    npm_install(
        prefix,
        [f"{package}@{TFJS_VERSION}" for package in TFJS_PACKAGES],
        needed_for=f"verifying a TF.js export needs TF.js {TFJS_VERSION}",
        instead=f"set {MODULES_ENV} to a node_modules folder holding {', '.join(TFJS_PACKAGES)}, "
        "or export with --no-verify",
    )
    _check_modules(modules, f"npm's install in {prefix}")
    return modules


def run_tfjs(
    path: str | Path, frames: np.ndarray, names: Sequence[str], node_modules: Path | None = None
) -> Outputs:
    """The outputs of a TF.js export on uint8 (B, H, W, C) frames, by name: TF.js's cpu
    backend runs them in Node, one frame at a time (`tfjs_node/run.js`).

    Raises:
        RuntimeUnavailableError: as for `tfjs_node_modules`.
        ExportError: Node failed to run the model.
    """
    modules = node_modules or tfjs_node_modules()
    script = resources.files("sleap_live.engines.export") / "tfjs_node" / "run.js"
    count, height, width, channels = (int(size) for size in frames.shape)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        np.ascontiguousarray(frames, dtype=np.uint8).tofile(work / "frames.bin")
        with resources.as_file(script) as script_path:
            command = [
                "node", str(script_path), str(path), str(work / "frames.bin"),
                str(count), str(height), str(width), str(channels), str(work), ",".join(names),
            ]  # fmt: skip
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=NODE_TIMEOUT_S,
                    check=False, env={**os.environ, "NODE_PATH": str(modules)},
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise ExportError(f"TF.js took over {NODE_TIMEOUT_S} s on the frames") from None
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ExportError(f"TF.js could not run {path} in Node: {reason}")
        described = json.loads((work / "outputs.json").read_text())["outputs"]
        dtypes = {"float32": np.float32, "int32": np.int32, "bool": np.bool_}
        return {
            name: np.concatenate(
                [
                    np.fromfile(
                        work / f"{index}_{number}.bin", dtype=dtypes[described[name]["dtype"]]
                    ).reshape(described[name]["shape"])
                    for index in range(count)
                ]
            )
            for number, name in enumerate(names)
        }


def _check_modules(modules: Path, origin: str) -> None:
    missing = [p for p in TFJS_PACKAGES if not (modules / p / "package.json").is_file()]
    if missing:
        raise RuntimeUnavailableError(f"{modules}: no {', '.join(missing)} there ({origin})")


def _node_version() -> str:
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip().lstrip("v") or "unknown"


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)
