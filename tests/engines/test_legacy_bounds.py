"""Crafted SLEAP 1.x folders: each refused in one line naming the file and the field,
before the work it would cost (issue 36, item 4).

Each folder is a copy of the committed single-instance model with one thing changed
(its config edited, or one HDF5 object of its `best_model.h5` replaced with h5py),
run through `sleap-live export` in this process.
"""

from __future__ import annotations

import json
import resource
import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest

from sleap_live import cli
from sleap_live.engines.load.legacy_config import MAX_CONFIG_BYTES

SINGLE = (
    Path(__file__).resolve().parents[1] / "data/legacy_models/minimal_robot.UNet.single_instance"
)
KERNEL = "model_weights/stack0_enc0_conv0/stack0_enc0_conv0"


def _unet(**values: object) -> Callable[[dict], None]:
    def edit(config: dict) -> None:
        config["model"]["backbone"]["unet"].update(values)

    return edit


def _nodes_as_a_string(config: dict) -> None:
    config["data"]["labels"]["skeletons"][0]["nodes"] = "AB"


def _gzip_kernel_of_32_gib(weights: h5py.File) -> None:
    group = weights[KERNEL]
    del group["kernel:0"]
    # 32 GiB of zeros: the fill value, a few kilobytes on disk.
    group.create_dataset(
        "kernel:0", shape=(2**33,), dtype="float32", chunks=(2**20,), compression="gzip"
    )


def _kernel_linked_to(target: str) -> Callable[[h5py.File], None]:
    def edit(weights: h5py.File) -> None:
        del weights[KERNEL]["kernel:0"]
        weights[KERNEL]["kernel:0"] = h5py.ExternalLink(target, "/")

    return edit


def _virtual_kernel(weights: h5py.File) -> None:
    del weights[KERNEL]["kernel:0"]
    layout = h5py.VirtualLayout(shape=(3, 3, 3, 8), dtype="float32")
    layout[...] = h5py.VirtualSource("/etc/elsewhere.h5", "data", shape=(3, 3, 3, 8))
    weights[KERNEL].create_virtual_dataset("kernel:0", layout, fillvalue=0)


def _kernel_stored_in(target: str) -> Callable[[h5py.File], None]:
    def edit(weights: h5py.File) -> None:
        del weights[KERNEL]["kernel:0"]
        weights[KERNEL].create_dataset(
            "kernel:0", shape=(3, 3, 3, 8), dtype="float32", external=[(target, 0, 864)]
        )

    return edit


def _deep_model_config(weights: h5py.File) -> None:
    weights.attrs["model_config"] = "[" * 100_000 + "]" * 100_000


def _folder(tmp_path: Path, config_edit=None, weights_edit=None, config_text=None) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    config = json.loads((SINGLE / "training_config.json").read_text())
    if config_edit is not None:
        config_edit(config)
    text = json.dumps(config) if config_text is None else config_text(json.dumps(config))
    (folder / "training_config.json").write_text(text)
    shutil.copy(SINGLE / "best_model.h5", folder / "best_model.h5")
    if weights_edit is not None:
        with h5py.File(folder / "best_model.h5", "r+") as weights:
            weights_edit(weights)
    return folder


CASES = {
    # torch asked for 36 TB.
    "filters 1e6": (dict(config_edit=_unet(filters=1_000_000)), "config", "unet.filters"),
    # 4.9 GB (9.7 GB here) before torch's allocation failed.
    "max_stride 2^40": (dict(config_edit=_unet(max_stride=2**40)), "config", "unet.max_stride"),
    "filters_rate 1e300": (
        dict(config_edit=_unet(filters_rate=1e300)),
        "config",
        "unet.filters_rate",
    ),
    # Within the per-layer bound, but 162 G weights: more than the 93 KB file holds.
    "60,000 filters at rate 1": (
        dict(config_edit=_unet(filters=60_000, filters_rate=1.0)),
        "config",
        "162002100002 float32 weights",
    ),
    "skeleton nodes as a string": (
        dict(config_edit=_nodes_as_a_string),
        "config",
        "skeletons[0].nodes",
    ),
    "a 100k-deep training config": (
        dict(config_text=lambda text: text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        "config",
        "100001 levels deep",
    ),
    # Accepted before (973 MB RSS at 300 MB); just over the bound here.
    "a config over 16 MiB": (
        dict(config_text=lambda text: text[:-1] + ', "pad": "' + "x" * MAX_CONFIG_BYTES + '"}'),
        "config",
        f"more than {MAX_CONFIG_BYTES} bytes",
    ),
    "a gzip kernel claiming 32 GiB": (
        dict(weights_edit=_gzip_kernel_of_32_gib),
        "weights",
        f"{KERNEL}/kernel:0 has shape (8589934592,)",
    ),
    "a kernel linked to /etc/shadow": (
        dict(weights_edit=_kernel_linked_to("/etc/shadow")),
        "weights",
        f"{KERNEL}/kernel:0 is an external link",
    ),
    "a virtual kernel": (
        dict(weights_edit=_virtual_kernel),
        "weights",
        f"{KERNEL}/kernel:0 keeps its data outside the file",
    ),
    "a kernel stored in /etc/hostname": (
        dict(weights_edit=_kernel_stored_in("/etc/hostname")),
        "weights",
        f"{KERNEL}/kernel:0 keeps its data outside the file",
    ),
    "a 100k-deep model_config": (
        dict(weights_edit=_deep_model_config),
        "weights",
        "model_config nests 100000 levels deep",
    ),
}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_sleap_1x_folder_is_refused_in_one_line(case, tmp_path, capsys):
    crafted, file, field = CASES[case]
    folder = _folder(tmp_path, **crafted)
    named = folder / ("training_config.json" if file == "config" else "best_model.h5")
    out = tmp_path / "out" / "model.onnx"
    capsys.readouterr()
    peak = _peak_rss_mb()
    assert cli.main(["export", str(folder), "-o", str(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"sleap-live: error: {named}: ") and field in lines[0]
    assert not out.exists()
    # Refused before the work: this process's peak grew by less than the 16 MiB
    # config itself and its parse would take (973 MB for 300 MB before).
    assert _peak_rss_mb() - peak < 200


def test_the_run_command_refuses_a_crafted_folder_before_reading_frames(tmp_path, capsys):
    folder = _folder(tmp_path, config_edit=_unet(max_stride=2**40))
    out = tmp_path / "poses.slp"
    video = SINGLE.parent / "clips" / "robot.mp4"
    assert cli.main(["run", str(video), "-m", str(folder), "-o", str(out), "-q"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "unet.max_stride is 1099511627776" in lines[0], lines
    assert not out.exists()
