"""PNG figures drawn from the analysis tables (never from the raw grid again, so a figure cannot
disagree with its CSV). matplotlib runs headless (Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

DPI = 130
MIN_HEIGHT = 3.0  # inches; below this a one-row heatmap clips its colour-bar label
MIN_WIDTH = 5.5  # and a one-column one its title


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _heatmap(ax, values: np.ndarray, row_labels, col_labels, text: np.ndarray, vmin: float, vmax: float, cmap: str,
             light_when_high: bool = False):
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


def rho_flip_surface(detail: pd.DataFrame, path: Path) -> Path:
    """Per-pair rho_flip on the full envelope, one column per benchmark."""
    plt = _pyplot()
    full = detail[detail["slice"] == "full"].copy()
    full["pair"] = full["model_a"] + " vs " + full["model_b"]
    wide = full.pivot(index="pair", columns="benchmark", values="rho_flip")
    wide = wide[[b for b in full["benchmark"].drop_duplicates()]]
    n_cfg = full.drop_duplicates("benchmark").set_index("benchmark")["n_configs"]
    cols = [f"{b}\n|C|={n_cfg[b]}" for b in wide.columns]
    text = np.vectorize(lambda v: "" if np.isnan(v) else f"{v:.3f}")(wide.to_numpy(dtype=float))
    fig, ax = plt.subplots(figsize=(max(MIN_WIDTH, 1.6 + 1.3 * len(cols)), max(MIN_HEIGHT, 1.4 + 0.45 * len(wide))))
    image = _heatmap(ax, wide.to_numpy(dtype=float), list(wide.index), cols, text, 0.0, 0.5, "magma_r")
    fig.colorbar(image, ax=ax, label="rho_flip (ceiling 0.5)")
    ax.set_title("rho_flip per model pair, full envelope")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def rho_flip_by_slice(maxima: pd.DataFrame, path: Path) -> Path:
    """rho_flip max per benchmark and slice, with |C| in each cell (the tier ablation)."""
    plt = _pyplot()
    slices = list(maxima["slice"].drop_duplicates())
    benchmarks = list(maxima["benchmark"].drop_duplicates())
    values = maxima.pivot(index="benchmark", columns="slice", values="rho_flip_max").reindex(index=benchmarks, columns=slices)
    n = maxima.pivot(index="benchmark", columns="slice", values="n_configs").reindex(index=benchmarks, columns=slices)
    text = np.empty(values.shape, dtype=object)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values.iat[i, j]
            text[i, j] = "" if pd.isna(v) else f"{v:.3f}\n|C|={int(n.iat[i, j])}"
    fig, ax = plt.subplots(figsize=(1.8 + 1.15 * len(slices), max(MIN_HEIGHT, 1.4 + 0.6 * len(benchmarks))))
    image = _heatmap(ax, values.to_numpy(dtype=float), benchmarks, slices, text, 0.0, 0.5, "magma_r")
    fig.colorbar(image, ax=ax, label="rho_flip max over pairs")
    ax.set_title("rho_flip max by slice (blank: slice empty for that benchmark)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def orderings_reached(detail: pd.DataFrame, path: Path) -> Path:
    plt = _pyplot()
    slices = list(detail["slice"].drop_duplicates())
    benchmarks = list(detail["benchmark"].drop_duplicates())
    k = detail.pivot(index="benchmark", columns="slice", values="n_orderings").reindex(index=benchmarks, columns=slices)
    possible = int(detail["n_possible"].iloc[0])
    text = np.vectorize(lambda v: "" if np.isnan(v) else f"{int(v)}/{possible}")(k.to_numpy(dtype=float))
    fig, ax = plt.subplots(figsize=(1.8 + 1.1 * len(slices), max(MIN_HEIGHT, 1.4 + 0.5 * len(benchmarks))))
    image = _heatmap(ax, k.to_numpy(dtype=float), benchmarks, slices, text, 1, possible, "viridis",
                     light_when_high=True)
    fig.colorbar(image, ax=ax, label=f"distinct orderings of {possible}")
    ax.set_title("Model orderings reached per benchmark and slice")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def score_ranges(cells: pd.DataFrame, models: tuple[str, ...], benchmarks: tuple[str, ...], path: Path) -> Path:
    """Every configuration's score per model (dots, by scoring path) over its min-max bar."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(max(MIN_WIDTH, 2.2 + 2.3 * len(benchmarks)), 4.2), sharey=True, squeeze=False)
    colours = {"free_form": "tab:blue", "logprob": "tab:orange"}
    rng = np.random.default_rng(0)  # jitter only; fixed so the picture does not change between runs
    for ax, benchmark in zip(axes[0], benchmarks, strict=True):
        rows = cells[cells["benchmark"] == benchmark]
        for i, model in enumerate(models):
            s = rows[rows["model"] == model]
            ax.vlines(i - 0.28, s["score"].min(), s["score"].max(), color="0.55", linewidth=3)
            for scoring, part in s.groupby("scoring"):
                ax.scatter(i + rng.uniform(-0.15, 0.15, len(part)), part["score"], s=9,
                           color=colours.get(scoring, "tab:gray"), label=scoring, alpha=0.8)
        ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
        ax.set_title(benchmark)
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
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def shap_bars(regressor: pd.DataFrame, classifier: pd.DataFrame, path: Path) -> Path | None:
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
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
