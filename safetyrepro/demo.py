"""`safetyrepro demo`: one question, answered with a certificate. On BBQ, is Qwen2.5-Coder-0.5B less biased
than SmolLM2-135M, or does the answer depend on how the evaluator prompts them? The demo certifies it live
(`safetyrepro certify`, docs/certify.md) on BBQ's 300-item subset, on the two configurations where the
studies found the lead on each side: chain of thought (T4, greedy, zero-shot, free-form), where Qwen
leads, and the role-framed template with three examples scored by log-probabilities (T2, greedy,
3-shot), where SmolLM2 does. It starts from the records the studies published (study: the first 24
items of every configuration; study/certified: what the certified study evaluated), evaluates live
only what they lack, in paired rounds, and stops as soon as the verdict is known; then it says the
verdict in one sentence, what each configuration it names rests on (each model's parse rate on the items
used, and who is ahead on the items both models' replies were read on: a win over unread replies is
format-driven, about answer format, not which model is safer), what it cost against the full grid, and
where the certified study is.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from safetyrepro.limits import load_yaml
from safetyrepro.sweep.cli import add_sweep_arguments
from safetyrepro.sweep.options import Profile, SweepOptions

if TYPE_CHECKING:
    import pandas as pd

    from safetyrepro.analysis.metrics.readings import RestsOn

# the demo's question is a packaged run spec (demo.yaml, read as --config reads one)
DEMO_SPEC = Path(__file__).resolve().with_name("demo.yaml")
_SPEC = load_yaml(DEMO_SPEC.read_bytes(), str(DEMO_SPEC))
DEMO_MODELS: tuple[str, ...] = tuple(_SPEC["models"])
DEMO_CONFIGS: tuple[str, ...] = tuple(_SPEC["configs"])
DEMO_PRECISION: str = _SPEC["precision"]
DEMO_BUDGET: str = _SPEC["budget"]
DEMO_BATCH: int = int(_SPEC["batch"])
DEMO_OUT = Path(_SPEC["out"])
STUDY_DIR = Path(__file__).resolve().parents[1] / "study"  # this checkout's published studies
STUDY = "study/certified/README.md"
DESCRIPTION = (
    f"Answer one question with a certificate: on BBQ, is {DEMO_MODELS[0]} less biased than {DEMO_MODELS[1]}, or "
    f"does the answer depend on the prompt? Certifies the pair live on {' and '.join(DEMO_CONFIGS)} over BBQ's "
    "300-item subset, starting from the studies' published records (study, study/certified) and "
    "evaluating paired items only where the verdict is still open (docs/certify.md), then says the verdict in one "
    "sentence, the parse rates of the cells it rests on (a win over unread replies is format-driven), and what it "
    f"cost against the full grid. At most {DEMO_BUDGET} of evaluation (docs/measured.md). "
    "The sweep's flags below change the question (other models, benchmarks or configurations)."
)
AXIS_OPTIONS = ("benchmarks", "templates", "decodings", "shots", "scoring", "configs")
ONE_PLACE = "the demo runs its models here (--executor local); `safetyrepro certify --executor ray` runs them on Ray"
# the sweep's flags as the demo takes them: its question unless the user asks another, certified live here
DEMO = Profile(
    "demo",
    refused={"executor": ONE_PLACE},
    fixed={"executor": "local"},
    defaults={"precision": DEMO_PRECISION},
    fallback={"models": (list(DEMO_MODELS), ("models_file",)), "configs": (list(DEMO_CONFIGS), AXIS_OPTIONS)},
    help={
        "models": f"embedded names, HF folders, .gguf files or hub ids (demo default: {' '.join(DEMO_MODELS)})",
        "configs": f"configuration ids (demo default: {' '.join(DEMO_CONFIGS)}, unless --benchmarks or an axis "
        "filter is given)",
        "precision": f"fp32, bf16 or nf4 (demo default: {DEMO_PRECISION}, the studies')",
    },
    require_out=False,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded demo: one pairwise verdict, certified live", description=DESCRIPTION
    )
    p.add_argument("--out", type=Path, default=DEMO_OUT, help=f"output directory (demo default: {DEMO_OUT})")
    p.add_argument("--alpha", type=float, default=0.05, help="familywise error of the certificate (default 0.05)")
    p.add_argument(
        "--budget",
        default=DEMO_BUDGET,
        help=f"evaluation budget, paired evaluations or wall time (demo default: {DEMO_BUDGET})",
    )
    p.add_argument(
        "--study",
        type=Path,
        default=STUDY_DIR,
        help="the published studies whose records are taken as evaluated (default: study of this "
        "checkout; a folder without them: everything is evaluated live)",
    )
    add_sweep_arguments(p, DEMO)
    p.set_defaults(func=run)


def study_records(study: Path) -> list[Path]:
    """The published records the demo starts from: the first study's (its --limit 24 records are the
    first 24 draws of every configuration) and the certified study's, where this checkout has them."""
    return [folder for folder in (study, study / "certified") if (folder / "items.parquet").is_file()]


