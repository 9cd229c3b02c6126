"""Export an inference model to ONNX or TorchScript, verified, with its metadata.

The steps: pick the verification frames (`sleap_live.engines.export.frames`),
trace the model on the first check batch, verify the export on both check
batches (`sleap_live.engines.export.verify`), then learn whether the graph also
converts the other channel count (1 vs 3) itself. If it does not, the ONNX graph
is exported again with a fixed channel count (and verified again), and runners
convert channels on the host. An unverified export is never probed: it takes
only the model's own channel count.

The "tensorrt" profile's graph is made for one frame size and channel count, so
it is verified on two batch sizes of that one size and never probed.

Every failure is an `ExportError` saying what failed; nothing falls back.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, overload

import numpy as np
import torch

from sleap_live.engines.export.frames import (
    SYNTHETIC_SIZE,
    VerificationFrames,
    check_batches,
    sample_frames,
    verification_frames,
    with_animals,
)
from sleap_live.engines.export.onnx import (
    embed_metadata,
    onnx_exported,
    trace_to_onnx,
)
from sleap_live.engines.export.torchscript import (
    save_torchscript,
    torchscript_exported,
    trace_to_torchscript,
)
from sleap_live.engines.export.verify import (
    Exported,
    detections_per_frame,
    other_channels_reference,
    takes_channels,
    torch_outputs,
    verify_batch,
)
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.graph.preprocess import frame_channels
from sleap_live.engines.host.frames import Frames, convert_channels
from sleap_live.engines.load.dirs import TRAINING_CONFIG
from sleap_live.engines.load.export_cache import package_version
from sleap_live.engines.load.metadata import (
    DEFAULT_OPSET,
    DEFAULT_PROFILE,
    INPUT_NAME,
    TENSORRT_PROFILE,
    ExportMetadata,
    sidecar_path,
)
from sleap_live.engines.notify import Notify, notice, quiet
from sleap_live.engines.settings import check_slots
from sleap_live.output_rule import claim_output, resolve_output, staged_file

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from sleap_live.engines.export.formats import ExportOptions

EXPORT_FORMATS = ("onnx", "torchscript")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}


class TraceOptions(TypedDict, total=False):
    """How `export_graph` traces and verifies (described there; the defaults are
    `_export`'s)."""

    opset: int
    verify: bool
    verify_frames: Frames | None
    note: Notify
    profile: str
    frame_size: tuple[int, int] | None
    frame_shape: tuple[int, int, int] | None


def export_traced(paths: Sequence[str | Path], output: str | Path, options: ExportOptions) -> Path:
    """`export_model` for "onnx" and "torchscript": the model directories' inference
    model traced by `export_graph` (the frames searched for animals are, without
    `verify_frames`, the directories' training labels', then synthetic ones).

    Raises:
        ModelNotFoundError, ModelConfigError, CheckpointError: the model
            directories cannot be loaded.
        ValueError, ExportError: as for `export_graph`.
    """
    from sleap_live.engines.graph.build import load_inference_model

    _output_path(output, options.format, options.overwrite)  # before any work
    options.progress("loading model")
    return export_graph(
        load_inference_model(paths, options.settings),
        output,
        format=options.format,
        sources=paths,
        progress=options.progress,
        overwrite=options.overwrite,
        **options.trace(),
    )


@overload
def export_graph(
    model: InferenceModel,
    output: None = None,
    *,
    format: str = "onnx",
    sources: Sequence[str | Path] = (),
    progress: Notify = quiet,
    overwrite: bool = False,
    **options: Unpack[TraceOptions],
) -> bytes: ...


@overload
def export_graph(
    model: InferenceModel,
    output: str | Path,
    *,
    format: str = "onnx",
    sources: Sequence[str | Path] = (),
    progress: Notify = quiet,
    overwrite: bool = False,
    **options: Unpack[TraceOptions],
) -> Path: ...


def export_graph(
    model: InferenceModel,
    output: str | Path | None = None,
    *,
    format: str = "onnx",
    sources: Sequence[str | Path] = (),
    progress: Notify = quiet,
    overwrite: bool = False,
    **options: Unpack[TraceOptions],
) -> bytes | Path:
    """Exports an `InferenceModel` with its metadata embedded: to the file `output`
    (its metadata also written to `<file>.json`), or, without `output`, to an
    in-memory ONNX model (`OnnxRunner` takes the bytes directly).

    With `verify`, the export and the torch module run on two check batches made
    from the verification frames (two sizes, one odd; two batch sizes); every
    output must agree within `TOLERANCE`; the frames are those in which the model
    finds animals, else a one-line `note` says the detections were not exercised.
    The records (shapes, detections per frame, frame source, largest
    differences) go into the metadata's "verification" field.

    With `frame_shape`, the default-profile graph for frames of that one (height,
    width, channels), traced specialised (`InferenceModel.set_specialised`): the
    frame shape is frozen into the graph and the passes that would not change the
    image at that shape are left out; the batch axis stays dynamic. It is not
    compared with the torch model here (`verify`, `verify_frames`, `note`,
    `profile` and `frame_size` do not apply): it computes the dynamic graph's
    numbers, and `OnnxRunner` checks that it does, bit for bit, on the first batch
    it runs (see `sleap_live.engines.runners.specialise`).

    Args:
        model: the torch inference model (moved to the CPU and put in eval mode).
        output: the file to write (`.onnx` or `.pt`), or a directory to write
            `model.onnx` / `model.pt` into; None: ONNX bytes, nothing written.
        format: "onnx" or "torchscript" (written to a file only).
        sources: model directories the model was built from, recorded with the
            sha256 of their training configs.
        progress: called with a short description of each step.
        overwrite: replace an existing export (`output_rule.claim_output`).
        opset: ONNX opset version (`DEFAULT_OPSET`).
        verify: check the export numerically (default: yes).
        verify_frames: uint8 (N, H, W, C) candidate frames (or batches of
            them, all of one size); the default looks in the training labels of
            `sources`, then uses synthetic frames.
        note: told, in one line, what the verification could not prove where the
            model finds no animals in any frame at hand (see
            `sleap_live.engines.export.frames`; default: stderr).
        profile: the graph's profile: "default" (any frame size, instance lists) or
            "tensorrt" (ONNX only: float32 inside, one frame size, fixed instance
            slots; see `sleap_live.engines.graph.base`); the model is put back in
            its own afterwards.
        frame_size: (height, width) of a "tensorrt" export; the verification frames
            are cut or padded to it. By default, the verification frames' own size
            (or the given frame's, unverified).
        frame_shape: (height, width, channels) of a specialised graph (see above).

    Returns:
        The path of the exported model, or the ONNX bytes without `output`.

    Raises:
        ExportError: the export failed or disagrees with the torch model.
        ValueError: bad arguments (format, output suffix, frames, frame shape).
    """
    if output is None and format == "torchscript":
        raise ValueError("a TorchScript export is written to a file: give an output")
    path = None if output is None else _output_path(output, format, overwrite)
    previous_profile, previous_specialised = model.profile, model.specialised
    try:
        payload, metadata = _export(model.cpu().eval(), format, sources, progress, **options)
    finally:
        model.set_profile(previous_profile).set_specialised(previous_specialised)
    if path is None:
        return payload
    progress(f"writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_file(path, "the export") as staged:
        if format == "onnx":
            staged.write_bytes(payload)
        else:
            save_torchscript(payload, staged, metadata)
        sidecar_path(staged).write_text(metadata.to_json() + "\n")
    return path


def _export(
    model: InferenceModel,
    format: str,
    sources: Sequence[str | Path],
    progress: Notify,
    *,
    opset: int = DEFAULT_OPSET,
    verify: bool = True,
    verify_frames: Frames | None = None,
    note: Notify = notice,
    profile: str = DEFAULT_PROFILE,
    frame_size: tuple[int, int] | None = None,
    frame_shape: tuple[int, int, int] | None = None,
) -> tuple[Any, ExportMetadata]:
    """The export (ONNX bytes with metadata, or a traced module) and its metadata; the
    model is left in the export's profile (`export_graph` puts it back)."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r} (expected one of {EXPORT_FORMATS})")
    if frame_shape is not None:
        height, width, channels = frame_shape
        if height < 1 or width < 1 or channels not in (1, 3):
            raise ValueError(f"frame_shape must be (height, width, 1 or 3), got {frame_shape}")
        if format != "onnx":
            raise ValueError(f"a graph specialised to a frame shape is ONNX, not {format}")
        model.set_profile(DEFAULT_PROFILE).set_specialised(True)
        progress(f"exporting to ONNX for {width}x{height}x{channels} frames")
        example = sample_frames(1, height, width, channels)
        payload, _ = trace_to_onnx(model, example, opset, dynamic_channels=False)
        metadata = _metadata(model, format, opset, (channels,), sources, None, example)
        return embed_metadata(payload, metadata), metadata
    if profile == TENSORRT_PROFILE and format != "onnx":
        raise ValueError(f"the {profile} profile exports to ONNX only, not {format}")
    if profile == TENSORRT_PROFILE:
        check_slots(model.info.model_type, model.info.max_instances)
    model.set_profile(profile)
    fixed_shape = model.tensorrt_profile
    native = frame_channels(model.frame_preprocess) if fixed_shape else model.info.input_channels
    # Names the model in errors: its type and the directories it came from.
    names = f" ({', '.join(str(source) for source in sources)})" if sources else ""
    label = f"the {model.info.model_type} model{names}"
    verification: list[dict[str, Any]] | None = None
    if not verify:
        if verify_frames is None:
            example = sample_frames(1, *SYNTHETIC_SIZE, native)
        else:
            example = verification_frames(native, verify_frames).frames[:1]
        example = fitted_frames(example, frame_size)
        payload, _ = _trace(
            model, format, example, opset, dynamic_channels=False, progress=progress
        )
        input_channels: tuple[int, ...] = (native,)
    else:
        progress("choosing verification frames: looking for animals")

        def detect(frames: np.ndarray) -> list[int]:
            fitted = fitted_frames(frames, frame_size) if fixed_shape else frames
            return detections_per_frame(torch_outputs(model, fitted), len(frames))

        chosen = with_animals(verification_frames(native, verify_frames, sources), detect)
        if fixed_shape:
            batches = _fixed_size_batches(fitted_frames(chosen.frames, frame_size))
        else:
            batches = check_batches(chosen.frames)

        def verified(exported: Exported) -> list[dict[str, Any]]:
            records = []
            for batch in batches:
                progress(f"verifying on frames {tuple(batch.shape)}")
                records.append(
                    verify_batch(
                        model,
                        exported,
                        batch,
                        label=label,
                        source=chosen.source,
                    )
                )
            return records

        # A fixed-shape graph's channel count is fixed; the host converts frames of
        # the other. Else the graph takes either count if it converts the other
        # count's frames as torch does, which frames without animals cannot show.
        other = 1 if native == 3 else 3
        other_frames = None
        if not fixed_shape:
            progress(f"checking {other}-channel input")
            other_frames = convert_channels(batches[-1], other)
        other_reference = (
            None if other_frames is None else other_channels_reference(model, other_frames)
        )
        payload, exported = _trace(
            model,
            format,
            batches[0],
            opset,
            dynamic_channels=other_reference is not None,
            progress=progress,
        )
        verification = verified(exported)
        if (
            other_frames is not None
            and other_reference is not None
            and takes_channels(model, exported, other_frames, other_reference)
        ):
            input_channels = (1, 3)
        else:
            input_channels = (native,)
            if other_reference is not None and format == "onnx":
                progress("re-exporting with a fixed channel count")
                payload, exported = _trace(
                    model, format, batches[0], opset, dynamic_channels=False, progress=progress
                )
                verification = verified(exported)
        example = batches[0]
        unproven = chosen.note(label)
        if unproven is not None:
            note(unproven)

    metadata = _metadata(model, format, opset, input_channels, sources, verification, example)
    if format == "onnx":
        return embed_metadata(payload, metadata), metadata
    return payload, metadata


def _metadata(
    model: InferenceModel,
    format: str,
    opset: int,
    input_channels: tuple[int, ...],
    sources: Sequence[str | Path],
    verification: list[dict[str, Any]] | None,
    example: np.ndarray,
) -> ExportMetadata:
    """The metadata embedded in an export of `model` traced on `example`."""
    return ExportMetadata(
        info=model.info,
        format=format,
        input_name=INPUT_NAME,
        input_channels=input_channels,
        output_names=tuple(model.output_names),
        sleap_live_version=package_version(),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        sources=tuple(_source_record(Path(source)) for source in sources),
        exporter={"torch": torch.__version__, **({"opset": opset} if format == "onnx" else {})},
        verification=None if verification is None else tuple(verification),
        profile=model.profile,
        tensorrt=_tensorrt_record(example, input_channels[0]) if model.tensorrt_profile else None,
    )


def conversion_frames(
    model: InferenceModel,
    verify: bool,
    verify_frames: Frames | None,
    sources: Sequence[str | Path],
    n_synthetic: int,
) -> VerificationFrames:
    """The frames a converted export (pt2, TFLite, Core ML) is made and checked on:
    with `verify`, frames that show animals where the candidates have any
    (`with_animals`); else the given frames, or `n_synthetic` synthetic ones."""
    native = model.info.input_channels
    if verify:

        def detect(frames: np.ndarray) -> list[int]:
            return detections_per_frame(torch_outputs(model, frames), len(frames))

        return with_animals(verification_frames(native, verify_frames, sources), detect)
    if verify_frames is not None:
        return verification_frames(native, verify_frames)
    return VerificationFrames(
        sample_frames(n_synthetic, *SYNTHETIC_SIZE, native), "synthetic frames"
    )


def fitted_frames(frames: np.ndarray, frame_size: tuple[int, int] | None) -> np.ndarray:
    """Frames cut or padded (bottom/right, with each frame's median) to `frame_size`."""
    if frame_size is None:
        return frames
    height, width = frame_size
    if height < 1 or width < 1:
        raise ValueError(f"frame_size must be positive, got {frame_size}")
    cut = frames[:, :height, :width]
    fill = np.median(cut.reshape(len(cut), -1, cut.shape[3]), axis=1).astype(np.uint8)
    canvas = np.empty((len(cut), height, width, cut.shape[3]), np.uint8)
    canvas[:] = fill[:, None, None, :]
    canvas[:, : cut.shape[1], : cut.shape[2]] = cut
    return canvas


def _fixed_size_batches(frames: np.ndarray) -> list[np.ndarray]:
    """Two check batches of the frames' own size: up to two frames, then three."""
    count = len(frames)
    return [
        np.ascontiguousarray(frames[: min(count, 2)]),
        np.ascontiguousarray(frames[[(2 + index) % count for index in range(3)]]),
    ]


def _tensorrt_record(example: np.ndarray, channels: int) -> dict[str, Any]:
    """What a TensorRT engine builder needs to know about a tensorrt-profile graph."""
    return {
        "frame_shape": [int(example.shape[1]), int(example.shape[2]), channels],
        "resize": "host-computed int16-valued weights, float32 elementwise products "
        "and sums of integers below 2^24, no MatMul",
        "tf32": {
            "resize_exact": True,
            "reason": "TF32 rounds only MatMul and convolution inputs; the resize has "
            "neither, and its float32 arithmetic is exact, so TF32 may stay on for it "
            "(the network's convolutions round as TF32 does, as on any GPU)",
        },
    }


def _trace(
    model: InferenceModel,
    format: str,
    example: np.ndarray,
    opset: int,
    *,
    dynamic_channels: bool,
    progress: Notify,
) -> tuple[Any, Exported]:
    """The raw export (ONNX bytes or traced module) and the same ready to verify."""
    if format == "onnx":
        progress("exporting to ONNX")
        onnx_bytes, notes = trace_to_onnx(model, example, opset, dynamic_channels=dynamic_channels)
        return onnx_bytes, onnx_exported(onnx_bytes, notes)
    progress("tracing to TorchScript")
    traced, notes = trace_to_torchscript(model, example)
    return traced, torchscript_exported(traced, model, notes)


def export_file(output: str | Path, file_name: str, what: str, *, overwrite: bool = False) -> Path:
    """The file (or package) an export to `output` writes: `output` itself when it
    ends in `file_name`'s suffix, else `output/file_name`.

    Raises:
        ValueError: `output` ends in another suffix; the message says `what` it must
            be ("a pt2 export is a '.pt2' file").
    """
    path = Path(output)
    suffix = Path(file_name).suffix
    if path.suffix != suffix:
        if path.suffix:
            raise ValueError(f"{path}: {what} (or a directory)")
        path = _in_folder(path, file_name)
    claim_output(path, "the export", overwrite=overwrite)  # again when written (`staged_file`)
    return path


def export_folder(
    output: str | Path,
    what: str,
    holds_export: Callable[[Path], bool],
    *,
    overwrite: bool = False,
) -> Path:
    """The folder an export to `output` writes: new, empty, or holding an earlier
    export of the same format (`holds_export`), whose files it replaces; a folder
    holding anything else is never written into.

    Raises:
        ValueError: `output` is a file, or a folder holding other files; the message
            says `what` the export is ("a web export").
    """
    folder = Path(output)
    resolve_output(folder, "the export")  # the link rule, before the folder is looked into
    if folder.is_file():
        raise ValueError(f"{folder}: {what} is a folder, and this is a file")
    if folder.is_dir() and any(folder.iterdir()) and not holds_export(folder):
        raise ValueError(f"{folder}: not empty and not {what}; give a new or empty folder")
    # An earlier export of the same format: replaced only when asked.
    claim_output(folder, "the export", overwrite=overwrite)  # again when written (`staged_file`)
    return folder


def _output_path(output: str | Path, format: str, overwrite: bool) -> Path:
    """The file an export to `output` writes: `output` itself or `output/model.<suffix>`."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r} (expected one of {EXPORT_FORMATS})")
    output = Path(output)
    suffix = SUFFIXES[format]
    if output.suffix in SUFFIXES.values():
        if output.suffix != suffix:
            raise ValueError(f"{output}: {format} exports are written to '{suffix}' files")
        path = output
    else:
        path = _in_folder(output, f"model{suffix}")
    claim_output(path, "the export", overwrite=overwrite)  # again when written (`staged_file`)
    return path


def _in_folder(folder: Path, file_name: str) -> Path:
    """`folder/file_name`, refused before anything is exported where `folder` is a file
    (a video, say, given as the output): nothing is written over it or beside it."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(
            f"{folder}: a file, not a folder; give a new '{Path(file_name).suffix}' path "
            "or a folder"
        )
    return folder / file_name


def _source_record(source: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"path": str(source.resolve())}
    config = source / TRAINING_CONFIG
    if config.is_file():
        record["training_config"] = TRAINING_CONFIG
        record["sha256"] = hashlib.sha256(config.read_bytes()).hexdigest()
    return record
