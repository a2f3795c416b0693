"""The human-readable report. It is built once as a list of blocks (heading, paragraph, table,
figure) and rendered twice, to Markdown and to a self-contained HTML page (figures embedded as
data URIs, so the file can be moved or mailed alone), so the two never drift. Every table comes
with one sentence on how to read it, for a reader who has not read the paper."""

from __future__ import annotations

import base64
import html
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from safetyrepro.analysis.metrics.chance import ceiling, chance_rho_flip
from safetyrepro.analysis.metrics.degenerate import CONSTANT_ANSWER_MIN, EMPTY_SHARE_MAX, MIN_PARSED_ANSWERS
from safetyrepro.analysis.metrics.dispersion import cfr_ceiling
from safetyrepro.analysis.metrics.readings import FORMAT, UNINFORMATIVE
from safetyrepro.analysis.metrics.slices import PARSE_CLEAN, PARSE_CLEAN_MIN, envelope_scope
from safetyrepro.analysis.metrics.variance import FREE_FORM, RHO_MODEL_SHARE_MIN
from safetyrepro.analysis.paired.detectable import detectable_sentences
from safetyrepro.analysis.paired.significance import TEST_NAME
from safetyrepro.analysis.pipeline import Analysis
from safetyrepro.analysis.render.card import (
    MAX_VERDICT_PAIRS,
    TWO_READINGS,
    VERDICT_HOW_TO_READ,
    PairVerdict,
    Win,
    headline,
    pair_verdicts,
    read_run_metadata,
    verdict_table,
)
from safetyrepro.analysis.render.figures import FigureSet
from safetyrepro.analysis.tables import TABLES
from safetyrepro.atomic import atomic_write
from safetyrepro.grid.direction import direction, has_pass_fail, score_meaning
from safetyrepro.markdown import markdown_table as table
from safetyrepro.markdown import md_prose


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


@dataclass(frozen=True)
class Side:
    """Sentences beside a figure (the verdict): side by side on a wide page, one after the other in Markdown."""

    items: tuple[str, ...]
    figure: Figure | None


Block = Heading | Para | Bullets | Table | Figure | Side


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
    return table(
        list(map(str, frame.columns)),
        ([_cell(c, v) for c, v in zip(frame.columns, row, strict=True)] for row in frame.itertuples(index=False)),
    )


