"""Issue 57: items that come in clusters (passages, templates, conversations). On clustered nulls the
unclustered paired test makes false claims well above alpha; the test on cluster totals stays within it
(Clopper-Pearson), its interval covers and agrees with it, and `verdict --cluster FIELD` runs it on two real
lm-eval folders, its p-value checked against all 2^12 sign patterns enumerated by hand."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

from safetyrepro.analysis.paired.clustered import cluster_interval, cluster_p_value, cluster_totals
from safetyrepro.analysis.paired.significance import sign_flip_p_value
from safetyrepro.analysis.paired.two_runs import PairedScores, compare
from safetyrepro.cli import main

ANY_TASK = Path(__file__).parents[1] / "importers" / "fixtures" / "any_task" / "lm_eval"
QWEN, SMOL = ANY_TASK / "qwen2.5-coder-0.5b", ANY_TASK / "smollm2"


def clustered_world(rng, clusters=30, size=10, shift=0.3, theta=0.0):
    """0/1 answers of two models on `clusters` clusters of `size` items: each cluster shifts the difference by
    +shift or -shift (a passage one model reads better), so the difference is `theta` on average but its items
    move together within a cluster."""
    u = rng.choice([-shift, shift], size=clusters) + theta
    p_a, p_b = np.repeat(0.5 + u / 2, size), np.repeat(0.5 - u / 2, size)
    a = (rng.random(clusters * size) < p_a).astype(float)
    b = (rng.random(clusters * size) < p_b).astype(float)
    return a - b, np.repeat([f"c{j}" for j in range(clusters)], size)


def ci_share(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95 % interval for a share k of n."""
    low = float(beta.ppf(0.025, k, n - k + 1)) if k else 0.0
    high = float(beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
    return low, high


def test_cluster_totals_keep_first_seen_order_and_sizes():
    totals, sizes = cluster_totals([1, 0, -1, 1, 1], ["b", "a", "b", "c", "a"])
    assert totals.tolist() == [0.0, 1.0, 1.0] and sizes.tolist() == [2.0, 2.0, 1.0]
    assert cluster_p_value([1, -1, 1], ["x", "y", "z"]) == sign_flip_p_value([1, -1, 1])  # clusters of one


def test_on_clustered_nulls_only_the_clustered_test_keeps_its_level():
    rng = np.random.default_rng(57)
    n = 400
    items = clusters = 0
    for _ in range(n):
        d, c = clustered_world(rng)
        items += sign_flip_p_value(d) <= 0.05
        clusters += cluster_p_value(d, c) <= 0.05
    assert ci_share(items, n)[0] > 0.05, f"the unclustered test claimed {items} of {n}: the world lost its point"
    assert ci_share(clusters, n)[0] <= 0.05 and clusters / n < 0.08, f"{clusters} of {n}"
    assert (items, clusters) == (71, 15)  # docs/compare_any_runs.md quotes them


def test_the_clustered_interval_covers_and_agrees_with_its_test():
    rng = np.random.default_rng(5)
    n, misses = 40, 0
    for _ in range(n):
        d, c = clustered_world(rng, clusters=12, size=5, theta=0.1)
        p = cluster_p_value(d, c)
        interval = cluster_interval(d, c, 0.05)
        misses += not interval.low <= 0.1 <= interval.high
        assert (p <= 0.05) == (not interval.low <= 0 <= interval.high), (p, interval)
        assert interval.high - interval.low > 0
    assert ci_share(misses, n)[0] <= 0.05, f"{misses} of {n} missed"
    tied = cluster_interval(np.zeros(20), np.repeat(["a", "b"], 10), 0.05)
    assert (tied.low, tied.high) == (-1.0, 1.0)  # two clusters: the test can reject nothing


def test_a_clustered_comparison_says_so_and_reads_detectable_on_the_clusters():
    rng = np.random.default_rng(1)
    d, c = clustered_world(rng, clusters=12, size=5, theta=0.2)
    a = (d > 0).astype(float)
    b = (d < 0).astype(float)
    plain, clustered = (
        compare([PairedScores("t", "acc", a, b, True, 1, clusters, field)], "A", "B").table.iloc[0]
        for clusters, field in ((None, ""), (tuple(c), "passage"))
    )
    assert clustered["n_clusters"] == 12 and plain["n_clusters"] is None
    assert clustered["test"] == "exact sign-flip permutation of cluster totals (12 clusters of passage)"
    assert clustered["p_value"] == cluster_p_value(a - b, c) and plain["p_value"] == sign_flip_p_value(a - b)
    assert clustered["diff"] == plain["diff"]  # the same quantity, another unit of sampling
    assert "on the 12 clusters' mean differences" in clustered["detectable_basis"]
    assert clustered["detectable"] > plain["detectable"]  # 12 draws detect less than 60 would


def _with_passages(tmp_path: Path, folder: Path, size: int = 5) -> Path:
    """A copy of a real lm-eval run whose documents name a passage: 5 consecutive documents share one."""
    out = tmp_path / folder.name
    shutil.copytree(folder, out)
    (samples,) = out.rglob("samples_*.jsonl")
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    for s in lines:
        s["doc"]["passage"] = f"p{s['doc_id'] // size}"
    samples.write_text("".join(json.dumps(s) + "\n" for s in lines))
    return out


def test_verdict_cluster_on_two_lm_eval_runs_is_the_sign_flip_of_passage_totals_by_hand(tmp_path, capsys):
    qwen, smol = _with_passages(tmp_path, QWEN), _with_passages(tmp_path, SMOL)
    assert main(["verdict", str(qwen), str(smol), "--cluster", "passage", "--metric", "acc", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    (row,) = v["comparisons"]
    assert "claims about the models: clusters of passage as draws from each task" in v["verdict"]
    docs = {}
    for folder in (qwen, smol):
        (path,) = folder.rglob("samples_*.jsonl")
        docs[folder] = {r["doc_id"]: r["acc"] for r in map(json.loads, path.read_text().splitlines())}
    d = np.array([docs[qwen][i] - docs[smol][i] for i in range(60)])
    totals = d.reshape(12, 5).sum(axis=1)
    observed = abs(totals.sum())
    signs = np.array(list(itertools.product((-1, 1), repeat=12)))
    by_hand = float(np.mean(np.abs(signs @ np.abs(totals)) >= observed - 1e-9))
    assert row["n_clusters"] == 12 and row["n_items"] == 60
    assert row["p_value"] == pytest.approx(by_hand, rel=1e-12)
    assert row["ci_low"] <= row["diff"] <= row["ci_high"]


def test_verdict_cluster_refuses_what_it_cannot_read_in_one_line(tmp_path, capsys):
    def refused(*argv: str) -> str:
        assert main(["verdict", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    qwen, smol = str(_with_passages(tmp_path, QWEN)), str(_with_passages(tmp_path, SMOL))
    said = refused(qwen, smol, "--cluster", "paragraph")
    assert "--cluster paragraph: task arc_easy_local's item '0' has no field 'paragraph'" in said
    assert "its logged fields are answerKey, choices, id, passage, question" in said
    assert "not clustered" in refused(qwen, smol, "--cluster", "passage", "--margin", "0.1")
    grid = str(Path(__file__).parents[2] / "study" / "grid.csv")
    assert "--cluster: for runs compared task by task" in refused(
        "smollm2", "gemma3-270m", "--grid", grid, "--cluster", "x"
    )
