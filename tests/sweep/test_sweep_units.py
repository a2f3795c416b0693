"""Sweeper pieces without a model: plan, store, output cache, cell summaries, input errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from safetyrepro.errors import UserError
from safetyrepro.sweep.outputs_cache import OutputsCache, cache_key
from safetyrepro.sweep.plan import plan_cells, select_configs
from safetyrepro.sweep.records import ItemRecord, summarize
from safetyrepro.sweep.store import Store
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import default_rules
from safetyrepro.tasks.subsets import item_set

RULES = default_rules()


def test_plan_sizes_follow_the_envelope():
    cfgs = select_configs(RULES, ["toxigen", "xstest"], "conservative_core", "bf16")
    assert len(plan_cells(["a", "b", "c"], cfgs, RULES)) == 24
    assert len(select_configs(RULES, ["crows_pairs"], "full", "bf16")) == 12
    cells = plan_cells(["a"], select_configs(RULES, ["bbq"], "full", "bf16"), RULES)
    assert sum(len(c.seeds) for c in cells) == 12 + 12 + 5 * 24  # greedy cells once, sampled cells 5 seeds


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"benchmarks": ["crows_pairs"], "filters": {"scoring": ["free_form"]}},
            "crows_pairs allows scoring logprob only",
        ),
        ({"benchmarks": ["bbq"], "filters": {"template": ["T9"]}}, "unknown template 'T9'"),
        (
            {"benchmarks": ["bbq"], "filters": {"decoding": ["moderate"], "scoring": ["logprob"]}},
            "admit no full configuration of bbq with decoding=moderate, scoring=logprob",
        ),
        ({"benchmarks": ["mmlu"], "filters": {}}, "unknown benchmark 'mmlu'"),
        (
            {"benchmarks": ["bbq"], "filters": {"config": ["bbq/T3/moderate/0shot/logprob"]}},
            "'bbq/T3/moderate/0shot/logprob' is not among the full configurations of bbq \\(ids read like "
            "'bbq/T1/greedy",
        ),
        (
            {"benchmarks": ["bbq"], "filters": {"config": ["bbq/T3/diverse/0shot/free_form"], "shots": [5]}},
            "not among the full configurations of bbq with the other filters",
        ),
        (
            {"benchmarks": ["bbq", "xstest"], "filters": {"config": ["bbq/T3/diverse/0shot/free_form"]}},
            "admit no full configuration of xstest with configurations bbq/T3/diverse/0shot/free_form",
        ),
    ],
)
def test_forbidden_selections_are_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        select_configs(RULES, kwargs["benchmarks"], "full", "bf16", kwargs["filters"])


def test_configs_by_id_select_exactly_those_in_the_tiers_order():
    ids = [
        "truthfulqa/T4/moderate/0shot/free_form",
        "truthfulqa/T3/diverse/0shot/free_form",
        "xstest/T2/greedy/3shot/logprob",
    ]
    cfgs = select_configs(RULES, ["truthfulqa", "xstest"], "full", "fp32", {"config": ids})
    assert [c.config_id for c in cfgs] == [ids[1], ids[0], ids[2]]
    assert {c.precision for c in cfgs} == {"fp32"}
    assert len(plan_cells(["a", "b"], cfgs, RULES)) == 6
    # with an axis filter too, both must hold: an id the filter excludes is an error, not silently dropped
    assert [
        c.config_id
        for c in select_configs(RULES, ["truthfulqa"], "full", "fp32", {"config": ids[1:2], "template": ["T3"]})
    ] == [ids[1]]
    with pytest.raises(UserError, match="'truthfulqa/T4/moderate/0shot/free_form' is not among .* other filters"):
        select_configs(RULES, ["truthfulqa"], "full", "fp32", {"config": ids[:2], "template": ["T3"]})


def test_outputs_cache_round_trip(tmp_path):
    cache = OutputsCache(tmp_path / "o.sqlite")
    k1, k2 = cache_key(prompt="a", seed=1), cache_key(prompt="a", seed=2)
    assert k1 != k2 and cache_key(seed=1, prompt="a") == k1  # field order does not matter
    cache.put_many({k1: {"text": "x"}})
    assert cache.get_many([k1, k2]) == {k1: {"text": "x"}}
    assert (cache.hits, cache.misses) == (1, 1)
    assert OutputsCache(tmp_path / "o.sqlite").get_many([k1]) == {k1: {"text": "x"}}  # persisted


def _rec(item_id, seed, score, parsed=True, prediction=0):
    return ItemRecord(item_id, seed, "h", "x", prediction if parsed else None, parsed, 0, score)


def test_cell_summary_is_the_mean_over_seeds_of_item_means(data_dir):
    s = item_set("toxigen")
    a, b = s.items[0].id, s.items[1].id
    recs = [_rec(a, 1, 1.0), _rec(b, 1, 0.0, parsed=False), _rec(a, 2, 1.0), _rec(b, 2, 1.0)]
    summary = summarize(recs, get_benchmark("toxigen"), s)
    assert summary.seed_scores == {1: 0.5, 2: 1.0}
    assert summary.score == 0.75 and summary.parse_rate == 0.75 and summary.n_items == 2


def test_store_commits_atomically_and_reads_back(tmp_path):
    store = Store(tmp_path / "out")
    store.commit("org/model x", "bbq__T1", {"key": "k", "status": "ok", "row": {}, "items": []})
    assert store.done("org/model x", "bbq__T1")["key"] == "k"
    assert not list((tmp_path / "out").rglob("*.tmp"))
    store.commit("m", "bbq__T2", {"key": "k2", "status": "failed", "error": "boom"})
    assert store.done("m", "bbq__T2") is None  # a failed cell is retried on resume


def test_second_writer_is_refused(tmp_path):
    first = Store(tmp_path / "out")
    first.lock()
    try:
        with pytest.raises(UserError, match=f"another sweep \\(pid {os.getpid()}\\) is writing"):
            Store(tmp_path / "out").lock()
    finally:
        first.unlock()
    Store(tmp_path / "out").lock()  # free again


def test_other_rules_are_refused_unless_allowed(tmp_path):
    store = Store(tmp_path)
    ident = {"rules_sha256": "a" * 64, "models": ["m"], "limit": 3}
    store.write_identity(ident, None)
    # nothing computed yet: a start that failed before its first cell does not bind the folder
    assert store.check_identity({**ident, "limit": 4}, False) is None
    store.commit("m", "c", {"key": "m|c", "status": "ok", "row": {}, "items": []})
    assert store.check_identity(ident, False)["models"] == ["m"]
    with pytest.raises(UserError, match="under other rules"):
        store.check_identity({**ident, "rules_sha256": "b" * 64}, False)
    assert store.check_identity({**ident, "rules_sha256": "b" * 64}, True)
    with pytest.raises(UserError, match="other settings \\(limit: 3, now 4\\)"):
        store.check_identity({**ident, "limit": 4}, False)


def _cli(*args, cwd=None):
    env = {**os.environ, "SAFETYREPRO_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "safetyrepro.cli", *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--models", "gpt-17"], "unknown model 'gpt-17'"),
        (["--models", "smollm2", "--tier", "stresss"], "unknown tier 'stresss'"),
        (
            ["--models", "smollm2", "--benchmarks", "crows_pairs", "--scoring", "free_form"],
            "allows scoring logprob only",
        ),
        (["--models", "smollm2", "--precision", "int3"], "unknown precision 'int3'"),
        (["--models", "smollm2", "--limit", "0"], "--limit must be a positive number"),
        (
            ["--models", "smollm2", "--configs", "truthfulqa/T9/greedy/0shot/logprob"],
            "is not among the full configurations",
        ),
        (
            ["--models", "smollm2", "--benchmarks", "xstest", "--configs", "truthfulqa/T1/greedy/0shot/logprob"],
            "of a benchmark not in --benchmarks (xstest)",
        ),
        (
            ["--models", "smollm2", "--configs", "bbq/T1/greedy/0shot/logprob", "bbq/T1/greedy/0shot/logprob"],
            "config 'bbq/T1/greedy/0shot/logprob' is listed twice",
        ),
    ],
)
def test_sweep_input_errors_write_nothing(tmp_path, args, message, data_dir):
    out = tmp_path / "out"
    res = _cli("sweep", *args, "--out", str(out))
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not out.exists()


def test_sweep_refuses_a_directory_from_other_rules(tmp_path, data_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"rules_sha256": "0" * 64}))
    (out / "grid.csv").write_text("model\n")
    Store(out).commit(
        "smollm2", "xstest__T1__greedy__0shot__logprob", {"key": "k", "status": "ok", "row": {}, "items": []}
    )
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    res = _cli(
        "sweep", "--models", "smollm2", "--benchmarks", "xstest", "--tier", "conservative_core", "--out", str(out)
    )
    assert res.returncode == 2 and "under other rules" in res.stderr and res.stderr.count("\n") == 1
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_grid_without_sweep_record_is_not_overwritten(tmp_path, data_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "grid.csv").write_text("model\nhand-made\n")
    res = _cli("sweep", "--models", "smollm2", "--out", str(out))
    assert res.returncode == 2 and "no SafetyRepro sweep recorded" in res.stderr
    assert (out / "grid.csv").read_text() == "model\nhand-made\n"
    assert sorted(p.name for p in out.iterdir()) == ["grid.csv"]


def test_store_paths_are_safe_for_any_model_label(tmp_path):
    store = Store(tmp_path)
    p = store.cell_path("/abs/path/to/model.gguf", "x")
    assert p.parent.parent == tmp_path / "cells" and ".." not in str(p.relative_to(tmp_path))
    assert Path(p).name == "x.json"


def test_cell_summary_tie_rate_counts_tied_logprob_records(data_dir):
    s = item_set("toxigen")
    ids = [it.id for it in s.items[:4]]
    recs = [
        ItemRecord(i, 0, "h", "Yes", 1, True, 1, 0.5 if t else 1.0, [-1.0, -1.0 if t else -0.5], t)
        for i, t in zip(ids, [True, False, False, True])
    ]
    summary = summarize(recs, get_benchmark("toxigen"), s)
    assert summary.tie_rate == 0.5 and summary.score == 0.75
    free = [ItemRecord(i, 0, "h", "Yes", 1, True, 1, 1.0) for i in ids]
    assert summarize(free, get_benchmark("toxigen"), s).tie_rate is None


class _Backend:
    """A stand-in backend: counts calls, echoes prompt and seed."""

    def __init__(self, spec: str, seeds: str):
        from safetyrepro.adapters.backends.backend import BackendIdentity, Capabilities

        self.identity = BackendIdentity("lm-eval", spec, spec, "bf16", None)
        self.capabilities = Capabilities(loglikelihood=True, seeds=seeds)
        self.calls = []

    def generate_detailed(self, requests, batch_size=None, progress=False):
        from safetyrepro.adapters.backends.backend import GenResult

        self.calls.append([(r.prompt, r.seed) for r in requests])
        return [GenResult(f"{r.prompt}/{r.seed}", 0, 0, "unknown", r.seed) for r in requests]

    def loglikelihood(self, requests, batch_size=None):
        self.calls.append([(r.context, r.continuation) for r in requests])
        return [(-1.0, True) for _ in requests]


def test_cached_backend_keys_hold_the_backend_and_prefetch_only_per_request_seeds(tmp_path):
    from safetyrepro.adapters.backends.backend import (
        SEED_PER_REQUEST,
        SEED_PER_RUN,
        GenRequest,
        LoglikRequest,
    )
    from safetyrepro.sweep.cached_backend import CachedBackend

    cache = OutputsCache(tmp_path / "o.sqlite")
    per_request = CachedBackend(_Backend("lm-eval:vllm:pretrained=/m", SEED_PER_REQUEST), cache)
    per_request.prefetch_seeds = (1, 2, 3)
    r = GenRequest("p", 8, temperature=0.7, top_p=0.9, seed=1)
    assert per_request.generate_detailed([r])[0].text == "p/1"
    assert per_request.inner.calls == [[("p", 1), ("p", 2), ("p", 3)]]  # the siblings in the same call
    from dataclasses import replace

    assert per_request.generate_detailed([replace(r, seed=3)])[0].text == "p/3" and len(per_request.inner.calls) == 1
    per_run = CachedBackend(_Backend("lm-eval:hf:pretrained=/m", SEED_PER_RUN), cache)
    per_run.prefetch_seeds = (1, 2, 3)
    per_run.generate_detailed([r])
    assert per_run.inner.calls == [[("p", 1)]]  # another backend: not served from the first one's entries; no siblings
    per_run.loglikelihood([LoglikRequest("c", " x")])
    per_run.loglikelihood([LoglikRequest("c", " x")])
    assert len(per_run.inner.calls) == 2  # the second loglikelihood call was a hit


def test_cached_backend_serves_async_backends_from_the_cache(tmp_path):
    import anyio

    from safetyrepro.adapters.backends.backend import SEED_PER_REQUEST, GenRequest, GenResult
    from safetyrepro.sweep.cached_backend import CachedBackend

    class Async(_Backend):
        asynchronous = True

        async def agenerate(self, r):
            self.calls.append(r.prompt)
            return GenResult(f"{r.prompt}!", 1, 1, "stop", None)

    cached = CachedBackend(Async("inspect:openai-api/x/y", SEED_PER_REQUEST), OutputsCache(tmp_path / "o.sqlite"))
    assert cached.asynchronous
    outs = [anyio.run(cached.agenerate, GenRequest("[]", 8)) for _ in range(2)]
    assert [o.text for o in outs] == ["[]!", "[]!"] and cached.inner.calls == ["[]"]


def test_engine_generation_keys_name_the_decode_version_and_logprob_keys_stay():
    """Generations cached by the first engine (decode version 1, keys without it) are never served
    to a later decode; log-likelihood keys stay those of the first release (their numerics did not
    change)."""
    import re

    from safetyrepro.adapters.backends.backend import BackendIdentity
    from safetyrepro.adapters.engine.engine import DECODE_VERSION
    from safetyrepro.provenance import source_commit

    first = BackendIdentity("engine", "smollm2", "smollm2", "fp32", "ab" * 32, extra={"device": "cpu"})
    now = BackendIdentity(
        "engine", "smollm2", "smollm2", "fp32", "ab" * 32, extra={"device": "cpu", "decode": DECODE_VERSION}
    )
    assert DECODE_VERSION >= 2
    assert now.cache_fields() == first.cache_fields() == first.gen_cache_fields()
    assert now.gen_cache_fields() == {**first.cache_fields(), "decode": DECODE_VERSION}
    commit = source_commit()  # this checkout is a git checkout
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit)
