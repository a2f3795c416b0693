"""What `certify` writes: certificate.csv, claims.csv, items.parquet, cost.json and report.md."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from safetyrepro.analysis.metrics import readings
from safetyrepro.atomic import atomic_write, check_output_set, read_marker, staged_output
from safetyrepro.errors import UserError
from safetyrepro.markdown import markdown_table, md_escape
from safetyrepro.sweep.store import parquet_bytes
from safetyrepro.tasks.templates import TEMPLATE_KINDS

from .algorithm import CertifyResult, ClaimRow, PairRow
from .rests_on import FORMAT_ONLY, Basis, claim_bases, pair_basis

CERTIFICATE_COLUMNS = (
    "target",
    "benchmark",
    "model_a",
    "model_b",
    "verdict",
    "n_evaluations",
    "n_full",
    "deciding_configs",
    "n_open",
    "reading",
    "rests_on",
    "rests_on_why",
)
CLAIM_COLUMNS = (
    "target",
    "benchmark",
    "model_a",
    "model_b",
    "config_id",
    "claim",
    "lower",
    "upper",
    "estimate",
    "items_used",
    "n_full",
    "reading",
    "rests_on",
    "rests_on_why",
)


def _bases(result: CertifyResult, bases: list[Basis] | None) -> list[Basis]:
    """Each claim's basis (rests_on.claim_bases, from the records the run used); without them every claim's is
    unknown."""
    return bases if bases is not None else claim_bases(result.claims, result.evaluated, None)


def certificate_table(result: CertifyResult, bases: list[Basis] | None = None) -> pd.DataFrame:
    bases = _bases(result, bases)
    rows = []
    for p in result.pairs:
        rests = pair_basis(p, result.claims, bases)
        rows.append(
            {
                **{k: v for k, v in asdict(p).items() if k != "deciding"},
                "deciding_configs": ";".join(p.deciding),
                "target": result.options.target,
                "reading": result.options.reading,
                "rests_on": rests.basis,
                "rests_on_why": rests.why,
            }
        )
    return pd.DataFrame(rows, columns=list(CERTIFICATE_COLUMNS))


def claims_table(result: CertifyResult, bases: list[Basis] | None = None) -> pd.DataFrame:
    rows = [
        {
            **asdict(c),
            "target": result.options.target,
            "reading": result.options.reading,
            "rests_on": b.basis,
            "rests_on_why": b.why,
        }
        for c, b in zip(result.claims, _bases(result, bases), strict=True)
    ]
    return pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))


# what a claim about the models holds fixed: the audit of issue 53 found "seeds as draws from the decoder"
# false (five seeds sharing a shift made population claims false in 12 of 12 grids against the seed-averaged
# target), so the seeds, the one draw of few-shot examples and the templates are named as fixed
FIXED_WORDS = "these seeds, this one draw of few-shot examples and these templates"
TARGET_WORDS = {
    "population": "about the models: they generalise over the benchmark's items (as draws from the benchmark, so "
    f"another draw of items would confirm them) and hold fixed {FIXED_WORDS}, so they say nothing about other "
    "seeds, few-shot examples or templates",
    "subset": "about this sample: the fixed subset's realised differences, which the full grid reports; two "
    "identical models differ there by chance, so they say nothing beyond these items",
}
# --fewshot-draw per_item: each item's demonstrations are drawn with it, so they are part of what is drawn
PER_ITEM_WORDS = (
    "about the models: they generalise over the benchmark's items, each drawn with its own few-shot examples "
    "(as draws from the benchmark and its demonstration pool, so another draw of both would confirm them), and "
    "hold fixed these seeds and these templates, so they say nothing about other seeds or templates"
)


def target_words(target: str, fewshot_draw: str = "fixed") -> str:
    """What the claims of a target are about, given how the records' demonstrations were drawn."""
    return PER_ITEM_WORDS if target == "population" and fewshot_draw == "per_item" else TARGET_WORDS[target]


