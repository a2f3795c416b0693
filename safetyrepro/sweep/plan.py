"""What a sweep will run: the validated cells (model × configuration) and the sweep's identity."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import AXES, Config, Rules

PACKAGES = ("lm-eval", "inspect")


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

    def identity(self) -> dict:
        d = asdict(self)
        d["models"] = list(self.models)
        d["benchmarks"] = list(self.benchmarks)
        return d


@dataclass(frozen=True)
class Cell:
    model: str
    config: Config
    seeds: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.model}|{self.config.config_id}"

    @property
    def file_stem(self) -> str:
        return self.config.config_id.replace("/", "__")


def select_configs(rules: Rules, benchmarks: list[str], tier: str, precision: str,
                   filters: dict[str, list] | None = None) -> list[Config]:
    """The configurations of the chosen tier, narrowed by axis filters; a filter that asks for a
    combination the rules forbid for some benchmark is an error, not a silent empty set."""
    filters = {k: v for k, v in (filters or {}).items() if v}
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
        cfgs = [c for c in rules.configs(b, tier, precision)
                if all(c.axis(a) in vals for a, vals in filters.items())]
        if not cfgs:
            asked = ", ".join(f"{a}={'/'.join(map(str, v))}" for a, v in filters.items())
            raise UserError(f"the rules admit no {tier} configuration of {b} with {asked}")
        out += cfgs
    return out


def plan_cells(models: list[str], configs: list[Config], rules: Rules) -> list[Cell]:
    return [Cell(m, c, rules.seeds(c.decoding)) for m in models for c in configs]


AXIS_FILTERS = AXES
