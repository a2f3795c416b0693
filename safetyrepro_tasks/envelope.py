"""The configuration envelope: the rules file, its hash, and the configurations it admits."""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from safetyrepro.errors import UserError, one_of
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark

RULES_PATH = Path(__file__).with_name("envelope.yaml")
AXES = ("template", "decoding", "shots", "scoring")


DEFAULT_MAX_NEW = 96  # new tokens of a free-form reply when the rules file names none for a template


@dataclass(frozen=True, order=True)
class Config:
    """One harness configuration. `config_id` leaves precision out: the grid keys on it."""

    benchmark: str
    template: str
    decoding: str
    shots: int
    scoring: str
    precision: str = "bf16"

    @property
    def config_id(self) -> str:
        return f"{self.benchmark}/{self.template}/{self.decoding}/{self.shots}shot/{self.scoring}"

    def axis(self, name: str) -> Any:
        return getattr(self, name)

    @classmethod
    def from_id(cls, config_id: str, precision: str = "bf16") -> Config:
        try:
            benchmark, template, decoding, shots, scoring = config_id.split("/")
            return cls(benchmark, template, decoding, int(shots.removesuffix("shot")), scoring, precision)
        except ValueError:
            raise UserError(
                f"bad config id {config_id!r}; expected benchmark/template/decoding/<k>shot/scoring"
            ) from None


@dataclass(frozen=True)
class Decoding:
    name: str
    temperature: float
    top_p: float
    do_sample: bool
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Constraint:
    name: str
    when: dict[str, tuple]
    require: dict[str, tuple]

    def admits(self, values: dict[str, Any]) -> bool:
        if all(values[k] in v for k, v in self.when.items()):
            return all(values[k] in v for k, v in self.require.items())
        return True


@dataclass(frozen=True)
class Rules:
    """The parsed, validated rules file."""

    sha256: str
    path: str
    benchmarks: tuple[str, ...]
    axes: dict[str, tuple]
    decodings: dict[str, Decoding]
    stress: dict[str, tuple]
    constraints: tuple[Constraint, ...]
    subsets: dict[str, dict[str, tuple]]
    item_seed: int
    item_target: int
    max_new_tokens: dict[str, int] = field(default_factory=dict)

    def max_new(self, template: str) -> int:
        """The free-form reply budget of a template (the rules' `max_new_tokens`, else DEFAULT_MAX_NEW)."""
        return self.max_new_tokens.get(template, DEFAULT_MAX_NEW)

    # -- enumeration -------------------------------------------------------------------------
    def admits(self, benchmark: str, template: str, decoding: str, shots: int, scoring: str) -> bool:
        values = dict(benchmark=benchmark, template=template, decoding=decoding, shots=shots, scoring=scoring)
        return all(c.admits(values) for c in self.constraints)

    def violated(self, cfg: Config) -> list[str]:
        values = {a: cfg.axis(a) for a in ("benchmark", *AXES)}
        return [c.name for c in self.constraints if not c.admits(values)]

    def configs(self, benchmark: str | None = None, subset: str = "full", precision: str = "bf16") -> list[Config]:
        """All admissible configurations, in a stable order (benchmark, template, decoding, shots, scoring)."""
        if subset not in self.subsets:
            raise one_of("tier", subset, self.subsets)
        keep = self.subsets[subset]
        benches = self.benchmarks if benchmark is None else (self.check_benchmark(benchmark),)
        out = []
        for b in benches:
            for t, d, k, s in itertools.product(*(self.axes[a] for a in AXES)):
                values = dict(template=t, decoding=d, shots=k, scoring=s)
                if not all(values[a] in allowed for a, allowed in keep.items()):
                    continue
                if self.admits(b, t, d, k, s):
                    out.append(Config(b, t, d, k, s, precision))
        return out

    def tier(self, cfg: Config) -> str:
        return "stress" if any(cfg.axis(a) in v for a, v in self.stress.items()) else "core"

    def in_subset(self, cfg: Config, subset: str) -> bool:
        if subset not in self.subsets:
            raise one_of("slice", subset, self.subsets)
        return all(cfg.axis(a) in allowed for a, allowed in self.subsets[subset].items())

    def seeds(self, decoding: str) -> tuple[int, ...]:
        return self.decodings[decoding].seeds

    # -- validation of user input -------------------------------------------------------------
    def check_benchmark(self, name: str) -> str:
        if name not in self.benchmarks:
            raise one_of("benchmark", name, self.benchmarks)
        return name

    def check(self, cfg: Config) -> Config:
        """Raise a UserError naming the bad value or the broken constraint."""
        self.check_benchmark(cfg.benchmark)
        for a in AXES:
            if cfg.axis(a) not in self.axes[a]:
                raise one_of(a, cfg.axis(a), self.axes[a])
        broken = self.violated(cfg)
        if broken:
            raise UserError(f"configuration {cfg.config_id} is outside the envelope: {'; '.join(broken)}")
        return cfg


def benchmark_of(config_id: str) -> str:
    """The benchmark a configuration id names (its first field, as `Config.config_id` writes it)."""
    return config_id.split("/", 1)[0]


def benchmarks_of(config_ids) -> list[str]:
    """The benchmarks that configuration ids name, in first-seen order."""
    return list(dict.fromkeys(benchmark_of(i) for i in config_ids))


