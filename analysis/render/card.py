"""The GRID card (paper App. B): the disclosure record that travels with a result. It says which
models (and weight hashes), which items, which envelope (and the rules file's hash), which package
versions produced the grid, the headline numbers, and the caveats a reader needs before quoting
them. Run metadata comes from `run.json` beside the grid when it is there."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from safetyrepro.analysis.metrics.chance import chance_rho_flip
from safetyrepro.analysis.metrics.readings import (
    FORMAT,
    READABLE,
    READINGS_NOTE,
    UNINFORMATIVE,
    RestsOn,
    content_sentence,
)
from safetyrepro.analysis.metrics.slices import PARSE_CLEAN, PARSE_CLEAN_MIN, envelope_scope
from safetyrepro.analysis.paired.detectable import detectable_sentences
from safetyrepro.analysis.paired.significance import CORRECTIONS, PAIR_NULL, TEST_NAME
from safetyrepro.analysis.pipeline import Analysis
from safetyrepro.analysis.tables import TABLES
from safetyrepro.atomic import atomic_write
from safetyrepro.grid.direction import direction
from safetyrepro.grid.exact import EXACT_RULE
from safetyrepro.grid.grid_io import read_table
from safetyrepro.markdown import md_code, md_escape, md_prose

ANALYSIS_PACKAGES = ("safetyrepro", "numpy", "pandas", "scipy", "statsmodels", "lightgbm", "shap", "matplotlib")


def read_run_metadata(grid_path: Path) -> tuple[dict | None, str]:
    """(run.json contents or None, a sentence on where it came from)."""
    path = grid_path.parent / "run.json"
    if not path.is_file():
        return (
            None,
            f"no run.json beside {grid_path.name}: models' weight hashes, item-subset ids, package versions "
            f"and the machine are unknown for this grid",
        )
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, f"run.json beside the grid could not be read ({e}); run metadata is unknown"
    if not isinstance(meta, dict):
        return None, "run.json beside the grid is not a JSON object; run metadata is unknown"
    return meta, f"read from {path}"


def _versions() -> dict[str, str]:
    out = {}
    for name in ANALYSIS_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _caveats(a: Analysis, run_note: str, meta: dict | None) -> list[str]:
    out = []
    full = a.rho_flip_detail[a.rho_flip_detail["slice"] == "full"]
    sat = a.rho_flip_max[a.rho_flip_max["saturated"]]
    out.append(
        "Ceiling: rho_flip can never exceed floor(|C|/2)/|C| (0.5 at even |C|, less at odd |C|); compare values "
        "only at equal |C|. "
        + (
            f"Saturated (a reversal exists, its size is unknown): {', '.join(sat['benchmark'] + '/' + sat['slice'])}."
            if len(sat)
            else "No benchmark/slice maximum sits at its ceiling."
        )
    )
    sizes = sorted(set(int(n) for n in full["n_configs"]))
    out.append(
        "Chance: coin-flip verdicts (exchangeable scores, no ties) give rho_flip E[min(K, |C|-K)]/|C| with "
        "K ~ Binomial(|C|, 1/2) for one pair ("
        + ", ".join(f"{chance_rho_flip(n):.3f} at |C| = {n}" for n in sizes)
        + ") and more for the maximum over pairs (chance_max in the headline); read a value against these, not "
        "against 0.5."
    )
    odd = [b for b in a.grid.benchmarks if not direction(b).monotone]
    if odd:
        out.append(
            "Direction: " + ", ".join(f"{b} ({direction(b).label})" for b in odd) + ": rho_flip.csv and "
            "orderings.csv order by raw score, highest first, whichever way is better; the better reading is in "
            "the headline's *_better columns and the detail tables."
        )
    not_full = [
        f"{b}: {phrase}"
        for b in a.grid.benchmarks
        for is_full, phrase in [envelope_scope(a.grid, a.rules, b)]
        if not is_full
    ]
    if not_full:
        out.append(
            "Scope: slice `full` is every configuration this grid holds, not the full envelope, for "
            + "; ".join(not_full)
            + "."
        )
    if not a.degenerate_cells.empty:
        d = a.degenerate_cells
        out.append(
            f"Degenerate cells: {len(d)} {'cell parses' if len(d) == 1 else 'cells parse'} under "
            f"{PARSE_CLEAN_MIN} or return mostly empty outputs ("
            + ", ".join(f"{r.model} {r.config_id} score {r.score:.3f}, {r.reason}" for r in d.head(5).itertuples())
            + ("" if len(d) <= 5 else ", ...")
            + f"); read SDI, CFR and orderings on slice `{PARSE_CLEAN}` beside "
            "`full` (degenerate_effects.csv)."
        )
    tied = full[full["n_zero"] > 0]
    out.append(
        "Ties: equal scores count for neither model but stay in the denominator, so they lower rho_flip. "
        + (
            f"{len(tied)} pair(s) on slice full have ties: "
            + ", ".join(f"{r.benchmark} {r.model_a}/{r.model_b} ({r.n_zero})" for r in tied.itertuples())
            + "."
            if len(tied)
            else "No tied configuration on slice full."
        )
    )
    m = a.rho_flip_max.set_index(["benchmark", "slice"])["rho_flip_max"]
    mixed = []
    for b in a.grid.benchmarks:
        if (b, "free_form") in m.index and (b, "logprob") in m.index and (b, "full") in m.index:
            mixed.append(
                f"{b} {m[(b, 'full')]:.3f} (free-form {m[(b, 'free_form')]:.3f}, logprob {m[(b, 'logprob')]:.3f})"
            )
    if mixed:
        out.append(
            "Mixed scoring paths: slice full mixes free-form and logprob scoring, which measure different "
            "objects; part of a reversal on it can come from switching path. Full vs single-path maxima: "
            + "; ".join(mixed)
            + "."
        )
    pr = a.grid.cells.groupby("benchmark")["parse_rate"].min()
    clean = a.rho_flip_max[a.rho_flip_max["slice"] == PARSE_CLEAN].set_index("benchmark")["n_configs"]
    full_n = {b: len(a.grid.config_ids(b)) for b in a.grid.benchmarks}
    low = [
        f"{b} min {pr[b]:.2f}, {full_n[b] - int(clean.get(b, 0))} of {full_n[b]} configs below {PARSE_CLEAN_MIN}"
        for b in a.grid.benchmarks
        if pr[b] < PARSE_CLEAN_MIN
    ]
    out.append(
        "Parse rates: "
        + (
            "; ".join(low) + f"; see the {PARSE_CLEAN} slice."
            if low
            else f"every model parses at least {PARSE_CLEAN_MIN:.0%} of items on every configuration."
        )
    )
    out.append(
        "Items: one fixed item subset per benchmark; the configuration bootstrap resamples configurations and "
        "describes sensitivity to the envelope, the item bootstrap and the significance tests (with item records) "
        "describe uncertainty over items of that subset, neither is uncertainty about a population of models."
    )
    out.append(
        f"Precision and package are held fixed ({a.grid.precision}, {a.grid.package}); this card says nothing "
        "about other precisions or packages."
    )
    out.extend(a.warnings)
    if meta is None:
        out.append(run_note[0].upper() + run_note[1:] + ".")
    elif meta.get("rules_sha256") and meta["rules_sha256"] != a.rules.sha256:
        out.append(
            f"The grid was run under rules {meta['rules_sha256'][:12]}... but analysed under "
            f"{a.rules.sha256[:12]}...; slices and tiers may not be what the run used."
        )
    return out


def headline(a: Analysis) -> pd.DataFrame:
    m = a.rho_flip_max[a.rho_flip_max["slice"] == "full"].set_index("benchmark")
    o = a.orderings_detail[a.orderings_detail["slice"] == "full"].set_index("benchmark")
    t = a.concordance[a.concordance["slice"] == "full"].set_index("benchmark")
    sdi = a.sdi[a.sdi["slice"] == "full"].groupby("benchmark")["sdi"].max()
    rows = []
    for b in a.grid.benchmarks:
        if b not in m.index:
            continue
        rows.append(
            {
                "benchmark": b,
                "better": direction(b).label,
                "n_configs": int(m.at[b, "n_configs"]),
                "rho_flip_max": float(m.at[b, "rho_flip_max"]),
                "pairs": m.at[b, "pairs"],
                "ceiling": float(m.at[b, "ceiling"]),
                "chance_max": float(m.at[b, "chance_max"]),
                "saturated": bool(m.at[b, "saturated"]),
                "n_orderings": int(o.at[b, "n_orderings"]),
                "n_possible": int(o.at[b, "n_possible"]),
                "rho_flip_max_better": float(m.at[b, "rho_flip_max_better"]),
                "pairs_better": m.at[b, "pairs_better"],
                "n_orderings_better": int(o.at[b, "n_orderings_better"]),
                "tau_r": float(t.at[b, "tau_r"]),
                "sdi_max": float(sdi[b]),
            }
        )
    return pd.DataFrame(rows)


MAX_VERDICT_PAIRS = 10  # pairs per benchmark in the verdict; the rest are in rho_flip_detail.csv
TWO_READINGS = (
    "Two readings of a free-form comparison. The strict score (an unread reply counts as wrong) is the paper's "
    "score: it decides every lead, rho_flip and ordering here. The content reading compares the two models only on "
    "the items where both models' replies were read, paired by item (content_readings.csv): it is conditional on "
    "being read by both, so it can differ from the strict score, which also counts every unread reply against its "
    "model. A strict lead the content reading does not support is about answer format, not about which model is "
    "safer."
)

VERDICT_COLUMNS = (
    "benchmark",
    "leader",
    "other",
    "leader_ahead",
    "other_ahead",
    "rho_flip",
    "confirmed_wins_holm",
    "rests_on",
    "content_reading",
)
Win = tuple[str, RestsOn]  # a configuration and what a lead on it rests on


@dataclass(frozen=True)
class PairVerdict:
    """One pair on one benchmark as the verdict states it: slice full, the benchmark's better direction, the
    model ahead on more configurations first, and what each of its claims over a configuration rests on."""

    benchmark: str
    model_a: str
    model_b: str
    lead: str
    trail: str
    won: int
    lost: int
    ties: int
    n_configs: int
    rho_flip: float  # rho_flip_better
    leads: tuple[Win, ...]  # where `lead` is strictly ahead, largest lead first
    reversals: tuple[Win, ...]  # where `trail` is strictly ahead, largest first
    confirmed: dict[str, tuple[Win, ...]] | None  # per model, its wins that survive Holm; None without item tests


def _holm_wins(a: Analysis) -> dict[tuple[str, str, str], dict[str, list[str]]] | None:
    """(benchmark, model_a, model_b) -> per model, the configurations of slice full whose win survives Holm in
    the better direction (item_tests.csv's winner_holm_better: the same wins significant_flips.csv counts)."""
    t = a.item_tests
    if t is None or t.empty:
        return None
    t = t[t["slice"] == "full"]
    out = {}
    for (b, x, y), g in t.groupby(["benchmark", "model_a", "model_b"], sort=False):
        winner = g["winner_holm_better"].astype(str)
        out[(str(b), str(x), str(y))] = {str(m): [str(c) for c in g.loc[winner == str(m), "config_id"]] for m in (x, y)}
    return out


def _pair_verdict(rests: Callable[[str, str, str], RestsOn], r, better: pd.DataFrame, holm: dict | None) -> PairVerdict:
    plus, minus = int(r.n_plus_better), int(r.n_minus_better)
    lead, trail = (str(r.model_a), str(r.model_b)) if plus >= minus else (str(r.model_b), str(r.model_a))
    gap = (better[lead] - better[trail]).sort_values(ascending=False, kind="stable")
    wins = None if holm is None else holm.get((str(r.benchmark), str(r.model_a), str(r.model_b)))
    return PairVerdict(
        str(r.benchmark),
        str(r.model_a),
        str(r.model_b),
        lead,
        trail,
        max(plus, minus),
        min(plus, minus),
        int(r.n_zero_better),
        int(r.n_configs),
        float(r.rho_flip_better),
        tuple((c, rests(c, lead, trail)) for c, d in gap.items() if d > 0),
        tuple((c, rests(c, trail, lead)) for c, d in gap[::-1].items() if d < 0),
        None
        if wins is None
        else {m: tuple((c, rests(c, m, o)) for c in wins[m]) for m, o in ((lead, trail), (trail, lead))},
    )


def pair_verdicts(a: Analysis) -> list[PairVerdict]:
    """Per benchmark, the pairs that reverse most first (up to MAX_VERDICT_PAIRS): the verdict's order."""
    detail = a.rho_flip_detail[a.rho_flip_detail["slice"] == "full"]
    holm, rests = _holm_wins(a), a.rests_on
    out = []
    for b in a.grid.benchmarks:
        rows = detail[detail["benchmark"] == b].sort_values(
            ["rho_flip_better", "model_a", "model_b"], ascending=[False, True, True]
        )
        if rows.empty:
            continue
        better = direction(b).better_value(a.grid.matrix(b))
        out += [_pair_verdict(rests, r, better, holm) for r in rows.head(MAX_VERDICT_PAIRS).itertuples()]
    return out


def basis_tally(wins: Sequence[Win], noun: str) -> str:
    """What a set of claims rests on, counted: 'readable: 40 of 43 leads, format-driven: 3 of 43 leads'."""
    counts = Counter(r.basis for _, r in wins)
    n = len(wins)
    return ", ".join(f"{b}: {counts[b]} of {n} {noun}" for b in (READABLE, FORMAT, UNINFORMATIVE) if counts[b])


def _short(config_id: str) -> str:
    return config_id.split("/", 1)[1]


def _content_cell(pv: PairVerdict, rows: dict | None) -> str:
    """Where the content reading (the items both models' replies were read on) differs from the strict leads,
    each side's largest such lead named with what it rests on and the readable alternative."""
    if rows is None:
        return "n/a (no item records that say which replies were read)"
    first, second = sorted((pv.model_a, pv.model_b))
    key = (first, second)
    parts, known_any = [], False
    for who, leads in ((pv.lead, pv.leads), (pv.trail, pv.reversals)):
        known = [(c, rests, rows[(c, first, second)]) for c, rests in leads if (c, first, second) in rows]
        if not known:
            continue
        known_any = True
        sign = 1 if who == key[0] else -1  # content_diff is model_a - model_b
        against = [(c, s, r) for c, s, r in known if int(r.n_both) > 0 and sign * float(r.content_diff) <= 0]
        unread = [c for c, _, r in known if int(r.n_both) == 0]
        if against:
            c, s, r = against[0]  # the largest strict lead the items both read do not support
            parts.append(
                f"not {who} on {len(against)} of its {len(known)} free-form leads "
                f"({_short(c)}, {s.basis}: {content_sentence(r)})"
            )
        if unread:
            parts.append(f"no item read by both on {len(unread)} of {who}'s {len(known)} free-form leads")
    if parts:
        return "; ".join(parts)
    return "agrees on every free-form lead" if known_any else "n/a (no free-form lead)"


def verdict_table(a: Analysis, verdicts: Sequence[PairVerdict] | None = None) -> pd.DataFrame:
    """The compact verdict: one row per benchmark x pair in the verdict's order, who leads, how often it
    reverses, what survives the item tests, and what the leads and the confirmed wins rest on."""
    verdicts = pair_verdicts(a) if verdicts is None else verdicts
    content = None if a.content_readings is None else a.content_by_key  # None: no records say what was read
    rows = []
    for pv in verdicts:
        rests = [basis_tally(pv.leads, "leads") or "no strict lead"]
        if pv.confirmed is None:
            confirmed = "n/a (no item records)"
        else:
            confirmed = f"{pv.lead} {len(pv.confirmed[pv.lead])}, {pv.trail} {len(pv.confirmed[pv.trail])}"
            wins = pv.confirmed[pv.lead] + pv.confirmed[pv.trail]
            if wins:
                rests.append(basis_tally(wins, "confirmed wins"))
        rows.append(
            {
                "benchmark": pv.benchmark,
                "leader": pv.lead,
                "other": pv.trail,
                "leader_ahead": f"{pv.won} of {pv.n_configs}",
                "other_ahead": pv.lost,
                "rho_flip": pv.rho_flip,
                "confirmed_wins_holm": confirmed,
                "rests_on": "; ".join(rests),
                "content_reading": _content_cell(pv, content),
            }
        )
    return pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))


