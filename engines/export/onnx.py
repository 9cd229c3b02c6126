"""Export an inference model to ONNX or TorchScript, with its metadata, verified.

The whole inference model (channel conversion, resizing, padding, network, peak
finding, crops) is one graph with a uint8 (batch, height, width, channels) input
named "frames" whose batch, height, width and channel axes are all dynamic, and
whose instance-list outputs have a dynamic instance axis.

ONNX export uses torch's TorchScript-based exporter (`dynamo=False`): under torch
2.13 it keeps every shape computed from the input (padding to the stride,
`scale_factor` resizes, `nonzero` instance counts) symbolic, and exports in well
under a second. The torch.export-based exporter specialises the channel axis,
needs tens of seconds, mistranslates `%` on symbolic sizes, and its antialiased
`Resize` disagrees with torch on odd frame sizes. Neither exporter can express
torch's antialiased bilinear downscale with the same numbers, so inference models
implement it with operations that export (see `sleap_live.engines.graph.preprocess`).

Tracing freezes any Python value computed from a shape, so every export is checked
numerically against the torch module on frames of two sizes and batch sizes, and
once with the other channel count (1 vs 3) to learn whether the graph converts
channels itself; if it does not, the ONNX input is exported with a fixed channel
count and runners convert on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import importlib.metadata
import io
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sleap_live.engines.errors import (
    EngineError,
    ExportError,
    ModelConfigError,
    ModelNotFoundError,
)
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.host.outputs import INSTANCE_OUTPUTS
from sleap_live.engines.load.metadata import (
    INPUT_NAME,
    METADATA_KEY,
    TORCHSCRIPT_METADATA_FILE,
    ExportMetadata,
    read_onnx_info,
    read_onnx_metadata,
    sidecar_path,
)

__all__ = [
    "DEFAULT_OPSET",
    "EXPORT_FORMATS",
    "TOLERANCE",
    "export_inference_model",
    "export_model",
    "export_onnx_bytes",
    "main",
    "read_onnx_info",
    "read_onnx_metadata",
    "read_torchscript_metadata",
    "sample_frames",
]

EXPORT_FORMATS = ("onnx", "torchscript")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}
DEFAULT_OPSET = 17
# Largest difference allowed between the export and the torch module, in output
# units: pixels for coordinates, confidence for scores.
TOLERANCE = 1e-3
# (batch, height, width) of the default check frames: different batch sizes and
# odd sizes that are multiples of no stride, so frozen shapes show up.
CHECK_SHAPES = ((2, 240, 320), (3, 203, 275))
TRAINING_CONFIG_NAMES = ("training_config.yaml", "training_config.json")

# Warnings torch raises on every TorchScript-based export that say nothing about
# this model: the exporter's own deprecation, and a note on negative indices in
# advanced indexing (inference models index with `nonzero` results, never negative).
_EXPORTER_NOISE = (
    r"You are using the legacy TorchScript-based ONNX export",
    r"The feature will be removed",
    r"Exporting aten::index operator of advanced indexing",
    r"`torch\.jit\.trace",
)

Outputs = dict[str, np.ndarray]
Progress = Callable[[str], None]


def sample_frames(batch: int, height: int, width: int, channels: int, seed: int = 0) -> np.ndarray:
    """Deterministic synthetic frames: a smooth background with a few bright blobs.

    They give peak finders something to find, so that a check compares real
    instance lists rather than empty ones.

    Returns:
        uint8 array of shape (batch, height, width, channels).
    """
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    frames = np.empty((batch, height, width, channels), np.uint8)
    for index in range(batch):
        image = 50 + 25 * np.sin(cols / 17 + index) * np.cos(rows / 23)
        for _ in range(int(rng.integers(2, 6))):
            centre_row, centre_col = rng.uniform(0.15, 0.85, 2) * (height, width)
            sigma_row, sigma_col = rng.uniform(3, 12, 2)
            image = image + rng.uniform(120, 200) * np.exp(
                -((rows - centre_row) ** 2) / (2 * sigma_row**2)
                - (cols - centre_col) ** 2 / (2 * sigma_col**2)
            )
        tint = rng.uniform(0.8, 1.0, channels)
        noisy = image[..., None] * tint + rng.normal(0, 3, (height, width, channels))
        frames[index] = np.clip(noisy, 0, 255).astype(np.uint8)
    return frames


def export_model(
    paths: Sequence[str | Path],
    output: str | Path,
    *,
    format: str = "onnx",
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    frames: Sequence[np.ndarray] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Builds the inference model of one or two sleap-nn model directories and exports it.

    Args:
        paths: a model directory, or a centroid and a centered-instance directory
            (in any order) for a top-down model.
        output: the file to write (`.onnx` or `.pt`), or a directory to write
            `model.onnx` / `model.pt` into.
        format: "onnx" or "torchscript".
        opset: ONNX opset version.
        verify: compare the export with the torch model (see
            `export_inference_model`).
        frames: uint8 (B, H, W, C) batches to check with instead of synthetic ones.
        progress: called with a short description of each step.

    Returns:
        The path of the exported model. Its metadata is embedded and also written
        to `<file>.json`.

    Raises:
        ValueError: unknown format, or an output file whose suffix does not fit it.
        ModelNotFoundError, ModelConfigError, CheckpointError: the model
            directories cannot be loaded.
        ExportError: the export failed or does not match the torch model.
    """
    from sleap_live.engines.graph.build import load_inference_model

    _output_path(output, format)
    notify = progress or _ignore
    notify("loading model")
    model = load_inference_model(paths)
    return export_inference_model(
        model,
        output,
        format=format,
        opset=opset,
        verify=verify,
        frames=frames,
        sources=paths,
        progress=progress,
    )


