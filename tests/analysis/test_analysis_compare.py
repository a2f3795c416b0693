import pandas as pd
import pytest
from analysis_grids import CC, grid_frame, write

from safetyrepro.analysis.paired.compare import compare_grids, load_groups
from safetyrepro.cli import main
from safetyrepro.errors import UserError

A = {"a": [0.5, 0.6, 0.7, 0.8], "b": [0.4, 0.5, 0.6, 0.9]}
DELTA = {"a": [0.01, -0.02, 0.03, 0.0], "b": [0.0, 0.1, 0.0, -0.05]}


def _frame(scores, precision):
    return grid_frame({m: dict(zip(CC, s, strict=True)) for m, s in scores.items()}, precision=precision)


@pytest.fixture
def nf4_bf16(tmp_path):
    b = {m: [round(x + d, 4) for x, d in zip(A[m], DELTA[m], strict=True)] for m in A}
    return write(_frame(A, "nf4"), tmp_path / "nf4" / "grid.csv"), write(
        _frame(b, "bf16"), tmp_path / "bf16" / "grid.csv"
    )


def test_two_grids_give_per_cell_deltas_and_ordering_stability(rules, nf4_bf16):
    c = compare_grids(load_groups(nf4_bf16, rules), rules)
    assert c.labels == ("nf4", "bf16")
    # |delta| = .01 .02 .03 0 | 0 .1 0 .05 -> median (.01 + .02) / 2, mean .21 / 8, max .1
    s = c.summary.iloc[0]
    assert (s["n_cells"], s["n_over_5pp"], s["n_over_10pp"]) == (8, 1, 0)
    assert (
        s["median"] == pytest.approx(0.015) and s["mean"] == pytest.approx(0.02625) and s["max"] == pytest.approx(0.1)
    )
    top = c.top_cells.iloc[0]
    assert (top["model"], top["config_id"], top["delta"]) == ("b", CC[1], pytest.approx(0.1))
    # config 2: a .6 > b .5 under nf4, a .58 < b .6 under bf16: the only ordering change
    assert list(c.orderings["invariant"]) == [True, False, True, True]
    assert list(c.orderings["max_pair_flips"]) == [0, 1, 0, 0]
    assert c.orderings.loc[1, "ordering_nf4"] == "a > b" and c.orderings.loc[1, "ordering_bf16"] == "b > a"
    summary = c.ordering_summary.set_index(["template", "scoring"])
    assert summary.loc[("T1", "logprob"), "n_invariant"] == 0 and summary["n_configs"].sum() == 4
    ranges = c.ranges.set_index("model")
    assert ranges.loc["a", "range_nf4"] == pytest.approx(0.3) and ranges.loc["b", "range_bf16"] == pytest.approx(0.45)


def test_one_grid_holding_both_precisions_compares_the_same(rules, tmp_path, nf4_bf16):
    both = pd.concat([pd.read_csv(p) for p in nf4_bf16])
    c = compare_grids(load_groups([write(both, tmp_path / "both.csv")], rules), rules)
    assert c.labels == ("bf16", "nf4")  # groups in sorted order
    assert c.summary.iloc[0]["max"] == pytest.approx(0.1)


def test_three_subsample_grids_give_per_cell_ranges(rules, tmp_path):
    paths = []
    for k, shift in enumerate((0.0, 0.02, -0.01)):
        scores = {m: [x + shift * (m == "a") for x in A[m]] for m in A}
        paths.append(write(_frame(scores, "nf4"), tmp_path / f"rs{43 + k}.csv"))
    c = compare_grids(load_groups(paths, rules), rules)
    assert c.labels == ("rs43", "rs44", "rs45")
    assert "delta" not in c.cells.columns
    a_range = c.cells.loc[c.cells["model"] == "a", "spread"]
    assert a_range.tolist() == pytest.approx([0.03] * 4)  # +0.02 to -0.01
    assert c.orderings["invariant"].all()  # a's lead of .1 (or its .1 deficit on config 4) survives .03


def test_compare_cli_writes_tables_and_needs_two_groups(rules, nf4_bf16, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, nf4_bf16), "--out", str(out), "--labels", "NF4", "BF16"]) == 0
    printed = capsys.readouterr().out
    assert "8 paired cells; per-cell |delta|: median 1.50 pp" in printed and "max 10.00 pp; 1 over 5 pp" in printed
    assert "identical in every group on 3 of 4 configurations (75.0 %)" in printed
    assert pd.read_csv(out / "compare_orderings.csv").columns.tolist()[4:6] == ["ordering_NF4", "ordering_BF16"]
    report = (out / "compare_report.md").read_text()
    assert report.count("*How to read:*") == 7
    # compare_rho_flip.csv is shown too: a vs b on 4 paired configs, 3-1 under NF4 (.5>.4, .6>.5, .7>.6, .8<.9)...
    rho = pd.read_csv(out / "compare_rho_flip.csv").set_index("group")
    assert (rho.loc["NF4", "n_plus"], rho.loc["NF4", "n_minus"], rho.loc["NF4", "rho_flip"]) == (3, 1, 0.25)
    # ...and under BF16 (.51>.4, .58<.6, .73>.6, .8<.85) a 2-2 split
    assert (rho.loc["BF16", "n_plus"], rho.loc["BF16", "n_minus"], rho.loc["BF16", "rho_flip"]) == (2, 2, 0.5)
    assert "| NF4 | truthfulqa | a | b | 3 | 1 | 0 | 4 | 0.250 | 0.500 | 0.312 |" in report
    assert main(["compare", str(nf4_bf16[0])]) == 2
    assert "compare needs at least two grids" in capsys.readouterr().err
    with pytest.raises(UserError, match="--labels gives 1 labels for 2"):
        load_groups(nf4_bf16, rules, ["x"])


def test_a_single_configuration_can_be_compared(rules, tmp_path):
    one = {"a": {CC[0]: 0.5}, "b": {CC[0]: 0.4}}
    paths = [
        write(grid_frame(one, precision="nf4"), tmp_path / "x.csv"),
        write(grid_frame({"a": {CC[0]: 0.45}, "b": {CC[0]: 0.47}}, precision="bf16"), tmp_path / "y.csv"),
    ]
    c = compare_grids(load_groups(paths, rules), rules)
    assert c.cells["delta"].tolist() == pytest.approx([-0.05, 0.07])
    assert c.orderings.iloc[0]["max_pair_flips"] == 1


def test_pair_flips_count_strict_reversals_of_weak_orders():
    from safetyrepro.analysis.paired.compare import _pair_flips

    assert _pair_flips((("a",), ("b",), ("c",)), (("c",), ("b",), ("a",))) == 3
    assert _pair_flips((("a",), ("b",), ("c",)), (("a", "b"), ("c",))) == 0  # a tie is no reversal
    assert _pair_flips((("a", "b"), ("c",)), (("c",), ("a", "b"))) == 2