VERDICT_HOW_TO_READ = (
    "one row per benchmark and pair (the pairs the sentences below name, in their order), on slice `full` in the "
    "benchmark's better direction: leader is ahead on more configurations than other (leader_ahead of all, other "
    "on other_ahead) on these items, rho_flip the share on which the lead reverses: both read this sample's "
    "scores; confirmed_wins_holm the configurations whose win survives Holm over the pair's family, per model: a "
    "claim about the models, the items as draws (the seeds, the few-shot draw and the templates held fixed). "
    + READINGS_NOTE
    + "; rests_on counts the leader's leads and the confirmed wins by what they rest on. content_reading says "
    "where the content reading names the other model (the readable alternative)."
)


def _significance_pairs(a: Analysis) -> list[dict]:
    """Per benchmark x pair on slice full: rho_flip beside its two references and the confirmatory count."""
    f = a.significant_flips
    if f is None or f.empty:
        return []
    rows = f[(f["slice"] == "full") & (f["correction"] == "holm")]
    keep = [
        "benchmark",
        "model_a",
        "model_b",
        "n_configs",
        "rho_flip",
        "chance",
        "rho_flip_null_mean",
        "p_consistent",
        "p_consistent_better",
        "rho_flip_sig",
        "rho_flip_sig_better",
    ]
    return rows[keep].to_dict(orient="records")