def export_inference_model(
    model: InferenceModel,
    output: str | Path,
    *,
    format: str = "onnx",
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    frames: Sequence[np.ndarray] | None = None,
    sources: Sequence[str | Path] = (),
    progress: Progress | None = None,
) -> Path:
    """Exports an `InferenceModel` and embeds its metadata.

    The first check batch is the example input of the trace. The export is then
    run on a frame with the other channel count (1 vs 3) to learn whether the graph
    converts channels itself. With `verify`, every check batch is run through the
    export and the torch module and every output must agree within `TOLERANCE`;
    the differences are recorded in the metadata's "verification" field.

    Args:
        model: the torch inference model (moved to the CPU and put in eval mode).
        output: the file to write (`.onnx` or `.pt`), or a directory.
        format: "onnx" or "torchscript".
        opset: ONNX opset version.
        verify: check the export numerically.
        frames: uint8 (B, H, W, C) check batches, at least two of different sizes
            for a meaningful check; the default is `CHECK_SHAPES` synthetic frames.
        sources: model directories the model was built from, recorded with the
            sha256 of their training configs.
        progress: called with a short description of each step.

    Returns:
        The path of the exported model.

    Raises:
        ExportError: the export failed or disagrees with the torch model.
        ValueError: bad arguments (format, frames).
    """
    notify = progress or _ignore
    path = _output_path(output, format)
    payload, metadata = _export(model, format, opset, verify, frames, sources, notify)
    notify(f"writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if format == "onnx":
        path.write_bytes(payload)
    else:
        payload.save(str(path), _extra_files={TORCHSCRIPT_METADATA_FILE: metadata.to_json()})
    sidecar_path(path).write_text(metadata.to_json() + "\n")
    return path


def export_onnx_bytes(
    model: InferenceModel,
    *,
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    frames: Sequence[np.ndarray] | None = None,
    sources: Sequence[str | Path] = (),
    progress: Progress | None = None,
) -> bytes:
    """Exports an `InferenceModel` to an in-memory ONNX model (metadata embedded).

    Same steps and arguments as `export_inference_model`, without writing files;
    `OnnxRunner` takes the bytes directly.

    Raises:
        ExportError: the export failed or disagrees with the torch model.
    """
    payload, _ = _export(model, "onnx", opset, verify, frames, sources, progress or _ignore)
    return payload


def _export(
    model: InferenceModel,
    format: str,
    opset: int,
    verify: bool,
    frames: Sequence[np.ndarray] | None,
    sources: Sequence[str | Path],
    notify: Progress,
) -> tuple[Any, ExportMetadata]:
    """The export (ONNX bytes with metadata, or a traced module) and its metadata."""
    model = model.cpu().eval()
    native = model.info.input_channels
    other = 1 if native == 3 else 3
    batches = _check_batches(frames, native)

    if format == "onnx":
        notify("exporting to ONNX")
        onnx_bytes, tracer_notes = _export_onnx(model, batches[0], opset, dynamic_channels=True)
        exported = _onnx_callable(onnx_bytes)
    else:
        notify("tracing to TorchScript")
        traced, tracer_notes = _trace(model, batches[0])
        exported = _torchscript_callable(traced, model.output_names)

    notify(f"checking {other}-channel input")
    probe = sample_frames(1, batches[-1].shape[1], batches[-1].shape[2], other, seed=7)
    if _agrees(model, exported, probe):
        input_channels = (1, 3)
    else:
        input_channels = (native,)
        if format == "onnx":
            notify("re-exporting with a fixed channel count")
            onnx_bytes, tracer_notes = _export_onnx(
                model, batches[0], opset, dynamic_channels=False
            )
            exported = _onnx_callable(onnx_bytes)

    verification = None
    if verify:
        verification = []
        for batch in batches:
            notify(f"verifying on frames {tuple(batch.shape)}")
            verification.append(_verify(model, exported, batch, tracer_notes))

    metadata = ExportMetadata(
        info=model.info,
        format=format,
        input_name=INPUT_NAME,
        input_channels=input_channels,
        output_names=tuple(model.output_names),
        sleap_live_version=_package_version(),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        sources=tuple(_source_record(Path(source)) for source in sources),
        exporter={"torch": torch.__version__, **({"opset": opset} if format == "onnx" else {})},
        verification=None if verification is None else tuple(verification),
    )
    if format == "onnx":
        return _with_metadata(onnx_bytes, metadata), metadata
    return traced, metadata


def read_torchscript_metadata(path: str | Path) -> ExportMetadata:
    """The metadata embedded in a sleap-live TorchScript (`.pt`) export.

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not TorchScript or carries no sleap-live metadata.
    """
    return _load_torchscript(path)[1]


def load_torchscript(path: str | Path) -> InferenceModel:
    """Loads a sleap-live TorchScript export as an `InferenceModel` (on the CPU).

    Raises:
        ModelNotFoundError: the file does not exist.
        ModelConfigError: the file is not TorchScript or carries no sleap-live metadata.
    """
    module, metadata = _load_torchscript(path)
    return LoadedTorchScript(module, metadata)


class LoadedTorchScript(InferenceModel):
    """A TorchScript export wrapped back into the `InferenceModel` contract."""

    def __init__(self, module: torch.jit.ScriptModule, metadata: ExportMetadata) -> None:
        super().__init__()
        self.module = module
        self.metadata = metadata
        self.info = metadata.info
        self.output_names = metadata.output_names

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.module(frames))


