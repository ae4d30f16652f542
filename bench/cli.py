"""The lab's command-line plumbing (``python -m bench``): subcommands 100 columns wide, and which options a
command line spells out, so that a command can say which of them it ignores and why."""

from __future__ import annotations

import argparse
import subprocess

from warpdecode import _runtime


def on_gpu() -> bool:
    return _runtime.DEFAULT_DEVICE.type == "cuda"


def each_in_own_process(argv_of, args, presets: list[str]):
    """One process per preset, so that none inherits another's memory history (docs/design.md)."""
    for preset in presets:
        print(f"== {preset}, in a process of its own", flush=True)
        subprocess.run(argv_of(args, preset), check=True)


def given_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations of the options ``argv`` spells out, to tell an option given from its default."""
    given = set()
    for token in argv:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        hits = [a for a in parser._actions if any(s == name for s in a.option_strings)]
        hits = hits or [a for a in parser._actions if any(s.startswith(name) for s in a.option_strings)]
        if len(hits) == 1:
            given.add(hits[0].dest)
    return given


def say_ignored(args, why: dict[str, str]) -> None:
    """Say, for each given option in ``why`` (destination: reason), that it is ignored and why."""
    for dest, reason in why.items():
        if dest in args.given:
            print(f"--{dest.replace('_', '-')} ignored: {reason}", flush=True)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """100 columns, so that each command's line in ``--help`` fits on one line."""

    def __init__(self, prog):
        super().__init__(prog, width=100, max_help_position=30)


class CommandFormatter(argparse.HelpFormatter):
    """A command's help: 100 columns, its description wrapped."""

    def __init__(self, prog):
        super().__init__(prog, width=100, max_help_position=30)


def subcommands(prog: str, description: str):
    """A parser with subcommands, 100 columns wide; returns it and its ``add_parser``."""
    p = argparse.ArgumentParser(prog=prog, description=description, formatter_class=Formatter)
    sub = p.add_subparsers(dest="cmd", required=True, title="commands", metavar="<command>")
    return p, lambda name, **kw: sub.add_parser(name, formatter_class=CommandFormatter, **kw)


def parse(p: argparse.ArgumentParser, argv: list[str]):
    """``p``'s options for ``argv``, with ``given``: the options ``argv`` spells out."""
    args = p.parse_args(argv)
    sub = p._subparsers._group_actions[0].choices[args.cmd]
    args.given = given_options(sub, argv[argv.index(args.cmd) + 1:])
    return args
