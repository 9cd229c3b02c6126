"""scripts/check_torch_kept.py's reading of pip's installation report: what an install
would put over a distribution the environment already has. The venv and pip's dry run
themselves run in CI as a step of their own (.ci/run), not here."""

from __future__ import annotations

from tests import script_modules as scripts

check = scripts.load("check_torch_kept.py")


def report(*installs):
    # pip's installation report, format version 1 (pip's docs, "Installation Report"),
    # cut down to the keys the check reads.
    return {
        "version": "1",
        "install": [{"metadata": {"name": name, "version": version}} for name, version in installs],
    }


def test_a_torch_that_would_be_replaced_is_named_with_both_versions():
    would = report(("onnx", "1.23.2"), ("torch", "2.13.0+cpu"), ("sleap-live", "0.1.0"))
    assert check.replaced(would, {"torch": "2.14.1", "pip": "23.2.1"}) == [
        "torch 2.14.1 -> 2.13.0+cpu"
    ]


def test_names_are_compared_as_pip_compares_them():
    would = report(("ML_Dtypes", "0.6.0"))
    assert check.replaced(would, {"ml-dtypes": "0.7.0"}) == ["ML_Dtypes 0.7.0 -> 0.6.0"]


def test_new_distributions_alone_replace_nothing():
    would = report(("sympy", "1.14.0"), ("sleap-live", "0.1.0"))
    assert check.replaced(would, {"torch": "2.14.1", "pip": "23.2.1"}) == []
    assert check.replaced(report(), {"torch": "2.14.1"}) == []