def main(argv: list[str] | None = None) -> int:
    """`sleap-live export MODEL_DIR [MODEL_DIR2] -o OUT [--format] [--opset] [--no-verify]`.

    Returns:
        The process exit status: 0 on success, 1 on a model, output or export
        error, 2 on bad command-line arguments.
    """
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(
        prog="sleap-live export",
        description="Export sleap-nn model directories to one ONNX or TorchScript file.",
    )
    parser.add_argument(
        "model_dirs",
        nargs="+",
        metavar="MODEL_DIR",
        help="model directory; give a centroid and a centered-instance directory for top-down",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="output file or directory (default: <first MODEL_DIR>/sleap_live.onnx or .pt)",
    )
    parser.add_argument("-f", "--format", choices=EXPORT_FORMATS, default="onnx")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset version")
    parser.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip the numerical comparison with the torch model",
    )
    args = parser.parse_args(argv)
    if len(args.model_dirs) > 2:
        parser.error("give one model directory, or two for a top-down model")
    output = args.output or Path(args.model_dirs[0]) / f"sleap_live{SUFFIXES[args.format]}"

    console = Console(stderr=True)
    try:
        with console.status("exporting") as status:
            path = export_model(
                args.model_dirs,
                output,
                format=args.format,
                opset=args.opset,
                verify=args.verify,
                progress=lambda step: status.update(step),
            )
    except (EngineError, OSError, ValueError) as error:
        console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        return 1

    metadata = ExportMetadata.from_json(sidecar_path(path).read_text(), str(path))
    console.print(f"exported [bold]{metadata.info.model_type}[/bold] model to {path}")
    if metadata.verification:
        table = Table(title=f"largest difference from torch (tolerance {TOLERANCE:g})")
        table.add_column("frames")
        table.add_column("instances", justify="right")
        names = list(metadata.verification[0]["max_abs_diff"])
        for name in names:
            table.add_column(name, justify="right")
        for check in metadata.verification:
            diffs = check["max_abs_diff"]
            table.add_row(
                "×".join(str(n) for n in check["frames"]),
                "-" if check["instances"] is None else str(check["instances"]),
                *(f"{diffs[name]:.2g}" for name in names),
            )
        console.print(table)
    return 0


def _ignore(step: str) -> None:
    del step


