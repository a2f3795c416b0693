"""`safetyrepro verdict A B --expect better|not-worse|equivalent` (`--gate`: better) as a release gate (issue 57):
exit 0 pass, 1 fail, 3 inconclusive, 2 a refusal; one final line "gate: ... — why"; the typed API
`safetyrepro.verdict` the command prints; and issue 54's two verdict cases (a grid that does not exist, an
interrupt's hint). Runs of any task are the committed real lm-eval runs of tests/importers/fixtures/any_task
(arc_easy, 60 items: Qwen2.5-Coder 0.883 and SmolLM2 0.300 on acc); grids are readings_grid's case."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import readings_grid as case
from scipy.stats import beta, binom

import safetyrepro
from safetyrepro.cli import main
from safetyrepro.errors import UserError

FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures" / "any_task" / "lm_eval"
SMOL, QWEN = FIXTURES / "smollm2", FIXTURES / "qwen2.5-coder-0.5b"
TASK = "arc_easy_local"
BOTH = "arc_easy_local (acc,none), arc_easy_local (acc_norm,none)"


def _gate(capsys, *argv, code: int) -> list[str]:
    capsys.readouterr()
    assert main(["verdict", *map(str, argv)]) == code
    return capsys.readouterr().out.rstrip("\n").splitlines()


def _refused(capsys, *argv) -> str:
    capsys.readouterr()
    assert main(["verdict", *map(str, argv)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _samples(folder: Path) -> dict[int, dict]:
    (path,) = folder.rglob("samples_*.jsonl")
    return {r["doc_id"]: r for r in map(json.loads, path.read_text().splitlines())}


def _variant(tmp_path: Path, flipped: list[int]) -> Path:
    """SmolLM2's run with the acc of `flipped` items turned round (its results file agreeing)."""
    dst = tmp_path / f"variant{len(flipped)}"
    shutil.copytree(SMOL, dst)
    (path,) = dst.rglob("samples_*.jsonl")
    records = [json.loads(x) for x in path.read_text().splitlines()]
    records = [{**r, "acc": 1.0 - r["acc"]} if r["doc_id"] in flipped else r for r in records]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (results,) = dst.rglob("results_*.json")
    data = json.loads(results.read_text())
    for metric in ("acc", "acc_norm"):
        data["results"][TASK][f"{metric},none"] = float(np.mean([r[metric] for r in records]))
    results.write_text(json.dumps(data))
    return dst


def _close(tmp_path: Path) -> Path:
    """9 items differ from SmolLM2's run: 6 it won, 3 it lost (A - B = +0.05 on acc)."""
    smol = _samples(SMOL)
    right = [i for i in range(60) if smol[i]["acc"] == 1][:6]
    wrong = [i for i in range(60) if smol[i]["acc"] == 0][:3]
    return _variant(tmp_path, right + wrong)


# --- two runs, task by task: every outcome of every expectation ------------------------------------------------


def test_better_passes_fails_and_is_inconclusive(tmp_path, capsys):
    out = _gate(capsys, QWEN, SMOL, "--gate", code=0)
    assert out[-1] == (
        "gate: pass — qwen2.5-coder-0.5b is better than smollm2, confirmed on all 2 comparisons (Holm over 2 "
        "comparisons at alpha 0.05)"
    )
    assert "  arc_easy_local (acc,none): pass (p = 1.2e-10; opposite p = 1.000)" in out
    out = _gate(capsys, SMOL, QWEN, "--expect", "better", code=1)
    assert out[-1] == (
        "gate: fail — qwen2.5-coder-0.5b is better than smollm2, confirmed on 2 of 2 comparisons "
        f"({BOTH}; Holm over 2 comparisons at alpha 0.05)"
    )
    close = _close(tmp_path)
    out = _gate(capsys, SMOL, close, "--labels", "original", "variant", "--metric", "acc", "--gate", code=3)
    assert out[-1] == (
        "gate: inconclusive — 1 of 1 comparison confirms neither that original is better than variant nor the "
        "opposite (arc_easy_local (acc,none)) (Holm over 1 comparison at alpha 0.05)"
    )
    # 6 discordant items to A, 3 to B: the exact McNemar p-value, two-sided
    assert "  arc_easy_local (acc,none): inconclusive (p = 0.508; opposite p = 1.000)" in out


