"""The `safetyrepro` command. Each subcommand lives in the module that owns it and registers itself
through a `register(subparsers)` function; heavy imports (torch, lm-eval, Inspect) stay inside the
handlers so that `safetyrepro --help` and input errors answer at once."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import re
import sys

from safetyrepro.compat.argparse_parsers import option_strings, subcommand_parsers
from safetyrepro.errors import UserError, did_you_mean, nearest
from safetyrepro.run_spec_cli import expand_config, past_options

# subcommand -> module with register(subparsers); a module that is not there yet is skipped.
SUBCOMMANDS = {
    "envelope": "safetyrepro.tasks.envelope_cli",
    "items": "safetyrepro.tasks.items_cli",
    "models": "safetyrepro.adapters.catalogue.models_cli",
    "sweep": "safetyrepro.sweep.cli",
    "demo": "safetyrepro.demo",
    "analyze": "safetyrepro.analysis.cli",
    "compare": "safetyrepro.analysis.compare_cli",
    "plan": "safetyrepro.analysis.plan_cli",
    "crosspkg": "safetyrepro.crosspkg.cli",
    "import": "safetyrepro.importers.cli",
    "certify": "safetyrepro.certify.cli",
    "verdict": "safetyrepro.verdict_cli",
    "flow": "safetyrepro.flow.cli",
    "export": "safetyrepro.eee.cli",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit code 2, like every other input error
        sys.stderr.write(f"safetyrepro: error: {with_suggestion(message)}\n")
        sys.exit(2)

    def parse_args(self, args=None, namespace=None):
        # argparse (3.11) names an unknown flag but suggests nothing: the nearest flag of the subcommand
        # that was run (the flags of another subcommand would point the wrong way)
        known, extra = self.parse_known_args(args, namespace)
        if extra:
            chain = _chosen_parsers(self, known)
            near = next((_flag_hint(a.split("=")[0], chain) for a in extra if a.startswith("-")), "")
            self.error(f"unrecognized arguments: {' '.join(extra)}{near}")
        return known


def _flag_hint(flag: str, chain: list[argparse.ArgumentParser]) -> str:
    """The nearest flag of the subcommand that was run (`chain[-1]`); else a flag of the commands above it,
    which must come before the subcommand (`safetyrepro --data-dir DIR sweep ...`)."""
    outer = [f for p in chain[:-1] for f in option_strings(p)]
    if flag in outer:
        return f" ({flag} goes before the subcommand: {chain[-1].prog.replace(' ', f' {flag} ... ', 1)} ...)"
    near = _nearest_flag(flag, option_strings(chain[-1]))
    if near or not outer:
        return f" (did you mean {near!r}?)" if near else ""
    near = _nearest_flag(flag, outer)
    return f" (did you mean {near!r}, before the subcommand?)" if near else ""


def _nearest_flag(flag: str, flags) -> str | None:
    """The flag nearest `flag`, compared without their dashes (which every flag shares: `--data-dir` is
    not near `--tier`)."""
    bare = {f.lstrip("-"): f for f in flags if f.startswith("--")}
    name = flag.lstrip("-")
    if name in bare:  # `-benchmarks`: the flag, with one dash too few
        return bare[name] if bare[name] != flag else None
    near = nearest(name, bare)
    return bare[near] if near is not None else None


# argparse's words for a value outside `choices=` (a subcommand, --package, --executor): 3.11's wording
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")


def with_suggestion(message: str) -> str:
    """argparse's message, with the nearest valid choice where it refused one (`did you mean 'sweep'?`)."""
    m = _INVALID_CHOICE.search(message)
    if not m:
        return message
    near = did_you_mean(m["value"], re.findall(r"'([^']*)'", m["choices"]))
    if not near:
        return message
    cut = m.start("choices") - len("(choose from ")  # beside the typo, before the list of choices
    return f"{message[:cut]}{near.strip()} {message[cut:]}"


def _chosen_parsers(parser: argparse.ArgumentParser, known: argparse.Namespace) -> list[argparse.ArgumentParser]:
    """`parser` and the subcommands' parsers that `known` chose inside it (`safetyrepro`, `import`, `eee`)."""
    for dest, choices in subcommand_parsers(parser):
        chosen = choices.get(getattr(known, dest, None) or "")
        if chosen is not None:
            return [parser, *_chosen_parsers(chosen, known)]
    return [parser]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="safetyrepro",
        description="SafetyRepro: does 'model A is safer than model B' survive "
        "ordinary evaluation choices? Benchmarks, sweeps, rank-flip analysis, cross-package study.",
    )
    parser.add_argument(
        "--data-dir",
        help="local benchmark mirror laid out like shared/data "
        "(default: $SAFETYREPRO_DATA_DIR, else download the pinned sources into the cache)",
    )
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