def _output_path(output: str | Path, format: str) -> Path:
    """The file an export to `output` writes: `output` itself or `output/model.<suffix>`."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r} (expected one of {EXPORT_FORMATS})")
    output = Path(output)
    suffix = SUFFIXES[format]
    if output.suffix in SUFFIXES.values():
        if output.suffix != suffix:
            raise ValueError(f"{output}: {format} exports are written to '{suffix}' files")
        return output
    return output / f"model{suffix}"


def _check_batches(frames: Sequence[np.ndarray] | None, channels: int) -> list[np.ndarray]:
    if frames is None:
        return [
            sample_frames(batch, height, width, channels, seed=index)
            for index, (batch, height, width) in enumerate(CHECK_SHAPES)
        ]
    batches = [np.asarray(batch) for batch in frames]
    if not batches:
        raise ValueError("frames: give at least one uint8 (B, H, W, C) batch")
    for batch in batches:
        if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[-1] not in (1, 3):
            raise ValueError(
                f"frames: expected uint8 (B, H, W, C) batches with 1 or 3 channels, "
                f"got {batch.dtype} {batch.shape}"
            )
    return batches


@contextlib.contextmanager
def _tracing_warnings() -> Iterator[list[str]]:
    """Silences exporter noise and collects what the tracer says about this model."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for pattern in _EXPORTER_NOISE:
            warnings.filterwarnings("ignore", message=pattern)
        yield notes
    notes.extend(dict.fromkeys(_first_sentence(str(warning.message)) for warning in caught))


def _export_onnx(
    model: InferenceModel, example: np.ndarray, opset: int, *, dynamic_channels: bool
) -> tuple[bytes, list[str]]:
    input_axes = {0: "batch", 1: "height", 2: "width"}
    if dynamic_channels:
        input_axes[3] = "channels"
    dynamic_axes: dict[str, dict[int, str]] = {INPUT_NAME: input_axes}
    for name in model.output_names:
        if name in INSTANCE_OUTPUTS:
            dynamic_axes[name] = {0: "instances"}
    buffer = io.BytesIO()
    with _tracing_warnings() as notes, torch.no_grad(), _native_stdout_silenced():
        try:
            torch.onnx.export(
                model,
                (torch.from_numpy(example),),
                buffer,
                dynamo=False,
                opset_version=opset,
                input_names=[INPUT_NAME],
                output_names=list(model.output_names),
                dynamic_axes=dynamic_axes,
                do_constant_folding=True,
            )
        except torch.onnx.errors.UnsupportedOperatorError as error:
            raise ExportError(
                f"ONNX export of the {model.info.model_type} model failed: "
                f"{_first_line(error)} (try --format torchscript)"
            ) from error
        except Exception as error:  # the exporter raises many kinds of RuntimeError
            raise ExportError(
                f"ONNX export of the {model.info.model_type} model failed: {_first_line(error)}"
            ) from error
    return buffer.getvalue(), notes