def to_markdown(blocks: list[Block]) -> str:
    """The report as Markdown: the text quotes labels, config ids and task names from the grid, so
    raw HTML and link brackets in it are escaped (`md_prose`), and table cells are escaped whole."""
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + md_prose(b.text))
        elif isinstance(b, Para):
            out.append(md_prose(b.text))
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {md_prose(item)}" for item in b.items))
        elif isinstance(b, Table):
            out.append(f"*How to read:* {md_prose(b.how_to_read)}\n\n" + markdown_table(b.frame))
        elif isinstance(b, Figure):
            out.append(f"![{md_prose(b.alt)}]({b.path})")
        elif isinstance(b, Side):
            out.append("\n".join(f"- {md_prose(item)}" for item in b.items))
            if b.figure is not None:
                out.append(f"![{md_prose(b.figure.alt)}]({b.figure.path})")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _cell(column: str, v) -> str:
    """A table cell: counts (columns named n_...) as whole numbers, missing values as N/A."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "N/A"
    if str(column).startswith("n_") and isinstance(v, float) and v.is_integer():
        return str(int(v))
    return _fmt(v)


def _header(column) -> str:
    """A header that may break after an underscore, never inside a word."""
    return html.escape(str(column)).replace("_", "_<wbr>")


def _figure_html(f: Figure, base: Path) -> str:
    return (
        f'<figure><img src="{_data_uri(base / f.path)}" alt="{html.escape(f.alt)}">'
        f"<figcaption>{html.escape(f.alt)}</figcaption></figure>"
    )


def to_html(blocks: list[Block], title: str, base: Path) -> str:
    """One self-contained page: every figure is read from `base` / its path and embedded."""
    parts = []
    for b in blocks:
        if isinstance(b, Side):
            items = "<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>"
            fig = _figure_html(b.figure, base) if b.figure is not None else ""
            parts.append(f'<div class="side"><div class="said">{items}</div>{fig}</div>')
            continue
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            parts.append(f"<p>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = "".join(
                "<tr>"
                + "".join(f"<td>{html.escape(_cell(c, v))}</td>" for c, v in zip(b.frame.columns, r, strict=True))
                + "</tr>"
                for r in b.frame.itertuples(index=False)
            )
            head = "".join(f"<th>{_header(c)}</th>" for c in b.frame.columns)
            parts.append(
                f'<p class="how"><em>How to read:</em> {_inline_html(b.how_to_read)}</p>'
                f'<div class="tbl"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
            )
        elif isinstance(b, Figure):
            parts.append(_figure_html(b, base))
    # wide tables (the significance table has 17 columns) wrap their long names and values instead of
    # running off the page; a table that still cannot fit scrolls inside its own box
    style = (
        "body{font-family:sans-serif;max-width:1240px;margin:2em auto;padding:0 1em;line-height:1.45}"
        ".tbl{max-width:100%;overflow-x:auto;margin:.5em 0 1.5em}"
        "table{border-collapse:collapse;font-size:.85em}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}td{overflow-wrap:anywhere}"
        "th{background:#f3f3f3;overflow-wrap:normal;word-break:normal;hyphens:none}"
        "img{max-width:100%}.how{color:#444}"
        ".side{display:flex;gap:1.2em;align-items:flex-start}.side .said{flex:1 1 48%;font-size:.9em}"
        ".side figure{flex:1 1 52%;margin:0}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )


# -- content ----------------------------------------------------------------------------------------
def _full(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["slice"] == "full"]


def _list(values, last: str = "and") -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + f" {last} " + values[-1]


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def ceiling_phrase(ns) -> str:
    """The rho_flip ceiling and the one-pair chance reference at every |C| given, in words."""
    return "; ".join(f"|C| = {n}: ceiling {ceiling(n):.3f}, chance {chance_rho_flip(n):.3f}" for n in sorted(set(ns)))


def _scope_blocks(a: Analysis) -> list[Block]:
    scopes = {b: envelope_scope(a.grid, a.rules, b) for b in a.grid.benchmarks}
    lines = [f"{b}: {phrase}" for b, (_, phrase) in scopes.items()]
    if all(full for full, _ in scopes.values()):
        note = "Every benchmark holds its full envelope, so the slice called `full` below is the full envelope."
    else:
        note = (
            "The slice called `full` in the tables means every configuration this grid holds for a benchmark; "
            "where that is not the whole envelope (above), its numbers are not the paper's full-envelope numbers "
            "and must not be quoted as such."
        )
    return [Heading("Scope"), Bullets(tuple(lines)), Para(note)]


def _direction_sentence(benchmarks) -> str:
    higher = [b for b in benchmarks if direction(b).monotone]
    text = "Which way is better: " + (f"a higher score on {_list(higher)}" if higher else "")
    others = [b for b in benchmarks if not direction(b).monotone]
    for b in others:
        meaning = f" (the score is {score_meaning(b)})" if score_meaning(b) else ""
        text += ("; " if text.endswith(")") or higher else "") + f"on {b}{meaning}, {direction(b).label}"
    if others:
        text += (
            ". Tables keyed by score (rho_flip.csv, orderings.csv) order models by raw score, highest first, "
            "whichever way is better; the rows and columns labelled `better` read them in the benchmark's "
            "direction"
        )
    return text + "."


def _pair_rows(a: Analysis) -> pd.DataFrame:
    """Per pair on `full`; a benchmark whose better reading differs from the score gets a second row."""
    d = _full(a.rho_flip_detail)
    rows = []
    for r in d.itertuples():
        base = {"benchmark": r.benchmark, "model_a": r.model_a, "model_b": r.model_b}
        reading = (
            "score (higher is better)" if direction(r.benchmark).monotone else "raw score (not the better reading)"
        )
        rows.append(
            {
                **base,
                "reading": reading,
                "n_plus": r.n_plus,
                "n_minus": r.n_minus,
                "n_zero": r.n_zero,
                "n_configs": r.n_configs,
                "rho_flip": r.rho_flip,
                "ceiling": r.ceiling,
                "chance": r.chance,
                "saturated": r.saturated,
                "d1": r.d1,
                "d2": r.d2,
            }
        )
        if not direction(r.benchmark).monotone:
            rows.append(
                {
                    **base,
                    "reading": "better: " + r.better,
                    "n_plus": r.n_plus_better,
                    "n_minus": r.n_minus_better,
                    "n_zero": r.n_zero_better,
                    "n_configs": r.n_configs,
                    "rho_flip": r.rho_flip_better,
                    "ceiling": r.ceiling,
                    "chance": r.chance,
                    "saturated": r.n_configs >= 2 and min(r.n_plus_better, r.n_minus_better) == r.n_configs // 2,
                    "d1": r.n_plus_better == 0 or r.n_minus_better == 0,
                    "d2": sum(n > 0 for n in (r.n_plus_better, r.n_minus_better, r.n_zero_better)) == 1,
                }
            )
    return pd.DataFrame(rows)


def _ordering_rows(a: Analysis, slice_name: str = "full") -> pd.DataFrame:
    d = a.orderings_detail[a.orderings_detail["slice"] == slice_name]
    rows = []
    for r in d.itertuples():
        monotone = direction(r.benchmark).monotone
        first = "best first (higher score)" if monotone else "highest score first (raw, not best first)"
        rows.append(
            {
                "benchmark": r.benchmark,
                "slice": slice_name,
                "reading": first,
                "n_configs": r.n_configs,
                "n_orderings": r.n_orderings,
                "n_possible": r.n_possible,
                "orderings": r.orderings,
            }
        )
        if not monotone:
            rows.append(
                {
                    "benchmark": r.benchmark,
                    "slice": slice_name,
                    "reading": "best first: " + r.better,
                    "n_configs": r.n_configs,
                    "n_orderings": r.n_orderings_better,
                    "n_possible": r.n_possible,
                    "orderings": r.orderings_better,
                }
            )
    return pd.DataFrame(rows)


def _wide_ablation(a: Analysis) -> pd.DataFrame:
    t = a.tier_ablation
    cells = t.assign(
        cell=[
            f"{r.rho_flip_max:.3f} (chance {r.chance_max:.3f}) · {r.n_orderings}/{r.n_possible} · |C|={r.n_configs}"
            for r in t.itertuples()
        ]
    )
    wide = cells.pivot(index="benchmark", columns="slice", values="cell")
    wide = wide.reindex(index=list(a.grid.benchmarks), columns=[s for s in a.options.slices if s in wide.columns])
    return wide.fillna("—").reset_index()


def _two_slices(frame: pd.DataFrame, value: str, benchmarks, index: str = "model") -> pd.DataFrame:
    """index x (benchmark, slice) for slices full and parse_clean, columns named `benchmark (slice)`."""
    parts = []
    for name in ("full", PARSE_CLEAN):
        part = frame[frame["slice"] == name]
        if part.empty:
            continue
        wide = part.pivot(index=index, columns="benchmark", values=value)
        wide.columns = [f"{b} ({name})" for b in wide.columns]
        parts.append(wide)
    out = pd.concat(parts, axis=1)
    order = [f"{b} ({s})" for b in benchmarks for s in ("full", PARSE_CLEAN) if f"{b} ({s})" in out.columns]
    return out[order].reset_index()


def _cfr_table(a: Analysis, slice_name: str) -> pd.DataFrame:
    c = a.cfr[(a.cfr["slice"] == slice_name) & a.cfr["benchmark"].map(has_pass_fail).astype(bool)]
    if c.empty:
        return c
    wide = c.pivot_table(index=["benchmark", "model"], columns="theta", values="cfr", sort=False)
    thetas = [str(t) for t in a.options.thetas] + ["median"]
    wide = wide.reindex(columns=[t for t in thetas if t in wide.columns])
    wide.columns = [f"theta {t}" for t in wide.columns]
    n = c.drop_duplicates(["benchmark", "model"]).set_index(["benchmark", "model"])["n_configs"]
    wide.insert(0, "n_configs", n)
    wide["ceiling"] = [cfr_ceiling(int(v)) if v > 1 else float("nan") for v in n.reindex(wide.index)]
    return wide.reset_index()


def _median_caption(a: Analysis) -> str:
    c = a.cfr[(a.cfr["theta"] == "median") & a.cfr["cfr"].notna()]
    if c.empty:
        return "CFR with theta at each model's own median score: nothing to show."
    below = c[c["cfr"] < c["ceiling"] - 1e-12]
    ns = sorted(set(int(v) for v in c["n_configs"]))
    below = below.assign(_full=below["slice"] != "full").sort_values(["_full", "benchmark", "model"])
    text = (
        "With theta at each model's own median score (column `theta median`), CFR reaches its ceiling "
        "2n/(n-1)·1/4 ("
        + ", ".join(f"{cfr_ceiling(n):.3f} at n = {n}" for n in ns if n > 1)
        + ") only when n is even and the two middle scores differ, so that exactly half the configurations pass; "
        "with odd n (p = (n+1)/(2n), CFR = (n+1)/(2n)) or ties at the median it falls below. "
    )
    if below.empty:
        return (
            text + "Here every value sits at its ceiling, so this row checks the identity rather than finding anything."
        )
    return text + (
        f"Here {len(below)} of {len(c)} values (model x benchmark x slice) sit below it, e.g. "
        + ", ".join(
            f"{r.model} on {r.benchmark}/{r.slice}: {r.cfr:.3f} < {r.ceiling:.3f} (n = {r.n_configs})"
            for r in below.head(3).itertuples()
        )
        + "."
    )


def _figure_or_sentence(figures: FigureSet, key: str, alt: str) -> list[Block]:
    if key in figures.paths:
        return [Figure(figures.paths[key], alt)]
    if key in figures.skipped:
        return [Para(f"(Figure left out: {figures.skipped[key]})")]
    return []


MAX_ROWS = 20  # longer lists stay in their CSV


def _metric_value(metric: str, value: float) -> str:
    if math.isnan(value):
        return "N/A"
    return str(int(value)) if metric.startswith("n_") else f"{value:.3f}"


def _degenerate_blocks(a: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("Degenerate cells")]
    cells = a.degenerate_cells
    if cells.empty:
        return blocks + [
            Para(
                f"No cell has a parse rate below {PARSE_CLEAN_MIN} or more than "
                f"{100 * EMPTY_SHARE_MAX:.0f} % empty outputs; slice parse_clean equals slice full."
            )
        ]
    empties = int((cells["n_empty"].fillna(0) == cells["n_outputs"].fillna(-1)).sum())
    known = cells["n_outputs"].notna().any()
    codes = cells["reasons"].str.split(";").explode().value_counts()
    blocks.append(
        Para(
            f"{_count(len(cells), 'cell is', 'cells are')} degenerate: "
            + _list(
                [
                    f"{int(codes.get(c, 0))} {what}"
                    for c, what in (
                        ("parse_rate", f"with a parse rate below {PARSE_CLEAN_MIN}"),
                        ("empty", f"with more than {100 * EMPTY_SHARE_MAX:.0f} % empty outputs"),
                        (
                            "constant_answer",
                            f"with one label on at least {CONSTANT_ANSWER_MIN:.0%} of the parsed answers",
                        ),
                        (
                            "no_better_than_majority",
                            "agreeing with gold no more often than always answering the majority label",
                        ),
                    )
                    if codes.get(c, 0)
                ]
            )
            + (
                f" ({empties} returned an empty output on every item)"
                if known and empties
                else ""
                if known
                else " (no per-item raw outputs, so empty outputs could not be counted)"
            )
            + f" (a cell can have several reasons; the label checks need at least {MIN_PARSED_ANSWERS} parsed answers "
            "and per-item predictions). Such a cell's score says little about the items: an unparsed answer counts as "
            "wrong, and a cell that answers one label, or no better than the label frequencies, does not read the "
            "items. lowest_of_model marks a "
            "cell that is the model's lowest score on the benchmark (it then sets that model's SDI and score range); "
            "last_in_config one that puts the model last in that configuration (it then moves orderings and pair "
            f"verdicts). The slice `{PARSE_CLEAN}` leaves out every configuration holding such a cell."
        )
    )
    shown = cells.drop(columns=[c for c in ("n_empty", "n_outputs") if cells[c].isna().all()])
    shown = shown.sort_values(["lowest_of_model", "last_in_config", "parse_rate"], ascending=[False, False, True])
    more = f" The {len(shown) - MAX_ROWS} others are in degenerate_cells.csv." if len(shown) > MAX_ROWS else ""
    blocks.append(
        Table(
            shown.head(MAX_ROWS),
            "one row per degenerate cell, those that set a model's lowest score or "
            "last place first; reason says what was wrong (parse rate, empty outputs from the per-item "
            "records)." + more,
        )
    )
    if not a.degenerate_effects.empty:
        effects = a.degenerate_effects.assign(
            full=[
                _metric_value(m, v)
                for m, v in zip(a.degenerate_effects["metric"], a.degenerate_effects["full"], strict=True)
            ],
            parse_clean=[
                _metric_value(m, v)
                for m, v in zip(a.degenerate_effects["metric"], a.degenerate_effects["parse_clean"], strict=True)
            ],
        )
        blocks.append(
            Table(
                effects,
                f"each metric the degenerate cells can move, read on slice `full` "
                f"(with them) and on slice `{PARSE_CLEAN}` (without the configurations that hold them); "
                "per model for its lowest score, SDI and CFR, per benchmark (model `all`) for rho_flip max "
                "and the number of orderings. A large change means the headline number rests on those "
                "cells.",
            )
        )
    return blocks


def _detectable_blocks(a: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("What this grid can detect")]
    detectable = a.detectable
    sentences = detectable_sentences(detectable)
    if detectable is None or not sentences:
        return blocks + [
            Para(
                "Not computed: no usable per-item records were given, so neither the pairs' discordance "
                "nor what their items can detect is known (`safetyrepro plan` answers it for a "
                "discordance you supply)."
            )
        ]
    blocks.append(
        Para(
            "A configuration's winner is claimed only when its exact paired test passes Holm over the family's "
            'configurations, so a grid with few items cannot claim small differences, and "no significant winner" is '
            "no evidence of stability when nothing was detectable. Read at each pair's observed discordance (the mean "
            "|A - B| per item: for 0/1 answers the share of items the two models answer differently), the smallest "
            "true difference of one configuration found at 80 % power under Holm's first step, and the power at a "
            "10-point difference:"
        )
    )
    blocks.append(Bullets(tuple(sentences)))
    shown = detectable[detectable["slice"] == "full"].drop(columns=["slice", "target_power", "reference_effect"])
    blocks.append(
        Table(
            shown,
            "per pair on slice `full`: n_items per configuration, n_configs the Holm family, "
            "discordance as above, detectable_difference the smallest paired difference found at 80 % "
            "power under the test run on the items (blank: none is, at this size), power_at_reference the power at a "
            "10-point difference. "
            "Every slice is in detectable.csv; docs/analysis.md gives the model.",
        )
    )
    return blocks


def _variance_blocks(a: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("Variance attribution (free-form slice)")]
    shares = a.variance_shares
    if shares.empty:
        return blocks + [Para("No benchmark has a free-form slice large enough for the ANOVA.")]
    main = shares[(shares["slice"] == FREE_FORM) & (shares["anova_type"] == "II")]
    blocks.append(
        Table(
            main[
                [
                    "benchmark",
                    "n_configs",
                    "model_share",
                    "implementation_share",
                    "interaction_share",
                    "residual_share",
                    "sum_of_shares",
                    "rho",
                    "rho_lo",
                    "rho_hi",
                ]
            ],
            "a Type-II ANOVA splits each benchmark's score variance into the model's share, the "
            "implementation axes' share (template + decoding + shots), the model x axis interactions and "
            "the rest (eta² = sum of squares / total). rho = implementation share / model share: above 1, "
            "harness choices move scores more than model identity does. rho_lo-rho_hi is the 2.5-97.5 % "
            f"range over {a.options.n_resamples} configuration resamples; with large interaction shares "
            "read rho as a direction, not a precise ratio. Terms are in anova.csv.",
        )
    )
    undefined = main[~main["rho_defined"].astype(bool)]
    if not undefined.empty:
        blocks.append(
            Para(
                f"rho is not given for {', '.join(undefined['benchmark'])}: there the model explains less than "
                f"{RHO_MODEL_SHARE_MIN:.0%} of the variance, so the models hardly differ and a ratio over that share "
                "swings by orders of magnitude between resamples; read the shares themselves."
            )
        )
    wide = shares.assign(fit=shares["anova_type"].map({"II": "Type II", "III": "Type III"}) + ", " + shares["slice"])
    robust = wide[
        [
            "benchmark",
            "fit",
            "n_configs",
            "model_share",
            "implementation_share",
            "rho",
            "model_omega_sq",
            "implementation_omega_sq",
            "rho_omega_sq",
        ]
    ]
    blocks.append(
        Table(
            robust,
            "the paper's robustness checks side by side: Type-III sums of squares (sum-to-zero "
            "contrasts; each term adjusted for every other, interactions included), omega² = (SS - df·MS_res) "
            "/ (SS_total + MS_res) per group of terms (eta² less what a term's degrees of freedom would "
            f"explain by chance; negative means no effect beyond noise), and the same fits on the "
            f"free-form configurations that are also in `{PARSE_CLEAN}`. If rho keeps its side of 1 across "
            "the rows, the reading does not hinge on the sums-of-squares type or on badly parsed cells. (On a "
            "complete, balanced design Type II and Type III coincide, as they must; they part when the "
            "slice leaves the template x decoding x shots design incomplete.)",
        )
    )
    return blocks


def _significance_blocks(a: Analysis) -> list[Block]:
    blocks: list[Block] = [Heading("Significant flips")]
    if a.significant_flips is None or a.significant_flips.empty:
        return blocks + [Para("Not computed: no usable per-item records were given.")]
    f = _full(a.significant_flips)
    blocks.append(
        Para(
            f"Each configuration's A - B difference was tested on the items with an {TEST_NAME}: under the null that "
            "the two models are interchangeable on each item, every item's difference is equally likely to have either "
            "sign (for 0/1 item scores this is the exact McNemar test). A flip needs a win each way among |C| tests, "
            "so the p-values of one benchmark x slice x pair (the family) are adjusted together, with Holm (controls "
            "the chance of any false win, familywise: the confirmatory reading, the one to claim a flip on) and with "
            "Benjamini-Hochberg (controls the expected share of false wins, FDR: exploratory only, since one false win "
            "in the minority direction is enough to make a flip). A win counts as significant when its adjusted "
            f"p-value is at most alpha = {a.options.alpha}. Wins are by raw score (as in rho_flip.csv)."
        )
    )
    blocks.append(
        Para(
            "Two references for reading a rho_flip: the chance value is what |C| independent coin-flip "
            'configurations would give, the answer to "is this more than independent noise per configuration?"; '
            "rho_flip_null_mean is the pair's own null, from its items: the two models' labels swapped item by item at "
            "random, the same swap in every configuration, so the items' correlation across configurations is kept. It "
            'answers "is this what two interchangeable models would show on these items?". p_consistent is the p-value '
            'of "these two models differ consistently": the share of those draws at or below the observed rho_flip, '
            "as (k + 1) / (n + 1); small means fewer reversals than interchangeable models would show (one model is "
            "consistently ahead), near 1 that the pair reverses as often as interchangeable models do or more. "
            "p_consistent_better is the same in the benchmark's better direction (for CrowS-Pairs, closer to 0.5)."
        )
    )
    shown = f[
        [
            "benchmark",
            "model_a",
            "model_b",
            "n_configs",
            "n_plus",
            "n_minus",
            "rho_flip",
            "chance",
            "rho_flip_lo",
            "rho_flip_hi",
            "rho_flip_null_mean",
            "p_consistent",
            "p_consistent_better",
            "correction",
            "n_plus_sig",
            "n_minus_sig",
            "rho_flip_sig",
            "rho_flip_sig_better",
        ]
    ]
    blocks.append(
        Table(
            shown,
            "correction names the multiple-testing adjustment (holm: familywise, confirmatory; "
            "fdr_bh: false discovery rate, exploratory); n_plus_sig and n_minus_sig count the wins that "
            "survive it, and rho_flip_sig = min of the two / n_configs beside the plain rho_flip on the "
            "same configurations; rho_flip_sig_better is the same in the benchmark's better direction "
            "(for CrowS-Pairs closeness to 0.5, each configuration tested by item-wise label swaps; "
            "elsewhere equal to rho_flip_sig). rho_flip_lo-rho_flip_hi is the percentile 2.5-97.5 % "
            f"range of rho_flip over {a.options.n_resamples} item resamples (the benchmark's items redrawn once per "
            "resample, the same draw for every configuration and every model). Every slice is in "
            "significant_flips.csv, per-configuration p-values (raw and adjusted) in item_tests.csv.",
        )
    )
    return blocks


def _short(cid: str) -> str:
    return cid.split("/", 1)[1]


def _bases_words(wins: Sequence[Win]) -> str:
    """'format-driven', 'uninformative' or both: what the claims that are not readable rest on."""
    found = {r.basis for _, r in wins}
    return " or ".join(b for b in (FORMAT, UNINFORMATIVE) if b in found)


def _tally_note(wins: Sequence[Win]) -> str:
    """', 3 of them format-driven and 1 uninformative' (', both format-driven' when all are): what a count of
    leads rests on; '' when all are readable, or when there is one lead (its own clause says it)."""
    counts = Counter(r.basis for _, r in wins)
    bad = [(counts[b], b) for b in (FORMAT, UNINFORMATIVE) if counts[b]]
    if not bad or len(wins) == 1:
        return ""
    if len(bad) == 1 and bad[0][0] == len(wins):
        return f", {'both' if len(wins) == 2 else 'all'} {bad[0][1]}"
    return f", {bad[0][0]} of them {bad[0][1]}" + "".join(f" and {k} {b}" for k, b in bad[1:])


def _cell_words(r) -> str:
    """A degenerate cell's reasons in a few words, for a sentence (degenerate_cells.csv and the table below
    the verdict give them in full)."""
    codes = set(str(r.reasons).split(";"))
    words = [f"parse rate {r.parse_rate:.2f}"] if "parse_rate" in codes else []
    if pd.notna(r.n_empty) and r.n_empty > 0:
        words.append(
            "every output empty"
            if r.n_empty == r.n_outputs
            else f"{int(r.n_empty)} of {int(r.n_outputs)} outputs empty"
        )
    if "constant_answer" in codes:
        words.append(f"one label on {r.top_share:.0%} of its answers")
    if "no_better_than_majority" in codes:
        words.append(f"no better than the majority label ({r.agreement:.0%} vs {r.majority_share:.0%})")
    return ", ".join(words)


Clause = Callable[[str, str, str], str]


def rests_clause(a: Analysis) -> Clause:
    """(config_id, lead, trail) -> what that lead rests on, for the sentence that states it: readings.py's
    clause (its basis, and the readable alternative the items both read give), each degenerate cell's
    reasons in a few words; '' when readable."""
    cells = a.degenerate_cells
    words = (
        {}
        if cells is None or cells.empty
        else {(str(r.model), str(r.config_id)): _cell_words(r) for r in cells.itertuples()}
    )

    lookup = a.rests_on

    def clause(config_id: str, lead: str, trail: str) -> str:
        rests = lookup(config_id, lead, trail)
        if rests.readable:
            return ""
        why = rests.why
        for m in (lead, trail):
            cell, short = a.cell_bases.get((m, config_id)), words.get((m, config_id))
            if cell is not None and cell.reason and short:
                why = why.replace(f"{m} {cell.reason}", f"{m} {short}", 1)
        return f" [{rests.basis}: {why}]"

    return clause


def _wins_note(wins: Sequence[Win], winner: str, other: str, clause: Clause) -> str:
    """The confirmed wins that are not readable, each with what it rests on: 'both format-driven: T4/... [...]'."""
    bad = [(c, r) for c, r in wins if not r.readable]
    if not bad:
        return ""
    k, m = len(bad), len(wins)
    share = (f"{k} of {m} " if k < m else "both " if m == 2 else f"all {m} " if m > 2 else "") + _bases_words(bad)
    return f"{share}: " + ", ".join(f"{_short(c)}{clause(c, winner, other)}" for c, _ in bad)


# the leads and reversals are this sample's scores; a win the paired test over the items confirms is a claim about
# the models, the items taken as draws (the seeds, the few-shot draw and the templates are held fixed)
ABOUT_THE_MODELS = "about the models (the items as draws)"


def _confirmed_clause(pv: PairVerdict, clause: Clause) -> str:
    """What the item tests confirm (Holm), and what each confirmed win that is not readable rests on."""
    if pv.confirmed is None:
        return ""
    mine, theirs = pv.confirmed[pv.lead], pv.confirmed[pv.trail]
    if not (mine or theirs):
        return f"; {ABOUT_THE_MODELS}, no single configuration's win is confirmed (Holm)"
    if mine and theirs:
        notes = [
            f"{who}'s {note}"
            for who, other, w in ((pv.lead, pv.trail, mine), (pv.trail, pv.lead, theirs))
            if (note := _wins_note(w, who, other, clause))
        ]
        text = (
            f"; {ABOUT_THE_MODELS}, the reversal is confirmed ({len(mine)} and {len(theirs)} wins survive Holm"
            + "".join(f"; {n}" for n in notes)
        )
    else:
        who, other, wins = (pv.lead, pv.trail, mine) if mine else (pv.trail, pv.lead, theirs)
        note = _wins_note(wins, who, other, clause)
        survive = f"{len(wins)} {'survives' if len(wins) == 1 else 'survive'} Holm"
        text = f"; {ABOUT_THE_MODELS}, only {who}'s wins are confirmed ({survive}" + (f", {note}" if note else "")
    text += ")"
    everything = mine + theirs
    if all(not r.readable for _, r in everything):
        if all(r.basis == FORMAT for _, r in everything):
            text += "; so the confirmed verdict is about answer format, not about which model is safer"
        else:
            text += (
                "; so the confirmed verdict rests on format-driven or uninformative cells, not on which model is safer"
            )
    return text


def pair_sentence(a: Analysis, pv: PairVerdict, cert: pd.DataFrame, clause: Clause | None = None) -> str:
    """One pair on one benchmark, winner first, in the benchmark's better direction: who leads where and
    by how much (the scores compared), how often the lead reverses, and what the items confirm; every
    configuration it names carries what the claim over it rests on (readings.py), in the same sentence."""
    clause = rests_clause(a) if clause is None else clause
    better = direction(pv.benchmark)
    lead, trail = pv.lead, pv.trail
    ext = "max" if lead == pv.model_a else "min"
    mine = cert[(cert["benchmark"] == pv.benchmark) & (cert["model_a"] == pv.model_a) & (cert["model_b"] == pv.model_b)]
    rows = mine.set_index("extreme")

    def at(extreme: str) -> str:
        """The two scores at that extreme, the model ahead there first, and what that lead rests on."""
        c = rows.loc[extreme]
        score = {pv.model_a: c["score_a"], pv.model_b: c["score_b"]}
        first, second = (lead, trail) if extreme == ext else (trail, lead)
        cid = str(c["config_id"])
        return f"{score[first]:.3f} vs {score[second]:.3f} on {_short(cid)}{clause(cid, first, second)}"

    where = "" if better.monotone else f" ({better.comparative} is better)"
    text = (
        f"{pv.benchmark}{where}: on these items, {lead} is ahead of {trail} on {pv.won} of {pv.n_configs} "
        f"configurations{_tally_note(pv.leads)} (largest lead {at(ext)})"
    )
    if pv.lost:
        text += (
            f", {trail} ahead on {pv.lost}{_tally_note(pv.reversals)} (largest {at('min' if ext == 'max' else 'max')});"
            f" the lead reverses on {pv.rho_flip:.0%} of configurations (rho_flip {pv.rho_flip:.3f})"
        )
    else:
        text += " and never behind" + (f" ({pv.ties} tied)" if pv.ties else "")
    return text + _confirmed_clause(pv, clause) + "."


def verdict_sentences(a: Analysis, verdicts: Sequence[PairVerdict] | None = None) -> list[str]:
    """Per benchmark: one sentence per pair (those that reverse most first), then what the grid could detect."""
    verdicts = pair_verdicts(a) if verdicts is None else verdicts
    detail = _full(a.rho_flip_detail)
    cert = _full(a.certificate)
    detects = {s.split(":", 1)[0]: s for s in detectable_sentences(a.detectable)}
    clause = rests_clause(a)
    out = []
    for benchmark in a.grid.benchmarks:
        out += [pair_sentence(a, pv, cert, clause) for pv in verdicts if pv.benchmark == benchmark]
        n_pairs = int((detail["benchmark"] == benchmark).sum())
        if n_pairs > MAX_VERDICT_PAIRS:
            out.append(f"{benchmark}: {n_pairs - MAX_VERDICT_PAIRS} more pairs are in rho_flip_detail.csv.")
        if benchmark in detects:
            out.append("What it could detect, " + detects[benchmark])
    return out


def _verdict_blocks(a: Analysis, figures: FigureSet) -> list[Block]:
    figure = (
        Figure(
            figures.paths["wins_by_axes"],
            "Where each model is ahead, per benchmark and pair, laid out by "
            "template (rows) and scoring, decoding and shots (columns)",
        )
        if "wins_by_axes" in figures.paths
        else None
    )
    verdicts = pair_verdicts(a)
    table = verdict_table(a, verdicts)
    blocks: list[Block] = [Heading("Verdict"), Para(TWO_READINGS)]
    if not table.empty:
        blocks.append(Table(table, VERDICT_HOW_TO_READ))
    return blocks + [Side(tuple(verdict_sentences(a, verdicts)), figure)]


def _certificate_rows(a: Analysis) -> pd.DataFrame:
    """The certificate on slice full, each row with what its lead (model_a's where diff > 0, model_b's where it
    is negative) rests on."""
    cert = _full(a.certificate)[
        ["benchmark", "model_a", "model_b", "extreme", "config_id", "score_a", "score_b", "diff"]
    ]
    lookup = a.rests_on
    rests = [
        lookup(str(r.config_id), *((r.model_b, r.model_a) if r.diff < 0 else (r.model_a, r.model_b))).cell()
        for r in cert.itertuples()
    ]
    return cert.assign(rests_on=rests)


def _header_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The title, the run in one line, the verdict and what the analysis covers."""
    g = a.grid
    blocks: list[Block] = [
        Heading(f"SafetyRepro analysis of {Path(g.source).name}", 1),
        Para(
            f"Models: {', '.join(g.models)}. Benchmarks: {', '.join(g.benchmarks)}. Precision `{g.precision}`, "
            f"package `{g.package}`. {len(g.cells)} cells analysed."
        ),
        *_verdict_blocks(a, figures),
        *_figure_or_sentence(figures, "orderings", "Distinct orderings reached per benchmark and slice"),
        *_scope_blocks(a),
    ]
    return blocks


