"""Where a frame's time goes on the CPU, stage by stage, for one model on one clip.

    .venv/bin/python scripts/profile_stages.py --lab topdown_384 [--frames 200]
    .venv/bin/python scripts/profile_stages.py VIDEO -m MODEL_DIR [-m MODEL_DIR2]

`--lab NAME` takes a model of `fixtures.lab.LAB_MODELS` and renders its clip (H.264)
into a temporary folder. Every figure is milliseconds per frame, on the same frames:

- host stages, each timed alone: demux and decode (PyAV, threaded as the file source
  does), the colour conversion to the image the source hands on (gray, or rgb24 for
  YUV video, as `stream.sources._av.to_image`), the batcher's stack, the runner's
  host channel conversion (where the graph does not take the frames' channel count),
  the ONNX Runtime session, and the host decoding of its outputs;
- the session split by graph stage: ONNX Runtime's profiler (`enable_profiling`) on
  the optimised graph, each node assigned to a stage by where it sits between the
  networks (the nodes named by the networks' module scopes): before the first
  network, the network, between the networks (peaks, crops), the second network,
  after it (peaks, refinement, outputs); the costliest nodes are listed too;
- the whole engine (`runner.run`) and the recorded pipeline decoding the file
  (`stream.bench.bench_recorded`), with the time the pipeline's stages were busy.

The graph is exported in memory (`export_graph`, verified on the clip's first
frames) and run with sleap-live's session options, one thread per physical core.
`--specialised` profiles the graph specialised to the clip's frame shape instead (what the
CPU runner runs, `export_graph`), and the engine runs it too, once it gave
the dynamic graph's outputs bit for bit.
The profiler's own overhead makes its total a little larger than the session's; its
stage shares are what it is for.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import av
import numpy as np
import onnx
import onnxruntime as ort
from fixtures import lab

from sleap_live.engines.export.exporter import export_graph
from sleap_live.engines.graph.build import load_inference_model
from sleap_live.engines.host.frames import convert_channels
from sleap_live.engines.host.postprocess import decode
from sleap_live.engines.ort_options import session_options
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.engines.runners.onnx_session import create_session
from sleap_live.engines.runners.specialise import FrameShape
from sleap_live.stream.bench import bench_recorded
from sleap_live.stream.sources._av import frame_shape, to_image

REPEATS = 3


def per_frame(seconds: float, frames: int) -> float:
    """Milliseconds per frame."""
    return 1e3 * seconds / frames


def best_of(run: Callable[[], Any], repeats: int = REPEATS) -> float:
    """The fastest of `repeats` timed calls, in seconds (the least disturbed by neighbours)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def decoded_frames(video: Path, limit: int) -> tuple[list[av.VideoFrame], int]:
    """The first `limit` decoded frames, and the channels the file source makes of them."""
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        channels = frame_shape(stream)[2]
        frames = []
        for frame in container.decode(stream):
            frames.append(frame)
            if len(frames) == limit:
                break
    return frames, channels


