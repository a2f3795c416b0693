"""`safetyrepro verdict RUN_A RUN_B` on the runs people really have (issue 54, item 3): it reads what it is
given, by content, and says what is wrong with it in one line (exit 2). Built from the committed real runs of
tests/importers/fixtures/any_task (lm-eval's arc_easy with --log_samples; Inspect logs on mockllm), damaged or
extended the way the tester did; no model runs."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from safetyrepro.cli import main

FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures" / "any_task"
SMOL, QWEN = FIXTURES / "lm_eval" / "smollm2", FIXTURES / "lm_eval" / "qwen2.5-coder-0.5b"
STRONG, WEAK = FIXTURES / "inspect" / "strong.eval", FIXTURES / "inspect" / "weak.eval"


def _verdict(capsys, *argv) -> dict:
    assert main(["verdict", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys, *argv) -> str:
    assert main(["verdict", *map(str, argv)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err.removeprefix("safetyrepro: error: ")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _samples(folder: Path) -> Path:
    (path,) = folder.rglob("samples_*.jsonl")
    return path


def _p_values(v: dict) -> dict[str, float]:
    return {c["metric"]: c["p_value"] for c in v["comparisons"]}


# -- 1. the format is read from the files, not their names ---------------------------------------------------
def test_an_lm_eval_folder_with_a_stray_eval_and_json_file_is_still_read_as_lm_eval(tmp_path, capsys):
    stray = _copy(SMOL, tmp_path / "smol")
    (stray / "smollm2" / "notes.eval").write_text("not a log")
    (stray / "smollm2" / "settings.json").write_text('{"batch_size": 8}')
    (stray / "old.eval").write_bytes(b"PK\x03\x04 cut")  # a zip's start, nothing more: no log
    clean, got = _verdict(capsys, QWEN, SMOL), _verdict(capsys, QWEN, stray)
    assert _p_values(got) == _p_values(clean) and set(_p_values(got)) == {"acc,none", "acc_norm,none"}
    assert [r["n_items"] for r in got["comparisons"]] == [60, 60] and got["notes"] == []


def test_a_folder_holding_an_lm_eval_run_and_an_inspect_log_is_refused_naming_both(tmp_path, capsys):
    both = _copy(SMOL, tmp_path / "both")
    shutil.copy(STRONG, both / "smollm2" / "strong.eval")
    (results,) = both.rglob("results_*.json")
    assert _refused(capsys, QWEN, both) == (
        f"run {both} holds both an lm-eval run ({results} and 1 more) and Inspect logs "
        f"({both / 'smollm2' / 'strong.eval'}): a run is one or the other; name the lm-eval folder or the Inspect "
        f"log itself"
    )


def test_an_inspect_log_named_like_json_is_read_by_content(tmp_path, capsys):
    """A folder of Inspect logs saved as .json (no .eval at all) is Inspect, and compared as one."""
    from inspect_ai.log import read_eval_log, write_eval_log

    folder = tmp_path / "logs"
    folder.mkdir()
    write_eval_log(read_eval_log(str(STRONG)), str(folder / "strong.json"))
    v = _verdict(capsys, folder, WEAK, "--labels", "strong", "weak")
    assert [(r["task"], r["n_items"], r["n_epochs"]) for r in v["comparisons"]] == [("arithmetic", 40, 2)]


# -- 2. damaged files are named as such -----------------------------------------------------------------------
def test_a_samples_file_cut_mid_line_is_named_truncated_at_that_line(tmp_path, capsys):
    cut = _copy(SMOL, tmp_path / "cut")
    path = _samples(cut)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:30]) + lines[30][:40])
    assert _refused(capsys, QWEN, cut) == (
        f"samples file {path} is truncated at line 31: its last record is cut off mid-line (an interrupted run or "
        f"an incomplete copy); copy the whole file or rerun lm_eval with --log_samples"
    )


def test_a_samples_file_cut_at_a_line_end_is_truncated_not_a_metric_that_is_no_mean(tmp_path, capsys):
    cut = _copy(SMOL, tmp_path / "cut")
    path = _samples(cut)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:30]))
    err = _refused(capsys, QWEN, cut)
    assert err == (
        f"samples file {path} is truncated at line 30: it holds 30 of the 60 documents the run scored (an "
        f"interrupted run or an incomplete copy); copy the whole file or rerun lm_eval with --log_samples"
    )
    assert "not a mean" not in err


def test_an_empty_samples_file_is_named_empty_not_a_task_only_in_the_other_run(tmp_path, capsys):
    empty = _copy(SMOL, tmp_path / "empty")
    path = _samples(empty)
    path.write_text("")
    err = _refused(capsys, QWEN, empty)
    assert err == (
        f"samples file {path} is empty: it holds no record of the run's 60 documents (an interrupted run or an "
        f"incomplete copy); copy the whole file or rerun lm_eval with --log_samples"
    )
    assert "only in" not in err


def test_a_samples_file_naming_a_document_twice_is_a_duplicate(tmp_path, capsys):
    twice = _copy(SMOL, tmp_path / "twice")
    path = _samples(twice)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:7] + [lines[3]] + lines[7:]))
    assert _refused(capsys, QWEN, twice) == (
        f"samples file {path}: duplicate sample id/epoch: document 3 (filter 'none') at lines 4 and 8 (a samples "
        f"file of two runs joined?); a paired verdict needs each document once"
    )


def test_an_inspect_log_holding_a_sample_twice_is_a_duplicate_not_a_metric_that_is_no_mean(tmp_path, capsys):
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(STRONG))
    log.samples.append(log.samples[22].model_copy())
    path = tmp_path / "doubled.json"
    write_eval_log(log, str(path))
    err = _refused(capsys, WEAK, path, "--labels", "weak", "doubled")
    sample = log.samples[22]
    assert err == (
        f"{path}: duplicate sample id/epoch: sample {sample.id!r} epoch {sample.epoch} appears 2 times (a log joined "
        f"from two runs, or edited?); a paired verdict needs each sample once per epoch: rerun the eval or remove "
        f"the copy"
    )
    assert "not a mean" not in err


# -- 3. items paired by content where the runs record no hash ------------------------------------------------
def _unhashed(src: Path, dst: Path, shift: int = 0) -> Path:
    """A copy of an lm-eval run without doc_hash / prompt_hash / target_hash, its doc_ids moved by `shift`."""
    folder = _copy(src, dst)
    path = _samples(folder)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        for key in ("doc_hash", "prompt_hash", "target_hash"):
            del r[key]
        r["doc_id"] += shift
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_runs_without_hashes_whose_doc_ids_are_shifted_are_refused_with_the_count_and_the_shift(tmp_path, capsys):
    a = _unhashed(QWEN, tmp_path / "a")
    b = _unhashed(SMOL, tmp_path / "b", shift=1)
    assert _refused(capsys, a, b, "--metric", "acc") == (
        "task arc_easy_local: the runs do not hold the same items: 1 item-epoch records only in A's run and 1 only "
        "in B's (e.g. item '0' epoch 1); 59 of 59 items whose content or target differs (e.g. '1') (59 compared by "
        "the logged `doc` field or arguments: the runs record no doc_hash); 59 of them are in B's run under "
        "another id (A's '1' is B's '2': ids shifted by +1); pass --restrict to pair only the 0 items that match"
    )


def test_runs_without_hashes_on_the_same_documents_are_paired_as_with_hashes(tmp_path, capsys):
    a, b = _unhashed(QWEN, tmp_path / "a"), _unhashed(SMOL, tmp_path / "b")
    hashed = _verdict(capsys, QWEN, SMOL)
    for pair in ((a, b), (QWEN, b)):  # both without hashes; one with, one without: compared by the doc field
        v = _verdict(capsys, *pair)
        assert _p_values(v) == _p_values(hashed) and [r["n_items"] for r in v["comparisons"]] == [60, 60]


def test_one_document_changed_without_hashes_is_counted(tmp_path, capsys):
    a, b = _unhashed(QWEN, tmp_path / "a"), _unhashed(SMOL, tmp_path / "b")
    path = _samples(b)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[5]["doc"]["question"] = "What is 1 + 1?"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    err = _refused(capsys, a, b)
    assert "1 of 60 items whose content or target differs (e.g. '5') (1 compared by the logged `doc` field" in err
    assert {r["n_items"] for r in _verdict(capsys, a, b, "--restrict")["comparisons"]} == {59}


# -- 4. labels with invisible characters ---------------------------------------------------------------------
def _renamed(tmp_path: Path, src: Path, model: str, name: str) -> Path:
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(src))
    log.eval.model = model
    path = tmp_path / name
    write_eval_log(log, str(path))
    return path


def test_model_names_differing_by_format_characters_print_differently(tmp_path, capsys):
    zwsp = _renamed(tmp_path, STRONG, "mockllm/model\u200b", "zwsp.eval")
    rlo = _renamed(tmp_path, WEAK, "mockllm/\u202eledom", "rlo.eval")
    assert main(["verdict", str(zwsp), str(WEAK)]) == 0
    out = capsys.readouterr().out
    assert "A = mockllm/model\\u200b, B = mockllm/model." in out and "\u200b" not in out
    v = _verdict(capsys, zwsp, rlo)
    assert (v["model_a"], v["model_b"]) == ("mockllm/model\\u200b", "mockllm/\\u202eledom")


def test_model_names_that_still_print_the_same_after_escaping_are_refused(tmp_path, capsys):
    invisible = _renamed(tmp_path, STRONG, "mockllm/model\u200b", "a.eval")
    spelt = _renamed(tmp_path, WEAK, "mockllm/model\\u200b", "b.eval")  # the escape typed out
    assert _refused(capsys, invisible, spelt) == (
        "both runs are of model 'mockllm/model\\\\u200b'; name them with --labels A B"
    )


# -- 5. the detectable difference of long fractional item lists ----------------------------------------------
SMALL = {  # today's results (before the change), to the last digit: (effect, achieved) at K = 1 and K = 3
    # 0/1: issue 53 reads the design discordance, unconditionally (was 0.2256 and 0.2725, given the observed M)
    "binary": [(0.23738956451416016, 0.8000001905706299), (0.26993751525878906, 0.8000006392470014)],
    "tenths": [(0.15820106506347656, 0.8000029864180946), (0.17990318298339844, 0.800000455634615)],
    "fraction": [(0.15169102709922788, 0.8000011001632559), (0.17184107527236941, 0.8000030624262253)],
}


def _small_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(54)
    return {
        "binary": (rng.integers(0, 2, 80) - rng.integers(0, 2, 80)).astype(float),
        "tenths": (rng.integers(0, 11, 60) - rng.integers(0, 11, 60)) / 10,
        "fraction": np.round(rng.random(40) - rng.random(40), 6),
    }


def test_detectable_on_small_inputs_is_unchanged():
    """The effect to the last digit (a bisection on a fixed grid); the power it achieves to 12 digits: a sum's last
    digit moves with the CPU's vector kernels (AVX-512's and AVX2's differ at 1e-16)."""
    from safetyrepro.analysis.paired.power import detectable_from_differences

    for name, d in _small_cases().items():
        got = [detectable_from_differences(d, k, 0.05, 0.8) for k in (1, 3)]
        assert [g.effect for g in got] == [e for e, _ in SMALL[name]], name
        assert [g.achieved for g in got] == pytest.approx([a for _, a in SMALL[name]], rel=1e-12, abs=0), name


