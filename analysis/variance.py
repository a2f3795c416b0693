"""Variance attribution on the free-form slice (paper §4, §5.2): a Type-II ANOVA with main effects
model, template, decoding, shots and the model x axis interactions; raw eta^2 shares; and
rho = implementation share / model share, with a configuration-bootstrap range.

The point estimate comes from statsmodels. The bootstrap refits the same linear model a thousand
times per benchmark, so it uses a small numpy Type-II routine (tested equal to statsmodels) that
reuses one design matrix instead of re-parsing a formula per resample.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import Rules

from .grid_io import Grid
from .slices import slice_config_ids

FREE_FORM = "free_form"
AXES_IN_ANOVA = ("template", "decoding", "shots")  # scoring is constant on the free-form slice


@dataclass(frozen=True)
class Term:
    name: str      # "model", "template", "model:template", ..., "residual"
    group: str     # model | implementation | interaction | residual
    df: float
    sum_sq: float
    eta_sq: float  # sum_sq / total sum of squares of the scores


@dataclass(frozen=True)
class VarianceAttribution:
    benchmark: str
    n_configs: int
    n_rows: int
    terms: tuple[Term, ...]
    total_sum_sq: float
    rho_lo: float
    rho_hi: float
    n_resamples: int
    n_finite: int
    dropped_axes: tuple[str, ...]

    def share(self, group: str) -> float:
        return sum(t.eta_sq for t in self.terms if t.group == group)

    @property
    def rho(self) -> float:
        model = self.share("model")
        return self.share("implementation") / model if model > 0 else float("inf")


def _group(term: str) -> str:
    if term == "residual":
        return "residual"
    if ":" in term:
        return "interaction"
    return "model" if term == "model" else "implementation"


def anova_terms(frame: pd.DataFrame, axes: tuple[str, ...]) -> list[tuple[str, float, float]]:
    """statsmodels Type-II ANOVA: (term, df, sum_sq) for each main effect, each model x axis, residual."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    mains = ["C(model)", *(f"C({a})" for a in axes)]
    formula = "score ~ " + " + ".join(mains + [f"C(model):C({a})" for a in axes])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exact fits make F undefined; the sums of squares are what we read
        table = anova_lm(smf.ols(formula, data=frame).fit(), typ=2)
    out = []
    for label, row in table.iterrows():
        name = "residual" if label == "Residual" else label.replace("C(", "").replace(")", "")
        out.append((name, float(row["df"]), max(float(row["sum_sq"]), 0.0)))
    return out


# -- the numpy path used by the bootstrap ------------------------------------------------------------
def _dummies(values: pd.Series) -> np.ndarray:
    levels = sorted(values.unique())
    return (values.to_numpy()[:, None] == np.array(levels[1:], dtype=object)[None, :]).astype(float)


