"""How `safetyrepro verdict A B` says a two-run verdict (two_runs.py): the verdict first, one sentence per
comparison with what its items could detect, then the table; as plain text for the terminal or as a Markdown
block to paste into a paper or a pull request."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from safetyrepro.analysis.paired.sign_flip import Interval, interval_name
from safetyrepro.analysis.paired.two_runs import TwoRunVerdict
from safetyrepro.markdown import markdown_table, md_escape

SHOWN = {
    "task": "task",
    "metric": "metric",
    "direction": "direction",
    "n_items": "items",
    "mean_a": "A",
    "mean_b": "B",
    "diff": "A - B",
    "ci_low": "low",
    "ci_high": "high",
    "ci_level": "level",
    "p_value": "p",
    "p_holm": "p (Holm)",
    "winner": "confirmed",
    "detectable": "detectable",
    "p_tost_holm": "p TOST (Holm)",
    "equivalent": "within margin",
}


def _num(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def _p(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2g}" if x < 0.001 else f"{x:.3f}"


def _level(x) -> str:
    """A row's interval level as the table prints it: '95 %', '98.3 %' (its Holm level)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.3g} %"


def named_interval(r, v: TwoRunVerdict) -> str:
    """'exact 95 % interval: 0.148 to 0.427', the interval named by its method and its (Holm) level."""
    if r["ci_method"] is None or (isinstance(r["ci_level"], float) and math.isnan(r["ci_level"])):
        return "no interval"
    shown = Interval(r["ci_low"], r["ci_high"], 1 - r["ci_level"], r["ci_method"])
    return f"{interval_name(shown, v.alpha, v.family_size)}: {_num(r['ci_low'])} to {_num(r['ci_high'])}"


def headline(v: TwoRunVerdict) -> str:
    """The verdict in one sentence: who is confirmed ahead on how many of the K comparisons."""
    t, a, b = v.table, v.label_a, v.label_b
    if not len(t):
        return f"Verdict: {a} vs {b}: nothing to compare."
    wins_a = int((t["winner"] == a).sum())
    wins_b = int((t["winner"] == b).sum())
    higher_a = int((t["winner"] == f"higher: {a}").sum())
    higher_b = int((t["winner"] == f"higher: {b}").sum())
    parts = []
    if wins_a:
        parts.append(f"{a} is better on {wins_a}")
    if wins_b:
        parts.append(f"{b} is better on {wins_b}")
    for label, n in ((a, higher_a), (b, higher_b)):
        if n:
            parts.append(f"{label} scores higher (direction not recorded) on {n}")
    none = v.family_size - wins_a - wins_b - higher_a - higher_b
    if none:
        parts.append(f"no difference is confirmed on {none}")
    text = f"Verdict: {'; '.join(parts)} of {v.family_size} comparison{'s' if v.family_size != 1 else ''}"
    if v.margin is not None:
        same = int(t["equivalent"].fillna(False).astype(bool).sum())
        text += f"; within +-{v.margin:g} (equivalent) on {same}"
    draws = f"clusters of {v.cluster} as draws from each task, items within one may move together"
    return (
        text + f" (exact paired tests, Holm over {v.family_size} at alpha {v.alpha:g}; claims about the models: "
        f"{draws if v.cluster else 'items as draws from each task'})."
    )


def sentences(v: TwoRunVerdict) -> list[str]:
    """One sentence per comparison: the winner or its absence, the numbers it rests on, what could be found."""
    out = []
    k = v.family_size
    for _, r in v.table.iterrows():
        name = f"{r['task']} ({r['metric']}, {r['direction']})"
        scores = f"{v.label_a} {_num(r['mean_a'])}, {v.label_b} {_num(r['mean_b'])}"
        diff = (
            f"A - B = {r['diff']:+.3f} ({named_interval(r, v)}), "
            f"{r['test']} p = {_p(r['p_value'])}, Holm p = {_p(r['p_holm'])}"
        )
        if r["winner"]:
            winner = str(r["winner"])
            head = (
                f"{name}: {winner.removeprefix('higher: ')} scores higher, confirmed (the direction is not recorded: "
                f"pass --higher-is-better or --lower-is-better)"
                if winner.startswith("higher: ")
                else f"{name}: {winner} is better, confirmed"
            )
        else:
            head = f"{name}: no difference confirmed"
        if r["detectable"] is None or (isinstance(r["detectable"], float) and math.isnan(r["detectable"])):
            could = f"no difference is found at 80 % power with these {r['n_items']} items, however large"
        else:
            could = (
                f"these {r['n_items']} items find a true difference of {r['detectable']:.3f} with 80 % power at "
                f"alpha/{k}" + (f", by {r['detectable_basis']}" if r.get("detectable_basis") else "")
            )
        line = f"{head} ({scores}; {diff}); {could}"
        if v.margin is not None:
            verdict = "equivalent" if r["equivalent"] else "not shown equivalent"
            line += f"; within +-{v.margin:g}: {verdict} (TOST p = {_p(r['p_tost'])}, Holm p = {_p(r['p_tost_holm'])})"
        out.append(line + ".")
    return out


def _cells(v: TwoRunVerdict) -> tuple[list[str], list[list[str]]]:
    columns = [c for c in SHOWN if v.margin is not None or c not in ("p_tost_holm", "equivalent")]
    rows = []
    for _, r in v.table.iterrows():
        row = []
        for c in columns:
            x = r[c]
            if c in ("p_value", "p_holm", "p_tost_holm"):
                row.append(_p(x))
            elif c in ("mean_a", "mean_b", "diff", "ci_low", "ci_high", "detectable"):
                row.append(_num(x))
            elif c == "ci_level":
                row.append(_level(x))
            elif c == "equivalent":
                row.append("yes" if x else "no")
            else:
                row.append(str(x) if x != "" else "-")
        rows.append(row)
    return [SHOWN[c] for c in columns], rows


def text_report(v: TwoRunVerdict, notes: Sequence[str] = ()) -> str:
    """The verdict, the sentences, the notes (what was left out, and why), then the table."""
    headers, rows = _cells(v)
    table = pd.DataFrame(rows, columns=headers).to_string(index=False) if rows else "(no comparison)"
    lines = [headline(v), f"A = {v.label_a}, B = {v.label_b}.", *sentences(v), *notes, "", table]
    return "\n".join(lines)


def markdown_report(v: TwoRunVerdict, notes: Sequence[str] = ()) -> str:
    """A block to paste into a paper or a pull request: the verdict, the table, the sentences and the notes."""
    headers, rows = _cells(v)
    out = [
        f"**{md_escape(headline(v))}**",
        "",
        f"A = {md_escape(v.label_a)}, B = {md_escape(v.label_b)}.",
        "",
        markdown_table(headers, rows),
        "",
        *(f"- {md_escape(s)}" for s in [*sentences(v), *notes]),
    ]
    return "\n".join(out) + "\n"
