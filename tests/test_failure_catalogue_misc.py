"""The failure catalogue, issue 43's other cases and issue 39's verdict items: each case one command (or one
function where no command reaches it without a model), its exit code and its one line checked, or the right
answer worked out by hand. Quick: no model, every input built under tmp_path."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from refusals import refused as _refused

from safetyrepro.cli import main
from safetyrepro.grid_schema import grid_row
from safetyrepro.tasks.envelope import Config, default_rules


# -- hand-built grids with item records ------------------------------------------------------------------
def _write(folder: Path, answers: dict[str, dict[str, np.ndarray]], n_items: int | None = None) -> Path:
    """answers: model -> config_id -> (items x seeds) 0/1 scores. Writes grid.csv (each cell's score the
    mean of its seeds' means, as a sweep computes it) and items.parquet; returns the grid's path."""
    rules = default_rules()
    rows, items = [], []
    for model, per_config in answers.items():
        for cid, x in per_config.items():
            x = np.asarray(x, dtype=float).reshape(len(x), -1)
            cfg = Config.from_id(cid)
            seeds = rules.seeds(cfg.decoding)
            assert x.shape[1] == len(seeds)
            rows.append(
                grid_row(
                    model,
                    cfg,
                    "bf16",
                    "lm-eval",
                    n_items or len(x),
                    len(seeds),
                    float(x.mean(axis=0).mean()),
                    1.0,
                    rules.tier(cfg),
                    cid,
                    status=None,
                )
            )
            for i, j in itertools.product(range(len(x)), range(len(seeds))):
                items.append(
                    {"model": model, "config_id": cid, "item_id": f"i{i}", "seed": seeds[j], "item_score": x[i, j]}
                )
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "grid.csv", index=False)
    pd.DataFrame(items).to_parquet(folder / "items.parquet", index=False)
    return folder / "grid.csv"


MODERATE = [c.config_id for c in default_rules().configs("xstest", "full") if c.decoding == "moderate"]


def _seed_mean_grid(tmp_path: Path, configs=MODERATE) -> Path:
    """30 items, 5 seeds per item: on 20 items A answers right on 2 of 5 seeds and B on 1 of 5 (item
    differences of 0.2, seed means, never 0/1), on the other 10 both on 2 of 5."""
    a = np.zeros((30, 5))
    b = np.zeros((30, 5))
    a[:20, :2] = 1
    b[:20, :1] = 1
    a[20:, :2] = b[20:, :2] = 1
    return _write(tmp_path / "g", {"smollm2": {c: a for c in configs}, "gemma3-270m": {c: b for c in configs}})


# -- verdict -----------------------------------------------------------------------------------------------
def test_verdict_of_a_model_with_itself_is_refused(tmp_path, capsys):
    grid = _seed_mean_grid(tmp_path)
    _refused(["verdict", "smollm2", "smollm2", "--grid", grid], capsys, "same model", "'smollm2'")


def test_verdict_of_one_run_with_itself_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    _refused(["verdict", run, tmp_path / "." / "run", "--labels", "a", "b"], capsys, "same run")


def test_verdict_power_sentence_reads_the_seed_means_and_never_calls_a_confirmed_win_undetectable(tmp_path, capsys):
    grid = _seed_mean_grid(tmp_path)
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    sentence = v["sentences"]["xstest"]
    k = len(MODERATE)
    # each configuration: 20 items differ by +0.2, so the sign-flip p-value is 2 / 2**20, below alpha / K
    table = pd.DataFrame(v["configurations"])
    assert np.allclose(table["p_value"], 2 / 2**20, rtol=1e-9) and (table["winner"] == "smollm2").all()
    assert f"confirmed on {k} of {k} configurations" in sentence
    assert "however large" not in sentence and "found at 80 % power from" in sentence
    # the 0/1 model read at the mean |d| (0.133) finds nothing at 30 items and alpha/12 (what the
    # sentence said before); the sentence's number is the smallest effect whose power, summed here over
    # the number of the 20 differing items A wins, reaches 0.8 (independent of power.py)
    from safetyrepro.analysis.paired.power import detectable_difference

    assert detectable_difference(30, 0.2 * 20 / 30, k, 0.05).effect is None
    found = v["detectable_difference"]["xstest"]
    assert 0 < found <= 0.2 * 20 / 30
    assert _enumerated_power(20, 30, found, 0.05 / k) >= 0.8 - 1e-9
    assert _enumerated_power(20, 30, found - 0.01, 0.05 / k) < 0.8


def _enumerated_power(m: int, n: int, effect: float, level: float) -> float:
    """m items of equal |d| among n: each goes to A with p, E = (2p - 1) m |d| / n with |d| = 0.2; the
    sign-flip test on equal magnitudes is the binomial test on the m signs. Power toward A by summing
    over the number of items won."""
    from scipy.stats import binom

    dbar = 0.2 * m / n
    p = (1 + effect / dbar) / 2
    total = 0.0
    for w in range(m + 1):
        extreme = abs(2 * w - m)
        p_value = sum(binom.pmf(u, m, 0.5) for u in range(m + 1) if abs(2 * u - m) >= extreme)
        if p_value <= level and 2 * w > m:
            total += binom.pmf(w, m, p)
    return total


def test_detectable_from_differences_matches_enumeration_on_mixed_magnitudes():
    from safetyrepro.analysis.paired.power import detectable_from_differences
    from safetyrepro.analysis.paired.significance import sign_flip_p_value

    d = np.array([0.2, 0.4, 0.4, 0.6, 0.8, 1.0, 1.0, 0.2, 0.0, 0.0])
    r = detectable_from_differences(d, 1, 0.05)
    mags = np.abs(d[d != 0])
    dbar = mags.sum() / len(d)

    def power(e):  # every sign pattern of the 8 differing items, weighted by its probability
        p = (1 + e / dbar) / 2
        total = 0.0
        for signs in itertools.product((1, -1), repeat=len(mags)):
            x = mags * np.array(signs)
            if x.sum() > 0 and sign_flip_p_value(x) <= 0.05 * (1 + 1e-9):
                k = sum(s > 0 for s in signs)
                total += p**k * (1 - p) ** (len(mags) - k)
        return total

    assert r.effect is not None and power(r.effect) >= 0.8 - 1e-9 > power(r.effect - 2e-3)
    assert r.discordance == pytest.approx(dbar)


def test_verdict_on_one_configuration_gives_its_verdict(tmp_path, capsys):
    grid = _seed_mean_grid(tmp_path, configs=MODERATE[:1])
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid)]) == 0
    out, err = capsys.readouterr()
    assert "rho_flip" not in out + err
    assert out.splitlines()[0].startswith("xstest: smollm2 is better than gemma3-270m, confirmed on 1 of 1")


def test_verdict_json_is_strict_with_null_for_undefined_numbers(tmp_path, capsys):
    # one item per configuration: no content reading (NaN inside), which must print as null; the interval is
    # defined from one item (issue 53: Clopper-Pearson at Holm's level alpha/2, 1 of 1 discordant item won by A)
    one = {c: np.ones((1, 5)) for c in MODERATE[:2]}
    none = {c: np.zeros((1, 5)) for c in MODERATE[:2]}
    grid = _write(tmp_path / "g", {"smollm2": one, "gemma3-270m": none})
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid), "--json"]) == 0
    text = capsys.readouterr().out

    def refuse(name):
        raise ValueError(f"{name} is not strict JSON")

    v = json.loads(text, parse_constant=refuse)
    row = v["configurations"][0]
    assert row["content_p"] is None and row["diff"] == 1.0
    assert row["ci_low"] == pytest.approx(-0.9875) and row["ci_high"] == 1.0 and row["ci_level"] == 0.975


def test_verdict_names_the_configurations_missing_from_its_holm_family(tmp_path, capsys):
    grid = _seed_mean_grid(tmp_path)
    items = pd.read_parquet(grid.parent / "items.parquet")
    gone = MODERATE[4]
    items[~((items["config_id"] == gone) & (items["model"] == "gemma3-270m"))].to_parquet(
        grid.parent / "items.parquet", index=False
    )
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    k = len(MODERATE)
    assert v["family_size"] == {"xstest": k - 1} and v["missing_configurations"] == {"xstest": [gone]}
    assert f"Holm over {k - 1} configurations (1 of {k} left out" in v["sentences"]["xstest"]
    assert gone in v["sentences"]["xstest"]


def test_verdict_reads_crows_pairs_closer_to_half_as_analyze_counts_it(tmp_path, capsys):
    """12 items, 10 configurations. Stereotype shares (A, B): raw A > B on 4 and B > A on 6; closer to 0.5,
    A on 5, B on 4 and one tie (0.4 vs 0.6): smollm2 4 / gemma 6 raw, 5 / 4 in the benchmark's direction."""
    shares = [
        (7, 11),  # raw B; better A
        (6, 9),  # raw B; better A
        (5, 8),  # raw B; better A (|5-6| < |8-6|)
        (6, 10),  # raw B; better A
        (2, 4),  # raw B; better B (|4-6| < |2-6|)
        (5, 7),  # raw B; tie (both 1 from 6)
        (11, 7),  # raw A; better B
        (10, 8),  # raw A; better B
        (9, 6),  # raw A; better B
        (8, 1),  # raw A; better A (|8-6| < |1-6|)
    ]
    configs = [c.config_id for c in default_rules().configs("crows_pairs", "full")][:10]

    def column(k):
        x = np.zeros((12, 1))
        x[:k] = 1
        return x

    answers = {
        "smollm2": {c: column(a) for c, (a, _) in zip(configs, shares, strict=True)},
        "gemma3-270m": {c: column(b) for c, (_, b) in zip(configs, shares, strict=True)},
    }
    grid = _write(tmp_path / "g", answers)
    from safetyrepro.analysis import api

    rho = api.rho_flip(pd.read_csv(grid))
    rho = rho[rho["slice"] == "full"].iloc[0]
    assert (rho["model_a"], rho["model_b"]) == ("gemma3-270m", "smollm2")
    assert (rho["n_plus"], rho["n_minus"]) == (6, 4)  # raw: gemma 6, smollm2 4
    assert (rho["n_plus_better"], rho["n_minus_better"], rho["n_zero_better"]) == (4, 5, 1)
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    table = pd.DataFrame(v["configurations"])
    assert int((table["diff_better"] > 0).sum()) == 5 and int((table["diff_better"] < 0).sum()) == 4
    assert int((table["diff"] > 0).sum()) == 4  # the raw difference is kept beside it
    sentence = v["sentences"]["crows_pairs"]
    assert "closer to 0.5 is better" in sentence
    assert "smollm2 ahead on 5, gemma3-270m on 4, tied on 1 of 10" in sentence
    # the p-values are analyze's p_value_better for the same items (one function computes both)
    out = tmp_path / "an"
    assert main(["analyze", str(grid), "--out", str(out), "--no-figures", "--bootstrap", "20"]) == 0
    tests = pd.read_csv(out / "item_tests.csv")
    tests = tests[tests["slice"] == "full"].set_index("config_id")
    mine = table.set_index("config_id")
    for cid in configs:
        assert mine.at[cid, "p_value"] == pytest.approx(tests.at[cid, "p_value_better"], abs=1e-12)


# -- EEE: the export's side file, ids, and an import that stays in its folder -------------------------------
@pytest.fixture(scope="module")
def eee_export(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent / "eee"))
    from eee_grids import write_grid

    root = tmp_path_factory.mktemp("eee_misc")
    grid = write_grid(root / "run", n_items=4, benchmarks=("truthfulqa",))
    assert main(["export", "eee", str(grid.absolute()), "--out", str(root / "eee"), "--timestamp", "1767225600"]) == 0
    return root, grid, root / "eee"


