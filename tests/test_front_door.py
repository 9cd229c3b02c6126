"""`import sleap_live`: the names a user needs, from one place, for nothing on import."""

import subprocess
import sys

import pytest

import sleap_live

FRONT_DOOR = [
    "CheckpointError",
    "EngineError",
    "ExportError",
    "Frame",
    "FramePoses",
    "InferenceSettings",
    "InputMismatchError",
    "LoadOptions",
    "ManyResult",
    "ModelConfigError",
    "ModelInfo",
    "ModelNotFoundError",
    "OutputOptions",
    "Pipeline",
    "PipelineError",
    "PipelineRun",
    "PipelineStats",
    "PoseRecord",
    "PublishError",
    "Publisher",
    "RingConsumer",
    "RingReader",
    "Runner",
    "RuntimeUnavailableError",
    "Skeleton",
    "SourceError",
    "SourceGroup",
    "SourceNotFoundError",
    "SourceStalledError",
    "StreamError",
    "TrackingSettings",
    "VideoResult",
    "export_model",
    "load_runner",
    "open_source",
    "run_many",
]


def test_the_front_door_names():
    assert sleap_live.__all__ == FRONT_DOOR
    assert [name for name in dir(sleap_live) if not name.startswith("__")] == FRONT_DOOR


@pytest.mark.parametrize("name", FRONT_DOOR)
def test_each_name_is_its_subpackages_own(name):
    from sleap_live import engines, stream
    from sleap_live.engines.runners.base import Runner

    public = {**{n: getattr(stream, n) for n in stream.__all__}, "Runner": Runner}
    public.update({n: getattr(engines, n) for n in engines.__all__})
    assert getattr(sleap_live, name) is public[name]


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_thing"):
        sleap_live.no_such_thing  # noqa: B018


def test_import_loads_nothing_and_changes_nothing():
    code = (
        "import os, sys; before = dict(os.environ); import sleap_live;"
        "loaded = [m for m in sys.modules if m.startswith(('sleap_live.', 'torch', 'onnx', 'av'))];"
        "assert not loaded, loaded; assert dict(os.environ) == before;"
        "from sleap_live import Pipeline, load_runner;"
        "assert 'torch' not in sys.modules, 'torch loaded by the front door'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
