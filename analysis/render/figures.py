"""PNG figures drawn from the analysis tables (never from the raw grid again, so a figure cannot
disagree with its CSV). matplotlib runs headless (Agg). Every figure is saved with a tight bounding
box, so no title or colour-bar label is cut off; a figure whose data hold one value everywhere
carries no information and is not drawn (`constant_reason` says so in a sentence instead)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.chance import chance_rho_flip
from safetyrepro.atomic import atomic_write
from safetyrepro.grid.direction import direction


@dataclass(frozen=True)
class FigureSet:
    paths: dict[str, str] = field(default_factory=dict)  # figure key -> path relative to the output folder
    skipped: dict[str, str] = field(default_factory=dict)  # figure key -> why it was not drawn, in a sentence


def constant_reason(values, what: str) -> str | None:
    """A sentence when every finite value is the same (or there is none), else None."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return f"{what}: nothing to draw."
    if np.all(v == v[0]):
        value = f"{int(v[0])}" if v[0] == int(v[0]) else f"{v[0]:.3f}"
        return f"{what} is {value} everywhere, so the figure would carry no information."
    return None


def _save(fig, path: Path, root: Path | None = None) -> Path:
    fmt = path.suffix.lstrip(".") or "png"
    return atomic_write(
        path, lambda f: fig.savefig(f, format=fmt, dpi=DPI, bbox_inches="tight", pad_inches=0.15), root=root
    )


DPI = 130
MIN_HEIGHT = 3.0  # inches; below this a one-row heatmap clips its colour-bar label
MIN_WIDTH = 5.5  # and a one-column one its title


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _heatmap(
    ax,
    values: np.ndarray,
    row_labels,
    col_labels,
    text: np.ndarray,
    vmin: float,
    vmax: float,
    cmap: str,
    light_when_high: bool = False,
):
    masked = np.ma.masked_invalid(values)
    image = ax.imshow(masked, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=30, ha="right")
    ax.set_yticks(range(len(row_labels)), row_labels)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if text[i, j]:
                high = np.isfinite(values[i, j]) and (values[i, j] - vmin) / (vmax - vmin or 1) > 0.6
                dark_cell = high != light_when_high  # keep the label readable on either end of the colour map
                ax.text(j, i, text[i, j], ha="center", va="center", fontsize=8, color="white" if dark_cell else "black")
    return image


def rho_flip_surface(detail: pd.DataFrame, path: Path, root: Path | None = None) -> Path:
    """Per-pair rho_flip on slice `full`, one column per benchmark (by score), plus a column on the
    better reading for a benchmark whose better direction is not the score's (CrowS-Pairs)."""
    plt = _pyplot()
    full = detail[detail["slice"] == "full"].copy()
    full["pair"] = full["model_a"] + " vs " + full["model_b"]
    columns, labels = [], []
    for b, g in full.groupby("benchmark", sort=False):
        n = int(g["n_configs"].iloc[0])
        reading = "" if direction(b).monotone else "\nby score"
        columns.append(g.set_index("pair")["rho_flip"].rename(b))
        labels.append(f"{b}{reading}\n|C|={n}, chance {chance_rho_flip(n):.2f}")
        if not direction(b).monotone:
            columns.append(g.set_index("pair")["rho_flip_better"].rename(f"{b} better"))
            labels.append(f"{b}\nbetter: {direction(b).comparative}\n|C|={n}")
    wide = pd.concat(columns, axis=1)
    text = np.vectorize(lambda v: "" if np.isnan(v) else f"{v:.3f}")(wide.to_numpy(dtype=float))
    fig, ax = plt.subplots(figsize=(max(MIN_WIDTH, 1.6 + 1.5 * len(labels)), max(MIN_HEIGHT, 1.6 + 0.45 * len(wide))))
    image = _heatmap(ax, wide.to_numpy(dtype=float), list(wide.index), labels, text, 0.0, 0.5, "magma_r")
    fig.colorbar(image, ax=ax, label="rho_flip\n(ceiling floor(|C|/2)/|C|)")
    ax.set_title("rho_flip per model pair (slice full:\nevery configuration of the grid)")
    _save(fig, path, root)
    plt.close(fig)
    return path