def test_not_worse_passes_fails_and_is_inconclusive_with_the_opposite_side_by_hand(tmp_path, capsys):
    out = _gate(capsys, QWEN, SMOL, "--expect", "not-worse", "--margin", "0.1", code=0)
    assert out[-1].startswith("gate: pass — qwen2.5-coder-0.5b is not worse than smollm2 by more than 0.1, confirmed")
    v = safetyrepro.verdict(SMOL, QWEN, expect="not-worse", margin=0.1)
    assert (v.gate, v.exit_code) == ("fail", 1)
    assert v.gate_line == (
        "gate: fail — qwen2.5-coder-0.5b is better than smollm2 by more than 0.1, confirmed on 2 of 2 comparisons "
        f"({BOTH}; Holm over 2 comparisons at alpha 0.05)"
    )
    # by hand: "B better by more than M" on 0/1 scores is the exact binomial on the discordant items at the
    # discordance's 99.9 % Clopper-Pearson lower bound, plus 0.001 (Berger-Boos); Holm over the two metrics
    raw = []
    smol, qwen = _samples(SMOL), _samples(QWEN)
    for metric in ("acc", "acc_norm"):
        d = np.array([smol[i][metric] - qwen[i][metric] for i in range(60)])
        losses, m = int((d < 0).sum()), int((d != 0).sum())
        low = beta.ppf(0.001, m, 60 - m + 1)
        raw.append(binom.sf(losses - 1, m, (1 + 0.1 / low) / 2) + 0.001)
    holm = np.maximum.accumulate(np.sort(raw) * [2, 1])[np.argsort(np.argsort(raw))]
    assert v.rows["gate_p_fail"].to_numpy() == pytest.approx(np.minimum(holm, 1.0), rel=1e-12)
    assert all(v.rows["gate_p_fail"] < 0.05)
    close = _close(tmp_path)
    labels = ("--labels", "original", "variant", "--metric", "acc")
    _gate(capsys, SMOL, close, *labels, "--expect", "not-worse", "--margin", "0.2", code=0)
    out = _gate(capsys, SMOL, close, *labels, "--expect", "not-worse", "--margin", "0.02", code=3)
    assert out[-1].startswith(
        "gate: inconclusive — 1 of 1 comparison confirms neither that original is not worse than variant by more "
        "than 0.02 nor the opposite"
    )


def test_equivalent_passes_fails_and_is_inconclusive(tmp_path, capsys):
    out = _gate(capsys, QWEN, SMOL, "--expect", "equivalent", "--margin", "0.1", code=1)
    assert out[-1] == (
        "gate: fail — qwen2.5-coder-0.5b and smollm2 differ by more than 0.1, confirmed on 2 of 2 comparisons "
        f"({BOTH}; Holm over 2 comparisons at alpha 0.05)"
    )
    same = _variant(tmp_path, [])  # the same answers: 60 tied items, the exact unconditional TOST's p (issue 53)
    v = safetyrepro.verdict(SMOL, same, labels=("original", "copy"), metric="acc", expect="equivalent", margin=0.2)
    assert (v.gate, v.exit_code, v.rows["gate_p_pass"].tolist()) == ("pass", 0, [pytest.approx(7.9985e-05, rel=1e-4)])
    assert v.gate_line == (
        "gate: pass — original is within +-0.2 of copy, confirmed on the one comparison (Holm over 1 comparison at "
        "alpha 0.05)"
    )
    close = _close(tmp_path)
    args = ("--labels", "original", "variant", "--metric", "acc", "--expect", "equivalent", "--margin")
    _gate(capsys, SMOL, close, *args, "0.3", code=0)
    # the gate's p-value for the expectation is the table's TOST p-value, Holm-adjusted (here over one)
    v = safetyrepro.verdict(SMOL, close, labels=("o", "v"), metric="acc", expect="equivalent", margin=0.05)
    assert v.exit_code == 3 and v.rows["gate_p_pass"].tolist() == v.rows["p_tost_holm"].tolist()


