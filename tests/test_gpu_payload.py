"""scripts/gpu_payload.py's pure parts: the wheel list, the size check against the GPU
machine's 64 MiB, the stripping of a wheel and its reuse. The download and the rehearsal itself
run in CI as a step of their own (.ci/run), not here."""

from __future__ import annotations

import zipfile

from tests import script_modules as scripts

payload = scripts.load("gpu_payload.py")

MIB = 2**20


def test_the_list_names_what_the_gpu_machine_lacks():
    names = {line.split("==")[0].lower() for line in payload.requirements()}
    assert {"av", "pynvvideocodec", "platformdirs"} <= names
    # Every line pinned: the printed size is the size that travels.
    assert all("==" in line for line in payload.requirements())
    assert payload.distribution(payload.Path("PyNvVideoCodec-2.2.4-cp312.whl")) == "pynvvideocodec"


def test_size_report_fails_over_64_mib():
    fits, line = payload.size_report(38 * MIB, 22 * MIB)
    assert fits and line.startswith("payload 38.0 MiB + working tree 22.0 MiB = 60.0 MiB: fits")
    assert "4.0 MiB to spare" in line
    fits, line = payload.size_report(45 * MIB, 22 * MIB)
    assert not fits and "OVER" in line and "3.0 MiB too much" in line
    assert payload.size_report(64 * MIB, 0)[0]


def test_repack_wheel_drops_files_and_their_record_lines_and_compresses_with_lzma(tmp_path):
    wheel = tmp_path / "pynvvideocodec-2.2.4-cp312-cp312-manylinux_2_28_x86_64.whl"
    record = "PyNvVideoCodec/__init__.py,sha256=x,1\nsamples/a.py,sha256=y,2\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("PyNvVideoCodec/__init__.py", "")
        archive.writestr("PyNvVideoCodec/libavutil.so.61", b"lib")
        archive.writestr("PyNvVideoCodec/libavutil.so.61.1.101", b"lib" * 1000)
        archive.writestr("samples/a.py", "x" * 5000)
        archive.writestr("pynvvideocodec-2.2.4.dist-info/RECORD", record)
    saved = payload.repack_wheel(wheel, payload.STRIP["pynvvideocodec"])
    assert saved > 0
    with zipfile.ZipFile(wheel) as archive:
        assert {item.compress_type for item in archive.infolist()} == {zipfile.ZIP_LZMA}
        assert sorted(archive.namelist()) == [
            "PyNvVideoCodec/__init__.py",
            "PyNvVideoCodec/libavutil.so.61",
            "pynvvideocodec-2.2.4.dist-info/RECORD",
        ]
        kept = archive.read("pynvvideocodec-2.2.4.dist-info/RECORD").decode()
    assert kept == "PyNvVideoCodec/__init__.py,sha256=x,1\n"


def test_a_wheel_already_repacked_for_another_python_is_copied_not_repacked(tmp_path, monkeypatch):
    def wheel(folder, name, text):
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(folder / name, "w") as archive:
            archive.writestr("a.py", text)
        return folder / name

    shared, own = "av-18.1.0-cp311-abi3-x.whl", "pynvvideocodec-2.2.4-cp311-cp311-x.whl"
    done = wheel(tmp_path / "payload", shared, "repacked for 3.12")
    target = tmp_path / "payload-3.11"

    def download(wanted, folder, python):
        return [wheel(folder, shared, "as published"), wheel(folder, own, "x" * 5000)]

    monkeypatch.setattr(payload, "download", download)
    payload.fetch_stripped(target, "3.11", repacked=tmp_path / "payload")
    assert (target / shared).read_bytes() == done.read_bytes()
    with zipfile.ZipFile(target / own) as archive:  # no 3.12 form of it: repacked here
        assert {item.compress_type for item in archive.infolist()} == {zipfile.ZIP_LZMA}


def test_the_gpu_machines_command_expects_a_gpu():
    # Without --expect-gpu a torch that sees no GPU there would skip every GPU part.
    gpu_check = scripts.load("gpu_check.py")
    words = payload.GPU_COMMAND.split(" > ")[0].split()
    assert words[:2] == ["python3.12", "scripts/gpu_check.py"]
    assert gpu_check.parse_args(words[2:]).expect_gpu
    docs = (payload.ROOT / "docs" / "gpu_check.md").read_text()
    assert payload.GPU_COMMAND in docs
