"""The export driver: the steps every format made from the reference ONNX graph
shares, done once, and the record (`ExportFormat`) by which a format plugs into them.

The steps, in order:

1. the output rule: the file or folder the export writes is claimed (`ExportFile`,
   `ExportFolder`; `output_rule.claim_output`), before any work;
2. loading the model directories;
3. what the format refuses (`ExportFormat.refuse`), in one line naming them;
4. the slots: a "tensorrt"-profile program of a centroid or top-down model needs
   `max_instances`;
5. what the format needs (`ExportFormat.needs`: its converter, its runtime);
6. the reference: the model exported to ONNX and verified against torch, as for
   `--format onnx`;
7. the frames the format is made and checked on, fitted to `frame_size`;
8. the metadata: the reference's, for the format (and, for a converted program, its
   profile's outputs);
9. the format's own steps: `convert` in memory, then `save` into the staged output
   (`output_rule.staged_file`);
10. the verification: the saved export, loaded back (`Check.load`), against
    ONNX Runtime on the reference graph, each check recorded in the metadata, which
    is written last.

A format is one module holding its `ExportFormat` and one row in
`sleap_live.engines.export.formats.FORMAT_TABLE`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.exporter import (
    conversion_frames,
    export_file,
    export_folder,
    export_graph,
    fitted_frames,
)
from sleap_live.engines.export.formats import ExportOptions
from sleap_live.engines.export.onnx import converted_metadata, embedded_metadata, onnx_exported
from sleap_live.engines.export.verify import Outputs, check_against_onnx_runtime
from sleap_live.engines.graph.base import InferenceModel
from sleap_live.engines.load.metadata import TENSORRT_PROFILE, ExportMetadata, sidecar_path
from sleap_live.engines.settings import check_slots
from sleap_live.output_rule import staged_file


@attrs.frozen
class ExportFile:
    """An export that is one file (or package): `output` itself when it ends in
    `file_name`'s suffix, else `output/file_name` (`export_file`).

    Attributes:
        file_name: the name in a folder given as the output ("model.pt2").
        what: what the export is, in the error for another suffix.
    """

    file_name: str
    what: str

    def claim(self, output: str | Path, overwrite: bool) -> Path:
        return export_file(output, self.file_name, self.what, overwrite=overwrite)


@attrs.frozen
class ExportFolder:
    """An export that is a folder: new, empty, or an earlier export of the same format
    (`holds_export`), whose files it replaces (`export_folder`).

    Attributes:
        what: what the export is, in the errors ("a web export").
        holds_export: whether a folder holds such an export.
    """

    what: str
    holds_export: Callable[[Path], bool]

    def claim(self, output: str | Path, overwrite: bool) -> Path:
        return export_folder(output, self.what, self.holds_export, overwrite=overwrite)


@attrs.frozen
class Job:
    """What the driver made for a format's own steps.

    Attributes:
        model: the torch inference model (on the CPU, in eval mode).
        paths: the model directories it was loaded from.
        profile: the profile of the format's program, or None where the format
            takes the reference graph as it is.
        onnx_bytes: the reference: the default-profile ONNX graph, verified against torch.
        metadata: the export's metadata (not verified yet).
        frames: the frames the format is made and checked on, fitted to the frame size
            (none where the format has neither a program nor a check).
        source: where they came from.
        extra: what the format's `needs` gave.
        options: what `export_model` was asked.
    """

    model: InferenceModel
    paths: Sequence[str | Path]
    profile: str | None
    onnx_bytes: bytes
    metadata: ExportMetadata
    frames: np.ndarray
    source: str
    extra: Any
    options: ExportOptions

    @property
    def size(self) -> str:
        """The frames' "HxW", for progress lines."""
        return f"{self.frames.shape[1]}x{self.frames.shape[2]}"


def tensorrt_profile(model_type: str) -> str:
    """The "tensorrt" profile for every model type: float32 inside, fixed slots for
    centroid and top-down models (what converters take)."""
    del model_type
    return TENSORRT_PROFILE


def _none(anything: Any) -> None:
    """The default of a step a format leaves out: nothing needed, nothing refused, no
    runtime to name."""
    del anything


def _torch_only(extra: Any) -> dict[str, str]:
    import torch

    del extra
    return {"torch": torch.__version__}


def _whole(frames: np.ndarray) -> tuple[np.ndarray, ...]:
    return (frames,)


@attrs.frozen
class Check:
    """How a format's saved export is loaded back and checked against ONNX Runtime.

    Attributes:
        load: the saved export at a path, loaded to run frames (outputs by name).
        export: what the export is, in a failed check's error ("the .tflite file").
        runs_in: where it runs, in the progress line ("LiteRT"); empty: a line per
            batch, by its shape.
        runtime: what ran it, for the check's record, given `Job.extra` (None: torch).
        batches: the frame batches it is checked on.
    """

    load: Callable[[Path, Job], Callable[[np.ndarray], Outputs]]
    export: str
    runs_in: str = ""
    runtime: Callable[[Any], str | None] = _none
    batches: Callable[[np.ndarray], tuple[np.ndarray, ...]] = _whole


