"""The `safetyrepro` command. Each subcommand lives in the module that owns it and registers itself
through a `register(subparsers)` function; heavy imports (torch, lm-eval, Inspect) stay inside the
handlers so that `safetyrepro --help` and input errors answer at once."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from safetyrepro.errors import UserError

# subcommand -> module with register(subparsers); a module that is not there yet is skipped.
SUBCOMMANDS = {
    "envelope": "safetyrepro.tasks.envelope_cli",
    "items": "safetyrepro.tasks.items_cli",
    "models": "safetyrepro.adapters.models_cli",
    "sweep": "safetyrepro.sweep.cli",
    "demo": "safetyrepro.demo",
    "analyze": "safetyrepro.analysis.cli",
    "compare": "safetyrepro.analysis.compare_cli",
    "crosspkg": "safetyrepro.crosspkg.cli",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit code 2, like every other input error
        sys.stderr.write(f"safetyrepro: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="safetyrepro", description="SafetyRepro: does 'model A is safer than model B' survive "
                     "ordinary evaluation choices? Benchmarks, sweeps, rank-flip analysis, cross-package study.")
    parser.add_argument("--data-dir", help="local benchmark mirror laid out like shared/data "
                        "(default: $SAFETYREPRO_DATA_DIR, else download the pinned sources into the cache)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show library logs and tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in SUBCOMMANDS.values():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data_dir:
        os.environ["SAFETYREPRO_DATA_DIR"] = args.data_dir
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        if args.verbose:
            raise
        sys.stderr.write(f"safetyrepro: error: {e}\n")
        return 2
    except BrokenPipeError:  # `safetyrepro ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("safetyrepro: interrupted; finished cells are kept, rerun the same command to resume\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