def _registered_tables(a: Analysis) -> list[dict]:
    """The card's record of the tables registered through analysis/tables.py: file, rows, and its line."""
    out = []
    for name, table in a.registered.items():
        spec = TABLES.get(name)
        if spec is not None:
            rows = None if table is None else len(table)
            out.append(
                {"name": name, "file": spec.file if table is not None else None, "rows": rows, "says": spec.card}
            )
    return out


def _card_registered(card: dict) -> list[str]:
    """The registered tables, where the analysis has any."""
    if not card.get("registered_tables"):
        return []
    lines = ["", "## Registered tables", ""]
    for t in card["registered_tables"]:
        rows = f"{t['rows']} row{'s' if t['rows'] != 1 else ''}"
        where = f"`{t['file']}`, {rows}" if t["file"] else "nothing to show for this grid"
        lines.append(f"- {t['says']} ({t['name']}: {where})")
    return lines


def grid_card(a: Analysis, grid_path: Path) -> dict:
    meta, run_note = read_run_metadata(grid_path)
    meta_models = {str(m.get("label")): m for m in (meta or {}).get("models", []) if isinstance(m, dict)}
    weights = _grid_weights(grid_path, a.grid)
    subsets = (meta or {}).get("item_subsets", {}) or {}
    n_items = a.grid.cells.groupby("benchmark")["n_items"].agg(lambda s: sorted(set(int(v) for v in s)))
    slices = {}
    for name in a.options.slices:
        rows = a.rho_flip_max[a.rho_flip_max["slice"] == name]
        slices[name] = {r.benchmark: int(r.n_configs) for r in rows.itertuples()}
    return {
        "card": "SafetyRepro GRID card",
        "grid": {
            "path": str(grid_path),
            "sha256": _file_sha256(grid_path),
            "cells_analysed": len(a.grid.cells),
            "precision": a.grid.precision,
            "package": a.grid.package,
        },
        "run_metadata": {"found": meta is not None, "note": run_note},
        "models": [_model_entry(m, meta_models.get(m, {}), a.grid, weights.get(m)) for m in a.grid.models],
        "benchmarks": [
            {
                "name": b,
                "n_configs": len(a.grid.config_ids(b)),
                "scope": envelope_scope(a.grid, a.rules, b)[1],
                "better": direction(b).label,
                "item_subset": subsets.get(b),
                "n_items": n_items[b],
            }
            for b in a.grid.benchmarks
        ],
        "envelope": {
            "rules_file": a.rules.path,
            "rules_sha256": a.rules.sha256,
            "run_rules_sha256": (meta or {}).get("rules_sha256"),
            "rules_match": None
            if not (meta or {}).get("rules_sha256")
            else (meta or {})["rules_sha256"] == a.rules.sha256,
            "axes": {k: list(v) for k, v in a.rules.axes.items()},
            "stress": {k: list(v) for k, v in a.rules.stress.items()},
            "constraints": [c.name for c in a.rules.constraints],
            "slices": slices,
        },
        "packages": (meta or {}).get("packages"),
        "analysis_packages": _versions(),
        "machine": (meta or {}).get("machine"),
        "analysis": {
            "bootstrap_resamples": a.options.n_resamples,
            "seed": a.options.seed,
            "thetas": list(a.options.thetas),
            "ties": EXACT_RULE,
            "item_records": a.options.items_path if a.item_tests is not None else None,
            "significance": {
                "test": TEST_NAME,
                "corrections": CORRECTIONS,
                "alpha": a.options.alpha,
                "family": "benchmark x slice x model pair",
                "confirmatory": "holm",
                "pair_null": PAIR_NULL,
                "pairs": _significance_pairs(a),
            }
            if a.item_tests is not None
            else None,
        },
        "ties_between_candidates": {
            "tie_rule": (meta or {}).get("tie_rule") or "unknown",
            "tie_rate_in_grid": a.tie_rates is not None,
            "cells_with_ties": 0 if a.tie_rates is None else len(a.tie_rates),
            "max_tie_rate": None if a.tie_rates is None or a.tie_rates.empty else float(a.tie_rates["tie_rate"].max()),
        },
        "cells_left_out": a.excluded_cells.to_dict(orient="records"),
        "degenerate_cells": a.degenerate_cells.to_dict(orient="records"),
        "degenerate_effects": a.degenerate_effects.to_dict(orient="records"),
        "headline": headline(a).to_dict(orient="records"),
        "verdict": {
            "readings": TWO_READINGS,
            "how_to_read": VERDICT_HOW_TO_READ,
            "pairs": verdict_table(a).to_dict(orient="records"),
        },
        "detectable": {
            "sentences": detectable_sentences(a.detectable),
            "pairs": []
            if a.detectable is None
            else a.detectable[a.detectable["slice"] == "full"].to_dict(orient="records"),
        },
        "caveats": _caveats(a, run_note, meta),
        **({"registered_tables": _registered_tables(a)} if a.registered else {}),
    }


