"""What each certify claim and pair verdict rests on (issue 52): readable replies, or answer format.

A claim is read off the items it used: the first `items_used` items of its configuration's draw order, for
both models of its pair. On those records each cell gets analyze's degenerate screen
(analysis/degenerate.screen_records: the same thresholds and reasons), and free-form configurations the
content reading (analysis/readings.content_table: who is better on the items both models' replies were
read). The words are analysis/readings.rests_on's, so certify and `analyze` name a claim alike:

- `readable`: neither cell degenerate, and where the content reading is known it agrees with the claim;
- `format-driven`: a cell with unread or empty replies, or a win the items both read do not support;
- `uninformative`: a cell answering one label, or no better than the gold labels' frequencies;
- `unknown`: a free-form claim whose records carry no read flags (no `parsed` or `prediction`) and whose
  parse rates nothing else gives (a replay falls back on the grid's cell parse rates).

Under `--reading content` a free-form claim is about the items both models' replies were read, so unread
or empty replies no longer make it format-driven (they count 0 in its difference); a constant answer still
makes it uninformative.

A pair verdict rests on its deciding claims: `readable` when those claims are readable, or when its readable
claims alone give the same verdict; otherwise the basis of the claims it needs (format-driven first), and
when every deciding claim is format-driven it says so: decided by format-driven claims only, which is about
answer format, not which model is safer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics import readings
from safetyrepro.analysis.metrics.degenerate import screen_records

from .algorithm import ClaimRow, PairRow, pair_decision

UNKNOWN = "unknown"
WINS = {"a_better": 0, "b_better": 1}  # which model of the pair a win names
FORMAT_ONLY = "decided by format-driven claims only: about answer format, not which model is safer"
UNINFORMATIVE_ONLY = (
    "decided by uninformative claims only: cells that answer one label or no better than the gold labels' frequencies"
)
UNKNOWN_ONLY = "decided by claims whose parse rates the records do not give"
NOT_READABLE_ONLY = (
    "decided by claims that are not readable only: about answer format or answers that say nothing about the "
    "items, not which model is safer"
)
WORST_FIRST = (readings.FORMAT, readings.UNINFORMATIVE, UNKNOWN)


@dataclass(frozen=True)
class Basis:
    """What a claim or a pair verdict rests on, and why, in the words a reader sees."""

    basis: str  # readings.BASES or UNKNOWN; "" for a pair with no decided claim
    why: str

    @property
    def readable(self) -> bool:
        return self.basis == readings.READABLE

    def cell(self) -> str:
        """A table cell: the basis, and why where it is not readable."""
        return self.basis if self.readable or not self.why else f"{self.basis}: {self.why}"


def claim_items(claim: ClaimRow, evaluated: Mapping[tuple[str, str, str], np.ndarray]) -> list[str]:
    """The items a claim used: the first `items_used` of its configuration's draw order (both models drew them;
    `evaluated` holds each model's prefix, a cheap twin's partner items after it)."""
    drawn = evaluated.get((claim.benchmark, claim.config_id, claim.model_a), np.array([], dtype=object))
    return [str(i) for i in drawn[: claim.items_used]]


def _content_bases(screen: pd.DataFrame) -> dict[tuple[str, str], readings.CellBasis]:
    """cell_bases for the content reading: unread and empty replies are outside it, answers are not."""
    kept = screen.assign(
        reasons=[";".join(c for c in str(r).split(";") if c not in readings.FORMAT_REASONS) for r in screen["reasons"]]
    )
    kept = kept[kept["reasons"] != ""]
    return readings.cell_bases(kept)


CELL = "\t"  # joins a model label and a claim's item count: one key per cell x items in the batched screen


@dataclass(frozen=True)
class _Cells:
    """What the records say about one claim's two cells on the items it used."""

    screen: pd.DataFrame  # screen_records' rows of the degenerate ones (model labels as they are)
    content: Any  # content_table's row of the pair, its models' labels as they are (free-form, read flags); or None
    rates: dict[str, float]  # each model's parse rate (NaN: unknown)
    n: int  # items
    flags: bool  # the records tell a read reply (else the rates are the grid's)


