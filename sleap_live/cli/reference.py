"""The command-line reference of the documentation, written from the parsers themselves.

`markdown()` walks `sleap_live.cli.parser()`: each command's usage, description and
every option of every argument group, with its help text as `-h` shows it (defaults
included). The documentation's build calls it (`scripts/docs_hooks.py`), so the
reference cannot drift from the command line.
"""

from __future__ import annotations

import argparse

from sleap_live.cli.options import PROG


def markdown(top: argparse.ArgumentParser | None = None) -> str:
    """The reference of every command of `top` (default: the `sleap-live` parser)."""
    if top is None:
        from sleap_live.cli import parser

        top = parser()
    parts = [_section(PROG, top, level=2)]
    for name, command in commands(top).items():
        parts.append(_section(f"{PROG} {name}", command, level=2))
    return "\n".join(parts)


def commands(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of `top`, by name, in the order `-h` lists them."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def option_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string (`-o`, `--output`, ...) and positional of `parser`, bar -h."""
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names.extend(action.option_strings or [_positional(action)])
    return names


def _section(title: str, parser: argparse.ArgumentParser, level: int) -> str:
    lines = [f"{'#' * level} `{title}`", ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    if parser.description:
        lines += [_escape(parser.description), ""]
    for group in parser._action_groups:
        actions = [
            action
            for action in group._group_actions
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        ]
        if not actions:
            continue
        lines += [f"{'#' * (level + 1)} {_escape(group.title or 'options')}", ""]
        if group.description:
            lines += [_escape(group.description), ""]
        lines += ["| option | what it does |", "|---|---|"]
        for action in actions:
            lines.append(f"| {_invocation(action)} | {_cell(_help(parser, action))} |")
        lines.append("")
    return "\n".join(lines)


def _positional(action: argparse.Action) -> str:
    return str(action.metavar or action.dest)


def _invocation(action: argparse.Action) -> str:
    """`-o FILE`, `--output FILE`, `--preview-hold`, `--no-preview-hold`, `VIDEO`."""
    if not action.option_strings:
        return f"`{_positional(action)}`"
    takes_value = action.nargs != 0
    metavar = ""
    if takes_value:
        if action.metavar is not None:
            metavar = f" {action.metavar}"
        elif action.choices is not None:
            metavar = " {" + ",".join(map(str, action.choices)) + "}"
        else:
            metavar = f" {action.dest.upper()}"
    return ", ".join(f"`{option}{metavar}`" for option in action.option_strings)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text as `-h` prints it (`%(default)s` and the like filled in)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    formatter = parser._get_formatter()
    return formatter._expand_help(action)


def _escape(text: str) -> str:
    """Text for Markdown: no HTML, no emphasis from `*` or `_` in option names."""
    return (
        text.replace("\\", "\\\\")
        .replace("<", "&lt;")
        .replace("*", "\\*")
        .replace("_", "\\_")
        .replace("`", "\\`")
    )


def _cell(text: str) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return _escape(" ".join(text.split())).replace("|", "\\|")