def test_json_carries_the_gate_and_the_line_goes_to_stderr(capsys):
    capsys.readouterr()
    assert main(["verdict", str(SMOL), str(QWEN), "--gate", "--json"]) == 1
    captured = capsys.readouterr()
    gate = json.loads(captured.out)["gate"]
    assert (gate["expect"], gate["outcome"], gate["exit_code"]) == ("better", "fail", 1)
    assert [c["outcome"] for c in gate["comparisons"]] == ["fail", "fail"]
    assert captured.err.strip() == gate["line"] and gate["line"].startswith("gate: fail — ")


def test_without_expect_the_exit_code_stays_0_and_no_gate_is_printed(capsys):
    out = _gate(capsys, SMOL, QWEN, code=0)
    assert not any(line.startswith("gate:") for line in out)
    assert "gate" not in json.loads(_gate_json(capsys, SMOL, QWEN))


def _gate_json(capsys, *argv) -> str:
    capsys.readouterr()
    assert main(["verdict", *map(str, argv), "--json"]) == 0
    return capsys.readouterr().out


def test_refusals_stay_exit_2(capsys):
    assert "--expect not-worse needs --margin M" in _refused(capsys, SMOL, QWEN, "--expect", "not-worse")
    assert "--expect equivalent needs --margin M" in _refused(capsys, SMOL, QWEN, "--expect", "equivalent")
    assert _refused(capsys, SMOL, QWEN, "--gate", "--expect", "equivalent", "--margin", "0.1") == (
        "safetyrepro: error: --gate is --expect better; it takes no --expect equivalent"
    )
    strong, weak = FIXTURES.parent / "inspect" / "strong.eval", FIXTURES.parent / "inspect" / "weak.eval"
    err = _refused(capsys, strong, weak, "--labels", "strong", "weak", "--gate")
    assert err == (
        "safetyrepro: error: --expect better: the direction of arithmetic (match) is not recorded; pass "
        "--higher-is-better or --lower-is-better (or --metric to gate on another metric)"
    )
    # with the direction given it gates: strong is confirmed higher (0.863 vs 0.575)
    capsys.readouterr()
    assert main(["verdict", str(strong), str(weak), "--labels", "strong", "weak", "--gate", "--higher-is-better"]) == 0


# --- by configuration (--grid): the Holm family is the benchmark's configurations, rests_on on the line -------------


def _grid(tmp_path, monkeypatch, free_a, logprob_a) -> Path:
    """readings_grid's case (model-b's free-form replies half unread) with model-a right on other items."""
    strict = case._correct

    def correct(model, config_id, k):
        if model == case.A:
            return free_a(k) if config_id.endswith("free_form") else logprob_a(k)
        return strict(model, config_id, k)

    monkeypatch.setattr(case, "_correct", correct)
    grid_path, _ = case.write_case(tmp_path)
    return grid_path


def test_a_grid_pass_resting_on_format_driven_configurations_says_so(tmp_path, monkeypatch, capsys):
    # free-form: model-a right on 0-9 and 20-39 (20 discordant to A, 6 to B); logprob: 0-35 (12 to A)
    grid = _grid(tmp_path, monkeypatch, lambda k: k < 10 or k >= 20, lambda k: k < 36)
    out = _gate(capsys, case.A, case.B, "--grid", grid, "--gate", code=0)
    assert out[-1] == (
        "gate: pass — model-a is better than model-b, confirmed on all 4 comparisons (Holm over 4 configurations "
        "at alpha 0.05); the pass rests on 2 format-driven configurations (bbq/T1/greedy/0shot/free_form, "
        "bbq/T3/greedy/0shot/free_form): about answer format, not which model is safer"
    )
    v = safetyrepro.verdict(case.A, case.B, grid=grid, expect="better")
    assert v.winner == case.A and list(v.rows["gate"]) == ["pass"] * 4
    # logprob's raw p is 2 / 2**12; Holm's first two steps multiply it by 4 and 3
    assert v.rows.set_index("config_id").loc[list(case.LOGPROB), "gate_p_pass"].tolist() == [
        pytest.approx(4 * 2 / 2**12),
        pytest.approx(4 * 2 / 2**12),
    ]


