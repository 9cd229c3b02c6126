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
Before Node runs them, the packages and their dependencies (`TFJS_PINS`, installed
at exactly those versions) are checked (`npm_check`): the folders the current
user's or root's and not writable by others, each package's files those of the
registry's tarball. `run.js` loads the packages from that folder by path, so Node
finds nothing else by their names.
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
from collections.abc import Callable, Sequence
from importlib import resources
from importlib.metadata import version
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
from sleap_live.engines.export.npm_check import (
    Pinned,
    packages_problem,
    untrusted_folders,
    untrusted_tree,
)
from sleap_live.engines.export.saved_model import (
    METADATA_FILE,
    SIGNATURE,
    import_tensorflow,
    save,
    tensorflow_function,
    tf_versions,
)
from sleap_live.engines.export.verify import Outputs
from sleap_live.engines.notify import Notify, quiet

MODEL_FILE = "model.json"
TFJS_VERSION = "4.22.0"
TFJS_PACKAGES = (
    "@tensorflow/tfjs-core",
    "@tensorflow/tfjs-backend-cpu",
    "@tensorflow/tfjs-converter",
)
# The packages and dependencies TF.js {TFJS_VERSION} runs with in Node, as the registry
# gave them (npm's lockfile's integrity, and `npm_check.tree_digest` of that tarball's
# files; tests/engines/test_npm_check.py checks them against the tarballs where npm's
# cache holds them). Installed at these versions, so a later release of a dependency
# does not change what runs.
TFJS_PINS = (
    Pinned(
        "@tensorflow/tfjs-backend-cpu",
        "4.22.0",
        "sha512-1u0FmuLGuRAi8D2c3cocHTASGXOmHc/4OvoVDENJayjYkS119fcTc"
        "Qf4iHrtLthWyDIPy3JiPhRrZQC9EwnhLw==",
        "3922f73c5c856a544c9dea6811e6767b8e40e80f22a0e9274c61ca9b17a649a1",
    ),
    Pinned(
        "@tensorflow/tfjs-converter",
        "4.22.0",
        "sha512-PT43MGlnzIo+YfbsjM79Lxk9lOq6uUwZuCc8rrp0hfpLjF6Jv8jS8"
        "4u2jFb+WpUeuF4K33ZDNx8CjiYrGQ2trQ==",
        "ab45f89a6f1ca74dfa27c188848628f254f7173fb9540f38191e2cb3ac951cea",
    ),
    Pinned(
        "@tensorflow/tfjs-core",
        "4.22.0",
        "sha512-LEkOyzbknKFoWUwfkr59vSB68DMJ4cjwwHgicXN0DUi3a0Vh1Er3J"
        "QqCI1Hl86GGZQvY8ezVrtDIvqR1ZFW55A==",
        "9b8620270d8d07e0989ffee3df775d9b4cfd42a5216662cb7849e9bf3685779c",
    ),
    Pinned(
        "@types/long",
        "4.0.2",
        "sha512-MqTGEo5bj5t157U6fA/BiDynNkn0YknVdh48CMPkTSpFTVmvao5UQ"
        "mm7uEF6xBEo7qIMAlY/JSleYaE6VOdpaA==",
        "73e456722ca4417e79cc2ff78c547acf1a5d75ca60a130feb64a2a4e4f0c8349",
    ),
    Pinned(
        "@types/offscreencanvas",
        "2019.7.3",
        "sha512-ieXiYmgSRXUDeOntE1InxjWyvEelZGP63M+cGuquuRLuIKKT1osnk"
        "Xjxev9B7d1nXSug5vpunx+gNlbVxMlC9A==",
        "b7287d691ce82af882874fed1a73a7e73dd7f6f7f01a0a23c4d3d86c54f75842",
    ),
    Pinned(
        "@types/seedrandom",
        "2.4.34",
        "sha512-ytDiArvrn/3Xk6/vtylys5tlY6eo7Ane0hvcx++TKo6RxQXuVfW0A"
        "F/oeWqAj9dN29SyhtawuXstgmPlwNcv/A==",
        "98529930ffdbcedfa50f7873cc47a023ab834067b9c5646cb3a88a26f8171ee7",
    ),
    Pinned(
        "@webgpu/types",
        "0.1.38",
        "sha512-7LrhVKz2PRh+DD7+S+PVaFd5HxaWQvoMqBbsV9fNJO1pjUs1P8bM2"
        "vQVNfk+3URTqbuTI7gkXi0rfsN0IadoBA==",
        "9b90a299d99010b6197142ff52da78fc1f492d020a39e54be6abb33d7fcddcbe",
    ),
    Pinned(
        "long",
        "4.0.0",
        "sha512-XsP+KhQif4bjX1kbuSiySJFNAehNxgLb6hPRGJ9QsUr8ajHkuXGdr"
        "HmFUTUUXhDwVX2R5bY4JNZEwbUiMhV+MA==",
        "8ddc67c93432a66e4c8987ea3fb209d772059cf167d99f9efb050155d389d867",
    ),
    Pinned(
        "node-fetch",
        "2.6.13",
        "sha512-StxNAxh15zr77QvvkmveSQ8uCQ4+v5FkvNTj0OESmiHu+VRi/gXAr"
        "XtkWMElOsOUNLtUEvI4yS+rdtOHZTwlQA==",
        "1386d0d11d7cc5eb16f5fe44c3247d97371c744080fd5d190d08267333e5a778",
    ),
    Pinned(
        "seedrandom",
        "3.0.5",
        "sha512-8OwmbklUNzwezjGInmZ+2clQmExQPvomqjL7LFqOYqtmuxRgQYqOD"
        "3mHaU+MvZn5FLUeVxVfQjwLZW/n/JFuqg==",
        "e192324faa51ec50b88943e6fc2b55bf8bc62c691d4c4dc49eb286bbeff4bc23",
    ),
    Pinned(
        "tr46",
        "0.0.3",
        "sha512-N3WMsuqV66lT30CrXNbEjx4GEwlow3v6rr4mCcv6prnfwhS01rkgy"
        "FdjPNBYd9br7LpXV1+Emh01fHnq2Gdgrw==",
        "626781b8ef8acecdc9511e572b038c79e716c305b06b30f675df5b87c417639d",
    ),
    Pinned(
        "webidl-conversions",
        "3.0.1",
        "sha512-2JAn3z8AR6rjK8Sm8orRC0h/bcl/DqL7tRPdGZ4I1CjdF+EaMLmYx"
        "BHyXuKL849eucPFhvBoxMsflfOb8kxaeQ==",
        "342064c46ecdd7ce3737d176064833d39b8e1a932c82de2ad0a71d88e1cf8523",
    ),
    Pinned(
        "whatwg-url",
        "5.0.0",
        "sha512-saE57nupxk6v3HY35+jzBwYa0rKSy0XR8JSxZPwgLr7ys0IBzhGvi"
        "A1/TUGJLmSVqs8pb9AnvICXEuOHLprYTw==",
        "2f78fd0e0030ce6a2d0eb8d9da3e3de91e5695d97c393d5359b4ed8b09a378a5",
    ),
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
    return _Needs(
        tf,
        convert_tf_saved_model,
        tfjs_node_modules(notify=options.progress) if options.verify else None,
    )


def _versions(needs: _Needs) -> dict[str, str]:
    return {**tf_versions(needs.tf), "tensorflowjs": version("tensorflowjs")}


def _save(function: Any, path: Path, job: Job) -> None:
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


def tfjs_node_modules(cache_dir: str | Path | None = None, notify: Notify = quiet) -> Path:
    """The node_modules folder holding `TFJS_PINS`, installed from npm if needed.

    `SLEAP_LIVE_TFJS_NODE_MODULES`, when set, names that folder and nothing is installed.
    Either is checked first (see the module's notes); `notify` is told when the
    cache's install is made again.

    Raises:
        RuntimeUnavailableError: Node.js is missing, the named folder or the cache's
            install cannot be trusted or holds other files than the registry's, or
            npm is missing or its install failed (one line, with what to do).
    """
    if shutil.which("node") is None:
        raise RuntimeUnavailableError(
            "verifying a TF.js export needs Node.js (node): install it, or export with --no-verify"
        )
    chosen = os.environ.get(MODULES_ENV)
    if chosen:
        modules = Path(chosen)
        _check_modules(modules, f"{MODULES_ENV}={chosen}")
        problem = untrusted_tree(modules) or packages_problem(modules, TFJS_PINS)
        if problem is not None:
            raise RuntimeUnavailableError(f"{modules}: not used ({MODULES_ENV}): {problem}")
        return modules
    root = cache_root(cache_dir)
    prefix = root / "tfjs" / TFJS_VERSION
    modules = prefix / "node_modules"
    problem = untrusted_folders([root, prefix.parent]) or untrusted_tree(prefix)
    if problem is not None:
        raise RuntimeUnavailableError(
            f"{prefix}: not used: {problem}; remove it, or give another --cache-dir"
        )
    if all((modules / package / "package.json").is_file() for package in TFJS_PACKAGES):
        mismatch = packages_problem(modules, TFJS_PINS)
        if mismatch is None:
            return modules
        notify(f"{prefix}: {mismatch}; installing it again")
        shutil.rmtree(prefix)
    npm_install(
        prefix,
        [pin.spec for pin in TFJS_PINS],
        needed_for=f"verifying a TF.js export needs TF.js {TFJS_VERSION}",
        instead=f"set {MODULES_ENV} to a node_modules folder holding {', '.join(TFJS_PACKAGES)}, "
        "or export with --no-verify",
    )
    _check_modules(modules, f"npm's install in {prefix}")
    problem = untrusted_tree(prefix) or packages_problem(modules, TFJS_PINS)
    if problem is not None:
        raise RuntimeUnavailableError(f"{prefix}: npm's install not used: {problem}")
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
                os.path.realpath(modules),
            ]  # fmt: skip
            # No NODE_PATH: run.js loads the checked packages by path.
            environment = {name: value for name, value in os.environ.items() if name != "NODE_PATH"}
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=NODE_TIMEOUT_S,
                    check=False, env=environment,
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
