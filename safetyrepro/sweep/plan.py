"""What a sweep will run: the validated cells (model × configuration) and the sweep's identity."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from safetyrepro.adapters.catalogue.loading import check_precision
from safetyrepro.errors import UserError
from safetyrepro.grid_schema import cell_stem
from safetyrepro.tasks.benchmark import check_tie_rule
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import AXES, Config, Rules, benchmark_of, benchmarks_of, load_rules
from safetyrepro.tasks.subsets import item_set

PACKAGES = ("lm-eval", "inspect")


@dataclass(frozen=True)
class SweepOptions:
    """A sweep as asked for (the command line's values, validated by the sweeper, not here)."""

    models: tuple  # ModelEntry, in order
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
    tie_rule: str = "expected"


@dataclass(frozen=True)
class SweepSpec:
    """Everything that decides a sweep's numbers; a resumed sweep must match it exactly."""

    models: tuple[str, ...]
    benchmarks: tuple[str, ...]
    tier: str
    package: str
    precision: str
    limit: int | None
    rules_sha256: str
    filters: dict = field(default_factory=dict)
    subsample: float | None = None
    subset_seed: int | None = None
    tie_rule: str = "expected"
    model_specs: tuple[str, ...] = ()  # what each label runs (the backend's spec)

    def identity(self) -> dict:
        d = asdict(self)
        d["models"] = list(self.models)
        d["benchmarks"] = list(self.benchmarks)
        d["model_specs"] = list(self.model_specs)
        return d


@dataclass(frozen=True)
class Cell:
    model: str
    config: Config
    seeds: tuple[int, ...]
    applicable: bool = True  # False: the model's backend cannot run this scoring (recorded, not run)

    @property
    def key(self) -> str:
        return f"{self.model}|{self.config.config_id}"

    @property
    def file_stem(self) -> str:
        return cell_stem(self.config.config_id)


def select_configs(
    rules: Rules, benchmarks: list[str], tier: str, precision: str, filters: dict[str, list] | None = None
) -> list[Config]:
    """The configurations of the chosen tier, narrowed by axis filters; a filter that asks for a
    combination the rules forbid for some benchmark is an error, not a silent empty set."""
    filters = {k: v for k, v in (filters or {}).items() if v}
    ids = filters.pop("config", None)
    for axis, values in filters.items():
        allowed = rules.axes[axis]
        for v in values:
            if v not in allowed:
                raise UserError(f"unknown {axis} {v!r}; allowed: {', '.join(map(str, allowed))}")
    out = []
    for b in benchmarks:
        rules.check_benchmark(b)
        bench = get_benchmark(b)
        for s in filters.get("scoring", []):
            bench.check_scoring(s)
        cfgs = [c for c in rules.configs(b, tier, precision) if all(c.axis(a) in vals for a, vals in filters.items())]
        if ids:
            known = {c.config_id for c in cfgs}
            for i in ids:
                if benchmark_of(i) == b and i not in known:
                    example = cfgs[0].config_id if cfgs else None
                    raise UserError(
                        f"configuration {i!r} is not among the {tier} configurations of {b}"
                        + (" with the other filters" if filters else "")
                        + (f" (ids read like {example!r}, as in grid.csv's config_id)" if example else "")
                    )
            cfgs = [c for c in cfgs if c.config_id in ids]
        if not cfgs:
            asked = ", ".join(f"{a}={'/'.join(map(str, v))}" for a, v in filters.items())
            if ids:
                asked = ", ".join(filter(None, [asked, "configurations " + " ".join(ids)]))
            raise UserError(f"the rules admit no {tier} configuration of {b} with {asked}")
        out += cfgs
    return out


def plan_cells(models: list, configs: list[Config], rules: Rules) -> list[Cell]:
    """Every model x configuration. `models` are labels, or ModelEntry objects whose stated capabilities
    (no continuation log-likelihoods) and precision note decide their logprob cells and precision."""
    cells = []
    for m in models:
        label = getattr(m, "label", m)
        caps = m.capabilities() if hasattr(m, "capabilities") else None
        precision = getattr(m, "precision", None)
        for c in configs:
            cfg = replace(c, precision=precision) if precision else c
            ok = caps is None or c.scoring != "logprob" or caps.loglikelihood
            cells.append(Cell(label, cfg, rules.seeds(c.decoding), ok))
    return cells


AXIS_FILTERS = AXES


@dataclass(frozen=True)
class Selection:
    """What a sweep's options select, checked before anything is built (the sweep and `flow` alike)."""

    rules: Rules
    labels: tuple[str, ...]
    precision: str
    tie_rule: str
    filters: dict
    benchmarks: tuple[str, ...]
    configs: list[Config]


def check_selection(o: SweepOptions) -> Selection:
    """The option checks that need no model and no backend: unique labels, precision, tie rule, filters
    (each value once), benchmarks and configuration ids, --limit against each subset, --subsample,
    --subset-seed and --batch-size. Each failure is one line (UserError)."""
    rules = load_rules(o.rules)
    labels = [m.label for m in o.models]
    if not labels:
        raise UserError("no model given: use --models and/or --models-file")
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise UserError(f"model {dupes[0]!r} is listed twice (labels must be unique; a models file can set `label:`)")
    precision = check_precision(o.precision)
    tie_rule = check_tie_rule(o.tie_rule)
    filters = {k: v for k, v in o.filters.items() if v}
    for axis, values in o.filters.items():
        twice = sorted({str(v) for v in values if list(values).count(v) > 1})
        if twice:
            raise UserError(f"{axis} {twice[0]!r} is listed twice (each value once)")
    benchmarks = list(o.benchmarks or (benchmarks_of(filters["config"]) if "config" in filters else rules.benchmarks))
    stray = [i for i in filters.get("config", ()) if benchmark_of(i) not in benchmarks]
    if stray:
        raise UserError(f"configuration {stray[0]!r} is of a benchmark not in --benchmarks ({', '.join(benchmarks)})")
    configs = select_configs(rules, benchmarks, o.tier, precision, filters)
    if o.limit is not None:
        if o.limit < 1:
            raise UserError(f"--limit must be a positive number of items, got {o.limit}")
        for b in sorted({c.benchmark for c in configs}):
            n = len(item_set(b).items)  # a --subsample is drawn from the items the limit keeps
            if o.limit > n:
                raise UserError(
                    f"--limit {o.limit} is more than the {n} items of the {b} subset; "
                    f"use --limit {n} or less (or leave it out for all {n})"
                )
    if o.subsample is not None and not 0 < o.subsample <= 1:
        raise UserError(f"--subsample must be a fraction in (0, 1], got {o.subsample}")
    if o.subset_seed is not None and o.subset_seed < 0:
        raise UserError(f"--subset-seed must be a whole number >= 0, got {o.subset_seed}")
    if o.batch_size is not None and o.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {o.batch_size}")
    return Selection(rules, tuple(labels), precision, tie_rule, filters, tuple(benchmarks), configs)
