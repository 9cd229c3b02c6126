"""The torch.compile engine (engines/runners/torch_compile.py) on the CPU.

One compilation of a stand-in top-down model (tests/engines/fake_networks.py) serves
the runner's test: one graph per batch shape, a smaller batch padded onto it, the
status line, inductor's cache folder set while it compiles, and a frame with more
centroids than slots rerun on the model. That test compiles with the `aot_eager`
backend (the same graph capture, no code generation): inductor itself, its numerics
and the caches it writes are checked on a real fixture model in test_parity.py, and
one inductor compilation takes about a minute of the suite's CPU.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest
import torch

from sleap_live.engines.graph.specialised import DEFAULT_SLOTS, BatchShape
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.torch import TorchRunner
from sleap_live.engines.runners.torch_compile import INDUCTOR_CACHE_ENV, TorchCompileRunner
from tests.engines import goldens
from tests.engines.test_specialised_model import BLOBS, FRAMES, _model


def _same_poses(got, want) -> None:
    assert len(got) == len(want)
    for have, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(have.points, expected.points, atol=1e-4, equal_nan=True)
        np.testing.assert_allclose(
            have.instance_scores, expected.instance_scores, atol=1e-5, equal_nan=True
        )


def test_compiles_a_batch_shape_once_pads_smaller_batches_and_keeps_every_centroid(
    fake_networks, tmp_path, monkeypatch
):
    compile_calls = []
    cache_dirs = []
    real_compile = torch.compile

    def compile_without_inductor(model, *, mode, **options):
        compile_calls.append((mode, options))
        cache_dirs.append(os.environ.get(INDUCTOR_CACHE_ENV))
        return real_compile(model, backend="aot_eager", **options)

    monkeypatch.setattr(torch, "compile", compile_without_inductor)
    model = _model(fake_networks, "topdown").eval()  # every centroid: DEFAULT_SLOTS slots
    eager = TorchRunner(model)
    status, notices = [], []
    runner = TorchCompileRunner(
        model, cache_dir=tmp_path / "compiled", progress=status.append, notify=notices.append
    )
    frames = fake_networks.blob_frames(BLOBS, **FRAMES).numpy()
    # One more animal than slots, apart enough to be told apart at the input scale of 0.5.
    crowded = [[(x, y, 0.9) for x in (14, 44, 74) for y in (12, 36, 60)]]
    assert len(crowded[0]) == DEFAULT_SLOTS + 1
    crowd = fake_networks.blob_frames(crowded, **FRAMES).numpy()
    try:
        _same_poses(runner.run(frames), eager.run(frames))
        _same_poses(runner.run(frames[:1]), eager.run(frames[:1]))
        assert runner.eager_batches == 0 and notices == []
        crowd_poses = runner.run(crowd)
        _same_poses(crowd_poses, eager.run(crowd))
        compiled = runner.compiled_shapes
    finally:
        runner.close()
    assert len(crowd_poses[0].points) == DEFAULT_SLOTS + 1
    assert runner.eager_batches == 1 and len(notices) == 1
    # One graph, compiled once, with one status line; the batch of 1 ran on it padded.
    assert compiled == [BatchShape(2, FRAMES["height"], FRAMES["width"], 1)]
    assert status == [
        "compiling the topdown model for batches of 2 88x72x1 frames (torch.compile, "
        "default; kept in the cache for later runs)"
    ]
    assert compile_calls == [("default", {"fullgraph": True, "dynamic": False})]
    assert cache_dirs == [str(tmp_path / "compiled")]


def test_modes_that_need_cuda_are_refused_on_the_cpu(fake_networks):
    model = _model(fake_networks, "single_instance")
    for mode in ("reduce-overhead", "max-autotune"):
        with pytest.raises(ValueError, match="need a CUDA device"):
            TorchCompileRunner(model, mode=mode)
    with pytest.raises(ValueError, match=r"unknown torch\.compile mode 'fast'"):
        TorchCompileRunner(model, mode="fast")


def test_load_runner_compiles_model_directories_only(tmp_path):
    export = tmp_path / "model.onnx"
    export.write_bytes(b"")
    with pytest.raises(ValueError, match="compiles model directories"):
        load_runner(export, engine="torch-compile")
    model = goldens.case_paths("single_instance")[0]
    with pytest.raises(ValueError, match="need a CUDA device"):
        load_runner(model, engine="torch-compile", device="cpu", compile_mode="reduce-overhead")
    with pytest.raises(TypeError, match="unknown options"):
        load_runner(model, engine="torch-compile", precision="fp16")


def test_the_cli_takes_a_compile_mode_for_torch_compile_only():
    from sleap_live.cli.options import UsageError, add_model_options, engine_options

    parser = argparse.ArgumentParser()
    add_model_options(parser, batch_size=None, batch_size_help="")
    args = parser.parse_args(
        ["-m", "m", "--engine", "torch-compile", "--compile-mode", "max-autotune"]
    )
    assert engine_options(args) == {"compile_mode": "max-autotune"}
    args = parser.parse_args(["-m", "m", "--engine", "onnx", "--compile-mode", "default"])
    with pytest.raises(UsageError, match="--compile-mode is an option of --engine torch-compile"):
        engine_options(args)


def _get_obj_of_torch_2_11(local, attr_name):
    """torch 2.11's `torch/_inductor/cudagraph_trees.py` `get_obj`, which every CUDA graph
    tree lookup goes through (2.13 creates the state lazily instead): a stand-in in the
    suite's torch 2.13; the GPU check's rehearsal runs the real one, in the image's torch
    2.11 (scripts/gpu_check.py `graph_trees_thread_row`)."""
    if hasattr(local, attr_name):
        return getattr(local, attr_name)
    assert torch._C._is_key_in_tls(attr_name)
    return torch._C._get_obj_in_tls(attr_name)


def test_cuda_graph_trees_are_ready_in_a_thread_that_did_not_import_them():
    # A runner first used in the main thread, then in a pipeline's engine thread. The
    # module's state as torch 2.11 leaves it at import, in the importing thread (it also
    # stashes it in that thread's TLS; not here, where the real module's would be
    # replaced): inductor itself is not imported, which takes seconds.
    import threading
    import types

    from sleap_live.engines.runners.torch_compile import ready_cuda_graph_trees

    trees = types.SimpleNamespace(local=threading.local())
    trees.local.tree_manager_containers = {}
    trees.local.tree_manager_locks = {}
    main_state = trees.local.tree_manager_containers
    ready_cuda_graph_trees(trees)
    results = {}

    def engine_thread():
        results["before"] = hasattr(trees.local, "tree_manager_containers") or (
            torch._C._is_key_in_tls("tree_manager_containers")
        )
        ready_cuda_graph_trees(trees)
        results["after"] = [
            _get_obj_of_torch_2_11(trees.local, name)
            for name in ("tree_manager_containers", "tree_manager_locks")
        ]

    thread = threading.Thread(target=engine_thread)
    thread.start()
    thread.join()
    assert results["before"] is False  # where torch 2.11's lookup would fail
    containers, locks = results["after"]
    assert containers == {} and containers is not main_state and len(locks) == 0
    # The importing thread keeps its own.
    assert _get_obj_of_torch_2_11(trees.local, "tree_manager_containers") is main_state
