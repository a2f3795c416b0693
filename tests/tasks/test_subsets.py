"""Fixed item subsets, their ids, few-shot pools, and label counts on the real data."""

from __future__ import annotations

from collections import Counter

import pytest

from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.subsets import all_items, allocate, item_set

# Committed: a change in data, seed, stratification or order changes these and fails the test.
SUBSET_IDS = {
    "truthfulqa": "truthfulqa-s42-n300-7f4e6591a0",
    "bbq": "bbq-s42-n300-4c16ccb5d3",
    "crows_pairs": "crows_pairs-s42-n300-1ecd6c4329",
    "toxigen": "toxigen-s42-n300-a7e5f77074",
    "xstest": "xstest-s42-n300-b667291ece",
}


@pytest.mark.parametrize("benchmark", SUBSET_IDS)
def test_subset_size_and_id_are_stable(benchmark, data_dir):
    s = item_set(benchmark)
    assert len(s.items) == 300 and len({i.id for i in s.items}) == 300
    assert s.subset_id == SUBSET_IDS[benchmark]


@pytest.mark.parametrize("benchmark", SUBSET_IDS)
def test_pool_and_demos_never_touch_scored_items(benchmark, data_dir):
    s = item_set(benchmark)
    bench = get_benchmark(benchmark)
    scored = {i.id for i in s.items}
    scored_groups = {bench.group_key(i) for i in s.items}
    assert not scored & {i.id for i in s.pool}
    assert not scored_groups & {bench.group_key(i) for i in s.pool}
    for k in (3, 5):
        demos = s.demos_for(k)
        assert len(demos) == k and not scored & {d.id for d in demos}
    assert s.demos_for(3) != s.demos_for(5)[:3]  # each level has its own seeded draw
    assert s.demos_for(0) == ()


def test_largest_remainder_allocation():
    assert allocate({"a": 25, "b": 25, "c": 25}, 10) == {"a": 4, "b": 3, "c": 3}
    assert allocate({"a": 2, "b": 100}, 50) == {"a": 1, "b": 49}
    assert allocate({"a": 3, "b": 3}, 10) == {"a": 3, "b": 3}  # capped by what the data offers


def test_xstest_subset_is_stratified_over_its_18_types(data_dir):
    counts = Counter(i.stratum for i in item_set("xstest").items)
    assert len(counts) == 18 and sum(counts.values()) == 300
    assert sorted(Counter(counts.values()).items()) == [(16, 6), (17, 12)]  # 300*25/450 = 16.67 each


def test_source_counts(data_dir):
    assert len(all_items("truthfulqa")) == 817
    assert len(all_items("crows_pairs")) == 1508
    bbq = Counter(i.category for i in all_items("bbq"))
    assert len(bbq) == 9 and bbq["Age"] == 3680 and bbq["SES"] == 900 and sum(bbq.values()) == 14656
    xs = Counter(i.label for i in all_items("xstest"))
    assert xs == {"safe": 250, "unsafe": 200}


def test_toxigen_labels_on_the_full_test_split(data_dir):
    items = all_items("toxigen")
    assert len(items) == 940
    assert sum(i.toxic for i in items) == 406


def test_truthfulqa_gold_is_shuffled_away_from_a(data_dir):
    bench = get_benchmark("truthfulqa")
    golds = Counter(bench.gold(i) for i in item_set("truthfulqa").items)
    assert golds[0] < 120 and len(golds) >= 5  # the raw data has the true answer first for all 817
    first = item_set("truthfulqa").items[0]
    assert first.options[bench.gold(first)] == "Yes, all humans are human."


def test_subsample_is_a_stratified_share_of_the_subset(data_dir):
    full = {i.id for i in item_set("truthfulqa").items}
    a = item_set("truthfulqa", subsample=0.8, subsample_seed=43)
    b = item_set("truthfulqa", subsample=0.8, subsample_seed=44)
    assert len(a.items) == len(b.items) == 240
    assert {i.id for i in a.items} <= full and {i.id for i in a.items} != {i.id for i in b.items}
    assert a.subset_id.startswith("truthfulqa-s42-sub0.8-r43-n240-")
    assert a.demos_for(3) == item_set("truthfulqa").demos_for(3)  # same demonstrations


def test_a_limited_sweeps_subsample_is_a_share_of_the_items_it_scores(data_dir):
    from safetyrepro.sweep.cell import cell_item_ids
    from safetyrepro.sweep.drivers import item_sets

    first24 = [i.id for i in item_set("truthfulqa").items[:24]]
    a = item_set("truthfulqa", subsample=0.8, subsample_seed=43, within=24)
    b = item_set("truthfulqa", subsample=0.8, subsample_seed=44, within=24)
    ids_a, ids_b = {i.id for i in a.items}, {i.id for i in b.items}
    assert len(ids_a) == len(ids_b) == 19 and ids_a | ids_b <= set(first24) and ids_a != ids_b
    assert len(ids_a & ids_b) >= 14  # two 19-of-24 draws share at least 14 items
    assert a.subset_id.startswith("truthfulqa-s42-first24-sub0.8-r43-n19-")
    # the sweep scores exactly those: --limit keeps them all, and without --subsample nothing changes
    assert cell_item_ids(item_sets(0.8, 43, 24)("truthfulqa"), 24) == [i.id for i in a.items]
    assert cell_item_ids(item_sets(None, None, 24)("truthfulqa"), 24) == first24
    assert item_sets(None, None, 24)("truthfulqa").subset_id == item_set("truthfulqa").subset_id
    # a limit above the subset's size is the whole subset
    assert item_set("truthfulqa", subsample=0.8, subsample_seed=43, within=10_000) == item_set(
        "truthfulqa", subsample=0.8, subsample_seed=43
    )