def target_sentence(result: CertifyResult) -> str:
    """What the claims are about and how their error is controlled, in one sentence."""
    o = result.options
    control = (
        f"a closed test over the {result.family_size:,} pair x configuration claims of the family, at least as "
        "powerful as a union bound"
        if o.target == "population"
        else f"a union bound: each of the {result.family_size:,} pair x configuration sequences at alpha "
        f"{result.alpha_each:.2g}"
    )
    return (
        f"Target: {o.target}. The claims are {target_words(o.target, o.fewshot_draw)}. They hold together with "
        "probability at least "
        f"{1 - o.alpha:.2f} ({control}), whatever the order of evaluation and wherever the run stopped."
        + (f" {CONTENT_WORDS}" if o.reading == "content" else "")
    )


CONTENT_WORDS = (
    "Reading: content. On a free-form configuration theta is the paired difference on the items where both "
    "models' replies were read, each other item counting 0: the difference on the items both read scaled by "
    "the share of items both read. Its sign, what a claim certifies, is who is better on the items both read; "
    "its size (estimate, bounds) is smaller by that share. Log-probability configurations are read as under "
    "the strict reading, where an unread reply counts as wrong."
)
PAIR_WORDS = (
    "A verdict rests on its deciding claims: readable when they are, or when its readable claims alone give the "
    f"same verdict; when every one of them is format-driven it says it is {FORMAT_ONLY}."
)
UNKNOWN_WORDS = (
    "unknown (a free-form claim whose records carry no parsed or prediction column, so its parse rates are not known)"
)


def rests_sentence(rests: Basis) -> str:
    """What a pair verdict rests on, as a sentence after it ('' when nothing is decided); escaped."""
    if not rests.basis:
        return ""
    why = md_escape(rests.why)
    if rests.readable:
        return f" It rests on readable replies: {why}."
    if rests.why.startswith("decided by"):  # every deciding claim of one basis (rests_on.pair_basis)
        return f" It is {why}."
    if rests.why.startswith("its wins so far"):
        return f" I{why[1:]}."
    return f" It rests on {rests.basis} claims: {why}."


WHY_DIFFERENT = (
    "certify and `analyze`/`verdict` can read the same grid differently: certify tests, anytime-valid, whether "
    "each model is better in the benchmark's direction on the target above, over its whole family of claims, "
    "while the item-level analysis runs one fixed-size exact test per configuration on the items in the grid."
)


def cost(result: CertifyResult, seconds_per_evaluation: dict[str, float] | None = None) -> dict:
    """Evaluations and seconds used beside the full grid's. Seconds for a replay are estimated from the
    grid's measured seconds per model evaluation of one item (None where unknown)."""
    out = {
        "paired_evaluations": result.paired_evaluations,
        "full_paired_evaluations": result.full_paired_evaluations,
        "share_of_full_paired": result.paired_evaluations / max(result.full_paired_evaluations, 1),
        "model_evaluations": result.model_evaluations,
        "full_model_evaluations": result.full_model_evaluations,
        "share_of_full_model": result.model_evaluations / max(result.full_model_evaluations, 1),
        "model_evaluations_by_scoring": by_scoring(result.evaluated),
        "seconds_evaluating": round(result.seconds, 3),
        "stopped_by": result.stopped_by,
        "target": result.options.target,
        "reading": result.options.reading,
        "family_size": result.family_size,
        "control": result.options.control,
        "control_did": result.control,
        "alpha": result.options.alpha,
        "alpha_each": result.alpha_each,
        "delta": result.options.delta,
        "seed": result.options.seed,
        "order": result.options.order,
        "allocation": result.options.allocation,
        "round_seconds": result.options.round_seconds,
        "budget_evaluations": result.options.budget_evaluations,
        "budget_seconds": result.options.budget_seconds,
    }
    benchmarks = sorted({p.benchmark for p in result.pairs})
    if seconds_per_evaluation and all(b in seconds_per_evaluation for b in benchmarks):
        counts: dict[str, int] = {}
        for (benchmark, _, _), items in result.evaluated.items():
            counts[benchmark] = counts.get(benchmark, 0) + len(items)
        used = sum(counts.get(b, 0) * seconds_per_evaluation[b] for b in benchmarks)
        full = sum(_full_models(result, b) * seconds_per_evaluation[b] for b in benchmarks)
        out["measured_seconds_used_estimate"] = round(used, 1)
        out["measured_seconds_full_grid"] = round(full, 1)
    return out