def _problems_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """Warnings, the cells left out, and the degenerate cells."""
    blocks: list[Block] = []
    if a.warnings:
        blocks += [Heading("Warnings"), Bullets(a.warnings)]
    if not a.excluded_cells.empty:
        blocks += [
            Heading("Cells left out"),
            Table(
                a.excluded_cells,
                "cells whose status is not ok, counted per status, model, benchmark and "
                "scoring: `failed` cells did not finish, `not_applicable` ones cannot be computed by that "
                "backend (a logprob cell without log-likelihoods). They enter no table and are never scored "
                "as 0; a configuration that lacks one model's cell is dropped for every model.",
            ),
        ]
    blocks += _degenerate_blocks(a)

    return blocks


def _headline_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """One row per benchmark on slice `full`, then what the items could detect."""
    g = a.grid
    m = len(g.models)
    full_sizes = sorted(set(int(n) for n in _full(a.rho_flip_max)["n_configs"]))
    blocks: list[Block] = [
        Heading("Headline"),
        Table(
            headline(a),
            "one row per benchmark on slice `full` (scope above); better says which way is "
            "better. rho_flip max is the largest value over model pairs (by raw score, as in rho_flip.csv; the "
            "pair is named), ceiling floor(|C|/2)/|C| and chance_max what the maximum averages when every "
            f"configuration ranks the {m} models at random (chance per pair: "
            + ceiling_phrase(full_sizes)
            + "). rho_flip_max_better and n_orderings_better read the verdicts "
            "in the better direction and equal the raw ones wherever higher is better. Orderings counts the "
            f"distinct rankings of the {m} models reached out of {math.factorial(m)}, tau_R is the mean rank "
            "agreement between configurations (1 = identical rankings everywhere), SDI max the largest "
            "relative score range of any model.",
        ),
    ]
    blocks += _detectable_blocks(a)

    return blocks


