"""`--config SPEC.yaml`: a run's flags in a file (lm-eval's `--config` pattern), for sweep, certify live, flow and
demo. The file's keys are the command's flags (`models`, `tier`, `limit`, `held-only` or `held_only`); the flags on
the command line override it. A sweep's recorded sweep.json is a valid spec: its `filters` are the filter flags, its
`model_specs` what `--models` ran, and its `rules_sha256` is checked against the rules the run reads.

The file is read before the command line is parsed: its keys become flags placed right after the subcommand, so that
argparse checks them as it checks typed ones (choices, types) and a flag given after them wins.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from safetyrepro.compat.argparse_parsers import option_strings, subcommand_parsers
from safetyrepro.errors import UserError, did_you_mean
from safetyrepro.limits import MAX_CONFIG_BYTES, load_yaml

COMMANDS = ("sweep", "certify", "flow", "demo")  # the commands whose flags a spec holds (certify: its live mode)
# what a sweep.json records beside its flags: checked or read, not passed on as flags
RECORDED = ("rules_sha256", "model_specs", "filters")


def add_config_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="SPEC.yaml",
        help="the run's flags in a YAML or JSON file, keys as the flags (a sweep's sweep.json is one); flags given "
        "here override it",
    )


def expand_config(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`argv` with `--config FILE` replaced by the file's flags, placed right after the subcommand (and its mode)."""
    if "--config" not in argv and not any(a.startswith("--config=") for a in argv):
        return argv
    chain, at = _command_chain(argv, parser)
    if not chain or chain[0][0] not in COMMANDS:
        return argv  # argparse refuses --config for a command that does not take it
    rest = list(argv[at:])
    i = next(k for k, a in enumerate(rest) if a == "--config" or a.startswith("--config="))
    if rest[i] == "--config":
        if i + 1 >= len(rest):
            return argv  # argparse says it needs a value
        path, rest = rest[i + 1], rest[:i] + rest[i + 2 :]
    else:
        path, rest = rest[i].split("=", 1)[1], rest[:i] + rest[i + 1 :]
    sub = chain[-1][1]
    tokens = spec_tokens(read_spec(Path(path)), option_strings(sub), path, rest)
    return [*argv[:at], *tokens, *rest]


GLOBAL_VALUED = ("--data-dir",)  # the flags before a subcommand that take a value


def past_options(argv: list[str], i: int) -> int:
    """The index of the first word at or after `i` that is not an option (a global one takes its value along)."""
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in GLOBAL_VALUED else 1
    return i


def _command_chain(argv: list[str], parser) -> tuple[list[tuple[str, argparse.ArgumentParser]], int]:
    """The subcommands `argv` names ((name, parser) from the top) and the index just after the last one."""
    chain: list[tuple[str, argparse.ArgumentParser]] = []
    here, i, after = parser, 0, 0
    while groups := subcommand_parsers(here):
        i = past_options(argv, i)
        if i >= len(argv) or argv[i] not in groups[0][1]:
            break
        here = groups[0][1][argv[i]]
        chain.append((argv[i], here))
        i = after = i + 1
    return chain, after


def read_spec(path: Path) -> dict[str, Any]:
    """The spec file's mapping (YAML, or JSON, which YAML reads), read as an untrusted file; else one line."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"--config {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"--config {path}: a folder, not a spec file") from None
    spec = load_yaml(data, f"--config {path}")
    if not isinstance(spec, dict):
        raise UserError(f"--config {path}: a spec is a mapping of flags to values, got {type(spec).__name__}")
    return spec


def spec_tokens(spec: dict[str, Any], flags: list[str], path: str, given: list[str]) -> list[str]:
    """The spec as command-line tokens for a parser taking `flags`; `given`: the flags on the command line (their
    --rules is the one the recorded rules_sha256 is checked against)."""
    spec = dict(spec)
    _check_recorded(spec, path, given)
    filters = spec.pop("filters", None) or {}
    if not isinstance(filters, dict):
        raise UserError(f"--config {path}: 'filters' is a mapping of filter flags (templates, shots, ...)")
    tokens: list[str] = []
    for key, value in [*spec.items(), *filters.items()]:
        name = "--" + str(key).lstrip("-").replace("_", "-")
        if name in ("--config", "--help"):
            raise UserError(f"--config {path}: key {key!r} is not a flag a spec can hold")
        if name not in flags:
            near = did_you_mean(name, [f for f in flags if f.startswith("--")])
            raise UserError(f"--config {path}: {key!r} is not a flag of this command{near}")
        tokens += _as_tokens(name, value, path)
    return tokens


def _as_tokens(name: str, value: Any, path: str) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [name]
    if isinstance(value, list | tuple):
        if not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
            raise UserError(f"--config {path}: {name[2:]} holds a list of plain values")
        return [name, *map(str, value)] if value else []
    if isinstance(value, str | int | float):
        return [name, str(value)]
    raise UserError(f"--config {path}: {name[2:]} is {type(value).__name__}; give a value, a list or true/false")


def _check_recorded(spec: dict[str, Any], path: str, given: list[str]) -> None:
    """A sweep.json's records: its model_specs are what --models ran (labels of a models file cannot be said as
    flags), and its rules_sha256 names the rules it was written under."""
    specs = spec.pop("model_specs", None)
    if specs is not None and spec.get("models") is not None and list(specs) != list(spec["models"]):
        raise UserError(
            f"--config {path}: its models were labelled by a models file (labels {', '.join(map(str, spec['models']))}"
            f" run {', '.join(map(str, specs))}); give that file with --models-file"
        )
    recorded = spec.pop("rules_sha256", None)
    if recorded is None:
        return
    from safetyrepro.tasks.envelope import load_rules

    rules = given[given.index("--rules") + 1] if "--rules" in given[:-1] else spec.get("rules")
    now = load_rules(rules).sha256
    if now != recorded:
        raise UserError(
            f"--config {path}: recorded under rules sha256 {str(recorded)[:12]}..., the rules this run reads "
            f"({rules or 'the packaged envelope.yaml'}) are {now[:12]}...: give the rules file it was written "
            "under with --rules"
        )
