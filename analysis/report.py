"""The human-readable report. It is built once as a list of blocks (heading, paragraph, table,
figure) and rendered twice, to Markdown and to a self-contained HTML page, so the two never drift.
Every table comes with one sentence on how to read it, for a reader who has not read the paper."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .card import headline
from .pipeline import Analysis


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame
    how_to_read: str


@dataclass(frozen=True)
class Figure:
    path: str  # relative to the report
    alt: str


Block = Heading | Para | Bullets | Table | Figure


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "N/A"
        if math.isinf(v):
            return "inf"
        return f"{v:.3f}"
    return str(v)


def markdown_table(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def to_markdown(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            out.append(f"*How to read:* {b.how_to_read}\n\n" + markdown_table(b.frame))
        elif isinstance(b, Figure):
            out.append(f"![{b.alt}]({b.path})")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def to_html(blocks: list[Block], title: str) -> str:
    parts = []
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            parts.append(f"<p>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>"
                           for r in b.frame.itertuples(index=False))
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in b.frame.columns)
            parts.append(f'<p class="how"><em>How to read:</em> {_inline_html(b.how_to_read)}</p>'
                         f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Figure):
            parts.append(f'<figure><img src="{html.escape(b.path)}" alt="{html.escape(b.alt)}">'
                         f"<figcaption>{html.escape(b.alt)}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.45}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}"
             "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}th{background:#f3f3f3}"
             "img{max-width:100%}.how{color:#444}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")


# -- content ----------------------------------------------------------------------------------------
def _full(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["slice"] == "full"]


def _wide_ablation(a: Analysis) -> pd.DataFrame:
    t = a.tier_ablation
    cells = t.assign(cell=[f"{r.rho_flip_max:.3f} · {r.n_orderings}/{r.n_possible} · |C|={r.n_configs}"
                           for r in t.itertuples()])
    wide = cells.pivot(index="benchmark", columns="slice", values="cell")
    wide = wide.reindex(index=list(a.grid.benchmarks), columns=[s for s in a.options.slices if s in wide.columns])
    return wide.fillna("—").reset_index()


def _cfr_wide(a: Analysis, theta: str) -> pd.DataFrame:
    c = _full(a.cfr)
    c = c[c["theta"] == theta]
    wide = c.pivot(index="model", columns="benchmark", values="cfr").reindex(columns=list(a.grid.benchmarks))
    return wide.reset_index()


def build_blocks(a: Analysis, figures: dict[str, str]) -> list[Block]:
    g = a.grid
    m = len(g.models)
    null_mismatch = 1 - 1 / math.factorial(m)
    blocks: list[Block] = [
        Heading(f"SafetyRepro analysis of {Path(g.source).name}", 1),
        Para(f"Models: {', '.join(g.models)}. Benchmarks: {', '.join(g.benchmarks)}. Precision `{g.precision}`, "
             f"package `{g.package}`. {len(g.cells)} cells analysed."),
        Para("The question: if one evaluator picks a prompt template, decoding setting, number of worked examples and "
             "scoring path, and another picks differently but just as reasonably, do they agree on which model is "
             "better? For each pair of models, rho_flip is the share of configurations on which the less frequent "
             "winner wins strictly: 0 means one model is never strictly behind, and 0.5 (its ceiling) means the "
             "configurations split evenly. Ties count for neither model but stay in the denominator. Scores are "
             "compared exactly as written in the grid."),
    ]
    if a.warnings:
        blocks += [Heading("Warnings"), Bullets(a.warnings)]

    blocks += [Heading("Headline"),
               Table(headline(a), "one row per benchmark on the full envelope; rho_flip max is the largest value over "
                     "model pairs (the pair is named), the ceiling is floor(|C|/2)/|C|, orderings counts the distinct "
                     f"rankings of the {m} models reached out of {math.factorial(m)}, tau_R is the mean rank agreement "
                     "between configurations (1 = identical rankings everywhere), SDI max the largest relative score "
                     "range of any model.")]

    pairs = _full(a.rho_flip_detail)[["benchmark", "model_a", "model_b", "n_plus", "n_minus", "n_zero", "n_configs",
                                      "rho_flip", "ceiling", "saturated", "d1", "d2"]]
    blocks += [Heading("rho_flip per model pair"),
               Table(pairs, "n_plus counts configurations where model_a scores strictly higher, n_minus where it "
                     "scores strictly lower, n_zero ties; rho_flip = min(n_plus, n_minus)/n_configs. d1 (no strict "
                     "reversal) holds exactly when rho_flip is 0; d2 (one single verdict: only one of the three counts "
                     "is non-zero) is stricter. Saturated means the value sits at its ceiling, which proves a reversal "
                     "but not its size. Every slice is in rho_flip_detail.csv.")]
    if "rho_flip_surface" in figures:
        blocks.append(Figure(figures["rho_flip_surface"], "rho_flip per model pair and benchmark, full envelope"))

    full_orders = _full(a.orderings_detail)[["benchmark", "n_configs", "n_orderings", "n_possible", "orderings"]]
    blocks += [Heading("Orderings reached"),
               Table(full_orders, "each configuration ranks the models by score (an exact tie is broken "
                     "alphabetically); the table counts how many distinct rankings the configurations produce and "
                     "lists them with how many configurations give each. Per-configuration orderings are in "
                     "config_orderings.csv.")]
    if "orderings" in figures:
        blocks.append(Figure(figures["orderings"], "Distinct orderings reached per benchmark and slice"))

    blocks += [Heading("Slices and tier ablation"),
               Para("Slices restrict the configurations: core drops the stress-tier values (template T4, diverse "
                    "decoding), excl_t4 and excl_diverse drop one each, free_form and logprob keep one scoring path, "
                    "parse_clean keeps configurations where every model parses at least 95 % of items, "
                    "conservative_core keeps T1 and T3, greedy, 0-shot."),
               Table(_wide_ablation(a), "each cell reads rho_flip max · orderings reached/possible · number of "
                     "configurations; compare values only at similar |C|, because small slices saturate (at |C|=4 any "
                     "2-2 split gives 0.5). A dash means the slice is empty for that benchmark.")]
    if "rho_flip_by_slice" in figures:
        blocks.append(Figure(figures["rho_flip_by_slice"], "rho_flip max per benchmark and slice"))

    conc = _full(a.concordance)[["benchmark", "n_configs", "tau_r", "order_mismatch_rate", "n_undefined_pairs"]]
    blocks += [Heading("Ranking concordance"),
               Table(conc, "tau_R is the mean Kendall tau (ties as average ranks) between the model rankings of every "
                     "pair of configurations: 1 means all configurations agree, 0 is what random rankings give. "
                     "order_mismatch_rate is the share of configuration pairs whose full rankings differ; random "
                     f"rankings of {m} models would give {null_mismatch:.3f}.")]

    sdi = _full(a.sdi).pivot(index="model", columns="benchmark", values="sdi").reindex(columns=list(g.benchmarks)).reset_index()
    blocks += [Heading("Score dispersion (SDI)"),
               Table(sdi, "SDI = (highest score - lowest score) / mean score of one model on one benchmark across the "
                     "full envelope; 0.5 means the configurations move the score by half its average. Ranges and means "
                     "are in sdi.csv.")]
    if "score_ranges" in figures:
        blocks.append(Figure(figures["score_ranges"], "Score of every configuration per model and benchmark"))

    blocks += [Heading("Compliance flip rate (CFR)"),
               Para("A model passes a configuration when its score is at least theta. CFR is the probability that two "
                    "different configurations disagree on pass/fail, 2n/(n-1)·p(1-p) with p the pass share over n "
                    "configurations. CrowS-Pairs has no pass/fail reading (N/A).")]
    for theta in (*[str(t) for t in a.options.thetas], "median"):
        how = (f"CFR at theta = {theta} per model (rows) and benchmark (columns)." if theta != "median" else
               "CFR with theta at each cell's own median: it sits at the algebraic ceiling 2n/(n-1)/4 (51.06 % at "
               "n = 48, 54.55 % at n = 12) by construction, so it is a check of the identity, not a finding.")
        blocks.append(Table(_cfr_wide(a, theta), how))

    blocks.append(Heading("Variance attribution (free-form slice)"))
    if a.variance_shares.empty:
        blocks.append(Para("No benchmark has a free-form slice large enough for the ANOVA."))
    else:
        shares = a.variance_shares[["benchmark", "n_configs", "model_share", "implementation_share", "interaction_share",
                                    "residual_share", "sum_of_shares", "rho", "rho_lo", "rho_hi"]]
        blocks.append(Table(shares, "a Type-II ANOVA splits each benchmark's score variance into the model's share, "
                            "the implementation axes' share (template + decoding + shots), the model x axis interactions "
                            "and the rest (eta² = sum of squares / total). rho = implementation share / model share: "
                            f"above 1, harness choices move scores more than model identity does. rho_lo-rho_hi is the "
                            f"2.5-97.5 % range over {a.options.n_resamples} configuration resamples; with large "
                            "interaction shares read rho as a direction, not a precise ratio. Terms are in anova.csv."))

    blocks += [Heading("Axis attribution (SHAP)"),
               Para("A small LightGBM regressor predicts scores from the axes, model and benchmark; per benchmark and "
                    "pair a classifier predicts from the axes alone which model wins strictly. Mean |SHAP| says which "
                    "axis the surrogate leans on. This localises where flips come from; it does not replace the exact "
                    "counts above, which need no model.")]
    r = a.attribution.regressor
    if not r.empty:
        blocks.append(Table(r[["feature", "mean_abs_shap", "share"]], "mean |SHAP| is the average absolute change in "
                            "predicted score attributed to the feature; share is its fraction of the total "
                            f"(in-sample R² {r['r2_in_sample'].iloc[0]:.2f} on {int(r['n_rows'].iloc[0])} cells)."))
    c = a.attribution.classifier
    if not c.empty:
        top = c.sort_values("share", ascending=False).drop_duplicates(["benchmark", "model_a", "model_b"])
        top = top.sort_values(["benchmark", "model_a", "model_b"])[["benchmark", "model_a", "model_b", "axis", "share",
                                                                    "n_a_wins", "n_b_wins", "accuracy_in_sample"]]
        blocks.append(Table(top.rename(columns={"axis": "top_axis"}), "for each pair with a strict reversal, the axis "
                            "with the largest share of the classifier's mean |SHAP|, the wins on each side, and how well "
                            "the classifier fits (in sample). All axes are in shap_pair_classifier.csv."))
    if "shap" in figures:
        blocks.append(Figure(figures["shap"], "Mean |SHAP| per feature and per axis"))

    boot = a.bootstrap[["benchmark", "statistic", "point", "low", "high"]]
    blocks += [Heading("Configuration bootstrap"),
               Table(boot, f"configurations were resampled with replacement {a.options.n_resamples} times (seed "
                     f"{a.options.seed}); low-high is the 2.5-97.5 % range of the statistic. It shows how much the "
                     "maxima depend on which configurations are in the envelope, not uncertainty over items.")]

    blocks.append(Heading("Significant flips"))
    if a.significant_flips is None or a.significant_flips.empty:
        blocks.append(Para("Not computed: no usable per-item records were given."))
    else:
        f = _full(a.significant_flips)[["benchmark", "model_a", "model_b", "n_configs", "n_plus", "n_minus", "rho_flip",
                                        "n_plus_sig", "n_minus_sig", "rho_flip_sig"]]
        blocks.append(Table(f, f"each configuration's A - B difference was tested with a {a.options.n_resamples}-"
                            f"resample paired bootstrap over items (two-sided, alpha {a.options.alpha}); n_plus_sig and "
                            "n_minus_sig count only strict wins whose interval excludes zero, and rho_flip_sig = "
                            "min of the two / n_configs, beside the plain rho_flip on the same configurations. "
                            "Per-configuration intervals are in item_tests.csv."))

    cert = _full(a.certificate)[["benchmark", "model_a", "model_b", "extreme", "config_id", "score_a", "score_b", "diff"]]
    blocks += [Heading("Verdict certificate"),
               Table(cert, "for each pair, the configuration where model_a leads most (max) and the one where it "
                     "trails most (min); if the two diffs have opposite signs, running just these two config_ids "
                     "reproduces the reversal. Every slice is in verdict_certificate.csv.")]

    if a.notes:
        blocks += [Heading("Notes"), Bullets(a.notes)]
    return blocks


def write_report(a: Analysis, out: Path, figures: dict[str, str]) -> list[Path]:
    blocks = build_blocks(a, figures)
    (out / "report.md").write_text(to_markdown(blocks))
    (out / "report.html").write_text(to_html(blocks, f"SafetyRepro analysis of {Path(a.grid.source).name}"))
    return [out / "report.md", out / "report.html"]
