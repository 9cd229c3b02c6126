"""The engine table (issue 38 item 3): `load_runner`'s validation, the command line's
choices and the docs' engine table all come from `sleap_live.engines.engine_table`."""

from __future__ import annotations

import argparse

import pytest

from sleap_live.cli.options import Parser, add_model_options
from sleap_live.engines import engine_table
from sleap_live.engines.engine_table import CLI_PRECISIONS, ENGINE_TABLE, ENGINES
from sleap_live.engines.errors import ModelNotFoundError
from sleap_live.engines.export import tensorrt_engine
from sleap_live.engines.runners import openvino
from sleap_live.engines.runners.load import load_runner
from tests import script_modules
from tests.docs_blocks import REPO


def _choices(option: str) -> tuple[str, ...]:
    parser = Parser()
    add_model_options(parser, batch_size=None, batch_size_help="")
    action = next(a for a in parser._actions if option in a.option_strings)
    assert isinstance(action, argparse.Action) and action.choices is not None
    return tuple(action.choices)


def test_the_command_line_offers_the_tables_engines_and_precisions():
    assert _choices("--engine") == ENGINES
    assert set(_choices("--precision")) == {"fp32", "bf16", "int8"} == set(CLI_PRECISIONS)


@pytest.mark.parametrize("row", ENGINE_TABLE, ids=lambda row: row.name)
def test_load_runner_takes_each_engines_options_and_refuses_others(row, tmp_path):
    missing = tmp_path / "missing.onnx"
    given = dict.fromkeys(row.options)
    with pytest.raises(ModelNotFoundError):  # past the option check, to the path check
        load_runner(missing, engine=row.name, **given)
    other = next(name for e in ENGINE_TABLE for name in e.options if name not in row.options)
    with pytest.raises(TypeError, match=f"unknown options \\['{other}'\\]"):
        load_runner(missing, engine=row.name, **{other: None})


def test_the_runners_precisions_are_the_tables():
    assert tuple(openvino.PRECISIONS) == engine_table.engine("openvino").precisions
    assert tensorrt_engine.PRECISIONS == engine_table.engine("tensorrt").precisions
    with pytest.raises(ValueError, match="unknown engine 'trt'"):
        engine_table.engine("trt")


def test_the_docs_engine_table_is_written_from_the_table():
    hooks = script_modules.load("docs_hooks.py")
    text = (REPO / "docs" / hooks.ENGINE_PAGE).read_text()

    class Page:
        class file:
            src_uri = hooks.ENGINE_PAGE

    built = hooks.on_page_markdown(text, page=Page)
    assert hooks.ENGINE_MARKER not in built and engine_table.markdown() in built
    for row in ENGINE_TABLE:
        assert f"| `{row.name}` |" in built