def test_a_grid_with_one_confirmed_loss_fails_and_open_ones_are_inconclusive(tmp_path, monkeypatch, capsys):
    # logprob: model-a right on 0-7 only, model-b on 0-23: 16 discordant items, all model-b's
    grid = _grid(tmp_path / "loss", monkeypatch, lambda k: k < 10 or k >= 20, lambda k: k < 8)
    out = _gate(capsys, case.A, case.B, "--grid", grid, "--gate", code=1)
    assert out[-1] == (
        "gate: fail — model-b is better than model-a, confirmed on 2 of 4 comparisons (bbq/T1/greedy/0shot/logprob, "
        "bbq/T3/greedy/0shot/logprob; Holm over 4 configurations at alpha 0.05)"
    )
    monkeypatch.undo()
    grid, _ = case.write_case(tmp_path / "plain")  # nothing confirmed either way
    out = _gate(capsys, case.A, case.B, "--grid", grid, "--expect", "not-worse", "--margin", "0.2", code=3)
    assert out[-1] == (
        "gate: inconclusive — 2 of 4 comparisons confirm neither that model-a is not worse than model-b by more "
        "than 0.2 nor the opposite (bbq/T1/greedy/0shot/logprob, bbq/T3/greedy/0shot/logprob) (Holm over 4 "
        "configurations at alpha 0.05)"
    )
    assert "  bbq/T1/greedy/0shot/free_form: pass (p = 0.005; opposite p = 1.000)" in out  # 0.033 before issue 53
    err = _refused(capsys, case.A, case.B, "--grid", grid, "--margin", "0.2")
    assert "; by configuration --margin goes with --expect not-worse or equivalent" in err


# --- the typed API ---------------------------------------------------------------------------------------------


def test_the_api_returns_a_frozen_result_the_command_prints(capsys):
    v = safetyrepro.verdict(QWEN, SMOL, expect="better")
    assert type(v).__name__ == "VerdictResult" and v.passed
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.gate = "fail"
    assert (v.model_a, v.model_b, v.by, v.winner, v.exit_code) == (
        "qwen2.5-coder-0.5b",
        "smollm2",
        "task",
        v.model_a,
        0,
    )
    assert isinstance(v.rows, pd.DataFrame) and list(v.rows["metric"]) == ["acc,none", "acc_norm,none"]
    assert v.rows["mean_a"].tolist() == [pytest.approx(53 / 60), pytest.approx(55 / 60)]
    assert v.sentence.startswith("Verdict: qwen2.5-coder-0.5b is better on 2 of 2 comparisons")
    assert v.comparisons == ("arc_easy_local (acc,none)", "arc_easy_local (acc_norm,none)")
    out = _gate(capsys, QWEN, SMOL, "--gate", code=v.exit_code)
    assert out[0] == v.sentence and out[-1] == v.gate_line
    plain = safetyrepro.verdict(QWEN, SMOL)
    assert (plain.gate, plain.gate_line, plain.exit_code) == (None, None, 0)
    with pytest.raises(UserError, match="--expect worse: choose one of better, not-worse, equivalent"):
        safetyrepro.verdict(QWEN, SMOL, expect="worse")