def time_decode(video: Path, limit: int) -> float:
    """Seconds to demux and decode the first `limit` frames, without conversion."""

    def run() -> None:
        with av.open(str(video)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for count, _ in enumerate(container.decode(stream), 1):
                if count == limit:
                    break

    return best_of(run)


def batches(images: np.ndarray, size: int) -> list[np.ndarray]:
    """Consecutive batches of `size` frames (the last may be shorter)."""
    return [images[i : i + size] for i in range(0, len(images), size)]


def graph_stages(model: onnx.ModelProto) -> dict[str, str]:
    """Each node's stage, from its place between the networks (see the module doc)."""
    nodes = list(model.graph.node)
    producers = {out: n.name for n in nodes for out in n.output if out}
    consumers: dict[str, list[str]] = defaultdict(list)
    parents: dict[str, set[str]] = defaultdict(set)
    for node in nodes:
        for name in node.input:
            if name in producers:
                consumers[producers[name]].append(node.name)
                parents[node.name].add(producers[name])
    scopes = []
    for node in nodes:
        parts = node.name.split("/")
        scope = next((part for part in parts if part.endswith("network")), None)
        if scope is not None and scope not in scopes:
            scopes.append(scope)
    members = {s: {n.name for n in nodes if f"/{s}/" in n.name} for s in scopes}
    for node in nodes:
        # Layout conversions ONNX Runtime inserts around convolutions belong to the network.
        if node.op_type.startswith("Reorder"):
            near = parents[node.name] | set(consumers[node.name])
            for scope in scopes:
                if near & members[scope]:
                    members[scope].add(node.name)

    def closure(start: Iterable[str], edges: dict[str, Any]) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    networks = set().union(*members.values()) if members else set()
    stage = {}
    if len(scopes) == 2:
        first, second = members[scopes[0]], members[scopes[1]]
        before1, after1 = closure(first, parents), closure(first, consumers)
        before2, after2 = closure(second, parents), closure(second, consumers)
        for node in nodes:
            name = node.name
            if name in first:
                stage[name] = f"2 network ({scopes[0]})"
            elif name in second:
                stage[name] = f"5 network ({scopes[1]})"
            elif name in after2:
                stage[name] = "6 after the second network (peaks, refinement, outputs)"
            elif name in after1 and name in before2:
                stage[name] = "3 between the networks (peaks, crop windows, crops)"
            elif name in before1:
                stage[name] = "1 before the first network (channels, size matching, scale, pad)"
            elif name in before2:
                stage[name] = "4 crop source (the frames crops are cut from)"
            elif name in after1:
                stage[name] = "7 other outputs of the first network"
            else:
                stage[name] = "8 other (shapes, constants)"
    else:
        before, after = closure(networks, parents), closure(networks, consumers)
        for node in nodes:
            name = node.name
            if name in networks:
                stage[name] = "2 network"
            elif name in before:
                stage[name] = "1 before the network (channels, size matching, scale, pad)"
            elif name in after:
                stage[name] = "3 after the network (peaks, refinement, PAFs, outputs)"
            else:
                stage[name] = "8 other (shapes, constants)"
    return stage


def profile_graph(
    onnx_bytes: bytes, inputs: list[np.ndarray], workdir: Path
) -> tuple[dict[str, float], list[tuple[float, str, str, str]], float]:
    """ONNX Runtime's per-node times over `inputs` (after one untimed pass).

    Returns:
        (ms per frame by stage, the costliest nodes as (ms per frame, stage, op, name),
        the profiled runs' wall time in ms per frame).
    """
    options = session_options()
    optimised = workdir / "optimised.onnx"
    options.optimized_model_filepath = str(optimised)
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for batch in inputs:
        session.run(None, {name: batch})
    del session
    stage_of = graph_stages(onnx.load(str(optimised)))

    options.optimized_model_filepath = ""
    options.enable_profiling = True
    options.profile_file_prefix = str(workdir / "ort_profile")
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    for batch in inputs:  # untimed: arenas and first-run allocations
        session.run(None, {name: batch})
    start = time.perf_counter()
    for batch in inputs:
        session.run(None, {name: batch})
    wall = time.perf_counter() - start
    events = json.loads(Path(session.end_profiling()).read_text())
    frames = sum(len(batch) for batch in inputs)
    # Kernel times of the second pass only: the last half of each node's events.
    by_node: dict[str, list[float]] = defaultdict(list)
    ops: dict[str, str] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            node = event["name"][: -len("_kernel_time")]
            by_node[node].append(event["dur"])
            ops[node] = event["args"].get("op_name", "?")
    stages: dict[str, float] = defaultdict(float)
    nodes = []
    for node, durations in by_node.items():
        ms = 1e-3 * sum(durations[len(durations) // 2 :]) / frames
        stage = stage_of.get(node, "8 other (shapes, constants)")
        stages[stage] += ms
        nodes.append((ms, stage, ops[node], node))
    return dict(sorted(stages.items())), sorted(nodes, reverse=True), per_frame(wall, frames)


class OneShape:
    """The graph specialised to one frame shape, for `OnnxRunner` (a `SpecialisedGraphs`)."""

    def __init__(self, shape: FrameShape, graph: bytes) -> None:
        self.shape, self._graph = shape, graph

    def graph(self, shape: FrameShape) -> bytes | None:
        return self._graph if shape == self.shape else None

    def reject(self, shape: FrameShape, reason: str) -> None:
        raise SystemExit(f"the graph specialised to {shape} is not the dynamic one: {reason}")


def profile(
    paths: list[Path],
    video: Path,
    n_frames: int,
    batch_size: int,
    specialised: bool = False,
    verify: bool = True,
) -> dict[str, Any]:
    """Every figure of the module docstring, as a JSON-ready dict."""
    results: dict[str, Any] = {"models": [str(p) for p in paths], "video": str(video)}
    results["graph"] = "specialised to the frame shape" if specialised else "dynamic"
    frames, channels = decoded_frames(video, n_frames)
    n = len(frames)
    results["frames"], results["batch_size"] = n, batch_size
    results["frame"] = f"{frames[0].width}x{frames[0].height} {frames[0].format.name}"
    host: dict[str, float] = {}
    host["decode (demux + H.264 decode)"] = per_frame(time_decode(video, n), n)
    host[f"colour conversion ({'gray' if channels == 1 else 'rgb24'})"] = per_frame(
        best_of(lambda: [to_image(f, channels) for f in frames]), n
    )
    if channels == 3:
        host["(for comparison: conversion to gray)"] = per_frame(
            best_of(lambda: [to_image(f, 1) for f in frames]), n
        )
    images = np.stack([to_image(f, channels) for f in frames])
    host["batch stack"] = per_frame(
        best_of(lambda: [np.stack(list(b)) for b in batches(images, batch_size)]), n
    )

    model = load_inference_model(paths)
    dynamic = export_graph(model, verify=verify, verify_frames=images[:8], sources=paths)
    graph_channels = OnnxRunner(dynamic).metadata.input_channels
    converted = images
    if channels not in graph_channels:
        host["host channel conversion (begin_run)"] = per_frame(
            best_of(
                lambda: [
                    convert_channels(b, graph_channels[0]) for b in batches(images, batch_size)
                ]
            ),
            n,
        )
        converted = convert_channels(images, graph_channels[0])
    onnx_bytes, specialised = dynamic, None
    if specialised:
        # Specialised to the frames the graph is given: after any host conversion.
        shape = (int(converted.shape[1]), int(converted.shape[2]), int(converted.shape[3]))
        onnx_bytes = export_graph(model, frame_shape=shape, sources=paths)
        specialised = OneShape(shape, onnx_bytes)
    runner = OnnxRunner(dynamic, specialised=specialised)
    inputs = batches(converted, batch_size)
    session = create_session(onnx_bytes)
    input_name = session.get_inputs()[0].name
    output_names = [o.name for o in session.get_outputs()]
    outputs = [session.run(None, {input_name: b}) for b in inputs]
    host["ONNX Runtime session (the graph)"] = per_frame(
        best_of(lambda: [session.run(None, {input_name: b}) for b in inputs]), n
    )
    named = [dict(zip(output_names, out, strict=True)) for out in outputs]
    host["host decode of outputs"] = per_frame(
        best_of(
            lambda: [decode(runner.info, o, len(b)) for o, b in zip(named, inputs, strict=True)]
        ),
        n,
    )
    results["host_ms_per_frame"] = host
    instances = [len(p.points) for b in inputs for p in runner.run(b)]
    results["instances_per_frame"] = {str(k): instances.count(k) for k in sorted(set(instances))}
    results["engine_ms_per_frame"] = per_frame(
        best_of(lambda: [runner.run(b) for b in batches(images, batch_size)]), n
    )
    with tempfile.TemporaryDirectory() as workdir:
        stages, nodes, wall = profile_graph(onnx_bytes, inputs, Path(workdir))
    results["graph_profile_ms_per_frame"] = stages
    results["graph_profile_total_ms_per_frame"] = sum(stages.values())
    results["graph_profiled_wall_ms_per_frame"] = wall
    results["costliest_nodes"] = [
        {"ms": ms, "stage": stage, "op": op, "node": name} for ms, stage, op, name in nodes[:25]
    ]
    recorded = [bench_recorded(runner, video, batch_size, n) for _ in range(REPEATS)]
    best = max(recorded, key=lambda run: run["fps"])
    results["recorded_pipeline_ms_per_frame"] = 1e3 / best["fps"]
    results["recorded_pipeline_busy"] = best["timeline"]["busy"]
    results["recorded_pipeline_fps_runs"] = [run["fps"] for run in recorded]
    runner.close()
    return results


def report(results: dict[str, Any]) -> str:
    """The figures as plain text."""
    lines = [
        f"{results['frame']}, {results['frames']} frames, batch {results['batch_size']}, "
        f"{results['graph']} graph; "
        f"instances per frame {results['instances_per_frame']}",
        "host stages (ms/frame, each timed alone, best of 3):",
    ]
    lines += [f"  {ms:8.2f}  {name}" for name, ms in results["host_ms_per_frame"].items()]
    lines.append(f"  {results['engine_ms_per_frame']:8.2f}  engine: runner.run (graph + host)")
    busy = ", ".join(f"{k} {v:.2f}" for k, v in results["recorded_pipeline_busy"].items())
    lines.append(
        f"  {results['recorded_pipeline_ms_per_frame']:8.2f}  recorded pipeline from the file "
        f"(busy share of its span: {busy})"
    )
    lines.append("graph stages (ONNX Runtime profiler, ms/frame):")
    lines += [f"  {ms:8.2f}  {name}" for name, ms in results["graph_profile_ms_per_frame"].items()]
    lines.append(
        f"  {results['graph_profile_total_ms_per_frame']:8.2f}  sum of node times "
        f"(profiled wall {results['graph_profiled_wall_ms_per_frame']:.2f})"
    )
    lines.append("costliest nodes (ms/frame):")
    lines += [
        f"  {n['ms']:8.3f}  {n['op']:<16} {n['stage'][:1]}  {n['node']}"
        for n in results["costliest_nodes"]
    ]
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, profile, print (and write --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("video", type=Path, nargs="?", help="the clip (omit with --lab)")
    parser.add_argument("-m", "--model", type=Path, action="append", dest="models", default=[])
    parser.add_argument("--lab", choices=[m.name for m in lab.LAB_MODELS])
    parser.add_argument("--frames", type=int, default=200, help="frames profiled (default 200)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--specialised", action="store_true", help="the graph specialised to the clip's frame shape"
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the export's check against torch"
    )
    args = parser.parse_args()
    if (args.lab is None) == (args.video is None):
        parser.error("give either VIDEO with -m MODEL, or --lab NAME")
    with tempfile.TemporaryDirectory() as workdir:
        if args.lab is not None:
            entry = lab.lab_model(args.lab)
            paths, video = entry.paths, Path(workdir) / f"{entry.scene}.mp4"
            lab.write_clip(video, entry.scene, args.frames)
        else:
            paths, video = args.models, args.video
            if not paths:
                parser.error("VIDEO needs -m MODEL")
            if not video.is_file():
                parser.error(f"{video}: no such file")
        results = profile(
            paths, video, args.frames, args.batch_size, args.specialised, not args.no_verify
        )
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