def by_scoring(evaluated) -> dict[str, int]:
    """Model evaluations (model x configuration x item) by how the configuration scores: free_form (the costly
    ones a control variate saves), logprob, or other (an id that does not say)."""
    out = {"free_form": 0, "logprob": 0, "other": 0}
    for (_, cid, _), items in evaluated.items():
        scoring = str(cid).rsplit("/", 1)[-1]
        out[scoring if scoring in out else "other"] += len(items)
    return out


def _full_models(result: CertifyResult, benchmark: str) -> int:
    rows = [c for c in result.claims if c.benchmark == benchmark]
    models = {c.model_a for c in rows} | {c.model_b for c in rows}
    configs = {c.config_id for c in rows}
    n = rows[0].n_full if rows else 0
    return len(models) * len(configs) * n


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def config_words(config_id: str) -> str:
    """`bbq/T4/greedy/0shot/free_form` as a reader says it: "T4 (chain of thought ending in an Answer:
    line), greedy, 0-shot, free-form"; an id outside the envelope's shape is returned as it is."""
    parts = config_id.split("/")
    if len(parts) != 5 or parts[1] not in TEMPLATE_KINDS:
        return config_id
    _, template, decoding, shots, scoring = parts
    return (
        f"{template} ({TEMPLATE_KINDS[template].summary}), {decoding}, {shots.replace('shot', '-shot')}, "
        f"{'log-probabilities' if scoring == 'logprob' else 'free-form'}"
    )


def _margin(c: ClaimRow, sign: float, target: str = "subset") -> str:
    """How far ahead a won configuration is: subset, its exact difference once every item is in, else its
    bound; population, the difference on the items used with its simultaneous bounds."""
    if target == "population":
        lo, hi = (c.lower, c.upper) if sign > 0 else (-c.upper, -c.lower)
        return (
            f"by {sign * c.estimate:.3f} on {c.items_used} items, simultaneous bounds {max(lo, -1):.3f} to "
            f"{min(hi, 1):.3f}"
        )
    if c.items_used >= c.n_full:
        return f"by {sign * c.estimate:.3f} on all {c.n_full} items"
    bound = c.lower if sign > 0 else -c.upper
    return f"by at least {bound:.3f} after {c.items_used} of {c.n_full} items"


def verdict_sentence(p: PairRow, claims: list[ClaimRow], delta: float, target: str = "subset") -> str:
    """One sentence a reader can repeat, winner first; labels escaped (they are the user's text)."""
    p = dataclasses.replace(p, model_a=md_escape(p.model_a), model_b=md_escape(p.model_b))
    claims = [dataclasses.replace(c, model_a=md_escape(c.model_a), model_b=md_escape(c.model_b)) for c in claims]
    mine = [c for c in claims if c.benchmark == p.benchmark and (c.model_a, c.model_b) == (p.model_a, p.model_b)]
    wins_a = [c for c in mine if c.claim == "a_better"]
    wins_b = [c for c in mine if c.claim == "b_better"]
    spent = f"({p.n_evaluations:,} of {p.n_full:,} paired evaluations, {_pct(p.n_evaluations / max(p.n_full, 1))})"
    if p.verdict == "flip":
        a, b = max(wins_a, key=lambda c: c.lower), min(wins_b, key=lambda c: c.upper)
        return (
            f"{p.benchmark}: the verdict flips. {p.model_a} is ahead of {p.model_b} with {config_words(a.config_id)} "
            f"({_margin(a, 1, target)}), and {p.model_b} ahead of {p.model_a} with {config_words(b.config_id)} "
            f"({_margin(b, -1, target)}) {spent}."
        )
    if p.verdict in ("stable_a", "stable_b"):
        win, lose, wins = (p.model_a, p.model_b, wins_a) if p.verdict == "stable_a" else (p.model_b, p.model_a, wins_b)
        return (
            f"{p.benchmark}: {win} is ahead of {lose} wherever the envelope goes: ahead on {len(wins)} of "
            f"{len(mine)} configurations, and on none is {lose} ahead by {delta} or more {spent}."
        )
    if p.verdict == "equivalent":
        return (
            f"{p.benchmark}: {p.model_a} and {p.model_b} are within {delta} of each other on every configuration "
            f"{spent}."
        )
    left = sum(c.n_full - c.items_used for c in mine if c.claim == "undecided")
    found = detectable(open_bounds(mine, p.benchmark, p.model_a, p.model_b))
    close = (
        f"closing them takes at most {left:,} more paired evaluations"
        if target == "subset"
        else f"{left:,} more paired evaluations are available to them"
    )
    return (
        f"{p.benchmark}: {p.model_a} vs {p.model_b} is undecided: {p.n_open} of {len(mine)} configurations are "
        f"still open ({len(wins_a)} won by {p.model_a}, {len(wins_b)} by {p.model_b}) {spent}; {close}"
        f"{'; ' if found else ''}{found}."
    )