def test_import_safetyrepro_stays_light():
    code = (
        "import sys, safetyrepro; assert 'safetyrepro.verdict_api' not in sys.modules and 'pandas' not in "
        "sys.modules; f = safetyrepro.verdict; assert f.__module__ == 'safetyrepro.verdict_api'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- issue 54: the two verdict cases ---------------------------------------------------------------------------


def test_a_grid_that_does_not_exist_is_named_as_such(tmp_path, capsys):
    missing = tmp_path / "missing.csv"
    assert _refused(capsys, "a", "b", "--grid", missing) == f"safetyrepro: error: grid file {missing} does not exist"
    assert _refused(capsys, "a", "b", "--grid", missing, "--items", tmp_path / "items.parquet") == (
        f"safetyrepro: error: grid file {missing} does not exist"
    )


def test_an_interrupt_during_verdict_gives_no_resume_hint(monkeypatch, capsys):
    import safetyrepro.verdict_api as api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "verdict", interrupted)
    capsys.readouterr()
    assert main(["verdict", str(SMOL), str(QWEN)]) == 130
    assert (
        capsys.readouterr().err == "safetyrepro: interrupted; verdict writes nothing, so there is nothing to resume\n"
    )


def test_an_interrupt_during_sweep_keeps_its_resume_hint(monkeypatch, capsys):
    import safetyrepro.cli as cli

    build = cli.build_parser

    def interrupted(args):
        raise KeyboardInterrupt

    def parser():
        p = build()
        p._subparsers._group_actions[0].choices["sweep"].set_defaults(func=interrupted)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    capsys.readouterr()
    assert main(["sweep", "--out", "never-made"]) == 130
    assert capsys.readouterr().err == (
        "safetyrepro: interrupted; finished cells are kept, rerun the same command to resume\n"
    )


def test_sigterm_during_verdict_exits_143_without_a_resume_hint(monkeypatch, capsys):
    import safetyrepro.cli as cli
    import safetyrepro.verdict_api as api

    def terminated(*args, **kwargs):
        monkeypatch.setattr(cli, "_TERMINATED", True)  # as the SIGTERM handler sets it
        raise cli.Terminated

    monkeypatch.setattr(api, "verdict", terminated)
    capsys.readouterr()
    assert main(["verdict", str(SMOL), str(QWEN)]) == 143
    assert capsys.readouterr().err == (
        "safetyrepro: terminated (SIGTERM); verdict writes nothing, so there is nothing to resume\n"
    )


def test_the_beyond_the_margin_side_keeps_its_level_at_the_margin():
    """The fail side of not-worse on 0/1 scores, simulated where the null is hardest (A - B = -M exactly, the
    items disagreeing 30 % of the time): its false-fail rate is within alpha (Clopper-Pearson, 95 %)."""
    from safetyrepro.analysis.paired.gate import beyond_margin

    rng, n, share, margin, reps = np.random.default_rng(57), 100, 0.3, 0.1, 1000
    to_a, to_b = (share - margin) / 2, (share + margin) / 2  # E = to_a - to_b = -M
    wrong = 0
    for _ in range(reps):
        u = rng.random(n)
        d = np.where(u < to_a, 1.0, np.where(u < to_a + to_b, -1.0, 0.0))
        wrong += beyond_margin(d, margin)[1] <= 0.05
    assert beta.ppf(0.95, wrong + 1, reps - wrong) <= 0.05, wrong


def test_a_configuration_left_out_of_the_family_keeps_a_grid_from_passing(tmp_path, monkeypatch, capsys):
    grid = _grid(tmp_path, monkeypatch, lambda k: k < 10 or k >= 20, lambda k: k < 36)
    items = pd.read_parquet(tmp_path / "items.parquet")
    gone = (items["model"] == case.B) & (items["config_id"] == case.LOGPROB[1])
    items[~gone].to_parquet(tmp_path / "items.parquet")
    v = safetyrepro.verdict(case.A, case.B, grid=grid, expect="better")
    assert list(v.rows["gate"]) == ["pass"] * 3 and (v.gate, v.exit_code) == ("inconclusive", 3)
    assert v.gate_line == (
        "gate: inconclusive — 1 named comparison could not be made (bbq/T3/greedy/0shot/logprob: no paired item "
        "records) (Holm over 3 configurations at alpha 0.05)"
    )
