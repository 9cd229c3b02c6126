"""What `sleap-live` says about itself, and the options its subcommands share.

Runs, exports and exit codes are tested in tests/stream/test_cli.py.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from sleap_live import cli
from sleap_live.cli import run
from sleap_live.cli.options import SUMMARIES

# Options every subcommand that loads a model has, defined once in sleap_live.cli.options,
# and the verification options they share with `export`.
MODEL_COMMANDS = ("run", "replay", "bench")
MODEL_OPTIONS = ("models", "engine", "device", "batch_size")
VERIFY_OPTIONS = ("verify", "verify_video")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (commands,) = (
        action for action in cli.parser()._actions if isinstance(action, argparse._SubParsersAction)
    )
    return dict(commands.choices)


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        action.dest: action
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    }


def sleap_live(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("sleap-live")), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def python_m(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sleap_live", *args], capture_output=True, text=True, timeout=60
    )


def test_help_lists_every_subcommand_with_its_summary(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per subcommand
    assert cli.main(["-h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert set(subcommands()) == set(SUMMARIES) == set(cli.COMMANDS)
    # argparse wraps a long summary, and puts it under a long name: compare words.
    words = " ".join(" ".join(lines).split())
    for name, summary in SUMMARIES.items():
        assert f" {name} {' '.join(summary.split())} " in f" {words} ", (name, lines)
    # The camera form is shown, since `run` may be left out.
    assert any("sleap-live --camera 0 -m" in line for line in lines)


def test_help_imports_nothing_heavy():
    """`sleap-live -h` builds every command's summary, not its options: it loads none
    of the libraries the commands run on (each command imports its own when it runs)."""
    code = (
        "import sys; from sleap_live.cli import main; assert main(['-h']) == 0;"
        "heavy = ('sleap_io', 'h5py', 'onnxruntime', 'torch', 'av', 'numpy');"
        "print(sorted(name for name in heavy if name in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.splitlines()[-1:] == ["[]"], result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_every_option_has_help_that_shows_its_default(name):
    parser = subcommands()[name]
    formatter = parser._get_formatter()
    for dest, action in options(parser).items():
        assert action.help, f"{name} {action.option_strings} has no help"
        if action.required:
            continue
        text = formatter._expand_help(action)
        assert "(default: " in text, f"{name} {action.option_strings}: {text!r}"
        if action.default not in (None, False, True):
            assert str(action.default) in text, (name, dest, text)


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_subcommand_help_prints_every_option(name, capsys):
    assert cli.main([name, "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith(f"usage: sleap-live {name} ")
    for action in options(subcommands()[name]).values():
        assert all(flag in text for flag in action.option_strings)


def test_model_options_are_the_same_in_every_subcommand():
    parsers = subcommands()
    first = options(parsers[MODEL_COMMANDS[0]])
    for name in MODEL_COMMANDS[1:]:
        other = options(parsers[name])
        for dest in MODEL_OPTIONS:
            a, b = first[dest], other[dest]
            assert (a.option_strings, a.type, a.choices, a.required, a.metavar) == (
                b.option_strings,
                b.type,
                b.choices,
                b.required,
                b.metavar,
            ), (name, dest)
            if dest != "batch_size":  # 8 for a file or bench, 1 for a live source
                assert (a.default, a.help) == (b.default, b.help), (name, dest)


@pytest.mark.parametrize("name", [*MODEL_COMMANDS[1:], "export"])
def test_verification_options_are_the_same_in_every_subcommand(name):
    parsers = subcommands()
    first, other = options(parsers[MODEL_COMMANDS[0]]), options(parsers[name])
    for dest in VERIFY_OPTIONS:
        a, b = first[dest], other[dest]
        assert (a.option_strings, a.type, a.default, a.const, a.metavar) == (
            b.option_strings,
            b.type,
            b.default,
            b.const,
            b.metavar,
        ), (name, dest)
    # The default frames differ (a run has its own video); the help says which.
    assert "(default: " in first["verify_video"].help


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--engine", "tf"], "argument --engine: invalid choice: 'tf'"),
        (["--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
        (["--batch-size", "two"], "argument --batch-size: expected a whole number, got 'two'"),
        (["-m", "b", "-m", "c", "-m", "d"], "give -m once, twice for a top-down model"),
        ([], "the following arguments are required: -m/--model"),
        (
            ["--verify-video", "x.mp4", "--no-verify"],
            "argument --no-verify: not allowed with argument --verify-video",
        ),
    ],
)
def test_model_options_fail_the_same_way_in_every_subcommand(extra, message, capsys):
    """Bad values of shared options: the same one-line error, status 2, in every command."""
    errors = set()
    for name in MODEL_COMMANDS:
        # The video does not exist: argument errors come first, with status 2.
        models = ["-m", "a"] if extra else []
        assert cli.main([name, "missing.mp4", *models, *extra]) == 2, name
        errors.add(capsys.readouterr().err)
    (error,) = errors
    assert error.startswith(f"sleap-live: error: {message}") and error.count("\n") == 1


@pytest.mark.parametrize("name", MODEL_COMMANDS)
def test_model_options_parse_the_same_way_in_every_subcommand(name):
    argv = [name, "v.mp4", "-m", "c", "--model", "i", "--engine", "onnx", "--device", "cuda:1"]
    args = cli.parser().parse_args([*argv, "--batch-size", "3"])
    assert (args.models, args.engine, args.device, args.batch_size) == (
        ["c", "i"],
        "onnx",
        "cuda:1",
        3,
    )


def test_run_may_be_left_out(monkeypatch):
    calls = []
    monkeypatch.setattr(run, "handle", lambda args, console: calls.append(vars(args)) or 0)
    camera = ["--camera", "0", "-m", "m", "--width", "64", "--height", "48"]
    for argv in (["v.mp4", "-m", "m"], camera):
        assert cli.main(argv) == 0
        assert cli.main(["run", *argv]) == 0
    assert calls[0] == calls[1] and calls[2] == calls[3]
    assert (calls[2]["command"], calls[2]["camera"], calls[2]["width"]) == ("run", ["0"], 64)


# The top level's help, a subcommand's and a usage error (each names the program):
# one of each, since every command's help and error go through the same parser.
@pytest.mark.parametrize("argv", [["-h"], ["export", "-h"], ["nonsense.mp4", "-m"]])
def test_python_m_is_the_console_script(argv):
    script = Path(sys.executable).with_name("sleap-live")
    if not script.exists():
        pytest.skip("the sleap-live console script is not installed")
    by_script, by_module = sleap_live(*argv), python_m(*argv)
    assert (by_module.returncode, by_module.stdout, by_module.stderr) == (
        by_script.returncode,
        by_script.stdout,
        by_script.stderr,
    )
    assert by_module.returncode in (0, 2)


def test_help_and_usage_errors_do_not_load_torch_or_scipy_optimize():
    # scipy.optimize alone takes about half a second to import: only the runs that
    # group, track or compare poses need it.
    code = (
        "import sys\n"
        "from sleap_live.cli import main\n"
        "for argv in (['-h'], ['export', '-h'], ['bench', 'v.mp4', '-m', 'm', '--loops', '0']):\n"
        "    main(argv)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'scipy.optimize' not in sys.modules, 'scipy.optimize was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["run", "replay", "bench", "export"])
def test_commands_that_build_or_run_a_model_take_the_inference_settings(name):
    from sleap_live.engines.settings import FIELDS

    given = options(subcommands()[name])
    assert set(FIELDS) <= set(given)
    for field in FIELDS:
        action = given[field]
        assert action.option_strings == [f"--{field.replace('_', '-')}"]
        # None means "not given": the help says the default in words.
        assert action.default is None and "(default: " in action.help, field