def _pairs_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """rho_flip per model pair, and its figure."""
    blocks: list[Block] = [
        Heading("rho_flip per model pair"),
        Table(
            _pair_rows(a),
            "n_plus counts configurations where model_a is strictly ahead in the row's "
            "reading, n_minus where it is strictly behind, n_zero ties; rho_flip = min(n_plus, "
            "n_minus)/n_configs, to be read against its ceiling and its chance value at that |C|. d1 (no "
            "strict reversal) holds exactly when rho_flip is 0; d2 (one single verdict: only one of the three "
            "counts is non-zero) is stricter. Saturated means the value sits at its ceiling, which proves a "
            "reversal but not its size. Every slice is in rho_flip_detail.csv.",
        ),
    ]
    blocks += _figure_or_sentence(figures, "rho_flip_surface", "rho_flip per model pair and benchmark, slice full")

    return blocks


def _orderings_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The orderings each configuration reaches (and without the degenerate cells)."""
    blocks: list[Block] = [
        Heading("Orderings reached"),
        Table(
            _ordering_rows(a),
            "each configuration ranks the models; an exact tie is never broken: it is "
            'a weak order, written "a = b", listed and counted as such. reading says which way round each '
            "ordering is written. n_orderings counts the distinct strict rankings (of the M! possible, the "
            "paper's count; a configuration that ties some models reaches none), and the list gives every "
            "ranking, tied ones included, with how many configurations give each. Per-configuration "
            "orderings are in config_orderings.csv.",
        ),
    ]
    if PARSE_CLEAN in set(a.orderings_detail["slice"]) and not a.degenerate_cells.empty:
        blocks.append(
            Table(
                _ordering_rows(a, PARSE_CLEAN),
                f"the same on slice `{PARSE_CLEAN}` (configurations "
                "where every model parses at least 95 % of items), to read the orderings without the "
                "degenerate cells.",
            )
        )

    return blocks


def _slices_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The slices and the tier ablation, and its figure."""
    sizes = sorted(set(int(n) for n in a.rho_flip_max["n_configs"]))
    blocks: list[Block] = [
        Heading("Slices and tier ablation"),
        Para(
            "Slices restrict the configurations: core drops the stress-tier values (template T4, diverse "
            "decoding), excl_t4 and excl_diverse drop one each, free_form and logprob keep one scoring path, "
            f"{PARSE_CLEAN} keeps configurations where every model parses at least 95 % of items, "
            "conservative_core keeps T1 and T3, greedy, 0-shot, both scorings."
        ),
        Table(
            _wide_ablation(a),
            "each cell reads rho_flip max (its chance value at that |C|) · orderings "
            "reached/possible · number of configurations; compare values only at similar |C|, because small "
            "slices saturate (at |C|=4 any 2-2 split gives 0.5) and chance grows with |C| ("
            + ceiling_phrase(sizes)
            + "). A dash means the slice is empty for that benchmark.",
        ),
    ]
    blocks += _figure_or_sentence(figures, "rho_flip_by_slice", "rho_flip max per benchmark and slice")

    return blocks


