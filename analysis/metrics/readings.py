"""What a free-form verdict rests on: two readings of the same cells, kept apart.

On a free-form cell the strict score counts an unread reply (no label the template's parser finds, or an
empty output) as wrong, so a strict lead mixes two questions:

- **form**: does each model answer in the form the template asks for? Each model's read share (parse
  rate), compared paired by item with the exact sign-flip test on the per-item read shares.
- **content**: among the replies that were read, who is better? The same exact paired test on the items
  where both models' replies were read (at least one seed each; an item's score is its mean over the
  seeds whose reply was read). It is conditional on being read by both, so it can differ from the strict
  score, which also counts every unread reply against its model.

The strict score stays the grid's `score`, and rho_flip, orderings and the paper's tables read it. Every
claim over a configuration says which reading it rests on (`rests_on`):

- `format-driven`: either model's cell is degenerate for unread or empty replies (parse rate below 0.95,
  more than 5 % empty outputs), or the content reading does not support the strict lead;
- `uninformative`: either model's cell answers one label, or no better than the gold labels' frequencies;
- `readable`: neither, and where the content reading is known it agrees with the lead.

The cell screen itself is analysis/metrics/degenerate.py's; this module only names what it means for a claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from safetyrepro.analysis.paired.sign_flip import sign_flip_p_value

FORMAT = "format-driven"
UNINFORMATIVE = "uninformative"
READABLE = "readable"
BASES = (READABLE, FORMAT, UNINFORMATIVE)
FORMAT_REASONS = ("parse_rate", "empty")
UNINFORMATIVE_REASONS = ("constant_answer", "no_better_than_majority")
READINGS_NOTE = (
    "rests_on says what a claim stands on: readable (both models' replies read, and where known the items both "
    "read agree with the lead), format-driven (a cell with unread or empty replies, or a lead the items both models' "
    "replies were read on do not support: it is about answer format, not content), uninformative (a cell that "
    "answers one label or no better than the gold labels' frequencies)"
)
CONTENT_COLUMNS = (
    "benchmark",
    "config_id",
    "model_a",
    "model_b",
    "n_items",
    "read_a",
    "read_b",
    "form_diff",
    "form_p",
    "n_both",
    "content_a",
    "content_b",
    "content_diff",
    "content_p",
)


def basis_of_reasons(reasons: str | float | None) -> str:
    """The basis a degenerate cell's reason codes (`a;b`, degenerate_cells.csv's `reasons`) give a claim over it."""
    codes = set(str(reasons).split(";")) if isinstance(reasons, str) and reasons else set()
    if codes & set(FORMAT_REASONS):
        return FORMAT
    if codes & set(UNINFORMATIVE_REASONS):
        return UNINFORMATIVE
    return READABLE


@dataclass(frozen=True)
class CellBasis:
    """One model's cell in one configuration, as a claim over it sees it."""

    basis: str
    parse_rate: float
    reason: str  # the degenerate screen's words ("" when readable)


def cell_bases(degenerate: pd.DataFrame | None) -> dict[tuple[str, str], CellBasis]:
    """(model, config_id) -> its basis, for every degenerate cell (degenerate.degenerate_cells' table); a cell
    not in it is readable."""
    if degenerate is None or degenerate.empty:
        return {}
    return {
        (str(r.model), str(r.config_id)): CellBasis(basis_of_reasons(r.reasons), float(r.parse_rate), str(r.reason))
        for r in degenerate.itertuples()
    }


def read_flags(frame: pd.DataFrame) -> pd.Series | None:
    """Per item record, whether its reply was read: the `parsed` column, else a non-empty `prediction`;
    log-probability records are always read. None when the records carry neither column."""
    if "parsed" in frame.columns:
        flags = frame["parsed"].map(_as_bool)
    elif "prediction" in frame.columns:
        flags = frame["prediction"].notna()
    else:
        return None
    logprob = frame["config_id"].astype(str).str.endswith("/logprob")
    return (flags.fillna(False).astype(bool) | logprob).rename("read")


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value) if pd.notna(value) else False