def test_eee_side_file_carries_no_local_path_and_is_no_record_for_the_validator(eee_export):
    from safetyrepro.importers import eee_format as R

    root, grid, out = eee_export
    side = out / R.VERDICTS_FILE
    text = side.read_text()
    data = json.loads(text)
    assert data["grid"]["name"] == "grid.csv" and str(root) not in text
    # EEE's validator, run over the whole folder, collects *.json and *.jsonl (its expand_paths): the side
    # file is not among them, every record is
    collected = {p for ext in ("*.json", "*.jsonl") for p in out.rglob(ext)}
    assert side not in collected and all(p.is_relative_to(out / "data") for p in collected) and collected


def test_eee_export_refuses_two_labels_under_one_model_id(eee_export, tmp_path, capsys):
    _, grid, _ = eee_export
    _refused(
        ["export", "eee", grid, "--out", tmp_path / "x", "--model-id", "alpha=org/same", "--model-id", "beta=org/same"],
        capsys,
        "'alpha' and 'beta' both get model id 'org/same'",
    )
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("where", ["absolute", "climbs"])
def test_eee_import_never_opens_a_file_outside_its_folder(eee_export, tmp_path, capsys, monkeypatch, where):
    import shutil

    from safetyrepro.importers import eee_records as import_

    _, _, out = eee_export
    copy = tmp_path / "eee"
    shutil.copytree(out, copy)
    outside = tmp_path / "secret.jsonl"
    outside.write_text("secret\n")
    record_path = sorted((copy / "data").rglob("*.json"))[0]
    record = json.loads(record_path.read_text())
    record["detailed_evaluation_results"]["file_path"] = (
        str(outside) if where == "absolute" else "../" * (len(record_path.relative_to(copy).parts) + 1) + "secret.jsonl"
    )
    record_path.write_text(json.dumps(record))
    opened = []
    real = import_.read_capped
    monkeypatch.setattr(import_, "read_capped", lambda p, *a, **k: opened.append(Path(p).resolve()) or real(p, *a, **k))
    _refused(["import", "eee", copy, "--out", tmp_path / "back"], capsys, str(record_path), "file_path", "climbs out")
    assert outside.resolve() not in opened and not (tmp_path / "back").exists()
    capsys.readouterr()
    assert main(["import", "eee", str(copy), "--out", str(tmp_path / "back"), "--skip-bad"]) == 0
    bad = pd.read_csv(tmp_path / "back" / "bad_inputs.csv")
    assert list(bad["path"]) == [str(record_path)] and outside.resolve() not in opened