@contextlib.contextmanager
def _native_stdout_silenced() -> Iterator[None]:
    """Discards what native code writes to stdout (file descriptor 1) meanwhile.

    torch 2.13's TorchScript-based exporter always enables its C++ log (it tests a
    function object for truth), which prints the whole traced graph to stdout
    whenever an export fails; the `ExportError` raised instead says what failed.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _trace(model: InferenceModel, example: np.ndarray) -> tuple[torch.jit.ScriptModule, list[str]]:
    with _tracing_warnings() as notes, torch.no_grad():
        try:
            traced = torch.jit.trace(model, (torch.from_numpy(example),), check_trace=False)
        except Exception as error:  # tracing raises RuntimeError, TypeError, ...
            raise ExportError(
                f"TorchScript trace of the {model.info.model_type} model failed: "
                f"{_first_line(error)}"
            ) from error
    return traced, notes


def _onnx_callable(onnx_bytes: bytes) -> Callable[[np.ndarray], Outputs]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    # A graph that rejects a probe frame is an expected outcome, not an error to log.
    options.log_severity_level = 4
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]

    def run(frames: np.ndarray) -> Outputs:
        return dict(zip(names, session.run(None, {INPUT_NAME: frames}), strict=True))

    return run


def _torchscript_callable(
    module: torch.jit.ScriptModule, names: Sequence[str]
) -> Callable[[np.ndarray], Outputs]:
    def run(frames: np.ndarray) -> Outputs:
        with torch.inference_mode():
            outputs = module(torch.from_numpy(frames))
        return {name: output.numpy() for name, output in zip(names, outputs, strict=True)}

    return run


def _torch_outputs(model: InferenceModel, frames: np.ndarray) -> Outputs:
    with torch.inference_mode():
        outputs = model(torch.from_numpy(frames))
    return {name: output.numpy() for name, output in zip(model.output_names, outputs, strict=True)}


def _agrees(
    model: InferenceModel, exported: Callable[[np.ndarray], Outputs], frames: np.ndarray
) -> bool:
    try:
        diffs = _differences(_torch_outputs(model, frames), exported(frames), "probe")
    except Exception:  # any failure means the graph does not take these frames
        return False
    return all(diff <= TOLERANCE for diff in diffs.values())


def _verify(
    model: InferenceModel,
    exported: Callable[[np.ndarray], Outputs],
    frames: np.ndarray,
    tracer_notes: Sequence[str],
) -> dict[str, Any]:
    shape = "×".join(str(n) for n in frames.shape)
    hint = f"; the tracer warned: {' | '.join(tracer_notes)}" if tracer_notes else ""
    reference = _torch_outputs(model, frames)
    try:
        actual = exported(frames)
    except Exception as error:  # onnxruntime raises its own exception types
        raise ExportError(
            f"the export fails on {shape} frames that the torch model accepts: "
            f"{_first_line(error)}{hint}"
        ) from error
    diffs = _differences(reference, actual, f"on {shape} frames")
    too_large = {name: diff for name, diff in diffs.items() if not diff <= TOLERANCE}
    if too_large:
        listed = ", ".join(f"{name} {diff:.3g}" for name, diff in too_large.items())
        raise ExportError(
            f"the export differs from the torch model on {shape} frames by more than "
            f"{TOLERANCE:g}: {listed}{hint}"
        )
    instances = reference.get(INSTANCE_OUTPUTS[0])
    return {
        "frames": list(frames.shape),
        "instances": None if instances is None else int(instances.shape[0]),
        "max_abs_diff": diffs,
    }


def _differences(
    reference: Outputs, actual: Mapping[str, np.ndarray], where: str
) -> dict[str, float]:
    """Largest absolute difference per output; raises if shapes or NaN masks differ."""
    diffs = {}
    for name, expected in reference.items():
        got = np.asarray(actual[name])
        if got.shape != expected.shape:
            raise ExportError(
                f"{where}: output {name!r} has shape {got.shape} in the export "
                f"but {expected.shape} in torch"
            )
        expected64, got64 = expected.astype(np.float64), got.astype(np.float64)
        missing = np.isnan(expected64)
        if not np.array_equal(missing, np.isnan(got64)):
            raise ExportError(f"{where}: output {name!r} is NaN in different places")
        delta = np.abs(expected64[~missing] - got64[~missing])
        diffs[name] = float(delta.max()) if delta.size else 0.0
    return diffs


def _with_metadata(onnx_bytes: bytes, metadata: ExportMetadata) -> bytes:
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    del model.metadata_props[:]
    model.metadata_props.add(key=METADATA_KEY, value=metadata.to_json())
    model.producer_name = "sleap-live"
    model.producer_version = metadata.sleap_live_version
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _load_torchscript(path: str | Path) -> tuple[torch.jit.ScriptModule, ExportMetadata]:
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: no such TorchScript file")
    extra = {TORCHSCRIPT_METADATA_FILE: ""}
    try:
        with warnings.catch_warnings():
            # TorchScript is deprecated but still the one torch format that keeps
            # data-dependent instance counts and antialiased resizes exact.
            warnings.filterwarnings(
                "ignore", message=r"`torch\.jit\.load", category=DeprecationWarning
            )
            module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    except RuntimeError as error:
        raise ModelConfigError(f"{path}: not a TorchScript file ({_first_line(error)})") from error
    if not extra[TORCHSCRIPT_METADATA_FILE]:
        raise ModelConfigError(f"{path}: no sleap-live metadata; not exported by sleap-live")
    metadata = ExportMetadata.from_json(extra[TORCHSCRIPT_METADATA_FILE], str(path))
    return module, metadata


def _source_record(source: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"path": str(source.resolve())}
    for name in TRAINING_CONFIG_NAMES:
        config = source / name
        if config.is_file():
            record["training_config"] = name
            record["sha256"] = hashlib.sha256(config.read_bytes()).hexdigest()
            break
    return record


def _package_version() -> str:
    try:
        return importlib.metadata.version("sleap-live")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _first_sentence(text: str) -> str:
    return text.strip().splitlines()[0].split(". ")[0] if text.strip() else ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
