"""Does one configuration mean one measurement whichever package runs it?

`compare_packages` runs a cell through lm-eval and through Inspect on the same loaded engine, with
no output cache in between (each package really calls the model), and compares per item: the exact
model input (hash), the raw output, the parsed prediction, the item score, and the cell score.
The sweeper, the cross-package study and the test suite call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from safetyrepro.sweep.drivers import InspectDriver, LmEvalDriver, item_sets
from safetyrepro.sweep.records import ItemRecord
from safetyrepro.tasks.envelope import Config, Rules, default_rules
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW


@dataclass(frozen=True)
class ItemDifference:
    item_id: str
    seed: int
    field: str
    lm_eval: object
    inspect: object


@dataclass(frozen=True)
class EquivalenceReport:
    config_id: str
    n_items: int
    score_lm_eval: float
    score_inspect: float
    differences: tuple[ItemDifference, ...] = field(default=())

    @property
    def prompts_equal(self) -> bool:
        return not any(d.field == "prompt_sha256" for d in self.differences)

    @property
    def predictions_equal(self) -> bool:
        return not any(d.field == "prediction" for d in self.differences)

    @property
    def equivalent(self) -> bool:
        return not self.differences and self.score_lm_eval == self.score_inspect

    def describe(self) -> str:
        if self.equivalent:
            return f"{self.config_id}: {self.n_items} items, identical (score {self.score_lm_eval:.4f})"
        first = self.differences[0] if self.differences else None
        detail = f"; first: {first.item_id} {first.field} {first.lm_eval!r} vs {first.inspect!r}" if first else ""
        return (
            f"{self.config_id}: {len(self.differences)} differences, scores {self.score_lm_eval:.4f} (lm-eval) "
            f"vs {self.score_inspect:.4f} (inspect){detail}"
        )


FIELDS = ("prompt_sha256", "raw_output", "prediction", "parsed", "item_score")


def diff_records(lm: Sequence[ItemRecord], ins: Sequence[ItemRecord]) -> list[ItemDifference]:
    by_key = {(r.item_id, r.seed): r for r in ins}
    out = []
    for a in lm:
        b = by_key.get((a.item_id, a.seed))
        if b is None:
            out.append(ItemDifference(a.item_id, a.seed, "missing", "present", None))
            continue
        for f in FIELDS:
            if getattr(a, f) != getattr(b, f):
                out.append(ItemDifference(a.item_id, a.seed, f, getattr(a, f), getattr(b, f)))
    return out


class PackagePair:
    """lm-eval and Inspect drivers over one loaded engine, with the output cache bypassed."""

    def __init__(
        self,
        engine,
        rules: Rules | None = None,
        log_dir: str = "/tmp/safetyrepro-equivalence",
        fewshot_draw: str = DEFAULT_FEWSHOT_DRAW,
    ):
        self.rules = rules or default_rules()
        self.outer = engine
        self.raw = getattr(engine, "inner", engine)  # both packages must really call the model
        self.items_for = item_sets(None, None)
        self.lm_eval = LmEvalDriver(self.raw, self.rules, self.items_for, fewshot_draw=fewshot_draw)
        self.inspect = InspectDriver(self.raw, self.rules, self.items_for, log_dir, fewshot_draw=fewshot_draw)

    def compare(self, cfg: Config, n_items: int, seeds: Sequence[int] | None = None) -> EquivalenceReport:
        """Run `cfg` on the first `n_items` of the fixed subset through both packages and compare."""
        self.rules.check(cfg)
        ids = [it.id for it in self.items_for(cfg.benchmark).items[:n_items]]
        seeds = tuple(seeds or self.rules.seeds(cfg.decoding))
        lm = self.lm_eval.run_cell(cfg, seeds, ids)
        ins = self.inspect.run_cell(cfg, seeds, ids)
        return EquivalenceReport(cfg.config_id, len(ids), _score(lm), _score(ins), tuple(diff_records(lm, ins)))


def _score(records: Sequence[ItemRecord]) -> float:
    return sum(r.item_score for r in records) / len(records)


def compare_packages(engine, cfg: Config, n_items: int, seeds: Sequence[int] | None = None) -> EquivalenceReport:
    """One-off comparison; build a `PackagePair` once to compare many configurations."""
    return PackagePair(engine).compare(cfg, n_items, seeds)