# optional dependencies: the import name -> what installs it
HARNESS = "pip install 'safetyrepro[harness]' (make install sets up everything)"
OPTIONAL = {
    **dict.fromkeys(("torch", "transformers", "accelerate", "gguf", "sentencepiece", "datasets"), HARNESS),
    **dict.fromkeys(("lm_eval", "inspect_ai", "anyio"), HARNESS),  # anyio: Inspect's, read by the backends
    "ray": "pip install 'safetyrepro[ray]'",
    "bitsandbytes": "pip install 'safetyrepro[nf4]'",
    "llama_cpp": "pip install 'safetyrepro[llamacpp]' (make llamacpp)",
    "helm": "make helm",
    "vllm": "pip install 'lm-eval[vllm]' (on a GPU machine)",
    "inspect_flow": "pip install 'safetyrepro[flow]'",
}


# what a full disk leaves behind, by subcommand: the sweeps keep their finished cells; the others
# finish nothing, and a rerun of the same command does the whole work again
FULL_DISK = {
    "sweep": "free disk space and rerun (finished work is kept)",
    "demo": "free disk space and rerun (finished work is kept)",
    "crosspkg": "free disk space and rerun (finished work is kept)",
    "import": "nothing was imported; free disk space and rerun the same command",
    "analyze": "the analysis did not finish; free disk space and rerun the same command",
}


def os_error_message(e: OSError, command: str | None = None) -> str:
    """An operating-system error as one line that names the file and what to do (`command`: the
    subcommand that failed, which decides what a full disk leaves behind)."""
    what = e.strerror or str(e)
    path = e.filename
    hint = {
        errno.ENOSPC: FULL_DISK.get(command or "", "free disk space and rerun the same command"),
        errno.EACCES: "check the permissions, or choose another location",
        errno.EROFS: "the file system is read-only: choose another location",
        errno.ENAMETOOLONG: "use a shorter path or --out",
        errno.ENOENT: "check the path",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EISDIR: "a folder is in the way of a file",
        errno.EFBIG: "the process's file-size limit (ulimit -f) was reached: raise it and rerun the same command",
    }.get(e.errno or -1, "")
    return f"{what}{f': {path}' if path else ''}" + (f"; {hint}" if hint else "")


# subcommand -> the module whose legacy_argv(rest) rewrites a former spelling of it (rest: what follows the name)
LEGACY = {"certify": "safetyrepro.certify.cli"}


def with_current_spelling(argv: list[str]) -> list[str]:
    """`argv` with a subcommand's former spelling rewritten to its current one (`certify --replay ...`)."""
    i = past_options(argv, 0)
    if i >= len(argv) or argv[i] not in LEGACY:
        return argv
    rewrite = importlib.import_module(LEGACY[argv[i]]).legacy_argv
    return [*argv[: i + 1], *rewrite(argv[i + 1 :])]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:  # a spec file is read before parsing (its keys become flags): its refusals are a user's error too
        argv = expand_config(with_current_spelling(list(sys.argv[1:] if argv is None else argv)), parser)
    except UserError as e:
        return _error(str(e))
    args = parser.parse_args(argv)
    if args.data_dir:
        os.environ["SAFETYREPRO_DATA_DIR"] = args.data_dir
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    previous = _terminate_as_interrupt()
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at interpreter exit
        # a command that catches the interrupt itself (certify, demo: they save the run so far) answers
        # 130; under SIGTERM the exit code is still SIGTERM's, as docs/failures.md gives it
        return 143 if code == 130 and _TERMINATED else code
    except UserError as e:
        if args.verbose:
            raise
        return _error(str(e))
    except BrokenPipeError:  # `safetyrepro ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Terminated:
        sys.stderr.write(
            "safetyrepro: terminated (SIGTERM); finished cells are kept, rerun the same command to resume\n"
        )
        return 143
    except KeyboardInterrupt:
        sys.stderr.write("safetyrepro: interrupted; finished cells are kept, rerun the same command to resume\n")
        return 130
    except OSError as e:
        if args.verbose:
            raise
        return _error(os_error_message(e, getattr(args, "command", None)))
    except Exception as e:  # a missing optional package, or a defect: still one line; -v shows the traceback
        if args.verbose:
            raise
        top = (getattr(e, "name", None) or "").split(".")[0] if isinstance(e, ModuleNotFoundError) else ""
        if top in OPTIONAL and OPTIONAL[top] == HARNESS:
            return _error(
                f"this runs models or harnesses, which the core install leaves out ({top} is missing): {HARNESS}"
            )
        if top in OPTIONAL:
            return _error(f"this needs the optional dependency {top}: {OPTIONAL[top]}")
        _error(f"internal error: {type(e).__name__}: {e} (rerun with -v for the traceback, and please report it)")
        return 1
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so that it ends like an interrupt: the cell being
    written is never half-written (cells are committed atomically), and the user gets one line."""


_TERMINATED = False  # set by the SIGTERM handler of this process's command


def _terminate_as_interrupt():
    """Turn SIGTERM into `Terminated` for this command (main thread only); returns the old handler."""
    import signal
    import threading

    global _TERMINATED
    _TERMINATED = False
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        global _TERMINATED
        _TERMINATED = True
        raise Terminated()

    return signal.signal(signal.SIGTERM, handler)


def _error(message: str) -> int:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    if len(first) > 2000:  # a value quoted whole (a spec, a label) is cut: one readable line
        first = first[:2000] + f"… ({len(first)} characters)"
    sys.stderr.write(f"safetyrepro: error: {first}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