def _concordance_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """Kendall's tau_R between configurations' rankings."""
    g = a.grid
    m = len(g.models)
    null_mismatch = 1 - 1 / math.factorial(m)
    blocks: list[Block] = []
    conc = _full(a.concordance)[["benchmark", "n_configs", "tau_r", "order_mismatch_rate", "n_undefined_pairs"]]
    blocks += [
        Heading("Ranking concordance"),
        Table(
            conc,
            "tau_R is the mean Kendall tau (ties as average ranks) between the model rankings by score "
            "of every pair of configurations: 1 means all configurations agree, 0 is what random rankings "
            "give. order_mismatch_rate is the share of configuration pairs whose full rankings differ; random "
            f"rankings of {m} models would give {null_mismatch:.3f}.",
        ),
    ]

    return blocks


def _sdi_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """Score dispersion per model and benchmark, and the score ranges' figure."""
    g = a.grid
    blocks: list[Block] = [
        Heading("Score dispersion (SDI)"),
        Table(
            _two_slices(a.sdi, "sdi", g.benchmarks),
            "SDI = (highest score - lowest score) / mean score of one model on one benchmark; 0.5 means the "
            "configurations move the score by half its average. Each benchmark is shown on slice `full` and on "
            f"slice `{PARSE_CLEAN}` (without configurations where some model parses under 95 % of items): a "
            "large drop means a degenerate cell set the range. Ranges and means are in sdi.csv.",
        ),
    ]
    blocks += _figure_or_sentence(figures, "score_ranges", "Score of every configuration per model and benchmark")

    return blocks


