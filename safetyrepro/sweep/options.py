"""A sweep's options, built once and validated once: `SweepOptions.from_args(args, profile)` for every
command that takes the sweep's flags (sweep, certify, flow, demo), or `SweepOptions(...)` in code.

A `Profile` says what a command does with the sweep's flags: which it refuses and why (flow runs no
executor of its own, a certify replay reads its models from a grid), the values it fixes (flow: the
Inspect package), its own defaults (the demo's precision) and help texts. The parser holds no defaults
of its own (a flag not given is None), so a command can tell a flag given from one left alone; the
defaults are SweepOptions' fields, written once. Whatever way a SweepOptions is made, it is checked when
it is made (`__post_init__`: one pass, each failure one line) and carries what its values select
(`selection`: the rules, configurations and benchmarks), so nothing built from it checks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetyrepro.errors import UserError
from safetyrepro.sweep.plan import SweepSpec, select_configs
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE, check_tie_rule
from safetyrepro.tasks.envelope import Config, Rules, benchmark_of, benchmarks_of, load_rules
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW, check_fewshot_draw

if TYPE_CHECKING:
    from safetyrepro.adapters.catalogue.model_specs import ModelEntry

PACKAGES = ("lm-eval", "inspect")
# the command line's axis flags -> SweepOptions.filters' keys
AXIS_FLAGS = {
    "templates": "template",
    "decodings": "decoding",
    "shots": "shots",
    "scoring": "scoring",
    "configs": "config",
}
# every flag of the sweep's that from_args reads (argparse's dest); sweep/cli.py declares them
FLAGS = (
    "models",
    "models_file",
    "benchmarks",
    "tier",
    *AXIS_FLAGS,
    "limit",
    "package",
    "precision",
    "tie_rule",
    "fewshot_draw",
    "device",
    "batch_size",
    "subsample",
    "subset_seed",
    "executor",
    "address",
    "workers",
    "rules",
    "allow_rules_change",
    "no_progress",
)


SWITCHES = ("allow_rules_change", "no_progress")  # store_true flags: given is True


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


@dataclass(frozen=True)
class Profile:
    """What one command does with the sweep's flags (keys are argparse dests, as in FLAGS)."""

    command: str
    # dest -> why the command refuses it when given ({flag} and {value} filled in); its parser default is None
    refused: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # dest -> the value the command always uses
    defaults: Mapping[str, Any] = field(default_factory=dict)  # dest -> the command's own parser default
    # dest -> (its value when not given, unless one of these dests is given): the demo's question
    fallback: Mapping[str, tuple[Any, tuple[str, ...]]] = field(default_factory=dict)
    help: Mapping[str, str] = field(default_factory=dict)  # dest -> the command's own help text
    hidden: frozenset[str] = frozenset()  # dests left out of --help
    any_package: bool = False  # --package takes any name (a replayed grid's package group); a live run checks it
    require_out: bool = True

    def default(self, dest: str) -> Any:
        """The parser's default of a flag under this command (SweepOptions' field default unless the
        command has its own; None for a refused flag, so that giving it is seen)."""
        if dest in self.refused:
            return None
        if dest in self.defaults:
            return self.defaults[dest]
        return False if dest in SWITCHES else FIELD_DEFAULTS.get(dest)

    def given(self, args) -> dict[str, Any]:
        """The flags the user gave (set to other than this command's default)."""
        out = {}
        for dest in FLAGS:
            value = getattr(args, dest, None)
            if value not in (None, False) and value != self.default(dest):
                out[dest] = value
        return out

    def check(self, args) -> None:
        """Refuse the flags this command does not take, where they were given (a fixed one: given otherwise)."""
        for dest, value in self.given(args).items():
            if dest in self.refused and value != self.fixed.get(dest):
                raise UserError(self.refused[dest].format(flag=flag(dest), value=value))


SWEEP = Profile("sweep")


@dataclass(frozen=True)
class Selection:
    """What a sweep's options select: the rules, and the labels, benchmarks and configurations it runs."""

    rules: Rules
    labels: tuple[str, ...]
    precision: str
    tie_rule: str
    filters: dict
    benchmarks: tuple[str, ...]
    configs: list[Config]


