"""Clusters as the population target's draws (issue 57: `certify replay --cluster FIELD`).

Calibration on clustered nulls: 40 clusters of 10 items; on each cluster model a is right with probability 0.5 + s
and model b with 0.5 - s, s = +-0.25 at random per cluster, so the two models are equal on average over clusters and
every claim is false. Read item by item (the draws taken as independent), certify's population sequences claim a
difference far more often than alpha; with the clusters as the draws their false-claim rate is within alpha
(Clopper-Pearson: 40 and 2 false claims in 200 grids). Then the command line: the replay's records with a cluster
column, and the flags it refuses beside --cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import beta

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.certify.clusters import ClusterOracle, cluster_members, clustered_problem
from safetyrepro.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
import readings_grid as case  # noqa: E402

N_CLUSTERS, SIZE, SHIFT, GRIDS, ALPHA = 40, 10, 0.25, 200, 0.05


def _null_grid(seed: int):
    rng = np.random.default_rng(seed)
    items = [f"q{k}" for k in range(N_CLUSTERS * SIZE)]
    cluster_of = {item: f"c{k // SIZE}" for k, item in enumerate(items)}
    s = np.repeat(rng.choice([-SHIFT, SHIFT], N_CLUSTERS), SIZE)
    scores = {"a": (rng.random(len(items)) < 0.5 + s).astype(float), "b": (rng.random(len(items)) < 0.5 - s)}
    scores["b"] = scores["b"].astype(float)
    index = {item: k for k, item in enumerate(items)}

    def oracle(benchmark, config_id, model, item_ids):
        return scores[model][[index[i] for i in item_ids]]

    problem = BenchmarkProblem("my_task", ("c",), ("a", "b"), tuple(items), 1, ideal=None)
    return problem, oracle, cluster_of


def _claims(problem, oracle) -> bool:
    result = certify([problem], oracle, CertifyOptions(alpha=ALPHA, seed=1))
    return any(c.claim in ("a_better", "b_better") for c in result.claims)


def test_clusters_as_draws_keep_false_claims_within_alpha_where_items_as_draws_do_not():
    by_item = by_cluster = 0
    for seed in range(GRIDS):
        problem, oracle, cluster_of = _null_grid(seed)
        by_item += _claims(problem, oracle)
        members = {"my_task": cluster_members(problem.item_ids, cluster_of)}
        by_cluster += _claims(clustered_problem(problem, members["my_task"]), ClusterOracle(oracle, members))
    # Clopper-Pearson 95 %: items as draws claim above alpha (40 of 200 when written: 0.15-0.26), clusters as
    # draws within it (2 of 200: 0.001-0.036)
    assert beta.ppf(0.025, by_item, GRIDS - by_item + 1) > ALPHA
    assert beta.ppf(0.975, by_cluster + 1, GRIDS - by_cluster) <= ALPHA


def test_a_cluster_is_its_items_mean_and_the_evaluated_clusters_go_back_to_items():
    problem, oracle, cluster_of = _null_grid(0)
    members = cluster_members(problem.item_ids, cluster_of)
    wrapped = ClusterOracle(oracle, {"my_task": members})
    got = wrapped("my_task", "c", "a", ["c3", "c0"])
    want = [oracle("my_task", "c", "a", list(members[c])).mean() for c in ("c3", "c0")]
    assert got.tolist() == want and clustered_problem(problem, members).item_ids[:2] == ("c0", "c1")


def test_certify_replay_reads_clusters_from_a_column_of_the_records(tmp_path, capsys, data_dir):
    grid, items = case.write_case(tmp_path / "case")
    records = pd.read_parquet(items)
    records["passage"] = records["item_id"].str[-3:].astype(int) // 5  # 8 passages of 5 items
    records.to_parquet(items)
    argv = ["certify", "replay", str(items), "--grid", str(grid), "--cluster", "passage", "--quiet", "--seed", "0"]
    assert main([*argv, "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert "bbq: the draws are 8 clusters of passage (40 items)" in printed
    used = pd.read_parquet(tmp_path / "c" / "items.parquet")
    assert set(used["item_id"]) <= set(records["item_id"]) and len(used) % 5 == 0  # whole passages
    for extra, clash in ((["--target", "subset"], "--target subset"), (["--reading", "content"], "--reading content")):
        assert main([*argv, *extra, "--out", str(tmp_path / "x")]) == 2
        assert f"leave out {clash}" in capsys.readouterr().err
    records["passage"] = records["passage"].where(records["model"] == "model-a", 99)  # one item, two clusters
    records.to_parquet(items)
    assert main([*argv, "--out", str(tmp_path / "y")]) == 2
    assert "a cluster is one per item" in capsys.readouterr().err