def content_table(frame: pd.DataFrame, pairs: Iterable[tuple[str, str]] | None = None) -> pd.DataFrame | None:
    """Per free-form configuration and model pair (model_a < model_b), the form and content readings
    (CONTENT_COLUMNS). `frame` is item records in items.parquet's format; None without a way to tell a read
    reply (no `parsed` or `prediction` column). Differences are A - B (free-form benchmarks are higher-is-better)."""
    read = read_flags(frame)
    if read is None:
        return None
    records = frame.assign(read=read, config_id=frame["config_id"].astype(str), model=frame["model"].astype(str))
    records = records[records["config_id"].str.endswith("/free_form")]
    if records.empty:
        return pd.DataFrame([], columns=list(CONTENT_COLUMNS))
    records = records.assign(
        item_id=records["item_id"].astype(str),
        item_score=pd.to_numeric(records["item_score"], errors="coerce").astype(float),
        read_score=pd.to_numeric(records["item_score"], errors="coerce").where(records["read"]),
    )
    key = ["config_id", "item_id", "model"]
    share = records.groupby(key)["read"].mean().unstack("model")
    score = records.groupby(key)["read_score"].mean().unstack("model")  # mean over read seeds; NaN: none read
    wanted = None if pairs is None else [tuple(p) for p in pairs]
    rows = []
    for cid, block in share.groupby(level=0, sort=False):
        scores = score.loc[block.index]
        models = sorted(c for c in block.columns if block[c].notna().any())
        todo = wanted or [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
        for a, b in todo:
            if a not in block.columns or b not in block.columns:
                continue
            both = block[[a, b]].dropna()
            if both.empty:
                continue
            form = both[a].to_numpy(float) - both[b].to_numpy(float)
            s = scores.loc[both.index, [a, b]].dropna()
            content = s[a].to_numpy(float) - s[b].to_numpy(float)
            rows.append(
                {
                    "benchmark": str(cid).split("/", 1)[0],
                    "config_id": str(cid),
                    "model_a": a,
                    "model_b": b,
                    "n_items": len(both),
                    "read_a": float(both[a].mean()),
                    "read_b": float(both[b].mean()),
                    "form_diff": float(form.mean()),
                    "form_p": sign_flip_p_value(form),
                    "n_both": len(s),
                    "content_a": float(s[a].mean()) if len(s) else np.nan,
                    "content_b": float(s[b].mean()) if len(s) else np.nan,
                    "content_diff": float(content.mean()) if len(s) else np.nan,
                    "content_p": sign_flip_p_value(content) if len(s) else np.nan,
                }
            )
    return pd.DataFrame(rows, columns=list(CONTENT_COLUMNS))


@dataclass(frozen=True)
class RestsOn:
    """What one claim (a lead of `lead` over `trail` on one configuration) rests on, and the words for it."""

    basis: str
    why: str  # the cells' parse rates or reasons, and the content reading where it is known
    content: str  # the readable alternative: who is better on the items both models' replies were read ("" unknown)

    @property
    def readable(self) -> bool:
        return self.basis == READABLE

    def clause(self) -> str:
        """A parenthesis for the sentence or row that states the claim: '' when readable."""
        if self.readable:
            return ""
        return f" [{self.basis}: {self.why}]"

    def cell(self) -> str:
        """The table cell: the basis, and why when it is not readable."""
        return self.basis if self.readable else f"{self.basis}: {self.why}"


def content_sentence(row, lead: str | None = None) -> str:
    """Who is better on the items both models' replies were read on, from a content_table row."""
    n = int(row.n_both)
    if n == 0:
        return "no item has both replies read"
    a, b, diff = str(row.model_a), str(row.model_b), float(row.content_diff)
    ca, cb = float(row.content_a), float(row.content_b)
    if diff == 0:
        return f"on the {n} items both read they tie ({ca:.3f} each)"
    first, second, sf, ss = (a, b, ca, cb) if diff > 0 else (b, a, cb, ca)
    p = round(float(row.content_p), 12)  # 2 / 2**6 prints 0.0312 whatever float noise the test's sum carried
    return f"on the {n} items both read {first} is ahead {sf:.3f} vs {ss:.3f} (exact p = {p:.3g})"


ContentIndex = Mapping[tuple[str, str, str], Any]  # (config_id, model_a, model_b) -> its content_table row


def content_index(content: pd.DataFrame | None) -> dict[tuple[str, str, str], Any]:
    """The content table keyed by (config_id, model_a, model_b), names sorted: built once, so that a claim's
    reading is a look-up, not a scan of the table (a verdict asks for every configuration of every pair)."""
    if content is None or content.empty:
        return {}
    return {
        (str(r["config_id"]), str(r["model_a"]), str(r["model_b"])): SimpleNamespace(**r)
        for r in content.to_dict("records")
    }


def content_row(index: ContentIndex | None, config_id: str, x: str, y: str, names: tuple[str, str] | None = None):
    """One configuration and pair's content reading (either order of the two names), or None. `names` relabels
    its model_a and model_b (certify keys a model by its items, and prints its plain name)."""
    first, second = sorted((x, y))
    row = None if index is None else index.get((config_id, first, second))
    if row is None or names is None:
        return row
    return SimpleNamespace(**{**vars(row), "model_a": names[0], "model_b": names[1]})


def rests_on(
    config_id: str,
    lead: str,
    trail: str,
    bases: Mapping[tuple[str, str], CellBasis],
    content: ContentIndex | None = None,
) -> RestsOn:
    """What a lead of `lead` over `trail` on `config_id` rests on: the cells' bases (cell_bases), and whether the
    content reading (content_index of content_table) supports it. A tie or a lead of neither can pass lead/trail
    in either order."""
    cells = {m: bases.get((m, config_id)) for m in (lead, trail)}
    row = content_row(content, config_id, lead, trail)
    alternative = "" if row is None else content_sentence(row)
    parts = []
    for m, c in cells.items():
        if c is not None and c.basis != READABLE:
            parts.append(f"{m} {c.reason}" if c.reason else f"{m} parse rate {c.parse_rate:.2f}")
    found = {c.basis for c in cells.values() if c is not None}
    basis = FORMAT if FORMAT in found else UNINFORMATIVE if UNINFORMATIVE in found else READABLE
    if row is not None and int(row.n_both) > 0:
        diff = float(row.content_diff) * (1 if lead == str(row.model_a) else -1)
        if diff <= 0:  # the items both models' replies were read on do not support the lead
            basis = FORMAT if basis == READABLE else basis
            parts.append(f"{alternative}, not {lead}")
        elif basis != READABLE:
            parts.append(alternative)
    elif row is not None:
        basis = FORMAT if basis == READABLE else basis
        parts.append(alternative)
    return RestsOn(basis, "; ".join(parts), alternative)