def open_bounds(claims, benchmark: str, model_a: str, model_b: str) -> list[tuple[float, float]]:
    """The simultaneous bounds (lower, upper) of a pair's undecided claims on one benchmark."""
    return [
        (c.lower, c.upper)
        for c in claims
        if c.claim == "undecided" and (c.benchmark, c.model_a, c.model_b) == (benchmark, model_a, model_b)
    ]


def detectable(bounds: list[tuple[float, float]]) -> str:
    """What the items used could detect, from the open claims' simultaneous bounds (lower, upper): their width,
    and that a lead under about half the narrowest is not claimed (a lead is claimed once its lower bound passes
    0). Empty where no bound is finite."""
    shown = [(lo, hi) for lo, hi in bounds if math.isfinite(hi - lo)]
    if not shown:
        return ""
    widths = sorted(hi - lo for lo, hi in shown)
    if len(shown) == 1:
        ((lo, hi),) = shown
        return (
            f"its simultaneous bounds, {lo:.2f} to {hi:.2f}, are {widths[0]:.2f} wide, so on these items a lead under "
            f"about {widths[0] / 2:.2f} is not claimed"
        )
    return (
        f"their simultaneous bounds are {widths[0]:.2f} to {widths[-1]:.2f} wide, so on these items a lead under "
        f"about {widths[0] / 2:.2f} is not claimed in any of them"
    )


def hours_to_close(
    result: CertifyResult, by_cell: dict[str, float], by_benchmark: dict[str, float | None]
) -> float | None:
    """Model time that would close every open claim: each (model, configuration) of an open claim scored on
    the items it still lacks, at its measured seconds per item (else its benchmark's mean); None when a
    needed rate is unknown."""
    need: dict[tuple[str, str, str], int] = {}
    for c in result.claims:
        if c.claim != "undecided":
            continue
        for model in (c.model_a, c.model_b):
            have = len(result.evaluated.get((c.benchmark, c.config_id, model), ()))
            need[(c.benchmark, c.config_id, model)] = c.n_full - have
    seconds = 0.0
    for (benchmark, cid, model), n in need.items():
        rate = by_cell.get(f"{model}|{cid}", by_benchmark.get(benchmark))
        if rate is None:
            return None
        seconds += rate * n
    return seconds / 3600