def _cfr_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The compliance flip rate where a benchmark reads as pass/fail."""
    g = a.grid
    blocks: list[Block] = [
        Heading("Compliance flip rate (CFR)"),
        Para(
            "A model passes a configuration when its score is at least theta. CFR is the probability that two "
            "different configurations disagree on pass/fail, 2n/(n-1)·p(1-p) with p the pass share over n "
            "configurations; its ceiling is 2n/(n-1)·1/4 at p = 1/2. "
            + ", ".join(b for b in g.benchmarks if not has_pass_fail(b))
            + (" has no pass/fail reading and is left out. " if not all(map(has_pass_fail, g.benchmarks)) else "")
            + _median_caption(a)
        ),
    ]
    for name in ("full", PARSE_CLEAN):
        table = _cfr_table(a, name)
        if not table.empty:
            blocks.append(
                Table(
                    table,
                    f"CFR per benchmark and model on slice `{name}` at each theta (columns) and at "
                    "the model's median; ceiling is 2n/(n-1)/4 at this n.",
                )
            )

    return blocks


def _ties_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """Exactly tied log-probability candidates (when the run recorded them)."""
    blocks: list[Block] = []
    if a.tie_rates is not None:
        blocks.append(Heading("Ties between logprob candidates"))
        rule = (run_meta or {}).get("tie_rule") or "unknown"
        if a.tie_rates.empty:
            blocks.append(Para(f"No logprob cell had exactly tied top candidates (tie rule: {rule})."))
        else:
            blocks += [
                Para(
                    f"Tie rule of the run: `{rule}` (expected: credit 1/k when the gold answer is among k "
                    "exactly tied winners; first: the first candidate wins, lm-eval's rule). "
                    f"{_count(len(a.tie_rates), 'cell', 'cells')} had ties."
                ),
                Table(
                    a.tie_rates,
                    "tie_rate is the share of the cell's items whose top log-likelihoods tie "
                    "exactly; under the `first` rule such items are scored by candidate order, not by the "
                    "model.",
                ),
            ]

    return blocks


def _shap_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The surrogate models' axis attribution, and its figure."""
    blocks: list[Block] = [
        Heading("Axis attribution (SHAP)"),
        Para(
            "A small LightGBM regressor predicts scores from the axes, model and benchmark; per benchmark and "
            "pair a classifier predicts from the axes alone which model wins strictly. Mean |SHAP| says which "
            "axis the surrogate leans on. This localises where flips come from; it does not replace the exact "
            "counts above, which need no model."
        ),
    ]
    r = a.attribution.regressor
    if not r.empty:
        blocks.append(
            Table(
                r[["feature", "mean_abs_shap", "share"]],
                "mean |SHAP| is the average absolute change in "
                "predicted score attributed to the feature; share is its fraction of the total "
                f"(in-sample R² {r['r2_in_sample'].iloc[0]:.2f} on {int(r['n_rows'].iloc[0])} cells).",
            )
        )
    c = a.attribution.classifier
    if not c.empty:
        top = c.sort_values("share", ascending=False).drop_duplicates(["benchmark", "model_a", "model_b"])
        top = top.sort_values(["benchmark", "model_a", "model_b"])[
            ["benchmark", "model_a", "model_b", "axis", "share", "n_a_wins", "n_b_wins", "accuracy_in_sample"]
        ]
        blocks.append(
            Table(
                top.rename(columns={"axis": "top_axis"}),
                "for each pair with a strict reversal, the axis "
                "with the largest share of the classifier's mean |SHAP|, the wins on each side, and how well "
                "the classifier fits (in sample). All axes are in shap_pair_classifier.csv.",
            )
        )
    blocks += _figure_or_sentence(figures, "shap", "Mean |SHAP| per feature and per axis")

    return blocks