@dataclass(frozen=True)
class SweepOptions:
    """A sweep as asked for, checked (see the module docstring)."""

    models: tuple[ModelEntry, ...]  # in order
    out: Path
    benchmarks: tuple[str, ...] | None = None
    tier: str = "full"
    # axis -> allowed values (template, decoding, shots, scoring), and "config" -> configuration ids
    filters: dict = field(default_factory=dict)
    limit: int | None = None
    package: str = "lm-eval"
    precision: str = "bf16"
    device: str | None = None
    batch_size: int | None = None
    subsample: float | None = None
    subset_seed: int | None = None
    executor: str = "local"
    address: str | None = None
    workers: int = 2
    rules: str | None = None
    allow_rules_change: bool = False
    progress: bool = True
    tie_rule: str = DEFAULT_TIE_RULE
    fewshot_draw: str = DEFAULT_FEWSHOT_DRAW
    selection: Selection = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selection", _select(self))

    @classmethod
    def from_args(cls, args, profile: Profile = SWEEP) -> SweepOptions:
        """The options a command's parsed arguments (argparse's namespace) ask for, as `profile` takes them."""
        from safetyrepro.adapters.catalogue.model_specs import (  # lazy: the flags register at start-up
            load_models_file,
            parse_model_spec,
        )

        profile.check(args)
        values: dict[str, Any] = {d: getattr(args, d, None) for d in FLAGS}
        for dest, (value, unless) in profile.fallback.items():
            if values[dest] is None and not any(values[u] for u in unless):
                values[dest] = value
        values = {d: v for d, v in (values | dict(profile.fixed)).items() if v is not None}  # None: the field's default
        models = [parse_model_spec(m) for m in values.get("models") or ()]
        if values.get("models_file"):
            models += load_models_file(values["models_file"])
        return cls(
            models=tuple(models),
            out=Path(args.out),
            benchmarks=tuple(values["benchmarks"]) if values.get("benchmarks") else None,
            filters={axis: list(values[d]) for d, axis in AXIS_FLAGS.items() if values.get(d)},
            progress=not values.get("no_progress", False),
            **{k: v for k, v in values.items() if k in FIELD_DEFAULTS},
        )

    def spec(self, package: str | None = None) -> SweepSpec:
        """The sweep's identity: what decides its numbers (`package`: another than the options', for flow)."""
        s = self.selection
        return SweepSpec(
            s.labels,
            s.benchmarks,
            self.tier,
            package or self.package,
            s.precision,
            self.limit,
            s.rules.sha256,
            s.filters,
            self.subsample,
            self.subset_seed,
            s.tie_rule,
            tuple(m.spec for m in self.models),
            self.fewshot_draw,
        )


# the flags that are SweepOptions fields of the same name, and their defaults (the only place they are written)
FIELD_DEFAULTS = {
    f.name: f.default
    for f in fields(SweepOptions)
    if f.init and f.name in FLAGS and f.name not in ("models", "benchmarks")
}


def _select(o: SweepOptions) -> Selection:
    """The option checks that need no model and no backend, each failure one line (UserError): first the
    values alone (unique labels, package, precision, tie rule, each filter value once, --limit, --subsample,
    --subset-seed, --batch-size, --workers), then what they select from the rules (benchmarks and
    configuration ids), then --limit against each selected subset."""
    from safetyrepro.adapters.catalogue.loading import check_precision  # lazy: the flags register at start-up
    from safetyrepro.tasks.subsets import item_set  # lazy: the flags register at start-up

    labels = [m.label for m in o.models]
    if not labels:
        raise UserError("no model given: use --models and/or --models-file")
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise UserError(f"model {dupes[0]!r} is listed twice (labels must be unique; a models file can set `label:`)")
    if o.package not in PACKAGES:
        raise UserError(f"--package {o.package!r}: a live run goes through {' or '.join(PACKAGES)}")
    precision = check_precision(o.precision)
    tie_rule = check_tie_rule(o.tie_rule)
    check_fewshot_draw(o.fewshot_draw)
    for axis, values in o.filters.items():
        twice = sorted({str(v) for v in values if list(values).count(v) > 1})
        if twice:
            raise UserError(f"{axis} {twice[0]!r} is listed twice (each value once)")
    if o.limit is not None and o.limit < 1:
        raise UserError(f"--limit must be a positive number of items, got {o.limit}")
    if o.subsample is not None and not 0 < o.subsample <= 1:
        raise UserError(f"--subsample must be a fraction in (0, 1], got {o.subsample}")
    if o.subset_seed is not None and o.subset_seed < 0:
        raise UserError(f"--subset-seed must be a whole number >= 0, got {o.subset_seed}")
    if o.batch_size is not None and o.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {o.batch_size}")
    if o.workers < 1:
        raise UserError(f"--workers must be at least 1, got {o.workers}")
    rules = load_rules(o.rules)
    filters = {k: v for k, v in o.filters.items() if v}
    benchmarks = list(o.benchmarks or (benchmarks_of(filters["config"]) if "config" in filters else rules.benchmarks))
    stray = [i for i in filters.get("config", ()) if benchmark_of(i) not in benchmarks]
    if stray:
        raise UserError(f"configuration {stray[0]!r} is of a benchmark not in --benchmarks ({', '.join(benchmarks)})")
    configs = select_configs(rules, benchmarks, o.tier, precision, filters)
    limit = o.limit if o.limit is not None else 0
    for b in sorted({c.benchmark for c in configs}) if limit else ():
        n = len(item_set(b).items)  # a --subsample is drawn from the items the limit keeps
        if limit > n:
            raise UserError(
                f"--limit {limit} is more than the {n} items of the {b} subset; "
                f"use --limit {n} or less (or leave it out for all {n})"
            )
    return Selection(rules, tuple(labels), precision, tie_rule, filters, tuple(benchmarks), configs)