def _grid_weights(grid_path: Path, grid) -> dict[str, str]:
    """model -> the one weights sha256 the grid's optional weights_sha256 column gives its cells of the
    analysed (precision, package) group; a model with none, or with two, is left out."""
    try:
        raw = read_table(grid_path)
    except Exception:  # the card says what it can; the grid was read and checked before
        return {}
    if "weights_sha256" not in raw.columns:
        return {}
    raw = raw[(raw["precision"].astype(str) == grid.precision) & (raw["package"].astype(str) == grid.package)]
    out = {}
    for model, hashes in raw.groupby(raw["model"].astype(str))["weights_sha256"]:
        found = {str(h).strip() for h in hashes.dropna() if str(h).strip()}
        if len(found) == 1:
            out[model] = found.pop()
    return out


def _model_entry(label: str, recorded: dict, grid, grid_weights: str | None) -> dict:
    """What the card knows of one model: run.json's record, else what the grid itself holds. A sweep
    that found every cell of a model cached loads no model, and its run.json then keeps only the label;
    the grid's weights_sha256 column still names the weights, and when they are an embedded model's
    file the backend is SafetyRepro's engine running that model at the grid's precision."""
    entry = {
        "label": label,
        "weights_sha256": recorded.get("weights_sha256"),
        **{k: v for k, v in recorded.items() if k not in ("label", "weights_sha256")},
    }
    if entry["weights_sha256"] is None and grid_weights:
        entry["weights_sha256"] = grid_weights
        entry["weights_source"] = "the grid's weights_sha256 column (run.json has no record of the load)"
    if not isinstance(entry.get("backend"), dict) and entry["weights_sha256"]:
        try:
            from safetyrepro.adapters.catalogue.weights import EMBEDDED  # lazy: analysis reads no model
        except ImportError:
            EMBEDDED = {}
        same = [s for s in EMBEDDED.values() if s.sha256 == entry["weights_sha256"]]
        if same:
            entry["backend"] = {"kind": "engine", "spec": same[0].label, "precision": grid.precision}
            entry["backend_source"] = f"the embedded model {same[0].label} (its weights' sha256)"
    return entry