@attrs.frozen
class ExportFormat:
    """One format, as the driver runs it (see the module's notes); calling it exports.

    Attributes:
        name: the `--format` value, recorded in the metadata.
        output: the output rule: one file or a folder.
        convert: the model in the format, in memory.
        save: writes what `convert` made at the staged path; returns entries the
            metadata file gets beside the metadata ("coreml_check"), or None.
        profile: the profile of the format's program by model type; None: the format
            takes the reference ONNX graph as it is (no program, frames, slots).
        needs: what the format needs (its converter, its runtime), checked before the
            work; handed to the other steps as `Job.extra`.
        refuse: why the format cannot hold a model (the rest of a line after the
            model directories' names), or None.
        check: how the saved export is verified; None: it is not run here.
        versions: the converters' versions, for the metadata's "exporter", given
            `Job.extra`.
        synthetic: how many synthetic frames to make it on, without verification.
        writing: the progress line's first words before the output path.
        metadata_file: where the metadata is written, given the staged output.
        indent: the metadata file's JSON indent.
        resave: `save` again once verified (the metadata rides inside the export).
    """

    name: str
    output: ExportFile | ExportFolder
    convert: Callable[[Job], Any]
    save: Callable[[Any, Path, Job], Mapping[str, Any] | None]
    profile: Callable[[str], str] | None = None
    needs: Callable[[ExportOptions], Any] = _none
    refuse: Callable[[InferenceModel], str | None] = _none
    check: Check | None = None
    versions: Callable[[Any], dict[str, str]] = _torch_only
    synthetic: int = 1
    writing: str = "writing"
    metadata_file: Callable[[Path], Path] = sidecar_path
    indent: int = 1
    resave: bool = False

    def __call__(
        self, paths: Sequence[str | Path], output: str | Path, options: ExportOptions
    ) -> Path:
        return export_with(self, paths, output, options)


def export_with(
    format: ExportFormat, paths: Sequence[str | Path], output: str | Path, options: ExportOptions
) -> Path:
    """Exports the model directories `paths` to `output` in `format` (the module's
    steps); returns the export's path.

    Raises:
        ValueError: `output` breaks the format's output rule.
        ModelConfigError: a model the format refuses, or a slotted model without
            `max_instances`.
        RuntimeUnavailableError: what the format needs is missing.
        ExportError: a step failed, or the export disagrees with ONNX Runtime.
        ModelNotFoundError, CheckpointError: as for `export_model`.
    """
    from sleap_live.engines.graph.build import load_inference_model

    path = format.output.claim(output, options.overwrite)
    progress = options.progress
    progress("loading model")
    model = load_inference_model(paths, options.settings).cpu().eval()
    model_type = model.info.model_type
    reason = format.refuse(model)
    if reason is not None:
        raise ModelConfigError(f"{', '.join(str(directory) for directory in paths)}: {reason}")
    profile = None if format.profile is None else format.profile(model_type)
    if profile == TENSORRT_PROFILE:
        check_slots(model_type, model.info.max_instances)
    extra = format.needs(options)
    onnx_bytes = export_graph(
        model,
        opset=options.opset,
        verify=options.verify,
        verify_frames=options.verify_frames,
        sources=paths,
        progress=progress,
    )
    check = format.check if options.verify else None
    if profile is None:
        metadata = attrs.evolve(embedded_metadata(onnx_bytes), format=format.name)
    else:
        metadata = converted_metadata(onnx_bytes, format.name, profile, format.versions(extra))
    frames, source = np.empty((0, 0, 0, 0), np.uint8), ""
    if profile is not None or check is not None:
        # A format not run here is made on frames, not checked on them.
        searched = check is not None
        chosen = conversion_frames(model, searched, options.verify_frames, paths, format.synthetic)
        frames, source = fitted_frames(chosen.frames, options.size), chosen.source
    job = Job(model, paths, profile, onnx_bytes, metadata, frames, source, extra, options)
    converted = format.convert(job)
    progress(f"{format.writing} {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Made whole in a private place, which replaces an earlier export whole.
    with staged_file(path, "the export") as staged:
        record = format.save(converted, staged, job)
        if check is not None:
            metadata = attrs.evolve(metadata, verification=_checked(check, staged, job))
            if format.resave:
                format.save(converted, staged, attrs.evolve(job, metadata=metadata))
        document = {**metadata.to_dict(), **(record or {})}
        format.metadata_file(staged).write_text(json.dumps(document, indent=format.indent) + "\n")
    return path


def _checked(check: Check, path: Path, job: Job) -> tuple[dict[str, object], ...]:
    """The saved export at `path`, loaded back, against ONNX Runtime on the reference
    graph, batch by batch (by the model's comparison rule); the records."""
    run = check.load(path, job)
    reference = onnx_exported(job.onnx_bytes)
    records = []
    for batch in check.batches(job.frames):
        if check.runs_in:
            job.options.progress(
                f"verifying {len(batch)} frames in {check.runs_in} against ONNX Runtime"
            )
        else:
            job.options.progress(f"verifying on frames {tuple(batch.shape)} against ONNX Runtime")
        records.append(
            check_against_onnx_runtime(
                job.model,
                run(batch),
                reference.run(batch),
                batch,
                job.source,
                export=check.export,
                runtime=check.runtime(job.extra),
            )
        )
    return tuple(records)
