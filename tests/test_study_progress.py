"""scripts/study/progress.py: which saved cells a new run may reuse, and the measured time left (no model)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def progress():
    spec = importlib.util.spec_from_file_location("study_progress", ROOT / "scripts" / "study" / "progress.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _f(model="m", benchmark="b", scoring="free_form", decoding="greedy", template="T1", shots=0):
    return {
        "model": model,
        "benchmark": benchmark,
        "scoring": scoring,
        "decoding": decoding,
        "template": template,
        "shots": shots,
    }


def test_time_left_is_the_mean_of_the_nearest_measured_kind(progress):
    done = [
        (_f(), 10.0),
        (_f(), 20.0),
        (_f(shots=3), 40.0),
        (_f(scoring="logprob", decoding="greedy"), 2.0),
        (_f(model="n", decoding="moderate"), 100.0),
    ]
    todo = [
        _f(),  # same kind: (10 + 20) / 2 = 15
        _f(shots=5),  # no 5-shot yet: same template, any shots: (10 + 20 + 40) / 3 = 23.33
        _f(template="T4"),  # no T4: same benchmark/scoring/decoding: 23.33
        _f(benchmark="c"),  # another benchmark: model/scoring/decoding: 23.33
        _f(model="o", decoding="moderate"),  # another model: scoring/decoding: 100
        _f(model="o", scoring="logprob", decoding="moderate"),
    ]  # scoring alone: 2
    left, used = progress.estimate(done, todo)
    assert left == pytest.approx(15 + 3 * (70 / 3) + 100 + 2)
    assert sum(used.values()) == len(todo) and used["model / benchmark / scoring / decoding / template / shots"] == 1
    assert progress.estimate([], [_f()]) == (0.0, {"no measurement": 1})


def test_saved_cells_are_reused_only_when_the_current_code_computes_them_alike(progress):
    logprob = {"status": "ok", "row": {"scoring": "logprob"}, "computed_by": {"decode": 1}}
    old_free = {"status": "ok", "row": {"scoring": "free_form"}}  # no record: the first engine
    new_free = {"status": "ok", "row": {"scoring": "free_form"}, "computed_by": {"decode": 2}}
    na = {"status": "not_applicable", "row": {"scoring": "logprob"}}
    assert progress.reusable(logprob, 2) and progress.reusable(na, 2)
    assert not progress.reusable(old_free, 2) and progress.reusable(new_free, 2)
    assert not progress.reusable(new_free, 3)


def test_saved_cells_count_only_for_the_sweep_that_saved_them(progress, tmp_path):
    import gzip
    import json
    from types import SimpleNamespace

    rec = {"key": "m|truthfulqa/T1/greedy/0shot/logprob", "status": "ok", "row": {"scoring": "logprob"}}
    (tmp_path / "cells" / "m").mkdir(parents=True)
    (tmp_path / "cells" / "m" / "x.json.gz").write_bytes(gzip.compress(json.dumps(rec).encode(), mtime=0))
    (tmp_path / "sweep.json").write_text(json.dumps({"models": ["m"], "limit": 24}))

    def sweep(identity):
        return SimpleNamespace(spec=SimpleNamespace(identity=lambda: identity))

    assert [r["key"] for r in progress._saved_for(tmp_path, sweep({"models": ["m"], "limit": 24})).values()] == [
        rec["key"]
    ]
    assert progress._saved_for(tmp_path, sweep({"models": ["m"], "limit": 4})) == {}  # another limit, same cell keys
    (tmp_path / "sweep.json").unlink()
    assert progress._saved_for(tmp_path, sweep({"models": ["m"], "limit": 24})) == {}


def test_a_model_without_its_own_cells_is_scaled_by_its_measured_or_prior_cost_factor(progress):
    done = [
        (_f(model="a"), 10.0),
        (_f(model="a", template="T2"), 30.0),
        (_f(model="a", scoring="logprob"), 1.0),
        (_f(model="b"), 20.0),
        (_f(model="b", template="T2"), 90.0),
    ]  # b/a: 2 and 3 -> median 2.5
    factors = progress.cost_factors(done, ["a", "b", "c", "d"], prior={"c": 4.0})
    assert factors["a"][0] == 1.0 and factors["b"][0] == pytest.approx(2.5) and "measured over 2" in factors["b"][1]
    assert factors["c"] == (4.0, "prior: parameter count ratio, no cell of a kind the reference has done yet")
    assert factors["d"][0] == 1.0 and factors["d"][1].startswith("prior: 1.0")
    scale = {m: v for m, (v, _) in factors.items()}
    # c's free-form greedy cell: scoring/decoding group over a (10, 30 on a's scale) and b (20/2.5, 90/2.5)
    left, used = progress.estimate(done, [_f(model="c", benchmark="z")], scale)
    assert left == pytest.approx(4.0 * (10 + 30 + 8 + 36) / 4)
    assert used == {"scoring / decoding": 1}
    # a model's own measured kind is used as measured, unscaled
    assert progress.estimate(done, [_f(model="b")], scale)[0] == pytest.approx(20.0)


def test_parameter_ratios_come_from_the_catalogue(progress):
    r = progress._param_ratios(["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "not-a-model"])
    assert r["smollm2"] == 1.0 and r["gemma3-270m"] == pytest.approx(268.1 / 134.5)
    assert r["qwen2.5-coder-0.5b"] == pytest.approx(630.2 / 134.5) and "not-a-model" not in r