def _bootstrap_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """How much the maxima depend on which configurations are in the envelope."""
    blocks: list[Block] = []
    boot = a.bootstrap[["benchmark", "statistic", "point", "low", "high"]]
    blocks += [
        Heading("Configuration bootstrap"),
        Table(
            boot,
            f"configurations were resampled with replacement {a.options.n_resamples} times (seed "
            f"{a.options.seed}); low-high is the 2.5-97.5 % range of the statistic. It shows how much the "
            "maxima depend on which configurations are in the envelope, not uncertainty over items (that is "
            "the item bootstrap under Significant flips).",
        ),
    ]

    return blocks


def _certificate_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The two configurations per pair that reproduce a reversal."""
    blocks: list[Block] = []
    cert = _certificate_rows(a)
    blocks += [
        Heading("Verdict certificate"),
        Table(
            cert,
            "for each pair, the configuration where model_a's score leads most (max) and the one where "
            "it trails most (min); if the two diffs have opposite signs, running just these two config_ids "
            "reproduces the reversal; rests_on says what the lead on that configuration stands on (readable, "
            "format-driven, uninformative, as in the verdict table). Every slice is in verdict_certificate.csv.",
        ),
    ]

    return blocks


def _notes_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The analysis's notes."""
    blocks: list[Block] = []
    if a.notes:
        blocks += [Heading("Notes"), Bullets(a.notes)]
    return blocks


