"""scripts/bench_prepost.py: benchmarking the lab models by name (`--lab`).

The timed runs take minutes; these check which models `--lab` takes and what it refuses.
"""

from __future__ import annotations

import pytest

from tests import script_modules as scripts

bench = scripts.load("bench_prepost.py")


def test_lab_takes_every_lab_model_and_its_model_type():
    names = [model.name for model in bench.LAB_MODELS]
    assert {"topdown_384", "single_instance_384", "bottomup_1024"} <= set(names)
    assert {model.model_type for model in bench.LAB_MODELS} == set(bench.TYPES)


def test_an_unknown_lab_model_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--lab", "nonesuch"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "nonesuch" in error and "topdown_384" in error and "single_instance_384" in error


def test_an_untrained_lab_model_is_refused(capsys, monkeypatch, tmp_path):
    model = bench.LAB_MODELS[0]
    monkeypatch.setattr(type(model), "paths", property(lambda self: [tmp_path / "absent"]))
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--lab", model.name])
    assert exit_.value.code == 2
    assert f"--lab {model.name}: not trained" in capsys.readouterr().err