def test_the_balanced_law_is_the_law_one_item_weight_after_another_gives(monkeypatch):
    import safetyrepro.analysis.paired.sign_flip as sign_flip

    rng = np.random.default_rng(7)
    w = sign_flip.integer_weights(np.abs(rng.random(300) - rng.random(300)))
    w = w[w > 0]
    values, counts = np.unique(w, return_counts=True)
    for p in (0.5, 0.62):
        monkeypatch.setattr(sign_flip, "BALANCED_ABOVE", 10**18)
        one_by_one = sign_flip.subset_sum_law(w, p)
        balanced = sign_flip.balanced_law(values, counts, p)
        assert len(balanced) == len(one_by_one) == int(w.sum()) + 1
        assert np.abs(balanced - one_by_one).max() < 1e-15 and balanced.sum() == pytest.approx(1.0, abs=1e-12)


def test_detectable_of_4000_partial_credit_items_takes_seconds_and_few_laws(monkeypatch):
    import safetyrepro.analysis.paired.sign_flip as sign_flip
    from safetyrepro.analysis.paired.power import detectable_from_differences

    laws, law = [], sign_flip.subset_sum_law
    monkeypatch.setattr(sign_flip, "subset_sum_law", lambda w, p=0.5: laws.append(p) or law(w, p))
    rng = np.random.default_rng(0)
    d = rng.random(4000) - rng.random(4000)  # partial credit: no small lattice, the 1/1000 fallback
    start = time.perf_counter()
    found = detectable_from_differences(d, 2, 0.05, 0.8)
    took = time.perf_counter() - start
    # was 23 laws of a minute each: now the null law, a normal-approximation guess bracketed by two or three
    # exact laws, Brent's few steps inside that bracket; the bisection replays to the same answer
    assert len(laws) <= 8, laws
    assert took < 60, took  # ~5 s on two shared cores (was over 10 minutes)
    assert found.effect == pytest.approx(0.0198120517719334, abs=1e-12) and 0.8 <= found.achieved < 0.80002


