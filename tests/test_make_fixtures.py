"""scripts/make_fixtures.py: the checkpoint a warm-started lab model starts from.

sleap-nn loads pretrained head weights by module name, so a model of another type gets
a copy whose node-map head carries its own type's name (`init_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from tests import script_modules as scripts

BACKBONE = "model.backbone.enc.conv.weight"

make_fixtures = scripts.load("make_fixtures.py")


def _spec(name: str, head_type: str) -> SimpleNamespace:
    """The parts of a `ModelSpec` that `init_checkpoint` reads."""
    return SimpleNamespace(name=name, head_type=head_type, heads={})


def _checkpoint(path: Path, head: str) -> Path:
    state = {
        BACKBONE: torch.ones(2),
        f"model.head_layers.0.{head}.0.weight": torch.full((5, 24, 1, 1), 2.0),
        f"model.head_layers.0.{head}.0.bias": torch.full((5,), 3.0),
    }
    torch.save({"epoch": 4, "state_dict": state}, path)
    return path


def test_another_model_types_node_maps_start_under_this_types_head_name(tmp_path):
    source = _checkpoint(tmp_path / "best.ckpt", "CenteredInstanceConfmapsHead")
    init = make_fixtures.init_checkpoint(source, _spec("single_384", "single_instance"), tmp_path)
    assert init == tmp_path / "single_384.init.ckpt"
    checkpoint = torch.load(init, weights_only=False)
    state = checkpoint["state_dict"]
    assert sorted(state) == sorted([
        BACKBONE,
        "model.head_layers.0.SingleInstanceConfmapsHead.0.weight",
        "model.head_layers.0.SingleInstanceConfmapsHead.0.bias",
    ])  # fmt: skip
    assert (state["model.head_layers.0.SingleInstanceConfmapsHead.0.bias"] == 3.0).all()
    assert checkpoint["epoch"] == 4
    # The source is left as it was.
    assert (
        "model.head_layers.0.CenteredInstanceConfmapsHead.0.bias"
        in torch.load(source)["state_dict"]
    )


def test_a_model_of_the_same_type_starts_from_the_source_itself(tmp_path):
    source = _checkpoint(tmp_path / "best.ckpt", "CentroidConfmapsHead")
    spec = _spec("centroid_1024", "centroid")
    assert make_fixtures.init_checkpoint(source, spec, tmp_path) == source
    assert list(tmp_path.iterdir()) == [source]


def test_kept_configs_name_no_warm_start_checkpoint(tmp_path):
    config = tmp_path / "training_config.yaml"
    config.write_text(
        "model_config:\n"
        "  pretrained_backbone_weights: /build/lab_runs/x.init.ckpt\n"
        "  pretrained_head_weights: /build/lab_runs/x.init.ckpt\n"
        "  init_weights: xavier\n"
    )
    make_fixtures.forget_warm_start(config)
    assert config.read_text() == (
        "model_config:\n"
        "  pretrained_backbone_weights: null\n"
        "  pretrained_head_weights: null\n"
        "  init_weights: xavier\n"
    )
    data = Path(__file__).resolve().parent / "data"
    for kept in [*data.glob("models/*/training_config.yaml"), *data.glob("lab_models/*/*.yaml")]:
        for key in make_fixtures.WARM_START_KEYS:
            assert f"{key}: null" in kept.read_text(), kept


def test_settings_goldens_are_made_from_the_list_the_tests_check(tmp_path, monkeypatch):
    commands = []

    def run_logged(cmd, log_path, cwd):
        commands.append(cmd)
        log_path.write_text("")
        return 1.0

    monkeypatch.setattr(make_fixtures, "run_logged", run_logged)
    monkeypatch.setattr(
        make_fixtures.goldens,
        "predictions_to_arrays",
        lambda slp, n: slp.write_text("") or {"n_instances": np.ones(n, int)},
    )
    report = make_fixtures.make_settings_goldens(tmp_path, tmp_path, None)
    cases = scripts.load("fixtures/goldens.py").SETTINGS_CASES
    assert list(report) == list(cases)
    by_name = dict(zip(cases, commands, strict=True))
    single = by_name["settings_single_instance"]
    assert single[single.index("--integral_refinement") + 1] == "none"
    assert "tests/data/videos/single.mkv" in single
    for name, (models, _, options, frames) in cases.items():
        command = by_name[name]
        assert command[command.index("--frames") + 1] == f"0-{frames - 1}"
        assert [f"tests/data/models/{m}" for m in models] == [
            command[i + 1] for i, arg in enumerate(command) if arg == "--model_paths"
        ]
        assert {arg[2:] for arg in command if arg[2:] in options} == set(options)