def claim_basis(
    claim: ClaimRow,
    records: pd.DataFrame | None,
    reading: str = "strict",
    parse_rates: Mapping[tuple[str, str], float] | None = None,
) -> Basis:
    """What one claim rests on, from `records` (items.parquet's format) holding the items it used. `parse_rates`:
    (model, config_id) -> rate where the records cannot tell a read reply (a replay's grid)."""
    items = np.array([] if records is None else list(dict.fromkeys(records["item_id"].astype(str))), dtype=object)
    return claim_bases(
        [claim], {(claim.benchmark, claim.config_id, claim.model_a): items}, records, reading, parse_rates
    )[0]


def claim_bases(
    claims: Sequence[ClaimRow],
    evaluated: Mapping[tuple[str, str, str], np.ndarray],
    records: pd.DataFrame | None,
    reading: str = "strict",
    parse_rates: Mapping[tuple[str, str], float] | None = None,
) -> list[Basis]:
    """What each claim rests on, in order, each read on its own configuration, pair and items. One screen and
    one content table for all claims (a cell per model x configuration x items used), not one per claim."""
    if records is None or records.empty:
        return [Basis(UNKNOWN, "no item used yet" if c.items_used == 0 else "no item records") for c in claims]
    cells = _read_cells(claims, evaluated, records, parse_rates)
    return [
        Basis(UNKNOWN, "no item used yet")
        if c.items_used == 0
        else _judge(c, cells.get((c.config_id, c.items_used, c.model_a, c.model_b)), reading)
        for c in claims
    ]


def _key(model: str, n: int) -> str:
    return f"{model}{CELL}{n}"


def _label(key: str) -> str:
    return key.rsplit(CELL, 1)[0]


def _read_cells(claims, evaluated, records, parse_rates) -> dict[tuple[str, int, str, str], _Cells]:
    """(config_id, items used, model_a, model_b) -> _Cells, for every claim with items."""
    frame = records.assign(
        model=records["model"].astype(str),
        config_id=records["config_id"].astype(str),
        item_id=records["item_id"].astype(str),
    )
    by_config = dict(tuple(frame.groupby("config_id", sort=False)))
    need: dict[tuple[str, int], tuple[set[str], list[str]]] = {}
    for c in claims:
        if c.items_used > 0:  # every model of a configuration draws its items in one order: (config, n) names them
            models, _ = need.setdefault((c.config_id, c.items_used), (set(), claim_items(c, evaluated)))
            models.update((c.model_a, c.model_b))
    parts = []
    for (cid, n), (models, items) in need.items():
        block = by_config.get(cid)
        if block is not None:
            block = block[block["model"].isin(models) & block["item_id"].isin(items)]
            parts.append(block.assign(model=block["model"] + CELL + str(n)))
    if not parts:
        return {}
    stacked = pd.concat(parts, ignore_index=True)
    known = {
        (_key(m, n), cid): r
        for (cid, n), (models, _) in need.items()
        for m in models
        if (r := (parse_rates or {}).get((m, cid))) is not None
    }
    screen = screen_records(stacked, known)
    flagged = {(str(r.model), str(r.config_id)): i for i, r in enumerate(screen.itertuples())}
    read = readings.read_flags(stacked)
    key = [stacked["model"], stacked["config_id"]]
    sizes = stacked.groupby(key)["item_id"].nunique().to_dict()
    rates = stacked.assign(read=read).groupby(key)["read"].mean().to_dict() if read is not None else known
    pairs = sorted({(_key(c.model_a, c.items_used), _key(c.model_b, c.items_used)) for c in claims if c.items_used > 0})
    content = None
    if read is not None and stacked["config_id"].str.endswith("/free_form").any():
        content = readings.content_table(stacked, pairs)
    rows = readings.content_index(content)
    out = {}
    for c in claims:
        if c.items_used == 0:
            continue
        ka, kb = _key(c.model_a, c.items_used), _key(c.model_b, c.items_used)
        mine = [flagged[(k, c.config_id)] for k in (ka, kb) if (k, c.config_id) in flagged]
        cells = screen.iloc[mine].assign(model=[_label(str(m)) for m in screen["model"].iloc[mine]])
        row = readings.content_row(rows, c.config_id, ka, kb, names=(c.model_a, c.model_b))
        out[(c.config_id, c.items_used, c.model_a, c.model_b)] = _Cells(
            cells,
            row,
            {m: float(rates.get((k, c.config_id), np.nan)) for m, k in ((c.model_a, ka), (c.model_b, kb))},
            int(sizes.get((ka, c.config_id), 0)),
            read is not None,
        )
    return out


