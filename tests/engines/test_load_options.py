"""One record of load options (issue 38 item 3): `LoadOptions` is checked when made,
built once from the command line's options, and carried unchanged to every worker."""

from __future__ import annotations

import os
import pickle

import pytest

from sleap_live.cli import main
from sleap_live.cli.loading import load_options
from sleap_live.engines import InferenceSettings
from sleap_live.engines.load_options import LoadOptions
from sleap_live.stream.many.run import with_threads


def test_load_options_are_checked_when_made():
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        LoadOptions(engine="nope")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        LoadOptions(device="gpu")
    with pytest.raises(TypeError, match="compile_mode"):
        LoadOptions(engine="onnx", options={"compile_mode": "default"})


def test_load_options_pickle_and_give_load_runners_arguments():
    load = LoadOptions(
        engine="onnx",
        device="cpu",
        threads=2,
        cache=False,
        settings=InferenceSettings(peak_threshold=0.3),
        options={"precision": "int8", "verify": False},
    )
    assert pickle.loads(pickle.dumps(load)) == load  # it travels to worker processes
    assert load.arguments() == {
        "engine": "onnx",
        "device": "cpu",
        "threads": 2,
        "cache": False,
        "cache_dir": None,
        "settings": InferenceSettings(peak_threshold=0.3),
        "precision": "int8",
        "verify": False,
    }


def test_each_worker_gets_its_share_of_the_threads_unless_given():
    cores = os.cpu_count() or 1
    assert with_threads(LoadOptions(), None, None).threads is None  # this process
    assert with_threads(LoadOptions(), 2, None).threads == max(1, cores // 2)
    assert with_threads(LoadOptions(), 4, "local").threads == 1  # an actor per CPU on Ray
    assert with_threads(LoadOptions(threads=3), 2, "local").threads == 3


def test_the_command_line_builds_one_record_from_its_options(monkeypatch, tmp_path):
    seen = []

    def handle(args, console):
        seen.append(load_options(args))
        return 0

    monkeypatch.setattr("sleap_live.cli.many.handle", handle)
    argv = ["run", str(tmp_path), "-m", "m", "--engine", "onnx", "--device", "cpu"]
    assert main([*argv, "--precision", "int8", "--no-cache", "--peak-threshold", "0.4"]) == 0
    assert main([*argv, "--no-verify", "--cache-dir", str(tmp_path)]) == 0
    assert seen == [
        LoadOptions(
            "onnx",
            "cpu",
            cache=False,
            settings=InferenceSettings(peak_threshold=0.4),
            options={"precision": "int8", "verify": True},
        ),
        LoadOptions("onnx", "cpu", cache_dir=tmp_path, options={"verify": False}),
    ]