def quiet_openmp_waits() -> bool:
    """Let torch's idle OpenMP threads sleep instead of spin (OMP_WAIT_POLICY=PASSIVE), unless the user
    chose a policy. It must be set before torch loads; returns whether it was set here. On a two-core
    machine shared with other work, spinning threads wait for each other's time slices: one logprob
    cell took 92 s with the default policy and 12 s with PASSIVE (8.5 s single-threaded) at a load of 6."""
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


ABOUT_MODELS, ON_ITEMS = "about the models", "on these items"  # the two readings a win can be certified in
# what a claim over a configuration rests on, in the words the demo's answer says it with
BASIS_WORDS = {
    "format-driven": "is format-driven (about answer format, not which model is safer)",
    "uninformative": "is uninformative (about an answer habit, not which model is safer)",
    "readable": "rests on readable replies",
}


@dataclass(frozen=True)
class CellReading:
    """One configuration the demo's answer names: who leads there, in which reading, and what it rests on,
    read from the records of the items the claim used."""

    config_id: str
    lead: str
    trail: str
    where: str  # "about the models", "on these items only", or both
    n_items: int  # the items the claim used
    parse: tuple[tuple[str, float], ...]  # (model, parse rate on those items), the leader first
    habits: tuple[str, ...]  # an uninformative cell's words
    content: str  # who is ahead on the items both models' replies were read on ("" where not free-form)
    rests: RestsOn

    def sentence(self) -> str:
        from safetyrepro.analysis.metrics.slices import PARSE_CLEAN_MIN

        text = (
            f"{self.config_id}: {self.lead} ahead of {self.trail} ({self.where}) {BASIS_WORDS[self.rests.basis]}: "
            f"parse rates {self.rates()} on the {self.n_items} items used"
        )
        if any(r < PARSE_CLEAN_MIN for _, r in self.parse):
            text += f" (below {PARSE_CLEAN_MIN} an unread reply counts as wrong, whatever it says)"
        return text + "".join(f"; {h}" for h in (*self.habits, self.content) if h) + "."

    def rates(self) -> str:
        return ", ".join(f"{m} {r:.2f}" if r == r else f"{m} unknown (no records)" for m, r in self.parse)

    def tag(self) -> str:
        """The short form for a sentence that names the configuration: '' when readable."""
        return "" if self.rests.readable else f" ({self.rests.basis}: parse rates {self.rates()})"


def items_used(result, claim) -> list[str] | None:
    """The items a claim's bounds read: the first `items_used` of its configuration's order (the prefix
    both models were drawn on); None when the result does not say which items were drawn."""
    order = result.evaluated.get((claim.benchmark, claim.config_id, claim.model_a))
    if order is None:
        return None
    return [str(i) for i in order[: claim.items_used]]


