"""What SafetyRepro reads of argparse's parsers beyond their public API, and nowhere else: the flags a parser
knows and the subcommand parsers it holds, so that a mistyped flag is answered with the nearest flag of the
subcommand that was run (argparse 3.11 names an unknown flag but suggests nothing). argparse has no public
way to either; both attributes have been there since Python 3.2."""

from __future__ import annotations

import argparse


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag `parser` takes (`--out`, `-v`, ...)."""
    return list(parser._option_string_actions)


def subcommand_parsers(parser: argparse.ArgumentParser) -> list[tuple[str, dict[str, argparse.ArgumentParser]]]:
    """(dest, name -> parser) of each subcommand group `parser` holds."""
    return [
        (action.dest, dict(action.choices))
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
