"""`safetyrepro verdict A B`: two runs' paired verdict, with the analysis's own p-values."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from lm_eval_fixtures import write_run

from safetyrepro.cli import main

# 6 items each; per configuration (T1 0/3-shot, with and without the chat template) A's and B's answers
A = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]]
B = [[0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 0]]
HF = dict(
    model_kind="hf",
    model="/models/other",
    model_args={"pretrained": "/models/other", "dtype": "bfloat16"},
    weights=None,
)


def _runs(root):
    i = 0
    for answers, kw, name in ((A, {}, "smol"), (B, HF, "other")):
        for k, (shots, chat) in enumerate([(0, True), (3, True), (0, False), (3, False)]):
            write_run(
                root, scores=[float(x) for x in answers[k]], shots=shots, chat=chat, i=i, folder=f"{name}/{k}", **kw
            )
            i += 1
    return root / "smol", root / "other"


def test_two_lm_eval_folders_get_the_p_values_of_the_analysis(tmp_path, capsys):
    a, b = _runs(tmp_path / "runs")
    assert main(["verdict", str(a), str(b), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    mine = pd.DataFrame(v["configurations"]).set_index("config_id")
    assert main(["import", "lm-eval", str(tmp_path / "runs"), "--out", str(tmp_path / "imp")]) == 0
    assert (
        main(
            [
                "analyze",
                str(tmp_path / "imp" / "grid.csv"),
                "--out",
                str(tmp_path / "an"),
                "--no-figures",
                "--bootstrap",
                "20",
            ]
        )
        == 0
    )
    capsys.readouterr()
    tests = pd.read_csv(tmp_path / "an" / "item_tests.csv")
    tests = tests[tests["slice"] == "full"].set_index("config_id")
    assert set(mine.index) == set(tests.index) and len(mine) == 4
    flip = 1 if v["model_a"] == tests["model_a"].iloc[0] else -1
    for cid in mine.index:
        assert mine.at[cid, "p_value"] == pytest.approx(tests.at[cid, "p_value"], abs=1e-12)
        assert mine.at[cid, "p_holm"] == pytest.approx(tests.at[cid, "p_holm"], abs=1e-12)
        assert mine.at[cid, "diff"] == pytest.approx(flip * tests.at[cid, "diff_items"], abs=1e-12)
    # by hand: T1 0-shot, A 6 of 6 and B 0 of 6: 6 discordant items all to A, p = 2 / 2**6
    first = mine[mine["diff"] == 1.0]
    assert len(first) == 1 and first["p_value"].iloc[0] == pytest.approx(2 / 64)
    assert first["n_differing"].iloc[0] == 6 and first["family_size"].iloc[0] == 4
    sentence = next(iter(v["sentences"].values()))
    assert "exact paired test, Holm over 4 configurations" in sentence


def test_a_grid_with_items_and_model_labels(tmp_path, capsys):
    a, b = _runs(tmp_path / "runs")
    main(["import", "lm-eval", str(tmp_path / "runs"), "--out", str(tmp_path / "imp")])
    grid = pd.read_csv(tmp_path / "imp" / "grid.csv")
    models = sorted(grid["model"].unique())
    capsys.readouterr()
    assert main(["verdict", models[1], models[0], "--grid", str(tmp_path / "imp" / "grid.csv")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("xstest: ") and "configurations" in out


def test_verdict_refusals_are_one_line(tmp_path, capsys):
    a, _ = _runs(tmp_path / "runs")
    assert main(["verdict", str(a), str(a)]) == 2  # one run twice is refused, with or without --labels
    assert "same run" in capsys.readouterr().err
    assert main(["verdict", str(a), str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