def _partial_credit_run(folder: Path, scores: np.ndarray, model: str) -> Path:
    """An lm-eval run of SMOL's layout whose task scores each document with partial credit in [0, 1]."""
    shutil.copytree(SMOL, folder)
    (results,) = folder.rglob("results_*.json")
    data = json.loads(results.read_text())
    task = "arc_easy_local"
    data["results"][task] = {"alias": task, "score,none": float(np.mean(scores))}
    data["higher_is_better"][task] = {"score": True}
    data["n-samples"][task] = {"original": len(scores), "effective": len(scores)}
    data["config"]["model_args"] = {"model": model}
    results.write_text(json.dumps(data))
    _samples(folder).write_text(
        "".join(
            json.dumps(
                {"doc_id": i, "doc": {"q": f"item {i}"}, "target": "", "filter": "none", "metrics": ["score"]}
                | {"score": float(x)}
            )
            + "\n"
            for i, x in enumerate(scores)
        )
    )
    return folder


def test_a_verdict_on_4000_partial_credit_items_takes_seconds(tmp_path, capsys):
    rng = np.random.default_rng(0)
    a = _partial_credit_run(tmp_path / "a", np.round(rng.random(4000), 6), "model-a")
    b = _partial_credit_run(tmp_path / "b", np.round(rng.random(4000), 6), "model-b")
    start = time.perf_counter()
    v = _verdict(capsys, a, b, "--margin", "0.05")
    took = time.perf_counter() - start
    (row,) = v["comparisons"]
    assert row["n_items"] == 4000 and row["test"] == "exact sign-flip permutation (bounded scores)"
    assert row["detectable"] == pytest.approx(0.018005500604412555, abs=1e-12) and row["equivalent"]
    assert took < 60, took  # ~6 s on two shared cores: the p-value alone took 95 s, the detectable 10+ minutes


def test_labels_given_with_invisible_characters_are_refused(capsys):
    err = _refused(capsys, STRONG, WEAK, "--labels", "strong\u200b", "strong")
    assert "holds an invisible format character (U+200B), so it would not print as what it is" in err
    assert "\u200b" not in err  # the message itself prints the character escaped