def rho_flip_by_slice(maxima: pd.DataFrame, path: Path, root: Path | None = None) -> Path:
    """rho_flip max per benchmark and slice, with |C| in each cell (the tier ablation)."""
    plt = _pyplot()
    slices = list(maxima["slice"].drop_duplicates())
    benchmarks = list(maxima["benchmark"].drop_duplicates())
    values = maxima.pivot(index="benchmark", columns="slice", values="rho_flip_max").reindex(
        index=benchmarks, columns=slices
    )
    n = maxima.pivot(index="benchmark", columns="slice", values="n_configs").reindex(index=benchmarks, columns=slices)
    chance = maxima.pivot(index="benchmark", columns="slice", values="chance_max").reindex(
        index=benchmarks, columns=slices
    )
    text = np.empty(values.shape, dtype=object)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values.iat[i, j]
            text[i, j] = "" if pd.isna(v) else f"{v:.3f}\n|C|={int(n.iat[i, j])}\nchance {chance.iat[i, j]:.2f}"
    fig, ax = plt.subplots(
        figsize=(max(MIN_WIDTH, 1.8 + 1.15 * len(slices)), max(MIN_HEIGHT, 1.4 + 0.75 * len(benchmarks)))
    )
    image = _heatmap(ax, values.to_numpy(dtype=float), benchmarks, slices, text, 0.0, 0.5, "magma_r")
    fig.colorbar(image, ax=ax, label="rho_flip max over pairs\n(by score)")
    ax.set_title(
        "rho_flip max over pairs by slice, with |C| and the chance value of the maximum\n"
        "(blank: slice empty for that benchmark)"
    )
    _save(fig, path, root)
    plt.close(fig)
    return path


def orderings_reached(detail: pd.DataFrame, path: Path, root: Path | None = None) -> Path:
    plt = _pyplot()
    slices = list(detail["slice"].drop_duplicates())
    benchmarks = list(detail["benchmark"].drop_duplicates())
    k = detail.pivot(index="benchmark", columns="slice", values="n_orderings").reindex(index=benchmarks, columns=slices)
    # a benchmark whose better direction is not the score's (CrowS-Pairs) gets a second row in that reading
    rows = []
    for b in benchmarks:
        rows.append(k.loc[[b]].rename(index={b: f"{b} (by score)" if not direction(b).monotone else b}))
        if not direction(b).monotone and "n_orderings_better" in detail.columns:
            better = detail[detail["benchmark"] == b].set_index("slice")["n_orderings_better"].reindex(slices)
            rows.append(pd.DataFrame([better.to_numpy()], index=[f"{b} ({direction(b).comparative})"], columns=slices))
    k = pd.concat(rows)
    benchmarks = list(k.index)
    possible = int(detail["n_possible"].iloc[0])
    text = np.vectorize(lambda v: "" if np.isnan(v) else f"{int(v)}/{possible}")(k.to_numpy(dtype=float))
    fig, ax = plt.subplots(
        figsize=(max(MIN_WIDTH, 1.8 + 1.1 * len(slices)), max(MIN_HEIGHT, 1.4 + 0.5 * len(benchmarks)))
    )
    image = _heatmap(
        ax, k.to_numpy(dtype=float), benchmarks, slices, text, 1, possible, "viridis", light_when_high=True
    )
    fig.colorbar(image, ax=ax, label=f"distinct orderings\n(of {possible} possible)")
    ax.set_title(
        "Model orderings reached per benchmark and slice\n(by score, highest first, unless a row names another reading)"
    )
    _save(fig, path, root)
    plt.close(fig)
    return path


def score_ranges(
    cells: pd.DataFrame, models: tuple[str, ...], benchmarks: tuple[str, ...], path: Path, root: Path | None = None
) -> Path:
    """Every configuration's score per model (dots, by scoring path) over its min-max bar."""
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, len(benchmarks), figsize=(max(MIN_WIDTH, 2.2 + 2.3 * len(benchmarks)), 4.2), sharey=True, squeeze=False
    )
    colours = {"free_form": "tab:blue", "logprob": "tab:orange"}
    rng = np.random.default_rng(0)  # jitter only; fixed so the picture does not change between runs
    for ax, benchmark in zip(axes[0], benchmarks, strict=True):
        rows = cells[cells["benchmark"] == benchmark]
        better = direction(benchmark)
        if better.target is not None:  # the ideal score, named in the legend below the panels
            ax.axhline(better.target, color="tab:red", linestyle="--", linewidth=1, label=better.target_note)
        for i, model in enumerate(models):
            s = rows[rows["model"] == model]
            ax.vlines(i - 0.28, s["score"].min(), s["score"].max(), color="0.55", linewidth=3)
            for scoring, part in s.groupby("scoring"):
                ax.scatter(
                    i + rng.uniform(-0.15, 0.15, len(part)),
                    part["score"],
                    s=9,
                    color=colours.get(scoring, "tab:gray"),
                    label=scoring,
                    alpha=0.8,
                )
        ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
        arrow = "higher is better" if better.monotone else f"{better.comparative}\nis better"
        ax.set_title(f"{benchmark}\n({arrow})", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel("score")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    unique = dict(zip(labels, handles, strict=True))
    fig.legend(unique.values(), unique.keys(), loc="lower center", ncol=len(unique), fontsize=8, frameon=False)
    fig.suptitle("Score per configuration (grey bar: min to max)")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    _save(fig, path, root)
    plt.close(fig)
    return path


def shap_bars(regressor: pd.DataFrame, classifier: pd.DataFrame, path: Path, root: Path | None = None) -> Path | None:
    if regressor.empty and classifier.empty:
        return None
    plt = _pyplot()
    panels = int(not regressor.empty) + int(not classifier.empty)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.6), squeeze=False)
    at = 0
    if not regressor.empty:
        ax = axes[0][at]
        r = regressor.sort_values("mean_abs_shap")
        ax.barh(r["feature"], r["mean_abs_shap"], color="tab:blue")
        ax.set_xlabel("mean |SHAP| (score units)")
        ax.set_title(f"Score regressor (in-sample R² {r['r2_in_sample'].iloc[0]:.2f})")
        at += 1
    if not classifier.empty:
        ax = axes[0][at]
        mean_share = classifier.groupby(["benchmark", "axis"], sort=False)["share"].mean().unstack("axis")
        mean_share = mean_share.iloc[::-1]  # barh draws bottom-up; keep the benchmarks' order top-down
        bottom = np.zeros(len(mean_share))
        for axis in mean_share.columns:
            ax.barh(mean_share.index, mean_share[axis], left=bottom, label=axis)
            bottom += mean_share[axis].to_numpy()
        ax.set_xlabel("share of mean |SHAP|, averaged over pairs with a reversal")
        ax.set_title("Which axis moves the pairwise verdict")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, frameon=False)
    fig.tight_layout()
    _save(fig, path, root)
    plt.close(fig)
    return path