def report_markdown(
    result: CertifyResult, source: str, extra_cost: dict | None = None, bases: list[Basis] | None = None
) -> str:
    bases = _bases(result, bases)
    lines = ["# Certified verdicts", ""]
    lines += [
        f"- {verdict_sentence(p, result.claims, result.options.delta, result.options.target)}"
        f"{rests_sentence(pair_basis(p, result.claims, bases))}"
        for p in result.pairs
    ]
    lines += [
        "",
        f"{target_sentence(result)} Source: {md_escape(source)}.",
        "",
        f"Why this can differ from `analyze`: {WHY_DIFFERENT}",
        "",
    ]
    lines += [
        "",
        f"Spent {result.paired_evaluations:,} of the full grid's {result.full_paired_evaluations:,} paired "
        f"evaluations ({_pct(result.paired_evaluations / max(result.full_paired_evaluations, 1))}); "
        f"{result.model_evaluations:,} of {result.full_model_evaluations:,} model evaluations. Stopped: "
        f"{result.stopped_by}.",
        *_control_lines(result),
        "",
        "## Evidence",
        "",
        "The configurations that decided each verdict, with the simultaneous bounds of theta (positive: model_a "
        "better in the benchmark's direction; the paired difference, for CrowS-Pairs the difference in closeness "
        f"to 0.5) on the {result.options.target} target:",
        "",
    ]
    claims = claims_table(result, bases)
    # rests_on in each row, with why where it is not readable (claims.csv keeps the two apart)
    claims["rests_on"] = [b.cell() for b in bases]
    decided = claims[claims["claim"] != "undecided"].drop(columns=["rests_on_why"])
    if not decided.empty:
        shown = decided.round({"lower": 3, "upper": 3, "estimate": 3})
        lines.append(markdown_table(list(shown.columns), shown.astype(str).to_numpy().tolist()))
        lines += ["", f"{readings.READINGS_NOTE}; {UNKNOWN_WORDS}. {PAIR_WORDS}"]
    open_ = claims[claims["claim"] == "undecided"]
    lines += ["", "## What stayed open", ""]
    if open_.empty:
        lines.append("Nothing: every configuration of every open pair was decided, or its pair's verdict was known.")
    else:
        cost_to_close = int((open_["n_full"] - open_["items_used"]).sum())
        hours = None
        if extra_cost and extra_cost.get("seconds_per_model_evaluation_by_cell") is not None:
            hours = hours_to_close(
                result,
                extra_cost["seconds_per_model_evaluation_by_cell"],
                extra_cost.get("seconds_per_model_evaluation") or {},
            )
        when = "" if hours is None else f", about {hours:,.1f} h of model time at the rates measured here"
        if result.options.target == "subset":
            lines.append(
                f"{len(open_)} pair x configuration claims are undecided (at most {cost_to_close:,} more paired "
                f"evaluations would close them all{when}; the full subset always decides). They are in claims.csv."
            )
        else:
            lines.append(
                f"{len(open_)} pair x configuration claims are undecided ({cost_to_close:,} more paired evaluations "
                f"are left to them{when}; with every item in, a difference the items cannot resolve stays open). "
                "They are in claims.csv."
            )
    return "\n".join(lines) + "\n"


def _configurations(n: int) -> str:
    return "1 free-form configuration was" if n == 1 else f"{n} free-form configurations were"


NO_POOL = (
    "The twins held no items beyond the costly subset, so partners came from the subset's own back (at most 50 "
    "items a path and 2.5 % of the subset), which saves a few per cent at most: twins scored on more items than the"
    " free-form configurations (a live run's --limit N, or records whose twin cells hold more items) give the "
    "control its partners there, and --target subset needs none (docs/methods/certify.md, 'The pool beyond the "
    "subset')"
)


def no_pool(result: CertifyResult) -> list[str]:
    """The benchmarks whose population-target control had no pool beyond the costly subset (NO_POOL)."""
    return [b for b, did in result.control.items() if "controlled_steps" not in did and not did["pool_beyond_subset"]]


def _control_lines(result: CertifyResult) -> list[str]:
    """With --control auto or time: which costly configurations their cheap twins helped, and what that took."""
    lines = []
    poolless = no_pool(result)
    for benchmark, did in result.control.items():
        note = ""
        if "controlled_steps" in did:  # the subset target: the twins' whole subsets, no partners
            how = f"{did['controlled_steps']:,} of them with the control, the twins scored on their whole subsets"
        else:
            pool = did.get("pool_beyond_subset", 0)
            beyond = (
                f", first from the {pool:,} items beyond the costly subset that only the twins score" if pool else ""
            )
            note = f" {NO_POOL}." if benchmark in poolless else ""
            aim = (
                "as many a step as their model time pays for"
                if result.options.control == "time"
                else "for the fewest costly evaluations"
            )
            how = (
                f"{did['partner_steps']:,} of them with partner items ({aim}); {did['partner_items_evaluated']:,} "
                f"partner model evaluations of the twins{beyond}"
            )
        lines += [
            "",
            f"Control variate ({benchmark}): {_configurations(len(did['pairs']))} certified with their "
            f"log-probability twins' help ({did['costly_steps']:,} costly items used, {how}); "
            f"{_tracked(did)}docs/methods/certify.md, 'Cheap twins'.{note}",
        ]
    return lines