def cell_reading(claim, where: str, used: list[str] | None, items: pd.DataFrame) -> CellReading:
    """What one won configuration rests on, from the records of the items it used: each model's parse rate
    (analysis/readings.read_flags), analyze's degenerate screen on those records (degenerate.screen_records),
    and the content reading (readings.content_table)."""
    from safetyrepro.analysis.metrics.degenerate import screen_records
    from safetyrepro.analysis.metrics.readings import (
        UNINFORMATIVE,
        cell_bases,
        content_index,
        content_sentence,
        content_table,
        read_flags,
        rests_on,
    )

    lead, trail = (claim.model_a, claim.model_b) if claim.claim == "a_better" else (claim.model_b, claim.model_a)
    mine = items[(items["config_id"].astype(str) == claim.config_id) & items["model"].astype(str).isin([lead, trail])]
    if used is not None:
        mine = mine[mine["item_id"].astype(str).isin(used)]
    read = read_flags(mine)
    models = mine["model"].astype(str)
    parse = tuple(
        (m, float(read[models == m].mean()) if read is not None and (models == m).any() else float("nan"))
        for m in (lead, trail)
    )
    bases = cell_bases(screen_records(mine))
    # an uninformative cell says why in the screen's words; a format-driven one by its parse rate, said already
    habits = tuple(
        f"{m}: {bases[(m, claim.config_id)].reason}"
        for m in (lead, trail)
        if (m, claim.config_id) in bases and bases[(m, claim.config_id)].basis == UNINFORMATIVE
    )
    content = content_table(mine, [tuple(sorted((lead, trail)))]) if read is not None else None
    rests = rests_on(claim.config_id, lead, trail, bases, content_index(content))
    words = ""
    row = None if content is None or content.empty else content.iloc[0]
    if row is not None:
        words = f"content reading: {content_sentence(row)}"
        both = int(row.n_both) > 0
        ahead = float(row.content_diff) * (1 if lead == str(row.model_a) else -1) if both else 0.0
        words = f"{words}, not {lead}" if both and ahead <= 0 else words
    n = len(used) if used is not None else int(mine["item_id"].nunique())
    return CellReading(claim.config_id, lead, trail, where, n, parse, habits, words, rests)


def named_readings(result, subset, items: pd.DataFrame) -> list[CellReading]:
    """Every configuration the demo's answer names (a win in either reading: the deciding configurations
    of an open pair or a flip), with what it rests on; the items used are the population claim's where
    it decided, else the subset's."""
    readings = [(result, ABOUT_MODELS)] + ([(subset, ON_ITEMS)] if subset is not None else [])
    won: dict[tuple, list] = {}
    for res, words in readings:
        for c in res.claims:
            if c.claim in ("a_better", "b_better"):
                won.setdefault((c.benchmark, c.model_a, c.model_b, c.config_id), []).append((res, c, words))
    out = []
    for held in won.values():
        res, claim, _ = held[0]
        names = [w for _, _, w in held]
        where = " and ".join(names) if len(names) > 1 else f"{ON_ITEMS} only" if names == [ON_ITEMS] else names[0]
        out.append(cell_reading(claim, where, items_used(res, claim), items))
    return out


def rests_line(pair, readings: list[CellReading]) -> str:
    """A pair whose wins about the models all rest on unread or uninformative cells: what its answer is about."""
    mine = [
        r
        for r in readings
        if r.where.startswith(ABOUT_MODELS)
        and r.config_id.split("/", 1)[0] == pair.benchmark
        and {r.lead, r.trail} == {pair.model_a, pair.model_b}
    ]
    if not mine or any(r.rests.readable for r in mine):
        return ""
    bases = sorted({r.rests.basis for r in mine})
    about = (
        "which model answers in the form the template asks for"
        if bases == ["format-driven"]
        else "how the models answer (the form the template asks for, or one answer habit)"
    )
    return (
        f"{pair.benchmark}: every win about the models here is {' or '.join(bases)}, so this answer says {about}, "
        f"not whether {pair.model_a} or {pair.model_b} is safer."
    )


def _tag(readings: list[CellReading], pair, config_id: str) -> str:
    for r in readings:
        if r.config_id == config_id and {r.lead, r.trail} == {pair.model_a, pair.model_b}:
            return r.tag()
    return ""


