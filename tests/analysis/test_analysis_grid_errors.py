"""Bad grids get one line on stderr and exit code 2; partial coverage is analysed with a warning."""

import numpy as np
import pandas as pd
import pytest
from analysis_grids import CC, grid_frame, write

from safetyrepro.cli import main


def _good(rules) -> pd.DataFrame:
    configs = [c.config_id for c in rules.configs("bbq")]
    return grid_frame(
        {m: {c: 0.3 + 0.01 * i + 0.001 * j for i, c in enumerate(configs)} for j, m in enumerate(("a", "b", "c"))}
    )


def _analyze(tmp_path, frame, capsys, *extra):
    path = write(frame, tmp_path / "grid.csv")
    rc = main(["analyze", str(path), "--out", str(tmp_path / "out"), "--no-figures", "--bootstrap", "5", *extra])
    return rc, capsys.readouterr()


def _one_line_error(rc, captured) -> str:
    assert rc == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("safetyrepro: error: ")
    return lines[0]


def _edit(frame, row, column, value):
    frame = frame.copy()
    frame[column] = frame[column].astype(object)
    frame.at[row, column] = value
    return frame


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.drop(columns=["parse_rate", "tier"]), "lacks column(s) parse_rate, tier"),
        (
            lambda f: _edit(f, 4, "template", "T9"),
            "row 5: column 'template' has unknown value 'T9'; allowed: T1, T2, T3, T4",
        ),
        (
            lambda f: _edit(f, 0, "decoding", "hot"),
            "column 'decoding' has unknown value 'hot'; allowed: greedy, moderate, diverse",
        ),
        (
            lambda f: _edit(f, 2, "benchmark", "mmlu"),
            "column 'benchmark' has unknown value 'mmlu'; allowed: truthfulqa",
        ),
        (lambda f: _edit(f, 0, "shots", 4), "column 'shots' has unknown value 4; allowed: 0, 3, 5"),
        (lambda f: pd.concat([f, f.iloc[[7]]]), "duplicate cells: rows 8 and 145"),
        (lambda f: _edit(f, 3, "score", np.nan), "row 4: score is missing (NaN) for model 'a'"),
        (lambda f: _edit(f, 3, "score", 1.2), "row 4: score 1.2 for model 'a'"),
        (lambda f: _edit(f, 3, "score", -0.1), "is outside [0, 1]"),
        (lambda f: _edit(f, 3, "score", "high"), "column 'score' has non-numeric value 'high'"),
        (lambda f: _edit(f, 6, "parse_rate", 1.5), "parse_rate 1.5"),
        (lambda f: f[f["model"] == "a"], "has a single model ('a')"),
        (
            lambda f: f[f["config_id"] == f["config_id"].iloc[0]],
            "has one configuration (bbq/T1/greedy/0shot/free_form)",
        ),
        (lambda f: _edit(f, 0, "tier", "stress"), "tier 'stress' for bbq/T1/greedy/0shot/free_form disagrees"),
        (lambda f: _edit(f, 0, "config_id", "bbq/T2/greedy/0shot/free_form"), "does not match the row's axes"),
        (
            lambda f: _edit(_edit(f, 0, "decoding", "moderate"), 0, "scoring", "logprob"),
            "outside the envelope (logprob is greedy-only)",
        ),
        (
            lambda f: _edit(f, 0, "precision", "bf16"),
            "mixes (precision, package) groups: bf16/lm-eval (1 rows), nf4/lm-eval (143 rows)",
        ),
    ],
)
def test_bad_grids_fail_with_one_clear_line(rules, tmp_path, capsys, mutate, message):
    line = _one_line_error(*_analyze(tmp_path, mutate(_good(rules)), capsys))
    assert message in line


def test_empty_and_missing_files(tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("")
    assert message_of(main(["analyze", str(tmp_path / "empty.csv"), "--out", str(tmp_path)]), capsys).endswith(
        "empty.csv is empty"
    )
    assert "does not exist" in message_of(main(["analyze", str(tmp_path / "nope.csv"), "--out", str(tmp_path)]), capsys)


def message_of(rc, capsys) -> str:
    return _one_line_error(rc, capsys.readouterr())


def test_bad_options_fail_with_one_line(rules, tmp_path, capsys):
    assert "unknown slice 'tiny'" in _one_line_error(*_analyze(tmp_path, _good(rules), capsys, "--slices", "tiny"))
    assert "--theta 1.5 is outside [0, 1]" in _one_line_error(
        *_analyze(tmp_path, _good(rules), capsys, "--theta", "1.5")
    )
    assert "no rows for precision 'fp32'" in _one_line_error(
        *_analyze(tmp_path, _good(rules), capsys, "--precision", "fp32")
    )


def test_a_chosen_precision_group_is_analysed(rules, tmp_path, capsys):
    frame = pd.concat([_good(rules), _good(rules).assign(precision="bf16")])
    rc, captured = _analyze(tmp_path, frame, capsys, "--precision", "bf16")
    assert rc == 0, captured.err
    assert "bbq" in captured.out


def test_partial_coverage_is_analysed_on_common_configs_with_a_warning(rules, tmp_path, capsys):
    frame = _good(rules)
    missing = frame[(frame["model"] == "c")].index[:5]
    rc, captured = _analyze(tmp_path, frame.drop(index=missing), capsys)
    assert rc == 0, captured.err
    assert (
        "safetyrepro: warning: bbq: 5 of 48 configurations dropped because not every model has them (c has 43)"
        in captured.err
    )
    table = pd.read_csv(tmp_path / "out" / "rho_flip.csv")
    assert set(table.loc[table["slice"] == "full", "n_configs"]) == {43}
    assert "5 of 48 configurations dropped" in (tmp_path / "out" / "report.md").read_text()


def test_a_benchmark_with_too_few_common_configs_is_left_out(rules, tmp_path, capsys):
    frame = pd.concat([_good(rules), grid_frame({"a": {CC[0]: 0.5, CC[1]: 0.4}, "b": {CC[0]: 0.4}, "c": {CC[0]: 0.3}})])
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 0
    assert "truthfulqa: left out, it has a single configuration common to all models" in captured.err
    assert set(pd.read_csv(tmp_path / "out" / "orderings.csv")["benchmark"]) == {"bbq"}
