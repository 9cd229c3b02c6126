"""Crafted sleap-nn training configs: each refused in one line naming the file and the
field, before torch sizes the network (issue 36, item 4; the SLEAP 1.x side is
test_legacy_bounds.py). Each folder is a copy of the committed bottom-up model with
one UNet value changed, run through `sleap-live export` in this process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sleap_live import cli

MODEL = Path(__file__).resolve().parents[1] / "data/models/bottomup"
UNET = "model_config.backbone_config.unet"

# (line as the config has it, its crafted value, what the one line says)
CASES = {
    # torch asked for 196 TB before.
    "filters": ("filters: 8", "filters: 1000000", f"{UNET}.filters is 1000000; at most 65536"),
    # 5 GB for the first convolution before.
    "max_stride": (
        "max_stride: 16",
        "max_stride: 1099511627776",
        f"{UNET}.max_stride is 1099511627776; at most 1024",
    ),
    "filters_rate": (
        "filters_rate: 1.5",
        "filters_rate: 1000.0",
        f"{UNET}.filters_rate 1000.0 gives 8 x 1000.0^2 channels at level 2",
    ),
    "convs_per_block": ("convs_per_block: 2", "convs_per_block: 100000", "at most 64"),
    # Within every bound, but 7e11 weights (a 130 GB convolution) in a 0.3 MB file.
    "wide": (
        "filters_rate: 1.5",
        "filters_rate: 1.0",
        "weights, more than the",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_sleap_nn_config_is_refused_in_one_line(case, tmp_path, capsys):
    line, crafted, said = CASES[case]
    folder = tmp_path / case
    shutil.copytree(MODEL, folder)
    config = folder / "training_config.yaml"
    text = config.read_text()
    assert f"      {line}\n" in text
    text = text.replace(f"      {line}\n", f"      {crafted}\n", 1)
    if case == "wide":
        text = text.replace("      filters: 8\n", "      filters: 60000\n", 1)
    config.write_text(text)
    out = tmp_path / "model.onnx"
    capsys.readouterr()
    assert cli.main(["export", str(folder), "-o", str(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"sleap-live: error: {config}: ") and said in lines[0], lines
    assert not out.exists()
