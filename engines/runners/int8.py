"""`precision="int8"` on the CPU: the export's networks quantised, run by ONNX Runtime.

Never the default; asked for with `--precision int8` (`load_runner(...,
precision="int8")`) with engine "onnx" or "auto" on the CPU. At load:

1. the float32 graph (the export, cached or made now) runs on the calibration
   candidates: the verification frames (frames of the video about to be run, or
   `verify_frames=`), else the model directories' training-label frames
   (`sleap_live.engines.export.frames.verification_frames`); up to
   `CALIBRATION_FRAMES` of those in which it finds animals are kept (all
   candidates where it finds none);
2. the networks are quantised on them (`sleap_live.engines.export.quantise`), in
   the form that fits this CPU (`quant_form`: U8S8 on x86 with VNNI and on arm64,
   U8U8 on x86 without VNNI), or the int8 graph is read from the cache
   (`int8/` in the cache root, keyed by the float32 graph, the frames and the form);
3. both graphs run on those frames: the int8 poses are matched to the float32
   ones (`sleap_live.engines.host.compare`) and both are timed in alternation
   (`cpu_choice.measure`), one batch of those frames each;
4. one line says the form, the error (median and p99 px of the points both found,
   frames whose instance count changed, points found by one only) and the speed-up
   (`Int8Check.line`). The figures are kept beside the cached graph, so a later
   load prints them without measuring again;
5. if int8 is slower than fp32 on those frames, or its median point is further than
   `MEDIAN_BOUND_PX` from fp32's (the bound the docs give), one more line says so
   and the float32 graph runs instead (`fp32_instead`), unless `keep=True`
   (`--keep-int8`, `load_runner(..., keep_int8=True)`).

The runner returned is an `OnnxRunner` of the int8 graph, or of the float32 graph
when int8 falls back (both without graphs specialised to frame shapes: those are
checked bit for bit against the float32 graph, which int8 is not).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sleap_live.engines.engine_table import FP32, INT8
from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export.frames import verification_frames
from sleap_live.engines.export.quantise import (
    INT8_FOLDER,
    QuantForm,
    int8_key,
    quantise_networks,
    this_cpu_form,
)
from sleap_live.engines.host.compare import pose_difference
from sleap_live.engines.load.export_cache import ExportCache
from sleap_live.engines.notify import Notify, notice
from sleap_live.engines.runners.cpu_choice import measure
from sleap_live.engines.runners.onnx import OnnxRunner

# Frames with animals kept for calibration and the check.
CALIBRATION_FRAMES = 16
# Frames of the float32 graph per search batch.
SEARCH_BATCH = 4
# The figures kept beside a cached int8 graph.
CHECK_SUFFIX = ".check.json"
SYNTHETIC = "synthetic"
# int8's documented error (docs/cli.md): its median point within a tenth of a pixel
# of fp32's. Beyond it, or slower than fp32, int8 gives way to fp32.
MEDIAN_BOUND_PX = 0.1


@attrs.frozen
class Int8Check:
    """The int8 graph against float32 on its calibration frames.

    Attributes:
        frames: frames compared (one batch).
        source: where the frames came from.
        form: how the networks were quantised (`QuantForm.describe`).
        points_median_px, points_p99_px: distance between matched points both found
            (NaN when no point was compared).
        count_changes: frames on which the instance counts differ.
        presence_mismatches: matched points found by one side only.
        fp32_ms, int8_ms: median milliseconds per frame of each graph, whole
            (graph and host decoding), on that batch.
        how: "measured now" or "measured when quantised (cached)".
    """

    frames: int
    source: str
    form: str
    points_median_px: float
    points_p99_px: float
    count_changes: int
    presence_mismatches: int
    fp32_ms: float
    int8_ms: float
    how: str = "measured now"

    @property
    def speedup(self) -> float:
        return self.fp32_ms / self.int8_ms

    def line(self) -> str:
        return (
            f"int8 (networks quantised by ONNX Runtime, {self.form}) against fp32 on "
            f"{self.frames} frames of {self.source}: points median "
            f"{self.points_median_px:.3g} px, p99 {self.points_p99_px:.3g} px; instance "
            f"counts changed on {self.count_changes}/{self.frames} frames; "
            f"{self.presence_mismatches} points found by one only; "
            f"{self.int8_ms:.1f} ms per frame against {self.fp32_ms:.1f} ms at fp32 "
            f"({self.speedup:.2f}x; {self.how})"
        )

    def to_json(self) -> str:
        record = attrs.asdict(self)
        del record["how"]
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Int8Check:
        """The figures kept beside a cached graph; ValueError/KeyError/TypeError if unreadable."""
        record = json.loads(text)
        names = [field.name for field in attrs.fields(cls) if field.name != "how"]
        return cls(**{name: record[name] for name in names}, how="measured when quantised, cached")


def int8_runner(
    onnx_bytes: bytes,
    *,
    threads: int | None,
    verify_frames: Any,
    model_dirs: Sequence[Path] = (),
    cache_root: Path | None,
    notify: Notify = notice,
    keep: bool = False,
) -> OnnxRunner:
    """An `OnnxRunner` of `onnx_bytes` with its networks in int8, or of `onnx_bytes`
    itself where int8 is slower or further off than documented (module docstring).

    Args:
        onnx_bytes: the sleap-live float32 export.
        threads: ONNX Runtime's intra-op threads (None: its default).
        verify_frames: uint8 (N, H, W, C) frames, or None for the training labels'.
        model_dirs: the model directories the export was made from (their labels).
        cache_root: the cache root; None quantises in memory and keeps nothing.
        notify: where the one-line check (and the fallback's line) goes.
        keep: run int8 even where `fp32_instead` would run fp32.

    Raises:
        ModelConfigError: no frames to calibrate on (neither given frames nor
            training labels with their video).
    """
    full = OnnxRunner(onnx_bytes, intra_op_threads=threads)
    try:
        candidates = verification_frames(full.info.input_channels, verify_frames, model_dirs)
        if candidates.source.startswith(SYNTHETIC):
            raise ModelConfigError(
                "int8 is calibrated on frames that show animals, and there are none at hand: "
                "give frames (verify_frames=, --verify-video VIDEO; a run on a video file uses "
                "its frames) or keep the training labels' video beside them"
            )
        frames = with_animals(full, candidates.frames)
        form = this_cpu_form()
        cache = None if cache_root is None else ExportCache(cache_root, notify, INT8_FOLDER)
        key = int8_key(onnx_bytes, frames, form)
        quantised = None if cache is None else cache.read(key)
        if quantised is None:
            quantised = quantise_networks(onnx_bytes, frames, form)
            if cache is not None:
                cache.write(key, quantised)
        runner = OnnxRunner(quantised, intra_op_threads=threads)
        figures = None if cache is None else cache.graph_path(key).with_suffix(CHECK_SUFFIX)
        check = _kept(figures)
        if check is None:
            check = measure_int8(runner, full, frames, candidates.source, form)
            _keep(figures, check)
        notify(check.line())
        reason = fp32_instead(check)
        if reason is None or keep:
            full.close()
            return runner
        runner.close()
        notify(f"fp32 runs, not int8 ({check.form}): {reason}; --keep-int8 runs int8 anyway")
        return full
    except BaseException:
        full.close()
        raise


def fp32_instead(check: Int8Check) -> str | None:
    """Why fp32 should run in place of int8 measured as `check`, or None: int8 slower
    than fp32, or its median point further than `MEDIAN_BOUND_PX` from fp32's (or no
    point found by both to measure it on)."""
    reasons = []
    if check.speedup < 1:
        reasons.append(f"slower than fp32 ({check.speedup:.2f}x)")
    if np.isnan(check.points_median_px):
        reasons.append("no point found by both to measure its error on")
    elif check.points_median_px > MEDIAN_BOUND_PX:
        reasons.append(
            f"its median point {check.points_median_px:.3g} px from fp32's, beyond the "
            f"{MEDIAN_BOUND_PX} px documented"
        )
    return "; ".join(reasons) or None


def measure_int8(
    int8: OnnxRunner, fp32: OnnxRunner, frames: np.ndarray, source: str, form: QuantForm
) -> Int8Check:
    """The int8 runner's poses and time against the float32 one's on `frames` (one
    batch); `form` is how `int8` was quantised."""
    difference = pose_difference(int8.run(frames), fp32.run(frames))
    timings = measure({FP32: fp32, INT8: int8}, frames)
    return Int8Check(
        frames=difference.frames,
        source=source,
        form=form.describe(),
        points_median_px=difference.quantile_px(0.5),
        points_p99_px=difference.quantile_px(0.99),
        count_changes=difference.count_changes,
        presence_mismatches=difference.presence_mismatches,
        fp32_ms=timings[FP32],
        int8_ms=timings[INT8],
    )


def with_animals(runner: OnnxRunner, frames: np.ndarray) -> np.ndarray:
    """Up to `CALIBRATION_FRAMES` of `frames` in which `runner` finds animals, in order
    (the first `CALIBRATION_FRAMES` where it finds none)."""
    found: list[np.ndarray] = []
    for start in range(0, len(frames), SEARCH_BATCH):
        batch = frames[start : start + SEARCH_BATCH]
        poses = runner.run(batch)
        found.extend(frame for frame, pose in zip(batch, poses, strict=True) if pose.n_instances)
        if len(found) >= CALIBRATION_FRAMES:
            break
    if not found:
        return np.ascontiguousarray(frames[:CALIBRATION_FRAMES])
    return np.stack(found[:CALIBRATION_FRAMES])


def _kept(path: Path | None) -> Int8Check | None:
    if path is None or not path.is_file():
        return None
    try:
        return Int8Check.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None  # measured again


def _keep(path: Path | None, check: Int8Check) -> None:
    """Keeps the figures beside the cached graph; a cache that cannot be written only
    costs a new measurement."""
    if path is None or not path.parent.is_dir():
        return
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(check.to_json())
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
