"""Variance attribution on the free-form slice (paper §4, §5.2): a Type-II ANOVA with main effects
model, template, decoding, shots and the model x axis interactions; raw eta^2 shares; and
rho = implementation share / model share, with a configuration-bootstrap range.

The paper's robustness checks sit beside it (App. F-H, D): the same model under Type-III sums of
squares with sum-to-zero contrasts, omega^2 per term (eta^2 corrected for the degrees of freedom
a term spends, so it does not reward noise), and the whole ANOVA rerun on the parse-clean
free-form configurations (every model parses at least 95 % of items).

The point estimates come from statsmodels. The bootstrap refits the same linear model a thousand
times per benchmark, so it uses a small numpy Type-II routine (tested equal to statsmodels) that
reuses one design matrix instead of re-parsing a formula per resample; it is run for the headline
(Type-II, free-form) only.

Both grow with the model factor: the design has M x (1 + sum of (levels - 1)) columns, and
statsmodels plus a thousand lstsq refits per benchmark took over half an hour at 10 models. Above
REFERENCE_MAX_PARAMS parameters the same sums of squares come from the configuration-level
reduction instead (`config_level_terms`, `config_level_bootstrap`): every model has every
configuration, and a configuration resample gives all models' cells the same weight (its number
of draws), so the weighted design is a product of "which model" and "which configuration". Write
y[m, c] = ybar[c] + d[m, c] with ybar the mean over models. The span of a hierarchical set of
terms splits into two orthogonal parts, 1 (x) W (ybar's regression on the axis main effects in the
set) and 1-perp (x) U (each model's deviation on the axes it interacts with, plus a constant when
`model` is in), so every residual sum of squares is a weighted regression over the C
configurations (p <= 1 + sum of (levels - 1) columns), never over the M x C rows:

    SS(model)      = sum_m (sum_c w_c d[m, c])^2 / sum_c w_c                 (Type II)
    SS(axis a)     = M (RSS_w(ybar; W without a) - RSS_w(ybar; W))           (Type II and III)
    SS(model:a)    = sum_m RSS_w(d_m; U without a) - sum_m RSS_w(d_m; U)     (Type II and III)
    SS(model) III  = sum_m RSS_w(d_m; sum-coded axes, no constant) - sum_m RSS_w(d_m; U)
    residual       = M RSS_w(ybar; W) + sum_m RSS_w(d_m; U)

These are the same sums of squares (tested against statsmodels and the lstsq routine to 1e-9
relative), computed in another order, so they agree to rounding, not to the last bit; below the
threshold (the study's three models) the reference routines run unchanged, so published tables
stay byte for byte.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.bootstrap import draw_weights
from safetyrepro.analysis.metrics.slices import PARSE_CLEAN, slice_config_ids
from safetyrepro.grid.grid_io import Grid
from safetyrepro.tasks.envelope import Rules

FREE_FORM = "free_form"
RHO_MODEL_SHARE_MIN = 0.02  # rho is given only when the model explains at least 2 % of the variance
FREE_FORM_PARSE_CLEAN = "free_form & parse_clean"  # the rerun on parse-clean configurations
ANOVA_SLICES = (FREE_FORM, FREE_FORM_PARSE_CLEAN)
ANOVA_TYPES = ("II", "III")
AXES_IN_ANOVA = ("template", "decoding", "shots")  # scoring is constant on the free-form slice


@dataclass(frozen=True)
class Term:
    name: str  # "model", "template", "model:template", ..., "residual"
    group: str  # model | implementation | interaction | residual
    df: float
    sum_sq: float
    eta_sq: float  # sum_sq / total sum of squares of the scores
    omega_sq: float = float("nan")  # (SS - df MS_residual) / (SS_total + MS_residual); NaN with no residual df


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
    slice: str = FREE_FORM
    anova_type: str = "II"

    def share(self, group: str) -> float:
        return sum(t.eta_sq for t in self.terms if t.group == group)

    def omega_share(self, group: str) -> float:
        return sum(t.omega_sq for t in self.terms if t.group == group)

    @property
    def rho(self) -> float:
        model = self.share("model")
        return self.share("implementation") / model if model > 0 else float("inf")

    @property
    def rho_defined(self) -> bool:
        """Whether the ratio says something: the model's share (its denominator) is at least
        RHO_MODEL_SHARE_MIN. Below it the models hardly differ, and the ratio of two near-zero shares
        swings over orders of magnitude between resamples (5.05, range 0.009-88.7 on one such grid)."""
        return self.share("model") >= RHO_MODEL_SHARE_MIN

    @property
    def rho_omega_sq(self) -> float:
        """rho on omega^2 (implementation over model); NaN when the model's omega^2 is not positive."""
        model = self.omega_share("model")
        return self.omega_share("implementation") / model if model > 0 else float("nan")