def design_blocks(frame: pd.DataFrame, axes: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Treatment-coded column blocks per term; products of dummies span each interaction."""
    d = {f: _dummies(frame[f]) for f in ("model", *axes)}
    blocks = dict(d)
    n = len(frame)
    for a in axes:
        blocks[f"model:{a}"] = (d["model"][:, :, None] * d[a][:, None, :]).reshape(n, -1)
    return blocks


def type2_sums_of_squares(blocks: dict[str, np.ndarray], y: np.ndarray) -> dict[str, float]:
    """SS(term) = RSS(without the term and anything containing it) - RSS(same, with the term)."""
    terms = list(blocks)
    cache: dict[frozenset, float] = {}

    def rss(chosen: frozenset) -> float:
        if chosen not in cache:
            x = np.column_stack([np.ones(len(y)), *(blocks[t] for t in terms if t in chosen)])
            beta = np.linalg.lstsq(x, y, rcond=None)[0]
            r = y - x @ beta
            cache[chosen] = float(r @ r)
        return cache[chosen]

    def contains(small: str, big: str) -> bool:
        return set(small.split(":")) < set(big.split(":"))

    out = {}
    for t in terms:
        base = frozenset(o for o in terms if o != t and not contains(t, o))
        out[t] = max(rss(base) - rss(base | {t}), 0.0)
    out["residual"] = rss(frozenset(terms))
    return out


def _rho_from_sums(ss: dict[str, float], axes: tuple[str, ...]) -> float:
    model = ss["model"]
    impl = sum(ss[a] for a in axes)
    return impl / model if model > 0 else float("inf")


def bootstrap_rho(frame: pd.DataFrame, axes: tuple[str, ...], n_resamples: int,
                  rng: np.random.Generator) -> np.ndarray:
    """rho on resamples of the configurations (all models' cells of a drawn config come together)."""
    frame = frame.sort_values(["config_id", "model"]).reset_index(drop=True)
    blocks = design_blocks(frame, axes)
    y = frame["score"].to_numpy(dtype=float)
    configs = frame["config_id"].unique()
    rows_of = [np.flatnonzero(frame["config_id"].to_numpy() == c) for c in configs]
    out = np.empty(n_resamples)
    for k in range(n_resamples):
        draw = rng.integers(0, len(configs), size=len(configs))
        idx = np.concatenate([rows_of[j] for j in draw])
        ss = type2_sums_of_squares({t: b[idx] for t, b in blocks.items()}, y[idx])
        out[k] = _rho_from_sums(ss, axes)
    return out


def variance_attribution(grid: Grid, rules: Rules, benchmark: str, n_resamples: int,
                         seed: int) -> VarianceAttribution | str:
    """The ANOVA for one benchmark, or a one-line reason why it cannot be fitted."""
    if FREE_FORM not in rules.subsets:
        return f"{benchmark}: the rules file defines no free_form slice"
    ids = slice_config_ids(grid, rules, benchmark, FREE_FORM)
    if len(ids) < 2:
        return f"{benchmark}: the free-form slice has {len(ids)} configuration(s); an ANOVA needs several"
    frame = grid.cells[grid.cells["config_id"].isin(ids)].copy()
    axes = tuple(a for a in AXES_IN_ANOVA if frame[a].nunique() > 1)
    dropped = tuple(a for a in AXES_IN_ANOVA if a not in axes)
    if not axes:
        return f"{benchmark}: no implementation axis varies on the free-form slice"
    n_params = 1 + sum(frame[f].nunique() - 1 for f in ("model", *axes)) + \
        sum((frame["model"].nunique() - 1) * (frame[a].nunique() - 1) for a in axes)
    if len(frame) <= n_params:
        return (f"{benchmark}: {len(frame)} free-form cells cannot fit {n_params} parameters with any residual "
                "degrees of freedom")
    total = float(((frame["score"] - frame["score"].mean()) ** 2).sum())
    terms = tuple(Term(name, _group(name), df, ss, ss / total if total > 0 else float("nan"))
                  for name, df, ss in anova_terms(frame, axes))
    rng = np.random.default_rng([seed, zlib.crc32(benchmark.encode())])  # one stream per benchmark
    boot = bootstrap_rho(frame, axes, n_resamples, rng) if n_resamples else np.array([])
    finite = boot[np.isfinite(boot)]
    lo, hi = (np.percentile(finite, [2.5, 97.5]) if len(finite) else (np.nan, np.nan))
    return VarianceAttribution(benchmark, len(ids), len(frame), terms, total, float(lo), float(hi),
                               n_resamples, len(finite), dropped)


def variance_tables(results: list[VarianceAttribution]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(anova: one row per benchmark x term, variance_shares: one row per benchmark)."""
    terms = pd.DataFrame([{"benchmark": r.benchmark, "term": t.name, "group": t.group, "df": t.df,
                           "sum_sq": t.sum_sq, "eta_sq": t.eta_sq} for r in results for t in r.terms],
                         columns=["benchmark", "term", "group", "df", "sum_sq", "eta_sq"])
    shares = pd.DataFrame([{
        "benchmark": r.benchmark, "n_configs": r.n_configs, "n_rows": r.n_rows,
        "model_share": r.share("model"), "implementation_share": r.share("implementation"),
        "interaction_share": r.share("interaction"), "residual_share": r.share("residual"),
        "sum_of_shares": sum(t.eta_sq for t in r.terms), "rho": r.rho,
        "rho_lo": r.rho_lo, "rho_hi": r.rho_hi, "n_resamples": r.n_resamples,
        "n_finite_resamples": r.n_finite, "axes_left_out": ",".join(r.dropped_axes),
    } for r in results])
    return terms, shares