MAX_PAIRS_DRAWN = 6  # pairs per benchmark in the wins map (those that reverse most), so 100 models stay readable


def _axis_layout(config_ids, rules) -> tuple[list[str], list[tuple[str, str, int]]]:
    """Rows: templates in the rules' order; columns: (scoring, decoding, shots) in envelope order, as the
    configurations of one benchmark hold them."""
    from safetyrepro.tasks.envelope import Config

    cfgs = [Config.from_id(c) for c in config_ids]
    order = {a: {v: i for i, v in enumerate(rules.axes[a])} for a in ("template", "decoding", "shots", "scoring")}
    rows = sorted({c.template for c in cfgs}, key=lambda t: order["template"].get(t, 99))
    cols = sorted(
        {(c.scoring, c.decoding, c.shots) for c in cfgs},
        key=lambda k: (order["scoring"].get(k[0], 99), order["decoding"].get(k[1], 99), order["shots"].get(k[2], 99)),
    )
    return rows, cols


def wins_by_axes(grid, rules, detail: pd.DataFrame, path: Path, root: Path | None = None) -> Path:
    """Per benchmark (columns) and pair (rows, up to MAX_PAIRS_DRAWN that reverse most), which model is
    ahead in each configuration, laid out by the envelope's axes: template down, scoring / decoding /
    shots across; read in the benchmark's better direction (CrowS-Pairs: closer to 0.5)."""
    from matplotlib.colors import ListedColormap

    plt = _pyplot()
    full = detail[detail["slice"] == "full"]
    panels = []
    for b in grid.benchmarks:
        mine = (
            full[full["benchmark"] == b]
            .sort_values(["rho_flip_better", "model_a", "model_b"], ascending=[False, True, True])
            .head(MAX_PAIRS_DRAWN)
        )
        panels.append((b, list(zip(mine["model_a"], mine["model_b"], strict=True))))
    n_cols = max(len(p) for _, p in panels)  # benchmarks down the page, pairs across: it reads beside the text
    fig, axes = plt.subplots(
        len(panels), n_cols, figsize=(max(MIN_WIDTH, 3.0 * n_cols), 0.6 + 1.55 * len(panels)), squeeze=False
    )
    cmap = ListedColormap(["#d95f02", "#bdbdbd", "#1b9e77"])  # second model ahead, tie, first model ahead
    for i, (b, pairs) in enumerate(panels):
        m = direction(b).better_value(grid.matrix(b))
        rows, cols = _axis_layout(m.index, rules)
        for j in range(n_cols):
            ax = axes[i][j]
            if j >= len(pairs):
                ax.axis("off")
                continue
            a, c = pairs[j]
            values = np.full((len(rows), len(cols)), np.nan)
            for cid, r in m.iterrows():
                parts = cid.split("/")
                col = (parts[4], parts[2], int(parts[3].removesuffix("shot")))
                values[rows.index(parts[1]), cols.index(col)] = np.sign(r[a] - r[c])
            ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-1, vmax=1, aspect="auto")
            ax.set_yticks(range(len(rows)), rows, fontsize=7)
            ax.set_xticks(
                range(len(cols)),
                [f"{'lp' if s == 'logprob' else 'ff'} {d[:3]} {k}" for s, d, k in cols],
                rotation=90,
                fontsize=6,
            )
            ahead_a, ahead_c = int(np.nansum(values > 0)), int(np.nansum(values < 0))
            ax.set_title(
                f"{b} ({direction(b).comparative} is better)\n{a} ahead on {ahead_a}, {c} on {ahead_c}", fontsize=7
            )
    fig.suptitle(
        "Where each model is ahead\n(green: the first-named model, orange: the second, grey: tie; "
        "blank: not in the grid)",
        fontsize=8,
    )
    fig.tight_layout()
    _save(fig, path, root)
    plt.close(fig)
    return path
