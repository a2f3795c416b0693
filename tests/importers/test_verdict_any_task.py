"""`safetyrepro verdict A B` on runs of tasks SafetyRepro does not define (issue 44), on committed real runs
(fixtures/any_task, made by make_fixtures.py there): lm-eval's own arc_easy task on SmolLM2 and Qwen2.5-Coder
(`--log_samples`), and Inspect logs of an inspect_evals-style task on mockllm (2 epochs). Every p-value is
checked against a computation that reads the files itself: statsmodels' exact McNemar and Holm, an exact
permutation law by dynamic programming, scipy's binomtest for each side of TOST."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from tost_by_hand import tost_by_hand

from safetyrepro.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "any_task"
SMOL, QWEN = FIXTURES / "lm_eval" / "smollm2", FIXTURES / "lm_eval" / "qwen2.5-coder-0.5b"
STRONG, WEAK = FIXTURES / "inspect" / "strong.eval", FIXTURES / "inspect" / "weak.eval"
TASK = "arc_easy_local"


def _verdict(capsys, *argv: str) -> dict:
    assert main(["verdict", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys, *argv: str) -> str:
    assert main(["verdict", *map(str, argv)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _samples(folder: Path) -> dict[int, dict]:
    (path,) = folder.rglob("samples_*.jsonl")
    return {r["doc_id"]: r for r in map(json.loads, path.read_text().splitlines())}


def _by_metric(v: dict) -> dict[str, dict]:
    return {c["metric"]: c for c in v["comparisons"]}


def test_two_lm_eval_folders_of_arc_easy_get_mcnemar_holm_and_tost_as_computed_by_hand(capsys):
    v = _verdict(capsys, QWEN, SMOL, "--margin", "0.1")
    assert (v["model_a"], v["model_b"]) == ("qwen2.5-coder-0.5b", "smollm2")
    rows = _by_metric(v)
    assert set(rows) == {"acc,none", "acc_norm,none"} and v["family_size"] == 2
    qwen, smol = _samples(QWEN), _samples(SMOL)
    assert sorted(qwen) == sorted(smol) == list(range(60))
    p = {}
    for metric in ("acc", "acc_norm"):
        a = np.array([qwen[i][metric] for i in range(60)])
        b = np.array([smol[i][metric] for i in range(60)])
        table = [[int(((a == x) & (b == y)).sum()) for y in (1, 0)] for x in (1, 0)]
        row = rows[f"{metric},none"]
        p[metric] = mcnemar(table, exact=True).pvalue
        assert row["p_value"] == pytest.approx(p[metric], rel=1e-12)
        assert row["n_items"] == 60 and row["diff"] == pytest.approx(a.mean() - b.mean(), abs=1e-15)
        assert row["direction"] == "higher is better"  # lm-eval's higher_is_better
        assert row["p_tost"] == pytest.approx(tost_by_hand(a - b, 0.1), rel=1e-10)
    _, holm, _, _ = multipletests([p["acc"], p["acc_norm"]], method="holm")
    assert [rows["acc,none"]["p_holm"], rows["acc_norm,none"]["p_holm"]] == pytest.approx(list(holm), rel=1e-12)
    assert v["verdict"].startswith("Verdict: ")
    assert all(s.startswith(f"{TASK} (acc") for s in v["sentences"]) and "80 % power" in v["sentences"][0]
    assert v["pairing"] == [
        {"task": TASK, "only_a": 0, "only_b": 0, "changed": 0, "prompts_differ": 0, "paired_items": 60}
    ]


def test_tost_of_two_close_runs_is_the_two_one_sided_binomial_tests_by_hand(tmp_path, capsys):
    """SmolLM2's run against a copy whose answers differ on 9 items (6 won by the original, 3 by the copy):
    the equivalence question of a quantised model against its original."""
    smol = _samples(SMOL)
    right = [i for i in range(60) if smol[i]["acc"] == 1][:6]
    wrong = [i for i in range(60) if smol[i]["acc"] == 0][:3]
    variant = _copy(SMOL, tmp_path / "variant")
    _rewrite_samples(variant, lambda r: {**r, "acc": 1.0 - r["acc"]} if r["doc_id"] in right + wrong else r)
    v = _verdict(capsys, SMOL, variant, "--labels", "original", "variant", "--margin", "0.2", "--metric", "acc")
    (row,) = v["comparisons"]
    a = np.array([smol[i]["acc"] for i in range(60)])
    b = np.array([1.0 - smol[i]["acc"] if i in right + wrong else smol[i]["acc"] for i in range(60)])
    assert row["n_differing"] == 9 and row["diff"] == pytest.approx(3 / 60)
    assert 0.001 < row["p_tost"] < 0.99  # neither side saturated: a real comparison with the hand computation
    assert row["p_tost"] == pytest.approx(tost_by_hand(a - b, 0.2), rel=1e-10)
    assert row["equivalent"] == (row["p_tost_holm"] <= 0.05)


def _sign_flip_by_hand(d: np.ndarray) -> float:
    """P(|sum of +-|d_i|| >= |sum d_i|), the law of the signed sum built item by item in a dictionary."""
    law = {0: 1.0}
    for w in np.rint(np.abs(d) * 2).astype(int):  # epoch means of two epochs: halves
        nxt: dict[int, float] = {}
        for s, pr in law.items():
            for step in (w, -w):
                nxt[s + step] = nxt.get(s + step, 0.0) + pr / 2
        law = nxt
    observed = abs(int(np.rint(d.sum() * 2)))
    return sum(pr for s, pr in law.items() if abs(s) >= observed)


def test_two_inspect_logs_get_the_exact_permutation_p_value_over_epoch_means(capsys):
    from inspect_ai.log import read_eval_log

    v = _verdict(capsys, STRONG, WEAK, "--labels", "strong", "weak", "--higher-is-better")
    (row,) = v["comparisons"]
    means = []
    for path in (STRONG, WEAK):
        log = read_eval_log(str(path))
        per: dict[str, list[float]] = {}
        for s in log.samples:
            per.setdefault(str(s.id), []).append(1.0 if s.scores["match"].value == "C" else 0.0)
        assert {len(x) for x in per.values()} == {2}
        means.append({k: float(np.mean(x)) for k, x in per.items()})
    ids = sorted(means[0])
    d = np.array([means[0][i] - means[1][i] for i in ids])
    assert row["task"] == "arithmetic" and row["metric"] == "match" and row["n_items"] == 40 and row["n_epochs"] == 2
    assert row["test"].startswith("exact sign-flip")
    assert row["p_value"] == pytest.approx(_sign_flip_by_hand(d), rel=1e-9)
    assert row["diff"] == pytest.approx(d.mean(), abs=1e-12)
    assert row["winner"] == ("strong" if row["p_holm"] <= 0.05 else "")
    assert row["direction"] == "higher is better"  # from the flag: Inspect records none


def test_markdown_block_and_undirected_reading(capsys):
    assert main(["verdict", str(STRONG), str(WEAK), "--labels", "strong", "weak", "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("**Verdict: ") and "| task | metric | direction |" in md
    assert "not recorded" in md and "is better" not in md  # no direction: higher, never better


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rewrite_samples(folder: Path, change) -> None:
    (path,) = folder.rglob("samples_*.jsonl")
    records = [change(r) for r in map(json.loads, path.read_text().splitlines())]
    path.write_text("".join(json.dumps(r) + "\n" for r in records if r is not None))
    (results,) = folder.rglob("results_*.json")
    data = json.loads(results.read_text())
    kept = [r for r in records if r is not None]
    for metric in ("acc", "acc_norm"):  # the results file keeps agreeing with its samples
        data["results"][TASK][f"{metric},none"] = float(np.mean([r[metric] for r in kept]))
    data["results"][TASK]["sample_len"] = len(kept)
    results.write_text(json.dumps(data))


def test_different_items_are_refused_with_their_count_or_restricted(tmp_path, capsys):
    fewer = _copy(SMOL, tmp_path / "smol")
    _rewrite_samples(fewer, lambda r: None if r["doc_id"] == 5 else r)
    err = _refused(capsys, QWEN, fewer)
    assert "1 item-epoch records only in A's run and 0 only in B's" in err and "--restrict" in err
    v = _verdict(capsys, QWEN, fewer, "--restrict")
    assert {r["n_items"] for r in v["comparisons"]} == {59}
    assert v["pairing"][0]["only_a"] == 1 and any("left out (--restrict); 59 items paired" in n for n in v["notes"])


def test_a_changed_prompt_is_refused_unless_restricted_or_allowed(tmp_path, capsys):
    other = _copy(SMOL, tmp_path / "smol")
    _rewrite_samples(other, lambda r: {**r, "prompt_hash": "0" * 64} if r["doc_id"] in (3, 4) else r)
    err = _refused(capsys, QWEN, other)
    assert "2 of 60 items given a different prompt" in err and "--prompts-may-differ" in err
    assert {r["n_items"] for r in _verdict(capsys, QWEN, other, "--restrict")["comparisons"]} == {58}
    v = _verdict(capsys, QWEN, other, "--prompts-may-differ")
    assert {r["n_items"] for r in v["comparisons"]} == {60}
    assert any("2 of 60 items were given different prompts and are paired by id" in n for n in v["notes"])


def test_a_direction_contradicting_the_run_and_unknown_names_are_refused(capsys):
    err = _refused(capsys, QWEN, SMOL, "--lower-is-better")
    assert "higher_is_better = True" in err and "--lower-is-better contradicts it" in err
    assert "neither run records it" in _refused(capsys, QWEN, SMOL, "--metric", "f1")
    assert "neither run holds it" in _refused(capsys, QWEN, SMOL, "--task", "boolq")
    assert "--margin 1.5" in _refused(capsys, QWEN, SMOL, "--margin", "1.5")
    assert "same model" not in _refused(capsys, STRONG, WEAK)  # both mockllm/model: name them
    assert "--labels A B" in _refused(capsys, STRONG, WEAK)


def test_one_metric_and_one_task_can_be_picked(capsys):
    v = _verdict(capsys, QWEN, SMOL, "--metric", "acc_norm", "--task", TASK)
    assert [r["metric"] for r in v["comparisons"]] == ["acc_norm,none"] and v["family_size"] == 1


def test_the_docs_page_shows_these_runs_own_output(capsys):
    page = (Path(__file__).parents[2] / "docs" / "compare_any_runs.md").read_text()
    assert main(["verdict", str(SMOL), str(QWEN), "--metric", "acc", "--margin", "0.05", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() in page
    assert main(["verdict", str(STRONG), str(WEAK), "--labels", "strong", "weak"]) == 0
    shown = capsys.readouterr().out.split("\n\n")[0]  # the verdict and the sentences; the table is left out
    assert shown in page


def test_safetyrepro_tasks_stay_per_configuration_unless_by_task(tmp_path, capsys):
    from lm_eval_fixtures import write_run

    hf = {"model_kind": "hf", "model": "/models/other", "model_args": {"pretrained": "/models/other"}, "weights": None}
    write_run(tmp_path, scores=[1, 1, 1, 1, 0, 1], folder="smol")
    write_run(tmp_path, scores=[0, 0, 1, 0, 0, 1], folder="other", i=1, **hf)
    a, b = tmp_path / "smol", tmp_path / "other"
    err = _refused(capsys, a, b, "--margin", "0.1")
    assert "--margin" in err and "add --by-task" in err
    v = _verdict(capsys, a, b, "--by-task", "--margin", "0.5", "--metric", "acc")
    (row,) = v["comparisons"]
    assert row["task"] == "safetyrepro_xstest_t1" and row["n_items"] == 6 and row["n_differing"] == 3
    assert row["p_value"] == pytest.approx(2 / 8)  # 3 discordant items, all to A: 2 * (1/2)**3


def test_a_run_without_samples_or_with_a_damaged_samples_file_is_one_line(tmp_path, capsys):
    bare = _copy(SMOL, tmp_path / "bare")
    (samples,) = bare.rglob("samples_*.jsonl")
    text = samples.read_text()
    samples.unlink()
    assert "has no samples file beside it: run lm_eval with --log_samples" in _refused(capsys, QWEN, bare)
    samples.write_text(text[: len(text) // 2])  # cut inside a record
    assert "is truncated at line 31: its last record is cut off mid-line" in _refused(capsys, QWEN, bare)
