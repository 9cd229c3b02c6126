"""`precision="int8"`: ONNX Runtime's static quantisation of the networks, on the CPU.

One int8 graph is made (the single-instance fixture, calibrated on frames of its
video) and shared; the rest checks what it is made of, what it says at load, the
cache, and the refusals.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import attrs
import numpy as np
import onnx
import pytest

from sleap_live.engines.errors import ModelConfigError
from sleap_live.engines.export import quantise
from sleap_live.engines.export.quantise import (
    INT8_FOLDER,
    INT8_METADATA_KEY,
    QuantForm,
    int8_key,
    network_nodes,
    quant_form,
    this_cpu_form,
)
from sleap_live.engines.host.compare import pose_difference
from sleap_live.engines.runners import int8 as int8_module
from sleap_live.engines.runners.int8 import Int8Check, fp32_instead
from sleap_live.engines.runners.load import load_runner
from sleap_live.engines.runners.onnx import OnnxRunner
from sleap_live.stream.sources import FileSource
from tests.committed import require
from tests.engines import goldens

CASE = "single_instance"
# Frames spread over the fixture video, as a run's verification frames are.
CALIBRATION = slice(0, 200, 25)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
# The fixture's int8 points against fp32 in the form for the CPU (measured: median
# 0.011 px, p99 1.8 px on its calibration frames with U8S8 on an AVX-512 VNNI AMD EPYC;
# median 0.011 px, p99 1.6 px with U8U8 on an AVX2-only one, where U8S8 gave median
# 2.6 px, p99 26 px), no count changes: bounds that hold those with room,
# and that a quantised pre- or postprocessing, or U8S8 saturating on a CPU without
# VNNI (whole pixels off everywhere), fails.
MEDIAN_PX, P99_PX = 0.1, 4.0
# /proc/cpuinfo flags of the CPU families `quant_form` tells apart (abridged to the
# SIMD ones but the first, this AVX2-only AMD EPYC's whole line).
AVX2_EPYC = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx "
    "fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good "
    "nopl xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma "
    "cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c "
    "rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch "
    "osvw topoext cpuid_fault vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid "
    "rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero "
    "xsaveerptr arat umip vaes vpclmulqdq rdpid fsrm"
)
SKYLAKE_SP = "sse4_2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl"
ICE_LAKE_SP = f"{SKYLAKE_SP} avx512ifma avx512vbmi avx512_vbmi2 avx512_vnni avx512_bitalg"
ZEN4 = f"{SKYLAKE_SP} avx512_bf16 avx512_vnni avx512_bitalg avx512_vpopcntdq"
ALDER_LAKE = "sse4_2 avx avx2 fma avx_vnni"


@cache
def _frames() -> np.ndarray:
    _, video, _, _ = goldens.case_paths(CASE)
    require(video)
    with FileSource(str(video)) as source:
        return np.stack([frame.image for frame in source])


def _models() -> list[str]:
    models, _, _, _ = goldens.case_paths(CASE)
    require(*models)
    return [str(m) for m in models]


@pytest.fixture(scope="module")
def quantised(warm_export_cache, tmp_path_factory):
    """The int8 runner, its load line, the float32 export and the cache it went in."""
    folder = tmp_path_factory.mktemp("int8_cache")
    lines: list[str] = []
    frames = _frames()[CALIBRATION]
    onnx_bytes = goldens.warm_export(CASE, warm_export_cache)
    fp32 = OnnxRunner(onnx_bytes, intra_op_threads=1)
    # keep: the int8 graph itself is checked here, whatever its speed on this machine
    # (whether int8 gives way to fp32 is tested on given figures below).
    runner = int8_module.int8_runner(
        onnx_bytes,
        threads=1,
        verify_frames=frames,
        cache_root=folder,
        notify=lines.append,
        keep=True,
    )
    yield runner, fp32, lines, onnx_bytes, folder
    runner.close()
    fp32.close()


def test_int8_says_its_error_and_speed_up_at_load_and_keeps_close_to_fp32(quantised):
    runner, fp32, lines, _, _ = quantised
    (line,) = lines
    form = this_cpu_form().describe()
    assert line.startswith(f"int8 (networks quantised by ONNX Runtime, {form}) against fp32 on 8")
    for part in (
        "points median",
        "p99",
        "instance counts changed on 0/8 frames",
        "x; measured now",
    ):
        assert part in line
    frames = _frames()[CALIBRATION]
    difference = pose_difference(runner.run(frames), fp32.run(frames))
    assert difference.count_changes == 0 and difference.presence_mismatches == 0
    assert difference.quantile_px(0.5) <= MEDIAN_PX and difference.quantile_px(0.99) <= P99_PX


def test_only_the_networks_are_quantised(quantised):
    runner, _, _, onnx_bytes, folder = quantised
    full = onnx.load_from_string(onnx_bytes)
    (entry,) = (folder / INT8_FOLDER).glob("*.onnx")
    reduced = onnx.load(str(entry))
    networks = set(network_nodes(full))
    # Every node outside the networks is there unchanged; what was added is QDQ pairs.
    outside = [n for n in full.graph.node if n.name not in networks]
    kept = {n.name: n for n in reduced.graph.node}
    for node in outside:
        assert kept[node.name].op_type == node.op_type
        assert [i.removesuffix("_DequantizeLinear_Output") for i in kept[node.name].input] == list(
            node.input
        )
    added = {
        n.op_type for n in reduced.graph.node if n.name not in {m.name for m in full.graph.node}
    }
    assert added == set(QDQ_OPS)
    # Each quantised tensor is a network node's: inputs, weights or outputs.
    network_tensors = {
        t for n in full.graph.node if n.name in networks for t in (*n.input, *n.output)
    }
    quantised_tensors = {n.input[0] for n in reduced.graph.node if n.op_type == "QuantizeLinear"}
    assert quantised_tensors and quantised_tensors <= network_tensors
    # The graph is still a sleap-live export: same outputs, same metadata.
    assert [o.name for o in reduced.graph.output] == [o.name for o in full.graph.output]
    assert runner.metadata is not None and runner.info.model_type == CASE
    # The form it was quantised in is written in it.
    props = {prop.key: prop.value for prop in reduced.metadata_props}
    assert json.loads(props[INT8_METADATA_KEY])["form"] == attrs.asdict(this_cpu_form())


def test_a_later_load_reads_the_cache_and_prints_the_kept_figures(quantised, monkeypatch):
    _, _, lines, onnx_bytes, folder = quantised
    monkeypatch.setattr(int8_module, "quantise_networks", lambda *_: pytest.fail("quantised"))
    monkeypatch.setattr(int8_module, "measure_int8", lambda *_: pytest.fail("measured"))
    again: list[str] = []
    runner = int8_module.int8_runner(
        onnx_bytes,
        threads=1,
        verify_frames=_frames()[CALIBRATION],
        cache_root=folder,
        notify=again.append,
        keep=True,
    )
    assert isinstance(runner, OnnxRunner)
    (line,) = again
    assert line.endswith("measured when quantised, cached)")
    assert line.rpartition("(")[0] == lines[0].rpartition("(")[0]  # the same figures
    runner.close()


@pytest.mark.parametrize(
    ("machine", "flags", "form"),
    [
        ("x86_64", AVX2_EPYC, QuantForm("U8U8", "x86 without VNNI (avx2)", False, "uint8")),
        ("x86_64", SKYLAKE_SP, QuantForm("U8U8", "x86 without VNNI (avx512f)", False, "uint8")),
        ("x86_64", ICE_LAKE_SP, QuantForm("U8S8", "x86 with VNNI (avx512_vnni)", False)),
        ("x86_64", ZEN4, QuantForm("U8S8", "x86 with VNNI (avx512_vnni)", False)),
        ("AMD64", ALDER_LAKE, QuantForm("U8S8", "x86 with VNNI (avx_vnni)", False)),
        ("x86_64", "sse4_2", QuantForm("U8U8", "x86 without VNNI (no AVX2)", False, "uint8")),
        ("aarch64", "", QuantForm("U8S8", "arm64", False)),
        ("arm64", "", QuantForm("U8S8", "arm64", False)),
        (
            "ppc64le",
            "",
            QuantForm("U8U8", "ppc64le, not named by ONNX Runtime's guide", False, "uint8"),
        ),
    ],
)
def test_each_cpu_family_gets_the_form_onnx_runtime_recommends(machine, flags, form):
    assert quant_form(machine, set(flags.split())) == form


def test_cpu_flags_read_cpuinfo_else_numpy(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {AVX2_EPYC}\n")
    flags = quantise.cpu_flags(cpuinfo)
    assert {"avx2", "fma"} <= flags and "avx512_vnni" not in flags
    assert quant_form("x86_64", flags).weights == "uint8"
    assert "AVX2" in quantise.numpy_cpu_features() or "ASIMD" in quantise.numpy_cpu_features()
    features = {"AVX2": True, "AVX512F": True, "AVX512VNNI": False, "FMA3": True}
    monkeypatch.setattr(quantise, "numpy_cpu_features", lambda: features)
    assert quantise.cpu_flags(tmp_path / "absent") == {"avx2", "avx512f"}


def test_the_form_is_part_of_the_int8_cache_key():
    frames = np.zeros((2, 8, 8, 1), np.uint8)
    u8s8, u8u8 = quant_form("x86_64", {"avx512_vnni"}), quant_form("x86_64", {"avx2"})
    assert int8_key(b"graph", frames, u8s8).digest != int8_key(b"graph", frames, u8u8).digest
    assert int8_key(b"graph", frames, u8u8).parts["form"]["weights"] == "uint8"


def _check(median_px: float, fp32_ms: float, int8_ms: float) -> Int8Check:
    return Int8Check(
        8, "the given frames", "U8S8, for arm64", median_px, 1.0, 0, 0, fp32_ms, int8_ms
    )


def test_int8_gives_way_to_fp32_when_slower_or_further_off_than_documented():
    assert fp32_instead(_check(0.02, 10.0, 5.0)) is None
    assert fp32_instead(_check(0.1, 10.0, 10.0)) is None  # at the bound, as fast
    assert fp32_instead(_check(0.02, 10.0, 14.0)) == "slower than fp32 (0.71x)"
    assert fp32_instead(_check(2.65, 10.0, 5.0)) == (
        "its median point 2.65 px from fp32's, beyond the 0.1 px documented"
    )
    both = fp32_instead(_check(3.8, 10.0, 15.0))
    assert both is not None and both.startswith("slower than fp32 (0.67x); its median point 3.8")
    assert fp32_instead(_check(float("nan"), 10.0, 5.0)) == (
        "no point found by both to measure its error on"
    )


@pytest.mark.parametrize("keep", [False, True])
def test_int8_found_slower_runs_fp32_saying_so_unless_kept(quantised, monkeypatch, keep):
    _, fp32, _, onnx_bytes, folder = quantised
    slow = _check(0.02, 10.0, 14.0)
    monkeypatch.setattr(int8_module, "_kept", lambda _: slow)  # the graph from the cache
    lines: list[str] = []
    frames = _frames()[CALIBRATION]
    runner = int8_module.int8_runner(
        onnx_bytes,
        threads=1,
        verify_frames=frames,
        cache_root=folder,
        notify=lines.append,
        keep=keep,
    )
    same = [
        np.array_equal(a.points, b.points, equal_nan=True)
        for a, b in zip(runner.run(frames[:2]), fp32.run(frames[:2]), strict=True)
    ]
    runner.close()
    if keep:
        assert lines == [slow.line()] and not all(same)
    else:
        assert lines == [
            slow.line(),
            "fp32 runs, not int8 (U8S8, for arm64): slower than fp32 (0.71x); --keep-int8 runs "
            "int8 anyway",
        ]
        assert all(same)


def test_int8_figures_survive_their_json():
    check = Int8Check(3, "the given frames", "U8S8, for arm64", 0.1, float("nan"), 1, 0, 12.0, 6.0)
    back = Int8Check.from_json(check.to_json())
    assert back.speedup == 2.0 and np.isnan(back.points_p99_px)
    assert back.how == "measured when quantised, cached"


def test_network_nodes_are_the_network_scopes():
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Relu", ["a"], ["b"], name="/Cast"),
            onnx.helper.make_node("Relu", ["b"], ["c"], name="/stage/network/encoder.0/Conv"),
            onnx.helper.make_node("Relu", ["c"], ["d"], name="/instance_network/head/Conv"),
            onnx.helper.make_node("Relu", ["d"], ["e"], name="/network_peaks"),
        ],
        "g",
        [],
        [],
    )
    assert quantise.network_nodes(onnx.helper.make_model(graph)) == [
        "/stage/network/encoder.0/Conv",
        "/instance_network/head/Conv",
    ]


def test_int8_refusals(tmp_path):
    models = _models()
    with pytest.raises(ValueError, match="int8 runs on the CPU"):
        load_runner(models, engine="onnx", device="cuda", precision="int8")
    with pytest.raises(ValueError, match="ONNX Runtime runs fp32 or int8"):
        load_runner(models, engine="auto", precision="fp16")
    with pytest.raises(TypeError, match="precision"):
        load_runner(models, engine="torch", precision="int8")
    with pytest.raises(ValueError, match="keep_int8 is an option of precision 'int8'"):
        load_runner(models, engine="onnx", device="cpu", keep_int8=True)
    sleap_nn_export = Path(__file__).parents[1] / "data" / "exports" / CASE
    require(sleap_nn_export)
    with pytest.raises(ValueError, match="quantises sleap-live '\\.onnx' exports and model"):
        load_runner(sleap_nn_export, engine="onnx", device="cpu", precision="int8")


def test_int8_without_frames_to_calibrate_on_is_one_line(quantised):
    _, _, _, onnx_bytes, _ = quantised
    with pytest.raises(ModelConfigError, match="int8 is calibrated on frames that show animals"):
        int8_module.int8_runner(onnx_bytes, threads=1, verify_frames=None, cache_root=None)


@pytest.mark.parametrize(
    ("engine", "precision", "refusal"),
    [
        ("auto", "int8", None),
        ("onnx", "int8", None),
        ("openvino", "bf16", None),
        ("onnx", "fp32", None),
        ("torch", "int8", "--precision int8 is an option of --engine onnx or auto"),
        ("openvino", "int8", "--precision int8 is an option of --engine onnx or auto"),
        ("onnx", "bf16", "--precision bf16 is an option of --engine openvino"),
        ("tensorrt", "fp32", "--precision fp32 is an option of --engine openvino or onnx or auto"),
    ],
)
def test_the_cli_takes_each_precision_with_its_engines(engine, precision, refusal):
    import argparse

    from sleap_live.cli.options import UsageError, add_model_options, engine_options

    parser = argparse.ArgumentParser()
    add_model_options(parser, batch_size=None, batch_size_help="")
    args = parser.parse_args(["-m", "m", "--engine", engine, "--precision", precision])
    if refusal is None:
        assert engine_options(args) == {"precision": precision}
    else:
        with pytest.raises(UsageError, match=refusal):
            engine_options(args)


@pytest.mark.parametrize(
    ("given", "options"),
    [
        (["--precision", "int8", "--keep-int8"], {"precision": "int8", "keep_int8": True}),
        (["--keep-int8"], "--keep-int8 is an option of --precision int8"),
        (["--precision", "fp32", "--keep-int8"], "--keep-int8 is an option of --precision int8"),
    ],
)
def test_the_cli_keeps_int8_only_with_precision_int8(given, options):
    import argparse

    from sleap_live.cli.options import UsageError, add_model_options, engine_options

    parser = argparse.ArgumentParser()
    add_model_options(parser, batch_size=None, batch_size_help="")
    args = parser.parse_args(["-m", "m", "--engine", "onnx", *given])
    if isinstance(options, dict):
        assert engine_options(args) == options
    else:
        with pytest.raises(UsageError, match=options):
            engine_options(args)