def machine_text(machine) -> str:
    """run.json's machine as a reader says it: "2 cores, 23.4 GiB, x86_64, Linux-..., Python 3.11.7"."""
    if not isinstance(machine, dict):
        return _cell(machine)
    m = dict(machine)
    parts = []
    cpus = m.pop("cpus", None)
    if cpus is not None:
        parts.append(f"{cpus} core{'s' if cpus != 1 else ''}")
    for key in ("memory_bytes", "memory"):
        mem = m.pop(key, None)
        if isinstance(mem, int | float) and not isinstance(mem, bool):
            parts.append(f"{mem / 2**30:.1f} GiB")
    for key in ("processor", "platform"):
        if m.get(key):
            parts.append(str(m.pop(key)))
    if m.get("python"):
        parts.append(f"Python {m.pop('python')}")
    parts += [f"{k} {v}" for k, v in m.items() if v not in (None, "")]
    return md_escape(", ".join(parts)) if parts else "unknown"


def _backend_cell(model: dict) -> str:
    backend = model.get("backend")
    if not isinstance(backend, dict):
        return "unknown"
    return (
        f"{md_escape(backend.get('kind', '?'))} {md_code(backend.get('spec', '?'))} "
        f"({md_escape(backend.get('precision', '?'))})"
    )


