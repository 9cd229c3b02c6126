"""The public surface of `sleap_live.engines`."""

import subprocess
import sys


def test_engines_import_does_not_load_torch_until_needed():
    code = (
        "import sys, sleap_live.engines as e, sleap_live.stream;"
        "assert 'torch' not in sys.modules, 'torch loaded on import';"
        "e.load_runner; assert 'torch' not in sys.modules, 'torch loaded by load_runner';"
        "e.load_inference_model; assert 'torch' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attribute_is_an_attribute_error():
    import sleap_live.engines as engines

    try:
        engines.no_such_thing  # noqa: B018
    except AttributeError as error:
        assert "no_such_thing" in str(error)
    else:
        raise AssertionError("expected AttributeError")