def _tuple(v) -> tuple:
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def parse_rules(text: bytes, path: str = "<rules>") -> Rules:
    """Parse and validate a rules file; every error names the offending key and value."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"rules file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise UserError(f"rules file {path} must be a mapping")
    for key in ("axes", "decoding", "constraints", "subsets", "items", "sampling_seeds"):
        if key not in raw:
            raise UserError(f"rules file {path} lacks the key {key!r}")
    axes = {a: _tuple(raw["axes"].get(a, ())) for a in AXES}
    unknown_axes = set(raw["axes"]) - set(AXES)
    if unknown_axes:
        raise UserError(f"rules file {path}: unknown axis {sorted(unknown_axes)[0]!r}; allowed: {', '.join(AXES)}")
    for a in AXES:
        if not axes[a]:
            raise UserError(f"rules file {path}: axis {a!r} has no values")
    # Every registered benchmark, unless the rules file narrows them with `benchmarks: [...]`.
    benchmarks = _tuple(raw["benchmarks"]) if raw.get("benchmarks") is not None else BENCHMARKS
    unknown = [b for b in benchmarks if b not in BENCHMARKS]
    if unknown:
        raise UserError(f"rules file {path}: unknown benchmark {unknown[0]!r}; registered: {', '.join(BENCHMARKS)}")
    # Benchmarks that exist only as imported results (`safetyrepro import` writes them): the analysis
    # can read their grids, while anything that needs the benchmark's definition still refuses them.
    external = tuple(str(b) for b in _tuple(raw.get("external_benchmarks") or ()))
    for b in external:
        if b in BENCHMARKS:
            raise UserError(
                f"rules file {path}: external benchmark {b!r} is a registered benchmark; list it under "
                "`benchmarks` instead"
            )
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", b):
            raise UserError(
                f"rules file {path}: external benchmark {b!r} is not a plain name (letters, digits, '_', '.', '-')"
            )
    benchmarks = (*benchmarks, *dict.fromkeys(external))
    known = {"benchmark": (*BENCHMARKS, *external), **axes}  # a constraint may name a benchmark the list leaves out

    def check_values(where: str, mapping: dict) -> dict[str, tuple]:
        out = {}
        for k, vals in (mapping or {}).items():
            if k not in known:
                raise UserError(f"rules file {path}: {where} names unknown axis {k!r}; allowed: {', '.join(known)}")
            for v in _tuple(vals):
                if v not in known[k]:
                    raise UserError(
                        f"rules file {path}: {where} has unknown {k} value {v!r}; allowed: "
                        f"{', '.join(map(str, known[k]))}"
                    )
            out[k] = _tuple(vals)
        return out

    seeds = tuple(int(s) for s in raw["sampling_seeds"])
    decodings = {}
    for name in axes["decoding"]:
        spec = raw["decoding"].get(name)
        if spec is None:
            raise UserError(f"rules file {path}: decoding value {name!r} has no settings under 'decoding'")
        sample = bool(spec.get("do_sample", float(spec.get("temperature", 0)) > 0))
        decodings[name] = Decoding(
            name, float(spec["temperature"]), float(spec.get("top_p", 1.0)), sample, seeds if sample else (0,)
        )
    constraints = []
    for i, c in enumerate(raw["constraints"] or []):
        name = c.get("name", f"constraint {i + 1}")
        if "when" not in c or "require" not in c:
            raise UserError(f"rules file {path}: constraint {name!r} needs both 'when' and 'require'")
        constraints.append(
            Constraint(
                name,
                check_values(f"constraint {name!r}", c["when"]),
                check_values(f"constraint {name!r}", c["require"]),
            )
        )
    constraints += _definition_constraints(benchmarks, axes)
    subsets = {n: check_values(f"subset {n!r}", s) for n, s in raw["subsets"].items()}
    subsets.setdefault("full", {})
    stress = check_values("stress", raw.get("stress", {}))
    mnt = {str(k): int(v) for k, v in (raw.get("max_new_tokens") or {}).items()}
    rules = Rules(
        sha256=hashlib.sha256(text).hexdigest(),
        path=path,
        benchmarks=benchmarks,
        axes=axes,
        decodings=decodings,
        stress=stress,
        constraints=tuple(constraints),
        subsets=subsets,
        item_seed=int(raw["items"]["seed"]),
        item_target=int(raw["items"]["target"]),
        max_new_tokens=mnt,
    )
    for b in benchmarks:
        if not rules.configs(b):
            raise UserError(f"rules file {path}: the constraints leave no configuration for benchmark {b!r}")
    return rules


def load_rules(path: str | Path | None = None) -> Rules:
    p = Path(path) if path else RULES_PATH
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read rules file {p}: {e.strerror}") from None
    return _cached(data, str(p))


@lru_cache(maxsize=8)
def _cached(data: bytes, path: str) -> Rules:
    return parse_rules(data, path)


def default_rules() -> Rules:
    return load_rules()


def _definition_constraints(benchmarks, axes: dict[str, tuple]) -> list[Constraint]:
    """What a benchmark's own definition restricts (its `scorings`), as constraints: a new benchmark
    folder that scores one way only needs no line in the rules file (a rules file may still say it)."""
    out = []
    for b in benchmarks:
        if b not in BENCHMARKS:
            continue  # an external benchmark (imported results) has no definition here
        allowed = tuple(s for s in axes.get("scoring", ()) if s in get_benchmark(b).scorings)
        if allowed and len(allowed) < len(axes.get("scoring", ())):
            out.append(
                Constraint(
                    f"{b} scores {', '.join(allowed)} only (its definition)", {"benchmark": (b,)}, {"scoring": allowed}
                )
            )
    return out