def _cell(v) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _metric(name: str, value) -> str:
    if value is None or value != value:  # NaN
        return "N/A"
    return str(int(value)) if name.startswith("n_") else f"{value:.3f}"


def _verdict_lines(verdict: dict | None) -> list[str]:
    """The verdict table: who leads each pair, what survives the item tests, and what it rests on."""
    if not verdict or not verdict.get("pairs"):
        return []
    columns = list(verdict["pairs"][0])
    lines = ["", "## Verdict", "", verdict["readings"], "", f"How to read: {verdict['how_to_read']}", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += [
        "| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else md_escape(str(v)) for v in row.values()) + " |"
        for row in verdict["pairs"]
    ]
    return lines


def _card_head(card: dict) -> list[str]:
    """The title and what the grid is: its file, rules and machine."""
    g, env = card["grid"], card["envelope"]
    lines = [
        f"# GRID card: {Path(g['path']).name}",
        "",
        "The disclosure record of this grid: what ran, under which rules, and what a reader must know before "
        "quoting its numbers.",
        "",
        f"- Grid: {md_code(g['path'])} (sha256 `{_cell(g['sha256'])}`), {g['cells_analysed']} cells analysed, "
        f"precision {md_code(g['precision'])}, package {md_code(g['package'])}",
        f"- Run metadata: {card['run_metadata']['note']}",
        f"- Rules file: `{env['rules_file']}` sha256 `{env['rules_sha256']}`"
        + (
            ""
            if env["rules_match"] is None
            else (
                " (matches run.json)"
                if env["rules_match"]
                else f" (run.json says `{env['run_rules_sha256']}`: MISMATCH)"
            )
        ),
        f"- Machine: {machine_text(card['machine'])}",
    ]
    return lines


def _card_models(card: dict) -> list[str]:
    """What ran each model and what its backend could not do as asked."""
    lines = [
        "",
        "## Models",
        "",
        "What ran each model (run.json: the backend's spec and the precision it reports) and what its backend "
        "cannot do as asked (greedy decoding, per-request seeds, log-likelihoods); a flagged model's cells mean "
        "what the flag says.",
        "",
        "| model | backend | weights sha256 | flags |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {md_escape(m['label'])} | {_backend_cell(m)} | {_cell(m['weights_sha256'])} | "
        f"{'; '.join(m.get('capability_flags') or []) or 'none'} |"
        for m in card["models"]
    ]
    return lines


def _card_benchmarks(card: dict) -> list[str]:
    """Each benchmark's configurations, direction, item subset and items per cell."""
    lines = [
        "",
        "## Benchmarks and items",
        "",
        "| benchmark | configurations | scope | better | item subset | items per cell |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {b['name']} | {b['n_configs']} | {b['scope']} | {b['better']} | {_cell(b['item_subset'])} | "
        f"{', '.join(map(str, b['n_items']))} |"
        for b in card["benchmarks"]
    ]
    return lines


def _card_envelope(card: dict) -> list[str]:
    """The envelope's axes, stress tier, constraints, and the configurations per slice."""
    env = card["envelope"]
    lines = [
        "",
        "## Envelope",
        "",
        "Axes: " + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in env["axes"].items()) + ".",
        "Stress tier: " + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in env["stress"].items()) + ".",
        "Constraints: " + "; ".join(env["constraints"]) + ".",
        "",
        "Configurations per slice (common to every model):",
        "",
        "| slice | " + " | ".join(b["name"] for b in card["benchmarks"]) + " |",
        "|---|" + "---|" * len(card["benchmarks"]),
    ]
    for name, counts in env["slices"].items():
        lines.append(f"| {name} | " + " | ".join(str(counts.get(b["name"], 0)) for b in card["benchmarks"]) + " |")
    return lines


