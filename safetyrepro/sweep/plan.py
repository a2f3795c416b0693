"""What a sweep will run: the validated cells (model × configuration) and the sweep's identity."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from safetyrepro.errors import UserError, did_you_mean, one_of
from safetyrepro.grid_schema import cell_stem
from safetyrepro.sweep.store import IDENTITY_DEFAULTS
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import AXES, Config, Rules, benchmark_of
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW


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
    tie_rule: str = DEFAULT_TIE_RULE
    model_specs: tuple[str, ...] = ()  # what each label runs (the backend's spec)
    fewshot_draw: str = DEFAULT_FEWSHOT_DRAW  # subsets.FewshotDraw

    def identity(self) -> dict:
        d = asdict(self)
        d["models"] = list(self.models)
        d["benchmarks"] = list(self.benchmarks)
        d["model_specs"] = list(self.model_specs)
        for k, default in IDENTITY_DEFAULTS.items():  # unwritten at its default: earlier runs' records match
            if d[k] == default:
                del d[k]
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
                raise one_of(axis, v, allowed)
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
                    near = did_you_mean(i, sorted(known)) if _misspelt(i, rules) else ""
                    raise UserError(
                        f"configuration {i!r} is not among the {tier} configurations of {b}"
                        + (" with the other filters" if filters else "")
                        + (near or (f" (ids read like {example!r}, as in grid.csv's config_id)" if example else ""))
                    )
            cfgs = [c for c in cfgs if c.config_id in ids]
        if not cfgs:
            asked = ", ".join(f"{a}={'/'.join(map(str, v))}" for a, v in filters.items())
            if ids:
                asked = ", ".join(filter(None, [asked, "configurations " + " ".join(ids)]))
            raise UserError(f"the rules admit no {tier} configuration of {b} with {asked}")
        out += cfgs
    return out


def _misspelt(config_id: str, rules: Rules) -> bool:
    """Whether an id holds a value no axis of the rules has (a typo, for which the nearest id is the
    help), rather than a combination the tier or the envelope leaves out (for which the id format is)."""
    try:
        cfg = Config.from_id(config_id)
    except UserError:
        return True
    return any(cfg.axis(a) not in rules.axes[a] for a in AXES)


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