def _group(term: str) -> str:
    if term == "residual":
        return "residual"
    if ":" in term:
        return "interaction"
    return "model" if term == "model" else "implementation"


def anova_terms(frame: pd.DataFrame, axes: tuple[str, ...], anova_type: str = "II") -> list[tuple[str, float, float]]:
    """statsmodels ANOVA: (term, df, sum_sq) for each main effect, each model x axis, residual.
    Type II uses treatment coding (its sums of squares do not depend on the coding); Type III uses
    sum-to-zero contrasts, without which its main-effect tests are not meaningful."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    coding = ", Sum" if anova_type == "III" else ""
    mains = [f"C(model{coding})", *(f"C({a}{coding})" for a in axes)]
    formula = "score ~ " + " + ".join(mains + [f"C(model{coding}):C({a}{coding})" for a in axes])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exact fits make F undefined; the sums of squares are what we read
        table = anova_lm(smf.ols(formula, data=frame).fit(), typ=2 if anova_type == "II" else 3)
    out = []
    for label, row in table.iterrows():
        if label == "Intercept":
            continue
        name = "residual" if label == "Residual" else label.replace(", Sum", "").replace("C(", "").replace(")", "")
        out.append((name, float(row["df"]), max(float(row["sum_sq"]), 0.0)))
    return out


def omega_squared(terms: list[tuple[str, float, float]], total_sum_sq: float) -> dict[str, float]:
    """omega^2 = (SS_term - df_term * MS_residual) / (SS_total + MS_residual) for every term but the
    residual; NaN when the fit leaves no residual degrees of freedom."""
    residual = {name: (df, ss) for name, df, ss in terms}["residual"]
    ms_residual = residual[1] / residual[0] if residual[0] > 0 else float("nan")
    return {
        name: (ss - df * ms_residual) / (total_sum_sq + ms_residual) for name, df, ss in terms if name != "residual"
    }


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


def bootstrap_rho(frame: pd.DataFrame, axes: tuple[str, ...], n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """rho on resamples of the configurations (all models' cells of a drawn config come together)."""
    frame = frame.sort_values(["config_id", "model"]).reset_index(drop=True)
    configs = frame["config_id"].unique()
    draws = np.array([rng.integers(0, len(configs), size=len(configs)) for _ in range(n_resamples)], dtype=int)
    table = ConfigTable.of(frame, axes) if n_parameters(frame, axes) > REFERENCE_MAX_PARAMS else None
    if table is not None:
        return config_level_bootstrap(table, axes, draws.reshape(n_resamples, len(configs)))
    blocks = design_blocks(frame, axes)
    y = frame["score"].to_numpy(dtype=float)
    rows_of = [np.flatnonzero(frame["config_id"].to_numpy() == c) for c in configs]
    out = np.empty(n_resamples)
    for k, draw in enumerate(draws):
        idx = np.concatenate([rows_of[j] for j in draw])
        ss = type2_sums_of_squares({t: b[idx] for t, b in blocks.items()}, y[idx])
        out[k] = _rho_from_sums(ss, axes)
    return out


# -- the configuration-level reduction (module docstring) for designs above REFERENCE_MAX_PARAMS --------
REFERENCE_MAX_PARAMS = 32  # up to this many parameters statsmodels and the lstsq bootstrap run as they are


def n_parameters(frame: pd.DataFrame, axes: tuple[str, ...]) -> int:
    """Columns of the treatment-coded design: intercept, main effects, model x axis interactions."""
    n_models = frame["model"].nunique()
    levels = [frame[a].nunique() - 1 for a in axes]
    return 1 + (n_models - 1) + sum(levels) + (n_models - 1) * sum(levels)


@dataclass(frozen=True)
class ConfigTable:
    """One slice as a complete configs x models score table (configs sorted as the bootstrap draws
    them) with each configuration's axis level codes."""

    scores: np.ndarray  # C x M
    codes: dict[str, np.ndarray]  # axis -> C level codes 0..L-1 (levels sorted)
    n_levels: dict[str, int]

    @classmethod
    def of(cls, frame: pd.DataFrame, axes: tuple[str, ...]) -> ConfigTable | None:
        """None unless every model has every configuration exactly once."""
        frame = frame.sort_values(["config_id", "model"])
        configs = frame["config_id"].unique()
        models = np.sort(frame["model"].unique())
        if len(frame) != len(configs) * len(models) or frame.duplicated(["config_id", "model"]).any():
            return None
        wide = frame.pivot(index="config_id", columns="model", values="score").loc[configs, models]
        first = frame.drop_duplicates("config_id").set_index("config_id").loc[configs]
        codes, n_levels = {}, {}
        for a in axes:
            levels = sorted(first[a].unique())
            codes[a] = first[a].map({v: i for i, v in enumerate(levels)}).to_numpy(dtype=int)
            n_levels[a] = len(levels)
        return cls(wide.to_numpy(dtype=float), codes, n_levels)

    def treatment(self, axes: tuple[str, ...]) -> np.ndarray:
        """Intercept and treatment dummies (first level left out) of `axes`: C x p."""
        cols = [np.ones(len(self.scores))]
        for a in axes:
            cols.extend((self.codes[a] == level).astype(float) for level in range(1, self.n_levels[a]))
        return np.column_stack(cols)

    def sum_coded(self, axes: tuple[str, ...]) -> np.ndarray:
        """Sum-to-zero columns (each level but the last, minus the last) of `axes`, no intercept."""
        cols: list[np.ndarray] = []
        for a in axes:
            last = (self.codes[a] == self.n_levels[a] - 1).astype(float)
            cols.extend((self.codes[a] == level) - last for level in range(self.n_levels[a] - 1))
        return np.column_stack(cols) if cols else np.zeros((len(self.scores), 0))


def _rss(x: np.ndarray, y: np.ndarray) -> float:
    """Residual sum of squares of every column of y (C or C x k) on the columns of x (C x p)."""
    if x.shape[1] == 0:
        return float(np.sum(y * y))
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    r = y - x @ beta
    return float(np.sum(r * r))


def config_level_terms(
    table: ConfigTable, axes: tuple[str, ...], anova_type: str = "II"
) -> list[tuple[str, float, float]] | None:
    """(term, df, sum_sq) as `anova_terms` gives them, from the configuration-level reduction; None when
    the axes' main-effect design over the configurations is rank-deficient (statsmodels then decides
    the degrees of freedom)."""
    y = table.scores
    n_cfg, n_models = y.shape
    ybar = y.mean(axis=1)
    d = y - ybar[:, None]
    w_full = table.treatment(axes)
    if np.linalg.matrix_rank(w_full) < w_full.shape[1]:
        return None
    rss_w = _rss(w_full, ybar)
    rss_u = _rss(w_full, d)
    out = []
    if anova_type == "III":
        model_ss = _rss(table.sum_coded(axes), d) - rss_u
    else:
        model_ss = float(np.sum(d.sum(axis=0) ** 2) / n_cfg)
    out.append(("model", float(n_models - 1), max(model_ss, 0.0)))
    for a in axes:
        others = tuple(b for b in axes if b != a)
        out.append(
            (a, float(table.n_levels[a] - 1), max(n_models * (_rss(table.treatment(others), ybar) - rss_w), 0.0))
        )
    for a in axes:
        others = tuple(b for b in axes if b != a)
        out.append(
            (
                f"model:{a}",
                float((n_models - 1) * (table.n_levels[a] - 1)),
                max(_rss(table.treatment(others), d) - rss_u, 0.0),
            )
        )
    out.append(("residual", float(n_cfg * n_models - n_models * w_full.shape[1]), max(n_models * rss_w + rss_u, 0.0)))
    return out


def _weighted_rss(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per resample r: min over beta of sum_c weights[r, c] (y_c - x_c beta)^2, by SVD of the
    row-scaled design (a level no draw reached leaves a zero singular value, dropped as lstsq does)."""
    root = np.sqrt(weights)
    xs = root[:, :, None] * x[None]
    ys = root * y[None]
    u, s, _ = np.linalg.svd(xs, full_matrices=False)
    keep = s > s[:, :1] * max(x.shape) * np.finfo(float).eps
    coef = np.einsum("rcp,rc->rp", u, ys) * keep
    r = ys - np.einsum("rcp,rp->rc", u, coef)
    return np.sum(r * r, axis=1)


def config_level_bootstrap(table: ConfigTable, axes: tuple[str, ...], draws: np.ndarray) -> np.ndarray:
    """rho (Type II) on each resample of configurations: `draws` is resamples x C configuration
    indices; a configuration drawn k times weighs k."""
    n_cfg, n_models = table.scores.shape
    weights = draw_weights(draws, n_cfg)
    ybar = table.scores.mean(axis=1)
    d = table.scores - ybar[:, None]
    model = np.maximum(np.sum((weights @ d) ** 2, axis=1) / weights.sum(axis=1), 0.0)
    rss_w = _weighted_rss(table.treatment(axes), ybar, weights)
    impl = np.zeros(len(draws))
    for a in axes:
        without = _weighted_rss(table.treatment(tuple(b for b in axes if b != a)), ybar, weights)
        impl += np.maximum(n_models * (without - rss_w), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(model > 0, impl / np.where(model > 0, model, 1.0), np.inf)


def anova_config_ids(grid: Grid, rules: Rules, benchmark: str, slice_name: str) -> tuple[str, ...]:
    ids = slice_config_ids(grid, rules, benchmark, FREE_FORM)
    if slice_name == FREE_FORM_PARSE_CLEAN:
        clean = set(slice_config_ids(grid, rules, benchmark, PARSE_CLEAN))
        ids = tuple(c for c in ids if c in clean)
    return ids


def variance_attribution(
    grid: Grid,
    rules: Rules,
    benchmark: str,
    n_resamples: int,
    seed: int,
    slice_name: str = FREE_FORM,
    anova_type: str = "II",
) -> VarianceAttribution | str:
    """The ANOVA for one benchmark, or a one-line reason why it cannot be fitted."""
    if FREE_FORM not in rules.subsets:
        return f"{benchmark}: the rules file defines no free_form slice"
    ids = anova_config_ids(grid, rules, benchmark, slice_name)
    what = "free-form slice" if slice_name == FREE_FORM else f"{slice_name} slice"
    if len(ids) < 2:
        return f"{benchmark}: the {what} has {len(ids)} configuration(s); an ANOVA needs several"
    frame = grid.cells[grid.cells["config_id"].isin(ids)].copy()
    axes = tuple(a for a in AXES_IN_ANOVA if frame[a].nunique() > 1)
    dropped = tuple(a for a in AXES_IN_ANOVA if a not in axes)
    if not axes:
        return f"{benchmark}: no implementation axis varies on the {what}"
    n_params = (
        1
        + sum(frame[f].nunique() - 1 for f in ("model", *axes))
        + sum((frame["model"].nunique() - 1) * (frame[a].nunique() - 1) for a in axes)
    )
    if len(frame) <= n_params:
        cells = "free-form cells" if slice_name == FREE_FORM else f"cells on the {what}"
        return (
            f"{benchmark}: {len(frame)} {cells} cannot fit {n_params} parameters with any residual degrees of freedom"
        )
    total = float(((frame["score"] - frame["score"].mean()) ** 2).sum())
    raw = None
    if n_params > REFERENCE_MAX_PARAMS:
        table = ConfigTable.of(frame, axes)
        raw = config_level_terms(table, axes, anova_type) if table is not None else None
    if raw is None:
        raw = anova_terms(frame, axes, anova_type)
    omega = omega_squared(raw, total) if total > 0 else {}
    terms = tuple(
        Term(name, _group(name), df, ss, ss / total if total > 0 else float("nan"), omega.get(name, float("nan")))
        for name, df, ss in raw
    )
    headline = slice_name == FREE_FORM and anova_type == "II"  # the bootstrap is for the headline rho only
    resamples = n_resamples if headline else 0
    rng = np.random.default_rng([seed, zlib.crc32(benchmark.encode())])  # one stream per benchmark
    boot = bootstrap_rho(frame, axes, resamples, rng) if resamples else np.array([])
    finite = boot[np.isfinite(boot)]
    lo, hi = np.percentile(finite, [2.5, 97.5]) if len(finite) else (np.nan, np.nan)
    return VarianceAttribution(
        benchmark,
        len(ids),
        len(frame),
        terms,
        total,
        float(lo),
        float(hi),
        resamples,
        len(finite),
        dropped,
        slice_name,
        anova_type,
    )


def variance_attributions(
    grid: Grid, rules: Rules, benchmark: str, n_resamples: int, seed: int
) -> tuple[list[VarianceAttribution], list[str]]:
    """Type-II and Type-III on the free-form slice and on its parse-clean part; a note for each fit
    that cannot be made (the free-form Type-II reason stands for the Type-III one)."""
    fitted, notes = [], []
    for slice_name in ANOVA_SLICES:
        for anova_type in ANOVA_TYPES:
            result = variance_attribution(grid, rules, benchmark, n_resamples, seed, slice_name, anova_type)
            if isinstance(result, str):
                if anova_type == "II":
                    notes.append(result if slice_name == FREE_FORM else f"parse-clean rerun: {result}")
                continue
            fitted.append(result)
    return fitted, notes


def variance_tables(results: list[VarianceAttribution]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(anova: one row per benchmark x term, variance_shares: one row per benchmark)."""
    columns = ["benchmark", "slice", "anova_type", "term", "group", "df", "sum_sq", "eta_sq", "omega_sq"]
    terms = pd.DataFrame(
        [
            {
                "benchmark": r.benchmark,
                "slice": r.slice,
                "anova_type": r.anova_type,
                "term": t.name,
                "group": t.group,
                "df": t.df,
                "sum_sq": t.sum_sq,
                "eta_sq": t.eta_sq,
                "omega_sq": t.omega_sq,
            }
            for r in results
            for t in r.terms
        ],
        columns=columns,
    )
    shares = pd.DataFrame(
        [
            {
                "benchmark": r.benchmark,
                "slice": r.slice,
                "anova_type": r.anova_type,
                "n_configs": r.n_configs,
                "n_rows": r.n_rows,
                "model_share": r.share("model"),
                "implementation_share": r.share("implementation"),
                "interaction_share": r.share("interaction"),
                "residual_share": r.share("residual"),
                "sum_of_shares": sum(t.eta_sq for t in r.terms),
                "rho": r.rho if r.rho_defined else np.nan,
                "rho_lo": r.rho_lo if r.rho_defined else np.nan,
                "rho_hi": r.rho_hi if r.rho_defined else np.nan,
                "rho_defined": r.rho_defined,
                "model_omega_sq": r.omega_share("model"),
                "implementation_omega_sq": r.omega_share("implementation"),
                "interaction_omega_sq": r.omega_share("interaction"),
                "rho_omega_sq": r.rho_omega_sq,
                "n_resamples": r.n_resamples,
                "n_finite_resamples": r.n_finite,
                "axes_left_out": ",".join(r.dropped_axes),
            }
            for r in results
        ]
    )
    return terms, shares