def _card_headline(card: dict) -> list[str]:
    """The headline table and the verdict."""
    lines = [
        "",
        "## Headline",
        "",
        "rho_flip max is the largest share of configurations on which the less frequent winner of a model pair "
        "wins strictly (by raw score); ceiling is floor(|C|/2)/|C|; chance is what the maximum averages when "
        "every configuration ranks the models at random; orderings counts distinct model rankings reached by "
        "score. The better columns read the same in the benchmark's better direction.",
        "",
        "| benchmark | better | \\|C\\| | rho_flip max (pair) | ceiling | chance | orderings | rho_flip max, better "
        "| orderings, better | tau_R | SDI max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for h in card["headline"]:
        lines.append(
            f"| {h['benchmark']} | {h['better']} | {h['n_configs']} | {h['rho_flip_max']:.3f} "
            f"({md_escape(h['pairs'])}) | "
            f"{h['ceiling']:.3f}{' saturated' if h['saturated'] else ''} | {h['chance_max']:.3f} | "
            f"{h['n_orderings']}/{h['n_possible']} | {h['rho_flip_max_better']:.3f} ({md_escape(h['pairs_better'])}) | "
            f"{h['n_orderings_better']}/{h['n_possible']} | {h['tau_r']:.3f} | {h['sdi_max']:.3f} |"
        )
    lines += _verdict_lines(card.get("verdict"))
    return lines


def _card_detectable(card: dict) -> list[str]:
    """What the grid's items could detect."""
    lines: list[str] = []
    lines += ["", "## What this grid can detect", ""]
    lines += (
        [f"- {x}" for x in card["detectable"]["sentences"]]
        if card["detectable"]["sentences"]
        else ["- Not computed (no per-item records): what the grid can detect is unknown."]
    )
    return lines


def _card_cells(card: dict) -> list[str]:
    """The cells left out and the degenerate cells, with what they move."""
    lines: list[str] = []
    lines += ["", "## Cells left out and degenerate cells", ""]
    if card["cells_left_out"]:
        lines += [
            "Cells whose status is not ok enter no table:",
            "",
            "| status | model | benchmark | scoring | cells |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['status']} | {md_escape(r['model'])} | {r['benchmark']} | {r['scoring']} | {r['n_cells']} |"
            for r in card["cells_left_out"]
        ]
        lines.append("")
    else:
        lines += ["- Every cell in the grid has status ok (none left out).", ""]
    if card["degenerate_cells"]:
        lines += [
            f"Degenerate cells: parse rate under {PARSE_CLEAN_MIN}, mostly empty outputs, one label on nearly "
            "every parsed answer, or no better agreement with gold than the majority label (the "
            f"`{PARSE_CLEAN}` columns below leave out their configurations):",
            "",
            "| model | config | score | parse rate | reason | lowest of model | last in config |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {md_escape(r['model'])} | {md_escape(r['config_id'])} | {r['score']:.3f} | {r['parse_rate']:.3f} | "
            f"{r['reason']} | "
            f"{'yes' if r['lowest_of_model'] else 'no'} | {'yes' if r['last_in_config'] else 'no'} |"
            for r in card["degenerate_cells"]
        ]
        lines += [
            "",
            "What they move (slice full with them, parse_clean without):",
            "",
            "| benchmark | model | metric | full | parse_clean |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['benchmark']} | {md_escape(r['model'])} | {r['metric']} | {_metric(r['metric'], r['full'])} | "
            f"{_metric(r['metric'], r['parse_clean'])} |"
            for r in card["degenerate_effects"]
        ]
    else:
        lines.append(f"- No degenerate cell: every cell parses at least {PARSE_CLEAN_MIN:.0%} of items.")
    return lines


def _card_ties(card: dict) -> list[str]:
    """Exactly tied log-probability candidates."""
    lines: list[str] = []
    ties = card["ties_between_candidates"]
    lines += [
        "",
        "## Ties between logprob candidates",
        "",
        f"- Tie rule: {ties['tie_rule']}",
        "- Tie rates: "
        + (
            "not in the grid (no tie_rate column)"
            if not ties["tie_rate_in_grid"]
            else f"{ties['cells_with_ties']} cells with exactly tied top candidates"
            + (f", highest tie_rate {ties['max_tie_rate']:.3f}" if ties["max_tie_rate"] else "")
        ),
    ]
    return lines


def _card_statistics(card: dict) -> list[str]:
    """The significance tests and the bootstrap."""
    lines: list[str] = []
    sig = card["analysis"]["significance"]
    lines += [
        "",
        "## Statistics",
        "",
        f"- Significant flips: {sig['test']}; p-values adjusted per {sig['family']} with "
        + " and ".join(f"{k} ({v})" for k, v in sig["corrections"].items())
        + f", alpha {sig['alpha']}; "
        f"a flip is claimed on {sig.get('confirmatory', 'holm')} only; each pair's null reference: "
        f"{sig.get('pair_null', 'not computed')}"
        if sig
        else "- Significant flips: not computed (no per-item records)",
        f"- Bootstrap resamples {card['analysis']['bootstrap_resamples']}, seed {card['analysis']['seed']}",
    ]
    if sig and sig.get("pairs"):
        lines += [
            "",
            'rho_flip and the pair null read the raw score; p_consistent is the p-value of "these two models '
            'differ consistently" (the share of label-swap draws at or below the observed rho_flip), its '
            "better column the same in the benchmark's better direction.",
            "",
            "| benchmark | pair | \\|C\\| | rho_flip | chance | pair null (mean) | p_consistent | p_consistent, "
            "better | rho_flip_sig (Holm) | rho_flip_sig, better (Holm) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p['benchmark']} | {md_escape(p['model_a'])} vs {md_escape(p['model_b'])} | {p['n_configs']} | "
            f"{p['rho_flip']:.3f} | "
            f"{p['chance']:.3f} | {p['rho_flip_null_mean']:.3f} | {p['p_consistent']:.3f} | "
            f"{p['p_consistent_better']:.3f} | {p['rho_flip_sig']:.3f} | {p['rho_flip_sig_better']:.3f} |"
            for p in sig["pairs"]
        ]
    return lines


def _card_packages(card: dict) -> list[str]:
    """The packages of the run and of the analysis, and the caveats."""
    lines: list[str] = []
    lines += ["", "## Packages", ""]
    if card["packages"]:
        lines += [f"- {k} {v}" for k, v in card["packages"].items()]
    else:
        lines.append("- run packages: unknown (no run.json)")
    lines += [
        "",
        "Analysis: " + ", ".join(f"{k} {v}" for k, v in card["analysis_packages"].items()) + ".",
        "",
        "## Caveats",
        "",
    ]
    lines += [f"- {c}" for c in card["caveats"]]
    return lines


# The card's sections, in the order grid_card.md shows them.
CARD_SECTIONS = (
    _card_head,
    _card_models,
    _card_benchmarks,
    _card_envelope,
    _card_headline,
    _card_detectable,
    _card_cells,
    _card_ties,
    _card_statistics,
    _card_registered,
    _card_packages,
)


def card_markdown(card: dict) -> str:
    lines = [line for section in CARD_SECTIONS for line in section(card)]
    return md_prose("\n".join(lines)) + "\n"  # the prose quotes labels too: no raw HTML, no links


def write_card(card: dict, out: Path) -> list[Path]:
    atomic_write(out / "grid_card.json", json.dumps(card, indent=2, default=str) + "\n", root=out)
    atomic_write(out / "grid_card.md", card_markdown(card), root=out)
    return [out / "grid_card.json", out / "grid_card.md"]