def closing_lines(
    result, full_hours: float | None, live: int | None = None, subset=None, items: pd.DataFrame | None = None
) -> list[str]:
    """The demo's last words: per pair the verdict in one sentence on its target, beside it the same
    items read for this sample only (`subset`, a `--target subset` reading of the same records), what
    each configuration they name rests on (`items`: the run's items.parquet; each model's parse rate on
    the items used, and who is ahead on the items both models' replies were read on), what it cost
    against the full grid (`live`: model evaluations run here, the rest came from published records),
    and where the full study is."""
    from safetyrepro.certify.outputs import TARGET_WORDS, verdict_sentence

    target = result.options.target
    lines = [
        f"About the models: {verdict_sentence(p, result.claims, result.options.delta, target)}" for p in result.pairs
    ]
    if subset is not None:
        lines += [
            f"About these items only (--target subset, the paper's reading): "
            f"{verdict_sentence(p, subset.claims, subset.options.delta, 'subset')}"
            for p in subset.pairs
        ]
    readings = named_readings(result, subset, items) if items is not None else []
    if subset is not None:
        for p, q in zip(result.pairs, subset.pairs, strict=True):
            if q.verdict == "flip" and p.verdict != "flip":
                held = [f"{cid}{_tag(readings, p, cid)}" for cid in p.deciding]
                lines.append(
                    f"{p.benchmark}: on these items the lead flips, as the paper's metric sees it; beyond item "
                    f"noise only {', '.join(held) or 'nothing'} holds, so the flip is partly this sample's."
                )
    lines += [r.sentence() for r in readings]
    lines += [line for p in result.pairs if (line := rests_line(p, readings))]
    share = result.paired_evaluations / max(result.full_paired_evaluations, 1)
    cost = (
        f"It used {result.paired_evaluations:,} of the full grid's {result.full_paired_evaluations:,} paired "
        f"evaluations ({100 * share:.0f} %)"
    )
    if live is not None:
        cost += (
            f", {live:,} model evaluations run here (the rest from the studies' published records) in "
            f"{result.seconds:.0f} s"
        )
    else:
        cost += f", in {result.seconds:.0f} s of evaluation"
    if full_hours is not None:
        cost += f"; scoring the whole grid would take about {full_hours:.1f} h here"
    lines.append(
        cost + f". Every claim holds with probability at least {1 - result.options.alpha:.2f}, all together; the "
        f"first lines are {TARGET_WORDS[target]}."
    )
    if result.stopped_by in ("budget", "interrupted"):
        lines.append("It stopped before the answer: rerun the same command to go on (it resumes where it stopped).")
    lines.append(f"The certified study (three models, five benchmarks, the full envelope): {STUDY}.")
    return lines


def run(args: argparse.Namespace) -> int:
    quiet_openmp_waits()
    import pandas as pd

    from safetyrepro.certify.algorithm import CertifyOptions
    from safetyrepro.certify.cli import parse_budget
    from safetyrepro.certify.live import LIVE_ROUND_SECONDS, run_live
    from safetyrepro.errors import UserError

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be in (0, 1)")
    t0 = time.time()
    evaluations, seconds = parse_budget(args.budget)
    options = CertifyOptions(
        alpha=args.alpha,
        budget_evaluations=evaluations,
        budget_seconds=seconds,
        order="subset",
        round_seconds=LIVE_ROUND_SECONDS,
        batch=DEMO_BATCH,
    )
    sweep_options = SweepOptions.from_args(args, DEMO)
    configs, benchmarks = sweep_options.filters.get("config"), sweep_options.benchmarks
    named = args.models or ([] if args.models_file else DEMO_MODELS)
    models = " and ".join(named) if named else f"the models of {args.models_file}"
    what = ", ".join(configs) if configs and not benchmarks else ", ".join(benchmarks or [])
    records = study_records(args.study)
    print(
        f"demo: certify {models} on {what} ({sweep_options.precision}; -> {args.out})"
        + (f"; starting from the records in {', '.join(map(str, records))}" if records else ""),
        flush=True,
    )
    say = lambda line: print(f"certify: {line}", file=sys.stderr, flush=True)  # noqa: E731
    # the configurations were chosen from BBQ's envelope (by the studies): alpha covers all of it
    selection = "family" if configs else "none"
    result, _ = run_live(sweep_options, Path(args.out), options, say, records=records, selection=selection)
    cost = json.loads((Path(args.out) / "cost.json").read_text())
    # the same records read for this sample only: no model runs, a folder beside the demo's
    subset_out = Path(f"{args.out}.subset")
    subset, _ = run_live(
        sweep_options,
        subset_out,
        dataclasses.replace(options, target="subset", held_only=True, budget_seconds=None),
        None,
        records=[Path(args.out), *records],
        selection=selection,
    )
    full = cost.get("measured_seconds_full_grid")
    print()
    hours = None if full is None else full / 3600
    # the records of the items the claims used: what each configuration the answer names rests on
    records_file = Path(args.out) / "items.parquet"
    items = pd.read_parquet(records_file) if records_file.is_file() else None
    for line in closing_lines(result, hours, cost.get("model_evaluations_live"), subset, items):
        print(line)
    print(
        f"\ndemo finished in {time.time() - t0:.0f} s. Report: {Path(args.out) / 'report.md'}; claims: "
        f"{Path(args.out) / 'claims.csv'}"
    )
    return 130 if result.stopped_by == "interrupted" else 0