def _definitions_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """What rho_flip, its ceiling and its chance value are, and which way each benchmark is better."""
    g = a.grid
    full_sizes = sorted(set(int(n) for n in _full(a.rho_flip_max)["n_configs"]))
    return [
        Heading("Definitions"),
        Para(
            "The question: if one evaluator picks a prompt template, decoding setting, number of worked examples and "
            "scoring path, and another picks differently but just as reasonably, do they agree on which model is "
            "better? For each pair of models, rho_flip is the share of configurations on which the less frequent "
            "winner wins strictly: 0 means one model is never strictly behind. Its ceiling is floor(|C|/2)/|C|, "
            "reached when the configurations split as evenly as they can: 0.5 at even |C|, less at odd |C|. Ties count "
            "for neither model but stay in the denominator. Scores are compared as the fractions of a cell's item x "
            "seed answers they stand for, so equal counts tie however a float mean of seeds rounded (docs/formats.md)."
        ),
        Para(
            "Chance reference: if the configurations were coin flips for which of two models wins (exchangeable "
            "scores, no ties), rho_flip would average E[min(K, |C|-K)]/|C| with K ~ Binomial(|C|, 1/2), well below the "
            "ceiling; the headline's maximum over the model pairs would average more (chance_max). A value near "
            "chance says the verdict is as mixed as coin flips. At the sizes of slice `full`: "
            + ceiling_phrase(full_sizes)
            + " (other slices: in the tier ablation)."
        ),
        Para(_direction_sentence(g.benchmarks)),
    ]


def _registered_section(a: Analysis, figures: FigureSet, run_meta: dict | None) -> list[Block]:
    """The tables registered through analysis/tables.py, in the order they were registered."""
    blocks: list[Block] = []
    for name, frame in a.registered.items():
        spec = TABLES.get(name)
        if spec is not None and frame is not None:
            blocks += [Heading(spec.title), Table(frame, spec.caption)]
    return blocks


# The report's sections, in the order report.md shows them (the definitions close it).
REPORT_SECTIONS = (
    _header_section,
    _problems_section,
    _headline_section,
    _pairs_section,
    _orderings_section,
    _slices_section,
    _concordance_section,
    _sdi_section,
    _cfr_section,
    _ties_section,
    lambda a, figures, run_meta: _variance_blocks(a),
    _shap_section,
    _bootstrap_section,
    lambda a, figures, run_meta: _significance_blocks(a),
    _certificate_section,
    _registered_section,
    _notes_section,
    _definitions_section,
)


def build_blocks(a: Analysis, figures: FigureSet, run_meta: dict | None = None) -> list[Block]:
    return [block for section in REPORT_SECTIONS for block in section(a, figures, run_meta)]


def write_report(a: Analysis, out: Path, figures: FigureSet) -> list[Path]:
    meta, _ = read_run_metadata(Path(a.grid.source))
    blocks = build_blocks(a, figures, meta)
    atomic_write(out / "report.md", to_markdown(blocks), root=out)
    atomic_write(
        out / "report.html", to_html(blocks, f"SafetyRepro analysis of {Path(a.grid.source).name}", out), root=out
    )
    return [out / "report.md", out / "report.html"]
