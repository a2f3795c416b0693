"""The fixed item subset of each benchmark and its few-shot demonstrations.

Every configuration scores the same items: a stratified draw (seed 42, target 300, largest-remainder
allocation over the benchmark's strata) in a fixed seeded order, so `--limit N` takes the same first N
items in every package. Demonstrations for each few-shot level are drawn with their own fixed seed
from the items left over, after removing any item that shares a group (a BBQ template fill, say) with
a scored item, so a demonstration never gives away a scored answer.

The few-shot draw (`FewshotDraw`): `fixed` (the default, the paper's) gives every item of a few-shot level
the same demonstrations, one draw that every claim then holds fixed; `per_item` draws each item's own from
the same pool with a seed of its id, so the draw is part of what a claim about the items generalises over.
Either way both models of a comparison see the same demonstrations on an item, so the comparison stays
paired, and every package (lm-eval, Inspect, the sweep) draws them here.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Literal, get_args

from safetyrepro.errors import UserError, one_of
from safetyrepro.tasks.benchmark import Benchmark, Item
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import default_rules

SHOT_LEVELS = (0, 3, 5)
FewshotDraw = Literal["fixed", "per_item"]
FEWSHOT_DRAWS: tuple[str, ...] = get_args(FewshotDraw)
DEFAULT_FEWSHOT_DRAW: FewshotDraw = "fixed"  # the one place the default is written


def check_fewshot_draw(draw: str) -> str:
    if draw not in FEWSHOT_DRAWS:
        raise one_of("few-shot draw", draw, FEWSHOT_DRAWS)
    return draw


@dataclass(frozen=True)
class ItemSet:
    benchmark: str
    seed: int
    subset_id: str
    items: tuple[Item, ...]
    pool: tuple[Item, ...]
    demos: dict[int, tuple[Item, ...]] = field(repr=False)
    strata: dict[str, int] = field(repr=False)

    def demos_for(self, shots: int, item_id: str | None = None, draw: str = DEFAULT_FEWSHOT_DRAW) -> tuple[Item, ...]:
        """The demonstrations for a few-shot level: with draw `per_item`, item `item_id`'s own (a draw
        seeded by its id); else the level's fixed ones (the envelope's levels are precomputed; any other
        count is drawn by the same rule, so lm-eval's --num_fewshot works for every value)."""
        if not 0 <= shots <= len(self.pool):
            raise UserError(f"cannot draw {shots} demonstrations from a pool of {len(self.pool)}")
        if check_fewshot_draw(draw) == "per_item":
            if item_id is None:
                raise ValueError("a per-item few-shot draw needs the item's id")
            return draw_demos(self.pool, self.benchmark, self.seed, shots, item_id)
        if shots not in self.demos:
            return draw_demos(self.pool, self.benchmark, self.seed, shots)
        return self.demos[shots]

    def by_id(self, item_id: str) -> Item:
        return self._index[item_id]

    @cached_property
    def _index(self) -> dict[str, Item]:
        return {it.id: it for it in (*self.items, *self.pool)}


def allocate(sizes: dict[str, int], target: int) -> dict[str, int]:
    """Largest-remainder proportional allocation of `target` over strata, capped by their sizes."""
    total = sum(sizes.values())
    if target >= total:
        return dict(sizes)
    quotas = {k: target * n / total for k, n in sizes.items()}
    alloc = {k: min(sizes[k], int(q)) for k, q in quotas.items()}
    for k in sorted(quotas, key=lambda k: (-(quotas[k] - int(quotas[k])), k)):
        if sum(alloc.values()) >= target:
            break
        if alloc[k] < sizes[k]:
            alloc[k] += 1
    while sum(alloc.values()) < target:  # caps left room: fill from the largest remaining strata
        k = max((k for k in sizes if alloc[k] < sizes[k]), key=lambda k: (sizes[k] - alloc[k], k))
        alloc[k] += 1
    return alloc


def stratified_draw(items: Sequence[Item], target: int, seed: str) -> list[Item]:
    """A stratified sample of `target` items in a seeded order."""
    by_stratum: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        by_stratum[it.stratum].append(it)
    alloc = allocate({k: len(v) for k, v in by_stratum.items()}, target)
    chosen = []
    for stratum in sorted(by_stratum):
        members = sorted(by_stratum[stratum], key=lambda it: it.id)
        random.Random(f"{seed}/{stratum}").shuffle(members)
        chosen += members[: alloc[stratum]]
    chosen.sort(key=lambda it: it.id)
    random.Random(f"{seed}/order").shuffle(chosen)
    return chosen


def draw_demos(
    pool: Sequence[Item], benchmark: str, seed: int, shots: int, item_id: str | None = None
) -> tuple[Item, ...]:
    """`shots` demonstrations from the pool: the level's one draw, or with `item_id` that item's own."""
    if not shots:
        return ()
    key = f"{seed}/{benchmark}/shots{shots}" + ("" if item_id is None else f"/item/{item_id}")
    return tuple(random.Random(key).sample(pool, shots))


def subset_id(benchmark: str, items: Sequence[Item], tag: str) -> str:
    digest = hashlib.sha256("\n".join(it.id for it in items).encode()).hexdigest()[:10]
    return f"{benchmark}-{tag}-n{len(items)}-{digest}"


@cache
def all_items(benchmark: str) -> tuple[Item, ...]:
    return tuple(get_benchmark(benchmark).load_items())


@cache
def item_set(
    benchmark: str,
    seed: int | None = None,
    target: int | None = None,
    subsample: float | None = None,
    subsample_seed: int | None = None,
    within: int | None = None,
) -> ItemSet:
    """The fixed subset (optionally a stratified `subsample` share of it, drawn with `subsample_seed`; with
    `within`, a share of its first `within` items, the ones a sweep's --limit scores: an 80 % subsample of a
    24-item study is 19 of those 24 items, not 24 items drawn from the whole subset)."""
    rules = default_rules()
    seed = rules.item_seed if seed is None else seed
    target = rules.item_target if target is None else target
    bench: Benchmark = get_benchmark(benchmark)
    items = all_items(benchmark)
    scored = stratified_draw(items, min(target, len(items)), f"{seed}/{benchmark}")
    tag = f"s{seed}"
    taken_groups = {bench.group_key(it) for it in scored}
    pool = tuple(it for it in items if bench.group_key(it) not in taken_groups)
    demos = {k: draw_demos(pool, benchmark, seed, k) for k in SHOT_LEVELS}
    if subsample is not None:
        if not 0 < subsample <= 1:
            raise UserError(f"--subsample must be a fraction in (0, 1], got {subsample}")
        sub_seed = seed if subsample_seed is None else subsample_seed
        if within is not None and within < len(scored):
            scored = scored[:within]
            tag += f"-first{within}"
        scored = stratified_draw(scored, max(1, round(subsample * len(scored))), f"{sub_seed}/{benchmark}/subsample")
        tag += f"-sub{subsample:g}-r{sub_seed}"
    strata: dict[str, int] = defaultdict(int)
    for it in scored:
        strata[it.stratum] += 1
    return ItemSet(benchmark, seed, subset_id(benchmark, scored, tag), tuple(scored), pool, demos, dict(strata))