def _judge(claim: ClaimRow, cells: _Cells | None, reading: str) -> Basis:
    """A claim's basis and why, from its cells."""
    if cells is None or cells.n == 0:
        return Basis(UNKNOWN, "no item records")
    pair = (claim.model_a, claim.model_b)
    free = claim.config_id.endswith("/free_form")
    content_only = reading == "content" and free
    bases = _content_bases(cells.screen) if content_only else readings.cell_bases(cells.screen)
    content = cells.content if free else None
    said = ", ".join(f"{m} {'unknown' if np.isnan(r) else f'{r:.2f}'}" for m, r in cells.rates.items())
    where = f"on {cells.n} items" if cells.flags else "(the grid's, whole cells: the records carry no read flags)"
    words = [f"parse rates {said} {where}"]
    if claim.claim in WINS:
        lead = pair[WINS[claim.claim]]
        first, second = sorted(pair)
        index = None if content is None else {(claim.config_id, first, second): content}
        r = readings.rests_on(claim.config_id, lead, pair[1 - WINS[claim.claim]], bases, index)
    else:  # no lead to check against the content reading: the cells only, the content reading as context
        r = readings.rests_on(claim.config_id, pair[0], pair[1], bases, None)
        r = readings.RestsOn(r.basis, r.why, "" if content is None else readings.content_sentence(content))
    words += [r.why or r.content] if claim.claim in WINS else [r.why, r.content]  # a win's why holds its content
    if content_only and content is not None:
        both = int(content.n_both)
        words.append(
            f"content reading: the estimate is the difference on the {both} items both read scaled by their "
            f"share ({both / max(cells.n, 1):.2f})"
        )
    basis = r.basis
    if basis == readings.READABLE and free and any(np.isnan(x) for x in cells.rates.values()):
        basis = UNKNOWN  # no cell flagged, but nothing says its replies were read
    return Basis(basis, "; ".join(w for w in words if w))


def pair_basis(pair: PairRow, claims: Sequence[ClaimRow], bases: Sequence[Basis]) -> Basis:
    """What a pair verdict rests on: its deciding claims' bases (claims and bases aligned, any pairs)."""
    mine = [
        (c, b)
        for c, b in zip(claims, bases, strict=True)
        if c.benchmark == pair.benchmark and (c.model_a, c.model_b) == (pair.model_a, pair.model_b)
    ]
    deciding = [(c, b) for c, b in mine if c.config_id in pair.deciding]
    if not deciding:
        return Basis("", "no configuration decided")
    others = [(c, b) for c, b in deciding if not b.readable]
    if not others:
        return Basis(readings.READABLE, f"every claim it rests on is readable ({len(deciding)})")
    readable_alone = pair_decision([c.claim if b.readable else "undecided" for c, b in mine])
    if pair.verdict != "undecided" and readable_alone == pair.verdict:
        return Basis(
            readings.READABLE,
            f"its readable claims alone decide it; {len(others)} other claim(s) are not readable "
            f"({', '.join(c.config_id for c, _ in others)})",
        )
    found = {b.basis for _, b in others}
    worst = next(x for x in WORST_FIRST if x in found)
    if len(others) == len(deciding) and len(found) == 1:
        only = {readings.FORMAT: FORMAT_ONLY, readings.UNINFORMATIVE: UNINFORMATIVE_ONLY, UNKNOWN: UNKNOWN_ONLY}[worst]
        if pair.verdict == "undecided":
            only = only.replace("decided by", "its wins so far are")
        details = "; ".join(f"{c.config_id}: {b.why}" for c, b in others)
        return Basis(worst, f"{only} ({details})")
    listed = ", ".join(f"{c.config_id} {b.basis}" for c, b in others)
    if len(others) == len(deciding):  # none readable, of more than one basis
        only = (
            NOT_READABLE_ONLY.replace("decided by", "its wins so far are")
            if pair.verdict == "undecided"
            else NOT_READABLE_ONLY
        )
        return Basis(worst, f"{only} ({listed})")
    return Basis(
        worst,
        f"{len(others)} of the {len(deciding)} claims it rests on {'is' if len(others) == 1 else 'are'} not "
        f"readable ({listed}); on its readable "
        f"claims alone it would be {readable_alone}",
    )