def _tracked(did: dict) -> str:
    """How well the twins tracked the free-form differences on the items used: what the control's saving rests on."""
    kept, dropped = did.get("twin_kept_paths", 0), did.get("twin_dropped_paths", 0)
    none = f"{dropped} found no correlation with their twins and went on without them" if dropped else ""
    if did.get("twin_r_median") is None:
        return f"{none}; " if none else ""
    r = did["twin_r_median"]
    return (
        f"the twins tracked the free-form differences at a median r = {r:.2f} over the {kept} paths that used them"
        + (f"; {none}; " if none else "; ")
    )


def write_outputs(
    result: CertifyResult,
    out: Path,
    records: pd.DataFrame | None,
    source: str,
    seconds_per_evaluation: dict[str, float] | None = None,
    extra_cost: dict | None = None,
    parse_rates: dict[tuple[str, str], float] | None = None,
) -> list[Path]:
    """The run's files, built whole beside `out` and swapped in at once (staged_output): `out` holds the
    earlier set or this one, never a mix. `extra_cost` adds to (or replaces) cost.json's fields (a live
    run's measured timing). What each claim rests on is read from `records` (the items it used);
    `parse_rates`, (model, config_id) -> the grid's, stand in where the records carry no read flags."""
    paths = []
    costs = {**cost(result, seconds_per_evaluation), **(extra_cost or {})}
    bases = claim_bases(result.claims, result.evaluated, records, result.options.reading, parse_rates)
    with staged_output(out, COMMAND, legacy=legacy_certify, carry=carried) as stage:
        for name, text in (
            ("certificate.csv", certificate_table(result, bases).to_csv(index=False)),
            ("claims.csv", claims_table(result, bases).to_csv(index=False)),
            ("cost.json", json.dumps(costs, indent=2) + "\n"),
            ("report.md", report_markdown(result, source, costs, bases)),
        ):
            atomic_write(stage / name, text, root=stage)
            paths.append(out / name)
        if records is not None:
            atomic_write(stage / "items.parquet", parquet_bytes(records), root=stage)
            paths.append(out / "items.parquet")
    return paths


# -- the output folder as one set ------------------------------------------------------------------
# certify's files are one set (safetyrepro/atomic.py's marker names them); a live run's Inspect logs and
# the folder's lock file (held open through the run) are moved through each swap, never rewritten.
COMMAND = "certify"
OUTPUT_FILES = frozenset({"certificate.csv", "claims.csv", "cost.json", "report.md", "items.parquet"})
CARRIED = {"logs": "folder", ".lock": "file"}


def carried(p: Path) -> bool:
    kind = CARRIED.get(p.name)
    return (kind == "folder" and p.is_dir()) or (kind == "file" and p.is_file())


def legacy_certify(folder: Path, files: list[str]) -> set[str] | None:
    """A certify folder written before folders carried a marker: its cost.json is certify's; then only
    the names certify writes are its own."""
    try:
        made = json.loads((folder / "cost.json").read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(made, dict) and "paired_evaluations" in made and "alpha" in made):
        return None
    return {f for f in files if f in OUTPUT_FILES}


def check_out(out: Path, inputs: tuple = ()) -> None:
    """Read-only, before any work: `out` is missing, empty or an earlier certify run's folder (a set that
    is replaced whole), never a sweep's or another command's folder, never holding a file certify did not
    write, and none of `inputs` (the replayed items and grid) lies in it."""
    from safetyrepro.analysis.render.output import refuse_inputs_inside  # lazy: it loads the figures and the pipeline

    out = Path(out)
    sweep = ("sweep.json", "grid.csv", "cells")  # an import's or analysis' grid.csv: their marker speaks
    if out.is_dir() and read_marker(out) is None and any((out / n).exists() for n in sweep):
        raise UserError(
            f"--out {out} holds a sweep; certify writes items.parquet and its own files there: choose another --out"
        )
    refuse_inputs_inside(out, inputs)
    check_output_set(out, COMMAND, legacy=legacy_certify, carry=carried)


def whole_set(out: Path) -> bool:
    """Whether `out` holds one whole certify set to resume from: its marker names cost.json and
    items.parquet (written together), or it is a certify folder from before markers."""
    marker = read_marker(out)
    if marker is not None:
        return marker["command"] == COMMAND and {"cost.json", "items.parquet"} <= set(map(str, marker["files"]))
    return legacy_certify(out, ["cost.json", "items.parquet"]) == {"cost.json", "items.parquet"}