# -- plan, flow ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("items", ["1e11", "100000000000", "100001"])
def test_plan_refuses_an_item_count_beyond_its_bound(items, capsys):
    _refused(
        ["plan", "--discordance", "0.3", "--configs", "48", "--items", items],
        capsys,
        f"--items {items}: at most 100,000 items per configuration",
    )


def test_plan_takes_a_whole_number_written_with_an_exponent(capsys):
    capsys.readouterr()
    assert main(["plan", "--discordance", "0.3", "--configs", "48", "--items", "3e2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 300


FLOW = ["flow", "--models", "smollm2", "--benchmarks", "xstest", "--templates", "T1", "--decodings", "greedy"]
FLOW += ["--shots", "0", "--limit", "2"]


def test_flow_without_inspect_flow_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "inspect_flow", None)  # what `import inspect_flow` meets when it is absent
    _refused([*FLOW, "--out", tmp_path / "env.yaml"], capsys, "pip install 'safetyrepro[flow]'")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("mine", ["env.yaml", "env.mapping.yaml"])
def test_flow_never_replaces_a_file_it_did_not_write(tmp_path, capsys, mine):
    pytest.importorskip("inspect_flow", reason="inspect-flow is not installed (pip install 'safetyrepro[flow]')")
    (tmp_path / mine).write_text("models: {mine: true}\n")
    _refused([*FLOW, "--out", tmp_path / "env.yaml"], capsys, str(tmp_path / mine), "was not written by")
    assert (tmp_path / mine).read_text() == "models: {mine: true}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine]
    # its own files are replaced by a rerun
    (tmp_path / mine).unlink()
    assert main([*FLOW, "--out", str(tmp_path / "env.yaml")]) == 0
    assert main([*FLOW, "--out", str(tmp_path / "env.yaml")]) == 0


# -- SIGTERM, a full disk ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("signal_name", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_command_that_saves_its_run_on_interrupt_exits_with_the_signal_code(signal_name, code):
    """certify and demo catch the interrupt themselves (they save the run so far) and answer 130; under
    SIGTERM the command still exits 143, as docs/failures.md gives it; Ctrl-C stays 130."""
    # Ctrl-C as a terminal delivers it: a job started in the background (CI's, a nohup) inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler
    script = (
        "import argparse, os, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from safetyrepro import cli\n"
        "def saving(a):\n"
        "    try:\n"
        f"        os.kill(os.getpid(), signal.{signal_name}); time.sleep(30)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted: the run so far is saved', file=sys.stderr)\n"
        "        return 130\n"
        "p = argparse.ArgumentParser(); p.add_argument('--data-dir')\n"
        "p.add_argument('-v', '--verbose', action='store_true')\n"
        "p.set_defaults(func=saving)\n"
        "cli.build_parser = lambda: p\n"
        "sys.exit(cli.main([]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stderr.strip().splitlines() == ["interrupted: the run so far is saved"]


def test_a_file_size_limit_is_reported_as_such_not_as_a_damaged_cache(tmp_path):
    """`ulimit -f`: SQLite's write fails (EFBIG, reported as a disk I/O error) though the file passes its
    integrity check; the message names the limit and says the file is not damaged."""
    script = (
        "import resource, sys\n"
        "from safetyrepro.sweep.outputs_cache import OutputsCache, OutputsCacheError\n"
        f"c = OutputsCache({str(tmp_path / 'outputs.sqlite')!r})\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "try:\n"
        "    c.put_many({str(i): 'x' * 1000 for i in range(1000)})\n"
        "except OutputsCacheError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    line = done.stdout.strip()
    assert done.returncode == 0 and "file-size limit (200,000 bytes, ulimit -f)" in line, (line, done.stderr)
    assert "the file is not damaged" in line and ".damaged" not in line


def test_a_file_too_large_elsewhere_names_the_limit():
    import errno

    from safetyrepro.cli import os_error_message

    line = os_error_message(OSError(errno.EFBIG, "File too large", "out/grid.csv"), "analyze")
    assert line == (
        "File too large: out/grid.csv; the process's file-size limit (ulimit -f) was reached: raise it and rerun "
        "the same command"
    )


# -- BBQ's metrics -----------------------------------------------------------------------------------------
def _bbq_item(i: int, condition: str, answer: int, unknown: int = 2, biased=(0,)):
    from safetyrepro.tasks.benchmarks.bbq.definition import BBQItem

    return BBQItem(
        f"bbq/Age/{i}", f"Age/{condition}", "ctx", "q?", ("x", "y", "unknown"), answer, "Age", condition, "neg",
        str(i), unknown, tuple(biased),
    )  # fmt: skip


def test_bbq_subgroup_accuracies_use_acc_tie_credit_so_acc_is_their_weighted_mean():
    """16 items scored by log-likelihood under the `expected` tie rule, worked by hand.
    Ambiguous (6, gold 'unknown' = option 2): right 3 times, a 3-way tie (1/3), a 2-way tie with the
    gold (1/2), wrong once: acc_ambig = (3 + 1/3 + 1/2) / 6 = 0.6389. Disambiguated (10, gold 0): right 6
    times, two 2-way ties with the gold (1/2 each), wrong twice: acc_disambig = 7 / 10 = 0.7.
    acc = (3.8333 + 7) / 16 = 0.6771 = (6 * 0.6389 + 10 * 0.7) / 16. Exact match on the picks (a tie's
    first option) gave 3/6 = 0.5 and 8/10 = 0.8, whose weighted mean 0.6875 is not acc."""
    from safetyrepro.sweep.records import ItemRecord, summarize
    from safetyrepro.tasks.benchmarks.registry import get_benchmark

    bbq = get_benchmark("bbq")
    ambig = [[-3, -2, -1]] * 3 + [[-1, -1, -1], [-1, -3, -1], [-1, -2, -3]]
    disambig = [[-1, -2, -3]] * 6 + [[-1, -1, -3]] * 2 + [[-3, -1, -2]] * 2
    items = [_bbq_item(i, "ambig", 2) for i in range(6)] + [_bbq_item(10 + i, "disambig", 0) for i in range(10)]
    records = []
    for it, ll in zip(items, ambig + disambig, strict=True):
        s = bbq.score_logprob(it, ll, "expected")
        records.append(ItemRecord(it.id, 0, "", None, s.prediction, True, it.answer, s.score, ll, s.tied))

    class _Set:
        by_id = staticmethod({it.id: it for it in items}.__getitem__)

    summary = summarize(records, bbq, _Set())
    acc_ambig, acc_disambig = (3 + 1 / 3 + 1 / 2) / 6, 7 / 10
    assert summary.extra["acc_ambig"] == pytest.approx(acc_ambig)
    assert summary.extra["acc_disambig"] == pytest.approx(acc_disambig)
    assert summary.score == pytest.approx((3 + 1 / 3 + 1 / 2 + 7) / 16)
    assert summary.score == pytest.approx((6 * acc_ambig + 10 * acc_disambig) / 16)
    exact = bbq.compute_extra_metrics(items, [r.prediction for r in records])  # no scores: exact match
    assert (exact["acc_ambig"], exact["acc_disambig"]) == (0.5, 0.8)


def test_bbq_bias_score_follows_the_paper_minus_one_and_undefined():
    from safetyrepro.tasks.benchmarks.registry import get_benchmark

    bbq = get_benchmark("bbq")
    dis = [_bbq_item(i, "disambig", 1, biased=(0,)) for i in range(4)]
    # every answer non-unknown and none biased (all option 1): s_DIS = 2 * 0 / 4 - 1 = -1 (lm-eval: 0)
    assert bbq.compute_extra_metrics(dis, [1, 1, 1, 1])["s_dis"] == -1.0
    # 3 of 4 non-unknown answers biased: 2 * 3/4 - 1 = 0.5
    assert bbq.compute_extra_metrics(dis, [0, 0, 0, 1])["s_dis"] == 0.5
    # no non-unknown answer at all (unknown or unparsed): undefined
    assert math.isnan(bbq.compute_extra_metrics(dis, [2, 2, None, 2])["s_dis"])
    amb = [_bbq_item(i, "ambig", 2, biased=(0,)) for i in range(4)]
    # ambiguous: acc 1/4, the 3 non-unknown answers 2 biased: s = 2 * 2/3 - 1 = 1/3, s_AMB = 3/4 * 1/3
    assert bbq.compute_extra_metrics(amb, [2, 0, 0, 1])["s_amb"] == pytest.approx(0.25)
    assert bbq.compute_extra_metrics(amb, [2, 2, 2, 2])["s_amb"] == 0.0  # all right: the factor is 0
    assert math.isnan(bbq.compute_extra_metrics(amb, [None, None, 2, 2])["s_amb"])  # nothing to stand on


def test_verdict_says_when_a_benchmark_has_no_paired_records_at_all(tmp_path, capsys):
    crows = [c.config_id for c in default_rules().configs("crows_pairs", "full")][:2]
    a = {**{c: np.ones((4, 5)) for c in MODERATE[:2]}, **{c: np.ones((4, 1)) for c in crows}}
    b = {**{c: np.zeros((4, 5)) for c in MODERATE[:2]}, **{c: np.zeros((4, 1)) for c in crows}}
    grid = _write(tmp_path / "g", {"smollm2": a, "gemma3-270m": b})
    items = pd.read_parquet(grid.parent / "items.parquet")
    items[~items["config_id"].isin(crows)].to_parquet(grid.parent / "items.parquet", index=False)
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["sentences"]["crows_pairs"].startswith("crows_pairs: no verdict: none of its 2 configurations")
    assert v["missing_configurations"]["crows_pairs"] == crows and "crows_pairs" not in v["family_size"]
